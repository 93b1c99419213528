// Package features captures the hidden states of chosen decoder layers of a
// target model, the training data of DFlash and EAGLE-3 drafters: it reads a
// JSONL data set, runs each sample through the model, and writes the
// features in shards (or one file per sample for vllm-project/speculators)
// with a manifest that lets an interrupted run resume. Check recomputes a
// sample of a written set and reports what is wrong with it.
package features

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Tap is one captured tensor: a decoder layer's output (the residual
// stream, before the final norm) or the final norm's output.
type Tap struct {
	// Name is how the user and the manifest spell it: "16", "final"
	// (the last layer's output, pre-norm) or "final_norm" (post-norm).
	Name string `json:"name"`
	// Stage is the model's stage name it is recorded under.
	Stage string `json:"stage"`
	// Layer is the decoder layer counted from 0 (-1 for final_norm).
	Layer int `json:"layer"`
	// HF is its index in transformers' output_hidden_states (-1: none
	// holds it; transformers' last entry is post-norm).
	HF int `json:"hf_hidden_states_index"`
	// VLLM is the layer boundary vLLM's and SGLang's auxiliary capture
	// names it by (the input of layer i+1; -1: none).
	VLLM int `json:"vllm_boundary"`
	// PostNorm is set for final_norm.
	PostNorm bool `json:"post_norm"`
}

// Stage names of the model (model/stages.go).
func layerStage(i int) string { return fmt.Sprintf("layers.%d.output", i) }

const finalNormStage = "final_norm"

// LayerTap is decoder layer i's output in a model of n layers.
func LayerTap(i, n int) Tap {
	t := Tap{Name: strconv.Itoa(i), Stage: layerStage(i), Layer: i, HF: i + 1, VLLM: i + 1}
	if i == n-1 {
		t.HF = -1 // output_hidden_states[n] is the final norm's output
	}
	return t
}

// FinalNormTap is the final norm's output: transformers'
// output_hidden_states[n] and last_hidden_state, what the head reads.
func FinalNormTap(n int) Tap {
	return Tap{Name: "final_norm", Stage: finalNormStage, Layer: -1, HF: n, VLLM: -1, PostNorm: true}
}

// Presets are the layer sets --layers accepts by name.
var Presets = []string{"dflash", "eagle3", "speculators", "last"}

// SpeculatorsLayers is vllm-project/speculators' default capture, vLLM
// boundaries [2, n/2, n-3, n-1], in decoder layers counted from 0.
func SpeculatorsLayers(n int) []int { return []int{1, n/2 - 1, n - 4, n - 2} }

// DFlashLayers is z-lab/dflash's build_target_layer_ids: k layers from 1 to
// n-3 evenly spaced, rounded as Python's round (half to even); one layer
// is n/2.
func DFlashLayers(n, k int) []int {
	if k == 1 {
		return []int{n / 2}
	}
	start, span := 1, float64(n-3-1)
	out := make([]int, k)
	for i := range out {
		out[i] = int(math.RoundToEven(float64(start) + float64(i)*span/float64(k-1)))
	}
	return out
}

// Eagle3Layers is SpecForge's default auxiliary layer set for EAGLE-3,
// [1, n/2-1, n-4], in decoder layers counted from 0.
func Eagle3Layers(n int) []int { return []int{1, n/2 - 1, n - 4} }

// ResolveLayers turns a --layers value into taps for a model of n decoder
// layers: a preset ("dflash", "dflash:K" for K draft layers, "eagle3",
// "last") or a comma-separated list of layer indices, "final" and
// "final_norm". Each tap appears at most once.
func ResolveLayers(spec string, n int) ([]Tap, error) {
	if n < 1 {
		return nil, fmt.Errorf("--layers: the model has %d layers", n)
	}
	var taps []Tap
	switch {
	case spec == "dflash" || strings.HasPrefix(spec, "dflash:"):
		k := 5
		if rest, ok := strings.CutPrefix(spec, "dflash:"); ok {
			v, err := strconv.Atoi(rest)
			if err != nil || v < 1 || v > n {
				return nil, fmt.Errorf("--layers %s: want dflash:K with 1 ≤ K ≤ %d draft layers", spec, n)
			}
			k = v
		}
		if n < 4 && k > 1 {
			return nil, fmt.Errorf("--layers %s: DFlash spaces layers from 1 to L-3, and this model has only %d layers", spec, n)
		}
		for _, i := range DFlashLayers(n, k) {
			taps = append(taps, LayerTap(i, n))
		}
	case spec == "eagle3":
		if n < 5 {
			return nil, fmt.Errorf("--layers eagle3: SpecForge's [1, L/2-1, L-4] needs at least 5 layers, and this model has %d", n)
		}
		for _, i := range Eagle3Layers(n) {
			taps = append(taps, LayerTap(i, n))
		}
		taps = append(taps, FinalNormTap(n))
	case spec == "speculators":
		if n < 5 {
			return nil, fmt.Errorf("--layers speculators: [2, L/2, L-3, L-1] (vLLM boundaries) needs at least 5 layers, and this model has %d", n)
		}
		for _, i := range SpeculatorsLayers(n) {
			taps = append(taps, LayerTap(i, n))
		}
	case spec == "last":
		taps = []Tap{FinalNormTap(n)}
	default:
		for _, f := range strings.Split(spec, ",") {
			f = strings.TrimSpace(f)
			switch f {
			case "final":
				t := LayerTap(n-1, n)
				t.Name = "final"
				taps = append(taps, t)
			case "final_norm":
				taps = append(taps, FinalNormTap(n))
			default:
				i, err := strconv.Atoi(f)
				if err != nil || i < 0 || i >= n {
					return nil, fmt.Errorf("--layers: %q is neither a preset (%s) nor a layer 0..%d, final or final_norm", f, strings.Join(Presets, ", "), n-1)
				}
				taps = append(taps, LayerTap(i, n))
			}
		}
	}
	seen := map[string]bool{}
	for _, t := range taps {
		if seen[t.Stage] {
			return nil, fmt.Errorf("--layers %s: %s is named twice", spec, t.Name)
		}
		seen[t.Stage] = true
	}
	return taps, nil
}
