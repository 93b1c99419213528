package verify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// TracedStage is one recorded intermediate of a forward pass, copied out.
type TracedStage struct {
	Name  string
	Shape []int
	Data  []float32
}

// Trace runs ids through m on be and returns every recorded stage in
// execution order (copies: the recorder sees views of reused buffers). A
// stage recorded twice keeps both, the second as "name#2".
func Trace(m *model.Model, be *model.Backend, ids []int) ([]TracedStage, error) {
	var stages []TracedStage
	seen := map[string]int{}
	rec := func(name string, x *tensor.Tensor) {
		if seen[name]++; seen[name] > 1 {
			name += "#" + strconv.Itoa(seen[name])
		}
		stages = append(stages, TracedStage{Name: name, Shape: slices.Clone(x.Shape), Data: slices.Clone(x.Data)})
	}
	if _, err := m.NewSession().Forward(ids, be, model.Options{Record: rec}); err != nil {
		return nil, err
	}
	return stages, nil
}

// LayerKinds says how many layers of each mixer m has, e.g. "3 Gated
// DeltaNet, 1 attention".
func LayerKinds(m *model.Model) string {
	return m.Config.DescribeLayers()
}

// WriteTrace writes every stage as an F32 tensor named as recorded, with
// metadata naming the producer, the backend, the model directory, the
// token ids (which CheckTraceIDs reads back) and the layers.
func WriteTrace(path string, stages []TracedStage, m *model.Model, backend, dir string, ids []int, opts weights.WriteOptions) error {
	ts := make([]weights.NamedTensor, len(stages))
	for i, s := range stages {
		ts[i] = weights.NamedTensor{Name: s.Name, DType: "F32", Shape: s.Shape, Data: s.Data}
	}
	return weights.WriteFile(path, ts, map[string]string{
		"producer": "qwenref trace", "backend": backend, "model": dir, "ids": idList(ids),
		"layers": LayerKinds(m),
	}, opts)
}

func idList(ids []int) string {
	text := make([]string, len(ids))
	for i, id := range ids {
		text[i] = strconv.Itoa(id)
	}
	return strings.Join(text, ",")
}

// CheckTraceIDs refuses a trace written for other token ids (the file's
// "ids" metadata); goldens carry none and are checked by shape alone.
func CheckTraceIDs(path string, ids []int) error {
	meta, err := ReadMetadata(path)
	if err != nil {
		return err
	}
	got, ok := meta["ids"]
	if !ok {
		return nil
	}
	if want := idList(ids); got != want {
		return fmt.Errorf("it was traced on ids %s, not %s", safeio.Clean(shorten(got, 60)), shorten(want, 60))
	}
	return nil
}

// ChainedCheck is one stage of an end-to-end run compared with the
// reference's stage of the same name under one relative L2 bar.
type ChainedCheck struct {
	InReference bool    // the reference holds the stage
	Problem     string  // why it could not be compared, when it could not
	RelL2       float64 // when compared
	OK          bool    // agrees (a stage absent from the reference agrees: there is nothing to say)
}

// CompareChained compares s with the tensor of the same name in ref, if
// any, within relative L2 tol. A batched golden ([B, ...] holding B times
// as many values) is compared on its row 0.
func CompareChained(ref *weights.Store, s TracedStage, tol float64) ChainedCheck {
	if _, ok := ref.Info(s.Name); !ok {
		return ChainedCheck{OK: true}
	}
	want, shape, err := ref.Float32(s.Name)
	if err != nil {
		return ChainedCheck{InReference: true, Problem: err.Error()}
	}
	if len(want) != len(s.Data) {
		if len(s.Data) == 0 || len(want)%len(s.Data) != 0 {
			return ChainedCheck{InReference: true, Problem: fmt.Sprintf("shape %v there, %v here", shape, s.Shape)}
		}
		want = want[:len(s.Data)]
	}
	rel := tensor.RelL2(s.Data, want)
	return ChainedCheck{InReference: true, RelL2: rel, OK: rel <= tol}
}
