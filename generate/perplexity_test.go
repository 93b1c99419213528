package generate

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/weights"

	"github.com/qwenref/qwenref/model"
)

// pplRelTol is the bar for perplexity and per-token NLL against
// transformers: relative 1e-5 (the logits themselves agree to ~1e-6).
const pplRelTol = 1e-5

func relErr(got, want float64) float64 { return math.Abs(got-want) / math.Max(math.Abs(want), 1e-30) }

func TestPerplexityWindows(t *testing.T) {
	ws, err := PerplexityWindows(10, 4, 2)
	require.NoError(t, err)
	assert.Equal(t, []PerplexityWindow{{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}}, ws)
	ws, err = PerplexityWindows(10, 4, 4)
	require.NoError(t, err)
	assert.Equal(t, []PerplexityWindow{{0, 4, 1}, {4, 8, 5}, {8, 10, 9}}, ws, "stride = ctx leaves each window's first token unscored")
	ws, err = PerplexityWindows(5, 8, 3)
	require.NoError(t, err)
	assert.Equal(t, []PerplexityWindow{{0, 5, 1}}, ws)
	for _, c := range [][3]int{{1, 4, 2}, {10, 1, 1}, {10, 4, 5}, {10, 4, 0}} {
		_, err := PerplexityWindows(c[0], c[1], c[2])
		assert.Error(t, err, c)
	}
	// Every token after the first is scored at most once, in order.
	for _, c := range [][3]int{{70, 23, 7}, {130, 65, 32}, {37, 12, 12}, {37, 37, 37}} {
		ws, err := PerplexityWindows(c[0], c[1], c[2])
		require.NoError(t, err)
		next := 1
		for _, w := range ws {
			assert.LessOrEqual(t, next, w.First, c)
			assert.Greater(t, w.First, w.Begin, c)
			assert.LessOrEqual(t, w.End-w.Begin, c[1], c)
			next = w.End
		}
		assert.Equal(t, c[0], next, c)
	}
}

func TestTokenNLL(t *testing.T) {
	// Uniform logits: −log(1/V) exactly; large offsets do not overflow.
	assert.InDelta(t, math.Log(4), TokenNLL([]float32{3, 3, 3, 3}, 2), 1e-12)
	assert.InDelta(t, math.Log(4), TokenNLL([]float32{1e30, 1e30, 1e30, 1e30}, 0), 1e-12)
	assert.Greater(t, TokenNLL([]float32{0, 10}, 0), 9.0)
}

// With one window covering the sequence, perplexity from our logits on
// every backend equals perplexity from transformers' logits in the goldens.
func TestPerplexityMatchesGoldenLogits(t *testing.T) {
	root, cases := goldenCases(t)
	for _, c := range cases {
		dir := filepath.Join(root, c.Name)
		in := readInputs(t, dir)
		exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
		require.NoError(t, err)
		want, _, err := exp.Float32("logits")
		exp.Close()
		require.NoError(t, err)
		m, err := model.Load(dir)
		require.NoError(t, err)
		v := m.Config.VocabSize
		for b, ids := range in.IDs {
			t.Run(c.Name, func(t *testing.T) {
				ref := &PerplexityResult{NLL: make([]float64, len(ids))}
				w := PerplexityWindow{Begin: 0, End: len(ids), First: 1}
				per := len(ids) * v
				require.NoError(t, ref.ScoreLogits(w, ids, want[b*per:(b+1)*per], v))
				for _, name := range []string{"naive", "chunked"} {
					be, err := model.ParseBackend(name)
					require.NoError(t, err)
					got, err := Perplexity(m, ids, be, len(ids), len(ids), nil)
					be.Close()
					require.NoError(t, err)
					require.Equal(t, ref.Scored, got.Scored)
					assert.LessOrEqual(t, relErr(got.Perplexity(), ref.Perplexity()), pplRelTol,
						"%s row %d: perplexity %v, transformers' logits give %v", name, b, got.Perplexity(), ref.Perplexity())
					for j := 1; j < len(ids); j++ {
						if relErr(got.NLL[j], ref.NLL[j]) > pplRelTol {
							t.Errorf("%s row %d token %d: NLL %v, transformers' logits give %v", name, b, j, got.NLL[j], ref.NLL[j])
							break
						}
					}
				}
			})
		}
		m.Close()
	}
}

// Windowed perplexity matches transformers run window by window
// (testdata/perplexity/expected.json from testdata/gen/gen_perplexity.py).
func TestPerplexityWindowsMatchTransformers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "perplexity", "expected.json"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("testdata/perplexity/expected.json not generated yet (testdata/gen/gen_perplexity.py)")
	}
	require.NoError(t, err)
	var exp struct {
		Results []struct {
			Case       string     `json:"case"`
			Row        int        `json:"row"`
			Ctx        int        `json:"ctx"`
			Stride     int        `json:"stride"`
			NLL        []*float64 `json:"nll"`
			Scored     int        `json:"scored"`
			Perplexity float64    `json:"perplexity"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal(data, &exp))
	require.NotEmpty(t, exp.Results)
	root := filepath.Join("..", "testdata", "golden")
	models := map[string]*model.Model{}
	defer func() {
		for _, m := range models {
			m.Close()
		}
	}()
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	defer be.Close()
	worstPPL, worstNLL := 0.0, 0.0
	defer func() { t.Logf("worst relative error: perplexity %.2g, token NLL %.2g", worstPPL, worstNLL) }()
	for _, r := range exp.Results {
		m := models[r.Case]
		if m == nil {
			m, err = model.Load(filepath.Join(root, r.Case))
			require.NoError(t, err)
			models[r.Case] = m
		}
		ids := readInputs(t, filepath.Join(root, r.Case)).IDs[r.Row]
		got, err := Perplexity(m, ids, be, r.Ctx, r.Stride, nil)
		require.NoError(t, err)
		require.Equal(t, r.Scored, got.Scored, "%s row %d ctx %d stride %d", r.Case, r.Row, r.Ctx, r.Stride)
		worstPPL = math.Max(worstPPL, relErr(got.Perplexity(), r.Perplexity))
		for j, w := range r.NLL {
			if w != nil && !math.IsNaN(got.NLL[j]) {
				worstNLL = math.Max(worstNLL, relErr(got.NLL[j], *w))
			}
		}
		assert.LessOrEqual(t, relErr(got.Perplexity(), r.Perplexity), pplRelTol,
			"%s row %d ctx %d stride %d: %v, transformers %v", r.Case, r.Row, r.Ctx, r.Stride, got.Perplexity(), r.Perplexity)
		for j, w := range r.NLL {
			if (w == nil) != math.IsNaN(got.NLL[j]) {
				t.Fatalf("%s ctx %d stride %d: token %d scored by one side only", r.Case, r.Ctx, r.Stride, j)
			}
			if w != nil && relErr(got.NLL[j], *w) > pplRelTol {
				t.Errorf("%s row %d ctx %d stride %d token %d: NLL %v, transformers %v", r.Case, r.Row, r.Ctx, r.Stride, j, got.NLL[j], *w)
				break
			}
		}
	}
}
