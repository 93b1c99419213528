package doctor

import (
	"fmt"
	"strconv"
	"strings"
)

// Penalty is one measured fallback penalty: how many times slower the fallback ran than the
// fused kernels, at each sequence length, on a named machine and date.
type Penalty struct {
	Level   string    `json:"level"`   // what was timed, e.g. "one GDN layer"
	Seq     []int     `json:"seq"`     // sequence lengths T (1 for a decode step)
	Ratios  []float64 `json:"ratios"`  // fallback time / fused time, one per Seq
	Machine string    `json:"machine"` // where and with what it was measured
	Date    string    `json:"date"`    // when (YYYY-MM-DD)
	Source  string    `json:"source"`  // the doc that holds the table and its command
}

// Range returns the smallest and largest ratio.
func (p Penalty) Range() (lo, hi float64) {
	lo, hi = p.Ratios[0], p.Ratios[0]
	for _, r := range p.Ratios[1:] {
		lo, hi = min(lo, r), max(hi, r)
	}
	return lo, hi
}

// Span formats the ratios as "2.3–4.6× at T = 512 … 32768".
func (p Penalty) Span() string {
	lo, hi := p.Range()
	r := FormatRatio(lo) + "×"
	if hi != lo {
		r = FormatRatio(lo) + "–" + FormatRatio(hi) + "×"
	}
	if len(p.Seq) == 1 {
		return fmt.Sprintf("%s at T = %d", r, p.Seq[0])
	}
	return fmt.Sprintf("%s at T = %d … %d", r, p.Seq[0], p.Seq[len(p.Seq)-1])
}

// FormatRatio writes a ratio with three significant digits and at least one decimal below
// 100 (7.0, 2.35, 18.8, 104), as the docs' tables do.
func FormatRatio(r float64) string {
	s := strconv.FormatFloat(r, 'g', 3, 64)
	if r < 100 && !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}

const (
	h200Machine = "one NVIDIA H200, transformers 5.17 + torch 2.11, bf16, batch 1, 27B shapes: " +
		"transformers' PyTorch fallback against flash-linear-attention (causal-conv1d for the conv)"
	h200Date   = "2026-11-30"
	h200Source = "docs/anchors.md"
	cpuMachine = "2 vCPUs of an AMD Zen 5 (AVX-512), qwenref GOEXPERIMENT=simd build, 27B dims: " +
		"qwenref's chunked backend with the GDN core and conv swapped for naive loops, against chunked"
	cpuDate   = "2026-11-30"
	cpuSource = "docs/penalty.md"
)

// Measured linear-attention share of the model the whole-model figures come from (27B: 48 of 64).
const (
	measuredLinear = 48
	measuredLayers = 64
)

// Level names shared by the tables.
const (
	LevelCore   = "GDN core (chunked gated delta rule)"
	LevelConv   = "causal conv + SiLU"
	LevelLayer  = "one GDN layer"
	LevelModel  = "whole 64-layer model, prefill"
	LevelDecode = "whole model, decode one token at position ~2048"
)

// H200Penalties are transformers' own fallback penalties, measured by the project on an H200.
var H200Penalties = []Penalty{
	{LevelCore, []int{512, 2048, 8192, 32768}, []float64{2.4, 6.8, 13.4, 18.8}, h200Machine, h200Date, h200Source},
	{LevelConv, []int{8192, 32768}, []float64{7.0, 10.9}, h200Machine, h200Date, h200Source},
	{LevelLayer, []int{512, 2048, 8192, 32768}, []float64{2.3, 2.8, 3.8, 4.6}, h200Machine, h200Date, h200Source},
	{LevelModel, []int{2048, 8192}, []float64{1.75, 1.74}, h200Machine, h200Date, h200Source},
	{LevelDecode, []int{1}, []float64{1.0}, h200Machine, h200Date, h200Source},
}

// CPUPenalties are qwenref's own CPU measurements of the same fallback (the mix
// chunked:delta=naive:conv=naive against chunked; the 27B model row is summed from its layers).
var CPUPenalties = []Penalty{
	{LevelCore, []int{512, 2048, 8192}, []float64{35.1, 35.6, 35.7}, cpuMachine, cpuDate, cpuSource},
	{LevelConv, []int{512, 2048, 8192, 32768}, []float64{104, 69.4, 72.9, 72.7}, cpuMachine, cpuDate, cpuSource},
	{LevelLayer, []int{512, 2048, 8192}, []float64{2.62, 2.52, 2.55}, cpuMachine, cpuDate, cpuSource},
	{"GDN decoder layer (GDN + MLP)", []int{512, 2048, 8192}, []float64{1.51, 1.48, 1.45}, cpuMachine, cpuDate, cpuSource},
	{"whole 27B model, prefill (estimated from its layers)", []int{512, 2048, 8192}, []float64{1.38, 1.36, 1.33}, cpuMachine, cpuDate, cpuSource},
}

// FindPenalty returns the row of a table at a level.
func FindPenalty(table []Penalty, level string) (Penalty, bool) {
	for _, p := range table {
		if p.Level == level {
			return p, true
		}
	}
	return Penalty{}, false
}

// ScaleModelPenalty carries a whole-model penalty measured on the 27B (48 of 64 layers linear
// attention) to a model with linear of total layers, to first order: the extra time is the
// fallback layers' extra time, so (penalty − 1) scales with the share of linear layers, as long
// as a linear and a full-attention decoder layer take about the same time (they do at 27B
// widths). Different widths move it further; see docs/penalty.md.
func ScaleModelPenalty(measured float64, linear, total int) float64 {
	if total <= 0 || linear <= 0 {
		return 1
	}
	share := float64(linear) / float64(total)
	return 1 + (measured-1)*share/(float64(measuredLinear)/float64(measuredLayers))
}

// costLines turns the H200 table into the report's expected-cost lines for a model with
// linear of total layers falling back (total 0: no model given).
func costLines(linear, total int) []string {
	model, _ := FindPenalty(H200Penalties, LevelModel)
	layer, _ := FindPenalty(H200Penalties, LevelLayer)
	core, _ := FindPenalty(H200Penalties, LevelCore)
	conv, _ := FindPenalty(H200Penalties, LevelConv)
	lo, hi := model.Range()
	var lines []string
	if total > 0 && (linear != measuredLinear || total != measuredLayers) {
		slo, shi := ScaleModelPenalty(lo, linear, total), ScaleModelPenalty(hi, linear, total)
		lines = append(lines, fmt.Sprintf("prefill, whole model: about %.2g× slower (%s on the 27B's 48 of 64 "+
			"fallback layers, scaled to your %d of %d)", (slo+shi)/2, model.Span(), linear, total))
	} else {
		lines = append(lines, fmt.Sprintf("prefill, whole model: about %.2g× slower (%s)", (lo+hi)/2, model.Span()))
	}
	lines = append(lines,
		fmt.Sprintf("per GDN layer: %s", layer.Span()),
		fmt.Sprintf("GDN core alone: %s; conv alone: %s", core.Span(), conv.Span()),
		"decode: about the same (~1.0×: transformers' eager decode is host-bound at 73–80 ms/token either way)",
	)
	return lines
}

// costCaveat names where the figures come from.
func costCaveat() string {
	return strings.Join([]string{
		"measured by the qwenref project on " + h200Machine + ", " + h200Date + " (" + h200Source + ");",
		"your GPU, batch and sequence lengths will differ, and smaller models pay more (narrower",
		"layers make the GDN core a larger share: see docs/penalty.md).",
	}, " ")
}
