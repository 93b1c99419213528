package act_test

import (
	"fmt"

	"github.com/qwenref/qwenref/layers/act"
)

// Softplus follows PyTorch: log(1+eˣ) up to x = 20, and x itself above,
// where the two differ by e^−20 ≈ 2e-9, far below float32's resolution at
// 20 (about 2e-6). Large negative inputs give a tiny positive value, so the
// decay g = −exp(A_log)·softplus(a+dt_bias) is never exactly zero.
func ExampleSoftplus() {
	for _, x := range []float32{-20, -1, 0, 1, 20, 20.5, 1000} {
		fmt.Printf("softplus(%g) = %.6g\n", x, act.Softplus(x))
	}
	// Output:
	// softplus(-20) = 2.06115e-09
	// softplus(-1) = 0.313262
	// softplus(0) = 0.693147
	// softplus(1) = 1.31326
	// softplus(20) = 20
	// softplus(20.5) = 20.5
	// softplus(1000) = 1000
}

// Sigmoid squashes to (0, 1) (β and the attention output gate); SiLU is
// x·σ(x) (the conv, the gated norm and the MLP).
func ExampleSiLU() {
	for _, x := range []float32{-4, 0, 1, 4} {
		fmt.Printf("x=%g  sigmoid=%.4f  silu=%.4f\n", x, act.Sigmoid(x), act.SiLU(x))
	}
	// Output:
	// x=-4  sigmoid=0.0180  silu=-0.0719
	// x=0  sigmoid=0.5000  silu=0.0000
	// x=1  sigmoid=0.7311  silu=0.7311
	// x=4  sigmoid=0.9820  silu=3.9281
}
