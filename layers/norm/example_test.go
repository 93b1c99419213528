package norm_test

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/act"
	"github.com/qwenref/qwenref/layers/norm"
)

// RMSNormOnePlus divides each row by its root mean square and scales by
// (1+w): the stored weight is an offset from 1, so a zero weight means a
// plain RMS normalisation.
func ExampleRMSNormOnePlus() {
	x := []float32{1, 2, 3, 4} // RMS = √(30/4) ≈ 2.7386
	w := []float32{0, 0, 0.5, -0.5}
	y := make([]float32, len(x))
	if err := norm.RMSNormOnePlus(y, x, w, 1e-6); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.4f\n", y)
	// Output: [0.3651 0.7303 1.6432 0.7303]
}

// L2Normalize makes every row a unit vector, as the Gated DeltaNet layer does
// to each head of q and k; eps goes into the sum of squares.
func ExampleL2Normalize() {
	x := []float32{3, 4, 0, 0, 0, 2} // two rows of 3
	if err := norm.L2Normalize(x, x, 3, 1e-6); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.4f\n", x)
	fmt.Printf("row norms: %.4f %.4f\n", math.Hypot(float64(x[0]), float64(x[1])), x[5])
	// Output:
	// [0.6000 0.8000 0.0000 0.0000 0.0000 1.0000]
	// row norms: 1.0000 1.0000
}

// GatedRMSNorm normalises the core's output per head, scales it by a plain
// weight and multiplies by SiLU(z): a negative z nearly closes the gate (and
// flips the sign), a large z lets the normalised value through, amplified.
func ExampleGatedRMSNorm() {
	o := []float32{1, -1, 2, -2, 1, -1, 2, -2} // two heads of 4, RMS 1.5811 each
	z := []float32{-1, -1, -1, -1, 3, 3, 3, 3} // SiLU(−1) = −0.2689, SiLU(3) = 2.8577
	w := []float32{1, 1, 1, 1}
	y := make([]float32, len(o))
	if err := norm.GatedRMSNorm(y, o, z, w, 1e-6, act.SiLU); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("z=-1: %.4f\n", y[:4])
	fmt.Printf("z=3:  %.4f\n", y[4:])
	// Output:
	// z=-1: [-0.1701 0.1701 -0.3402 0.3402]
	// z=3:  [1.8074 -1.8074 3.6148 -3.6148]
}
