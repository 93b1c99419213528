package features

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/weights"
)

// FP16Max is float16's largest finite value: an engine that computed in
// fp16 and saturated leaves values here (65536 once rounded to bf16).
const FP16Max = 65504

// CheckOptions say what Check reads and recomputes.
type CheckOptions struct {
	Dir    string
	Model  *model.Model
	Runner model.Runner // one row: the recomputation
	// Layers are the stored planes' taps for a directory without a
	// manifest (a speculators directory another engine wrote).
	Layers []Tap
	// Records is how many records to recompute, spread evenly (0: 8).
	Records int
	// Bar is the largest relative L2 that counts as agreement (0: each
	// layer's DefaultBar).
	Bar float64
	// Prep and Data, if set, re-prepare each record's line to check that
	// its ids belong to its text.
	Prep *Preparer
	Data string
}

// LayerResult is one stored plane's agreement with the recomputation.
type LayerResult struct {
	Tap     Tap
	MaxRel  float64 // worst relative L2 over the records
	Records int
}

// Report is what Check found: per-layer agreement, and one line per
// finding (empty when all holds).
type Report struct {
	Layers   []LayerResult
	Findings []string
	Records  int
}

// record is one stored sample.
type stored struct {
	name  string    // file and sample, for findings
	index int       // sample index in the data file (-1 unknown)
	ids   []int     // token ids
	feats []float32 // [T, L, H]
}

// Check recomputes o.Records records of a features directory and reports
// per layer: relative L2 against the recomputation, all-zero, NaN or Inf
// planes, values at fp16's limit, a plane that matches another layer
// better than its own, and ids that do not belong to the text.
func Check(o CheckOptions) (*Report, error) {
	if o.Records <= 0 {
		o.Records = 8
	}
	m, err := ReadManifest(o.Dir)
	if err != nil {
		return nil, err
	}
	cfg := o.Model.Config
	taps, dtype := o.Layers, "BF16"
	var files []string
	if m != nil {
		taps, dtype = m.Layers, m.DType
		for _, s := range m.Shards {
			files = append(files, filepath.Join(o.Dir, filepath.FromSlash(s.File)))
		}
		if m.Hidden != cfg.HiddenSize || m.NumLayers != cfg.NumLayers {
			return nil, fmt.Errorf("%s was written from a model of %d layers × %d, not this one (%d × %d)", safeio.Clean(o.Dir), m.NumLayers, m.Hidden, cfg.NumLayers, cfg.HiddenSize)
		}
	} else if files, err = speculatorsFiles(o.Dir); err != nil {
		return nil, err
	}
	if len(taps) == 0 {
		return nil, fmt.Errorf("%s has no manifest: pass --layers (the layers its planes hold, in order)", safeio.Clean(o.Dir))
	}
	bf16 := m == nil || m.Precision != "f32" // another engine's set, or qwenref's before it was recorded: bf16
	bars := make([]float64, len(taps))
	for k, tp := range taps {
		bars[k] = o.Bar
		if o.Bar == 0 {
			bars[k] = DefaultBar(tp, cfg.NumLayers, dtype, bf16)
		}
	}
	recs, err := pickRecords(files, o.Records, len(taps), cfg.HiddenSize)
	if err != nil {
		return nil, err
	}
	texts, err := lineIDs(o, recs)
	if err != nil {
		return nil, err
	}
	rep := &Report{Records: len(recs)}
	rep.Layers = make([]LayerResult, len(taps))
	for k := range taps {
		rep.Layers[k].Tap = taps[k]
	}
	all := allTaps(cfg.NumLayers)
	h := cfg.HiddenSize
	for _, r := range recs {
		if r.index >= 0 && texts[r.index] != nil && !equalInts(texts[r.index], r.ids) {
			rep.Findings = append(rep.Findings, fmt.Sprintf("%s: the ids do not belong to the text of sample %d", r.name, r.index))
		}
		if bad := outOfVocab(r.ids, cfg.VocabSize); bad >= 0 {
			rep.Findings = append(rep.Findings, fmt.Sprintf("%s: token %d is id %d, outside the vocabulary of %d", r.name, bad, r.ids[bad], cfg.VocabSize))
			continue
		}
		ref := make([]float32, len(r.ids)*len(all)*h)
		if err := Capture(o.Runner, r.ids, all, h, ref); err != nil {
			return nil, fmt.Errorf("%s: recomputing: %w", r.name, err)
		}
		for k, tp := range taps {
			got := plane(r.feats, len(r.ids), len(taps), k, h)
			rep.Layers[k].Records++
			if f := planeFindings(got); f != "" {
				rep.Findings = append(rep.Findings, fmt.Sprintf("%s: layer %s: %s", r.name, tp.Name, f))
			}
			own, best, bestRel := -1, -1, math.Inf(1)
			rels := make([]float64, len(all))
			for j, c := range all {
				rels[j] = relL2(got, plane(ref, len(r.ids), len(all), j, h))
				if c.Stage == tp.Stage {
					own = j
				}
				if rels[j] < bestRel {
					best, bestRel = j, rels[j]
				}
			}
			rel := rels[own]
			rep.Layers[k].MaxRel = math.Max(rep.Layers[k].MaxRel, rel)
			bar := bars[k]
			switch {
			case rel <= bar:
			case best != own && bestRel <= bar:
				rep.Findings = append(rep.Findings, fmt.Sprintf("%s: layer %s: these look like %s's outputs, not %s's (relative L2 %.3g against it, %.3g against its own)",
					r.name, tp.Name, describe(all[best]), describe(tp), bestRel, rel))
			default:
				rep.Findings = append(rep.Findings, fmt.Sprintf("%s: layer %s: relative L2 %.3g against the recomputation, over the bar %.3g", r.name, tp.Name, rel, bar))
			}
		}
	}
	return rep, nil
}

func describe(t Tap) string {
	if t.PostNorm {
		return "final_norm"
	}
	return "layer " + strconv.Itoa(t.Layer)
}

// allTaps is every layer's output and the final norm's.
func allTaps(n int) []Tap {
	out := make([]Tap, 0, n+1)
	for i := range n {
		out = append(out, LayerTap(i, n))
	}
	return append(out, FinalNormTap(n))
}

// plane copies tap k's [T, H] out of a [T, L, H] block.
func plane(f []float32, t, l, k, h int) []float32 {
	out := make([]float32, 0, t*h)
	for i := range t {
		out = append(out, f[(i*l+k)*h:(i*l+k+1)*h]...)
	}
	return out
}

// planeFindings names what is wrong with a plane by itself.
func planeFindings(p []float32) string {
	var nonfinite, limit int
	zero := true
	for _, v := range p {
		a := math.Abs(float64(v))
		switch {
		case math.IsNaN(a) || math.IsInf(a, 0):
			nonfinite++
		case a >= FP16Max && a <= 65536:
			limit++
		}
		if v != 0 {
			zero = false
		}
	}
	var out []string
	if zero {
		out = append(out, "all zero")
	}
	if nonfinite > 0 {
		out = append(out, fmt.Sprintf("%d NaN or Inf values", nonfinite))
	}
	if limit > 0 {
		out = append(out, fmt.Sprintf("%d values at fp16's limit (%d): saturated in fp16?", limit, FP16Max))
	}
	return strings.Join(out, "; ")
}

func relL2(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		x := float64(got[i]) - float64(want[i])
		d += x * x
		w += float64(want[i]) * float64(want[i])
	}
	if w == 0 {
		if d == 0 {
			return 0
		}
		return math.Inf(1)
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return math.Sqrt(d / w)
}

func outOfVocab(ids []int, v int) int {
	for i, id := range ids {
		if id < 0 || id >= v {
			return i
		}
	}
	return -1
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// speculatorsFiles lists DIR/hidden_states/hs_N.safetensors (or DIR's
// own), by N.
func speculatorsFiles(dir string) ([]string, error) {
	for _, d := range []string{filepath.Join(dir, "hidden_states"), dir} {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		var files []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "hs_") && strings.HasSuffix(e.Name(), ".safetensors") {
				files = append(files, filepath.Join(d, e.Name()))
			}
		}
		sort.Slice(files, func(i, j int) bool { return hsIndex(files[i]) < hsIndex(files[j]) })
		if len(files) > 0 {
			return files, nil
		}
	}
	return nil, fmt.Errorf("%s: no manifest.json and no hidden_states/hs_N.safetensors: not a features directory", safeio.Clean(dir))
}

func hsIndex(path string) int {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "hs_"), ".safetensors"))
	if err != nil {
		return -1
	}
	return n
}

// pickRecords reads n records spread evenly over the files' samples.
func pickRecords(files []string, n, l, h int) ([]stored, error) {
	var out []stored
	step := max(1, (len(files)+n-1)/n)
	for fi := 0; fi < len(files) && len(out) < n; fi += step {
		rs, err := readRecords(files[fi], l, h)
		if err != nil {
			return nil, err
		}
		each := max(1, len(rs)/max(1, n/max(1, (len(files)+step-1)/step)))
		for i := 0; i < len(rs) && len(out) < n; i += each {
			out = append(out, rs[i])
		}
	}
	return out, nil
}

// readRecords reads one file's samples: a qwenref shard's or a
// speculators file's one.
func readRecords(path string, l, h int) ([]stored, error) {
	s, err := weights.Open(path)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	name := filepath.Base(path)
	featName, idName := "features", "input_ids"
	if _, ok := s.Info("hidden_states"); ok {
		featName, idName = "hidden_states", "token_ids"
	}
	feats, shape, err := s.Float32(featName)
	if err != nil {
		return nil, err
	}
	idf, _, err := s.Float32(idName)
	if err != nil {
		return nil, err
	}
	t := len(idf)
	if len(shape) != 3 || shape[0] != t || shape[1] != l || shape[2] != h {
		return nil, fmt.Errorf("%s: %s has shape %v, want [%d, %d, %d] (tokens, layers, hidden)", safeio.Clean(path), featName, shape, t, l, h)
	}
	ids := make([]int, t)
	for i, v := range idf {
		ids[i] = int(v)
	}
	offs, index := []int{0, t}, []int{hsIndex(path)}
	if _, ok := s.Info("offsets"); ok {
		of, _, err := s.Float32("offsets")
		if err != nil {
			return nil, err
		}
		ix, _, err := s.Float32("sample_index")
		if err != nil {
			return nil, err
		}
		if len(of) != len(ix)+1 {
			return nil, fmt.Errorf("%s: %d offsets for %d samples", safeio.Clean(path), len(of), len(ix))
		}
		offs, index = make([]int, len(of)), make([]int, len(ix))
		for i := range of {
			offs[i] = int(of[i])
			if i > 0 && (offs[i] < offs[i-1] || offs[i] > t) {
				return nil, fmt.Errorf("%s: offsets are not increasing within %d tokens", safeio.Clean(path), t)
			}
		}
		for i := range ix {
			index[i] = int(ix[i])
		}
	}
	var out []stored
	for i := range index {
		a, b := offs[i], offs[i+1]
		out = append(out, stored{name: fmt.Sprintf("%s sample %d", name, index[i]), index: index[i], ids: ids[a:b], feats: feats[a*l*h : b*l*h]})
	}
	return out, nil
}

// lineIDs re-prepares the data lines of the picked records.
func lineIDs(o CheckOptions, recs []stored) (map[int][]int, error) {
	out := map[int][]int{}
	if o.Prep == nil || o.Data == "" {
		return out, nil
	}
	want := map[int]bool{}
	for _, r := range recs {
		want[r.index] = true
	}
	f, _, err := safeio.Open(o.Data)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	defer f.Close()
	err = Lines(f, func(line []byte, index, lineNo int) error {
		if want[index] {
			if s, err := o.Prep.Prepare(line, index, lineNo); err == nil {
				out[index] = s.IDs
			}
		}
		return nil
	})
	return out, err
}

// DefaultBar is the largest relative L2 between a stored plane and its
// recomputation that Check counts as agreement when no bar is given. The
// storage floor is 0.02 for bf16 data (rounding a plane to bf16 alone
// costs about 1.7e-3) and 1e-3 for f32. A set computed by a bf16 engine
// (qwenref's cuda, or another engine's, whose manifest says nothing)
// drifts from a float32 recomputation further with every layer the
// residual stream has passed: each layer's bf16 products add an error of
// random sign, so the drift grows as the square root of the depth. The
// bar is then 4·2⁻⁸·√(depth), the error model's bf16 bar
// (docs/tolerances.md) with one rounding a layer, or the floor if that is
// larger. Measured on a synthetic 0.8B (24 layers) on an H100: cuda's
// bf16 planes against a chunked recomputation, 6.0e-3 at layer 1 to
// 2.6e-2 at layer 21, about 5.6e-3·√(depth); the bar is 2.8 times that.
func DefaultBar(t Tap, numLayers int, dtype string, bf16 bool) float64 {
	floor := 0.02
	if dtype == "F32" {
		floor = 1e-3
	}
	if !bf16 {
		return floor
	}
	depth := t.Layer + 1
	if t.Layer < 0 { // final_norm: after every layer
		depth = numLayers
	}
	return math.Max(floor, 4.0/256*math.Sqrt(float64(max(depth, 1))))
}
