package gateddelta

import "math"

// Recurrent is the fused per-token kernel: the recurrence of spec §4.2 in
// one SIMD sweep over the state per token (see below), parallel over value
// heads. It is what Chunked runs for inputs shorter than one chunk; as a
// Kernel of its own it runs every token that way. On this project's CPU it
// does fewer FLOPs than the chunked form (3 FMAs per state element per
// token against about 4 at C = 64) and is the faster of the two at every
// sequence length; Chunked remains the reference for the chunk algorithm.
type Recurrent struct{}

// Forward implements Kernel. See Kernel for the layouts.
func (Recurrent) Forward(out, q, k, v, g, beta []float32, d Dims, state []float32) error {
	if err := d.Check(out, q, k, v, g, beta, state); err != nil {
		return err
	}
	if d.T == 0 {
		return nil
	}
	p := &problem{out: out, q: q, k: k, v: v, g: g, beta: beta, d: d, state: state}
	parallelFor(d.NV, func(w *scratch, h int) { p.recurrentHead(w, h, 0, d.T) })
	return nil
}

// The fused recurrence keeps the state as S = c·S̃, with c the product of
// the decays since the last rebase (spec §3.3 step 6 rewritten):
//
//	c′ = c·α_t
//	δ_t = β_t (v_t − c′ S̃ᵀ k̂_t)
//	S̃ ← S̃ + k̂_t (δ_t / c′)ᵀ        (so S_t = c′ S̃)
//	o_t = c′ S̃ᵀ q̂_t
//
// The decay then costs nothing per state element, and one pass over the
// state per token does the write, the read for o_t and the read S̃ᵀ k̂_{t+1}
// that the next token's δ needs: three FMAs per element instead of the
// naive four sweeps. When c′ would drop below cMin (and always on the last
// token, so the stored state is the true S) the pass instead computes
// S̃ ← ρ S̃ + k̂ δᵀ with ρ = c′ and resets c to 1. Columns of the state are
// independent, so each column block runs all tokens while it sits in L1.

// cMin bounds how far S̃ may drift from S: 2⁻⁴⁰ leaves float32 range to
// spare (|S̃| ≤ 2⁴⁰|S|) and rebases rarely (once per 27.7 of log-decay).
const cMin = 0x1p-40

// tokScalars are the per-token scalars of one head's fused recurrence.
type tokScalars struct {
	yScale []float32 // c′: multiplies S̃ᵀ k̂ in δ
	betaD  []float32 // β_t / c after the step: turns v − c′y into δ′
	rho    []float32 // 1, or c′ when the step folds c into S̃
	oScale []float32 // c after the step: turns S̃ᵀ q̂ into o_t
}

// fill computes the scalars for n tokens whose g and β sit at stride in
// g and beta. The running product stays in float64.
func (sc *tokScalars) fill(g, beta []float32, stride, n int) {
	sc.yScale = grow(sc.yScale, n)
	sc.betaD = grow(sc.betaD, n)
	sc.rho = grow(sc.rho, n)
	sc.oScale = grow(sc.oScale, n)
	c := 1.0
	for t := 0; t < n; t++ {
		cn := c * math.Exp(float64(g[t*stride]))
		rho := 1.0
		if cn < cMin || t == n-1 {
			rho, c = cn, 1
		} else {
			c = cn
		}
		sc.yScale[t] = float32(cn)
		sc.rho[t] = float32(rho)
		sc.betaD[t] = float32(float64(beta[t*stride]) / c)
		sc.oScale[t] = float32(c)
	}
}

// copyMinTokens is the token count from which a state column block is
// copied into contiguous scratch: in place, its rows sit DV floats apart
// and alias in L1 once every token re-reads them; for a token or two the
// copy costs more than it saves.
const copyMinTokens = 3

// recWindow is how many tokens each column block runs before the next
// block takes over. All blocks of a head then share one window of q̂, k̂
// (2·recWindow·DK floats, 256 KiB at DK = 128) in L2, instead of each
// block streaming the whole sequence from memory again.
const recWindow = 256

// window returns the scalars of tokens [a,b).
func (sc *tokScalars) window(a, b int) tokScalars {
	return tokScalars{sc.yScale[a:b], sc.betaD[a:b], sc.rho[a:b], sc.oScale[a:b]}
}

// recurrentHead runs tokens [t0,t1) of value head h with the fused
// recurrence, updating the head's state in place.
func (p *problem) recurrentHead(w *scratch, h, t0, t1 int) {
	d := p.d
	dk, dv, n := d.DK, d.DV, t1-t0
	kh := h / (d.NV / d.NK)
	ldqk, ldv := d.NK*dk, d.NV*dv
	w.tok.fill(p.g[t0*d.NV+h:], p.beta[t0*d.NV+h:], d.NV, n)
	S := p.state[h*dk*dv : (h+1)*dk*dv]
	if n < copyMinTokens {
		// Decode: work on the state in place, one pass per block.
		for j0 := 0; j0 < dv; {
			bw := recBlockWidth(dv - j0)
			recBlock(S[j0:], dv, bw, dk, p.q[t0*ldqk+kh*dk:], p.k[t0*ldqk+kh*dk:], ldqk,
				p.v[t0*ldv+h*dv+j0:], p.out[t0*ldv+h*dv+j0:], ldv, &w.tok, n)
			j0 += bw
		}
		return
	}
	// Copy the state into contiguous column blocks (block j0 at j0*dk).
	w.blk = grow(w.blk, dk*dv)
	for j0 := 0; j0 < dv; {
		bw := recBlockWidth(dv - j0)
		for i := 0; i < dk; i++ {
			copy(w.blk[j0*dk+i*bw:j0*dk+(i+1)*bw], S[i*dv+j0:])
		}
		j0 += bw
	}
	for a := 0; a < n; a += recWindow {
		b := min(a+recWindow, n)
		sc := w.tok.window(a, b)
		q := p.q[(t0+a)*ldqk+kh*dk:]
		k := p.k[(t0+a)*ldqk+kh*dk:]
		for j0 := 0; j0 < dv; {
			bw := recBlockWidth(dv - j0)
			recBlock(w.blk[j0*dk:], bw, bw, dk, q, k, ldqk,
				p.v[(t0+a)*ldv+h*dv+j0:], p.out[(t0+a)*ldv+h*dv+j0:], ldv, &sc, b-a)
			j0 += bw
		}
	}
	for j0 := 0; j0 < dv; {
		bw := recBlockWidth(dv - j0)
		for i := 0; i < dk; i++ {
			copy(S[i*dv+j0:i*dv+j0+bw], w.blk[j0*dk+i*bw:])
		}
		j0 += bw
	}
}
