package generate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/sampling"
	"github.com/qwenref/qwenref/tensor"
)

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

// TopProbs returns the k most likely tokens under softmax(logits), by
// partial selection: one pass for the k largest and one for the
// normaliser, never a sort of the vocabulary.
func TopProbs(logits []float32, k int) []TokenProb {
	ids := sampling.Largest(logits, k)
	if len(ids) == 0 {
		return nil
	}
	mx := float64(logits[ids[0]])
	var sum float64
	for _, v := range logits {
		if v == v {
			sum += math.Exp(float64(v) - mx)
		}
	}
	out := make([]TokenProb, len(ids))
	for i, id := range ids {
		out[i] = TokenProb{id, math.Exp(float64(logits[id])-mx) / sum}
	}
	return out
}

// GenerateOptions control Generate.
type GenerateOptions struct {
	MaxNewTokens int
	// Sampling chooses the tokens as transformers' generate does (the zero
	// Config is greedy; LoadGenerationSettings reads generation_config.json's);
	// Seed seeds its draws.
	Sampling sampling.Config
	Seed     uint64
	// EOS ids end generation (the eos token is returned); nil uses the
	// config's (config.json / generation_config.json).
	EOS []int
	// OnToken, if set, is called for each new token as it is produced
	// (streaming), with the logits it was drawn from (valid during the call
	// only: the next step reuses the buffer); returning false stops.
	OnToken func(id int, logits []float32) bool
	// PromptLogits, if set, receives the prefill's logits for every prompt
	// position, [len(prompt), V] (valid during the call only), before the
	// first token is drawn: a prompt's scores at no second prefill.
	PromptLogits func(logits []float32)
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
	sp, err := sampling.New(opt.Sampling, m.Config.VocabSize, opt.Seed)
	if err != nil {
		return nil, err
	}
	if err := sp.Observe(prompt...); err != nil { // transformers penalizes the prompt's tokens too
		return nil, err
	}
	r, err := model.NewRunner(m, be, 1) // a device-resident backend keeps the caches on its device
	if err != nil {
		return nil, err
	}
	defer r.Close()
	res := &GenerateResult{PrefillTokens: len(prompt), StopReason: "max_new_tokens"}

	start := time.Now()
	which := model.LastLogits
	if opt.PromptLogits != nil {
		which = model.AllLogits
	}
	logits, err := r.Forward([][]int{prompt}, model.RunOptions{Logits: which})
	if err != nil {
		return nil, err
	}
	if opt.PromptLogits != nil {
		v := m.Config.VocabSize
		if len(logits.Data) != len(prompt)*v {
			return nil, fmt.Errorf("prefill returned %d logits, want %d×%d", len(logits.Data), len(prompt), v)
		}
		opt.PromptLogits(logits.Data)
		logits = &tensor.Tensor{Shape: []int{1, v}, Data: slices.Clone(logits.Data[(len(prompt)-1)*v:])}
	}
	res.PrefillTime = time.Since(start)
	start = time.Now()
	for {
		id, err := sp.Next(logits.Data)
		if err != nil {
			return nil, err
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
