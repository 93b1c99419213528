package generate

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/sampling"

	"github.com/qwenref/qwenref/model"
)

// Greedy continuations must equal transformers' generate(do_sample=False)
// token for token, on every backend. A bf16 backend is compared only while
// the float32 (naive) run's top-2 logit margin stays comfortable: beyond
// that, bf16 rounding may legitimately pick the other token.
func TestGreedyMatchesTransformers(t *testing.T) {
	root, cases := goldenCases(t)
	for _, backend := range model.BackendNames() {
		be, err := model.ParseBackend(backend)
		if err != nil {
			continue
		}
		for _, c := range cases {
			dir := filepath.Join(root, c.Name)
			in := readInputs(t, dir)
			if in.Generate == nil {
				continue
			}
			t.Run(backend+"/"+c.Name, func(t *testing.T) {
				m, err := model.Load(dir)
				require.NoError(t, err)
				defer m.Close()
				for b, prompt := range in.IDs {
					res, err := Generate(m, prompt, be, GenerateOptions{MaxNewTokens: in.Generate.MaxNewTokens})
					require.NoError(t, err)
					want := in.Generate.NewIDs[b]
					if bf16Backends[backend] {
						n := comfortableSteps(t, m, prompt, in.Generate.MaxNewTokens)
						t.Logf("row %d: comparing the first %d of %d tokens (top-2 margin ≥ %.2f·rms of the logits)",
							b, n, len(want), greedyMargin)
						want, res.NewIDs = want[:n], res.NewIDs[:min(n, len(res.NewIDs))]
					}
					assert.Equal(t, want, res.NewIDs, "row %d", b)
				}
			})
		}
	}
}

// greedyMargin is the top-2 logit gap, in units of the logits' RMS, under
// which a bf16 backend's greedy choice is not compared: bf16RelL2 of the
// logits is an error of about 0.01·rms per logit.
const greedyMargin = 0.05

// comfortableSteps counts the leading greedy steps of the naive (float32)
// backend whose top-2 logit margin is at least greedyMargin·rms.
func comfortableSteps(t *testing.T, m *model.Model, prompt []int, maxNew int) int {
	ref, err := model.ParseBackend("naive")
	require.NoError(t, err)
	n, stop := 0, false
	_, err = Generate(m, prompt, ref, GenerateOptions{MaxNewTokens: maxNew, OnToken: func(_ int, logits []float32) bool {
		best, second, ss := math.Inf(-1), math.Inf(-1), 0.0
		for _, v := range logits {
			x := float64(v)
			ss += x * x
			if x > best {
				best, second = x, best
			} else if x > second {
				second = x
			}
		}
		if stop || best-second < greedyMargin*math.Sqrt(ss/float64(len(logits))) {
			stop = true
		} else {
			n++
		}
		return true
	}})
	require.NoError(t, err)
	return n
}

// sampler draws from logits of vocabulary 5 with c.
type sampler struct {
	t  *testing.T
	sp *sampling.Sampler
}

func newSampler(t *testing.T, c sampling.Config, seed uint64) sampler {
	sp, err := sampling.New(c, 5, seed)
	require.NoError(t, err)
	return sampler{t, sp}
}

func (s sampler) next(logits []float32) int {
	id, err := s.sp.Next(logits)
	require.NoError(s.t, err)
	return id
}

func TestSampling(t *testing.T) {
	logits := []float32{0, 3, 1, 2.9, -5}
	// top-k 1 is greedy whatever the temperature.
	sp := newSampler(t, sampling.Config{DoSample: true, Temperature: 5, TopK: 1}, 1)
	for i := 0; i < 20; i++ {
		assert.Equal(t, 1, sp.next(logits))
	}
	// top-p keeps only the smallest nucleus: tokens 1 and 3 hold ~0.86.
	sp = newSampler(t, sampling.Config{DoSample: true, Temperature: 1, TopP: 0.8}, 2)
	counts := map[int]int{}
	for i := 0; i < 2000; i++ {
		counts[sp.next(logits)]++
	}
	assert.Zero(t, counts[0]+counts[2]+counts[4], "tokens outside the nucleus were drawn: %v", counts)
	assert.InDelta(t, 0.5, float64(counts[1])/2000, 0.06, "1 and 3 are near-equally likely: %v", counts)

	// Same seed, same draws; sampling frequencies follow softmax(logits/T).
	draw := func(seed uint64) []int {
		sp := newSampler(t, sampling.Config{DoSample: true, Temperature: 2}, seed)
		var out []int
		for i := 0; i < 50; i++ {
			out = append(out, sp.next(logits))
		}
		return out
	}
	assert.Equal(t, draw(9), draw(9))
	assert.NotEqual(t, draw(9), draw(10))
	p := Softmax(logits, 2)
	sp = newSampler(t, sampling.Config{DoSample: true, Temperature: 2}, 3)
	counts = map[int]int{}
	const n = 20000
	for i := 0; i < n; i++ {
		counts[sp.next(logits)]++
	}
	for id, want := range p {
		// 5 standard deviations of a binomial proportion.
		tol := 5 * math.Sqrt(want*(1-want)/n)
		assert.InDelta(t, want, float64(counts[id])/n, tol+1e-9, "token %d", id)
	}

	for _, bad := range []sampling.Config{{Temperature: -1}, {TopK: -2}, {TopP: 1.5}, {Temperature: math.NaN()}} {
		assert.Error(t, bad.Validate(), "%+v", bad)
	}
	top := TopProbs(logits, 2)
	require.Len(t, top, 2)
	assert.Equal(t, 1, top[0].ID)
	assert.Equal(t, 3, top[1].ID)
}

func TestGenerateStops(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 50
	m, err := model.NewRandom(cfg, 1, false)
	require.NoError(t, err)
	be, _ := model.ParseBackend("naive")
	res, err := Generate(m, []int{1, 2, 3}, be, GenerateOptions{MaxNewTokens: 6})
	require.NoError(t, err)
	require.Len(t, res.NewIDs, 6)
	assert.Equal(t, "max_new_tokens", res.StopReason)
	// Make the 3rd greedy token an EOS id: generation stops at its first
	// occurrence, returning the EOS token.
	eos := res.NewIDs[2]
	res2, err := Generate(m, []int{1, 2, 3}, be, GenerateOptions{MaxNewTokens: 6, EOS: []int{eos}})
	require.NoError(t, err)
	assert.Equal(t, "eos", res2.StopReason)
	assert.Equal(t, res.NewIDs[:slices.Index(res.NewIDs, eos)+1], res2.NewIDs)
	var streamed []int
	res3, err := Generate(m, []int{1, 2, 3}, be, GenerateOptions{MaxNewTokens: 6, OnToken: func(id int, _ []float32) bool {
		streamed = append(streamed, id)
		return len(streamed) < 2
	}})
	require.NoError(t, err)
	assert.Equal(t, "stopped", res3.StopReason)
	assert.Equal(t, res.NewIDs[:2], streamed)

	_, err = Generate(m, nil, be, GenerateOptions{MaxNewTokens: 1})
	assert.ErrorContains(t, err, "empty prompt")
	_, err = Generate(m, []int{1}, be, GenerateOptions{})
	assert.ErrorContains(t, err, "max new tokens")
}

// With Processing, Generate chooses each token as package sampling does
// over the logits of the whole sequence so far, the prompt's ids in the
// repetition penalty's history: a fresh forward per step, a Sampler that
// observed the prompt, must give the same ids.
func TestGenerateAppliesProcessing(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 50
	m, err := model.NewRandom(cfg, 1, false)
	require.NoError(t, err)
	be, _ := model.ParseBackend("naive")
	prompt := []int{1, 2, 3, 4, 5}
	for _, pc := range []sampling.Config{
		{RepetitionPenalty: 1e6}, // greedy: no seen id can win while an unseen one has a positive logit
		{DoSample: true, Temperature: 0.7, TopK: 20, MinP: 0.05, RepetitionPenalty: 1.3},
	} {
		res, err := Generate(m, prompt, be, GenerateOptions{MaxNewTokens: 8, Sampling: pc, Seed: 4})
		require.NoError(t, err)
		sp, err := sampling.New(pc, cfg.VocabSize, 4)
		require.NoError(t, err)
		require.NoError(t, sp.Observe(prompt...))
		seq := slices.Clone(prompt)
		var want []int
		for range res.NewIDs {
			logits, err := m.Forward([][]int{seq}, be)
			require.NoError(t, err)
			id, err := sp.Next(logits.Data[(len(seq)-1)*cfg.VocabSize:])
			require.NoError(t, err)
			want, seq = append(want, id), append(seq, id)
		}
		assert.Equal(t, want, res.NewIDs, "%+v", pc)
		if !pc.DoSample {
			seen := slices.Clone(prompt)
			for _, id := range res.NewIDs {
				assert.NotContains(t, seen, id, "a huge penalty bans every id seen, the prompt's included")
				seen = append(seen, id)
			}
		}
	}
	_, err = Generate(m, prompt, be, GenerateOptions{MaxNewTokens: 1, Sampling: sampling.Config{TopP: 2}})
	assert.ErrorContains(t, err, "top-p")
}

// LoadGenerationSettings applies the overrides as generate(**kwargs) does
// and reports the file's keys it cannot apply.
func TestLoadGenerationSettings(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"),
		[]byte(`{"do_sample": false, "temperature": 0.6, "top_p": 0.95, "no_repeat_ngram_size": 3}`), 0o644))
	g, err := LoadGenerationSettings(dir, SamplingOverrides{Seed: 3})
	require.NoError(t, err)
	assert.Equal(t, sampling.Config{}, g.Config, "do_sample false: greedy")
	assert.Equal(t, []string{"no_repeat_ngram_size"}, g.Report.Unapplied)
	assert.Equal(t, "greedy", g.String())
	one, k := 1.0, 7
	g, err = LoadGenerationSettings(dir, SamplingOverrides{Temperature: &one, TopK: &k, Seed: 3})
	require.NoError(t, err)
	assert.Equal(t, sampling.Config{DoSample: true, TopK: 7, TopP: 0.95}, g.Config, "temperature 1 written as 1.0 is accepted, and is no processor")
	assert.Equal(t, "temperature 1, top-k 7, top-p 0.95, seed 3", g.String())
	neg := -0.5
	_, err = LoadGenerationSettings(dir, SamplingOverrides{MinP: &neg})
	assert.ErrorContains(t, err, "min-p must be in [0, 1]")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"do_sample": true, "top_k": 2.5}`), 0o644))
	_, err = LoadGenerationSettings(dir, SamplingOverrides{})
	assert.ErrorContains(t, err, dir+": generation_config.json: top_k")
	// null: refused by name, with or without an override (an override
	// once wrote into the nil map null decodes to: a panic).
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(" null "), 0o644))
	_, err = LoadGenerationSettings(dir, SamplingOverrides{})
	assert.ErrorContains(t, err, "generation_config.json: want a JSON object, got null")
	_, err = LoadGenerationSettings(dir, SamplingOverrides{Temperature: &one})
	assert.ErrorContains(t, err, "generation_config.json: want a JSON object, got null")
	g, err = LoadGenerationSettings("", SamplingOverrides{})
	require.NoError(t, err)
	assert.Equal(t, "", g.Path)
}

// PromptLogits hands over the prefill's logits of every prompt position,
// equal to a plain forward of the prompt, and the generation that follows
// is the one without it.
func TestGeneratePromptLogits(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 50
	m, err := model.NewRandom(cfg, 1, false)
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	prompt := []int{3, 1, 4, 1, 5}
	want, err := m.NewSession().Forward(prompt, be, model.Options{})
	require.NoError(t, err)
	plain, err := Generate(m, prompt, be, GenerateOptions{MaxNewTokens: 4, EOS: []int{}})
	require.NoError(t, err)
	var got []float32
	res, err := Generate(m, prompt, be, GenerateOptions{MaxNewTokens: 4, EOS: []int{},
		PromptLogits: func(l []float32) { got = append([]float32(nil), l...) }})
	require.NoError(t, err)
	assert.Equal(t, want.Data, got)
	assert.Equal(t, plain.NewIDs, res.NewIDs)
}
