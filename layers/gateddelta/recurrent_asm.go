//go:build amd64 || arm64

package gateddelta

// The fused recurrence's column blocks in assembly (recurrent_<arch>.s,
// declared in recurrent_<arch>_gen.go, both written by internal/kernelgen):
// the whole token loop of one block runs in one call, with y, δ′ and o in
// registers across the d_k rows. tiles_asm.go lists them per level.

// recBlockAsm is the signature of every generated block.
type recBlockAsm func(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)

// asmRecBlock returns a recBlock that runs blocks of narrowW columns and
// of twice that in assembly and anything else in Go. The slices are
// checked here, on the extreme index the block touches.
func asmRecBlock(narrowW int, wide, narrow recBlockAsm) func(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
	return func(s []float32, lds, w, dk int, q, k []float32, ldqk int, v, out []float32, ldv int, sc *tokScalars, n int) {
		var f recBlockAsm
		switch w {
		case 2 * narrowW:
			f = wide
		case narrowW:
			f = narrow
		default:
			recBlockPortable(s, lds, w, dk, q, k, ldqk, v, out, ldv, sc, n)
			return
		}
		_ = s[(dk-1)*lds+w-1]
		_ = q[(n-1)*ldqk+dk-1]
		_ = k[(n-1)*ldqk+dk-1]
		_ = v[(n-1)*ldv+w-1]
		_ = out[(n-1)*ldv+w-1]
		_, _, _, _ = sc.yScale[n-1], sc.betaD[n-1], sc.rho[n-1], sc.oScale[n-1]
		f(&s[0], lds, dk, &q[0], &k[0], ldqk, &v[0], &out[0], ldv, &sc.yScale[0], &sc.betaD[0], &sc.rho[0], &sc.oScale[0], n)
	}
}
