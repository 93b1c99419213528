package gateddelta_test

import (
	"fmt"
	"math"

	"github.com/qwenref/qwenref/layers/gateddelta"
	"github.com/qwenref/qwenref/tensor"
)

// exampleInput is a one-head memory with d_k = d_v = 2: token 0 stores
// (1,2) under key e₀; token 1 halves the memory (g = ln ½) and stores
// (−3,4) under e₁; token 2 writes the value 0 with β = ½ under the key
// (0.6, 0.8), which halves what the memory holds along that key, and then
// reads along e₀. (Real queries are also scaled by d_k^-1/2; left out
// here so the numbers stay readable.)
func exampleInput() (d gateddelta.Dims, q, k, v, g, beta []float32) {
	d = gateddelta.Dims{T: 3, NK: 1, NV: 1, DK: 2, DV: 2}
	q = []float32{0, 0, 0, 0, 1, 0}
	k = []float32{1, 0, 0, 1, 0.6, 0.8}
	v = []float32{1, 2, -3, 4, 0, 0}
	g = []float32{0, float32(math.Log(0.5)), 0}
	beta = []float32{1, 1, 0.5}
	return
}

// By hand: after token 1, S = [[0.5 1] [−3 4]]. Token 2 sees Sᵀk̂ =
// (−2.1, 3.8), so δ = ½((0,0) − (−2.1, 3.8)) = (1.05, −1.9) and
// S += k̂δᵀ, giving row 0 = (1.13, −0.14), which the query e₀ reads.
func ExampleNaive() {
	d, q, k, v, g, beta := exampleInput()
	out := make([]float32, d.T*d.NV*d.DV)
	state := make([]float32, d.NV*d.DK*d.DV) // a new sequence starts from zeros
	if err := (gateddelta.Naive{}).Forward(out, q, k, v, g, beta, d, state); err != nil {
		fmt.Println(err)
		return
	}
	for t := 0; t < d.T; t++ {
		fmt.Printf("o_%d = (%.4f, %.4f)\n", t, out[2*t], out[2*t+1])
	}
	fmt.Printf("S = [[%.4f %.4f] [%.4f %.4f]]\n", state[0], state[1], state[2], state[3])
	// Output:
	// o_0 = (0.0000, 0.0000)
	// o_1 = (0.0000, 0.0000)
	// o_2 = (1.1300, -0.1400)
	// S = [[1.1300 -0.1400] [-2.1600 2.4800]]
}

// Chunked computes the same thing. Here the three tokens repeat six times
// (token 0's full overwrite of row 0 makes every period end in the same
// state), the sequence goes in as 17 tokens and then one, as in prefill
// followed by decode, so the state carries over between calls, and 16-token
// chunks put the first call through the chunk path.
func ExampleChunked() {
	d, q, k, v, g, beta := exampleInput()
	rep := func(x []float32) []float32 {
		var r []float32
		for range 6 {
			r = append(r, x...)
		}
		return r
	}
	q, k, v, g, beta = rep(q), rep(k), rep(v), rep(g), rep(beta)
	d.T = 18
	kern := gateddelta.Chunked{ChunkSize: 16}
	out := make([]float32, d.T*d.DV)
	state := make([]float32, d.DK*d.DV)
	for _, span := range [][2]int{{0, 17}, {17, 18}} { // 17 tokens, then one
		a, b := span[0], span[1]
		ds := d
		ds.T = b - a
		err := kern.Forward(out[2*a:2*b], q[2*a:2*b], k[2*a:2*b], v[2*a:2*b], g[a:b], beta[a:b], ds, state)
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	// The same 18 tokens in one call of the reference kernel.
	want := make([]float32, d.T*d.DV)
	wantState := make([]float32, d.DK*d.DV)
	if err := (gateddelta.Naive{}).Forward(want, q, k, v, g, beta, d, wantState); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("o_17 = (%.4f, %.4f)\n", out[34], out[35])
	fmt.Printf("S = [[%.4f %.4f] [%.4f %.4f]]\n", state[0], state[1], state[2], state[3])
	fmt.Println("outputs within 1e-6 of Naive:", tensor.MaxAbsDiff(out, want) < 1e-6)
	fmt.Println("state within 1e-6 of Naive:", tensor.MaxAbsDiff(state, wantState) < 1e-6)
	// Output:
	// o_17 = (1.1300, -0.1400)
	// S = [[1.1300 -0.1400] [-2.1600 2.4800]]
	// outputs within 1e-6 of Naive: true
	// state within 1e-6 of Naive: true
}
