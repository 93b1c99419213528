// gdn_layer.cu: a whole Gated DeltaNet layer on the device: the layer prep
// kernel (q/k L2 norm and scale, the gates β and g) that feeds the core,
// and the host entry qr_gdn_layer (GdnLayer of gdn_layer.cuh on host data).
#include <math.h>

#include "common.cuh"
#include "gdn_layer.cuh"
#include "internal.cuh"

// ---- GDN prep: one block (8 warps) per token; T is bf16_t, or float in
// the fp32 model ----
template <typename T>
__global__ void __launch_bounds__(256) k_gdn_prep_layer(T *__restrict__ qn, T *__restrict__ kn, float *__restrict__ g,
                                                        float *__restrict__ beta, const T *__restrict__ u, int ldu,
                                                        const T *__restrict__ ba, int ldp, int nk, int nv, int dk,
                                                        const float *__restrict__ a_log,
                                                        const float *__restrict__ dt_bias) {
	const int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	const float qscale = rsqrtf((float)dk);
	for (int j = w; j < 2 * nk; j += 8) { // heads 0..nk-1 are q, nk..2nk-1 are k
		const T *src = u + (size_t)t * ldu + (size_t)j * dk;
		float ss = 0.0f;
		for (int i = lane; i < dk; i += 32) {
			const float v = ldf(src + i);
			ss = fmaf(v, v, ss);
		}
		float inv = rsqrtf(warp_sum(ss) + 1e-6f);
		T *dst;
		if (j < nk) {
			inv *= qscale;
			dst = qn + ((size_t)t * nk + j) * dk;
		} else {
			dst = kn + ((size_t)t * nk + (j - nk)) * dk;
		}
		for (int i = lane; i < dk; i += 32)
			stf(dst + i, ldf(src + i) * inv);
	}
	for (int h = threadIdx.x; h < nv; h += blockDim.x) {
		const float b = ldf(ba + (size_t)t * ldp + h);
		const float a = ldf(ba + (size_t)t * ldp + nv + h);
		beta[(size_t)t * nv + h] = 1.0f / (1.0f + expf(-b));
		g[(size_t)t * nv + h] = -expf(a_log[h]) * softplus(a + dt_bias[h]);
	}
}

int launch_gdn_prep(bf16_t *qn, bf16_t *kn, float *g, float *beta, const bf16_t *u, int ldu, const bf16_t *ba, int ldp,
                    int t, int nk, int nv, int dk, const float *a_log, const float *dt_bias, cudaStream_t st) {
	if (t == 0)
		return QR_OK;
	k_gdn_prep_layer<bf16_t><<<t, 256, 0, st>>>(qn, kn, g, beta, u, ldu, ba, ldp, nk, nv, dk, a_log, dt_bias);
	QR_CKL("gdn_prep_layer");
	return QR_OK;
}

int launch_gdn_prep_f32(float *qn, float *kn, float *g, float *beta, const float *u, int ldu, const float *ba, int ldp,
                        int t, int nk, int nv, int dk, const float *a_log, const float *dt_bias, cudaStream_t st) {
	if (t == 0)
		return QR_OK;
	k_gdn_prep_layer<float><<<t, 256, 0, st>>>(qn, kn, g, beta, u, ldu, ba, ldp, nk, nv, dk, a_log, dt_bias);
	QR_CKL("gdn_prep_layer_f32");
	return QR_OK;
}

// ---- the whole-layer host entry (verification) ----
extern "C" int qr_gdn_layer(float *out, const float *x, int t, const qr_gdn_dims *d, const qr_gdn_weights *w,
                            float *conv_state, float *rec_state) {
	QR_TRY(qr_require());
	QR_ARG(d && w && t >= 0, "qr_gdn_layer: bad args");
	GdnLayer L;
	QR_TRY(L.dims(*d));
	QR_TRY(L.alloc_weights());
	const size_t H = (size_t)d->hidden;
	QR_CK(cudaMemcpyAsync(L.w_in.p, w->w_in, (size_t)L.NIN * H * 2, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.w_out.p, w->w_out, H * d->nv * d->dv * 2, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.conv_w.p, w->conv_w, (size_t)L.C * d->kconv * 4, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.a_log.p, w->a_log, (size_t)d->nv * 4, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.dt_bias.p, w->dt_bias, (size_t)d->nv * 4, cudaMemcpyHostToDevice, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.norm_w.p, w->norm_w, (size_t)d->dv * 4, cudaMemcpyHostToDevice, g_qr.stream));
	const size_t ncs = (size_t)d->kconv * L.C, nrs = (size_t)d->nv * d->dk * d->dv;
	DevBuf tmp, xf, xb, ob, of;
	QR_TRY(upload(tmp, conv_state, ncs));
	QR_TRY(qr_convert_f32_bf16(L.conv_state[0].as<bf16_t>(), tmp.as<float>(), ncs, g_qr.stream));
	QR_CK(cudaMemcpyAsync(L.rec_state.p, rec_state, nrs * 4, cudaMemcpyHostToDevice, g_qr.stream));
	QR_TRY(upload(xf, x, (size_t)t * H));
	QR_TRY(xb.alloc((size_t)t * H * 2));
	QR_TRY(ob.alloc((size_t)t * H * 2));
	QR_TRY(of.alloc((size_t)t * H * 4));
	QR_TRY(qr_convert_f32_bf16(xb.as<bf16_t>(), xf.as<float>(), (size_t)t * H, g_qr.stream));
	QR_TRY(qr_fill_nan(ob.p, (size_t)t * H * 2, g_qr.stream));
	QR_TRY(L.forward(ob.as<bf16_t>(), xb.as<bf16_t>(), t, g_qr.stream));
	QR_TRY(qr_convert_bf16_f32(of.as<float>(), ob.as<bf16_t>(), (size_t)t * H, g_qr.stream));
	DevBuf cs32;
	QR_TRY(cs32.alloc(ncs * 4));
	QR_TRY(qr_convert_bf16_f32(cs32.as<float>(), L.conv_state[L.cs].as<bf16_t>(), ncs, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	QR_TRY(download(out, of, (size_t)t * H));
	QR_TRY(download(conv_state, cs32, ncs));
	return download(rec_state, L.rec_state, nrs);
}
