// gdn_recurrent.cu: the gated delta rule one token at a time (docs/spec.md §3.3
// step 6): the generic fp32 recurrence, its register-resident dk = 128 form,
// and the layer's fused decode step.
#include "common.cuh"
#include "internal.cuh"

extern int qr_max_smem; // gdn_chunk.cu

// ---------------------------------------------------------------------------
// Recurrence, one token at a time (docs/spec.md §3.3 step 6): one block per (value
// head, 32 value columns), 4 warps; the fp32 state slice S[dk][32] sits in
// shared memory, lane j owns column j, warp w rows w, w+4, ...
template <typename Tin, typename Tout>
__global__ void __launch_bounds__(128) k_gdn_recurrent(const Tin *__restrict__ q, int ldq, const Tin *__restrict__ k,
                                                       int ldk, const Tin *__restrict__ v, int ldv,
                                                       const float *__restrict__ g, const float *__restrict__ beta,
                                                       Tout *__restrict__ out, int ldo, float *state, int T, int NK,
                                                       int NV, int DK, int DV) {
	extern __shared__ __align__(16) unsigned char qr_smem[];
	float *sm = (float *)qr_smem;
	float *S = sm, *kq = S + DK * 32, *red = kq + 2 * DK; // red [2][4][32]
	const int h = blockIdx.y, vb = blockIdx.x * 32, hk = h / (NV / NK);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int col = vb + lane;
	const bool ok = col < DV;
	for (int i = tid; i < DK * 32; i += 128) {
		const int r = i >> 5, c = vb + (i & 31);
		S[i] = c < DV ? state[((size_t)h * DK + r) * DV + c] : 0.0f;
	}
	for (int t = 0; t < T; t++) {
		for (int i = tid; i < DK; i += 128) {
			kq[i] = ldf(k + (size_t)t * ldk + hk * DK + i);
			kq[DK + i] = ldf(q + (size_t)t * ldq + hk * DK + i);
		}
		__syncthreads();
		const float alpha = expf(g[(size_t)t * NV + h]), b = beta[(size_t)t * NV + h];
		float p = 0.0f;
		for (int r = w; r < DK; r += 4)
			p = fmaf(S[r * 32 + lane], kq[r], p);
		red[w * 32 + lane] = p;
		__syncthreads();
		const float ks = red[lane] + red[32 + lane] + red[64 + lane] + red[96 + lane];
		const float vv = ok ? ldf(v + (size_t)t * ldv + h * DV + col) : 0.0f;
		const float delta = b * (vv - alpha * ks);
		float o = 0.0f;
		for (int r = w; r < DK; r += 4) {
			const float s = fmaf(alpha, S[r * 32 + lane], kq[r] * delta);
			S[r * 32 + lane] = s;
			o = fmaf(s, kq[DK + r], o);
		}
		red[128 + w * 32 + lane] = o;
		__syncthreads();
		if (w == 0 && ok)
			stf(out + (size_t)t * ldo + h * DV + col,
			    red[128 + lane] + red[160 + lane] + red[192 + lane] + red[224 + lane]);
	}
	__syncthreads();
	for (int i = tid; i < DK * 32; i += 128) {
		const int r = i >> 5, c = vb + (i & 31);
		if (c < DV)
			state[((size_t)h * DK + r) * DV + c] = S[i];
	}
}

// The same recurrence for dk = 128 with the state slice in registers: lane j
// owns column j, warp w rows 32w..32w+31, so a decode step reads and writes
// each state value exactly once and touches shared memory only for k, q and
// the two cross-warp sums.
template <typename Tin, typename Tout>
__global__ void __launch_bounds__(128) k_gdn_recurrent128(const Tin *__restrict__ q, int ldq,
                                                          const Tin *__restrict__ k, int ldk,
                                                          const Tin *__restrict__ v, int ldv,
                                                          const float *__restrict__ g, const float *__restrict__ beta,
                                                          Tout *__restrict__ out, int ldo, float *state, int T, int NK,
                                                          int NV, int DV) {
	__shared__ float kq[256], red[2][4][32];
	const int h = blockIdx.y, vb = blockIdx.x * 32, hk = h / (NV / NK);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int col = vb + lane;
	const bool ok = col < DV;
	float S[32];
	float *sp = state + ((size_t)h * 128 + 32 * w) * DV + col;
#pragma unroll
	for (int r = 0; r < 32; r++)
		S[r] = ok ? sp[(size_t)r * DV] : 0.0f;
	for (int t = 0; t < T; t++) {
		kq[tid] = ldf(k + (size_t)t * ldk + hk * 128 + tid);
		kq[128 + tid] = ldf(q + (size_t)t * ldq + hk * 128 + tid);
		const float alpha = expf(g[(size_t)t * NV + h]), b = beta[(size_t)t * NV + h];
		const float vv = ok ? ldf(v + (size_t)t * ldv + h * DV + col) : 0.0f;
		__syncthreads();
		float p = 0.0f;
#pragma unroll
		for (int r = 0; r < 32; r++)
			p = fmaf(S[r], kq[32 * w + r], p);
		red[0][w][lane] = p;
		__syncthreads();
		const float ks = red[0][0][lane] + red[0][1][lane] + red[0][2][lane] + red[0][3][lane];
		const float delta = b * (vv - alpha * ks);
		float o = 0.0f;
#pragma unroll
		for (int r = 0; r < 32; r++) {
			S[r] = fmaf(alpha, S[r], kq[32 * w + r] * delta);
			o = fmaf(S[r], kq[128 + 32 * w + r], o);
		}
		red[1][w][lane] = o;
		__syncthreads();
		if (w == 0 && ok)
			stf(out + (size_t)t * ldo + h * DV + col, red[1][0][lane] + red[1][1][lane] + red[1][2][lane] + red[1][3][lane]);
	}
	if (ok) {
#pragma unroll
		for (int r = 0; r < 32; r++)
			sp[(size_t)r * DV] = S[r];
	}
}

// One decode step of the layer for dk = dv = 128, fusing the GDN prep into
// the recurrence: from the conv output u (q | k | v channels) and the b, a
// projections it L2-normalises q and k (rounded to bf16 as the prefill path
// stores them), computes beta and g, and updates the register-resident state
// slice as k_gdn_recurrent128 does. One launch instead of two. Batch row r
// (blockIdx.z) reads u + r·ldu and ba + r·ldba, writes out + r·NV·128 and
// keeps its own state at state + r·NV·128·128.
__global__ void __launch_bounds__(128) k_gdn_decode128(bf16_t *__restrict__ out, const bf16_t *__restrict__ u, int ldu,
                                                       const bf16_t *__restrict__ ba, int ldba, float *state, int NK,
                                                       int NV, const float *__restrict__ a_log,
                                                       const float *__restrict__ dt_bias) {
	__shared__ float kq[256], red[2][4][32], nrm[2][4];
	pdl_trigger();
	pdl_wait(); // u and ba are the kernels before's outputs
	const size_t row = blockIdx.z;
	u += row * ldu;
	ba += row * ldba;
	out += row * NV * 128;
	state += row * NV * 128 * 128;
	const int h = blockIdx.y, vb = blockIdx.x * 32, hk = h / (NV / NK);
	const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
	const int col = vb + lane;
	float S[32];
	float *sp = state + ((size_t)h * 128 + 32 * w) * 128 + col;
#pragma unroll
	for (int r = 0; r < 32; r++)
		S[r] = sp[(size_t)r * 128];
	const float qv = bf2f(u[hk * 128 + tid]), kv = bf2f(u[(NK + hk) * 128 + tid]);
	const float vv = bf2f(u[2 * NK * 128 + h * 128 + col]);
	const float sq = warp_sum(qv * qv), sk = warp_sum(kv * kv);
	if (lane == 0) {
		nrm[0][w] = sq;
		nrm[1][w] = sk;
	}
	__syncthreads();
	const float iq = rsqrtf(nrm[0][0] + nrm[0][1] + nrm[0][2] + nrm[0][3] + 1e-6f) * rsqrtf(128.0f);
	const float ik = rsqrtf(nrm[1][0] + nrm[1][1] + nrm[1][2] + nrm[1][3] + 1e-6f);
	kq[tid] = bf2f(f2bf(kv * ik));
	kq[128 + tid] = bf2f(f2bf(qv * iq));
	const float b = 1.0f / (1.0f + expf(-bf2f(ba[h])));
	const float alpha = expf(-expf(a_log[h]) * softplus(bf2f(ba[NV + h]) + dt_bias[h]));
	__syncthreads();
	float p = 0.0f;
#pragma unroll
	for (int r = 0; r < 32; r++)
		p = fmaf(S[r], kq[32 * w + r], p);
	red[0][w][lane] = p;
	__syncthreads();
	const float ks = red[0][0][lane] + red[0][1][lane] + red[0][2][lane] + red[0][3][lane];
	const float delta = b * (vv - alpha * ks);
	float o = 0.0f;
#pragma unroll
	for (int r = 0; r < 32; r++) {
		S[r] = fmaf(alpha, S[r], kq[32 * w + r] * delta);
		o = fmaf(S[r], kq[128 + 32 * w + r], o);
	}
	red[1][w][lane] = o;
	__syncthreads();
	if (w == 0)
		out[h * 128 + col] = f2bf(red[1][0][lane] + red[1][1][lane] + red[1][2][lane] + red[1][3][lane]);
#pragma unroll
	for (int r = 0; r < 32; r++)
		sp[(size_t)r * 128] = S[r];
}

int launch_gdn_decode128(bf16_t *out, const bf16_t *u, const bf16_t *ba, float *state, int nk, int nv,
                         const float *a_log, const float *dt_bias, cudaStream_t st) {
	return launch_gdn_decode128_rows(out, u, 0, ba, 0, state, nk, nv, a_log, dt_bias, 1, st);
}

int launch_gdn_decode128_rows(bf16_t *out, const bf16_t *u, int ldu, const bf16_t *ba, int ldba, float *state, int nk,
                              int nv, const float *a_log, const float *dt_bias, int rows, cudaStream_t st) {
	QR_ARG(nv % nk == 0, "gdn decode: nv %% nk != 0");
	QR_ARG(rows >= 1 && rows <= 65535, "gdn decode: %d rows", rows);
	return launch_pdl(k_gdn_decode128, dim3(4, nv, rows), dim3(128), 0, st, out, u, ldu, ba, ldba, state, nk, nv,
	                  a_log, dt_bias);
}

int gdn_recurrent(const GdnArgs &a, int in_bf16, int out_bf16, cudaStream_t st) {
	QR_ARG(a.NV % a.NK == 0 && a.DK > 0 && a.DV > 0, "gdn recurrent: bad heads");
	const size_t sm = (size_t)(a.DK * 32 + 2 * a.DK + 256) * 4;
	QR_ARG((int)sm <= qr_max_smem, "gdn recurrent: dk=%d too large", a.DK);
	if (sm > 48 * 1024) {
		if (in_bf16)
			QR_CK(cudaFuncSetAttribute(k_gdn_recurrent<bf16_t, bf16_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			                           (int)sm));
		else
			QR_CK(cudaFuncSetAttribute(k_gdn_recurrent<float, float>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			                           (int)sm));
	}
	dim3 grid(cdiv(a.DV, 32), a.NV);
	if (a.DK == 128) {
		if (in_bf16 && out_bf16)
			k_gdn_recurrent128<bf16_t, bf16_t><<<grid, 128, 0, st>>>(
			    (const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k, a.ldk, (const bf16_t *)a.v, a.ldv, a.g, a.beta,
			    (bf16_t *)a.out, a.ldo, a.state, a.T, a.NK, a.NV, a.DV);
		else if (!in_bf16 && !out_bf16)
			k_gdn_recurrent128<float, float><<<grid, 128, 0, st>>>(
			    (const float *)a.q, a.ldq, (const float *)a.k, a.ldk, (const float *)a.v, a.ldv, a.g, a.beta,
			    (float *)a.out, a.ldo, a.state, a.T, a.NK, a.NV, a.DV);
		else
			QR_ARG(false, "gdn recurrent: mixed precisions not built");
		QR_CKL("gdn_recurrent128");
		return QR_OK;
	}
	if (in_bf16 && out_bf16)
		k_gdn_recurrent<bf16_t, bf16_t><<<grid, 128, sm, st>>>(
		    (const bf16_t *)a.q, a.ldq, (const bf16_t *)a.k, a.ldk, (const bf16_t *)a.v, a.ldv, a.g, a.beta,
		    (bf16_t *)a.out, a.ldo, a.state, a.T, a.NK, a.NV, a.DK, a.DV);
	else if (!in_bf16 && !out_bf16)
		k_gdn_recurrent<float, float><<<grid, 128, sm, st>>>((const float *)a.q, a.ldq, (const float *)a.k, a.ldk,
		                                                     (const float *)a.v, a.ldv, a.g, a.beta, (float *)a.out,
		                                                     a.ldo, a.state, a.T, a.NK, a.NV, a.DK, a.DV);
	else
		QR_ARG(false, "gdn recurrent: mixed precisions not built");
	QR_CKL("gdn_recurrent");
	return QR_OK;
}

