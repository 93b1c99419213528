package gateddelta

// NEON column blocks of the fused recurrence (recurrent_arm64.s); see
// recurrent_asm.go.

//go:noescape
func recBlock16NEON(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)

//go:noescape
func recBlock8NEON(s *float32, lds, dk int, q, k *float32, ldqk int, v, out *float32, ldv int, ys, bd, rho, osc *float32, n int)
