package sampling_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/sampling"
	"github.com/qwenref/qwenref/tensor"
)

// Per-token cost of choosing a token, against the argmax of greedy
// decoding, at Qwen's vocabulary (151,936), Qwen3.5's (248,320) and the
// bundled model's, on two kinds of logits: "synthetic" (a normal bulk of
// σ 2.5 with 30 peaks 10 to 16 above it, at random ids) and "bundled" (the
// bundled model's last logits for a sample prompt).
//
//	go test ./sampling/ -run '^$' -bench VsArgmax -benchtime 2000x

type input struct {
	name   string
	logits []float32
}

func synthetic(n int) []float32 {
	r := rand.New(rand.NewPCG(uint64(n), 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 2.5)
	}
	for range 30 {
		x[r.IntN(n)] += float32(10 + 6*r.Float64())
	}
	return x
}

func bundledLogits(b *testing.B) []float32 {
	m, tok, err := bundled.Model()
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	be, err := model.ParseBackend("naive")
	if err != nil {
		b.Fatal(err)
	}
	ids, err := tok.Encode(bundled.SamplePrompts[0])
	if err != nil {
		b.Fatal(err)
	}
	var out []float32
	_, err = generate.Generate(m, ids, be, generate.GenerateOptions{MaxNewTokens: 1, OnToken: func(_ int, logits []float32) bool {
		out = append([]float32(nil), logits...)
		return false
	}})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

func inputs(b *testing.B) []input {
	cfg, err := bundled.Config()
	if err != nil {
		b.Fatal(err)
	}
	return []input{
		{"synthetic/vocab=151936", synthetic(151936)},
		{"synthetic/vocab=248320", synthetic(248320)},
		{fmt.Sprintf("synthetic/vocab=%d", cfg.VocabSize), synthetic(cfg.VocabSize)},
		{fmt.Sprintf("bundled/vocab=%d", cfg.VocabSize), bundledLogits(b)},
	}
}

var sink int

func BenchmarkArgmax(b *testing.B) {
	for _, in := range inputs(b) {
		b.Run(in.name, func(b *testing.B) {
			for b.Loop() {
				sink = tensor.Argmax(in.logits)
			}
		})
	}
}

func benchConfig(b *testing.B, cfg sampling.Config) {
	for _, in := range inputs(b) {
		b.Run(in.name, func(b *testing.B) {
			s, err := sampling.New(cfg, len(in.logits), 1)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if sink, err = s.Next(in.logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGreedy is greedy decoding through a Sampler (the argmax pass).
func BenchmarkGreedy(b *testing.B) { benchConfig(b, sampling.Config{}) }

// BenchmarkSampleTopKTopP is Qwen's generation_config.json sampling.
func BenchmarkSampleTopKTopP(b *testing.B) {
	benchConfig(b, sampling.Config{DoSample: true, Temperature: 0.7, TopK: 20, TopP: 0.95})
}

// BenchmarkSampleTopP is top-p over the whole vocabulary.
func BenchmarkSampleTopP(b *testing.B) {
	benchConfig(b, sampling.Config{DoSample: true, Temperature: 0.7, TopP: 0.95})
}

// BenchmarkSampleMinP is min-p over the whole vocabulary.
func BenchmarkSampleMinP(b *testing.B) {
	benchConfig(b, sampling.Config{DoSample: true, Temperature: 0.7, MinP: 0.05})
}

// BenchmarkSampleTemperature draws from the whole softmax (no truncation).
func BenchmarkSampleTemperature(b *testing.B) {
	benchConfig(b, sampling.Config{DoSample: true, Temperature: 0.7})
}

// BenchmarkSampleRepetitionPenalty adds a repetition penalty over 2,000
// seen ids to Qwen's sampling.
func BenchmarkSampleRepetitionPenalty(b *testing.B) {
	for _, in := range inputs(b)[:1] {
		b.Run(in.name, func(b *testing.B) {
			s, err := sampling.New(sampling.Config{DoSample: true, RepetitionPenalty: 1.05, Temperature: 0.7, TopK: 20, TopP: 0.95}, len(in.logits), 1)
			if err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(2, 2))
			for range 2000 {
				if err := s.Observe(r.IntN(len(in.logits))); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				if sink, err = s.Next(in.logits); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVsArgmax times each configuration's Next and the argmax in
// alternation on the same logits, so that load on the machine shifts both
// alike, and reports their ratio (x_argmax) beside both means.
func BenchmarkVsArgmax(b *testing.B) {
	configs := []struct {
		name string
		cfg  sampling.Config
	}{
		{"greedy", sampling.Config{}},
		{"t0.7-topk20-topp0.95", sampling.Config{DoSample: true, Temperature: 0.7, TopK: 20, TopP: 0.95}},
		{"t0.7-topp0.95", sampling.Config{DoSample: true, Temperature: 0.7, TopP: 0.95}},
		{"t0.7-minp0.05", sampling.Config{DoSample: true, Temperature: 0.7, MinP: 0.05}},
	}
	ins := inputs(b)
	for _, c := range configs {
		for _, in := range ins {
			b.Run(c.name+"/"+in.name, func(b *testing.B) {
				s, err := sampling.New(c.cfg, len(in.logits), 1)
				if err != nil {
					b.Fatal(err)
				}
				var tArg, tNext time.Duration
				for b.Loop() {
					t0 := time.Now()
					sink = tensor.Argmax(in.logits)
					t1 := time.Now()
					if sink, err = s.Next(in.logits); err != nil {
						b.Fatal(err)
					}
					tArg, tNext = tArg+t1.Sub(t0), tNext+time.Since(t1)
				}
				b.ReportMetric(float64(tNext)/float64(tArg), "x_argmax")
				b.ReportMetric(float64(tArg.Nanoseconds())/float64(b.N), "argmax_ns")
				b.ReportMetric(float64(tNext.Nanoseconds())/float64(b.N), "next_ns")
			})
		}
	}
}

// BenchmarkFullSort is the previous sampler's cost: a stable sort of the
// whole vocabulary by probability for every token.
func BenchmarkFullSort(b *testing.B) {
	in := inputs(b)[0]
	idx := make([]int, len(in.logits))
	for b.Loop() {
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, c int) bool { return in.logits[idx[a]] > in.logits[idx[c]] })
		sink = idx[0]
	}
}
