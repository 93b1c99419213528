package linalg

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/qwenref/qwenref/tensor"
)

// unitRoundoff is float32's u = 2⁻²⁴.
const unitRoundoff = 1.0 / (1 << 24)

// sumTol is the relative-L2 tolerance between two float32 evaluations of
// the same K-term dot products that differ only in summation order. Rounding
// errors of a K-term sum add up like a random walk, ≈ c·u·√K; measured c is
// 0.3 for Naive's sequential order and below for Blocked (see
// TestBlockedFloat64Oracle), so u·√K leaves a 3× margin. A real bug (a lost,
// doubled or misplaced term) moves the result by O(1/√(K·M·N)) at least,
// orders of magnitude more for every shape tested here.
func sumTol(k int) float64 { return unitRoundoff * math.Sqrt(float64(k)) }

// variant is one configuration of Blocked that the tests sweep.
type variant struct {
	name string
	b    Blocked
}

// midBlocking has K slices of 40 and x groups and W blocks of a few
// panels each (2–7, by the kernel's tile), none of which divide the ragged
// shapes evenly: the group and block edges that tiny's one-panel groups
// and blocks do not reach.
var midBlocking = blocking{kc: 40, mc: 60, l2Bytes: 5000, ncBytes: 16000}

// variants lists every kernel this build and CPU can run, each with tiny
// blocks (so small shapes cross every K-slice, row-block, panel and thread
// edge), mid-size blocks and, for GEMM kernels, the default blocks too.
func variants() []variant {
	var vs []variant
	tiny := &blocking{kc: 40, mc: 30, gemvMaxM: 0, minParallel: 0}
	def := defaultBlocking
	def.gemvMaxM = 0 // the GEMM kernel at every M
	for _, gk := range gemmKernels {
		vs = append(vs,
			variant{"gemm-" + gk.name + "-tiny", Blocked{Threads: 3, gemm: gk, blk: tiny}},
			variant{"gemm-" + gk.name + "-mid", Blocked{Threads: 3, gemm: gk, blk: &midBlocking}},
			variant{"gemm-" + gk.name + "-default", Blocked{gemm: gk, blk: &def}},
		)
	}
	for _, gv := range gemvKernels {
		vs = append(vs, variant{"gemv-" + gv.name, Blocked{Threads: 3, gemv: gv, blk: &blocking{gemvMaxM: math.MaxInt}}})
	}
	return append(vs, variant{"default", Blocked{}})
}

// raggedShapes are {M, K, N}: none of them multiples of the tiles, plus the
// tile sizes themselves and their neighbours.
var raggedShapes = [][3]int{
	{1, 1, 1}, {1, 17, 33}, {2, 3, 5}, {3, 129, 70}, {4, 64, 48}, {5, 1, 17},
	{13, 15, 31}, {14, 16, 32}, {15, 17, 33}, {29, 70, 100}, {31, 161, 64},
	{50, 385, 47}, {64, 200, 129}, {100, 33, 5}, {7, 50, 1}, {200, 8, 40},
	{33, 600, 70}, {17, 45, 400}, {40, 90, 515},
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// randWeights returns W [n,k] as float32, or as bf16 when bf16 is set
// (values drawn in float32 and rounded).
func randWeights(r *rand.Rand, n, k int, bf16 bool) *tensor.Matrix {
	f := randVec(r, n*k)
	if !bf16 {
		return &tensor.Matrix{Rows: n, Cols: k, F32: f}
	}
	b := make([]uint16, len(f))
	for i, v := range f {
		b[i] = tensor.Float32ToBF16(v)
	}
	return &tensor.Matrix{Rows: n, Cols: k, BF16: b}
}

func dtypeName(bf16 bool) string {
	if bf16 {
		return "bf16"
	}
	return "f32"
}

func TestBlockedMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range raggedShapes {
		m, k, n := s[0], s[1], s[2]
		for _, bf16 := range []bool{false, true} {
			x := randVec(r, m*k)
			w := randWeights(r, n, k, bf16)
			want := make([]float32, m*n)
			require.NoError(t, Naive{}.MatMulT(want, x, m, w))
			for _, v := range variants() {
				got := make([]float32, m*n)
				for i := range got {
					got[i] = float32(math.NaN()) // y must be overwritten, not accumulated into
				}
				require.NoError(t, v.b.MatMulT(got, x, m, w))
				assert.LessOrEqual(t, tensor.RelL2(got, want), sumTol(k),
					"%s %s M=%d K=%d N=%d", v.name, dtypeName(bf16), m, k, n)
			}
		}
	}
}

// TestBlockedFloat64Oracle checks accuracy at a model width against the
// exact (float64) product: Blocked must be within 1e-6 and no worse than
// Naive's sequential sum, since each of its accumulators only sums kc terms.
func TestBlockedFloat64Oracle(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, k, n := 20, 5120, 48
	if testing.Short() {
		m = 5
	}
	for _, bf16 := range []bool{false, true} {
		x := randVec(r, m*k)
		w := randWeights(r, n, k, bf16)
		exact := make([]float32, m*n)
		wf := w.ToFloat32()
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for q := 0; q < k; q++ {
					s += float64(x[i*k+q]) * float64(wf[j*k+q])
				}
				exact[i*n+j] = float32(s)
			}
		}
		naive := make([]float32, m*n)
		require.NoError(t, Naive{}.MatMulT(naive, x, m, w))
		naiveErr := tensor.RelL2(naive, exact)
		for _, v := range variants() {
			got := make([]float32, m*n)
			require.NoError(t, v.b.MatMulT(got, x, m, w))
			e := tensor.RelL2(got, exact)
			t.Logf("%s %s: rel L2 vs float64 %.3g (Naive %.3g)", v.name, dtypeName(bf16), e, naiveErr)
			assert.LessOrEqual(t, e, 1e-6, v.name)
			// The gemv kernels sum K/8 terms per lane: a little worse
			// than a kc-blocked sum but still no worse than Naive.
			assert.LessOrEqual(t, e, naiveErr, v.name)
		}
	}
}

// TestBlockedGonum compares with an independent implementation: gonum's
// pure-Go Sgemm computing C = A·Bᵀ.
func TestBlockedGonum(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][3]int{{1, 300, 77}, {37, 257, 65}, {130, 1000, 96}} {
		m, k, n := s[0], s[1], s[2]
		x := randVec(r, m*k)
		w := randWeights(r, n, k, false)
		want := blas32.General{Rows: m, Cols: n, Stride: n, Data: make([]float32, m*n)}
		blas32.Gemm(blas.NoTrans, blas.Trans, 1,
			blas32.General{Rows: m, Cols: k, Stride: k, Data: x},
			blas32.General{Rows: n, Cols: k, Stride: k, Data: w.F32},
			0, want)
		got := make([]float32, m*n)
		require.NoError(t, Blocked{}.MatMulT(got, x, m, w))
		assert.LessOrEqual(t, tensor.RelL2(got, want.Data), sumTol(k), "M=%d K=%d N=%d", m, k, n)
	}
}

// TestBlockedBF16IsWidenedF32 pins the bf16 numerics: the bf16 path must give
// bit-for-bit the result of the float32 path on the exactly widened weights.
func TestBlockedBF16IsWidenedF32(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, s := range [][3]int{{1, 100, 50}, {3, 129, 70}, {50, 385, 47}} {
		m, k, n := s[0], s[1], s[2]
		x := randVec(r, m*k)
		wb := randWeights(r, n, k, true)
		wf := &tensor.Matrix{Rows: n, Cols: k, F32: wb.ToFloat32()}
		for _, v := range variants() {
			a, b := make([]float32, m*n), make([]float32, m*n)
			require.NoError(t, v.b.MatMulT(a, x, m, wb))
			require.NoError(t, v.b.MatMulT(b, x, m, wf))
			assert.Equal(t, b, a, "%s M=%d K=%d N=%d", v.name, m, k, n)
		}
	}
}

// TestBlockedDeterministic: the summation order of every output depends on
// the kernel and blocks only, never on how the work is split, so any thread
// count gives the same bits.
func TestBlockedDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	m, k, n := 61, 300, 450 // 15 panels of 32: split by columns up to 3 threads, by rows at 5
	x := randVec(r, m*k)
	w := randWeights(r, n, k, true)
	for _, v := range variants() {
		ref := make([]float32, m*n)
		b1 := v.b
		b1.Threads = 1
		require.NoError(t, b1.MatMulT(ref, x, m, w))
		for _, th := range []int{2, 3, 5} {
			got := make([]float32, m*n)
			bt := v.b
			bt.Threads = th
			require.NoError(t, bt.MatMulT(got, x, m, w))
			assert.Equal(t, ref, got, "%s threads=%d", v.name, th)
		}
	}
}

// TestBlockedConcurrent runs two products at once on one Blocked value (run
// it under -race): each must equal its sequential result exactly.
func TestBlockedConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	type job struct {
		m    int
		x, y []float32
		w    *tensor.Matrix
		want []float32
	}
	var b Blocked
	jobs := []*job{{m: 40}, {m: 1}}
	k, n := 200, 90
	for _, j := range jobs {
		j.x = randVec(r, j.m*k)
		j.w = randWeights(r, n, k, j.m == 1)
		j.want = make([]float32, j.m*n)
		require.NoError(t, b.MatMulT(j.want, j.x, j.m, j.w))
	}
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	var wg sync.WaitGroup
	errs := make([]error, len(jobs))
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				j.y = make([]float32, j.m*n)
				if err := b.MatMulT(j.y, j.x, j.m, j.w); err != nil {
					errs[i] = err
					return
				}
				for q := range j.y {
					if j.y[q] != j.want[q] {
						errs[i] = fmt.Errorf("job %d: y[%d] = %v, want %v", i, q, j.y[q], j.want[q])
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
}

// TestBlockedNaNStaysInItsRow: a NaN in one row of x poisons exactly that
// row of y, which catches kernels that mix rows or read stale tiles.
func TestBlockedNaNStaysInItsRow(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, m := range []int{1, 3, 20} {
		k, n := 70, 40
		x := randVec(r, m*k)
		x[(m-1)*k+5] = float32(math.NaN())
		w := randWeights(r, n, k, false)
		for _, v := range variants() {
			y := make([]float32, m*n)
			require.NoError(t, v.b.MatMulT(y, x, m, w))
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					isNaN := math.IsNaN(float64(y[i*n+j]))
					require.Equal(t, i == m-1, isNaN, "%s M=%d y[%d,%d]=%v", v.name, m, i, j, y[i*n+j])
				}
			}
		}
	}
}

func TestBlockedEdgeCases(t *testing.T) {
	w := &tensor.Matrix{Rows: 3, Cols: 0, F32: []float32{}}
	y := []float32{1, 2, 3, 4, 5, 6}
	require.NoError(t, Blocked{}.MatMulT(y, []float32{}, 2, w))
	assert.Equal(t, []float32{0, 0, 0, 0, 0, 0}, y, "K=0 gives zeros")

	w = &tensor.Matrix{Rows: 4, Cols: 5, F32: make([]float32, 20)}
	require.NoError(t, Blocked{}.MatMulT([]float32{}, []float32{}, 0, w), "M=0")

	w = &tensor.Matrix{Rows: 0, Cols: 5, F32: []float32{}}
	require.NoError(t, Blocked{}.MatMulT([]float32{}, make([]float32, 10), 2, w), "N=0")
}

func TestBlockedErrors(t *testing.T) {
	w := &tensor.Matrix{Rows: 4, Cols: 5, F32: make([]float32, 20)}
	for name, call := range map[string]func() error{
		"short x":    func() error { return Blocked{}.MatMulT(make([]float32, 8), make([]float32, 9), 2, w) },
		"long y":     func() error { return Blocked{}.MatMulT(make([]float32, 9), make([]float32, 10), 2, w) },
		"negative M": func() error { return Blocked{}.MatMulT(nil, nil, -1, w) },
		"nil W":      func() error { return Blocked{}.MatMulT(nil, nil, 0, nil) },
		"short W data": func() error {
			bad := &tensor.Matrix{Rows: 4, Cols: 5, F32: make([]float32, 19)}
			return Blocked{}.MatMulT(make([]float32, 8), make([]float32, 10), 2, bad)
		},
		"short bf16 data": func() error {
			bad := &tensor.Matrix{Rows: 4, Cols: 5, BF16: make([]uint16, 21)}
			return Blocked{}.MatMulT(make([]float32, 8), make([]float32, 10), 2, bad)
		},
	} {
		assert.Error(t, call(), name)
	}
}
