// Package verify is what a kernel engineer checks a kernel with: the
// golden file format and the trace comparison, the code behind `qwenref
// golden`, `qwenref check` and `qwenref trace`.
//
// Golden files (docs/golden-format.md) hold one op's inputs, the float64
// reference's outputs and the bars a correct kernel meets. reference
// builds them (reference.BuildVector, reference.BuildLayerVector);
// WriteGolden writes one, OpenGolden reads one back, ReadTolerance parses
// its bars, and Golden.Check runs a backend's kernel on its inputs and
// compares every output within them.
//
// A trace (Trace, WriteTrace) is every stage a forward pass records.
// TeacherForced compares a model on a backend with a reference trace or
// a transformers golden stage by stage: each layer is fed the
// reference's own input, each core kernel also runs alone on the
// reference's inputs to it, and each check's bar comes from an error
// model (BarFor, docs/tolerances.md) of the stage's path, which the
// layers describe themselves (model.Block.Stages). The caller says
// whether the backend computes in bf16. CompareChained compares an
// end-to-end run under one bar instead.
package verify
