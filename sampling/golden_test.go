package sampling

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hashSpec is gen_sampling.py's hashed() input.
type hashSpec struct {
	Vocab   int     `json:"vocab"`
	Seed    uint64  `json:"seed"`
	Quant   uint    `json:"quant"`
	Peaks   int     `json:"peaks"`
	Peak    float64 `json:"peak"`
	NegInf  int     `json:"neg_inf"`
	History int     `json:"history"`
}

func splitmix64(x uint64) uint64 {
	z := x + 0x9E3779B97F4A7C15
	z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
	z = (z ^ z>>27) * 0x94D049BB133111EB
	return z ^ z>>31
}

func hash2(seed uint64, i int) uint64 { return splitmix64(seed<<32 | uint64(uint32(i))) }

// hashedInput rebuilds gen_sampling.py's hashed(): every value is a
// multiple of 2^-20 below 16 in magnitude, so exact in float32.
func hashedInput(s hashSpec) ([]float32, []int) {
	v := make([]float64, s.Vocab)
	for i := range v {
		u := int64(hash2(s.Seed, i)>>40) >> s.Quant << s.Quant
		v[i] = float64(u-1<<23) * 0x1p-20
	}
	for j := range s.Peaks {
		v[hash2(s.Seed, 1<<31+j)%uint64(s.Vocab)] += s.Peak + float64(j)*0.125
	}
	for j := range s.NegInf {
		v[hash2(s.Seed, 1<<31+100000+j)%uint64(s.Vocab)] = math.Inf(-1)
	}
	x := make([]float32, len(v))
	for i, f := range v {
		x[i] = float32(f)
	}
	h := make([]int, s.History)
	for j := range h {
		h[j] = int(hash2(s.Seed, 1<<31+200000+j) % uint64(s.Vocab))
	}
	return x, h
}

func values(v []*float64) []float32 {
	x := make([]float32, len(v))
	for i, f := range v {
		x[i] = negInf
		if f != nil {
			x[i] = float32(*f)
		}
	}
	return x
}

// The Go rebuild of the generator's hashed vectors equals Python's
// (testdata/sampling/hashed.json, written by gen_sampling.py
// --hashed-check with Python alone).
func TestHashedInputMatchesPython(t *testing.T) {
	data, err := os.ReadFile("../testdata/sampling/hashed.json")
	require.NoError(t, err)
	var checks []struct {
		Hashed  hashSpec   `json:"hashed"`
		First   []*float64 `json:"first"`
		History []int      `json:"history"`
		Sum     float64    `json:"sum"`
		NegInf  int        `json:"neg_inf"`
		Max     float64    `json:"max"`
	}
	require.NoError(t, json.Unmarshal(data, &checks))
	require.NotEmpty(t, checks)
	for _, c := range checks {
		x, h := hashedInput(c.Hashed)
		assert.Equal(t, values(c.First), x[:len(c.First)])
		assert.Equal(t, c.History, h)
		// every value is a multiple of 2^-20 below 16: the float64 sum is exact
		var sum float64
		mx, ninf := math.Inf(-1), 0
		for _, v := range x {
			if v == negInf {
				ninf++
				continue
			}
			sum += float64(v)
			mx = max(mx, float64(v))
		}
		assert.Equal(t, c.Sum, sum)
		assert.Equal(t, c.NegInf, ninf)
		assert.Equal(t, c.Max, mx)
	}
}

type goldenCase struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	Error  string          `json:"error"`
	Input  struct {
		Values  []*float64 `json:"values"`
		History []int      `json:"history"`
		Hashed  *hashSpec  `json:"hashed"`
	} `json:"input"`
	Processors []string         `json:"processors"`
	Attrs      []map[string]any `json:"processor_attrs"`
	Kept       json.RawMessage  `json:"kept"`
	ValuesAt   []int            `json:"values_at"`
	Values     []*float64       `json:"values"`
}

type goldenFile struct {
	Transformers  string         `json:"transformers_version"`
	Attributes    []string       `json:"generation_config_attributes"`
	Defaults      map[string]any `json:"global_defaults"` // numbers and flags
	PresenceKnown bool           `json:"presence_penalty_known"`
	Cases         []goldenCase   `json:"cases"`
}

const goldenPath = "../testdata/sampling/expected.json"

func readGoldens(t *testing.T) goldenFile {
	data, err := os.ReadFile(goldenPath)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatal("testdata/sampling/expected.json is missing: regenerate it (python3 testdata/gen/gen_sampling.py testdata/sampling/expected.json)")
	}
	require.NoError(t, err)
	var g goldenFile
	require.NoError(t, json.Unmarshal(data, &g))
	require.True(t, strings.HasPrefix(g.Transformers, "5.17"), "goldens written by transformers %s", g.Transformers)
	return g
}

// What transformers 5.17's GenerationConfig holds: every attribute is one
// this package applies or classifies, presence_penalty is not one, and the
// global defaults are the ones FromGenerationConfig fills in.
func TestGenerationConfigFacts(t *testing.T) {
	g := readGoldens(t)
	for _, a := range g.Attributes {
		known := slices.Contains(appliedKeys, a) || slices.Contains(noEffectKeys, a) || activeKeys[a] != nil
		assert.True(t, known, "GenerationConfig attribute %q is not classified", a)
	}
	assert.False(t, g.PresenceKnown, "transformers' GenerationConfig knows presence_penalty: apply it")
	for k, want := range map[string]float64{"temperature": 1, "top_k": 50, "top_p": 1, "typical_p": 1,
		"repetition_penalty": 1, "epsilon_cutoff": 0, "eta_cutoff": 0} {
		v, ok := g.Defaults[k]
		if assert.True(t, ok, "global default of %s recorded", k) {
			assert.Equal(t, want, v, "global default of %s", k)
		}
	}
}

// Every golden case: the same processors in the same order with the same
// parameters, the same kept set and the same processed scores bit for bit;
// and an error wherever transformers raised one.
func TestGoldens(t *testing.T) {
	g := readGoldens(t)
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg, rep, err := FromGenerationConfig(c.Config)
			if c.Error != "" {
				assert.Error(t, err, "transformers: %s", c.Error)
				return
			}
			require.NoError(t, err)
			if len(c.Processors) == 0 {
				assert.Empty(t, cfg.Processors())
			} else {
				assert.Equal(t, c.Processors, cfg.Processors())
			}
			checkAttrs(t, cfg, c.Processors, c.Attrs)
			if strings.Contains(string(c.Config), "presence_penalty") {
				assert.Contains(t, rep.Ignored, "presence_penalty")
			}
			x, hist := values(c.Input.Values), c.Input.History
			if c.Input.Hashed != nil {
				x, hist = hashedInput(*c.Input.Hashed)
			}
			s, err := New(cfg, len(x), 0)
			require.NoError(t, err)
			require.NoError(t, s.Observe(hist...))
			got, err := s.Process(x)
			require.NoError(t, err)
			var kept []int
			for i, v := range got {
				if v != negInf {
					kept = append(kept, i)
				}
			}
			if string(c.Kept) == `"all"` {
				assert.Len(t, kept, len(x), "every token kept")
			} else {
				var want []int
				require.NoError(t, json.Unmarshal(c.Kept, &want))
				assert.Equal(t, want, kept, "kept set")
			}
			want := values(c.Values)
			for j, i := range c.ValuesAt {
				if !bitsEqual(got[i], want[j]) {
					t.Errorf("token %d: processed %v, transformers %v", i, got[i], want[j])
				}
			}
		})
	}
}

// checkAttrs compares the processors' numeric attributes with cfg, and
// checks that those this package does not model have the value it assumes.
func checkAttrs(t *testing.T, cfg Config, names []string, attrs []map[string]any) {
	if !assert.Len(t, attrs, len(names)) {
		return
	}
	param := map[string]struct {
		key  string
		want float64
	}{
		NameRepetitionPenalty: {"penalty", cfg.RepetitionPenalty}, NameTemperature: {"temperature", cfg.Temperature},
		NameTopH: {"top_h", cfg.TopH}, NameTopK: {"top_k", float64(cfg.TopK)}, NameTopP: {"top_p", cfg.TopP},
		NameMinP: {"min_p", cfg.MinP}, NameTypical: {"mass", cfg.TypicalP}, NameEpsilon: {"epsilon", cfg.EpsilonCutoff},
	}
	for i, name := range names {
		a := attrs[i]
		if p, ok := param[name]; ok {
			if v, ok := a[p.key].(float64); assert.True(t, ok, "%s.%s", name, p.key) && !(name == NameTopP && p.want == MinTopP) {
				assert.Equal(t, p.want, v, "%s.%s", name, p.key)
			}
		}
		if v, ok := a["min_tokens_to_keep"]; ok {
			assert.Equal(t, float64(1), v, "%s.min_tokens_to_keep", name)
		}
		if v, ok := a["normalize"]; ok {
			assert.Equal(t, false, v, "%s.normalize", name)
		}
		if v, ok := a["prompt_ignore_length"]; ok {
			assert.Nil(t, v, "%s.prompt_ignore_length", name)
		}
		if name == NameTopH {
			assert.Equal(t, float64(topHCandidates), a["top_n"], "TopHLogitsWarper.top_n")
		}
	}
}
