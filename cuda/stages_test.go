package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// TestDeviceStagesAreInTheStageLists runs the device-resident model with
// stage recording, a whole forward pass and each layer teacher-forced, and
// checks that every stage the device records is one the layers' stage
// lists name (model.Model.Stages), with as many values: the trace
// comparison sets its bars from those lists and reads the reference by
// those names.
func TestDeviceStagesAreInTheStageLists(t *testing.T) {
	d := need(t)
	cfg := fewLayers(t, "0.8b", 4, 1024)
	hm, err := model.NewRandom(cfg, 13, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(MaxTokensEnv, "64")
	r, err := newDeviceRunner(d, hm, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, ok := r.(*deviceRunner); !ok {
		t.Fatalf("the 0.8b width should run device-resident, got %T", r)
	}
	ids := randomIDs(rand.New(rand.NewPCG(7, 8)), 20, cfg.VocabSize)
	listed := map[string]int{} // name → values
	for _, s := range hm.Stages(len(ids)) {
		n := 1
		for _, v := range s.Shape {
			n *= v
		}
		listed[s.Name] = n
	}
	recorded := map[string]bool{}
	check := func(name string, x *tensor.Tensor) {
		recorded[name] = true
		n, ok := listed[name]
		switch {
		case !ok:
			t.Errorf("the device records %q, which no stage list names", name)
		case len(x.Data) != n:
			t.Errorf("the device records %s with %d values (shape %v), its stage list %d", name, len(x.Data), x.Shape, n)
		}
	}
	if _, err := r.Forward([][]int{ids}, model.RunOptions{Logits: model.AllLogits, Record: check}); err != nil {
		t.Fatal(err)
	}
	forward := len(recorded)
	if forward == 0 {
		t.Fatal("the device recorded no stage")
	}
	x := uniform(rand.New(rand.NewPCG(9, 10)), len(ids)*cfg.HiddenSize, -1, 1)
	for li := range hm.Blocks {
		if err := r.Reset(); err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("layers.%d.", li)
		if _, err := r.Layer(li, x, len(ids), func(name string, v *tensor.Tensor) { check(prefix+name, v) }); err != nil {
			t.Fatal(err)
		}
	}
	var missing []string
	for name := range listed {
		if !recorded[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	t.Logf("the device recorded %d of the %d listed stages in a forward pass; listed, never recorded: %v", forward, len(listed), missing)
}

// TestDeviceRecordOnly records a few stages by name (RecordOnly, what
// `qwenref features` asks for): exactly those arrive, each as the full
// trace records it (within the bf16 bar: the ops not recorded keep their
// fused kernels, which round their sums in another order).
func TestDeviceRecordOnly(t *testing.T) {
	d := need(t)
	cfg := fewLayers(t, "0.8b", 4, 1024)
	hm, err := model.NewRandom(cfg, 17, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(MaxTokensEnv, "64")
	r, err := newDeviceRunner(d, hm, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ids := randomIDs(rand.New(rand.NewPCG(11, 12)), 24, cfg.VocabSize)
	full := map[string][]float32{}
	if _, err := r.Forward([][]int{ids}, model.RunOptions{Logits: model.NoLogits, Record: func(name string, x *tensor.Tensor) {
		full[name] = slices.Clone(x.Data)
	}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"layers.1.output", "layers.3.output", "final_norm"}
	got := map[string][]float32{}
	if err := r.Reset(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Forward([][]int{ids}, model.RunOptions{Logits: model.NoLogits, RecordOnly: want, Record: func(name string, x *tensor.Tensor) {
		got[name] = slices.Clone(x.Data)
	}}); err != nil {
		t.Fatal(err)
	}
	for name := range got {
		if !slices.Contains(want, name) {
			t.Errorf("recorded %s, which RecordOnly did not name", name)
		}
	}
	for _, name := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s was named but not recorded", name)
			continue
		}
		if rel := tensor.RelL2(g, full[name]); !(rel <= 1e-2) {
			t.Errorf("%s: relative L2 %.3g against the full trace's, over the bf16 bar 1e-2", name, rel)
		} else {
			t.Logf("%s: relative L2 %.3g against the full trace's", name, rel)
		}
	}
}
