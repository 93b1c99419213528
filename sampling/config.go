package sampling

import (
	"errors"
	"fmt"
	"math"
)

// Config is the logits processing that transformers' generate builds from a
// GenerationConfig (GenerationMixin._get_logits_processor), for one sequence
// (num_beams 1, so min_tokens_to_keep is 1). A zero field is off; see each
// field for its values. The zero Config is greedy decoding.
type Config struct {
	// DoSample draws from the processed distribution; false is greedy
	// (argmax). Only RepetitionPenalty applies when greedy, as in
	// transformers, where the warpers below are added only with do_sample.
	DoSample bool
	// RepetitionPenalty divides the positive and multiplies the negative
	// scores of every token id seen (prompt included), once per token.
	// 0 or 1: off; otherwise > 0.
	RepetitionPenalty float64
	// Temperature divides the scores. 0 or 1: off; otherwise > 0.
	Temperature float64
	// TopH keeps, of the 100 highest scores, the prefix whose cumulative
	// entropy stays within TopH times their entropy. 0: off; else in (0, 1].
	TopH float64
	// TopK keeps the scores ≥ the K-th highest (ties kept). 0: off.
	TopK int
	// TopP keeps the smallest prefix of the descending scores whose
	// probability reaches TopP. 0 or 1: off; otherwise in (0, 1).
	// (generation_config.json's top_p 0, which keeps one token, is
	// MinTopP, whose 1 − top_p is 1 in float64 exactly as for 0.)
	TopP float64
	// MinP drops tokens less likely than MinP times the most likely one.
	// 0: off (it drops nothing); otherwise in (0, 1].
	MinP float64
	// TypicalP keeps the most locally typical tokens up to this mass.
	// 0 or 1: off; otherwise in (0, 1).
	TypicalP float64
	// EpsilonCutoff drops tokens with probability below it (the most
	// likely is kept). 0: off; otherwise in (0, 1).
	EpsilonCutoff float64
	// EtaCutoff drops tokens below min(ε, √ε·e^−entropy) for ε = EtaCutoff
	// (the most likely is kept). 0: off; otherwise in (0, 1).
	EtaCutoff float64
}

// MinTopP is the TopP that stands for generation_config.json's top_p 0:
// transformers' TopPLogitsWarper(0) removes every token whose ascending
// cumulative probability is ≤ 1 − 0 = 1, and 1 − MinTopP is also exactly 1.
const MinTopP = math.SmallestNonzeroFloat64

// Processor names, as transformers' classes are named.
const (
	NameRepetitionPenalty = "RepetitionPenaltyLogitsProcessor"
	NameTemperature       = "TemperatureLogitsWarper"
	NameTopH              = "TopHLogitsWarper"
	NameTopK              = "TopKLogitsWarper"
	NameTopP              = "TopPLogitsWarper"
	NameMinP              = "MinPLogitsWarper"
	NameTypical           = "TypicalLogitsWarper"
	NameEpsilon           = "EpsilonLogitsWarper"
	NameEta               = "EtaLogitsWarper"
)

// topHCandidates is TopHLogitsWarper's top_n: it looks at the 100 highest
// scores only.
const topHCandidates = 100

// Validate checks every field against the range its processor accepts.
func (c Config) Validate() error {
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	switch {
	case bad(c.RepetitionPenalty):
		return fmt.Errorf("repetition penalty must be > 0 (1 = off), got %g", c.RepetitionPenalty)
	case bad(c.Temperature):
		return fmt.Errorf("temperature must be > 0 (1 = off), got %g", c.Temperature)
	case c.TopK < 0:
		return fmt.Errorf("top-k must be ≥ 0 (0 = off), got %d", c.TopK)
	case bad(c.TopP) || c.TopP > 1:
		return fmt.Errorf("top-p must be in [0, 1] (0 or 1 = off), got %g", c.TopP)
	case bad(c.TopH) || c.TopH > 1:
		return fmt.Errorf("top-h must be in (0, 1] (0 = off), got %g", c.TopH)
	case bad(c.MinP) || c.MinP > 1:
		return fmt.Errorf("min-p must be in [0, 1] (0 = off), got %g", c.MinP)
	case bad(c.TypicalP) || c.TypicalP > 1:
		return fmt.Errorf("typical-p must be in (0, 1) (0 or 1 = off), got %g", c.TypicalP)
	case bad(c.EpsilonCutoff) || c.EpsilonCutoff >= 1:
		return fmt.Errorf("epsilon cutoff must be in (0, 1) (0 = off), got %g", c.EpsilonCutoff)
	case bad(c.EtaCutoff) || c.EtaCutoff >= 1:
		return fmt.Errorf("eta cutoff must be in (0, 1) (0 = off), got %g", c.EtaCutoff)
	}
	return nil
}

func (c Config) penaltyOn() bool { return c.RepetitionPenalty != 0 && c.RepetitionPenalty != 1 }
func (c Config) tempOn() bool    { return c.DoSample && c.Temperature != 0 && c.Temperature != 1 }
func (c Config) topHOn() bool    { return c.DoSample && c.TopH != 0 }
func (c Config) topKOn() bool    { return c.DoSample && c.TopK != 0 }
func (c Config) topPOn() bool    { return c.DoSample && c.TopP != 0 && c.TopP != 1 }
func (c Config) minPOn() bool    { return c.DoSample && c.MinP != 0 }
func (c Config) typicalOn() bool { return c.DoSample && c.TypicalP != 0 && c.TypicalP != 1 }
func (c Config) epsilonOn() bool { return c.DoSample && c.EpsilonCutoff != 0 }
func (c Config) etaOn() bool     { return c.DoSample && c.EtaCutoff != 0 }

// Processors names the processors c applies, in the order transformers
// applies them: repetition penalty, then (sampling only) temperature,
// top-h, top-k, top-p, min-p, typical, epsilon, eta.
func (c Config) Processors() []string {
	var out []string
	for _, p := range []struct {
		on   bool
		name string
	}{
		{c.penaltyOn(), NameRepetitionPenalty},
		{c.tempOn(), NameTemperature},
		{c.topHOn(), NameTopH},
		{c.topKOn(), NameTopK},
		{c.topPOn(), NameTopP},
		{c.minPOn(), NameMinP},
		{c.typicalOn(), NameTypical},
		{c.epsilonOn(), NameEpsilon},
		{c.etaOn(), NameEta},
	} {
		if p.on {
			out = append(out, p.name)
		}
	}
	return out
}

// truncates reports whether any warper after temperature can drop tokens.
func (c Config) truncates() bool {
	return c.topHOn() || c.topKOn() || c.topPOn() || c.minPOn() || c.typicalOn() || c.epsilonOn() || c.etaOn()
}

// ErrNoToken is returned when no token can be drawn: every score is −Inf.
var ErrNoToken = errors.New("sampling: every logit is -Inf, no token can be chosen")
