package model_test

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strings"
	"testing"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// digestModel hashes every tensor of a model in the order of the config's
// expected-tensor list: the name, then the values as stored.
func digestModel(t *testing.T, m *model.Model) string {
	t.Helper()
	h := sha256.New()
	words := func(v []float32) {
		var b [4]byte
		for _, x := range v {
			binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
			h.Write(b[:])
		}
	}
	mat := func(x *tensor.Matrix) {
		if x.BF16 != nil {
			var b [2]byte
			for _, u := range x.BF16 {
				binary.LittleEndian.PutUint16(b[:], u)
				h.Write(b[:])
			}
			return
		}
		words(x.F32)
	}
	mat(m.Embed)
	mat(m.LMHead)
	words(m.FinalNorm)
	for i := range m.Blocks {
		b := &m.Blocks[i]
		words(b.InputNorm)
		words(b.PostNorm)
		if g := b.GDN(); g != nil {
			for _, x := range []*tensor.Matrix{g.W.InProjQKV, g.W.InProjZ, g.W.InProjB, g.W.InProjA, g.W.OutProj} {
				mat(x)
			}
			words(g.W.ConvW)
			words(g.W.ALog)
			words(g.W.DtBias)
			words(g.W.NormW)
		}
		if a := b.Attn(); a != nil {
			for _, x := range []*tensor.Matrix{a.W.QProj, a.W.KProj, a.W.VProj, a.W.OProj} {
				mat(x)
			}
			words(a.W.QNorm)
			words(a.W.KNorm)
		}
		if b.MoE != nil {
			w := &b.MoE.W
			for _, x := range []*tensor.Matrix{w.Router, w.SharedGate, w.SharedUp, w.SharedDown, w.SharedProb} {
				mat(x)
			}
			for e := range w.Gate {
				mat(w.Gate[e])
				mat(w.Up[e])
				mat(w.Down[e])
			}
		} else {
			mat(b.MLP.Gate)
			mat(b.MLP.Up)
			mat(b.MLP.Down)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// TestRandomWeightsPinned pins the random weights of the bundled model and
// of each named shape small enough to build here: they are keyed by a hash
// of each tensor's canonical name, so any change to how names are formed
// changes the bundled model's output. The digests were taken from the code
// as it stood before the weight structs declared their own names.
func TestRandomWeightsPinned(t *testing.T) {
	m, _, err := bundled.Model()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := digestModel(t, m), pinnedBundled; got != want {
		t.Errorf("bundled model weights digest %s, want %s", got, want)
	}
	for name, want := range pinnedShapes {
		cfg, err := shapeOrDir(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, bf16 := range []bool{false, true} {
			m, err := model.NewRandom(cfg, 7, bf16)
			if err != nil {
				t.Fatal(err)
			}
			if got := digestModel(t, m); got != want[boolIndex(bf16)] {
				t.Errorf("shape %s (bf16 %v) weights digest %s, want %s", name, bf16, got, want[boolIndex(bf16)])
			}
		}
	}
	// A few single values, so a failure shows which rule moved.
	for _, c := range pinnedValues {
		v := model.RandomValues(7, model.TensorSpec{Name: c.name, Shape: c.shape, Init: c.init})
		if v[c.index] != c.want {
			t.Errorf("RandomValues(7, %s)[%d] = %v, want %v", c.name, c.index, v[c.index], c.want)
		}
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

var pinnedBundled = "397f64e8447c2c1d"

// pinnedShapes are the digests of NewRandom(cfg, 7, bf16) for [f32, bf16],
// by shape name or golden config directory.
var pinnedShapes = map[string][2]string{
	"tiny":                                   {"8d5a75d254b56bdf", "39b64323c9bf877d"},
	"tiny-moe":                               {"c7e009e6d22372b3", "70f57e1b85bfd5d1"},
	"../testdata/golden/moe/next-bf16-step2": {"435ca200b5a3b4fd", "097acc9345606af8"},
}

var pinnedValues = []struct {
	name  string
	shape []int
	init  string
	index int
	want  float32
}{
	{"layers.0.linear_attn.A_log", []int{4, 8}, "log_decay", 5, 1.1594985},
	{"layers.0.linear_attn.dt_bias", []int{4, 8}, "softplus_offset", 5, -0.66873217},
	{"layers.0.linear_attn.norm.weight", []int{4, 8}, "unit_scale", 5, 1.3564273},
	{"layers.3.input_layernorm.weight", []int{4, 8}, "zero_centred", 5, 0.35795125},
	{"layers.0.linear_attn.conv1d.weight", []int{4, 8}, "conv", 5, -0.3599418},
	{"embed_tokens.weight", []int{4, 8}, "embedding", 5, -0.62935436},
	{"layers.3.self_attn.q_proj.weight", []int{4, 8}, "", 5, 0.6139806},
	{"layers.1.mlp.experts.gate_up_proj", []int{2, 4, 8}, "", 5, 0.4008024},
}

func shapeOrDir(name string) (*model.Config, error) {
	if strings.HasPrefix(name, "../") {
		return model.LoadConfig(name)
	}
	return model.ShapeConfig(name)
}
