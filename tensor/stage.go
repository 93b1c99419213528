package tensor

// StagePath is what an error model needs of the computation that produces
// one recorded stage from the input of the unit recording it (a layer, a
// decoder block): qwenref's trace comparison sets each stage's bar from
// it (package verify, docs/tolerances.md).
type StagePath struct {
	// Reduction sums the lengths of the reductions on the path: dot
	// products' fan-ins, norms' widths, softmax sums, recurrence steps.
	// Float32 rounding over it grows about as its square root.
	Reduction int
	// Amp is how much the path amplifies relative error (1 when it does
	// not; 2 after a gated RMSNorm, which divides by a small RMS).
	Amp float64
	// Products counts the matrix products on the path, each of which a
	// bf16 backend rounds to bf16.
	Products int
}

// Then is the path p followed by q (q's path starts at p's stage).
func (p StagePath) Then(q StagePath) StagePath {
	return StagePath{Reduction: p.Reduction + q.Reduction, Amp: p.Amp * q.Amp, Products: p.Products + q.Products}
}

// Stage describes one intermediate a layer hands its Recorder: the name
// and shape it is recorded with, and its path from the layer's input.
type Stage struct {
	Name  string
	Shape []int
	Path  StagePath
}
