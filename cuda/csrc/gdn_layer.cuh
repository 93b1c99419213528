// gdn_layer.cuh: one Gated DeltaNet layer on the device (docs/spec.md §3.3), bf16
// weights and activations, fp32 gates and recurrent state. Used by the host
// entry qr_gdn_layer (verification) and by the benchmarks.
#pragma once

#include "common.cuh"
#include "internal.cuh"

// Activation buffers of a GDN layer for up to tcap tokens. A layer owns one
// set by default; the whole-model path (model.cu) shares one set among all
// its GDN layers, since they run one after another.
struct GdnActs {
	int tcap = 0;
	DevBuf proj, u, qn, kn, g, beta, o, y, scratch;
	size_t bytes = 0; // allocated so far (the model's memory accounting)

	// es: bytes of an activation (2 bf16, 4 for the fp32 model, which runs
	// the recurrence and needs no chunk scratch).
	int alloc(const qr_gdn_dims &d, int C, int NIN, int T, size_t es = 2) {
		if (T <= tcap)
			return QR_OK;
		tcap = T;
		const size_t sz[9] = {(size_t)T * NIN * es,          (size_t)T * C * es,
		                      (size_t)T * d.nk * d.dk * es,  (size_t)T * d.nk * d.dk * es,
		                      (size_t)T * d.nv * 4,          (size_t)T * d.nv * 4,
		                      (size_t)T * d.nv * d.dv * es,  (size_t)T * d.nv * d.dv * es,
		                      es == 2 ? gdn_scratch_bytes(T, d.nv, 0) : 16};
		DevBuf *b[9] = {&proj, &u, &qn, &kn, &g, &beta, &o, &y, &scratch};
		bytes = 0;
		for (int i = 0; i < 9; i++) {
			if (b[i]->p) { // grow: drop the old buffer first
				cudaFree(b[i]->p);
				b[i]->p = nullptr;
			}
			QR_TRY(b[i]->alloc(sz[i]));
			bytes += sz[i];
		}
		return QR_OK;
	}
};

struct GdnLayer {
	qr_gdn_dims d{};
	int C = 0;   // conv channels 2 nk dk + nv dv
	int NIN = 0; // rows of w_in: C + nv dv + 2 nv
	int bv = gdn_scan_default(); // launch shape of the tensor-core scan (gdn_chunk_bf16)
	size_t es = 2; // bytes of a projection weight and a conv-state element (4: the fp32 model)
	// weights
	DevBuf w_in, w_out, conv_w, a_log, dt_bias, norm_w;
	// state
	DevBuf conv_state[2];
	int cs = 0;
	DevBuf rec_state;
	// activations: its own set, or one shared with other layers (acts)
	GdnActs own;
	GdnActs *acts = &own;

	int dims(const qr_gdn_dims &dd) {
		d = dd;
		QR_ARG(d.hidden > 0 && d.nk > 0 && d.nv > 0 && d.nv % d.nk == 0 && d.dk > 0 && d.dv > 0 && d.kconv > 0 &&
		           d.kconv <= 8,
		       "gdn layer: bad dims");
		C = 2 * d.nk * d.dk + d.nv * d.dv;
		NIN = C + d.nv * d.dv + 2 * d.nv;
		return QR_OK;
	}
	// Allocate weights and zeroed state.
	int alloc_weights() {
		QR_TRY(w_in.alloc((size_t)NIN * d.hidden * es));
		QR_TRY(w_out.alloc((size_t)d.hidden * d.nv * d.dv * es));
		QR_TRY(conv_w.alloc((size_t)C * d.kconv * 4));
		QR_TRY(a_log.alloc((size_t)d.nv * 4));
		QR_TRY(dt_bias.alloc((size_t)d.nv * 4));
		QR_TRY(norm_w.alloc((size_t)d.dv * 4));
		for (int i = 0; i < 2; i++) {
			QR_TRY(conv_state[i].alloc((size_t)d.kconv * C * es));
			QR_CK(cudaMemsetAsync(conv_state[i].p, 0, (size_t)d.kconv * C * es, g_qr.stream));
		}
		QR_TRY(rec_state.alloc((size_t)d.nv * d.dk * d.dv * 4));
		QR_CK(cudaMemsetAsync(rec_state.p, 0, (size_t)d.nv * d.dk * d.dv * 4, g_qr.stream));
		return QR_OK;
	}
	int alloc_acts(int T) { return acts->alloc(d, C, NIN, T); }
	bool tensor_core_core() const { return d.dk == 128 && d.dv == 128; }

	// Stages; x [T, hidden] and out [T, hidden] bf16 device buffers.
	int s_inproj(const bf16_t *x, int T, cudaStream_t st) {
		if (T == 1)
			return launch_gemv(GEMV_Y_BF16, acts->proj.as<bf16_t>(), x, w_in.as<bf16_t>(), NIN, d.hidden, st);
		return qr_gemm_bf16(acts->proj.p, 0, NIN, x, d.hidden, w_in.as<bf16_t>(), d.hidden, T, NIN, d.hidden, st);
	}
	int s_conv(int T, cudaStream_t st) {
		QR_TRY(launch_conv(acts->u.p, 1, C, acts->proj.p, 1, NIN, T, C, conv_w.as<float>(), d.kconv, conv_state[cs].p,
		                   conv_state[cs ^ 1].p, st));
		cs ^= 1;
		return QR_OK;
	}
	int s_prep(int T, cudaStream_t st) {
		const bf16_t *ba = acts->proj.as<bf16_t>() + C + d.nv * d.dv;
		GdnActs &a = *acts;
		return launch_gdn_prep(a.qn.as<bf16_t>(), a.kn.as<bf16_t>(), a.g.as<float>(), a.beta.as<float>(),
		                       a.u.as<bf16_t>(), C, ba, NIN, T, d.nk, d.nv, d.dk, a_log.as<float>(),
		                       dt_bias.as<float>(), st);
	}
	GdnArgs core_args(int T) {
		GdnArgs a = {T,
		             d.nk,
		             d.nv,
		             d.dk,
		             d.dv,
		             acts->qn.p,
		             d.nk * d.dk,
		             acts->kn.p,
		             d.nk * d.dk,
		             acts->u.as<bf16_t>() + 2 * d.nk * d.dk,
		             C,
		             acts->g.as<float>(),
		             acts->beta.as<float>(),
		             acts->o.p,
		             d.nv * d.dv,
		             rec_state.as<float>()};
		return a;
	}
	int s_core(int T, cudaStream_t st) {
		GdnArgs a = core_args(T);
		if (T == 1 || !tensor_core_core())
			return gdn_recurrent(a, 1, 1, st);
		return gdn_chunk_bf16(a, bv, 0, acts->scratch.p, st);
	}
	int s_norm(int T, cudaStream_t st) {
		const bf16_t *z = acts->proj.as<bf16_t>() + C;
		return launch_gated_rmsnorm(acts->y.p, 1, d.nv * d.dv, acts->o.p, 1, d.nv * d.dv, z, 1, NIN, T, d.nv, d.dv,
		                            norm_w.as<float>(), d.eps, st);
	}
	int s_outproj(bf16_t *out, int T, cudaStream_t st) {
		if (T == 1)
			return launch_gemv(GEMV_Y_BF16, out, acts->y.as<bf16_t>(), w_out.as<bf16_t>(), d.hidden,
			                   d.nv * d.dv, st);
		return qr_gemm_bf16(out, 0, d.hidden, acts->y.as<bf16_t>(), d.nv * d.dv, w_out.as<bf16_t>(), d.nv * d.dv, T,
		                    d.hidden, d.nv * d.dv, st);
	}
	int forward(bf16_t *out, const bf16_t *x, int T, cudaStream_t st) {
		QR_TRY(alloc_acts(T));
		if (T == 0)
			return QR_OK;
		QR_TRY(s_inproj(x, T, st));
		QR_TRY(s_conv(T, st));
		if (T == 1 && tensor_core_core()) { // decode: prep fused into the update
			QR_TRY(launch_gdn_decode128(acts->o.as<bf16_t>(), acts->u.as<bf16_t>(),
			                            acts->proj.as<bf16_t>() + C + d.nv * d.dv, rec_state.as<float>(), d.nk, d.nv,
			                            a_log.as<float>(), dt_bias.as<float>(), st));
		} else {
			QR_TRY(s_prep(T, st));
			QR_TRY(s_core(T, st));
		}
		QR_TRY(s_norm(T, st));
		return s_outproj(out, T, st);
	}
};
