package sampling

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// MaxGenerationConfigBytes bounds what FromGenerationConfig parses; real
// generation_config.json files are a few hundred bytes.
const MaxGenerationConfigBytes = 1 << 20

// Report lists the keys of a generation_config.json that FromGenerationConfig
// did not turn into processing, so that a caller can warn once.
type Report struct {
	// Unapplied are keys that transformers' generate acts on, set to a value
	// that changes what it generates, that this package does not apply
	// (e.g. no_repeat_ngram_size 3, num_beams 4, max_length 20).
	Unapplied []string
	// Ignored are keys transformers' GenerationConfig does not define, which
	// its generate ignores as well (e.g. presence_penalty).
	Ignored []string
}

// Empty reports whether every key was applied or has no effect.
func (r Report) Empty() bool { return len(r.Unapplied) == 0 && len(r.Ignored) == 0 }

// String is a one-line warning naming the keys, or "" when r is empty.
func (r Report) String() string {
	var parts []string
	if len(r.Unapplied) > 0 {
		parts = append(parts, "not applied by qwenref: "+strings.Join(r.Unapplied, ", "))
	}
	if len(r.Ignored) > 0 {
		parts = append(parts, "not used by transformers' generate either: "+strings.Join(r.Ignored, ", "))
	}
	return strings.Join(parts, "; ")
}

// appliedKeys are the keys FromGenerationConfig maps onto Config.
var appliedKeys = []string{
	"do_sample", "temperature", "top_k", "top_p", "min_p", "top_h", "typical_p",
	"epsilon_cutoff", "eta_cutoff", "repetition_penalty",
}

// noEffectKeys do not change which tokens one sequence's decoding chooses:
// metadata, special ids other code handles (generation stops at
// eos_token_id in the model package), cache and output switches, options of
// modes that other keys select (beam search, assisted decoding), and
// renormalize_logits, a log-softmax after the chain that keeps every
// probability and the argmax.
var noEffectKeys = []string{
	"_from_model_config", "transformers_version", "_commit_hash", "_original_object_hash",
	"bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id",
	"use_cache", "cache_implementation", "cache_config", "max_cache_len", "return_legacy_cache",
	"output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
	"compile_config", "disable_compile", "prefill_chunk_size", "continuous_batching_config", "low_memory",
	"renormalize_logits", "length_penalty", "early_stopping",
	"is_assistant", "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
	"assistant_lookbehind", "target_lookbehind", "max_matching_ngram_size", "assistant_ensemble_weight",
	"speculation_type",
}

// activeKeys are keys transformers acts on that this package does not
// apply, with the test for a value that has an effect (null never does).
var activeKeys = map[string]func(json.RawMessage) bool{
	"num_beams": numAbove(1), "num_beam_groups": numAbove(1), "num_return_sequences": numAbove(1),
	"no_repeat_ngram_size": numAbove(0), "encoder_no_repeat_ngram_size": numAbove(0),
	"min_length": numAbove(0), "min_new_tokens": numAbove(0),
	"diversity_penalty": numNot(0), "penalty_alpha": numAbove(0),
	"encoder_repetition_penalty": numNot(1), "guidance_scale": numNot(1),
	"remove_invalid_values": isTrue, "token_healing": isTrue, "use_mtp": isTrue,
	"max_length": notNull, "max_new_tokens": notNull, "max_time": notNull, "stop_strings": notNull,
	"bad_words_ids": notNull, "forced_bos_token_id": notNull, "forced_eos_token_id": notNull,
	"exponential_decay_length_penalty": notNull, "suppress_tokens": notNull, "begin_suppress_tokens": notNull,
	"sequence_bias": notNull, "watermarking_config": notNull, "constraints": notNull, "force_words_ids": notNull,
	"dola_layers": notNull, "prompt_lookup_num_tokens": notNull, "assistant_early_exit": notNull,
	"forced_decoder_ids": notNull,
}

func isNull(v json.RawMessage) bool  { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }
func notNull(v json.RawMessage) bool { return !isNull(v) }
func isTrue(v json.RawMessage) bool  { return bytes.Equal(bytes.TrimSpace(v), []byte("true")) }

// numAbove and numNot treat a value that is not a number as having an
// effect, so that it is reported rather than dropped.
func numAbove(limit float64) func(json.RawMessage) bool {
	return func(v json.RawMessage) bool {
		var f float64
		if isNull(v) {
			return false
		}
		return json.Unmarshal(v, &f) != nil || f > limit
	}
}

func numNot(off float64) func(json.RawMessage) bool {
	return func(v json.RawMessage) bool {
		var f float64
		if isNull(v) {
			return false
		}
		return json.Unmarshal(v, &f) != nil || f != off
	}
}

// number is a JSON number and whether it was written as an integer (no
// '.', 'e' or 'E'), which transformers' isinstance checks tell apart.
type number struct {
	v     float64
	isInt bool
	set   bool
}

func readNumber(raw map[string]json.RawMessage, key string) (number, error) {
	v, ok := raw[key]
	if !ok || isNull(v) {
		return number{}, nil
	}
	var n json.Number
	if t := bytes.TrimSpace(v); len(t) == 0 || t[0] == '"' || json.Unmarshal(t, &n) != nil {
		return number{}, fmt.Errorf("generation_config.json: %s must be a number, got %s", key, shown(v))
	}
	isInt := !strings.ContainsAny(string(n), ".eE")
	f, err := n.Float64()
	if err != nil && !(isInt && errors.Is(err, strconv.ErrRange)) {
		return number{}, fmt.Errorf("generation_config.json: %s: %s is out of the float range", key, shown(v))
	}
	// An integer past the float range is ±Inf here: Python's int compares
	// the same way with the bounds below.
	return number{v: f, isInt: isInt, set: true}, nil
}

// shown is a raw JSON value as an error message quotes it: escaped, and
// cut after 200 bytes.
func shown(v json.RawMessage) string { return safeio.Clean(string(bytes.TrimSpace(v))) }

// FromGenerationConfig builds the Config that transformers 5.17's generate
// builds from generation_config.json's contents: with do_sample true, unset
// keys take GenerationConfig's global defaults (temperature 1, top_k 50,
// top_p 1, typical_p 1), and every value a processor's constructor rejects
// is an error here, as it is there. The Report names every key it does not
// apply.
func FromGenerationConfig(data []byte) (Config, Report, error) {
	if len(data) > MaxGenerationConfigBytes {
		return Config{}, Report{}, fmt.Errorf("generation_config.json: %d bytes, more than the %d accepted", len(data), MaxGenerationConfigBytes)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, Report{}, fmt.Errorf("generation_config.json: want a JSON object: %w", err)
	}
	if raw == nil { // null, which GenerationConfig.from_dict cannot take either
		return Config{}, Report{}, fmt.Errorf("generation_config.json: want a JSON object, got null")
	}
	return FromKeys(raw, nil, nil)
}

// FromKeys is FromGenerationConfig over the file's keys, decoded (nil: no
// file), with a caller's values applied first, as generate(**kwargs)
// applies keyword arguments: doSample, if set, replaces do_sample, and each
// number in given replaces the key it names (top_k an integer, the others
// floats, as transformers' type checks tell them apart), before the
// processors are built.
func FromKeys(raw map[string]json.RawMessage, doSample *bool, given map[string]float64) (Config, Report, error) {
	var cfg Config
	var rep Report
	for k := range given {
		if !slices.Contains(appliedKeys[1:], k) {
			return cfg, rep, fmt.Errorf("sampling: %q is not a number key qwenref applies (%s)", k, strings.Join(appliedKeys[1:], ", "))
		}
	}
	for k, v := range raw {
		switch {
		case slices.Contains(appliedKeys, k), slices.Contains(noEffectKeys, k):
		case activeKeys[k] != nil:
			if activeKeys[k](v) {
				rep.Unapplied = append(rep.Unapplied, k)
			}
		default:
			if !isNull(v) {
				rep.Ignored = append(rep.Ignored, k)
			}
		}
	}
	slices.Sort(rep.Unapplied)
	slices.Sort(rep.Ignored)

	if doSample != nil {
		cfg.DoSample = *doSample
	} else if v, ok := raw["do_sample"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &cfg.DoSample); err != nil {
			return cfg, rep, fmt.Errorf("generation_config.json: do_sample must be true or false, got %s", shown(v))
		}
	}
	num := map[string]number{}
	for _, k := range appliedKeys[1:] {
		if v, ok := given[k]; ok {
			num[k] = number{v: v, isInt: k == "top_k" && v == math.Trunc(v), set: true}
			continue
		}
		n, err := readNumber(raw, k)
		if err != nil {
			return cfg, rep, err
		}
		num[k] = n
	}
	if err := applyPenalty(&cfg, num["repetition_penalty"]); err != nil {
		return cfg, rep, err
	}
	if cfg.DoSample {
		if err := applyWarpers(&cfg, num); err != nil {
			return cfg, rep, err
		}
	}
	return cfg, rep, cfg.Validate()
}

// applyPenalty mirrors RepetitionPenaltyLogitsProcessor's constructor: added
// when the value is not 1, it must be a float > 0.
func applyPenalty(cfg *Config, p number) error {
	if !p.set || p.v == 1 {
		return nil
	}
	if p.isInt || !(p.v > 0) {
		return fmt.Errorf("generation_config.json: repetition_penalty must be a float > 0 (write %g as a float), got %g", p.v, p.v)
	}
	cfg.RepetitionPenalty = p.v
	return nil
}

// applyWarpers mirrors the sampling half of _get_logits_processor: which
// values add a warper, and which values its constructor rejects.
func applyWarpers(cfg *Config, num map[string]number) error {
	bad := func(key, want string, v float64) error {
		return fmt.Errorf("generation_config.json: %s must be %s, got %g", key, want, v)
	}
	if t := num["temperature"]; t.set && t.v != 1 {
		if t.isInt || !(t.v > 0) {
			return bad("temperature", "a float > 0 (do_sample false is greedy)", t.v)
		}
		cfg.Temperature = t.v
	}
	if h := num["top_h"]; h.set {
		if !(h.v > 0 && h.v <= 1) {
			return bad("top_h", "in (0, 1]", h.v)
		}
		cfg.TopH = h.v
	}
	switch k := num["top_k"]; {
	case !k.set:
		cfg.TopK = 50
	case k.v == 0:
	case !k.isInt || k.v < 0:
		return bad("top_k", "a positive integer (0 = off)", k.v)
	default:
		// TopKLogitsWarper takes min(top_k, vocabulary size), and no
		// vocabulary reaches 2^31 (New refuses one).
		cfg.TopK = int(min(k.v, math.MaxInt32))
	}
	if p := num["top_p"]; p.set && p.v < 1 {
		if p.v < 0 {
			return bad("top_p", "in [0, 1]", p.v)
		}
		cfg.TopP = p.v
		if p.v == 0 {
			cfg.TopP = MinTopP
		}
	}
	if m := num["min_p"]; m.set {
		if !(m.v >= 0 && m.v <= 1) {
			return bad("min_p", "in [0, 1]", m.v)
		}
		cfg.MinP = m.v
	}
	if t := num["typical_p"]; t.set && t.v < 1 {
		if !(t.v > 0) {
			return bad("typical_p", "in (0, 1)", t.v)
		}
		cfg.TypicalP = t.v
	}
	if e := num["epsilon_cutoff"]; e.set && e.v > 0 && e.v < 1 {
		cfg.EpsilonCutoff = e.v
	}
	if e := num["eta_cutoff"]; e.set && e.v > 0 && e.v < 1 {
		cfg.EtaCutoff = e.v
	}
	return nil
}
