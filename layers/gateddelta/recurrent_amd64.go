package gateddelta

// AVX-512 and AVX2 column blocks of the fused recurrence
// (recurrent_amd64.s); see recurrent_asm.go.

//go:noescape
func recBlock32AVX512(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)

//go:noescape
func recBlock16AVX512(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)

//go:noescape
func recBlock16AVX2(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)

//go:noescape
func recBlock8AVX2(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)
