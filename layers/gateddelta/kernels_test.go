package gateddelta

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// These tests hold every inner loop of every kernel level this CPU runs
// to a plain float64 loop (the GEMM) or to the portable loop (the rest),
// on random sizes that include the edges no model shape reaches.

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// gemmRef is C = beta·C + alpha·diag(rs)·A·B in float64, with the same
// operand conventions as kernels.gemm; it also returns Σ|alpha·rs_i·a·b|
// per entry, the scale of the rounding error a float32 sum may carry.
func gemmRef(m, n, k int, alpha float32, a []float32, lda, aks int, b []float32, ldb int, beta float32, c []float32, ldc int, rs []float32) (want, scale []float64) {
	want, scale = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		al := float64(alpha)
		if rs != nil {
			al *= float64(rs[i])
		}
		for j := 0; j < n; j++ {
			var s, sa float64
			for p := 0; p < k; p++ {
				x := float64(a[i*lda+p*aks]) * float64(b[p*ldb+j])
				s += x
				sa += math.Abs(x)
			}
			cv := 0.0
			if beta != 0 { // beta == 0 ignores C, NaNs included
				cv = float64(beta) * float64(c[i*ldc+j])
			}
			want[i*n+j] = cv + al*s
			scale[i*n+j] = math.Abs(cv) + math.Abs(al)*sa
		}
	}
	return want, scale
}

func TestGemmEveryLevel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type shape struct{ m, n, k int }
	shapes := []shape{{4, 16, 1}, {64, 64, 128}, {128, 128, 64}, {64, 128, 128}, {16, 16, 16}, {7, 5, 3}, {13, 70, 9}, {36, 100, 41}, {1, 1, 1}}
	for range 12 {
		shapes = append(shapes, shape{1 + r.IntN(80), 1 + r.IntN(150), 1 + r.IntN(130)})
	}
	for _, ks := range levelsHere() {
		t.Run(ks.level.String(), func(t *testing.T) {
			for _, sh := range shapes {
				for _, tri := range []triMode{triNone, triLowerA, triLowerC} {
					for _, transA := range []bool{false, true} {
						for _, beta := range []float32{0, 1, 0.37} {
							m, n, k := sh.m, sh.n, sh.k
							name := fmt.Sprintf("%dx%dx%d/tri%d/trans=%v/beta=%v", m, n, k, tri, transA, beta)
							ldc := n + r.IntN(3)
							a := randSlice(r, m*k+3)
							lda, aks := k, 1
							if transA {
								lda, aks = 1, m
							}
							if tri == triLowerA {
								for i := 0; i < m; i++ {
									for p := i + 1; p < k; p++ {
										a[i*lda+p*aks] = 0
									}
								}
							}
							b := randSlice(r, k*n)
							c := randSlice(r, m*ldc)
							var rs []float32
							if r.IntN(2) == 0 {
								rs = randSlice(r, m)
							}
							if beta == 0 {
								for i := range c {
									c[i] = float32(math.NaN()) // beta == 0 must not read C
								}
							}
							alpha := float32(0.5 + r.Float64())
							want, scale := gemmRef(m, n, k, alpha, a, lda, aks, b, n, beta, c, ldc, rs)
							got := append([]float32(nil), c...)
							ks.gemm(m, n, k, alpha, a, lda, aks, b, n, beta, got, ldc, tri, rs)
							// Each entry within k+2 float32 roundings of its
							// terms' magnitude (NaN fails too); nothing past
							// column n touched.
							for i := 0; i < m; i++ {
								for j := 0; j < n; j++ {
									if tri == triLowerC && j > i {
										continue
									}
									g, w := float64(got[i*ldc+j]), want[i*n+j]
									if !(math.Abs(g-w) <= 1e-6*scale[i*n+j]*float64(k+2)) {
										t.Fatalf("%s C[%d][%d] = %v, want %v", name, i, j, g, w)
									}
								}
								for j := n; j < ldc; j++ {
									if math.Float32bits(c[i*ldc+j]) != math.Float32bits(got[i*ldc+j]) {
										t.Fatalf("%s wrote C[%d][%d], past column n", name, i, j)
									}
								}
							}
						}
					}
				}
			}
		})
	}
}

func TestVectorHelpersEveryLevel(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, ks := range levelsHere() {
		t.Run(ks.level.String(), func(t *testing.T) {
			for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 32, 64, 100, 128} {
				x, y := randSlice(r, n), randSlice(r, n)
				a := float32(r.NormFloat64())
				closeTo := func(what string, got, want []float32, scale func(i int) float64) {
					for i := range want {
						require.LessOrEqual(t, math.Abs(float64(got[i]-want[i])), 2e-7*scale(i), "%s n=%d i=%d", what, n, i)
					}
				}
				got, want := append([]float32(nil), y...), append([]float32(nil), y...)
				ks.axpy(got, a, x)
				axpyPortable(want, a, x)
				closeTo("axpy", got, want, func(i int) float64 { return math.Abs(float64(a*x[i])) + math.Abs(float64(y[i])) })
				got, want = make([]float32, n), make([]float32, n)
				ks.scaleCopy(got, x, a)
				scaleCopyPortable(want, x, a)
				require.Equal(t, want, got, "scaleCopy n=%d", n)
				ks.mulScaled(got, x, y, a)
				mulScaledPortable(want, x, y, a)
				require.Equal(t, want, got, "mulScaled n=%d", n)
			}
			// The forward-substitution update, 64 columns (the assembly
			// path) and fewer (the portable one).
			for _, c := range []struct{ n, j0, r, w int }{{64, 0, 1, 64}, {64, 0, 63, 64}, {128, 64, 127, 64}, {128, 0, 100, 64}, {32, 0, 31, 32}} {
				tm, nr := randSlice(r, c.n*c.n), randSlice(r, c.n)
				got, want := make([]float32, c.w), make([]float32, c.w)
				ks.triInvAcc(got, tm, nr, c.n, c.j0, c.r)
				triInvAccPortable(want, tm, nr, c.n, c.j0, c.r)
				for i := range want {
					require.InDelta(t, want[i], got[i], 1e-5*float64(c.r-c.j0+1), "triInvAcc %+v col %d", c, i)
				}
			}
		})
	}
}

// TestExpAffineEveryLevel checks the vector exp used for the decay factors
// against math.Exp over the whole range the kernels feed it: relative
// error within 4 float32 ulps (the Cephes-style polynomial reaches ~1–2,
// and rounding the exponent to float32 adds ≤ 6e-8·|x| relative, so below
// x ≈ −8 the bound widens accordingly), a finite value at +∞-bound inputs
// and a negligible one (≤ 1e-37) far below the float32 range.
func TestExpAffineEveryLevel(t *testing.T) {
	src := make([]float64, 0, 4096)
	for x := -87.0; x <= 1; x += 0.0223 {
		src = append(src, x)
	}
	for _, ks := range levelsHere() {
		t.Run(ks.level.String(), func(t *testing.T) {
			dst := make([]float32, len(src))
			ks.expAffine(dst, src, 0, 1)
			for i, x := range src {
				tol := 4*0x1p-24 + 0x1p-24*math.Abs(x)
				require.InEpsilon(t, math.Exp(x), float64(dst[i]), tol, "x=%v", x)
			}
			// a + b·src in float64: e^{(−600.5) − (−600)} must be e^{−0.5} to
			// float32 accuracy, which a float32 difference could not deliver.
			s16 := make([]float64, 16)
			for i := range s16 {
				s16[i] = -600
			}
			ks.expAffine(dst[:16], s16, -600.5, -1)
			for i := range 16 {
				require.InEpsilon(t, math.Exp(-0.5), float64(dst[i]), 4*0x1p-24)
			}
			big := []float64{500, -500, math.Inf(-1), -90, -88, -87.5, 500, -500, math.Inf(-1), -90, -88, -87.5, 500, -500, math.Inf(-1), -90}
			ks.expAffine(dst[:len(big)], big, 0, 1)
			for i, x := range big {
				if x > 0 {
					require.False(t, math.IsInf(float64(dst[i]), 0) || math.IsNaN(float64(dst[i])), "x=%v", x)
				} else {
					require.LessOrEqual(t, dst[i], float32(1e-37), "x=%v", x)
				}
			}
		})
	}
}

// TestRecBlockEveryLevel runs each level's column block against the
// portable one on random blocks: every width it runs fast and a ragged
// one, 1 to 5 tokens (so the last-token, ρ = 1 and ρ ≠ 1 sweeps all run),
// in place (row stride > width) and contiguous.
func TestRecBlockEveryLevel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, ks := range levelsHere() {
		t.Run(ks.level.String(), func(t *testing.T) {
			widths := append(append([]int(nil), ks.recWidths...), 5)
			for _, w := range widths {
				for _, dk := range []int{1, 2, 7, 64, 128} {
					for _, n := range []int{1, 2, 5} {
						for _, lds := range []int{w, w + 3} {
							ldqk, ldv := dk+2, w+1
							s := randSlice(r, dk*lds)
							q, k := randSlice(r, n*ldqk), randSlice(r, n*ldqk)
							v := randSlice(r, n*ldv)
							var sc tokScalars
							g, beta := make([]float32, n), make([]float32, n)
							for i := range g {
								g[i] = -float32(r.Float64() * 40) // some tokens rebase (ρ ≠ 1)
								beta[i] = float32(r.Float64())
							}
							sc.fill(g, beta, 1, n)
							sWant, sGot := append([]float32(nil), s...), append([]float32(nil), s...)
							oWant, oGot := make([]float32, n*ldv), make([]float32, n*ldv)
							recBlockPortable(sWant, lds, w, dk, q, k, ldqk, v, oWant, ldv, &sc, n)
							ks.recBlock(sGot, lds, w, dk, q, k, ldqk, v, oGot, ldv, &sc, n)
							name := fmt.Sprintf("w=%d dk=%d n=%d lds=%d", w, dk, n, lds)
							// Fused and separate multiply-adds round differently;
							// a wrong index or sweep is off by O(1).
							require.LessOrEqual(t, relL2(oGot, oWant), 1e-5, "%s outputs", name)
							require.LessOrEqual(t, relL2(sGot, sWant), 1e-5, "%s state", name)
						}
					}
				}
			}
		})
	}
}

// relL2 is ‖got − want‖ / ‖want‖ (or ‖got‖ when want is zero).
func relL2(got, want []float32) float64 {
	var d, w float64
	for i := range want {
		x := float64(got[i]) - float64(want[i])
		d += x * x
		w += float64(want[i]) * float64(want[i])
	}
	if w == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / w)
}
