package sampling

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// randomLogits draws n scores of one of several shapes: spread normal
// scores, a few peaks over a flat bulk, scores rounded to bf16 (many exact
// ties, as a bf16 model's logits have), few distinct values, and −Inf
// entries sprinkled in.
func randomLogits(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	shape := r.IntN(5)
	for i := range x {
		v := r.NormFloat64() * (0.5 + 4*r.Float64())
		switch shape {
		case 1:
			v = r.Float64() * 2
		case 2:
			v = float64(roundBF16(float32(v)))
		case 3:
			v = float64(r.IntN(4))
		}
		x[i] = float32(v)
	}
	if shape == 1 {
		for range 1 + r.IntN(20) {
			x[r.IntN(n)] += float32(5 + 10*r.Float64())
		}
	}
	if r.IntN(3) == 0 {
		for range r.IntN(n/4 + 1) {
			x[r.IntN(n)] = negInf
		}
		x[r.IntN(n)] = float32(r.NormFloat64()) // at least one finite
	}
	return x
}

func roundBF16(f float32) float32 {
	b := math.Float32bits(f)
	b += 0x7fff + (b>>16)&1
	return math.Float32frombits(b &^ 0xffff)
}

// randomConfig turns processors on at random, with values a
// generation_config.json could hold.
func randomConfig(r *rand.Rand, vocab int) Config {
	c := Config{DoSample: r.IntN(8) != 0}
	pick := func() bool { return r.IntN(2) == 0 }
	if pick() {
		c.RepetitionPenalty = []float64{1.05, 1.3, 0.8, 2}[r.IntN(4)]
	}
	if pick() {
		c.Temperature = []float64{0.7, 0.6, 1.3, 0.05, 3}[r.IntN(5)]
	}
	if r.IntN(8) == 0 {
		c.TopH = []float64{0.4, 0.9, 1}[r.IntN(3)]
	}
	if pick() {
		c.TopK = []int{1, 2, 20, 50, vocab, vocab + 3, 1 + r.IntN(vocab)}[r.IntN(7)]
	}
	if pick() {
		c.TopP = []float64{0.95, 0.8, 0.5, 0.1, 0.999, MinTopP}[r.IntN(6)]
	}
	if r.IntN(3) == 0 {
		c.MinP = []float64{0.05, 0.2, 1}[r.IntN(3)]
	}
	if r.IntN(5) == 0 {
		c.TypicalP = []float64{0.2, 0.9, 0.99}[r.IntN(3)]
	}
	if r.IntN(6) == 0 {
		c.EpsilonCutoff = []float64{3e-4, 0.01, 0.2}[r.IntN(3)]
	}
	if r.IntN(6) == 0 {
		c.EtaCutoff = []float64{3e-4, 0.01, 0.2}[r.IntN(3)]
	}
	return c
}

func randomHistory(r *rand.Rand, vocab int) []int {
	h := make([]int, r.IntN(40))
	for i := range h {
		h[i] = r.IntN(vocab)
	}
	return h
}

func bitsEqual(a, b float32) bool {
	return a == b && math.Signbit(float64(a)) == math.Signbit(float64(b)) || a != a && b != b
}

// The partial-selection Sampler returns exactly the reference's processed
// scores, bit for bit, and so the same kept set, over many random score
// vectors (ties, −Inf), configurations and histories, at sizes from 1 to
// the 151,936 of Qwen's vocabulary. The one path whose normalizer takes
// float32 exponentials (top-p first: for the tail below the tokens it
// collects) is compared wherever no cumulative probability lies within
// 1e-6 times the threshold 1 − top_p of it (those exponentials are within
// 4e-7 relative, and the tail's mass is about the threshold); closer, both
// answers are within rounding of each other.
func TestProcessMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	sizes := []int{1, 2, 3, 5, 17, 64, 100, 101, 257, 1000, 4099}
	trials, close := 0, 0
	for trial := range 3000 {
		n := sizes[r.IntN(len(sizes))]
		if trial%300 == 0 {
			n = 151936
		}
		x := randomLogits(r, n)
		cfg := randomConfig(r, n)
		hist := randomHistory(r, n)
		want, margin := refProcess(cfg, x, hist)
		if margin < 1e-6 {
			close++
			continue
		}
		trials++
		s, err := New(cfg, n, 1)
		require.NoError(t, err)
		require.NoError(t, s.Observe(hist...))
		got, err := s.Process(x)
		require.NoError(t, err, "trial %d %+v", trial, cfg)
		for i := range want {
			if !bitsEqual(got[i], want[i]) {
				t.Fatalf("trial %d (n=%d, %+v): token %d processed to %v, want %v", trial, n, cfg, i, got[i], want[i])
			}
		}
	}
	t.Logf("%d trials compared, %d with a cumulative probability within 1e-6 relative of top-p's threshold", trials, close)
	assert.Less(t, close, trials/20, "too many trials left uncompared")
}

// Hand-checked cases of the rules whose edges matter most.
func TestProcessEdges(t *testing.T) {
	inf := negInf
	cases := []struct {
		name string
		cfg  Config
		x    []float32
		hist []int
		want []float32
	}{
		{"top-k keeps ties with the k-th", Config{DoSample: true, TopK: 2},
			[]float32{1, 3, 2, 2, 0}, nil, []float32{inf, 3, 2, 2, inf}},
		{"top-k beyond the vocabulary keeps all", Config{DoSample: true, TopK: 9},
			[]float32{1, inf, 2}, nil, []float32{1, inf, 2}},
		{"top-p on equal scores drops the lower ids first", Config{DoSample: true, TopP: 0.5},
			[]float32{0, 0, 0, 0}, nil, []float32{inf, inf, 0, 0}},
		{"top-p 0 keeps one token, the highest id of the top ties", Config{DoSample: true, TopP: MinTopP},
			[]float32{5, 1, 5}, nil, []float32{inf, inf, 5}},
		{"top-p keeps the token that crosses", Config{DoSample: true, TopP: 0.75},
			[]float32{0, 0, 0, 0}, nil, []float32{inf, 0, 0, 0}},
		{"penalty divides positive, multiplies negative, once per id", Config{RepetitionPenalty: 2},
			[]float32{4, -4, 4, 0}, []int{0, 1, 1, 3}, []float32{2, -8, 4, 0}},
		{"greedy ignores the warpers", Config{Temperature: 2, TopK: 1},
			[]float32{4, -4}, nil, []float32{4, -4}},
		{"temperature then top-k on the scaled ties", Config{DoSample: true, Temperature: 0.5, TopK: 1},
			[]float32{1, 2, 2}, nil, []float32{inf, 4, 4}},
		{"min-p keeps the top token at min_p 1", Config{DoSample: true, MinP: 1},
			[]float32{1, 3, 2}, nil, []float32{inf, 3, inf}},
		{"top-h ends where a probability underflows", Config{DoSample: true, Temperature: 0.05, TopH: 0.4},
			[]float32{0, 60}, nil, []float32{inf, 1200}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.cfg, len(c.x), 1)
			require.NoError(t, err)
			require.NoError(t, s.Observe(c.hist...))
			got, err := s.Process(c.x)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			ref, _ := refProcess(c.cfg, c.x, c.hist)
			assert.Equal(t, c.want, ref, "the reference agrees")
		})
	}
}

// Draws come only from the kept set, follow its softmax, and repeat with
// the seed.
func TestNextDrawsFromKeptSet(t *testing.T) {
	x := []float32{0, 3, 1, 2.9, -5, 2.5, inf32(), 1.5}
	cfg := Config{DoSample: true, Temperature: 0.7, TopK: 5, TopP: 0.9}
	want, _ := refProcess(cfg, x, nil)
	probs, _ := refSoftmax(want)
	s, err := New(cfg, len(x), 42)
	require.NoError(t, err)
	const n = 40000
	counts := make([]int, len(x))
	for range n {
		id, err := s.Next(x)
		require.NoError(t, err)
		counts[id]++
	}
	for id, p := range probs {
		if p == 0 {
			assert.Zero(t, counts[id], "token %d was dropped but drawn", id)
			continue
		}
		tol := 5 * math.Sqrt(p*(1-p)/n)
		assert.InDelta(t, p, float64(counts[id])/n, tol, "token %d", id)
	}
	draws := func(seed uint64, c Config) []int {
		s, err := New(c, len(x), seed)
		require.NoError(t, err)
		var out []int
		for range 64 {
			id, err := s.Next(x)
			require.NoError(t, err)
			out = append(out, id)
		}
		return out
	}
	for _, c := range []Config{cfg, {DoSample: true}} {
		assert.Equal(t, draws(5, c), draws(5, c))
		assert.NotEqual(t, draws(5, c), draws(6, c))
	}
}

func inf32() float32 { return negInf }

// With no warper that drops tokens, the draw covers the whole vocabulary
// in proportion to the softmax of the scaled scores.
func TestNextDense(t *testing.T) {
	x := []float32{0, 1, 2, inf32(), -1}
	cfg := Config{DoSample: true, Temperature: 2}
	want, _ := refProcess(cfg, x, nil)
	probs, _ := refSoftmax(want)
	s, err := New(cfg, len(x), 3)
	require.NoError(t, err)
	const n = 40000
	counts := make([]int, len(x))
	for range n {
		id, err := s.Next(x)
		require.NoError(t, err)
		counts[id]++
	}
	for id, p := range probs {
		tol := 5 * math.Sqrt(p*(1-p)/n)
		assert.InDelta(t, p, float64(counts[id])/n, tol+1e-12, "token %d", id)
	}
	assert.Zero(t, counts[3], "−Inf was drawn")
}

func TestGreedy(t *testing.T) {
	s, err := New(Config{}, 4, 0)
	require.NoError(t, err)
	id, err := s.Next([]float32{1, 3, 3, 2})
	require.NoError(t, err)
	assert.Equal(t, 1, id, "ties go to the lowest id")
	s, err = New(Config{RepetitionPenalty: 2}, 4, 0)
	require.NoError(t, err)
	require.NoError(t, s.Observe(1))
	id, err = s.Next([]float32{1, 3, 2, 2})
	require.NoError(t, err)
	assert.Equal(t, 2, id, "3/2 = 1.5 loses to 2; the lowest 2 wins")
	id, err = s.Next([]float32{1, 3, 2, 2})
	require.NoError(t, err)
	assert.Equal(t, 3, id, "2 was drawn and is penalized now")
	s, err = New(Config{RepetitionPenalty: 0.5}, 3, 0)
	require.NoError(t, err)
	require.NoError(t, s.Observe(0))
	id, err = s.Next([]float32{1.5, 2, -1})
	require.NoError(t, err)
	assert.Equal(t, 0, id, "a penalty below 1 raises a seen token: 1.5/0.5 = 3")
	r := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		n := 1 + r.IntN(3000)
		x := randomLogits(r, n)
		cfg := Config{RepetitionPenalty: []float64{0, 1.2, 0.7}[r.IntN(3)]}
		hist := randomHistory(r, n)
		s, err := New(cfg, n, 0)
		require.NoError(t, err)
		require.NoError(t, s.Observe(hist...))
		ref, _ := refProcess(cfg, x, hist)
		id, err := s.Next(x)
		require.NoError(t, err)
		assert.Equal(t, slices.Index(ref, slices.Max(ref)), id)
	}
}

// NaN and +Inf anywhere are errors on every path; a vocabulary of −Inf
// has nothing to draw.
func TestNonFinite(t *testing.T) {
	cfgs := []Config{{}, {RepetitionPenalty: 1.2}, {DoSample: true}, {DoSample: true, TopK: 3},
		{DoSample: true, TopP: 0.9}, {DoSample: true, MinP: 0.1}, {DoSample: true, TypicalP: 0.5},
		{DoSample: true, TopH: 0.5}, {DoSample: true, Temperature: 0.5, TopK: 2, TopP: 0.5}}
	for _, cfg := range cfgs {
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1))} {
			for _, at := range []int{0, 500, 999} {
				x := randomLogits(rand.New(rand.NewPCG(uint64(at), 2)), 1000)
				x[at] = bad
				s, err := New(cfg, len(x), 0)
				require.NoError(t, err)
				require.NoError(t, s.Observe(at, 3))
				_, err = s.Next(x)
				assert.ErrorContains(t, err, fmt.Sprintf("logit %d is", at), "%+v", cfg)
				_, err = s.Process(x)
				assert.ErrorContains(t, err, fmt.Sprintf("logit %d is", at), "%+v", cfg)
			}
		}
		x := []float32{inf32(), inf32()}
		s, err := New(cfg, 2, 0)
		require.NoError(t, err)
		_, err = s.Next(x)
		assert.ErrorIs(t, err, ErrNoToken, "%+v", cfg)
	}
	s, err := New(Config{DoSample: true, Temperature: 1e-30}, 2, 0)
	require.NoError(t, err)
	_, err = s.Next([]float32{1e10, 0})
	assert.ErrorContains(t, err, "to +Inf")

	// A penalty that takes a finite logit to +Inf (or, 0 in float32, 0 to
	// NaN) is named, not the logit or the temperature.
	for _, cfg := range []Config{{DoSample: true, RepetitionPenalty: 1e-40}, {DoSample: true, RepetitionPenalty: 1e-40, TopK: 2},
		{DoSample: true, RepetitionPenalty: 1e-40, TopP: 0.5}, {DoSample: true, RepetitionPenalty: 1e-40, MinP: 0.5},
		{DoSample: true, RepetitionPenalty: 1e-50, TypicalP: 0.5}} {
		s, err := New(cfg, 3, 0)
		require.NoError(t, err)
		require.NoError(t, s.Observe(0, 2))
		_, err = s.Next([]float32{0, 2, 3})
		assert.ErrorContains(t, err, "repetition penalty", "%+v", cfg)
		assert.ErrorContains(t, err, "(token ", "%+v", cfg)
		_, err = s.Process([]float32{0, 2, 3})
		assert.ErrorContains(t, err, "repetition penalty", "%+v", cfg)
	}
}

func TestBadInput(t *testing.T) {
	_, err := New(Config{}, 0, 0)
	assert.ErrorContains(t, err, "vocabulary size")
	for _, c := range []Config{{TopK: -1}, {TopP: 1.5}, {Temperature: -1}, {Temperature: math.NaN()},
		{RepetitionPenalty: -2}, {MinP: 2}, {TypicalP: -0.1}, {EpsilonCutoff: 1}, {EtaCutoff: math.Inf(1)}, {TopH: 1.1}} {
		_, err := New(c, 10, 0)
		assert.Error(t, err, "%+v", c)
	}
	s, err := New(Config{RepetitionPenalty: 1.1}, 10, 0)
	require.NoError(t, err)
	assert.ErrorContains(t, s.Observe(3, 10), "token id 10 outside")
	assert.ErrorContains(t, s.Observe(-1), "token id -1 outside")
	_, err = s.Next(make([]float32, 9))
	assert.ErrorContains(t, err, "9 logits for a vocabulary of 10")
	_, err = s.Process(make([]float32, 11))
	assert.ErrorContains(t, err, "11 logits")
}

func TestProcessorsOrder(t *testing.T) {
	all := Config{DoSample: true, RepetitionPenalty: 1.1, Temperature: 0.7, TopH: 0.5, TopK: 20, TopP: 0.9,
		MinP: 0.1, TypicalP: 0.9, EpsilonCutoff: 0.01, EtaCutoff: 0.01}
	assert.Equal(t, []string{NameRepetitionPenalty, NameTemperature, NameTopH, NameTopK, NameTopP, NameMinP,
		NameTypical, NameEpsilon, NameEta}, all.Processors())
	all.DoSample = false
	assert.Equal(t, []string{NameRepetitionPenalty}, all.Processors())
	assert.Empty(t, Config{DoSample: true, Temperature: 1, TopP: 1, TypicalP: 1, RepetitionPenalty: 1}.Processors())
}

// The order-preserving float32 key used to find a temperature's ties.
func TestOrderKeyAndLowerBound(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	prev := orderKey(negInf)
	vals := []float32{negInf, -math.MaxFloat32, -1, -math.SmallestNonzeroFloat32, float32(math.Copysign(0, -1)), 0,
		math.SmallestNonzeroFloat32, 1, math.MaxFloat32, float32(math.Inf(1))}
	for i, v := range vals {
		k := orderKey(v)
		if i > 0 {
			assert.Greater(t, k, prev, "%v", v)
		}
		prev = k
		assert.True(t, bitsEqual(v, fromOrderKey(k)), "%v", v)
	}
	for range 2000 {
		temp := []float32{0.7, 1.3, 3, 0.05, 17}[r.IntN(5)]
		s, err := New(Config{DoSample: true, Temperature: float64(temp)}, 1, 0)
		require.NoError(t, err)
		x := float32(r.NormFloat64() * 10)
		v := x / temp
		lo := s.lowerBound(v)
		assert.GreaterOrEqual(t, lo/temp, v)
		below := fromOrderKey(orderKey(lo) - 1)
		assert.Less(t, below/temp, v, "lowerBound(%v) = %v is not the smallest at T=%v", v, lo, temp)
	}
}

func TestKthLargest(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for range 500 {
		n := 1 + r.IntN(300)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.IntN(20))
		}
		k := 1 + r.IntN(n)
		sorted := slices.Clone(v)
		slices.Sort(sorted)
		assert.Equal(t, sorted[n-k], kthLargest(v, k))
	}
}

// FuzzProcessMatchesReference runs one random trial of
// TestProcessMatchesReference per input.
func FuzzProcessMatchesReference(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(142), uint64(839)) // top-p 0.999 after temperature 0.6: a normalizer of float32 exponentials misplaced the cut
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		n := 1 + r.IntN(3000)
		x := randomLogits(r, n)
		cfg := randomConfig(r, n)
		hist := randomHistory(r, n)
		want, margin := refProcess(cfg, x, hist)
		if margin < 1e-6 {
			return
		}
		s, err := New(cfg, n, 1)
		require.NoError(t, err)
		require.NoError(t, s.Observe(hist...))
		got, err := s.Process(x)
		require.NoError(t, err)
		for i := range want {
			if !bitsEqual(got[i], want[i]) {
				t.Fatalf("n=%d %+v: token %d processed to %v, want %v", n, cfg, i, got[i], want[i])
			}
		}
	})
}
