package sampling

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromGenerationConfig(t *testing.T) {
	cases := []struct {
		name, json string
		want       Config
		unapplied  []string
		ignored    []string
	}{
		{"Qwen3", `{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
			"temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}`,
			Config{DoSample: true, Temperature: 0.6, TopK: 20, TopP: 0.95}, nil, nil},
		{"Qwen2.5 with a repetition penalty", `{"do_sample": true, "repetition_penalty": 1.05, "temperature": 0.7, "top_p": 0.8, "top_k": 20}`,
			Config{DoSample: true, RepetitionPenalty: 1.05, Temperature: 0.7, TopK: 20, TopP: 0.8}, nil, nil},
		{"presence_penalty is not a GenerationConfig key", `{"do_sample": true, "top_k": 20, "presence_penalty": 1.5, "frequency_penalty": 0}`,
			Config{DoSample: true, TopK: 20}, nil, []string{"frequency_penalty", "presence_penalty"}},
		{"sampling defaults: top_k 50", `{"do_sample": true}`, Config{DoSample: true, TopK: 50}, nil, nil},
		{"greedy: warpers off, the penalty on", `{"temperature": 0.0, "top_k": -3, "top_p": 7, "repetition_penalty": 1.1}`,
			Config{RepetitionPenalty: 1.1}, nil, nil},
		{"no-op values", `{"do_sample": true, "temperature": 1, "top_k": 0, "top_p": 1.0, "typical_p": 1.0, "repetition_penalty": 1,
			"epsilon_cutoff": 0.0, "eta_cutoff": 1.5, "num_beams": 1, "no_repeat_ngram_size": 0, "min_length": 0,
			"bad_words_ids": null, "renormalize_logits": true, "length_penalty": 2, "use_cache": true}`,
			Config{DoSample: true}, nil, nil},
		{"every warper", `{"do_sample": true, "temperature": 0.9, "top_h": 0.5, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
			"typical_p": 0.95, "epsilon_cutoff": 3e-4, "eta_cutoff": 2e-3}`,
			Config{DoSample: true, Temperature: 0.9, TopH: 0.5, TopK: 40, TopP: 0.9, MinP: 0.05, TypicalP: 0.95,
				EpsilonCutoff: 3e-4, EtaCutoff: 2e-3}, nil, nil},
		{"top_p 0 keeps one token", `{"do_sample": true, "top_p": 0, "top_k": 0}`, Config{DoSample: true, TopP: MinTopP}, nil, nil},
		{"keys transformers applies and qwenref does not", `{"num_beams": 4, "no_repeat_ngram_size": 3, "max_length": 20,
			"min_new_tokens": 2, "suppress_tokens": [1, 2], "sequence_bias": null, "encoder_repetition_penalty": 1.2,
			"guidance_scale": 1.0, "num_return_sequences": "x"}`,
			Config{}, []string{"encoder_repetition_penalty", "max_length", "min_new_tokens", "no_repeat_ngram_size",
				"num_beams", "num_return_sequences", "suppress_tokens"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, rep, err := FromGenerationConfig([]byte(c.json))
			require.NoError(t, err)
			assert.Equal(t, c.want, cfg)
			assert.Equal(t, c.unapplied, rep.Unapplied)
			assert.Equal(t, c.ignored, rep.Ignored)
			assert.Equal(t, rep.Empty(), rep.String() == "")
			for _, k := range append(rep.Unapplied, rep.Ignored...) {
				assert.Contains(t, rep.String(), k)
			}
		})
	}
}

// The values transformers' processor constructors reject are errors, each
// naming the key.
func TestFromGenerationConfigErrors(t *testing.T) {
	for json, key := range map[string]string{
		`{"do_sample": true, "temperature": 0.0}`:  "temperature",
		`{"do_sample": true, "temperature": 2}`:    "temperature", // an int: TemperatureLogitsWarper wants a float
		`{"do_sample": true, "temperature": -1.0}`: "temperature",
		`{"do_sample": true, "top_k": -1}`:         "top_k",
		`{"do_sample": true, "top_k": 20.0}`:       "top_k", // a float: TopKLogitsWarper wants an int
		`{"do_sample": true, "top_p": -0.5}`:       "top_p",
		`{"do_sample": true, "min_p": 1.5}`:        "min_p",
		`{"do_sample": true, "top_h": 1.5}`:        "top_h",
		`{"do_sample": true, "typical_p": 0.0}`:    "typical_p",
		`{"repetition_penalty": 0.0}`:              "repetition_penalty",
		`{"repetition_penalty": 2}`:                "repetition_penalty",
		`{"do_sample": "yes"}`:                     "do_sample",
		`{"do_sample": true, "top_p": "0.9"}`:      "top_p",
		`[1, 2]`:                                   "JSON object",
		`{"top_k": 1e400}`:                         "top_k",
		`null`:                                     "JSON object, got null",
	} {
		_, _, err := FromGenerationConfig([]byte(json))
		if assert.Error(t, err, json) {
			assert.Contains(t, err.Error(), key, json)
			assert.NotContains(t, err.Error(), "\n", json)
		}
	}
	_, _, err := FromGenerationConfig([]byte("{" + strings.Repeat(" ", MaxGenerationConfigBytes) + "}"))
	assert.ErrorContains(t, err, "more than")
}

// A top_k past 2^31 (or past the float range, written as an integer) is
// accepted as transformers accepts it, which keeps min(top_k, vocabulary);
// and an error quotes at most 200 bytes of the value, escaped.
func TestFromGenerationConfigHugeAndLongValues(t *testing.T) {
	for _, k := range []string{"3000000000", "1" + strings.Repeat("0", 400)} {
		cfg, _, err := FromGenerationConfig([]byte(`{"do_sample": true, "top_k": ` + k + `}`))
		require.NoError(t, err, k)
		assert.Equal(t, math.MaxInt32, cfg.TopK)
		s, err := New(cfg, 5, 0)
		require.NoError(t, err)
		kept, err := s.Process([]float32{1, 2, 3, 4, 5})
		require.NoError(t, err)
		assert.Equal(t, []float32{1, 2, 3, 4, 5}, kept, "every token is kept")
	}
	for _, js := range []string{
		`{"do_sample": true, "top_k": "` + strings.Repeat("x", 1<<20) + `"}`,
		`{"do_sample": [` + strings.Repeat("1,", 1<<19) + `1]}`,
		`{"do_sample": true, "min_p": "2J` + strings.Repeat("y", 300) + `"}`,
	} {
		_, _, err := FromGenerationConfig([]byte(js))
		if assert.Error(t, err) {
			assert.Less(t, len(err.Error()), 400)
			assert.NotContains(t, err.Error(), "")
		}
	}
}

// Every key is either applied, without effect, acted on by transformers,
// or reported as unknown: the classification lists do not overlap.
func TestKeyTablesDisjoint(t *testing.T) {
	seen := map[string]string{}
	add := func(list string, keys ...string) {
		for _, k := range keys {
			if prev, ok := seen[k]; ok {
				t.Errorf("%q is in %s and %s", k, prev, list)
			}
			seen[k] = list
		}
	}
	add("appliedKeys", appliedKeys...)
	add("noEffectKeys", noEffectKeys...)
	for k := range activeKeys {
		add("activeKeys", k)
	}
}

func FuzzFromGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95}`))
	f.Add([]byte(`{"repetition_penalty": 1.1, "num_beams": 2, "presence_penalty": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, _, err := FromGenerationConfig(data)
		if err != nil {
			return
		}
		if _, err := New(cfg, 8, 0); err != nil {
			t.Fatalf("FromGenerationConfig accepted %s but New rejects %+v: %v", data, cfg, err)
		}
	})
}

// A caller's values replace the file's keys as the same values written in
// the file would (top_k read as an integer, the others as floats), a
// replaced key's bad value in the file is not read, and a key FromKeys
// does not apply is refused.
func TestFromKeysAppliesValuesAsKeys(t *testing.T) {
	raw := map[string]json.RawMessage{"do_sample": json.RawMessage(`"yes"`), "temperature": json.RawMessage(`"hot"`), "top_p": json.RawMessage(`0.9`)}
	on := true
	cfg, _, err := FromKeys(raw, &on, map[string]float64{"temperature": 1, "top_k": 7, "min_p": 0.05})
	require.NoError(t, err)
	want, _, err := FromGenerationConfig([]byte(`{"do_sample": true, "temperature": 1.0, "top_k": 7, "min_p": 0.05, "top_p": 0.9}`))
	require.NoError(t, err)
	assert.Equal(t, want, cfg)
	assert.Equal(t, Config{DoSample: true, TopK: 7, TopP: 0.9, MinP: 0.05}, cfg)

	_, _, err = FromKeys(raw, nil, map[string]float64{"temperature": 1})
	assert.ErrorContains(t, err, `do_sample must be true or false, got "yes"`, "do_sample not given: the file's is read")
	_, _, err = FromKeys(nil, &on, map[string]float64{"top_k": 2.5})
	assert.ErrorContains(t, err, "top_k must be a positive integer")
	_, _, err = FromKeys(nil, nil, map[string]float64{"repetition_penalty": 2})
	require.NoError(t, err, "a given penalty is a float, as a flag's is")
	_, _, err = FromKeys(nil, nil, map[string]float64{"do_sample": 1})
	assert.ErrorContains(t, err, `"do_sample" is not a number key`)
}
