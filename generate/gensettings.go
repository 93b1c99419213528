package generate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/sampling"
)

// SamplingOverrides are a command line's changes to generation_config.json,
// applied as transformers' generate(**kwargs) applies keyword arguments:
// each one given replaces the file's key before the processors are built
// (sampling.FromKeys), with no JSON written in between. A nil field leaves the file's value.
type SamplingOverrides struct {
	// Greedy turns sampling off (do_sample false); the repetition penalty
	// still applies, as in transformers.
	Greedy bool
	// Temperature > 0 turns sampling on with it (do_sample true, and the
	// keys the file leaves out take transformers' defaults, top_k 50 among
	// them); 0 is greedy.
	Temperature *float64
	TopK        *int
	TopP, MinP  *float64
	// RepetitionPenalty applies greedy or sampled; 1 is off.
	RepetitionPenalty *float64
	// Seed seeds the draws.
	Seed uint64
}

// Validate checks the values given against the ranges their processors
// accept, naming the setting.
func (o SamplingOverrides) Validate() error {
	bad := func(p *float64, lo, hi float64, loOpen bool) bool {
		return p != nil && (math.IsNaN(*p) || *p < lo || *p > hi || loOpen && *p == lo)
	}
	switch {
	case bad(o.Temperature, 0, math.MaxFloat64, false):
		return fmt.Errorf("temperature must be ≥ 0 (0 = greedy), got %g", *o.Temperature)
	case o.TopK != nil && *o.TopK < 0:
		return fmt.Errorf("top-k must be ≥ 0 (0 = off), got %d", *o.TopK)
	case bad(o.TopP, 0, 1, false):
		return fmt.Errorf("top-p must be in [0, 1] (1 = off), got %g", *o.TopP)
	case bad(o.MinP, 0, 1, false):
		return fmt.Errorf("min-p must be in [0, 1] (0 = off), got %g", *o.MinP)
	case bad(o.RepetitionPenalty, 0, math.MaxFloat64, true):
		return fmt.Errorf("repetition penalty must be > 0 (1 = off), got %g", *o.RepetitionPenalty)
	}
	return nil
}

// GenerationSettings are what a generation samples with.
type GenerationSettings struct {
	Config sampling.Config
	Seed   uint64
	// Path is the generation_config.json read ("" when there was none).
	Path string
	// Report names the file's keys that are not applied.
	Report sampling.Report
}

// LoadGenerationSettings builds the processing transformers' generate
// builds from DIR/generation_config.json (none, or dir "": greedy) with o's
// changes applied first. An error in the file names it.
func LoadGenerationSettings(dir string, o SamplingOverrides) (GenerationSettings, error) {
	g := GenerationSettings{Seed: o.Seed}
	if err := o.Validate(); err != nil {
		return g, err
	}
	var raw map[string]json.RawMessage
	if dir != "" {
		path := filepath.Join(dir, "generation_config.json")
		data, err := safeio.ReadCapped(path, model.MaxGenerationConfigBytes, "generation_config.json")
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return g, err
		default:
			g.Path = path
			if err := safeio.DecodeJSON(data, &raw); err != nil {
				return g, fmt.Errorf("%s: want a JSON object: %w", path, err)
			}
			if raw == nil {
				return g, fmt.Errorf("%s: want a JSON object, got null", path)
			}
		}
	}
	doSample, given := o.keys()
	cfg, rep, err := sampling.FromKeys(raw, doSample, given)
	if err != nil {
		if g.Path != "" {
			err = fmt.Errorf("%s: %w", filepath.Dir(g.Path), err)
		}
		return g, err
	}
	g.Config, g.Report = cfg, rep
	return g, nil
}

// keys are o's values as generation_config.json's keys: a temperature
// sets do_sample (> 0: on, with it; 0: off), Greedy turns it off.
func (o SamplingOverrides) keys() (doSample *bool, given map[string]float64) {
	given = map[string]float64{}
	if t := o.Temperature; t != nil {
		on := *t > 0
		doSample = &on
		if on {
			given["temperature"] = *t
		}
	}
	if o.Greedy {
		doSample = new(bool)
	}
	if o.TopK != nil {
		given["top_k"] = float64(*o.TopK)
	}
	for key, v := range map[string]*float64{"top_p": o.TopP, "min_p": o.MinP, "repetition_penalty": o.RepetitionPenalty} {
		if v != nil {
			given[key] = *v
		}
	}
	return doSample, given
}

// String describes the processing in one phrase: "greedy", or the
// settings that apply, e.g. "temperature 0.6, top-k 20, top-p 0.95".
func (g GenerationSettings) String() string {
	c := g.Config
	var parts []string
	add := func(on bool, format string, v any) {
		if on {
			parts = append(parts, fmt.Sprintf(format, v))
		}
	}
	if !c.DoSample {
		parts = append(parts, "greedy")
	} else {
		add(true, "temperature %g", cmpOr(c.Temperature, 1))
		add(c.TopK > 0, "top-k %d", c.TopK)
		add(c.TopP > 0 && c.TopP < 1, "top-p %g", c.TopP)
		add(c.MinP > 0, "min-p %g", c.MinP)
		add(c.TypicalP > 0 && c.TypicalP < 1, "typical-p %g", c.TypicalP)
		add(c.TopH > 0, "top-h %g", c.TopH)
		add(c.EpsilonCutoff > 0, "epsilon cutoff %g", c.EpsilonCutoff)
		add(c.EtaCutoff > 0, "eta cutoff %g", c.EtaCutoff)
		parts = append(parts, fmt.Sprintf("seed %d", g.Seed))
	}
	add(c.RepetitionPenalty > 0 && c.RepetitionPenalty != 1, "repetition penalty %g", c.RepetitionPenalty)
	return strings.Join(parts, ", ")
}

func cmpOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
