// model_trace.cu: stage recording and single-block runs (teacher forcing)
// of the device model, for `qwenref trace` and the golden tests: while a trace is on, prefill copies every stage the
// CPU recorder names to the host as fp32, under the names the plan's steps
// carry (model.Plan) and with the CPU's shapes. Where the fast path fuses two
// stages, tracing splits them: a projection is written to a scratch buffer
// and added to the residual stream after its copy, and the attention core
// runs a second time with an output gate of σ = 1. Nothing here runs
// unless qr_model_trace turned it on.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model.cuh"

__global__ void k_add_f32(float *__restrict__ y, const float *__restrict__ x, size_t n) {
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		y[i] += x[i];
}

int launch_add_f32(float *y, const float *x, size_t n, cudaStream_t st) {
	k_add_f32<<<cdiv(n, 256) < 4096 ? cdiv(n, 256) : 4096, 256, 0, st>>>(y, x, n);
	QR_CKL("add_f32");
	return QR_OK;
}

int DevModel::trace_grow(int T) {
	if (!trace || T <= trace->cap)
		return QR_OK;
	Trace &tr = *trace;
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	for (DevBuf *b : {&tr.tmp, &tr.tmp2, &tr.ones_gate})
		if (b->p) {
			QR_CK(cudaFree(b->p));
			b->p = nullptr;
		}
	const size_t gate = (size_t)(T + 1) * d.nh * 2 * d.hd * 2; // a row spare: the kernel reads at offset hd
	QR_TRY(tr.tmp.alloc((size_t)T * d.hidden * 4));
	QR_TRY(tr.tmp2.alloc((size_t)T * d.hidden * 4));
	QR_TRY(tr.ones_gate.alloc(gate));
	QR_CK(cudaMemsetAsync(tr.ones_gate.p, 0x46, gate, g_qr.stream)); // bf16 0x4646 = 12672: σ(12672) = 1
	tr.cap = T;
	return QR_OK;
}

int DevModel::trace_scratch(int T, float **a, float **b) {
	*a = *b = nullptr;
	if (!trace)
		return QR_OK;
	QR_TRY(trace_grow(T));
	*a = trace->tmp.as<float>();
	*b = trace->tmp2.as<float>();
	return QR_OK;
}

int DevModel::rec_step(const PlanStep &s, int T, int rows) {
	if (!trace)
		return QR_OK;
	const int bf = !f32, H = d.hidden, qd = d.nh * d.hd, hv = d.nv * d.dv, qk = d.nk * d.dk, kvd = d.nkv * d.hd;
	const int C = 2 * qk + hv, NIN = C + hv + 2 * d.nv;
	auto at = [&](const DevBuf &b, size_t off) { return (const void *)((const char *)b.p + off * es()); };
	switch (s.op) {
	case QR_OP_EMBED:
	case QR_OP_RECORD: return rec(s, 0, x.p, 0, H, T, H, T, H, 0);
	case QR_OP_NORM: {
		const int n = s.layer < 0 ? rows : T;
		return rec(s, 0, xn.p, bf, H, n, H, n, H, 0);
	}
	case QR_OP_GDN_IN_PROJ: // [qkv | z | b | a]
		QR_TRY(rec(s, 0, at(gacts.proj, 0), bf, NIN, T, C, T, C, 0));
		QR_TRY(rec(s, 1, at(gacts.proj, C), bf, NIN, T, hv, T, hv, 0));
		QR_TRY(rec(s, 2, at(gacts.proj, C + hv), bf, NIN, T, d.nv, T, d.nv, 0));
		return rec(s, 3, at(gacts.proj, C + hv + d.nv), bf, NIN, T, d.nv, T, d.nv, 0);
	case QR_OP_GDN_CONV: return rec(s, 0, gacts.u.p, bf, C, T, C, T, C, 0);
	case QR_OP_GDN_PREP:
		QR_TRY(rec(s, 0, gacts.g.p, 0, d.nv, T, d.nv, T, d.nv, 0));
		QR_TRY(rec(s, 1, gacts.beta.p, 0, d.nv, T, d.nv, T, d.nv, 0));
		// The device keeps q̂·d_k^-½; the CPU records q̂ before the scale.
		QR_TRY(rec(s, 2, gacts.qn.p, bf, qk, T, qk, T, d.nk, d.dk, sqrtf((float)d.dk)));
		QR_TRY(rec(s, 3, gacts.kn.p, bf, qk, T, qk, T, d.nk, d.dk));
		return rec(s, 4, at(gacts.u, 2 * qk), bf, C, T, hv, T, d.nv, d.dv);
	case QR_OP_GDN_CORE: {
		const GdnLayer &L = *blocks[s.layer]->gdn;
		QR_TRY(rec(s, 0, gacts.o.p, bf, hv, T, hv, T, d.nv, d.dv));
		return rec(s, 1, L.rec_state.p, 0, (size_t)d.dk * d.dv, d.nv, d.dk * d.dv, d.nv, d.dk, d.dv);
	}
	case QR_OP_GDN_NORM: return rec(s, 0, gacts.y.p, bf, hv, T, hv, T, hv, 0);
	case QR_OP_ATT_QKV: // [q | gate per head, k, v]
		QR_TRY(rec(s, 0, at(big, 0), bf, NQKV, T, 2 * qd, T, 2 * qd, 0));
		QR_TRY(rec(s, 1, at(big, 2 * qd), bf, NQKV, T, kvd, T, kvd, 0));
		return rec(s, 2, at(big, 2 * qd + kvd), bf, NQKV, T, kvd, T, kvd, 0);
	case QR_OP_ATT_PREP: {
		const AttnW &A = *blocks[s.layer]->attn;
		QR_TRY(rec(s, 0, qn.p, bf, qd, T, qd, T, d.nh, d.hd));
		return rec(s, 1, at(A.kc, (size_t)pos * kvd), bf, kvd, T, kvd, T, d.nkv, d.hd);
	}
	case QR_OP_ATT_CORE: return rec(s, 1, ya.p, bf, qd, T, qd, T, qd, 0); // slot 0 (before the gate) in the op
	case QR_OP_MOE_ROUTE: {
		const int E = d.experts, k = d.topk, RR = moe_router_rows(E);
		QR_TRY(rec(s, 0, macts.logits.p, 0, RR, T, E, T, E, 0));
		QR_TRY(rec(s, 1, macts.w.p, 0, k, T, k, T, k, 0));
		return rec(s, 2, macts.idf.p, 0, k, T, k, T, k, 0);
	}
	case QR_OP_MOE_COMBINE: {
		const int E = d.experts, RR = moe_router_rows(E);
		QR_TRY(rec(s, 0, trace->tmp.p, 0, H, T, H, T, H, 0));
		QR_TRY(rec(s, 1, macts.shared_out.p, 0, H, T, H, T, H, 0));
		QR_TRY(rec(s, 2, macts.logits.as<float>() + E, 0, RR, T, 1, T, 1, 0));
		return rec(s, 3, trace->tmp2.p, 0, H, T, H, T, H, 0);
	}
	default: return QR_OK; // the GEMM-accumulate ops record inside (gemm_acc_rec)
	}
}

bool DevModel::tracing(const PlanStep &s, int slot) const {
	if (!trace || s.rec[slot].empty())
		return false;
	if (trace->only.empty())
		return true;
	for (const std::string &n : trace->only)
		if (n == s.rec[slot])
			return true;
	return false;
}

int DevModel::rec(const PlanStep &s, int slot, const void *src, int bf, size_t ld, int rows, int cols, int d0,
                  int d1, int d2, float mul) {
	if (!tracing(s, slot))
		return QR_OK;
	TraceEntry e;
	e.name = s.rec[slot];
	e.dims[0] = d0, e.dims[1] = d1, e.dims[2] = d2;
	const size_t es = bf ? 2 : 4, n = (size_t)rows * cols;
	std::vector<unsigned char> raw(n * es);
	QR_CK(cudaMemcpy2DAsync(raw.data(), (size_t)cols * es, src, ld * es, (size_t)cols * es, rows,
	                        cudaMemcpyDeviceToHost, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	e.data.resize(n);
	for (size_t i = 0; i < n; i++) {
		float v;
		if (bf) {
			uint16_t b;
			memcpy(&b, &raw[2 * i], 2);
			const uint32_t u = (uint32_t)b << 16;
			memcpy(&v, &u, 4);
		} else {
			memcpy(&v, &raw[4 * i], 4);
		}
		e.data[i] = v * mul;
	}
	trace->entries.push_back(std::move(e));
	return QR_OK;
}

int model_gemm_acc(float *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, cudaStream_t st) {
	const float one = 1.0f;
	QR_CKB(cublasSetStream(g_qr.blas, st));
	QR_CKB(cublasGemmEx(g_qr.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k,
	                    &one, y, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
	return QR_OK;
}

int DevModel::gemm_acc_rec(const PlanStep &s, int slot, float *y, const bf16_t *x, const bf16_t *w, int m, int n,
                           int k, cudaStream_t st) {
	if (!tracing(s, slot))
		return model_gemm_acc(y, x, w, m, n, k, st);
	QR_TRY(trace_grow(m));
	float *tmp = trace->tmp.as<float>();
	QR_TRY(qr_gemm_bf16(tmp, 1, n, x, k, w, k, m, n, k, st));
	QR_TRY(rec(s, slot, tmp, 0, n, m, n, m, n, 0));
	return launch_add_f32(y, tmp, (size_t)m * n, st);
}

int DevModel::rec_attn_core(const PlanStep &s, int slot, const AttnW &A, const bf16_t *qn_, int T, cudaStream_t st) {
	if (!tracing(s, slot))
		return QR_OK;
	QR_TRY(trace_grow(T));
	const int qd = d.nh * d.hd;
	bf16_t *Y = ya.as<bf16_t>();
	QR_TRY(launch_flash_attn(Y, qn_, A.kc.as<bf16_t>(), A.vc.as<bf16_t>(), trace->ones_gate.as<bf16_t>() + d.hd,
	                         d.nh * 2 * d.hd, T, pos, d.nh, d.nkv, d.hd, 1.0f / sqrtf((float)d.hd), st));
	return rec(s, slot, Y, 1, qd, T, qd, T, d.nh, d.hd);
}

// Teacher forcing: one block on given inputs, for a trace that feeds each
// layer transformers' own input to it (model.Runner.Layer).
int DevModel::layer(int li, const float *xh, int T, float *out) {
	cudaStream_t st = g_qr.stream;
	QR_ARG(li >= 0 && li < (int)blocks.size(), "model layer: %d outside the model's %d layers", li, (int)blocks.size());
	Block &b = *blocks[li];
	QR_ARG(T > 0 && b.len + T <= d.max_tokens, "model layer %d: %d tokens at position %d exceed max_tokens %d", li, T,
	       b.len, d.max_tokens);
	QR_TRY(ensure_acts(T));
	const size_t n = (size_t)T * d.hidden;
	QR_CK(cudaMemcpyAsync(x.p, xh, n * 4, cudaMemcpyHostToDevice, st));
	const int saved = pos;
	pos = b.len;
	QR_TRY(set_dev_int(d_pos.as<int>(), pos, st));
	const int r = walk(T, 0, 0, T, li, false, st);
	pos = saved;
	QR_TRY(set_dev_int(d_pos.as<int>(), pos, st));
	QR_TRY(r);
	b.len += T;
	if (GdnLayer *L = b.gdn.get())
		QR_TRY(settle_conv_state(*L, d.kconv, st)); // the decode step's conv state lives in [0]
	QR_CK(cudaMemcpyAsync(out, x.p, n * 4, cudaMemcpyDeviceToHost, st));
	QR_CK(cudaStreamSynchronize(st));
	return QR_OK;
}

// ---- C ABI ----

static DevModel *trace_model(void *m) { return (DevModel *)m; }

extern "C" int qr_model_trace(void *model, int on) {
	QR_TRY(qr_require());
	QR_ARG(model, "qr_model_trace: nil model");
	DevModel &m = *trace_model(model);
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	if (on)
		m.trace.reset(new Trace);
	else
		m.trace.reset();
	return QR_OK;
}

extern "C" int qr_model_trace_only(void *model, const char *names) {
	QR_ARG(model && names, "qr_model_trace_only: nil argument");
	DevModel &m = *trace_model(model);
	QR_ARG(m.trace, "qr_model_trace_only: no trace is on (qr_model_trace first)");
	m.trace->only.clear();
	const char *p = names;
	while (*p) {
		const char *e = strchr(p, '\n');
		const size_t n = e ? (size_t)(e - p) : strlen(p);
		QR_ARG(n > 0 && n < 128, "qr_model_trace_only: a stage name of %zu bytes", n);
		m.trace->only.emplace_back(p, n);
		p += n + (e ? 1 : 0);
	}
	return QR_OK;
}

extern "C" int qr_model_trace_count(void *model, int *n) {
	QR_ARG(model && n, "qr_model_trace_count: nil argument");
	DevModel &m = *trace_model(model);
	*n = m.trace ? (int)m.trace->entries.size() : 0;
	return QR_OK;
}

extern "C" int qr_model_trace_entry(void *model, int i, char *name, int name_len, int *dims, float *dst, size_t n) {
	QR_ARG(model && dims && name && name_len > 0, "qr_model_trace_entry: nil argument");
	DevModel &m = *trace_model(model);
	QR_ARG(m.trace && i >= 0 && i < (int)m.trace->entries.size(), "qr_model_trace_entry: no entry %d", i);
	const TraceEntry &e = m.trace->entries[i];
	snprintf(name, (size_t)name_len, "%s", e.name.c_str());
	for (int j = 0; j < 3; j++)
		dims[j] = e.dims[j];
	if (dst) {
		QR_ARG(n == e.data.size(), "qr_model_trace_entry: %s has %zu values, asked for %zu", e.name.c_str(),
		       e.data.size(), n);
		memcpy(dst, e.data.data(), n * 4);
	}
	return QR_OK;
}
