// model.cuh: the whole Qwen3.5/3.6 text model resident on the device (spec
// §3): bf16 weights, an fp32 residual stream, fp32 recurrent states, bf16
// conv states and KV caches; or, with d.f32, all of it in fp32 (the
// "cuda-fp32" reference). model.cu holds its buffers, plan.cu runs the bf16
// ops (prefill and a graph-capturable decode step), plan_f32.cu and
// moe_f32.cu the fp32 ones; model_api.cu is its C ABI and benchmarks.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common.cuh"
#include "internal.cuh"
#include "gdn_layer.cuh"

// Capture what body launches on the library stream into *out (stream
// capture, then instantiate); on failure nothing is kept.
int capture_graph(const std::function<int()> &body, cudaGraphExec_t *out);

// *p = v on stream st (a one-thread kernel: stream-ordered, graph-safe).
int set_dev_int(int *p, int v, cudaStream_t st);

// One gated attention layer's weights and KV cache.
struct AttnW {
	DevBuf w_qkv;        // [nh·2hd + 2·nkv·hd, H]: q_proj rows, then k_proj, then v_proj
	DevBuf w_o;          // [H, nh·hd]
	DevBuf qnorm, knorm; // fp32 [hd], (1+w)
	DevBuf kc, vc;       // bf16 [cap, nkv, hd]
};

// Limits of the device router (moe.cu): experts per layer, experts per token.
#define MOE_MAX_EXPERTS 8192
#define MOE_MAX_TOPK 64
#define MOE_BM 128 // grouped-GEMM rows per tile
// Rows of the router matrix and columns of its logits: E experts, the shared
// gate, zero rows up to a multiple of 8 (an aligned leading dimension keeps
// cuBLAS on its tensor-core kernels).
static inline int moe_router_rows(int E) { return (E + 1 + 7) / 8 * 8; }

// The two expert GEMMs and GEMVs: gate/up with SwiGLU, and down.
enum { MOE_GATEUP = 0, MOE_DOWN = 1 };

// Decode rows up to which the MoE experts run as gathered GEMVs per (row,
// expert) slot; past it, as the grouped GEMMs.
#define MOE_GATHER_ROWS 64

// One sparse MoE MLP's weights (E experts of width I, a shared expert of Is).
struct MoeW {
	DevBuf router;      // [moe_router_rows(E), H]: the router's E rows, the shared expert's gate row, zeros
	DevBuf shared_gu;   // [2Is, H]: gate_proj rows, then up_proj rows
	DevBuf shared_down; // [H, Is]
	DevBuf gate_up;     // [E, 2I, H]: per expert its gate rows, then its up rows
	DevBuf down;        // [E, H, I]
};

// The MoE block's activations for up to T tokens (n = T·k routed rows),
// shared by every sparse layer.
struct MoeActs {
	DevBuf logits;                 // fp32 [T, moe_router_rows(E)]: router logits, the shared gate's, zeros
	DevBuf ids, w, idf;            // [n]: chosen experts (int32), their weights, the ids as floats (trace)
	DevBuf rank, pos, perm;        // int32 [n]: rank within the expert, grouped row of a slot, slot of a row
	DevBuf cnt, off, tiles;        // int32 [E], [E + 1], [E + 1]: rows per expert, their starts, tile starts
	DevBuf act;                    // bf16 [n, I]: SwiGLU of the grouped rows
	DevBuf y;                      // bf16 [n, H]: each grouped row's expert output
	DevBuf shared_act, shared_out; // bf16 [T, Is], fp32 [T, H]
	// The fp32 model: act, y and shared_act are fp32, gu [n, 2I] holds the
	// gate/up products before SwiGLU and topq [T, E] the router's sort queue.
	DevBuf gu, topq;
	int alloc(const qr_model_dims &d, int T, size_t &bytes);
};

// One decoder layer: a mixer and an MLP (SwiGLU, or the sparse MoE block)
// behind (1+w) RMSNorms.
struct Block {
	int kind = 0;              // 0 Gated DeltaNet, 1 attention
	int len = 0;               // tokens this block has consumed (its own position, for qr_model_layer)
	DevBuf in_norm, post_norm; // fp32 [H]
	DevBuf w_gu;               // dense MLP [2I, H]: gate_proj rows, then up_proj rows
	DevBuf w_down;             // dense MLP [H, I]
	std::unique_ptr<GdnLayer> gdn;
	std::unique_ptr<AttnW> attn;
	std::unique_ptr<MoeW> moe; // set: the MLP is the MoE block (w_gu, w_down unused)
};

// One step of the block plan (qr_step, with its stage names copied).
struct PlanStep {
	int op = 0, layer = -1, arg = 0;
	std::string rec[QR_STEP_RECORDS]; // empty: not recorded
};

// Decode updates conv_state[0] in place (graph-stable pointers): after a
// prefill's ping-pong, bring L's conv state back there.
struct GdnLayer;
int settle_conv_state(GdnLayer &L, int kconv, cudaStream_t st);

// Whether op is part of a token mixer (the mixer benchmark runs those alone).
bool plan_mixer_op(int op);

// x[t, :] = E[ids[t], :] widened to fp32 for T tokens.
int launch_embed(float *x, const bf16_t *E, const int32_t *ids, int T, int H, cudaStream_t st);
// The same from an fp32 table.
int launch_embed_f32(float *x, const float *E, const int32_t *ids, int T, int H, cudaStream_t st);
// y[m, n] (row stride ldy) = x[m, k] · W[n, k]ᵀ in fp32 with TF32 off (cuBLAS's
// pedantic compute type); acc adds to y.
int qr_gemm_f32(float *y, int ldy, const float *x, int ldx, const float *w, int ldw, int m, int n, int k, int acc,
                cudaStream_t st);

// Prefill stages timed apart by the profiler (qr_model_stage_name).
enum {
	ST_NORM = 0, // embedding, RMSNorms
	ST_GDN_PROJ,
	ST_GDN_CONV,
	ST_GDN_CORE,
	ST_GDN_NORM,
	ST_ATT_PROJ,
	ST_ATT_PREP,
	ST_ATT_CORE,
	ST_MLP_GU,
	ST_MLP_ACT,
	ST_MLP_DOWN,
	ST_LM_HEAD,
	ST_MOE_ROUTE,   // router product, top-k, grouping
	ST_MOE_EXPERTS, // the grouped expert GEMMs
	ST_MOE_SHARED,  // shared expert and the combine
	ST_COUNT
};

// Stage profiler: an event at each stage boundary of one pass; the time
// between two marks is charged to the stage the first one opened.
struct Prof {
	std::vector<cudaEvent_t> ev;
	std::vector<int> stage;
	size_t used = 0;
	~Prof() {
		for (cudaEvent_t e : ev)
			cudaEventDestroy(e);
	}
	int mark(int s, cudaStream_t st) {
		if (used == ev.size()) {
			cudaEvent_t e;
			QR_CK(cudaEventCreate(&e));
			ev.push_back(e);
			stage.push_back(0);
		}
		stage[used] = s;
		QR_CK(cudaEventRecord(ev[used++], st));
		return QR_OK;
	}
	// Sum the intervals into ms[ST_COUNT] (synchronises).
	int sum(double *ms) {
		for (int i = 0; i < ST_COUNT; i++)
			ms[i] = 0;
		if (used == 0)
			return QR_OK;
		QR_CK(cudaEventSynchronize(ev[used - 1]));
		for (size_t i = 0; i + 1 < used; i++) {
			float x = 0;
			QR_CK(cudaEventElapsedTime(&x, ev[i], ev[i + 1]));
			if (stage[i] >= 0 && stage[i] < ST_COUNT)
				ms[stage[i]] += x;
		}
		return QR_OK;
	}
};

// Stage recording for tracing (model_trace.cu): every stage the CPU
// recorder names, copied to the host as fp32 while a trace is on; nothing
// is copied otherwise.
struct TraceEntry {
	std::string name;
	int dims[3];
	std::vector<float> data;
};
struct Trace {
	std::vector<TraceEntry> entries;
	std::vector<std::string> only; // the stages to record (qr_model_trace_only); empty: every stage
	int cap = 0;      // tokens the buffers below hold
	DevBuf tmp;       // fp32 [cap, H]: a projection's output before its residual add
	DevBuf tmp2;      // fp32 [cap, H]: a second one (the MoE block's whole output)
	DevBuf ones_gate; // bf16 [cap, nh·2hd] of 12672 (σ = 1): attention before its output gate
};

// Page-locked host memory (cudaMallocHost): copies to and from it can be
// captured into a graph and run at full link speed.
struct PinnedBuf {
	void *p = nullptr;
	size_t cap = 0; // bytes held
	PinnedBuf() {}
	PinnedBuf(const PinnedBuf &) = delete;
	PinnedBuf &operator=(const PinnedBuf &) = delete;
	~PinnedBuf() {
		if (p)
			cudaFreeHost(p);
	}
	// At least n bytes (a smaller buffer is replaced; its contents are lost).
	int alloc(size_t n) {
		if (p && n <= cap)
			return QR_OK;
		if (p)
			cudaFreeHost(p);
		cap = 0;
		cudaError_t e = cudaMallocHost(&p, n);
		if (e != cudaSuccess) {
			p = nullptr;
			return qr_cuda_fail(e, "cudaMallocHost", __FILE__, __LINE__);
		}
		cap = n;
		return QR_OK;
	}
	template <typename T> T *as() const { return (T *)p; }
};

// The MoE router (moe_route.cu) for T rows of logits [T, ld ≥ E]: ids, w
// [T, k]; idf (may be null) the ids as floats.
int launch_moe_route(const float *logits, int ld, int T, int E, int k, int norm, int32_t *ids, float *w, float *idf,
                     cudaStream_t st);

// Group the n = T·k routed slots in A.ids by expert (moe.cu): each slot's
// rank within its expert (A.rank), the experts' row counts, starts and
// MOE_BM-row tile starts (A.cnt, A.off, A.tiles), each slot's grouped row
// (A.pos) and each row's slot (A.perm). Deterministic: slot order within an
// expert.
int launch_moe_group(MoeActs &A, int n, int E, cudaStream_t st);
// The operands of decode's expert MLPs: A's ids, act, shared_act, y and
// shared_out; M's weights; XN the normed rows; n = T·k routed slots.
struct MoeDecodeArgs {
	MoeActs *A;
	const MoeW *M;
	const bf16_t *XN;
	int n, T, k, H, I, Is;
	int shared = 0; // shared-expert slots: T, or 0 where they run elsewhere (the one-row step's side stream)
};
// Decode's expert MLPs as gathered GEMVs (moe_decode.cu): gate/up with
// SwiGLU into act [n, I] and shared_act [T, Is], then down into y [n, H]
// bf16 and shared_out [T, H] fp32 (slot j < n is expert ids[j] of token
// j / k, slot n + t < n + a.shared token t's shared expert); shape <
// QR_MOE_DECODE_SHAPES picks the launch shape.
int launch_moe_decode_gemvs(int shape, const MoeDecodeArgs &a, cudaStream_t st);
// Tiles of the grouped GEMMs: at most one partial tile per expert with rows.
static inline unsigned moe_max_tiles(int n, int E) { return cdiv(n, MOE_BM) + (unsigned)(n < E ? n : E); }
// X[t] += Σ_j w[t, j] · Y[pos[t·k + j]] + σ(gate logit) · S[t] with fp32
// expert rows Y (the fp32 model); eo and mo as in moe.cu's combine.
int launch_moe_combine_f32(float *X, const float *Y, const int32_t *pos, const float *w, const float *S,
                           const float *gate_logit, int ldg, int T, int H, int k, float *eo, float *mo,
                           cudaStream_t st);

// y[i] += x[i] for n fp32 values (model_trace.cu).
int launch_add_f32(float *y, const float *x, size_t n, cudaStream_t st);
// The same for fp32 rows, any I (the fp32 model).
int launch_swiglu_rows_f32(float *act, const float *gu, int T, int I, cudaStream_t st);
// act[t, i] = SiLU(gu[t, i]) · gu[t, I + i] (bf16 rows, I % 8 == 0).
int launch_swiglu_rows(bf16_t *act, const bf16_t *gu, int T, int I, cudaStream_t st);

// y[m, n] += x[m, k] · Wᵀ (fp32 y: the residual add fused into the GEMM).
int model_gemm_acc(float *y, const bf16_t *x, const bf16_t *w, int m, int n, int k, cudaStream_t st);

struct DevModel {
	qr_model_dims d{};
	bool f32 = false; // the fp32 model (d.f32): every matrix, activation and cache in fp32
	// Bytes of one matrix, activation or cache element.
	size_t es() const { return f32 ? 4 : 2; }
	int NQKV = 0; // rows of an attention layer's w_qkv
	std::vector<std::unique_ptr<Block>> blocks;
	DevBuf embed, lm_head, final_norm;
	GdnActs gacts; // shared by every GDN layer
	MoeActs macts; // shared by every sparse MLP
	bool any_moe = false, any_dense = false;
	int pos = 0;   // position of the next token (host copy)
	DevBuf d_pos;  // int: the same on the device (decode reads it there)
	// Activations for up to tcap tokens.
	int tcap = 0;
	DevBuf ids;    // int32 [tcap]; ids[0] is the decode step's token
	DevBuf x;      // fp32 [T, H] residual stream
	DevBuf xn;     // bf16 [T, H] normed input of a mixer or MLP
	DevBuf big;    // bf16 [T, max(NQKV, 2I)]: attention q|k|v|gate or MLP gate|up
	DevBuf act;    // bf16 [T, I] SwiGLU output
	DevBuf qn, ya; // bf16 [T, nh·hd]: normed+rotated queries, gated attention output
	DevBuf logits; // fp32 [lcap, V]
	int lcap = 0;
	DevBuf part;   // decode attention partials
	DevBuf amax;   // the greedy step's argmax candidates: fp32 values, then int32 indices
	size_t w_bytes = 0, s_bytes = 0, a_bytes = 0;
	cudaGraphExec_t graph = nullptr;      // the greedy decode step, captured on first use
	cudaGraphExec_t step_graph = nullptr; // the plain decode step (logits, no argmax), likewise
	// Batch rows (batch.cu): every state and cache holds `rows` rows, row r
	// at r times one row's size; all rows are at the same position. Row 0 is
	// what the one-row paths use; a prefill runs row after row through
	// RowView, a decode step runs every row at once (batch_graph).
	int rows = 1;
	cudaGraphExec_t batch_graph = nullptr; // the batched plain decode step of `rows` rows
	// The plain step's host ends: h_step {id, pos} is copied in before the
	// step's graph, the logits out to h_logits [V] after it, all async, so a
	// decode call is one synchronisation.
	PinnedBuf h_step, h_logits;
	// Events around the device work of the last qr_model_forward (after its
	// inputs are on the device, before the logits leave it): fwd_ms.
	cudaEvent_t fwd_ev[2] = {nullptr, nullptr};
	float fwd_ms = -1.0f;
	std::vector<PlanStep> plan;      // the decoder, as Go built it (qr_model_plan)
	// The one-row decode's side stream (moe.cu): a sparse layer's shared
	// expert runs there beside its router and routed experts, forked after
	// the post-norm (ev_fork) and joined before the combine (ev_join).
	cudaStream_t side = nullptr;
	cudaEvent_t ev_fork = nullptr, ev_join = nullptr;
	Prof *prof = nullptr;            // set while a profiled pass runs
	std::unique_ptr<Trace> trace;    // set while tracing (model_trace.cu)

	~DevModel() {
		drop_graphs();
		for (cudaEvent_t e : {fwd_ev[0], fwd_ev[1], ev_fork, ev_join})
			if (e)
				cudaEventDestroy(e);
		if (side)
			cudaStreamDestroy(side);
	}
	// Record fwd_ev[i] on st (creating the pair on first use).
	int fwd_mark(int i, cudaStream_t st) {
		for (cudaEvent_t &e : fwd_ev)
			if (!e)
				QR_CK(cudaEventCreate(&e));
		QR_CK(cudaEventRecord(fwd_ev[i], st));
		return QR_OK;
	}
	// After the stream synchronised: fwd_ms = the time between the marks.
	int fwd_elapsed() {
		QR_CK(cudaEventElapsedTime(&fwd_ms, fwd_ev[0], fwd_ev[1]));
		return QR_OK;
	}
	int mark(int s, cudaStream_t st) { return prof ? prof->mark(s, st) : QR_OK; }

	int create(const qr_model_dims &dd, const int32_t *kinds);
	int random(uint64_t seed);
	int locate(int layer, int which, int part, DevBuf **buf, size_t *off, size_t *count, bool *mat);
	int set(int layer, int which, int part, const void *src, size_t n, int src_bf16);
	int get(int layer, int which, int part, void *dst, size_t n); // bf16 matrices, fp32 vectors
	int reset();
	int ensure_acts(int T);
	int ensure_logits(int rows);
	// ids [T] already in `ids`; logits for every row or the last.
	int prefill(int T, int last_only);
	// One token (ids[0]) at position *d_pos: no host synchronisation, no
	// allocation, so it can be captured into a graph. greedy: the argmax of
	// the logits replaces ids[0] and *d_pos advances.
	int decode_step(int greedy, cudaStream_t st);
	int capture_greedy();
	int capture_step();
	// Tracing (model_trace.cu); each is a no-op unless trace is set. rec
	// copies rows × cols of src (row stride ld elements, bf16 or fp32, times
	// mul) under step s's record name `slot` (nothing if the plan left it
	// empty) with dims d.
	int rec(const PlanStep &s, int slot, const void *src, int bf, size_t ld, int rows, int cols, int d0, int d1,
	        int d2, float mul = 1.0f);
	int trace_grow(int T);
	// Whether step s's record `slot` is taken: a trace is on, the plan names
	// the slot, and the trace wants it. Where none is taken the fast path runs.
	bool tracing(const PlanStep &s, int slot) const;
	// Record step s's outputs after it ran, the same in both precisions (the
	// buffers have one layout; bf16 or fp32 elements): every record but those
	// taken inside an op (a GEMM's product before its residual add, the
	// attention core before its gate).
	int rec_step(const PlanStep &s, int T, int rows);
	// The trace's two fp32 [T, H] scratch buffers, or nulls when not tracing.
	int trace_scratch(int T, float **a, float **b);
	// The plan (plan.cu): check and keep it; walk it over T rows (decode:
	// the one-row forms; greedy: the head takes the argmax), only layer
	// `only`'s steps when only >= -1, only mixer ops when mixer_only; rows:
	// the rows the final norm and the head compute in a prefill.
	int set_plan(const qr_step *steps, int n, const char *names, size_t names_len);
	int walk(int T, int decode, int greedy, int rows, int only, bool mixer_only, cudaStream_t st);
	int step_prefill(const PlanStep &s, int T, int rows, cudaStream_t st);
	int step_decode(const PlanStep &s, int greedy, cudaStream_t st);
	// The fp32 model's form of every op (plan_f32.cu), for any T.
	int step_f32(const PlanStep &s, int T, int rows, cudaStream_t st);
	int moe_step_f32(const PlanStep &s, int T, cudaStream_t st);
	// y += x Wᵀ in fp32, recorded first as step s's record slot when tracing.
	int gemm_acc_rec_f32(const PlanStep &s, int slot, float *y, const float *x, const float *w, int m, int n, int k,
	                     cudaStream_t st);
	// Greedy decoding of the fp32 model: n one-row walks, each followed by
	// the argmax (no graph).
	int greedy_plain(int32_t first_id, int n, int32_t *out_ids);
	// The sparse MLP's ops (moe.cu) on step s's layer: T tokens; decode takes
	// the gathered-GEMV forms (one token, or a few batch rows), else the
	// grouped GEMMs (graph-capturable either way).
	int moe_step(const PlanStep &s, int T, int decode, cudaStream_t st);
	// The one-row step's shared expert of M on the side stream (GEMV launch
	// shape `shape`); the combine waits for ev_join.
	int shared_expert_side(const MoeW &M, int shape, cudaStream_t st);
	// ids[0] = argmax of the logits, and *d_pos advances (the greedy step).
	int launch_argmax_next(cudaStream_t st);
	// Free the captured decode graphs (their pointers or plan went stale).
	void drop_graphs();
	// dst[n] = N(0, 1) bf16 from seed (benchmark inputs).
	int fill_normal(bf16_t *dst, size_t n, uint64_t seed);
	// Block li alone on host x [T, H] (teacher forcing), continuing that
	// block's own state and position; out gets the block's output.
	int layer(int li, const float *x, int T, float *out);
	// y += x Wᵀ; when tracing, the product is recorded first as step s's
	// record `slot`.
	int gemm_acc_rec(const PlanStep &s, int slot, float *y, const bf16_t *x, const bf16_t *w, int m, int n, int k,
	                 cudaStream_t st);
	// The attention core before its output gate, recorded as s's record slot.
	int rec_attn_core(const PlanStep &s, int slot, const AttnW &A, const bf16_t *qn, int T, cudaStream_t st);
	// Capture decode_step(greedy) into *out (stream capture, then
	// instantiate); the plain step (greedy 0) poisons the logits with NaN first.
	int capture(int greedy, cudaGraphExec_t *out);
	// One plain decode step of token id at pos (graph replay); logits, if
	// not null, get the V logits.
	int decode_one(int32_t id, float *logits);

	// ---- batch rows (batch.cu) ----
	// Give every state and cache n rows (zeroed: position 0). Nothing
	// changes if an allocation fails.
	int set_rows(int n);
	// Bytes of one row of an attention layer's K (or V) cache, of a GDN
	// layer's conv state buffer and of its recurrent state.
	size_t kv_row_bytes() const { return (size_t)d.max_tokens * d.nkv * d.hd * es(); }
	size_t conv_row_bytes(const GdnLayer &L) const { return (size_t)d.kconv * L.C * es(); }
	size_t rec_row_bytes() const { return (size_t)d.nv * d.dk * d.dv * 4; }
	// Move every state pointer by `by` rows (RowView: a one-row path on row r).
	void shift_rows(long by);
	// ids [rows, t]: t > 1 (or the fp32 model) prefills each row in turn from
	// the same position; t = 1 on the bf16 model is one batched decode step.
	// logits [rows, last_only ? 1 : t, V] (may be null).
	int forward_rows(const int32_t *ids_h, int t, int last_only, float *logits);
	// The batched step: every op's form over `rows` rows (GEMMs, and the
	// decode kernels over rows), graph-capturable.
	int step_batch(const PlanStep &s, cudaStream_t st);
	int walk_batch(cudaStream_t st);
	int decode_rows(const int32_t *ids_h, float *logits);
};

// Runs a one-row path on batch row r: every state pointer of m is moved to
// row r while it lives.
struct RowView {
	DevModel &m;
	long r;
	RowView(DevModel &mm, int row) : m(mm), r(row) { m.shift_rows(r); }
	~RowView() { m.shift_rows(-r); }
	RowView(const RowView &) = delete;
	RowView &operator=(const RowView &) = delete;
};
