package attention

import "fmt"

// Dims are the shapes of one attention-core call for one sequence.
// Query head h reads KV head h / (NH/NKV) (GQA), so NH must be a multiple
// of NKV.
type Dims struct {
	T   int // new query tokens
	S   int // keys in the cache including the new ones (S ≥ T)
	NH  int // query heads
	NKV int // key/value heads
	D   int // head dim
}

// Kernel computes causal softmax attention for one sequence.
//
//   - q [T, NH, D]: queries after q_norm and RoPE.
//   - k, v [S, NKV, D]: the whole cache, past then new. Query t sits at
//     absolute position S−T+t and sees keys 0..S−T+t.
//   - scale multiplies the scores (D^-1/2 for Qwen3.5).
//   - out [T, NH, D]: softmax(q·kᵀ·scale)·v per head, before the output gate;
//     written in full (its old contents are arbitrary: layers lend pooled buffers).
//
// Naive (full score rows), Chunked (tiled, online softmax, O(T) memory) and
// the CUDA backend satisfy it.
type Kernel interface {
	Forward(out, q, k, v []float32, d Dims, scale float32) error
}

// Check validates the dims and every slice length.
func (d Dims) Check(out, q, k, v []float32) error {
	if d.T < 0 || d.S < d.T || d.NH <= 0 || d.NKV <= 0 || d.D <= 0 {
		return fmt.Errorf("attention: bad dims %+v", d)
	}
	if d.NH%d.NKV != 0 {
		return fmt.Errorf("attention: query heads %d not a multiple of KV heads %d", d.NH, d.NKV)
	}
	if len(q) != d.T*d.NH*d.D || len(out) != d.T*d.NH*d.D {
		return fmt.Errorf("attention: q has %d and out %d values, want %d for %+v", len(q), len(out), d.T*d.NH*d.D, d)
	}
	if len(k) != d.S*d.NKV*d.D || len(v) != d.S*d.NKV*d.D {
		return fmt.Errorf("attention: k has %d and v %d values, want %d for %+v", len(k), len(v), d.S*d.NKV*d.D, d)
	}
	return nil
}
