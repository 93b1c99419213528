package linalg

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/cpu"
	"github.com/qwenref/qwenref/tensor"
)

// needAMX skips a test where the AMX kernel may not run: no AMX-BF16 on
// this CPU, a kernel level below avx512, or the OS refused the tile state.
func needAMX(t testing.TB) {
	t.Helper()
	if err := cpu.AMX(); err != nil {
		t.Skipf("no AMX here: %v", err)
	}
}

// roundedProduct is the exact (float64) product of x and W both rounded to
// bf16, rounded once to float32: what a bf16-compute product computes,
// up to its float32 summation.
func roundedProduct(x []float32, m int, w *tensor.Matrix) []float32 {
	n, k := w.Rows, w.Cols
	wf := w.ToFloat32()
	xr := make([]float64, len(x))
	for i, v := range x {
		xr[i] = float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(v)))
	}
	wr := make([]float64, len(wf))
	for i, v := range wf {
		wr[i] = float64(tensor.BF16ToFloat32(tensor.Float32ToBF16(v)))
	}
	y := make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for q := 0; q < k; q++ {
				s += xr[i*k+q] * wr[j*k+q]
			}
			y[i*n+j] = float32(s)
		}
	}
	return y
}

// amxVariants are the blockings the AMX tests sweep: tiny blocks, so that
// small shapes cross every K-slice and column-block edge (and take both
// ways of sharing out the work), and the default ones.
func amxVariants() map[string]BlockedAMX {
	return map[string]BlockedAMX{
		"tiny-kc64-nc32":  {Threads: 3, blk: &amxBlocks{kc: 64, nc: 32}},
		"tiny-kc40-nc64":  {Threads: 2, blk: &amxBlocks{kc: 40, nc: 64}},
		"default-1thread": {Threads: 1},
		"default":         {},
	}
}

// TestAMXMatchesRoundedProduct: on every ragged shape, for bf16 and float32
// weights, each blocking's result is the exact product of the bf16-rounded
// operands up to a float32 sum's error (sumTol, the bar BlockedBF16Dot
// meets in TestBF16DotAccuracy), every output is written (y starts as
// NaN), and the result does not depend on the blocking or the thread
// count, bit for bit.
func TestAMXMatchesRoundedProduct(t *testing.T) {
	needAMX(t)
	r := rand.New(rand.NewPCG(41, 42))
	// Beside the ragged shapes, M ≤ 16 with K a multiple of 32 (the
	// small-M kernel, for bf16 weights) and whole tiles.
	shapes := append([][3]int{
		{32, 32, 32}, {64, 96, 64}, {33, 5, 31}, {70, 300, 260},
		{1, 64, 100}, {5, 96, 49}, {16, 128, 97}, {3, 32, 48}, {16, 640, 200}, {17, 64, 50},
	}, raggedShapes...)
	for _, s := range shapes {
		m, k, n := s[0], s[1], s[2]
		for _, bf16 := range []bool{false, true} {
			x := randVec(r, m*k)
			w := randWeights(r, n, k, bf16)
			want := roundedProduct(x, m, w)
			var first []float32
			for name, v := range amxVariants() {
				got := make([]float32, m*n)
				for i := range got {
					got[i] = float32(math.NaN())
				}
				require.NoError(t, v.MatMulT(got, x, m, w))
				assert.LessOrEqual(t, tensor.RelL2(got, want), sumTol(k), "%s %s M=%d K=%d N=%d", name, dtypeName(bf16), m, k, n)
				// Slices and blocks change nothing either: the accumulator
				// goes to C and comes back exactly between K slices.
				if first == nil {
					first = got
				} else {
					assert.Equal(t, first, got, "%s changed the result, %s M=%d K=%d N=%d", name, dtypeName(bf16), m, k, n)
				}
			}
		}
	}
}

// TestAMXRowsIndependentOfM: a row's result does not depend on how many
// rows are computed with it (a decode step, a prefill chunk and the whole
// prompt agree), since each row block is packed and multiplied on its own
// and the small-M kernel, which swaps the operands (W·xᵀ), sums the same
// products in the same order. K = 640 takes the small-M kernel up to
// M = 16, K = 700 (not whole steps of 32) the blocked one throughout.
func TestAMXRowsIndependentOfM(t *testing.T) {
	needAMX(t)
	r := rand.New(rand.NewPCG(43, 44))
	for _, k := range []int{640, 700} {
		m, n := 100, 300
		x := randVec(r, m*k)
		w := randWeights(r, n, k, true)
		all := make([]float32, m*n)
		require.NoError(t, BlockedAMX{}.MatMulT(all, x, m, w))
		for _, sub := range []int{1, 2, 5, 15, 16, 17, 31, 32, 33, 64} {
			got := make([]float32, sub*n)
			require.NoError(t, BlockedAMX{}.MatMulT(got, x[:sub*k], sub, w))
			assert.Equal(t, all[:sub*n], got, "first %d rows, K=%d", sub, k)
		}
	}
}

// TestAMXAccuracy is TestBF16DotAccuracy for the AMX product, with the
// same bars: against the exact product of the rounded operands an ordinary
// float32 sum (sumTol), against the float32 product of the unrounded x
// within 2⁻⁸ in relative L2.
func TestAMXAccuracy(t *testing.T) {
	needAMX(t)
	r := rand.New(rand.NewPCG(23, 24))
	m, k, n := 20, 5120, 48
	x := randVec(r, m*k)
	w := randWeights(r, n, k, true)
	wf := w.ToFloat32()
	exact := make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for q := 0; q < k; q++ {
				s += float64(x[i*k+q]) * float64(wf[j*k+q])
			}
			exact[i*n+j] = float32(s)
		}
	}
	rounded := roundedProduct(x, m, w)
	for name, v := range amxVariants() {
		got := make([]float32, m*n)
		require.NoError(t, v.MatMulT(got, x, m, w))
		eR, eX := tensor.RelL2(got, rounded), tensor.RelL2(got, exact)
		t.Logf("%s: rel L2 %.3g vs exact product of rounded operands, %.3g vs float32 x", name, eR, eX)
		assert.LessOrEqual(t, eR, sumTol(k), name)
		assert.LessOrEqual(t, eX, 1.0/256, name)
	}
}

// TestAMXSpecialValues: the tiles read bf16 subnormals as zero and
// propagate infinities and NaN; a large finite sum stays finite.
func TestAMXSpecialValues(t *testing.T) {
	needAMX(t)
	k, n := 64, 32
	w := &tensor.Matrix{Rows: n, Cols: k, BF16: make([]uint16, n*k)}
	for i := range w.BF16 {
		w.BF16[i] = tensor.Float32ToBF16(1)
	}
	x := make([]float32, 3*k)
	x[0] = float32(math.Inf(1)) // row 0: +Inf
	x[k] = float32(math.NaN())  // row 1: NaN
	x[2*k] = 0x1p-130           // row 2: a subnormal, read as zero
	x[2*k+1] = 3e38             // and two terms near the float32 maximum
	x[2*k+2] = -3e38
	y := make([]float32, 3*n)
	require.NoError(t, BlockedAMX{}.MatMulT(y, x, 3, w))
	for j := 0; j < n; j++ {
		assert.True(t, math.IsInf(float64(y[j]), 1), "row 0 col %d: %v", j, y[j])
		assert.True(t, math.IsNaN(float64(y[n+j])), "row 1 col %d: %v", j, y[n+j])
		assert.False(t, math.IsNaN(float64(y[2*n+j])) || math.IsInf(float64(y[2*n+j]), 0), "row 2 col %d: %v", j, y[2*n+j])
	}
}

// TestAMXRefusedWithoutPermission: where AMX may not run, the product
// returns the reason instead of executing a tile instruction (SIGILL).
func TestAMXRefusedWithoutPermission(t *testing.T) {
	reason := cpu.AMX()
	if reason == nil {
		t.Skip("AMX runs here; the refusal is tested by TestAMXPermissionRefused")
	}
	w := &tensor.Matrix{Rows: 2, Cols: 3, BF16: make([]uint16, 6)}
	err := BlockedAMX{}.MatMulT(make([]float32, 2), make([]float32, 3), 1, w)
	require.Error(t, err)
	assert.Contains(t, err.Error(), reason.Error())
}

func TestAMXEdgeCasesAndErrors(t *testing.T) {
	needAMX(t)
	w := &tensor.Matrix{Rows: 3, Cols: 0, BF16: []uint16{}}
	y := []float32{1, 2, 3}
	require.NoError(t, BlockedAMX{}.MatMulT(y, []float32{}, 1, w))
	assert.Equal(t, []float32{0, 0, 0}, y)
	w = &tensor.Matrix{Rows: 4, Cols: 5, BF16: make([]uint16, 20)}
	assert.Error(t, BlockedAMX{}.MatMulT(make([]float32, 8), make([]float32, 9), 2, w))
	assert.Error(t, BlockedAMX{}.MatMulT(nil, nil, 0, nil))
	w = &tensor.Matrix{Rows: 4, Cols: 5, BF16: make([]uint16, 19)}
	assert.Error(t, BlockedAMX{}.MatMulT(make([]float32, 8), make([]float32, 10), 2, w))
}
