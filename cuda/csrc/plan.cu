// plan.cu: the executor of the block plan (qr_model_plan). The decoder is
// the list of steps that Go builds from the model's family (model.Plan):
// this file only runs them. Each op has a prefill form over T rows (cuBLAS
// GEMMs, the chunked core, flash attention) and a decode form over one row
// (GEMVs, the recurrent update, split-key attention) that takes no host
// synchronisation, so a decode walk can be captured into a CUDA graph.
// While a trace is on, the walk copies each op's outputs under the stage
// names its step carries (rec_step, model_trace.cu: the same in both
// precisions); a name the plan leaves empty is not recorded. The fp32
// model's forms of the same ops are plan_f32.cu's.
#include <math.h>
#include <string.h>

#include "model.cuh"

// The profiler stage (qr_model_stage_name) each op's time is charged to.
static const int op_stage[QR_OP_COUNT] = {
    ST_NORM,        ST_NORM,     ST_NORM,     ST_GDN_PROJ,   ST_GDN_CONV,    ST_GDN_CONV,   ST_GDN_CORE,
    ST_GDN_NORM,    ST_GDN_PROJ, ST_ATT_PROJ, ST_ATT_PREP,   ST_ATT_CORE,    ST_ATT_PROJ,   ST_MLP_GU,
    ST_MLP_DOWN,    ST_MOE_ROUTE, ST_MOE_EXPERTS, ST_MOE_SHARED, ST_MOE_SHARED, ST_LM_HEAD};

static bool gdn_op(int op) { return op >= QR_OP_GDN_IN_PROJ && op <= QR_OP_GDN_OUT; }
static bool att_op(int op) { return op >= QR_OP_ATT_QKV && op <= QR_OP_ATT_OUT; }
static bool mlp_op(int op) { return op == QR_OP_MLP_GATE_UP || op == QR_OP_MLP_DOWN; }
static bool moe_op(int op) { return op >= QR_OP_MOE_ROUTE && op <= QR_OP_MOE_COMBINE; }
static bool model_op(int op) { return op == QR_OP_EMBED || op == QR_OP_LM_HEAD; }

bool plan_mixer_op(int op) { return gdn_op(op) || att_op(op); }
// The ops whose decode form is one GEMV, its launch shape in the step's arg.
static bool plan_gemv_op(int op) {
	return op == QR_OP_GDN_IN_PROJ || op == QR_OP_GDN_OUT || op == QR_OP_ATT_QKV || op == QR_OP_ATT_OUT ||
	       op == QR_OP_MLP_GATE_UP || op == QR_OP_MLP_DOWN || op == QR_OP_MOE_ROUTE || op == QR_OP_LM_HEAD;
}

int DevModel::set_plan(const qr_step *steps, int n, const char *names, size_t names_len) {
	QR_ARG(n >= 2 && n <= 32 * (d.nlayers + 1), "model plan: %d steps for %d layers", n, d.nlayers);
	QR_ARG(steps[0].op == QR_OP_EMBED && steps[n - 1].op == QR_OP_LM_HEAD,
	       "model plan: want the embedding first and the head last, got ops %d and %d", steps[0].op,
	       steps[n - 1].op);
	std::vector<PlanStep> p(n);
	for (int i = 0; i < n; i++) {
		const qr_step &s = steps[i];
		QR_ARG(s.op >= 0 && s.op < QR_OP_COUNT, "model plan: step %d: unknown op %d", i, s.op);
		QR_ARG(s.layer >= -1 && s.layer < d.nlayers, "model plan: step %d: layer %d outside [-1, %d)", i, s.layer,
		       d.nlayers);
		if (model_op(s.op))
			QR_ARG(s.layer == -1, "model plan: step %d: op %d belongs to the model, not layer %d", i, s.op, s.layer);
		if (s.op == QR_OP_NORM)
			QR_ARG(s.layer == -1 ? s.arg == QR_W_FINAL_NORM : s.arg == QR_W_INPUT_NORM || s.arg == QR_W_POST_NORM,
			       "model plan: step %d: norm weight %d on layer %d", i, s.arg, s.layer);
		if (plan_gemv_op(s.op))
			QR_ARG(s.arg >= 0 && s.arg < QR_GEMV_SHAPES, "model plan: step %d: GEMV launch shape %d outside [0, %d)",
			       i, s.arg, QR_GEMV_SHAPES);
		if (s.op == QR_OP_MOE_EXPERTS)
			QR_ARG(s.arg >= 0 && s.arg < QR_MOE_DECODE_SHAPES,
			       "model plan: step %d: expert GEMV launch shape %d outside [0, %d)", i, s.arg,
			       QR_MOE_DECODE_SHAPES);
		if (gdn_op(s.op) || att_op(s.op) || mlp_op(s.op) || moe_op(s.op)) {
			QR_ARG(s.layer >= 0, "model plan: step %d: op %d needs a layer", i, s.op);
			const Block &b = *blocks[s.layer];
			QR_ARG(!(gdn_op(s.op) && !b.gdn) && !(att_op(s.op) && !b.attn) && !(mlp_op(s.op) && b.moe) &&
			           !(moe_op(s.op) && !b.moe),
			       "model plan: step %d: op %d on layer %d of kind %d%s", i, s.op, s.layer, b.kind,
			       b.moe ? " (MoE)" : "");
		}
		p[i].op = s.op, p[i].layer = s.layer, p[i].arg = s.arg;
		for (int r = 0; r < QR_STEP_RECORDS; r++) {
			const int32_t o = s.rec[r];
			if (o < 0)
				continue;
			QR_ARG(names && (size_t)o < names_len && memchr(names + o, 0, names_len - o),
			       "model plan: step %d: record %d at %d outside the %zu bytes of names", i, r, o, names_len);
			p[i].rec[r] = names + o;
		}
	}
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	drop_graphs(); // they replay the old plan
	plan.swap(p);
	return QR_OK;
}

int DevModel::walk(int T, int decode, int greedy, int rows, int only, bool mixer_only, cudaStream_t st) {
	QR_ARG(!plan.empty(), "model: no plan (qr_model_plan)");
	for (const PlanStep &s : plan) {
		if ((only >= -1 && s.layer != only) || (mixer_only && !plan_mixer_op(s.op)))
			continue;
		QR_TRY(mark(op_stage[s.op], st));
		QR_TRY(f32 ? step_f32(s, T, rows, st) : decode ? step_decode(s, greedy, st) : step_prefill(s, T, rows, st));
		if (!decode) // a decode step is never traced
			QR_TRY(rec_step(s, T, rows));
	}
	return QR_OK;
}

// ---- prefill forms (T rows at position pos) ----

int DevModel::step_prefill(const PlanStep &s, int T, int rows, cudaStream_t st) {
	const int H = d.hidden, I = d.inter, qd = d.nh * d.hd, hv = d.nv * d.dv;
	float *X = x.as<float>();
	bf16_t *XN = xn.as<bf16_t>();
	Block *b = s.layer >= 0 ? blocks[s.layer].get() : nullptr;
	GdnLayer *L = b ? b->gdn.get() : nullptr;
	AttnW *A = b ? b->attn.get() : nullptr;
	bf16_t *QKV = big.as<bf16_t>();
	switch (s.op) {
	case QR_OP_EMBED:
		QR_TRY(set_dev_int(d_pos.as<int>(), pos, st));
		return launch_embed(X, embed.as<bf16_t>(), ids.as<int32_t>(), T, H, st);
	case QR_OP_NORM: {
		const bool head = s.layer < 0;
		const int n = head ? rows : T;
		const float *w = (head ? final_norm : s.arg == QR_W_INPUT_NORM ? b->in_norm : b->post_norm).as<float>();
		return launch_rmsnorm(XN, 1, X + (size_t)(T - n) * H, 0, n, H, w, d.eps, 1, st);
	}
	case QR_OP_RECORD: return QR_OK;
	case QR_OP_GDN_IN_PROJ: return L->s_inproj(XN, T, st);
	case QR_OP_GDN_CONV: return L->s_conv(T, st);
	case QR_OP_GDN_PREP: return L->s_prep(T, st);
	case QR_OP_GDN_CORE: return L->s_core(T, st);
	case QR_OP_GDN_NORM: return L->s_norm(T, st);
	case QR_OP_GDN_OUT: return gemm_acc_rec(s, 0, X, gacts.y.as<bf16_t>(), L->w_out.as<bf16_t>(), T, H, hv, st);
	case QR_OP_ATT_QKV:
		return qr_gemm_bf16(QKV, 0, NQKV, XN, H, A->w_qkv.as<bf16_t>(), H, T, NQKV, H, st);
	case QR_OP_ATT_PREP:
		return launch_attn_prep(qn.as<bf16_t>(), A->kc.as<bf16_t>(), A->vc.as<bf16_t>(), QKV, NQKV, T, d.nh, d.nkv,
		                        d.hd, d.rot, d.theta, A->qnorm.as<float>(), A->knorm.as<float>(), d.eps,
		                        d_pos.as<int>(), st);
	case QR_OP_ATT_CORE:
		QR_TRY(rec_attn_core(s, 0, *A, qn.as<bf16_t>(), T, st));
		return launch_flash_attn(ya.as<bf16_t>(), qn.as<bf16_t>(), A->kc.as<bf16_t>(), A->vc.as<bf16_t>(), QKV + d.hd,
		                         NQKV, T, pos, d.nh, d.nkv, d.hd, 1.0f / sqrtf((float)d.hd), st);
	case QR_OP_ATT_OUT: return gemm_acc_rec(s, 0, X, ya.as<bf16_t>(), A->w_o.as<bf16_t>(), T, H, qd, st);
	case QR_OP_MLP_GATE_UP:
		QR_TRY(qr_gemm_bf16(big.p, 0, 2 * I, XN, H, b->w_gu.as<bf16_t>(), H, T, 2 * I, H, st));
		QR_TRY(mark(ST_MLP_ACT, st));
		return launch_swiglu_rows(act.as<bf16_t>(), big.as<bf16_t>(), T, I, st);
	case QR_OP_MLP_DOWN: return gemm_acc_rec(s, 0, X, act.as<bf16_t>(), b->w_down.as<bf16_t>(), T, H, I, st);
	case QR_OP_MOE_ROUTE:
	case QR_OP_MOE_EXPERTS:
	case QR_OP_MOE_SHARED:
	case QR_OP_MOE_COMBINE: return moe_step(s, T, 0, st);
	case QR_OP_LM_HEAD: return qr_gemm_bf16(logits.p, 1, d.vocab, XN, H, lm_head.as<bf16_t>(), H, rows, d.vocab, H, st);
	}
	QR_ARG(false, "model plan: op %d has no prefill form", s.op);
	return QR_EARG;
}

// ---- decode forms (one row at position *d_pos, graph-capturable) ----

int DevModel::step_decode(const PlanStep &s, int greedy, cudaStream_t st) {
	const int H = d.hidden, I = d.inter, qd = d.nh * d.hd, hv = d.nv * d.dv;
	float *X = x.as<float>();
	bf16_t *XN = xn.as<bf16_t>();
	const int *P = d_pos.as<int>();
	Block *b = s.layer >= 0 ? blocks[s.layer].get() : nullptr;
	GdnLayer *L = b ? b->gdn.get() : nullptr;
	AttnW *A = b ? b->attn.get() : nullptr;
	bf16_t *QKV = big.as<bf16_t>();
	bf16_t *proj = gacts.proj.as<bf16_t>();
	switch (s.op) {
	case QR_OP_EMBED: return launch_embed(X, embed.as<bf16_t>(), ids.as<int32_t>(), 1, H, st);
	case QR_OP_NORM: {
		const float *w =
		    (s.layer < 0 ? final_norm : s.arg == QR_W_INPUT_NORM ? b->in_norm : b->post_norm).as<float>();
		return launch_rmsnorm(XN, 1, X, 0, 1, H, w, d.eps, 1, st);
	}
	case QR_OP_RECORD: return QR_OK; // a decode step is never traced
	case QR_OP_GDN_IN_PROJ: return launch_gemv(GEMV_Y_BF16, proj, XN, L->w_in.as<bf16_t>(), L->NIN, H, st, s.arg);
	case QR_OP_GDN_CONV:
		return launch_conv_decode(gacts.u.as<bf16_t>(), L->conv_state[0].as<bf16_t>(), proj, L->conv_w.as<float>(),
		                          L->C, d.kconv, st);
	case QR_OP_GDN_PREP: return QR_OK; // fused into the recurrent step
	case QR_OP_GDN_CORE:
		return launch_gdn_decode128(gacts.o.as<bf16_t>(), gacts.u.as<bf16_t>(), proj + L->C + hv,
		                            L->rec_state.as<float>(), d.nk, d.nv, L->a_log.as<float>(),
		                            L->dt_bias.as<float>(), st);
	case QR_OP_GDN_NORM: return L->s_norm(1, st);
	case QR_OP_GDN_OUT: return launch_gemv(GEMV_Y_ADD_F32, X, gacts.y.as<bf16_t>(), L->w_out.as<bf16_t>(), H, hv, st, s.arg);
	case QR_OP_ATT_QKV: return launch_gemv(GEMV_Y_BF16, QKV, XN, A->w_qkv.as<bf16_t>(), NQKV, H, st, s.arg);
	case QR_OP_ATT_PREP:
		return launch_attn_prep(qn.as<bf16_t>(), A->kc.as<bf16_t>(), A->vc.as<bf16_t>(), QKV, NQKV, 1, d.nh, d.nkv,
		                        d.hd, d.rot, d.theta, A->qnorm.as<float>(), A->knorm.as<float>(), d.eps, P, st);
	case QR_OP_ATT_CORE:
		return launch_attn_decode(ya.as<bf16_t>(), part.as<float>(), qn.as<bf16_t>(), A->kc.as<bf16_t>(),
		                          A->vc.as<bf16_t>(), QKV, d.nh, d.nkv, d.hd, d.max_tokens, 1.0f / sqrtf((float)d.hd),
		                          P, st);
	case QR_OP_ATT_OUT: return launch_gemv(GEMV_Y_ADD_F32, X, ya.as<bf16_t>(), A->w_o.as<bf16_t>(), H, qd, st, s.arg);
	case QR_OP_MLP_GATE_UP: // SwiGLU fused into the GEMV
		return launch_gemv(GEMV_Y_SWIGLU, act.p, XN, b->w_gu.as<bf16_t>(), 2 * I, H, st, s.arg);
	case QR_OP_MLP_DOWN: return launch_gemv(GEMV_Y_ADD_F32, X, act.as<bf16_t>(), b->w_down.as<bf16_t>(), H, I, st, s.arg);
	case QR_OP_MOE_ROUTE:
	case QR_OP_MOE_EXPERTS:
	case QR_OP_MOE_SHARED:
	case QR_OP_MOE_COMBINE: return moe_step(s, 1, 1, st);
	case QR_OP_LM_HEAD:
		QR_TRY(launch_gemv(GEMV_Y_F32, logits.p, XN, lm_head.as<bf16_t>(), d.vocab, H, st, s.arg));
		return greedy ? launch_argmax_next(st) : QR_OK;
	}
	QR_ARG(false, "model plan: op %d has no decode form", s.op);
	return QR_EARG;
}

extern "C" int qr_model_plan(void *model, const qr_step *steps, int n, const char *names, size_t names_len) {
	QR_TRY(qr_require());
	QR_ARG(model && steps && n > 0, "qr_model_plan: bad arguments");
	return ((DevModel *)model)->set_plan(steps, n, names, names_len);
}
