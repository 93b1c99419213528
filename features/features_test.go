package features

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveLayers(t *testing.T) {
	names := func(ts []Tap) []int {
		var out []int
		for _, x := range ts {
			out = append(out, x.Layer)
		}
		return out
	}
	ts, err := ResolveLayers("dflash", 64)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 16, 31, 46, 61}, names(ts))
	ts, err = ResolveLayers("dflash", 40)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 10, 19, 28, 37}, names(ts))
	assert.Equal(t, []int{1, 12}, names(must(ResolveLayers("dflash:2", 15))))
	// Python's round is half to even: 1 + 3·4/8 = 2.5 rounds to 2.
	assert.Equal(t, []int{1, 2, 4, 6, 7, 8, 10, 12, 13}, DFlashLayers(16, 9))
	ts, err = ResolveLayers("eagle3", 64)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 31, 60, -1}, names(ts))
	assert.Equal(t, "final_norm", ts[3].Stage)
	assert.Equal(t, 64, ts[3].HF)
	assert.Equal(t, Tap{Name: "16", Stage: "layers.16.output", Layer: 16, HF: 17, VLLM: 17}, ts[0:1][0:1][0].withLayer(16, 64))
	ts, err = ResolveLayers("3,final,final_norm", 8)
	require.NoError(t, err)
	assert.Equal(t, "layers.7.output", ts[1].Stage)
	assert.Equal(t, -1, ts[1].HF, "output_hidden_states[L] is post-norm: the last layer's raw output has no HF index")
	assert.Equal(t, []int{1, 31, 60, 62}, names(must(ResolveLayers("speculators", 64))))
	for _, bad := range []string{"8", "-1", "x", "1,1", "final,7", "dflash:0", "eagle3x"} {
		_, err := ResolveLayers(bad, 8)
		assert.Error(t, err, bad)
	}
}

func (Tap) withLayer(i, n int) Tap { return LayerTap(i, n) }

func must(ts []Tap, err error) []Tap {
	if err != nil {
		panic(err)
	}
	return ts
}

// charEncode is a tokenizer of one token per byte.
func charEncode(s string) ([]int, error) {
	ids := make([]int, len(s))
	for i := range s {
		ids[i] = int(s[i])
	}
	return ids, nil
}

func TestAssistantMask(t *testing.T) {
	tpl := chat.MustParse(chat.ChatML, "ChatML")
	text, err := tpl.Render(chat.Input{Messages: []byte(`[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"q"},{"role":"assistant","content":"ok"}]`)})
	require.NoError(t, err)
	mask, err := AssistantMask(text, len(text), charEncode)
	require.NoError(t, err)
	var got strings.Builder
	for i, m := range mask {
		if m == 1 {
			got.WriteByte(text[i])
		}
	}
	assert.Equal(t, "yo<|im_end|>\nok<|im_end|>\n", got.String(), "SpecForge marks the content through the end-of-turn token")
	// A last assistant turn without its end runs to the end of the text.
	mask, _ = AssistantMask("<|im_start|>assistant\nab", 24, charEncode)
	assert.Equal(t, float32(1), mask[23])
	assert.Equal(t, float32(0), mask[21])
}

func TestPrepare(t *testing.T) {
	p := &Preparer{Vocab: 100, MaxLen: 3, Template: chat.MustParse(chat.ChatML, "ChatML")}
	s, err := p.Prepare([]byte(`{"ids":[1,2,3,4],"loss_mask":[0,1,1,1]}`), 0, 1)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, s.IDs)
	assert.Equal(t, []float32{0, 1, 1}, s.Mask)
	assert.Equal(t, 1, s.Cut)
	for _, bad := range []string{`{"ids":[1],"text":"a"}`, `{"ids":[100]}`, `{"ids":[]}`, `{"idz":[1]}`, `[1]`, `{"ids":[1],"loss_mask":[2]}`, `{"text":"a"}`, `{"ids":[1]} {}`} {
		_, err := p.Prepare([]byte(bad), 0, 1)
		assert.Error(t, err, bad)
	}
}

// tiny is a random model of the tiny shape and a CPU runner on it.
func tiny(t *testing.T) (*model.Model, model.Runner) {
	t.Helper()
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	cfg.VocabSize = 512
	m, err := model.NewRandom(cfg, 7, false)
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	r, err := model.NewRunner(m, be, 1)
	require.NoError(t, err)
	return m, r
}

func writeData(t *testing.T, lines ...string) string {
	path := filepath.Join(t.TempDir(), "data.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return path
}

func opts(m *model.Model, r model.Runner, data, out string, layers string) Options {
	return Options{Model: m, Runner: r, Backend: "chunked", Precision: "f32", Data: data, Out: out, Layers: must(ResolveLayers(layers, m.Config.NumLayers)),
		Prep: &Preparer{Vocab: m.Config.VocabSize}, Shard: 3000}
}

var sampleLines = []string{`{"ids":[1,2,3,4,5]}`, `{"ids":[9,8,7]}`, ``, `{"ids":[11,12,13,14,15,16,17]}`, `{"ids":[20,21]}`, `{"ids":[30,31,32,33]}`}

func dirFiles(t *testing.T, dir string) map[string]string {
	out := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[rel] = string(b)
		}
		return err
	}))
	return out
}

// TestRunResumes stops a run after its first shard and resumes it: the
// result is byte-identical to an uninterrupted run.
func TestRunResumes(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, sampleLines...)
	full := t.TempDir()
	man, err := Run(opts(m, r, data, full, "1,3,final_norm"))
	require.NoError(t, err)
	assert.True(t, man.Complete)
	assert.Equal(t, 5, man.SamplesDone)
	assert.Greater(t, len(man.Shards), 2, "shards of 3000 bytes")

	part := t.TempDir()
	o := opts(m, r, data, part, "1,3,final_norm")
	o.AfterCommit = func(*Manifest) error { return fmt.Errorf("killed") }
	_, err = Run(o)
	require.ErrorContains(t, err, "killed")
	// A torn temp file of the interrupted shard is left behind, as a kill would.
	require.NoError(t, os.WriteFile(filepath.Join(part, ".shard-00001.safetensors.qwenref-tmp-999999999-x"), []byte("torn"), 0o644))
	o.AfterCommit = nil
	_, err = Run(o)
	require.NoError(t, err)
	a, b := dirFiles(t, full), dirFiles(t, part)
	assert.Equal(t, len(a), len(b))
	for k := range a {
		assert.Equal(t, a[k], b[k], k)
	}

	// The shards hold what a fresh capture gives.
	s, err := weights.Open(filepath.Join(full, "shard-00000.safetensors"))
	require.NoError(t, err)
	defer s.Close()
	f, shape, err := s.Float32("features")
	require.NoError(t, err)
	assert.Equal(t, []int{8, 3, m.Config.HiddenSize}, shape, "samples 0 and 1")
	want := make([]float32, 5*3*m.Config.HiddenSize)
	require.NoError(t, Capture(r, []int{1, 2, 3, 4, 5}, o.Layers, m.Config.HiddenSize, want))
	assert.Less(t, relL2(f[:len(want)], want), 0.01)

	o.Layers = o.Layers[:2]
	_, err = Run(o)
	assert.ErrorContains(t, err, "another layers")
}

func TestRunBadLines(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, `{"ids":[1,2]}`, `{"ids":[1,`, `{"ids":[3]}`)
	_, err := Run(opts(m, r, data, t.TempDir(), "1"))
	assert.ErrorContains(t, err, "line 2:")
	o := opts(m, r, data, t.TempDir(), "1")
	o.OnError = "skip"
	man, err := Run(o)
	require.NoError(t, err)
	assert.Equal(t, 2, man.SamplesDone)
	require.Len(t, man.Skipped, 1)
	assert.Equal(t, 2, man.Skipped[0].Line)
}

func TestRunSplitAndSpace(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, sampleLines...)
	o := opts(m, r, data, t.TempDir(), "1")
	o.FreeBytes = func(string) (int64, bool) { return 1000, true }
	_, err := Run(o)
	assert.ErrorContains(t, err, "need")
	o = opts(m, r, data, t.TempDir(), "1")
	o.Rank, o.World = 1, 2
	man, err := Run(o)
	require.NoError(t, err)
	assert.Equal(t, 2, man.SamplesDone, "samples 1 and 3 of 0..4")
	assert.Equal(t, int64(3+2), man.TokensDone)
}

// TestCheckFindsPlantedDefects writes a clean speculators set and copies
// with one defect each: Check passes the clean one and names each defect.
func TestCheckFindsPlantedDefects(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, `{"ids":[5,6,7,8,9,10]}`)
	h, n := m.Config.HiddenSize, m.Config.NumLayers
	taps := must(ResolveLayers("1,4,final_norm", n))
	ids := []int{5, 6, 7, 8, 9, 10}
	clean := make([]float32, len(ids)*len(taps)*h)
	require.NoError(t, Capture(r, ids, taps, h, clean))
	neighbour := make([]float32, len(ids)*h)
	require.NoError(t, Capture(r, ids, []Tap{LayerTap(5, n)}, h, neighbour))

	cases := map[string]struct {
		plant func(f []float32, ids []float32)
		want  string
	}{
		"clean": {func([]float32, []float32) {}, ""},
		"zero":  {func(f, _ []float32) { setPlane(f, 1, h, len(taps), func(int, float32) float32 { return 0 }) }, "layer 4: all zero"},
		"nan":   {func(f, _ []float32) { f[3] = float32(math.NaN()) }, "layer 1: 1 NaN or Inf values"},
		"fp16":  {func(f, _ []float32) { f[h+2] = 65504 }, "fp16's limit"},
		"off-by-one": {func(f, _ []float32) {
			setPlane(f, 1, h, len(taps), func(i int, _ float32) float32 { return neighbour[i] })
		}, "these look like layer 5's outputs, not layer 4's"},
		"ids": {func(_, ids []float32) { ids[2] = 77 }, "do not belong to the text"},
		"scaled": {func(f, _ []float32) {
			setPlane(f, 1, h, len(taps), func(_ int, v float32) float32 { return 1.1 * v })
		}, "layer 4: relative L2 0.1 against the recomputation, over the bar"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			f := append([]float32(nil), clean...)
			idf := []float32{5, 6, 7, 8, 9, 10}
			c.plant(f, idf)
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "hidden_states"), 0o777))
			require.NoError(t, weights.WriteFile(filepath.Join(dir, "hidden_states", "hs_0.safetensors"), []weights.NamedTensor{
				{Name: "hidden_states", DType: "F32", Shape: []int{len(ids), len(taps), h}, Data: f},
				{Name: "token_ids", DType: "I64", Shape: []int{len(ids)}, Data: idf},
			}, nil))
			rep, err := Check(CheckOptions{Dir: dir, Model: m, Runner: r, Layers: taps, Prep: &Preparer{Vocab: m.Config.VocabSize}, Data: data})
			require.NoError(t, err)
			if c.want == "" {
				assert.Empty(t, rep.Findings)
				return
			}
			require.NotEmpty(t, rep.Findings)
			assert.Contains(t, strings.Join(rep.Findings, "\n"), c.want)
		})
	}
}

// setPlane rewrites tap k's values of a [T, L, H] block.
func setPlane(f []float32, k, h, l int, fn func(i int, v float32) float32) {
	t := len(f) / (l * h)
	for i := range t {
		for j := range h {
			p := (i*l+k)*h + j
			f[p] = fn(i*h+j, f[p])
		}
	}
}

// A bf16 engine's planes drift from a float32 recomputation as the square
// root of the depth; the default bar follows that past the storage floor,
// and a float32 engine's set keeps the floor at every depth.
func TestDefaultBar(t *testing.T) {
	l0, l63, fin := LayerTap(0, 64), LayerTap(63, 64), must(ResolveLayers("final_norm", 64))[0]
	assert.Equal(t, 0.02, DefaultBar(l0, 64, "BF16", true), "the storage floor is larger near the embedding")
	assert.InDelta(t, 4.0/256*8, DefaultBar(l63, 64, "BF16", true), 1e-12)
	assert.InDelta(t, 4.0/256*8, DefaultBar(fin, 64, "BF16", true), 1e-12, "final_norm is after every layer")
	assert.Equal(t, 0.02, DefaultBar(l63, 64, "BF16", false))
	assert.Equal(t, 1e-3, DefaultBar(l63, 64, "F32", false))
	assert.Greater(t, DefaultBar(LayerTap(21, 24), 24, "BF16", true), 0.026, "cuda's measured drift at layer 21 of a 24-layer model")
}

// countingRunner counts the forwards that pack several samples.
type countingRunner struct {
	model.Runner
	packed, calls int
}

func (c *countingRunner) Forward(ids [][]int, opt model.RunOptions) (*tensor.Tensor, error) {
	c.calls++
	if len(opt.Segments) > 1 {
		c.packed++
	}
	return c.Runner.Forward(ids, opt)
}

// TestRunPackedIsByteIdentical: --pack-tokens writes the files of an
// unpacked run byte for byte, in both formats, with a skipped line and a
// sample longer than a pack among them, and a packed run resumes.
func TestRunPackedIsByteIdentical(t *testing.T) {
	m, r := tiny(t)
	lines := append(slices.Clone(sampleLines), `{"ids":[1,`, `{"ids":[40]}`, `{"ids":[41,42,43,44,45,46,47,48,49,50,51,52,53,54,55]}`, `{"ids":[60,61]}`, `{"ids":[62]}`)
	data := writeData(t, lines...)
	for _, format := range []string{FormatShards, FormatSpeculators} {
		run := func(pack int, stop bool) (string, *countingRunner) {
			out := t.TempDir()
			c := &countingRunner{Runner: r}
			o := opts(m, c, data, out, "0,final_norm")
			o.Format, o.OnError, o.PackTokens = format, "skip", pack
			if stop {
				o.AfterCommit = func(*Manifest) error { return fmt.Errorf("killed") }
				_, err := Run(o)
				require.ErrorContains(t, err, "killed")
				o.AfterCommit = nil
			}
			_, err := Run(o)
			require.NoError(t, err)
			return out, c
		}
		want, _ := run(0, false)
		for _, pack := range []int{12, 1000} {
			for _, stop := range []bool{false, true} {
				got, c := run(pack, stop)
				assert.Positive(t, c.packed, "%s pack %d: no forward packed samples", format, pack)
				a, b := dirFiles(t, want), dirFiles(t, got)
				assert.Equal(t, len(a), len(b), "%s pack %d", format, pack)
				for k := range a {
					assert.True(t, a[k] == b[k], "%s pack %d stop %v: %s differs", format, pack, stop, k)
				}
			}
		}
	}
	o := opts(m, r, data, t.TempDir(), "1")
	o.PackTokens = -1
	_, err := Run(o)
	assert.ErrorContains(t, err, "--pack-tokens -1")
}

// A run stopped between a shard and its manifest left that shard whole;
// the resume writes it again over itself, so its space counts as free:
// the check used to refuse the resume on a disk with room for the output.
func TestFreeSpaceCountsShardsToReplace(t *testing.T) {
	m, r := tiny(t)
	data := writeData(t, sampleLines...)
	whole := t.TempDir()
	_, err := Run(opts(m, r, data, whole, "1"))
	require.NoError(t, err)
	shard, err := os.ReadFile(filepath.Join(whole, "shard-00000.safetensors"))
	require.NoError(t, err)
	out := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(out, "shard-00000.safetensors"), shard, 0o644)) // no manifest: stopped before it
	tokens := int64(5 + 3 + 7 + 2 + 4)                                                            // sampleLines'
	need := tokens * (int64(m.Config.HiddenSize)*2 + 16)
	need += need / 100
	o := opts(m, r, data, out, "1")
	o.FreeBytes = func(string) (int64, bool) { return need - int64(len(shard))/2, true } // room once the orphan is written over
	man, err := Run(o)
	require.NoError(t, err)
	assert.True(t, man.Complete)
	o = opts(m, r, data, t.TempDir(), "1")
	o.FreeBytes = func(string) (int64, bool) { return need - int64(len(shard))/2, true }
	_, err = Run(o)
	assert.ErrorContains(t, err, "is free", "without the orphan, the same free space is too little")
}
