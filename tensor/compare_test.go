package tensor

import (
	"math"
	"testing"
)

func TestCompareStage(t *testing.T) {
	want := []float32{3, 4}
	e := CompareStage([]float32{3, 4.05}, want)
	if math.Abs(e.RelL2-0.01) > 1e-6 || math.Abs(e.MaxAbsScaled-0.05/4) > 1e-6 {
		t.Fatalf("got %+v, want rel L2 0.01 and scaled max-abs 0.0125", e)
	}
	if !e.Within(Tolerance{RelL2: 0.011, MaxAbsScaled: 0.013}) || e.Within(GoldenTolerance) {
		t.Fatalf("%+v: Within disagrees with the bars", e)
	}
	// Small values: the max-abs is absolute (scaled by 1, not by max|want|).
	if e := CompareStage([]float32{0.001}, []float32{0.002}); math.Abs(e.MaxAbsScaled-0.001) > 1e-9 {
		t.Fatalf("scaled max-abs of small values: %v", e.MaxAbsScaled)
	}
	for _, got := range [][]float32{{3}, {3, float32(math.NaN())}, {float32(math.Inf(1)), 4}} {
		if e := CompareStage(got, want); !math.IsInf(e.RelL2, 1) || !math.IsInf(e.MaxAbsScaled, 1) || e.Within(Tolerance{1e300, 1e300}) {
			t.Fatalf("%v: a length mismatch or non-finite value must never agree, got %+v", got, e)
		}
	}
}

// Argmax takes the first of equal values and never a NaN, wherever it is.
func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{[]float32{0, 3, 1, 2.9, -5}, 1},
		{[]float32{1, 1}, 0},
		{[]float32{nan, 1, 2}, 2},
		{[]float32{1, nan, 0}, 0},
		{[]float32{float32(math.Inf(-1)), -1}, 1},
		{[]float32{nan, nan}, 0},
	} {
		if got := Argmax(c.x); got != c.want {
			t.Errorf("Argmax(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}
