// batch.cu: batch rows on the device-resident model. Every state and cache
// holds `rows` rows (row r at r times one row's size), all rows at one
// position, since a runner feeds every row the same number of tokens. A
// prefill runs the one-row walk on each row in turn (RowView moves the state
// pointers); a decode step runs all rows at once: every token-wise op as a
// GEMM over the rows (cuBLAS, the MoE's grouped GEMMs) and the mixers'
// decode kernels over rows × heads, captured into one CUDA graph.
#include <math.h>
#include <string.h>

#include "model.cuh"

// Batch rows a model takes: the kernels' grid limit is far above it; this
// bounds what an untrusted count can ask to allocate before cudaMalloc does.
#define QR_MAX_ROWS 1024

void DevModel::shift_rows(long by) {
	if (by == 0)
		return;
	auto mv = [by](DevBuf &b, size_t row) { b.p = (char *)b.p + by * (long)row; };
	for (auto &bp : blocks) {
		if (AttnW *A = bp->attn.get()) {
			mv(A->kc, kv_row_bytes());
			mv(A->vc, kv_row_bytes());
		}
		if (GdnLayer *L = bp->gdn.get()) {
			mv(L->conv_state[0], conv_row_bytes(*L));
			mv(L->conv_state[1], conv_row_bytes(*L));
			mv(L->rec_state, rec_row_bytes());
		}
	}
}

int DevModel::set_rows(int n) {
	QR_ARG(n >= 1 && n <= QR_MAX_ROWS, "model rows: %d (1 to %d)", n, QR_MAX_ROWS);
	if (n == rows)
		return reset();
	cudaStream_t st = g_qr.stream;
	QR_CK(cudaStreamSynchronize(st));
	drop_graphs();
	// Allocate every new buffer first, so a failure leaves the model as it was.
	std::vector<std::unique_ptr<DevBuf>> fresh;
	size_t bytes = 0;
	auto grab = [&](size_t sz) -> int {
		fresh.emplace_back(new DevBuf);
		QR_TRY(fresh.back()->alloc(sz));
		bytes += sz;
		return QR_OK;
	};
	for (auto &bp : blocks) {
		if (bp->attn) {
			QR_TRY(grab(n * kv_row_bytes()));
			QR_TRY(grab(n * kv_row_bytes()));
		}
		if (GdnLayer *L = bp->gdn.get()) {
			QR_TRY(grab(n * conv_row_bytes(*L)));
			QR_TRY(grab(n * conv_row_bytes(*L)));
			QR_TRY(grab(n * rec_row_bytes()));
		}
	}
	const bool decode_part = part.p != nullptr;
	if (decode_part)
		QR_TRY(grab(n * attn_decode_part_bytes(d.nh, d.max_tokens)));
	size_t i = 0;
	auto take = [&](DevBuf &b) {
		std::swap(b.p, fresh[i]->p);
		std::swap(b.bytes, fresh[i]->bytes);
		i++;
	};
	size_t old = 0;
	for (auto &bp : blocks) {
		if (AttnW *A = bp->attn.get()) {
			old += A->kc.bytes + A->vc.bytes;
			take(A->kc);
			take(A->vc);
		}
		if (GdnLayer *L = bp->gdn.get()) {
			old += L->conv_state[0].bytes + L->conv_state[1].bytes + L->rec_state.bytes;
			take(L->conv_state[0]);
			take(L->conv_state[1]);
			take(L->rec_state);
		}
	}
	if (decode_part) {
		old += part.bytes;
		take(part);
	}
	s_bytes = s_bytes - old + bytes;
	rows = n;
	return reset(); // fresh (the old buffers free as `fresh` goes)
}

int DevModel::step_batch(const PlanStep &s, cudaStream_t st) {
	const int B = rows, H = d.hidden, I = d.inter, qd = d.nh * d.hd, hv = d.nv * d.dv;
	float *X = x.as<float>();
	bf16_t *XN = xn.as<bf16_t>();
	const int *P = d_pos.as<int>();
	Block *b = s.layer >= 0 ? blocks[s.layer].get() : nullptr;
	GdnLayer *L = b ? b->gdn.get() : nullptr;
	AttnW *A = b ? b->attn.get() : nullptr;
	bf16_t *QKV = big.as<bf16_t>();
	bf16_t *proj = gacts.proj.as<bf16_t>();
	const size_t kvs = kv_row_bytes() / 2; // a row of the cache, in elements
	switch (s.op) {
	case QR_OP_EMBED: return launch_embed(X, embed.as<bf16_t>(), ids.as<int32_t>(), B, H, st);
	case QR_OP_NORM: {
		const float *w =
		    (s.layer < 0 ? final_norm : s.arg == QR_W_INPUT_NORM ? b->in_norm : b->post_norm).as<float>();
		return launch_rmsnorm(XN, 1, X, 0, B, H, w, d.eps, 1, st);
	}
	case QR_OP_RECORD: return QR_OK;
	case QR_OP_GDN_IN_PROJ: return L->s_inproj(XN, B, st);
	case QR_OP_GDN_CONV:
		return launch_conv_decode_rows(gacts.u.as<bf16_t>(), L->C, L->conv_state[0].as<bf16_t>(), proj, L->NIN,
		                               L->conv_w.as<float>(), L->C, d.kconv, B, st);
	case QR_OP_GDN_PREP: return QR_OK; // fused into the recurrent step
	case QR_OP_GDN_CORE:
		return launch_gdn_decode128_rows(gacts.o.as<bf16_t>(), gacts.u.as<bf16_t>(), L->C, proj + L->C + hv, L->NIN,
		                                 L->rec_state.as<float>(), d.nk, d.nv, L->a_log.as<float>(),
		                                 L->dt_bias.as<float>(), B, st);
	case QR_OP_GDN_NORM: return L->s_norm(B, st);
	case QR_OP_GDN_OUT: return model_gemm_acc(X, gacts.y.as<bf16_t>(), L->w_out.as<bf16_t>(), B, H, hv, st);
	case QR_OP_ATT_QKV: return qr_gemm_bf16(QKV, 0, NQKV, XN, H, A->w_qkv.as<bf16_t>(), H, B, NQKV, H, st);
	case QR_OP_ATT_PREP:
		return launch_attn_prep(qn.as<bf16_t>(), A->kc.as<bf16_t>(), A->vc.as<bf16_t>(), QKV, NQKV, B, d.nh, d.nkv,
		                        d.hd, d.rot, d.theta, A->qnorm.as<float>(), A->knorm.as<float>(), d.eps, P, st, kvs);
	case QR_OP_ATT_CORE:
		return launch_attn_decode(ya.as<bf16_t>(), part.as<float>(), qn.as<bf16_t>(), A->kc.as<bf16_t>(),
		                          A->vc.as<bf16_t>(), QKV, d.nh, d.nkv, d.hd, d.max_tokens, 1.0f / sqrtf((float)d.hd),
		                          P, st, B, kvs, NQKV);
	case QR_OP_ATT_OUT: return model_gemm_acc(X, ya.as<bf16_t>(), A->w_o.as<bf16_t>(), B, H, qd, st);
	case QR_OP_MLP_GATE_UP:
		QR_TRY(qr_gemm_bf16(big.p, 0, 2 * I, XN, H, b->w_gu.as<bf16_t>(), H, B, 2 * I, H, st));
		return launch_swiglu_rows(act.as<bf16_t>(), big.as<bf16_t>(), B, I, st);
	case QR_OP_MLP_DOWN: return model_gemm_acc(X, act.as<bf16_t>(), b->w_down.as<bf16_t>(), B, H, I, st);
	case QR_OP_MOE_ROUTE:
	case QR_OP_MOE_EXPERTS:
	case QR_OP_MOE_SHARED:
	case QR_OP_MOE_COMBINE: // gathered GEMVs per (row, expert) slot up to MOE_GATHER_ROWS rows, then grouped GEMMs
		return moe_step(s, B, B <= MOE_GATHER_ROWS, st);
	case QR_OP_LM_HEAD: return qr_gemm_bf16(logits.p, 1, d.vocab, XN, H, lm_head.as<bf16_t>(), H, B, d.vocab, H, st);
	}
	QR_ARG(false, "model plan: op %d has no batched decode form", s.op);
	return QR_EARG;
}

int DevModel::walk_batch(cudaStream_t st) {
	QR_ARG(!plan.empty(), "model: no plan (qr_model_plan)");
	for (const PlanStep &s : plan)
		QR_TRY(step_batch(s, st));
	return QR_OK;
}

// One decode step of every row: ids_h[r] at the common position, as one
// graph replay (captured on first use; logits poisoned with NaN first).
int DevModel::decode_rows(const int32_t *ids_h, float *out) {
	cudaStream_t st = g_qr.stream;
	const size_t V = d.vocab, nl = (size_t)rows * V;
	QR_TRY(ensure_acts(rows));
	QR_TRY(ensure_logits(rows));
	QR_TRY(h_step.alloc((size_t)(rows + 1) * sizeof(int)));
	QR_TRY(h_logits.alloc(nl * 4));
	if (!batch_graph) {
		QR_CK(cudaStreamSynchronize(st));
		QR_TRY(capture_graph(
		    [&]() -> int {
			    QR_TRY(qr_fill_nan(logits.p, nl * 4, st)); // NaN where a kernel failed to write
			    return walk_batch(st);
		    },
		    &batch_graph));
	}
	int *hs = h_step.as<int>();
	hs[0] = pos;
	memcpy(hs + 1, ids_h, (size_t)rows * 4);
	QR_CK(cudaMemcpyAsync(d_pos.p, hs, 4, cudaMemcpyHostToDevice, st));
	QR_CK(cudaMemcpyAsync(ids.p, hs + 1, (size_t)rows * 4, cudaMemcpyHostToDevice, st));
	QR_TRY(fwd_mark(0, st));
	QR_CK(cudaGraphLaunch(batch_graph, st));
	QR_TRY(fwd_mark(1, st));
	if (out)
		QR_CK(cudaMemcpyAsync(h_logits.p, logits.p, nl * 4, cudaMemcpyDeviceToHost, st));
	QR_CK(cudaStreamSynchronize(st));
	QR_TRY(fwd_elapsed());
	pos++;
	for (auto &bp : blocks)
		bp->len = pos;
	if (out)
		memcpy(out, h_logits.p, nl * 4);
	return QR_OK;
}

int DevModel::forward_rows(const int32_t *ids_h, int t, int last_only, float *out) {
	if (t == 1 && !f32)
		return decode_rows(ids_h, out);
	cudaStream_t st = g_qr.stream;
	const int want = last_only || !out ? 1 : t;
	const size_t V = d.vocab;
	QR_TRY(ensure_acts(t));
	QR_TRY(ensure_logits(want));
	const int p0 = pos;
	float total = 0;
	for (int r = 0; r < rows; r++) {
		pos = p0; // every row starts where the others did
		RowView view(*this, r);
		QR_CK(cudaMemcpyAsync(ids.p, ids_h + (size_t)r * t, (size_t)t * 4, cudaMemcpyHostToDevice, st));
		QR_TRY(fwd_mark(0, st));
		if (out)
			QR_TRY(qr_fill_nan(logits.p, (size_t)want * V * 4, st));
		QR_TRY(prefill(t, last_only || !out));
		QR_TRY(fwd_mark(1, st));
		if (out)
			QR_CK(cudaMemcpyAsync(out + (size_t)r * want * V, logits.p, (size_t)want * V * 4, cudaMemcpyDeviceToHost,
			                      st));
		QR_CK(cudaStreamSynchronize(st));
		QR_TRY(fwd_elapsed());
		total += fwd_ms;
	}
	fwd_ms = total;
	return QR_OK;
}

extern "C" int qr_model_rows(void *model, int rows) {
	QR_TRY(qr_require());
	QR_ARG(model, "qr_model_rows: no model");
	DevModel &m = *(DevModel *)model;
	QR_ARG(!m.trace || rows == 1, "qr_model_rows: a traced model keeps one row");
	return m.set_rows(rows);
}

extern "C" int qr_model_forward_rows(void *model, const int32_t *ids, int rows, int t, int last_only, float *logits) {
	QR_TRY(qr_require());
	QR_ARG(model && ids && t > 0, "qr_model_forward_rows: bad arguments");
	DevModel &m = *(DevModel *)model;
	QR_ARG(rows == m.rows, "qr_model_forward_rows: %d rows of ids for a model of %d rows", rows, m.rows);
	QR_ARG(!m.trace, "qr_model_forward_rows: a traced model runs qr_model_forward (one row)");
	for (size_t i = 0; i < (size_t)rows * t; i++)
		QR_ARG(ids[i] >= 0 && ids[i] < m.d.vocab, "qr_model_forward_rows: id %d of row %zu at %zu outside [0, %d)",
		       ids[i], i / t, i % t, m.d.vocab);
	QR_ARG(m.pos + t <= m.d.max_tokens, "qr_model_forward_rows: position %d + %d tokens > max_tokens %d", m.pos, t,
	       m.d.max_tokens);
	return m.forward_rows(ids, t, last_only, logits);
}
