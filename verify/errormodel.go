package verify

import (
	"math"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// The error model the teacher-forced comparison holds each stage to
// (docs/tolerances.md).
//
// A stage computed in float32 from exact inputs through reductions of
// total length n has a relative error of about u·√n (u = 2⁻²⁴, errors of
// random sign add in quadrature). The bar is traceSafety·u·√n·amp, where
// n sums the reduction lengths on the stage's path from its fed input
// (the layer input when the layer is teacher-forced, the stage's own
// recorded inputs when it runs in isolation) and amp is 2 after the gated
// RMSNorm (it divides by a small RMS). The paths come from the layers'
// own stage lists (model.Block.Stages). For a float32 backend the bar is
// never looser than the golden tests' (tensor.GoldenTolerance). A bf16
// backend rounds the activations and weights of every matrix product to
// bf16 (u = 2⁻⁸); those roundings dominate and add in quadrature, so its
// bar is traceSafetyBF16·2⁻⁸·√m·amp, with m the number of products on the
// stage's path (at least 1), independent of n.
const (
	unitF32         = 1.0 / (1 << 24)
	unitBF16        = 1.0 / (1 << 8)
	traceSafety     = 8  // head-room over the √n estimate
	traceSafetyBF16 = 4  // head-room over one bf16 rounding
	maxAbsOverRelL2 = 10 // the scaled max-abs bar is this multiple of the relative L2 bar, as in the golden tests
)

// Bar is the tolerance of one check and the path numbers it came from.
type Bar struct {
	tensor.Tolerance
	N   int     // reduction length on the stage's path
	Amp float64 // amplification on the path
}

// BarFor is the error model's bar for a stage whose path is p, on a
// float32 backend or, bf16, on one that rounds every matrix product's
// operands to bf16. The caller says which the backend is.
func BarFor(p tensor.StagePath, bf16 bool) Bar {
	n, amp := p.Reduction, p.Amp
	if bf16 {
		rel := traceSafetyBF16 * unitBF16 * math.Sqrt(float64(max(p.Products, 1))) * amp
		return Bar{Tolerance: tensor.Tolerance{RelL2: rel, MaxAbsScaled: maxAbsOverRelL2 * rel}, N: n, Amp: amp}
	}
	rel := math.Min(tensor.GoldenRelL2, traceSafety*unitF32*math.Sqrt(float64(max(n, 1)))*amp)
	abs := math.Min(tensor.GoldenMaxAbs, maxAbsOverRelL2*rel)
	return Bar{Tolerance: tensor.Tolerance{RelL2: rel, MaxAbsScaled: abs}, N: n, Amp: amp}
}

// blockPaths maps each stage block li records for t tokens to its path
// from the block's input.
func blockPaths(m *model.Model, li, t int) map[string]tensor.StagePath {
	stages := m.Blocks[li].Stages(t)
	paths := make(map[string]tensor.StagePath, len(stages))
	for _, s := range stages {
		paths[s.Name] = s.Path
	}
	return paths
}

// pathOf is a recorded stage's path; a stage the block's list lacks (a
// device runner's own) is held to the block output's, the longest.
func pathOf(paths map[string]tensor.StagePath, stage string) tensor.StagePath {
	if p, ok := paths[stage]; ok {
		return p
	}
	return paths["output"]
}
