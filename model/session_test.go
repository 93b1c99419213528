package model

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// bf16Backends lists the backends whose matrix products round activations
// to bf16 (the "cuda" backend: cuBLAS bf16 tensor cores); the others compute
// in float32. The tests hold them to bf16RelL2, the bound measured for one
// bf16 layer in docs/perf-cuda.md, instead of the float32 bars.
var bf16Backends = map[string]bool{"cuda": true}

const bf16RelL2 = 1e-2

// Cached decoding must equal a full forward: prefill, then single tokens,
// then a multi-token continuation (spec §3.4), on every golden model.
// Bar: relative L2 ≤ 1e-5 per position in float32 (the issue's); the two
// paths differ only in how the core and attention group their work. bf16
// backends: bf16RelL2.
func TestPrefillDecodeEqualsFullForward(t *testing.T) {
	root, cases := goldenCases(t)
	for _, backend := range BackendNames() {
		be, err := NewBackend(backend)
		if err != nil {
			t.Logf("skipping backend %s: %v", backend, err)
			continue
		}
		for _, c := range cases {
			t.Run(backend+"/"+c.Name, func(t *testing.T) {
				dir := filepath.Join(root, c.Name)
				m, err := Load(dir)
				require.NoError(t, err)
				defer m.Close()
				ids := readInputs(t, dir).IDs[0]
				full, err := m.NewSession().Forward(ids, be, Options{})
				require.NoError(t, err)
				v := m.Config.VocabSize

				// Prefill most of the prompt, decode 3 single tokens, then
				// continue with the remaining tokens in one call.
				s := m.NewSession()
				n := len(ids)
				pre := n - 7
				var got []float32
				lg, err := s.Forward(ids[:pre], be, Options{})
				require.NoError(t, err)
				got = append(got, lg.Data...)
				for i := pre; i < pre+3; i++ {
					lg, err = s.Forward(ids[i:i+1], be, Options{})
					require.NoError(t, err)
					got = append(got, lg.Data...)
				}
				lg, err = s.Forward(ids[pre+3:], be, Options{})
				require.NoError(t, err)
				got = append(got, lg.Data...)
				assert.Equal(t, n, s.Pos())
				require.Len(t, got, len(full.Data))
				worst := 0.0
				for p := 0; p < n; p++ {
					worst = max(worst, tensor.RelL2(got[p*v:(p+1)*v], full.Data[p*v:(p+1)*v]))
				}
				t.Logf("worst per-position rel L2 %.2e", worst)
				bar, lastBar := 1e-5, 1e-6
				if bf16Backends[backend] {
					bar, lastBar = bf16RelL2, bf16RelL2
				}
				assert.LessOrEqual(t, worst, bar)

				// LastOnly returns the last row of the full logits.
				s.Reset()
				last, err := s.Forward(ids, be, Options{LastOnly: true})
				require.NoError(t, err)
				assert.LessOrEqual(t, tensor.RelL2(last.Data, full.Data[(n-1)*v:]), lastBar)
			})
		}
	}
}

func TestRandomModelIsDeterministic(t *testing.T) {
	cfg, err := ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 300
	be, _ := NewBackend("naive")
	a, err := NewRandom(cfg, 7, true)
	require.NoError(t, err)
	b, err := NewRandom(cfg, 7, true)
	require.NoError(t, err)
	c, err := NewRandom(cfg, 8, true)
	require.NoError(t, err)
	ids := []int{1, 5, 299, 0}
	la, err := a.NewSession().Forward(ids, be, Options{})
	require.NoError(t, err)
	lb, _ := b.NewSession().Forward(ids, be, Options{})
	lc, _ := c.NewSession().Forward(ids, be, Options{})
	assert.Equal(t, la.Data, lb.Data)
	assert.Greater(t, tensor.RelL2(lc.Data, la.Data), 0.1, "another seed gives another model")
	_, err = a.NewSession().Forward([]int{300}, be, Options{})
	assert.ErrorContains(t, err, "outside the vocabulary")
	_, err = a.NewSession().Forward(nil, be, Options{})
	assert.ErrorIs(t, err, ErrEmpty)
}
