package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// packedDenseJSON is a dense qwen3_5 text config with odd widths (no
// vector kernel divides them), its layer_types filled in by packedCases.
const packedDenseJSON = `{"model_type":"qwen3_5_text","hidden_size":40,"num_hidden_layers":%d,"layer_types":[%s],
"num_attention_heads":2,"num_key_value_heads":1,"head_dim":12,"linear_num_key_heads":2,"linear_num_value_heads":2,
"linear_key_head_dim":8,"linear_value_head_dim":10,"linear_conv_kernel_dim":4,"intermediate_size":44,"vocab_size":64,
"rms_norm_eps":1e-6,"rope_theta":1e7,"partial_rotary_factor":0.5,"tie_word_embeddings":false}`

// packedCases are the tiny models packing is tested on: GDN alone,
// attention alone, both, and a hybrid MoE (Qwen3-Next's).
func packedCases(t *testing.T) map[string]*Model {
	dense := func(kinds ...string) []byte {
		return fmt.Appendf(nil, packedDenseJSON, len(kinds), `"`+strings.Join(kinds, `","`)+`"`)
	}
	out := map[string]*Model{}
	for name, js := range map[string][]byte{
		"gdn":       dense("linear_attention", "linear_attention"),
		"attention": dense("full_attention", "full_attention"),
		"hybrid":    dense("linear_attention", "full_attention", "linear_attention"),
		"moe":       []byte(nextConfigJSON),
	} {
		cfg, err := ParseConfig(js)
		require.NoError(t, err, name)
		m, err := NewRandom(cfg, 11, false)
		require.NoError(t, err, name)
		out[name] = m
	}
	return out
}

// recordAll runs ids on a fresh one-row runner and returns the logits
// and a copy of every stage recorded.
func recordAll(t *testing.T, m *Model, be *Backend, ids []int, segs []int) (*tensor.Tensor, map[string]*tensor.Tensor) {
	r, err := NewRunner(m, be, 1)
	require.NoError(t, err)
	stages := map[string]*tensor.Tensor{}
	rec := func(stage string, x *tensor.Tensor) {
		stages[stage] = &tensor.Tensor{Shape: slices.Clone(x.Shape), Data: slices.Clone(x.Data)}
	}
	lg, err := r.Forward([][]int{ids}, RunOptions{Logits: AllLogits, Record: rec, Segments: segs})
	require.NoError(t, err)
	return lg, stages
}

// packRows returns samples of the given lengths, their concatenation and
// their start rows.
func packRows(r *rand.Rand, vocab int, lens ...int) (samples [][]int, ids, segs []int) {
	for _, n := range lens {
		s := make([]int, n)
		for i := range s {
			s[i] = r.IntN(vocab)
		}
		segs = append(segs, len(ids))
		ids = append(ids, s...)
		samples = append(samples, s)
	}
	return samples, ids, segs
}

// A packed forward equals each sample run alone, bit for bit, on naive
// and chunked: the logits and every stage recorded, row by row (the
// state stages: the last sample's), for GDN, attention, hybrid and MoE
// models, with one-token samples, samples across and on the 64-token
// chunk edge, and short samples whose products stream. The runner is then
// at the last sample's length, and a further token continues it.
func TestPackedEqualsSamplesAlone(t *testing.T) {
	lens := []int{1, 5, 70, 1, 64, 3, 130, 9}
	if testing.Short() {
		lens = []int{1, 5, 70, 1, 3, 9}
	}
	for name, m := range packedCases(t) {
		for _, bn := range []string{"naive", "chunked"} {
			t.Run(name+"/"+bn, func(t *testing.T) {
				be, err := ParseBackend(bn)
				require.NoError(t, err)
				r := rand.New(rand.NewPCG(1, 2))
				samples, ids, segs := packRows(r, m.Config.VocabSize, lens...)
				lg, got := recordAll(t, m, be, ids, segs)
				v := m.Config.VocabSize
				for i, s := range samples {
					want, wantStages := recordAll(t, m, be, s, nil)
					a, b := segs[i], segs[i]+len(s)
					require.True(t, slices.Equal(want.Data, lg.Data[a*v:b*v]), "sample %d (%d tokens): logits differ", i, len(s))
					for stage, w := range wantStages {
						g := got[stage]
						require.NotNil(t, g, "stage %s not recorded packed", stage)
						if strings.HasSuffix(stage, "final_state") {
							if i == len(samples)-1 {
								require.True(t, slices.Equal(w.Data, g.Data), "%s: not the last sample's", stage)
							}
							continue
						}
						require.Equal(t, len(ids), g.Shape[0], stage)
						require.Equal(t, w.Shape[1:], g.Shape[1:], stage)
						row := len(w.Data) / len(s)
						require.True(t, slices.Equal(w.Data, g.Data[a*row:b*row]), "sample %d (%d tokens): stage %s differs", i, len(s), stage)
					}
				}

				// The runner continues the last sample (as one that ran it
				// alone, then the next tokens in a call of their own).
				pr, err := NewRunner(m, be, 1)
				require.NoError(t, err)
				_, err = pr.Forward([][]int{ids}, RunOptions{Logits: NoLogits, Segments: segs})
				require.NoError(t, err)
				last := samples[len(samples)-1]
				require.Equal(t, len(last), pr.Pos())
				next := []int{7, 3}
				gotNext, err := pr.Forward([][]int{next}, RunOptions{Logits: AllLogits})
				require.NoError(t, err)
				alone, err := NewRunner(m, be, 1)
				require.NoError(t, err)
				_, err = alone.Forward([][]int{last}, RunOptions{Logits: NoLogits})
				require.NoError(t, err)
				wantNext, err := alone.Forward([][]int{next}, RunOptions{Logits: AllLogits})
				require.NoError(t, err)
				assert.True(t, slices.Equal(wantNext.Data, gotNext.Data), "the continuation differs from the last sample's")
			})
		}
	}
}

// One segment is the unpacked forward.
func TestPackedOneSegmentIsUnpacked(t *testing.T) {
	m := packedCases(t)["hybrid"]
	be, err := ParseBackend("chunked")
	require.NoError(t, err)
	_, ids, _ := packRows(rand.New(rand.NewPCG(3, 4)), m.Config.VocabSize, 77)
	want, _ := recordAll(t, m, be, ids, nil)
	got, _ := recordAll(t, m, be, ids, []int{0})
	assert.True(t, slices.Equal(want.Data, got.Data))
}

// Bad segments, a runner past position 0 and last-only logits are
// refused before any row advances.
func TestPackedRefusals(t *testing.T) {
	m := packedCases(t)["hybrid"]
	be, err := ParseBackend("chunked")
	require.NoError(t, err)
	r, err := NewRunner(m, be, 2)
	require.NoError(t, err)
	ids := [][]int{{1, 2, 3, 4}, {5, 6, 7, 8}}
	for _, c := range []struct {
		segs []int
		lg   Logits
		want string
	}{
		{[]int{1, 2}, AllLogits, "segment 0 starts at row 1"},
		{[]int{0, 2, 2}, AllLogits, "segment 2 starts at row 2"},
		{[]int{0, 4}, AllLogits, "outside the 4 packed rows"},
		{[]int{0, 2}, LastLogits, "not the last only"},
	} {
		_, err := r.Forward(ids, RunOptions{Logits: c.lg, Segments: c.segs})
		assert.ErrorContains(t, err, c.want, "%v", c.segs)
		assert.Equal(t, 0, r.Pos(), "%v", c.segs)
	}
	_, err = r.Forward(ids, RunOptions{Logits: NoLogits})
	require.NoError(t, err)
	_, err = r.Forward(ids, RunOptions{Logits: NoLogits, Segments: []int{0, 2}})
	assert.ErrorContains(t, err, "reset it first")
	require.NoError(t, r.Reset())
	_, err = r.Forward(ids, RunOptions{Logits: NoLogits, Segments: []int{0, 2}})
	require.NoError(t, err)
	assert.Equal(t, 2, r.Pos())
}
