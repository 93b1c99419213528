// model_api.cu: the C ABI of the device-resident model (qr_model_*) and its
// benchmarks: prefill tokens/s with a per-stage profile, and greedy decode
// ms/token as CUDA-graph replays after a cached prefill.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "model.cuh"

extern "C" int qr_mem_info(size_t *free_bytes, size_t *total_bytes) {
	QR_TRY(qr_require());
	size_t f = 0, t = 0;
	QR_CK(cudaMemGetInfo(&f, &t));
	if (free_bytes)
		*free_bytes = f;
	if (total_bytes)
		*total_bytes = t;
	return QR_OK;
}

static DevModel *as_model(void *m) { return (DevModel *)m; }

extern "C" int qr_model_create(void **model, const qr_model_dims *d, const int32_t *kinds) {
	QR_TRY(qr_require());
	QR_ARG(model && d && kinds, "qr_model_create: nil argument");
	DevModel *m = new DevModel;
	const int r = m->create(*d, kinds);
	if (r != QR_OK) {
		delete m; // frees what was allocated
		return r;
	}
	*model = m;
	return QR_OK;
}

extern "C" int qr_model_destroy(void *model) {
	if (!model)
		return QR_OK;
	// Finish queued work before the buffers go.
	const cudaError_t e = g_qr.ready ? cudaStreamSynchronize(g_qr.stream) : cudaSuccess;
	delete as_model(model);
	if (e != cudaSuccess)
		return qr_cuda_fail(e, "cudaStreamSynchronize", __FILE__, __LINE__);
	return QR_OK;
}

extern "C" int qr_model_random(void *model, uint64_t seed) {
	QR_TRY(qr_require());
	QR_ARG(model, "qr_model_random: nil model");
	return as_model(model)->random(seed);
}

extern "C" int qr_model_set(void *model, int layer, int which, int part, const void *src, size_t n, int src_bf16) {
	QR_TRY(qr_require());
	QR_ARG(model && (src || n == 0), "qr_model_set: nil argument");
	return as_model(model)->set(layer, which, part, src, n, src_bf16);
}

extern "C" int qr_model_get(void *model, int layer, int which, int part, void *dst, size_t n) {
	QR_TRY(qr_require());
	QR_ARG(model && (dst || n == 0), "qr_model_get: nil argument");
	return as_model(model)->get(layer, which, part, dst, n);
}

extern "C" int qr_model_reset(void *model) {
	QR_TRY(qr_require());
	QR_ARG(model, "qr_model_reset: nil model");
	return as_model(model)->reset();
}

extern "C" int qr_model_forward(void *model, const int32_t *ids, int t, int last_only, float *logits) {
	QR_TRY(qr_require());
	QR_ARG(model && ids && t > 0, "qr_model_forward: bad arguments");
	DevModel &m = *as_model(model);
	for (int i = 0; i < t; i++)
		QR_ARG(ids[i] >= 0 && ids[i] < m.d.vocab, "qr_model_forward: id %d at %d outside [0, %d)", ids[i], i,
		       m.d.vocab);
	QR_ARG(m.pos + t <= m.d.max_tokens, "qr_model_forward: position %d + %d tokens > max_tokens %d", m.pos, t,
	       m.d.max_tokens);
	if (t == 1 && !m.trace && !m.f32) // decode: one graph replay, its host copies queued around it
		return m.decode_one(ids[0], logits);
	cudaStream_t st = g_qr.stream;
	QR_TRY(m.ensure_acts(t));
	const int rows = last_only || !logits ? 1 : t;
	QR_TRY(m.ensure_logits(rows));
	// A traced prefill computes every row; the last one is then at t - 1.
	const size_t off = m.trace && rows < t ? (size_t)(t - 1) * m.d.vocab : 0;
	QR_CK(cudaMemcpyAsync(m.ids.p, ids, (size_t)t * 4, cudaMemcpyHostToDevice, st));
	QR_TRY(m.fwd_mark(0, st));
	if (logits)
		QR_TRY(qr_fill_nan(m.logits.p, (size_t)rows * m.d.vocab * 4, st));
	QR_TRY(m.prefill(t, last_only || !logits));
	QR_TRY(m.fwd_mark(1, st));
	if (logits)
		QR_CK(cudaMemcpyAsync(logits, m.logits.as<float>() + off, (size_t)rows * m.d.vocab * 4,
		                      cudaMemcpyDeviceToHost, st));
	QR_CK(cudaStreamSynchronize(st));
	return m.fwd_elapsed();
}

extern "C" int qr_model_last_ms(void *model, float *ms) {
	QR_ARG(model && ms, "qr_model_last_ms: nil argument");
	*ms = as_model(model)->fwd_ms;
	return QR_OK;
}

extern "C" int qr_model_layer(void *model, int layer, const float *x, int t, float *out) {
	QR_TRY(qr_require());
	QR_ARG(model && x && out && t > 0, "qr_model_layer: bad arguments");
	return as_model(model)->layer(layer, x, t, out);
}

extern "C" int qr_model_greedy(void *model, int32_t first_id, int n, int32_t *out_ids) {
	QR_TRY(qr_require());
	QR_ARG(model && out_ids && n >= 0, "qr_model_greedy: bad arguments");
	DevModel &m = *as_model(model);
	QR_ARG(first_id >= 0 && first_id < m.d.vocab, "qr_model_greedy: id %d", first_id);
	QR_ARG(m.pos + n <= m.d.max_tokens, "qr_model_greedy: %d steps from %d exceed max_tokens", n, m.pos);
	if (m.f32)
		return m.greedy_plain(first_id, n, out_ids);
	cudaStream_t st = g_qr.stream;
	QR_TRY(m.capture_greedy());
	int32_t id = first_id;
	QR_CK(cudaMemcpyAsync(m.ids.p, &id, 4, cudaMemcpyHostToDevice, st));
	QR_TRY(set_dev_int(m.d_pos.as<int>(), m.pos, st));
	for (int i = 0; i < n; i++) {
		QR_CK(cudaGraphLaunch(m.graph, st));
		QR_CK(cudaMemcpyAsync(&out_ids[i], m.ids.p, 4, cudaMemcpyDeviceToHost, st));
		m.pos++;
	}
	QR_CK(cudaStreamSynchronize(st));
	return QR_OK;
}

extern "C" int qr_model_info(void *model, int *pos, size_t *weight_bytes, size_t *state_bytes, size_t *act_bytes) {
	QR_ARG(model, "qr_model_info: nil model");
	DevModel &m = *as_model(model);
	if (pos)
		*pos = m.pos;
	if (weight_bytes)
		*weight_bytes = m.w_bytes;
	if (state_bytes)
		*state_bytes = m.s_bytes;
	if (act_bytes)
		*act_bytes = m.a_bytes;
	return QR_OK;
}

static const char *stage_names[ST_COUNT] = {"embed+rmsnorm",  "gdn projections", "gdn conv+gates", "gdn core",
                                            "gdn gated norm", "attn projections", "attn norm+rope", "attn flash core",
                                            "mlp gate/up",    "mlp swiglu",       "mlp down",       "lm_head",
                                            "moe router",     "moe experts",      "moe shared+combine"};

extern "C" const char *qr_model_stage_name(int i) { return i >= 0 && i < ST_COUNT ? stage_names[i] : nullptr; }

// ---- benchmarks ----

static void put(double *out, int nout, int i, double v) {
	if (i < nout)
		out[i] = v;
}

static double median(std::vector<double> v) {
	std::sort(v.begin(), v.end());
	const size_t n = v.size();
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

__global__ void k_random_ids(int32_t *ids, int n, uint64_t seed, int vocab) {
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		ids[i] = (int32_t)(mix64(seed * 0x9e3779b97f4a7c15ull + i) % (uint64_t)vocab);
}

// Count non-finite values (a self-check on the benchmark outputs).
__global__ void k_nonfinite(const float *p, size_t n, unsigned long long *cnt) {
	unsigned long long c = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		if (!isfinite(p[i]))
			c++;
	if (c)
		atomicAdd(cnt, c);
}

// The benchmarks' self-check: n fp32 values at p are all finite.
static int check_finite(const float *p, size_t n, const char *what) {
	DevBuf c;
	QR_TRY(c.alloc(8));
	cudaStream_t st = g_qr.stream;
	QR_CK(cudaMemsetAsync(c.p, 0, 8, st));
	k_nonfinite<<<1024, 256, 0, st>>>(p, n, c.as<unsigned long long>());
	QR_CKL("nonfinite");
	unsigned long long h = 0;
	QR_CK(cudaMemcpyAsync(&h, c.p, 8, cudaMemcpyDeviceToHost, st));
	QR_CK(cudaStreamSynchronize(st));
	if (h) {
		qr_set_error("model bench self-check: %s has %llu non-finite values of %zu", what, h, n);
		return QR_ECHECK;
	}
	return QR_OK;
}

static int check_logits(DevModel &m, size_t n, const char *what) {
	char buf[64];
	snprintf(buf, sizeof buf, "%s logits", what);
	return check_finite(m.logits.as<float>(), n, buf);
}

struct EvPair {
	cudaEvent_t a = nullptr, b = nullptr;
	~EvPair() {
		if (a)
			cudaEventDestroy(a);
		if (b)
			cudaEventDestroy(b);
	}
	int make() {
		QR_CK(cudaEventCreate(&a));
		QR_CK(cudaEventCreate(&b));
		return QR_OK;
	}
	int ms(double *out) {
		float x = 0;
		QR_CK(cudaEventSynchronize(b));
		QR_CK(cudaEventElapsedTime(&x, a, b));
		*out = x;
		return QR_OK;
	}
};

// Prefill of T random tokens from an empty cache, all T rows of logits (as
// a plain forward call computes them).
static int bench_prefill(DevModel &m, int T, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	QR_TRY(m.ensure_acts(T));
	k_random_ids<<<cdiv(T, 256), 256, 0, st>>>(m.ids.as<int32_t>(), T, 1234 + T, m.d.vocab);
	QR_CKL("random_ids");
	auto pass = [&]() -> int {
		QR_TRY(m.reset());
		return m.prefill(T, 0);
	};
	QR_TRY(pass()); // warm-up: cuBLAS heuristics, module loads
	std::vector<double> ms;
	EvPair ev;
	QR_TRY(ev.make());
	for (int r = 0; r < reps; r++) {
		QR_TRY(m.reset());
		QR_CK(cudaEventRecord(ev.a, st));
		QR_TRY(m.prefill(T, 0));
		QR_CK(cudaEventRecord(ev.b, st));
		double x;
		QR_TRY(ev.ms(&x));
		ms.push_back(x);
	}
	QR_TRY(check_logits(m, (size_t)T * m.d.vocab, "prefill"));
	out[0] = median(ms);
	out[1] = *std::min_element(ms.begin(), ms.end());
	out[2] = *std::max_element(ms.begin(), ms.end());
	put(out, nout, 3, T / (out[0] * 1e-3));
	// One profiled pass: events at every stage boundary (they add a little).
	Prof pf;
	QR_TRY(m.reset());
	m.prof = &pf;
	const int r = m.prefill(T, 0);
	m.prof = nullptr;
	QR_TRY(r);
	double st_ms[ST_COUNT];
	QR_TRY(pf.sum(st_ms));
	for (int i = 0; i < ST_COUNT; i++)
		put(out, nout, 4 + i, st_ms[i]);
	return QR_OK;
}

// Bytes a decode step must read: every weight but the embedding table (one
// row of it) and the routed experts a token does not choose.
static double decode_bytes(const DevModel &m) {
	double b = (double)m.w_bytes - (double)m.d.vocab * m.d.hidden * 2;
	for (auto &bp : m.blocks)
		if (bp->moe)
			b -= (double)(m.d.experts - m.d.topk) * 3 * m.d.moe_inter * m.d.hidden * 2;
	return b;
}

// Greedy decode after a cached prefill of T tokens: `steps` timed graph
// replays (each its own event pair), then a few plain-launch steps.
static int bench_decode(DevModel &m, int T, int steps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	QR_ARG(steps > 0 && T + steps + 17 <= m.d.max_tokens, "decode bench: %d + %d steps exceed max_tokens", T, steps);
	QR_TRY(m.reset());
	QR_TRY(m.ensure_acts(T));
	k_random_ids<<<cdiv(T, 256), 256, 0, st>>>(m.ids.as<int32_t>(), T, 99, m.d.vocab);
	QR_CKL("random_ids");
	QR_TRY(m.prefill(T, 1));
	QR_TRY(m.capture_greedy());
	QR_TRY(set_dev_int(m.ids.as<int>(), 17 % m.d.vocab, st)); // the first token fed
	QR_TRY(set_dev_int(m.d_pos.as<int>(), m.pos, st));
	for (int i = 0; i < 3; i++) { // warm-up replays
		QR_CK(cudaGraphLaunch(m.graph, st));
		m.pos++;
	}
	std::vector<double> ms;
	EvPair ev;
	QR_TRY(ev.make());
	for (int i = 0; i < steps; i++) {
		QR_CK(cudaEventRecord(ev.a, st));
		QR_CK(cudaGraphLaunch(m.graph, st));
		QR_CK(cudaEventRecord(ev.b, st));
		m.pos++;
		double x;
		QR_TRY(ev.ms(&x));
		ms.push_back(x);
	}
	QR_TRY(check_logits(m, m.d.vocab, "decode"));
	out[0] = median(ms);
	out[1] = *std::min_element(ms.begin(), ms.end());
	out[2] = *std::max_element(ms.begin(), ms.end());
	// The same step as plain launches (no graph): the launch overhead.
	std::vector<double> plain;
	for (int i = 0; i < 5; i++) {
		QR_CK(cudaEventRecord(ev.a, st));
		QR_TRY(m.decode_step(1, st));
		QR_CK(cudaEventRecord(ev.b, st));
		m.pos++;
		double x;
		QR_TRY(ev.ms(&x));
		plain.push_back(x);
	}
	put(out, nout, 3, median(plain));
	put(out, nout, 4, decode_bytes(m) / (out[0] * 1e-3) / 1e9);
	// One profiled plain-launch step: where the step's time goes (each
	// stage boundary an event, so the sum is above the graph's time).
	Prof pf;
	m.prof = &pf;
	const int r = m.decode_step(1, st);
	m.prof = nullptr;
	QR_TRY(r);
	m.pos++;
	double st_ms[ST_COUNT];
	QR_TRY(pf.sum(st_ms));
	for (int i = 0; i < ST_COUNT; i++)
		put(out, nout, 5 + i, st_ms[i]);
	return QR_OK;
}

// Block li's token mixer alone on T rows of N(0, 1) normed input from an
// empty cache (a prefill at position 0): reps passes after one warm-up,
// each between two events, the caches emptied between passes (untimed).
static int bench_mixer(DevModel &m, int li, int T, int reps, double *out, int nout) {
	cudaStream_t st = g_qr.stream;
	QR_ARG(li >= 0 && li < (int)m.blocks.size() && T <= m.d.max_tokens,
	       "mixer bench: layer %d of %d, %d tokens (max_tokens %d)", li, (int)m.blocks.size(), T, m.d.max_tokens);
	QR_TRY(m.ensure_acts(T));
	const size_t n = (size_t)T * m.d.hidden;
	QR_TRY(m.fill_normal(m.xn.as<bf16_t>(), n, 11));
	QR_CK(cudaMemsetAsync(m.x.p, 0, n * 4, st));
	std::vector<double> ms;
	EvPair ev;
	QR_TRY(ev.make());
	for (int i = -1; i < reps; i++) {
		QR_TRY(m.reset());
		QR_CK(cudaEventRecord(ev.a, st));
		QR_TRY(m.walk(T, 0, 0, T, li, true, st));
		QR_CK(cudaEventRecord(ev.b, st));
		double x;
		QR_TRY(ev.ms(&x));
		if (i >= 0)
			ms.push_back(x);
	}
	// Self-check: the residual stream holds the passes' outputs, all finite.
	QR_TRY(check_finite(m.x.as<float>(), n, "the mixer's output"));
	QR_TRY(m.reset());
	out[0] = median(ms);
	out[1] = *std::min_element(ms.begin(), ms.end());
	out[2] = *std::max_element(ms.begin(), ms.end());
	put(out, nout, 3, T / (out[0] * 1e-3));
	return QR_OK;
}

extern "C" int qr_model_bench(void *model, int what, int t, int variant, int reps, double *out, int nout) {
	QR_TRY(qr_require());
	QR_ARG(model && out && nout >= 3 && reps > 0, "qr_model_bench: need a model, out[3+] and reps > 0");
	for (int i = 0; i < nout; i++)
		out[i] = NAN;
	DevModel &m = *as_model(model);
	QR_ARG(!m.f32 || what == QR_MBENCH_PREFILL,
	       "qr_model_bench: the fp32 model has no decode graph or mixer benchmark; time those on the bf16 model");
	switch (what) {
	case QR_MBENCH_PREFILL:
		return bench_prefill(m, t, reps, out, nout);
	case QR_MBENCH_DECODE:
		return bench_decode(m, t, variant > 0 ? variant : reps, out, nout);
	case QR_MBENCH_MIXER:
		return bench_mixer(m, variant, t, reps, out, nout);
	}
	qr_set_error("qr_model_bench: unknown benchmark %d", what);
	return QR_EARG;
}
