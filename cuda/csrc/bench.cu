// bench.cu: the whole-layer host entry (qr_gdn_layer) and the device-resident
// benchmarks at 27B dimensions (qr_bench). Timing: warm-ups first, then
// every repetition between two CUDA events on the library's stream,
// reported as median / min / max.
#include <math.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "common.cuh"
#include "internal.cuh"
#include "gdn_layer.cuh"

void qr_bench_release() {}

// ---- timing ----
struct Events {
	std::vector<cudaEvent_t> ev;
	~Events() {
		for (cudaEvent_t e : ev)
			cudaEventDestroy(e);
	}
	int make(int n) {
		for (int i = 0; i < n; i++) {
			cudaEvent_t e;
			QR_CK(cudaEventCreate(&e));
			ev.push_back(e);
		}
		return QR_OK;
	}
};

struct Timing {
	double med = 0, mn = 0, mx = 0;
};

template <class F> static int time_op(F &&f, int warm, int reps, Timing *tm) {
	cudaStream_t st = g_qr.stream;
	for (int i = 0; i < warm; i++)
		QR_TRY(f());
	Events E;
	QR_TRY(E.make(2 * reps));
	for (int r = 0; r < reps; r++) {
		QR_CK(cudaEventRecord(E.ev[2 * r], st));
		QR_TRY(f());
		QR_CK(cudaEventRecord(E.ev[2 * r + 1], st));
	}
	QR_CK(cudaStreamSynchronize(st));
	std::vector<double> ms(reps);
	for (int r = 0; r < reps; r++) {
		float x = 0;
		QR_CK(cudaEventElapsedTime(&x, E.ev[2 * r], E.ev[2 * r + 1]));
		ms[r] = x;
	}
	std::sort(ms.begin(), ms.end());
	tm->med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
	tm->mn = ms.front();
	tm->mx = ms.back();
	return QR_OK;
}

// Count non-finite values of a buffer (bench self-check).
__global__ void k_count_nonfinite(const void *p, int bf, size_t n, unsigned long long *cnt) {
	unsigned long long c = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const float v = bf ? bf2f(((const bf16_t *)p)[i]) : ((const float *)p)[i];
		if (!isfinite(v))
			c++;
	}
	if (c)
		atomicAdd(cnt, c);
}

// Runs a counting kernel, launch(counter), on a zeroed device counter and
// brings the count back.
template <typename F> static int device_count(F launch, unsigned long long *h) {
	DevBuf c;
	QR_TRY(c.alloc(8));
	QR_CK(cudaMemsetAsync(c.p, 0, 8, g_qr.stream));
	launch(c.as<unsigned long long>());
	QR_CKL("count");
	QR_CK(cudaMemcpyAsync(h, c.p, 8, cudaMemcpyDeviceToHost, g_qr.stream));
	QR_CK(cudaStreamSynchronize(g_qr.stream));
	return QR_OK;
}

static int check_finite(const void *p, int bf, size_t n, const char *what) {
	unsigned long long h = 0;
	QR_TRY(device_count(
	    [&](unsigned long long *c) { k_count_nonfinite<<<1024, 256, 0, g_qr.stream>>>(p, bf, n, c); }, &h));
	if (h) {
		qr_set_error("bench self-check: %s has %llu non-finite values of %zu", what, h, n);
		return QR_ECHECK;
	}
	return QR_OK;
}

// Count 16-bit words that differ between two buffers (bench self-check of a
// launch shape against the plain form, which computes the same sums in the
// same order, so every bit must agree).
__global__ void k_count_diff16(const unsigned short *a, const unsigned short *b, size_t n,
                               unsigned long long *cnt) {
	unsigned long long c = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		c += a[i] != b[i];
	if (c)
		atomicAdd(cnt, c);
}

static int check_same16(const void *a, const void *b, size_t n, const char *what) {
	unsigned long long h = 0;
	QR_TRY(device_count(
	    [&](unsigned long long *c) {
		    k_count_diff16<<<1024, 256, 0, g_qr.stream>>>((const unsigned short *)a, (const unsigned short *)b, n, c);
	    },
	    &h));
	if (h) {
		qr_set_error("bench self-check: %s differs from the plain form in %llu of %zu values", what, h, n);
		return QR_ECHECK;
	}
	return QR_OK;
}

// L2-normalise rows of n (bf16 or f32) in place, times scale (random q/k).
__global__ void k_l2norm_rows(void *p, int bf, int n, float scale) {
	const size_t row = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int lane = threadIdx.x & 31;
	float ss = 0;
	for (int i = lane; i < n; i += 32) {
		const float v = bf ? bf2f(((bf16_t *)p)[row * n + i]) : ((float *)p)[row * n + i];
		ss += v * v;
	}
	const float inv = rsqrtf(warp_sum(ss) + 1e-6f) * scale;
	for (int i = lane; i < n; i += 32) {
		if (bf) {
			bf16_t *q = (bf16_t *)p + row * n + i;
			*q = f2bf(bf2f(*q) * inv);
		} else {
			float *q = (float *)p + row * n + i;
			*q *= inv;
		}
	}
}

// The 27B GDN shapes.
static qr_gdn_dims dims27b() {
	qr_gdn_dims d;
	d.hidden = 5120;
	d.nk = 16;
	d.nv = 48;
	d.dk = 128;
	d.dv = 128;
	d.kconv = 4;
	d.eps = 1e-6f;
	return d;
}

// Random layer weights with realistic scales: projections ~U(-1,1)/sqrt(in).
static int random_layer(GdnLayer &L, uint64_t seed) {
	cudaStream_t st = g_qr.stream;
	const float si = 1.0f / sqrtf((float)L.d.hidden), so = 1.0f / sqrtf((float)(L.d.nv * L.d.dv));
	QR_TRY(qr_fill_uniform(L.w_in.p, 1, (size_t)L.NIN * L.d.hidden, seed + 1, -si, si, st));
	QR_TRY(qr_fill_uniform(L.w_out.p, 1, (size_t)L.d.hidden * L.d.nv * L.d.dv, seed + 2, -so, so, st));
	QR_TRY(qr_fill_uniform(L.conv_w.p, 0, (size_t)L.C * L.d.kconv, seed + 3, -0.5f, 0.5f, st));
	QR_TRY(qr_fill_uniform(L.a_log.p, 0, L.d.nv, seed + 4, -1.0f, 1.0f, st));
	QR_TRY(qr_fill_uniform(L.dt_bias.p, 0, L.d.nv, seed + 5, -1.0f, 1.0f, st));
	QR_TRY(qr_fill_uniform(L.norm_w.p, 0, L.d.dv, seed + 6, 0.5f, 1.5f, st));
	return QR_OK;
}

static void put(double *out, int nout, int i, double v) {
	if (i < nout)
		out[i] = v;
}

// out[0..2] = the median, min and max ms of tm.
static void put_times(double *out, const Timing &tm) {
	out[0] = tm.med;
	out[1] = tm.mn;
	out[2] = tm.mx;
}

static int bench_layer(int T, int bv, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	GdnLayer L;
	QR_TRY(L.dims(dims27b()));
	L.bv = bv ? bv : gdn_scan_default();
	QR_TRY(L.alloc_weights());
	QR_TRY(random_layer(L, 42));
	QR_TRY(L.alloc_acts(T));
	DevBuf x, y;
	const size_t H = L.d.hidden;
	QR_TRY(x.alloc((size_t)T * H * 2));
	QR_TRY(y.alloc((size_t)T * H * 2));
	QR_TRY(qr_fill_uniform(x.p, 1, (size_t)T * H, 7, -1.0f, 1.0f, st));
	QR_TRY(qr_fill_nan(y.p, (size_t)T * H * 2, st));
	// Every rep restarts the sequence from zero state, as a prefill does.
	auto reset = [&]() -> int {
		QR_CK(cudaMemsetAsync(L.rec_state.p, 0, (size_t)L.d.nv * L.d.dk * L.d.dv * 4, st));
		return QR_OK;
	};
	auto full = [&]() -> int {
		QR_TRY(reset());
		return L.forward(y.as<bf16_t>(), x.as<bf16_t>(), T, st);
	};
	Timing tm;
	QR_TRY(time_op(full, 2, reps, &tm));
	QR_TRY(check_finite(y.p, 1, (size_t)T * H, "layer output"));
	put_times(out, tm);
	Timing s;
	const bf16_t *xb = x.as<bf16_t>();
	QR_TRY(time_op([&]() { return L.s_inproj(xb, T, st); }, 1, reps, &s));
	put(out, nout, 3, s.med);
	QR_TRY(time_op([&]() { return L.s_conv(T, st); }, 1, reps, &s));
	put(out, nout, 4, s.med);
	QR_TRY(time_op([&]() { return L.s_prep(T, st); }, 1, reps, &s));
	put(out, nout, 5, s.med);
	QR_TRY(time_op(
	    [&]() -> int {
		    QR_TRY(reset());
		    return L.s_core(T, st);
	    },
	    1, reps, &s));
	put(out, nout, 6, s.med);
	QR_TRY(time_op([&]() { return L.s_norm(T, st); }, 1, reps, &s));
	put(out, nout, 7, s.med);
	QR_TRY(time_op([&]() { return L.s_outproj(y.as<bf16_t>(), T, st); }, 1, reps, &s));
	put(out, nout, 8, s.med);
	// FLOP count of the projections (2 M N K each) over the median.
	const double flop = 2.0 * T * H * (double)L.NIN + 2.0 * T * H * (double)(L.d.nv * L.d.dv);
	put(out, nout, 9, flop / (tm.med * 1e-3) / 1e12);
	return QR_OK;
}

static int bench_decode(int graph, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	GdnLayer L;
	QR_TRY(L.dims(dims27b()));
	QR_TRY(L.alloc_weights());
	QR_TRY(random_layer(L, 43));
	QR_TRY(L.alloc_acts(1));
	DevBuf x, y;
	QR_TRY(x.alloc(L.d.hidden * 2));
	QR_TRY(y.alloc(L.d.hidden * 2));
	QR_TRY(qr_fill_uniform(x.p, 1, L.d.hidden, 9, -1.0f, 1.0f, st));
	// A plausible mid-sequence state rather than zeros.
	QR_TRY(qr_fill_uniform(L.rec_state.p, 0, (size_t)L.d.nv * L.d.dk * L.d.dv, 10, -0.1f, 0.1f, st));
	auto step = [&]() { return L.forward(y.as<bf16_t>(), x.as<bf16_t>(), 1, st); };
	Timing tm;
	if (!graph) {
		QR_TRY(time_op(step, 5, reps, &tm));
	} else {
		QR_TRY(step()); // warm: kernels loaded before capture
		QR_CK(cudaStreamSynchronize(st));
		cudaGraph_t gph = nullptr;
		cudaGraphExec_t exec = nullptr;
		QR_CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
		int r = step();
		cudaError_t e = cudaStreamEndCapture(st, &gph);
		if (r != QR_OK) {
			if (gph)
				cudaGraphDestroy(gph);
			return r;
		}
		QR_CK(e);
		e = cudaGraphInstantiate(&exec, gph, 0);
		cudaGraphDestroy(gph);
		QR_CK(e);
		r = time_op(
		    [&]() -> int {
			    QR_CK(cudaGraphLaunch(exec, st));
			    return QR_OK;
		    },
		    5, reps, &tm);
		cudaGraphExecDestroy(exec);
		QR_TRY(r);
	}
	QR_TRY(check_finite(y.p, 1, L.d.hidden, "decode output"));
	put_times(out, tm);
	// Weight bytes read per step over the median: achieved bandwidth (GB/s).
	const double bytes = 2.0 * ((double)L.NIN * L.d.hidden + (double)L.d.hidden * L.d.nv * L.d.dv) +
	                     8.0 * L.d.nv * L.d.dk * L.d.dv;
	put(out, nout, 3, bytes / (tm.med * 1e-3) / 1e9);
	return QR_OK;
}

static int bench_core(int T, int variant, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	const int NK = 16, NV = 48, D = 128;
	const int f32 = variant == 0;
	const size_t es = f32 ? 4 : 2;
	const size_t nq = (size_t)T * NK * D, nv = (size_t)T * NV * D;
	DevBuf q, k, v, g, b, o, s, scratch;
	QR_TRY(q.alloc(nq * es));
	QR_TRY(k.alloc(nq * es));
	QR_TRY(v.alloc(nv * es));
	QR_TRY(o.alloc(nv * es));
	QR_TRY(g.alloc((size_t)T * NV * 4));
	QR_TRY(b.alloc((size_t)T * NV * 4));
	QR_TRY(s.alloc((size_t)NV * D * D * 4));
	QR_TRY(scratch.alloc(gdn_scratch_bytes(T, NV, f32)));
	QR_TRY(qr_fill_uniform(q.p, !f32, nq, 11, -1, 1, st));
	QR_TRY(qr_fill_uniform(k.p, !f32, nq, 12, -1, 1, st));
	QR_TRY(qr_fill_uniform(v.p, !f32, nv, 13, -1, 1, st));
	QR_TRY(qr_fill_uniform(g.p, 0, (size_t)T * NV, 14, -0.5f, -0.01f, st));
	QR_TRY(qr_fill_uniform(b.p, 0, (size_t)T * NV, 15, 0.05f, 0.95f, st));
	k_l2norm_rows<<<cdiv((size_t)T * NK, 8), 256, 0, st>>>(q.p, !f32, D, 1.0f / sqrtf((float)D));
	k_l2norm_rows<<<cdiv((size_t)T * NK, 8), 256, 0, st>>>(k.p, !f32, D, 1.0f);
	QR_CKL("l2norm_rows");
	QR_TRY(qr_fill_nan(o.p, nv * es, st));
	GdnArgs a = {T, NK, NV, D, D, q.p, NK * D, k.p, NK * D, v.p, NV * D, g.as<float>(), b.as<float>(), o.p, NV * D,
	             s.as<float>()};
	auto run = [&]() -> int {
		QR_CK(cudaMemsetAsync(s.p, 0, (size_t)NV * D * D * 4, st));
		if (f32)
			return gdn_chunk_f32(a, scratch.p, st);
		return gdn_chunk_bf16(a, variant, 0, scratch.p, st);
	};
	Timing tm;
	QR_TRY(time_op(run, 2, reps, &tm));
	QR_TRY(check_finite(o.p, !f32, nv, "core output"));
	put_times(out, tm);
	// Chunked FLOP count of the anchors: C(5dk+3dv)+6 dk dv per head-token.
	const double flop = (double)T * NV * (64.0 * (5 * D + 3 * D) + 6.0 * D * D);
	put(out, nout, 3, flop / (tm.med * 1e-3) / 1e12);
	if (!f32) { // the two kernels on their own
		Timing ts;
		QR_TRY(time_op([&]() { return gdn_prep_bf16(a, scratch.p, st); }, 1, reps, &ts));
		put(out, nout, 4, ts.med);
		QR_TRY(time_op(
		    [&]() -> int {
			    QR_CK(cudaMemsetAsync(s.p, 0, (size_t)NV * D * D * 4, st));
			    return gdn_scan_bf16(a, variant, 0, scratch.p, st);
		    },
		    1, reps, &ts));
		put(out, nout, 5, ts.med);
	}
	return QR_OK;
}

static int bench_conv(int T, int variant, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	const int C = 10240, K = 4;
	DevBuf x, y, yref, w, state;
	QR_TRY(x.alloc((size_t)T * C * 2));
	QR_TRY(y.alloc((size_t)T * C * 2));
	QR_TRY(yref.alloc((size_t)T * C * 2));
	QR_TRY(w.alloc((size_t)C * K * 4));
	QR_TRY(state.alloc((size_t)K * C * 2));
	QR_TRY(qr_fill_uniform(x.p, 1, (size_t)T * C, 21, -2, 2, st));
	QR_TRY(qr_fill_uniform(w.p, 0, (size_t)C * K, 22, -0.5f, 0.5f, st));
	QR_TRY(qr_fill_uniform(state.p, 1, (size_t)K * C, 23, -2, 2, st));
	QR_TRY(qr_fill_nan(y.p, (size_t)T * C * 2, st));
	QR_TRY(qr_fill_nan(yref.p, (size_t)T * C * 2, st));
	// variant = 100*U + TT picks a launch shape (0: the default).
	struct Restore {
		~Restore() { g_conv_u = g_conv_tt = 0; }
	} restore;
	auto conv = [&](DevBuf &out) {
		return launch_conv(out.p, 1, C, x.p, 1, C, T, C, w.as<float>(), K, state.p, nullptr, st);
	};
	// The plain form (one row in flight, 64 steps) is what each shape must match.
	g_conv_u = 1;
	g_conv_tt = 64;
	QR_TRY(conv(yref));
	g_conv_u = variant / 100;
	g_conv_tt = variant % 100;
	Timing tm;
	QR_TRY(time_op([&]() { return conv(y); }, 3, reps, &tm));
	QR_TRY(check_finite(y.p, 1, (size_t)T * C, "conv output"));
	QR_TRY(check_same16(y.p, yref.p, (size_t)T * C, "conv output"));
	put_times(out, tm);
	put(out, nout, 3, 2.0 * T * C * 2 / (tm.med * 1e-3) / 1e9); // GB/s read + write
	return QR_OK;
}

static int bench_copy(int mib, int reps, double *out, int nout) {
	const size_t n = (size_t)mib << 20;
	DevBuf a, b;
	QR_TRY(a.alloc(n));
	QR_TRY(b.alloc(n));
	QR_TRY(qr_fill_uniform(a.p, 0, n / 4, 31, -1, 1, g_qr.stream));
	Timing tm;
	QR_TRY(time_op(
	    [&]() -> int {
		    QR_CK(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice, g_qr.stream));
		    return QR_OK;
	    },
	    3, reps, &tm));
	put_times(out, tm);
	put(out, nout, 3, 2.0 * n / (tm.med * 1e-3) / 1e9);
	return QR_OK;
}

static int bench_gemm(int n, int reps, double *out, int nout) {
	DevBuf a, b, c;
	const size_t nn = (size_t)n * n;
	QR_TRY(a.alloc(nn * 2));
	QR_TRY(b.alloc(nn * 2));
	QR_TRY(c.alloc(nn * 2));
	QR_TRY(qr_fill_uniform(a.p, 1, nn, 41, -1, 1, g_qr.stream));
	QR_TRY(qr_fill_uniform(b.p, 1, nn, 42, -1, 1, g_qr.stream));
	Timing tm;
	QR_TRY(time_op(
	    [&]() { return qr_gemm_bf16(c.p, 0, n, a.as<bf16_t>(), n, b.as<bf16_t>(), n, n, n, n, g_qr.stream); }, 3,
	    reps, &tm));
	put_times(out, tm);
	put(out, nout, 3, 2.0 * nn * n / (tm.med * 1e-3) / 1e12);
	return QR_OK;
}

static int bench_attn(int T, int reps, double *out, int nout) {
	const int NH = 24, NKV = 4, D = 256;
	const size_t nq = (size_t)T * NH * D, nk = (size_t)T * NKV * D;
	DevBuf q, k, v, o;
	QR_TRY(q.alloc(nq * 4));
	QR_TRY(k.alloc(nk * 4));
	QR_TRY(v.alloc(nk * 4));
	QR_TRY(o.alloc(nq * 4));
	QR_TRY(qr_fill_uniform(q.p, 0, nq, 51, -1, 1, g_qr.stream));
	QR_TRY(qr_fill_uniform(k.p, 0, nk, 52, -1, 1, g_qr.stream));
	QR_TRY(qr_fill_uniform(v.p, 0, nk, 53, -1, 1, g_qr.stream));
	Timing tm;
	QR_TRY(time_op(
	    [&]() {
		    return launch_attention(o.as<float>(), q.as<float>(), k.as<float>(), v.as<float>(), T, T, NH, NKV, D,
		                            1.0f / 16.0f, g_qr.stream);
	    },
	    1, reps, &tm));
	QR_TRY(check_finite(o.p, 0, nq, "attention output"));
	put_times(out, tm);
	put(out, nout, 3, 2.0 * 2.0 * NH * D * (double)T * (T + 1) / 2 / (tm.med * 1e-3) / 1e12);
	return QR_OK;
}

// The prefill flash attention at the 27B's widths (24 query and 4 key
// heads of 256, the gate in the q_proj layout): causal over T keys from an
// empty cache. variant = a launch shape (100·warps + key tile), 0 the
// default; out[3] = TFLOP/s of the causal count 4·d·nh·T(T+1)/2.
static int bench_flash(int T, int variant, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	const int NH = 24, NKV = 4, D = 256;
	const size_t nq = (size_t)T * NH * D, nk = (size_t)T * NKV * D;
	DevBuf q, k, v, gate, y;
	QR_TRY(q.alloc(nq * 2));
	QR_TRY(k.alloc(nk * 2));
	QR_TRY(v.alloc(nk * 2));
	QR_TRY(gate.alloc(2 * nq * 2));
	QR_TRY(y.alloc(nq * 2));
	QR_TRY(qr_fill_uniform(q.p, 1, nq, 61, -1, 1, st));
	QR_TRY(qr_fill_uniform(k.p, 1, nk, 62, -1, 1, st));
	QR_TRY(qr_fill_uniform(v.p, 1, nk, 63, -1, 1, st));
	QR_TRY(qr_fill_uniform(gate.p, 1, 2 * nq, 64, -3, 3, st));
	QR_TRY(qr_fill_nan(y.p, nq * 2, st));
	struct Restore {
		~Restore() { g_fa_variant = 0; }
	} restore;
	g_fa_variant = variant;
	Timing tm;
	QR_TRY(time_op(
	    [&]() {
		    return launch_flash_attn(y.as<bf16_t>(), q.as<bf16_t>(), k.as<bf16_t>(), v.as<bf16_t>(),
		                             gate.as<bf16_t>() + D, 2 * NH * D, T, 0, NH, NKV, D, 1.0f / 16.0f, st);
	    },
	    2, reps, &tm));
	QR_TRY(check_finite(y.p, 1, nq, "flash attention output"));
	put_times(out, tm);
	put(out, nout, 3, 2.0 * 2.0 * NH * D * (double)T * (T + 1) / 2 / (tm.med * 1e-3) / 1e12);
	return QR_OK;
}

extern "C" int qr_bench(int what, int t, int variant, int reps, double *out, int nout) {
	QR_TRY(qr_require());
	QR_ARG(out && nout >= 3 && reps > 0, "qr_bench: need out[3+] and reps > 0");
	for (int i = 0; i < nout; i++)
		out[i] = NAN;
	switch (what) {
	case QR_BENCH_COPY:
		return bench_copy(t, reps, out, nout);
	case QR_BENCH_GEMM:
		return bench_gemm(t, reps, out, nout);
	case QR_BENCH_CONV:
		return bench_conv(t, variant, reps, out, nout);
	case QR_BENCH_GDN_CORE:
		QR_ARG(variant == 0 || variant == 1 || variant == 32 || variant == 64 || variant == 432 || variant == 832 ||
		           variant == 864 || variant == 1064,
		       "qr_bench core: variant 0 (fp32), 1 (the default scan shape) or a scan shape (432, 832, 864, 1064; "
		       "32 and 64 name 432 and 864)");
		if (variant == 1)
			variant = gdn_scan_default();
		return bench_core(t, variant, reps, out, nout);
	case QR_BENCH_GDN_LAYER:
		return bench_layer(t, variant, reps, out, nout);
	case QR_BENCH_DECODE:
		return bench_decode(variant, reps, out, nout);
	case QR_BENCH_ATTN:
		return bench_attn(t, reps, out, nout);
	case QR_BENCH_FLASH:
		return bench_flash(t, variant, reps, out, nout);
	}
	qr_set_error("qr_bench: unknown benchmark %d", what);
	return QR_EARG;
}
