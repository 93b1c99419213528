package generate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/sampling"
)

// Sampling chooses the next token from logits. The zero value is greedy.
type Sampling struct {
	// Temperature divides the logits; 0 means greedy (argmax).
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// sums to at least TopP (0 or 1: all).
	TopP float64
	// Seed makes sampling reproducible.
	Seed uint64
}

// Validate checks the sampling parameters.
func (s Sampling) Validate() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("temperature must be ≥ 0 (0 = greedy), got %g", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("top-k must be ≥ 0 (0 = off), got %d", s.TopK)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("top-p must be in [0, 1] (0 or 1 = off), got %g", s.TopP)
	}
	return nil
}

// TokenProb is a token id with its probability, for top-k displays.
type TokenProb struct {
	ID   int
	Prob float64
}

// Softmax returns float64 probabilities of logits/temperature.
func Softmax(logits []float32, temperature float64) []float64 {
	if temperature <= 0 {
		temperature = 1
	}
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp((float64(v) - mx) / temperature)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	return p
}

// TopProbs returns the k most likely tokens under softmax(logits).
func TopProbs(logits []float32, k int) []TokenProb {
	p := Softmax(logits, 1)
	idx := make([]int, len(p))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	k = min(k, len(idx))
	out := make([]TokenProb, k)
	for i := range out {
		out[i] = TokenProb{idx[i], p[idx[i]]}
	}
	return out
}

// config is s as package sampling's configuration.
func (s Sampling) config() sampling.Config {
	return sampling.Config{DoSample: s.Temperature > 0, Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP}
}

// sampler draws tokens with package sampling: transformers' processors in
// generate's order; greedy when the configuration does not sample. The
// Sampler is made at the first token, when the vocabulary is known, and
// sees the prompt first (the repetition penalty's history). An error is
// kept in err for Generate to return.
type sampler struct {
	cfg    sampling.Config
	seed   uint64
	prompt []int
	sp     *sampling.Sampler
	err    error
}

func newSampler(s Sampling) *sampler { return &sampler{cfg: s.config(), seed: s.Seed} }

func (sp *sampler) next(logits []float32) int {
	if sp.sp == nil && sp.err == nil {
		if sp.sp, sp.err = sampling.New(sp.cfg, len(logits), sp.seed); sp.err == nil {
			sp.err = sp.sp.Observe(sp.prompt...)
		}
	}
	if sp.err != nil {
		return 0
	}
	id, err := sp.sp.Next(logits)
	sp.err = err
	return id
}

// GenerateOptions control Generate.
type GenerateOptions struct {
	MaxNewTokens int
	Sampling     Sampling
	// Processing, if set, replaces Sampling's temperature, top-k and top-p
	// with the whole of package sampling's processing (what transformers
	// builds from a generation_config.json: repetition penalty, min-p,
	// typical-p, …; LoadGenerationSettings reads one); Sampling.Seed still
	// seeds the draws.
	Processing *sampling.Config
	// EOS ids end generation (the eos token is returned); nil uses the
	// config's (config.json / generation_config.json).
	EOS []int
	// OnToken, if set, is called for each new token as it is produced
	// (streaming), with the logits it was drawn from (valid during the call
	// only: the next step reuses the buffer); returning false stops.
	OnToken func(id int, logits []float32) bool
}

// GenerateResult reports what Generate produced and how fast.
type GenerateResult struct {
	NewIDs        []int
	StopReason    string // "eos", "max_new_tokens" or "stopped"
	PrefillTokens int
	PrefillTime   time.Duration
	DecodeTime    time.Duration // for len(NewIDs)−1 single-token steps
}

// Generate prefills the prompt in one call and then decodes one token at a
// time from the caches, as transformers' generate does with use_cache.
func Generate(m *model.Model, prompt []int, be *model.Backend, opt GenerateOptions) (*GenerateResult, error) {
	if opt.MaxNewTokens <= 0 {
		return nil, fmt.Errorf("max new tokens must be positive, got %d", opt.MaxNewTokens)
	}
	if err := opt.Sampling.Validate(); err != nil {
		return nil, err
	}
	if err := m.CheckIDs(prompt); err != nil {
		if errors.Is(err, model.ErrEmpty) {
			return nil, errors.New("empty prompt: at least one token is needed to generate from")
		}
		return nil, err
	}
	eos := opt.EOS
	if eos == nil {
		eos = m.Config.EOSTokenIDs
	}
	sp := newSampler(opt.Sampling)
	if opt.Processing != nil {
		if err := opt.Processing.Validate(); err != nil {
			return nil, err
		}
		sp.cfg = *opt.Processing
	}
	sp.prompt = prompt                  // transformers penalizes the prompt's tokens too
	r, err := model.NewRunner(m, be, 1) // a device-resident backend keeps the caches on its device
	if err != nil {
		return nil, err
	}
	defer r.Close()
	res := &GenerateResult{PrefillTokens: len(prompt), StopReason: "max_new_tokens"}

	start := time.Now()
	logits, err := r.Forward([][]int{prompt}, model.RunOptions{Logits: model.LastLogits})
	if err != nil {
		return nil, err
	}
	res.PrefillTime = time.Since(start)
	start = time.Now()
	for {
		id := sp.next(logits.Data)
		if sp.err != nil {
			return nil, sp.err
		}
		res.NewIDs = append(res.NewIDs, id)
		if opt.OnToken != nil && !opt.OnToken(id, logits.Data) {
			res.StopReason = "stopped"
			break
		}
		if slices.Contains(eos, id) {
			res.StopReason = "eos"
			break
		}
		if len(res.NewIDs) >= opt.MaxNewTokens {
			break
		}
		if logits, err = r.Forward([][]int{{id}}, model.RunOptions{Logits: model.LastLogits, Out: logits}); err != nil {
			return nil, err
		}
	}
	res.DecodeTime = time.Since(start)
	return res, nil
}
