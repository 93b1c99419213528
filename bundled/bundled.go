// Package bundled is qwenref's out-of-the-box model: the real Qwen3
// tokenizer (embedded, gzipped) and a tiny model of the Qwen3.5
// architecture whose weights are random, generated at start from a fixed
// seed. It exists so that `qwenref` runs with no download: the text it
// produces is meaningless, but every stage of the real pipeline runs.
package bundled

import (
	"bytes"
	_ "embed"
	"sync"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
)

//go:embed qwen3-tokenizer.json.gz
var tokenizerGz []byte

// Seed is the seed of the bundled model's random weights.
const Seed = 20261130

// Notice is what the CLI prints so that nobody mistakes the output for a
// trained model's.
const Notice = "bundled default: a tiny Qwen3.5-architecture model (8 layers: 6 Gated DeltaNet + 2 gated attention, hidden 64) " +
	"with RANDOM weights (seed 20261130) and the real Qwen3 tokenizer. Its text is gibberish by construction; " +
	"pass --model DIR to run a real checkpoint."

// SamplePrompts are the prompts `qwenref run` uses with no --prompt.
var SamplePrompts = []string{
	"The gated delta rule updates its state by",
	"Qwen3.5 alternates three linear-attention layers with",
	"你好，世界！",
}

var (
	tokOnce sync.Once
	tok     *tokenizer.Tokenizer
	tokErr  error
)

// Tokenizer returns the embedded Qwen3 tokenizer (parsed once).
func Tokenizer() (*tokenizer.Tokenizer, error) {
	tokOnce.Do(func() { tok, tokErr = tokenizer.LoadGzip(bytes.NewReader(tokenizerGz)) })
	return tok, tokErr
}

// Config is the bundled model's config: the "tiny" shape with the
// tokenizer's vocabulary padded to a multiple of 128, as Qwen pads its own.
func Config() (*model.Config, error) {
	t, err := Tokenizer()
	if err != nil {
		return nil, err
	}
	cfg, err := model.ShapeConfig("tiny")
	if err != nil {
		return nil, err
	}
	cfg.VocabSize = (t.VocabSize() + 127) / 128 * 128
	if id, ok := t.TokenToID("<|endoftext|>"); ok {
		cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, id)
	}
	if id, ok := t.TokenToID("<|im_end|>"); ok {
		cfg.EOSTokenIDs = append(cfg.EOSTokenIDs, id)
	}
	return cfg, cfg.Validate()
}

// Model builds the bundled model (bf16 weights, as a checkpoint would
// hold them) and its tokenizer.
func Model() (*model.Model, *tokenizer.Tokenizer, error) {
	t, err := Tokenizer()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := Config()
	if err != nil {
		return nil, nil, err
	}
	m, err := model.NewRandom(cfg, Seed, true)
	return m, t, err
}
