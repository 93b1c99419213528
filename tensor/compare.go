package tensor

import "math"

// The golden tests' bars for a float32 backend against transformers'
// float32 forward, one stage at a time (teacher-forced). Every comparison
// of a float32 backend uses bars no looser than these.
const (
	GoldenRelL2  = 1e-5 // ‖got−want‖₂/‖want‖₂
	GoldenMaxAbs = 1e-4 // max|got−want| / max(1, max|want|)
)

// StageError is how far one recorded stage is from its reference, in the
// two measures every stage comparison in qwenref uses.
type StageError struct {
	// RelL2 is ‖got−want‖₂/‖want‖₂ (+Inf when the lengths differ).
	RelL2 float64
	// MaxAbsScaled is max|got−want| divided by max(1, max|want|): an
	// absolute error for small values, a relative one for large.
	MaxAbsScaled float64
}

// Tolerance is the largest StageError that counts as agreement.
type Tolerance struct {
	RelL2, MaxAbsScaled float64
}

// GoldenTolerance is the golden tests' rule (GoldenRelL2, GoldenMaxAbs).
var GoldenTolerance = Tolerance{RelL2: GoldenRelL2, MaxAbsScaled: GoldenMaxAbs}

// CompareStage measures got against want. NaN in either counts as +Inf
// error, so a non-finite output never agrees.
func CompareStage(got, want []float32) StageError {
	scale := 1.0
	for _, v := range want {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	e := StageError{RelL2: RelL2(got, want), MaxAbsScaled: MaxAbsDiff(got, want) / scale}
	if math.IsNaN(e.RelL2) || math.IsNaN(e.MaxAbsScaled) {
		e = StageError{math.Inf(1), math.Inf(1)}
	}
	return e
}

// Within reports whether e is inside both of tol's bars.
func (e StageError) Within(tol Tolerance) bool {
	return e.RelL2 <= tol.RelL2 && e.MaxAbsScaled <= tol.MaxAbsScaled
}
