package model

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfig27B(t *testing.T) {
	cfg, err := LoadConfig("../testdata/configs/qwen3.5-27b.json")
	require.NoError(t, err)
	lin, full := cfg.CountLayers()
	assert.Equal(t, 48, lin)
	assert.Equal(t, 16, full)
	// Layers 3, 7, …, 63 are full attention (docs/spec.md §1.1).
	for i, k := range cfg.LayerTypes {
		assert.Equal(t, (i+1)%4 == 0, k == FullAttention, "layer %d", i)
	}
	// Measured by transformers on the meta device (docs/spec.md §1.3).
	assert.Equal(t, int64(26_895_998_464), cfg.TextParams())
	assert.Equal(t, 10240, cfg.ConvDim())
	assert.Equal(t, 64, cfg.RotaryDim())
	assert.Equal(t, 1e7, cfg.RopeTheta)
	assert.Equal(t, []int{11, 11, 10}, cfg.MRopeSection)
	assert.False(t, cfg.TieWordEmbeddings)
	assert.Equal(t, "Qwen3_5ForConditionalGeneration", cfg.Architecture)
}

func TestConfigGoldensParse(t *testing.T) {
	for _, c := range []struct {
		dir       string
		tied      bool
		lin, full int
		eos       []int
	}{
		{"causal-f32-t70-b2", true, 3, 1, nil},
		{"hub-bf16-sharded", false, 6, 2, []int{3, 7}},
		{"causal-f16-t130", false, 2, 2, nil},
	} {
		cfg, err := LoadConfig(filepath.Join("../testdata/golden", c.dir))
		require.NoError(t, err, c.dir)
		lin, full := cfg.CountLayers()
		assert.Equal(t, c.lin, lin, c.dir)
		assert.Equal(t, c.full, full, c.dir)
		assert.Equal(t, c.tied, cfg.TieWordEmbeddings, c.dir)
		assert.Equal(t, c.eos, cfg.EOSTokenIDs, c.dir)
	}
}

func TestConfigFallbacks(t *testing.T) {
	flat := `{"model_type":"qwen3_5_text","vocab_size":10,"hidden_size":8,"intermediate_size":8,
	"num_hidden_layers":8,"num_attention_heads":2,"num_key_value_heads":1,"head_dim":8,
	"linear_num_key_heads":1,"linear_num_value_heads":2,"linear_key_head_dim":4,"linear_value_head_dim":4,
	"rope_theta":500,"partial_rotary_factor":0.5,"eos_token_id":3}`
	cfg, err := ParseConfig([]byte(flat))
	require.NoError(t, err)
	assert.Equal(t, 500.0, cfg.RopeTheta, "top-level rope_theta is the fallback")
	assert.Equal(t, 0.5, cfg.PartialRotaryFactor)
	assert.Equal(t, 4, cfg.LinearConvKernel, "transformers' default conv kernel")
	assert.Equal(t, []int{3}, cfg.EOSTokenIDs)
	_, full := cfg.CountLayers()
	assert.Equal(t, 2, full, "default full_attention_interval is 4")

	// rope_parameters wins over the top-level keys.
	withRP := flat[:len(flat)-1] + `,"rope_parameters":{"rope_type":"default","rope_theta":1e7,"partial_rotary_factor":0.25}}`
	cfg, err = ParseConfig([]byte(withRP))
	require.NoError(t, err)
	assert.Equal(t, 1e7, cfg.RopeTheta)
	assert.Equal(t, 0.25, cfg.PartialRotaryFactor)
}

func TestConfigErrors(t *testing.T) {
	base := hostileBase
	for _, c := range []struct{ name, json, want string }{
		{"not json", `{`, "invalid JSON"},
		{"no model_type", `{}`, "model_type is missing"},
		{"other model", `{"model_type":"llama"}`, `"llama" is not a Qwen3.5`},
		{"moe hub without text_config", `{"model_type":"qwen3_5_moe"}`, "text_config"},
		{"experts in a dense model", base(`,"num_experts":8`), "the dense Qwen3.5 models have no experts"},
		{"hub without text_config", `{"model_type":"qwen3_5"}`, "text_config"},
		{"wrong type", `{"model_type":"qwen3_5_text","hidden_size":"big"}`, "hidden_size"},
		{"missing keys", `{"model_type":"qwen3_5_text","vocab_size":3}`, "missing required keys: hidden_size"},
		{"heads ratio", base(`,"linear_num_value_heads":3`), "multiple of linear_num_key_heads"},
		{"gqa ratio", base(`,"num_key_value_heads":3`), "multiple of num_key_value_heads"},
		{"negative", base(`,"hidden_size":-8`), "hidden_size must be positive"},
		{"layer_types length", base(`,"layer_types":["full_attention"]`), "layer_types has 1 entries"},
		{"layer_types value", base(`,"layer_types":["full_attention","moe"]`), `layer_types[1] = "moe"`},
		{"rope type", base(`,"rope_parameters":{"rope_type":"yarn"}`), `rope_type "yarn"`},
		{"act", base(`,"hidden_act":"gelu"`), `hidden_act "gelu"`},
		{"eos range", base(`,"eos_token_id":[1,99]`), "eos_token_id 99 is outside"},
		{"odd rotary", base(`,"partial_rotary_factor":0.375`), "rotary dim"},
		{"huge", base(`,"vocab_size":1000000000000`), "vocab_size is 1000000000000, over the limit"},
	} {
		_, err := ParseConfig([]byte(c.json))
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
		}
	}
	_, err := LoadConfig(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestShapes(t *testing.T) {
	from, err := LoadConfig("../testdata/configs/qwen3.5-27b.json")
	require.NoError(t, err)
	named, err := ShapeConfig("27b")
	require.NoError(t, err)
	assert.Equal(t, from.TextParams(), named.TextParams())
	assert.Equal(t, from.LayerTypes, named.LayerTypes)
	for _, n := range ShapeNames() {
		_, err := ShapeConfig(n)
		assert.NoError(t, err, n)
	}
	_, err = ShapeConfig("70b")
	assert.ErrorContains(t, err, "unknown shape")
}

// hostileBase is a valid flat config with extra keys spliced in.
// A key in extra replaces the base's (a key twice is refused by itself).
func hostileBase(extra string) string {
	var b strings.Builder
	b.WriteString(`{"model_type":"qwen3_5_text"`)
	for _, kv := range []string{`"vocab_size":10`, `"hidden_size":8`, `"intermediate_size":8`,
		`"num_hidden_layers":2`, `"num_attention_heads":2`, `"num_key_value_heads":1`, `"head_dim":8`,
		`"linear_num_key_heads":2`, `"linear_num_value_heads":4`, `"linear_key_head_dim":4`, `"linear_value_head_dim":4`} {
		if key, _, _ := strings.Cut(kv, ":"); !strings.Contains(extra, key+":") {
			b.WriteString("," + kv)
		}
	}
	return b.String() + extra + "}"
}

// TestHostileConfigs is the catalogue of configs that must be refused at
// parse time, quickly and with a short message naming the key.
func TestHostileConfigs(t *testing.T) {
	many := `,"layer_types":[` + strings.TrimSuffix(strings.Repeat(`"moe",`, 65536), ",") + `],"num_hidden_layers":65536`
	for _, c := range []struct{ name, json, want string }{
		{"a billion layers, no layer_types", hostileBase(`,"num_hidden_layers":1000000000`), "num_hidden_layers is 1000000000: want 1 to 1024"},
		{"65536 layers with types", hostileBase(many), "num_hidden_layers is 65536"},
		{"products overflow", hostileBase(`,"hidden_size":16777216,"vocab_size":16777216`), "embed_tokens [vocab_size, hidden_size] has more than"},
		{"heads times dims", hostileBase(`,"linear_num_value_heads":16777216,"linear_num_key_heads":16777216,"linear_value_head_dim":16777216`), "recurrent state [linear_num_value_heads, linear_key_head_dim, linear_value_head_dim] has more than"},
		{"int64 wrap", hostileBase(`,"hidden_size":9223372036854775807`), "hidden_size is 9223372036854775807, over the limit"},
		{"max_position_embeddings zero", hostileBase(`,"max_position_embeddings":0`), "max_position_embeddings must be positive"},
		{"max_position_embeddings negative", hostileBase(`,"max_position_embeddings":-5`), "max_position_embeddings must be positive"},
		{"absurd rope_theta", hostileBase(`,"rope_theta":1e300`), "rope_theta is 1e+300"},
		{"rope_theta below one", hostileBase(`,"rope_theta":0.5`), "the config is wrong"},
		{"rms_norm_eps of one", hostileBase(`,"rms_norm_eps":1`), "rms_norm_eps is 1"},
		{"eos negative", hostileBase(`,"eos_token_id":-1`), "eos_token_id -1 is outside"},
		{"a number of 5,000 digits", hostileBase(`,"hidden_size":6` + strings.Repeat("4", 5000)), "hidden_size: want an integer, got JSON number 644"},
		{"eos of a 5,000-byte string", hostileBase(`,"eos_token_id":["` + strings.Repeat("a", 5000) + `"]`), `eos_token_id: want an integer or a list of integers, got ["aaa`},
		{"config an array", `[]`, "want an object, got JSON array"},
		{"text_config a string", `{"model_type":"qwen3_5","text_config":"x"}`, "text_config: want an object, got JSON string"},
		{"layer_types a string", hostileBase(`,"layer_types":"full_attention"`), "layer_types: want an array of strings, got JSON string"},
	} {
		start := time.Now()
		_, err := ParseConfig([]byte(c.json))
		if assert.Error(t, err, c.name) {
			assert.Contains(t, err.Error(), c.want, c.name)
			assert.Less(t, len(err.Error()), 2000, "%s: message of %d bytes", c.name, len(err.Error()))
			assert.NotContains(t, err.Error(), "\n", c.name)
		}
		assert.Less(t, time.Since(start), 2*time.Second, c.name)
	}
	// Many problems at once are capped at 20 plus a count.
	var b strings.Builder
	b.WriteString(`,"eos_token_id":[`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%d", 100+i)
	}
	b.WriteString("]")
	_, err := ParseConfig([]byte(hostileBase(b.String())))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "and 480 more")
}

// Text a config repeats in a message is escaped: a format (bidi)
// character or an invalid byte written raw in the file must not reach the
// terminal raw.
func TestHostileConfigEchoesAreEscaped(t *testing.T) {
	_, err := ParseConfig([]byte(hostileBase(`,"eos_token_id":["\u202e` + "\u202e" + `"]`)))
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "\u202e")
	assert.Contains(t, err.Error(), `\u202e`)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(hostileBase("")), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte("{\"eos_token_id\":\"\xff\"}"), 0o644))
	_, err = LoadConfig(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `generation_config.json: invalid UTF-8 at byte 17`)
	assert.True(t, utf8.ValidString(err.Error()), "%q", err.Error())

	// A generation config that is not an object names no Go type.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`[1]`), 0o644))
	_, err = LoadConfig(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "generation_config.json: want an object, got JSON array")
	assert.NotContains(t, err.Error(), "struct")
}

// A config listing a million bad eos ids formats only the ones its
// message shows: when each got its own string, this 3 MB config made
// ParseConfig allocate 205 MB; now 45 MB (a 16 MiB config: 715 MB of RSS
// then, 170 MB now).
func TestHostileManyBadEOSIDs(t *testing.T) {
	js := []byte(hostileBase(`,"eos_token_id":[` + strings.Repeat("-1,", 999_999) + `-1]`))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := ParseConfig(js)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "eos_token_id -1 is outside the vocabulary [0, 10); ")
	assert.Contains(t, err.Error(), "and 999980 more")
	alloc := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, alloc, uint64(25*len(js)), "allocated %d bytes for a %d-byte config", alloc, len(js))
}

// A sparse config whose num_experts is wrong is told so, and not also
// that the dense MLP width it does not have is missing.
func TestMoEConfigWithoutExpertsBlamesNumExperts(t *testing.T) {
	_, js := tinyMoE(t)
	_, err := ParseConfig(bytes.Replace(js, []byte(`"num_experts":16`), []byte(`"num_experts":0`), 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "num_experts is 0")
	assert.NotContains(t, err.Error(), "intermediate_size")
}

func TestHostileConfigFiles(t *testing.T) {
	ok := hostileBase("")
	// generation_config.json's eos ids are checked against the vocabulary.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(ok), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id":[1,12]}`), 0o644))
	_, err := LoadConfig(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "generation_config.json")
	assert.Contains(t, err.Error(), "eos_token_id 12 is outside the vocabulary [0, 10)")

	// FIFOs in place of either file are errors, at once.
	for _, name := range []string{"config.json", "generation_config.json"} {
		dir := t.TempDir()
		if name != "config.json" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(ok), 0o644))
		}
		p := filepath.Join(dir, name)
		require.NoError(t, syscall.Mkfifo(p, 0o644))
		done := make(chan error, 1)
		go func() { _, err := LoadConfig(dir); done <- err }()
		select {
		case err := <-done:
			require.Error(t, err, name)
			assert.Contains(t, err.Error(), p)
			assert.Contains(t, err.Error(), "FIFO")
		case <-time.After(5 * time.Second):
			t.Fatalf("LoadConfig blocked on a FIFO %s", name)
		}
	}

	// An oversized config.json is refused before it is read.
	dir = t.TempDir()
	p := filepath.Join(dir, "config.json")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxConfigBytes+1))
	require.NoError(t, f.Close())
	_, err = LoadConfig(dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config.json is larger than the limit of 16 MiB")
}

func TestEstimateMemory(t *testing.T) {
	cfg, err := ShapeConfig("27b")
	require.NoError(t, err)
	small, err := EstimateMemory(cfg, 1, 16, 16)
	require.NoError(t, err)
	big, err := EstimateMemory(cfg, 1, 10_000_000, 10_000_000)
	require.NoError(t, err)
	// 10^7 rows of 248,320 float32 logits (plus hidden) are ~9.3 TiB.
	assert.InDelta(t, float64(10_000_000)*float64(248320+5120)*4, float64(big.Logits), 1)
	assert.Less(t, small.Total(), int64(1<<30))
	assert.Greater(t, big.Total(), big.Logits)
	err = CheckMemory(cfg, 1, 10_000_000, 10_000_000, 8<<30, "--max-memory 8")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--max-memory 8")
	assert.Contains(t, err.Error(), "GiB")
	_, err = EstimateMemory(cfg, math.MaxInt, math.MaxInt, 1)
	assert.ErrorContains(t, err, "overflow")
	_, err = EstimateMemory(cfg, -1, 1, 1)
	assert.Error(t, err)
	assert.ErrorContains(t, cfg.CheckLength(262145, "--ids"), "max_position_embeddings of 262144")
	assert.NoError(t, cfg.CheckLength(262144, "--ids"))
}

// FuzzConfigDims feeds arbitrary dimensions to ParseConfig: it must never
// panic, and whatever it accepts must be sized safely.
func FuzzConfigDims(f *testing.F) {
	f.Add(10, 8, 8, 2, 2, 1, 8, 2, 4, 4, 4, 4, 32768)
	f.Add(248320, 5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, 4, 262144)
	f.Add(1<<24, 1<<24, 1, 1000000000, 1, 1, 2, 1, 1, 1, 1, 1, 0)
	f.Fuzz(func(t *testing.T, v, h, in, layers, nh, nkv, dh, nk, nv, dk, dv, k, maxPos int) {
		js := fmt.Sprintf(`{"model_type":"qwen3_5_text","vocab_size":%d,"hidden_size":%d,"intermediate_size":%d,
		"num_hidden_layers":%d,"num_attention_heads":%d,"num_key_value_heads":%d,"head_dim":%d,
		"linear_num_key_heads":%d,"linear_num_value_heads":%d,"linear_key_head_dim":%d,"linear_value_head_dim":%d,
		"linear_conv_kernel_dim":%d,"max_position_embeddings":%d,"partial_rotary_factor":1}`,
			v, h, in, layers, nh, nkv, dh, nk, nv, dk, dv, k, maxPos)
		cfg, err := ParseConfig([]byte(js))
		if err != nil {
			return
		}
		if cfg.NumLayers > MaxLayers || len(cfg.LayerTypes) != cfg.NumLayers {
			t.Fatalf("accepted %d layers", cfg.NumLayers)
		}
		if p := cfg.TextParams(); p <= 0 || p > MaxParams {
			t.Fatalf("accepted %d parameters", p)
		}
		for _, e := range cfg.ExpectedTensors()[:min(len(cfg.ExpectedTensors()), 40)] {
			if _, ok := mulCap(MaxTensorElems, e.Shape...); !ok {
				t.Fatalf("accepted tensor %s %v", e.Name, e.Shape)
			}
		}
		if _, err := EstimateMemory(cfg, 1, cfg.MaxPositionEmbeddings, 1); err != nil {
			t.Fatalf("estimate: %v", err)
		}
	})
}
