package gateddelta

import "math"

// Recurrent is the fused per-token kernel: the recurrence in one vector
// sweep over the state per token (see below and doc.go), parallel over
// key-head groups (over value heads for decode). It is what Chunked runs
// for inputs shorter than one chunk; as a Kernel of its own it runs every
// token that way. On a CPU it does fewer FLOPs than the chunked form
// (3 FMAs per state element per token against about 4 at C = 64) and is
// the faster of the two at every sequence length; Chunked remains the
// kernel of the chunk algorithm.
type Recurrent struct{}

// Forward implements Kernel. See Kernel for the layouts.
func (Recurrent) Forward(out, q, k, v, g, beta []float32, d Dims, state []float32) error {
	if err := d.Check(out, q, k, v, g, beta, state); err != nil {
		return err
	}
	if d.T == 0 {
		return nil
	}
	p := &problem{out: out, q: q, k: k, v: v, g: g, beta: beta, d: d, state: state, ks: active}
	p.recurrentAll()
	return nil
}

// recurrentAll runs every token of every head with the fused recurrence:
// by value head for decode (the state is used in place), by head group
// otherwise.
func (p *problem) recurrentAll() {
	if p.d.T < copyMinTokens {
		r := p.d.NV / p.d.NK
		forEachScratch(p.d.NV, func(w *scratch, h int) { p.recurrentGroup(w, h/r, h, h+1, 0, p.d.DV, 0, p.d.T) })
		return
	}
	p.forEachGroup(func(w *scratch, kh, h0, h1, c0, c1 int) { p.recurrentGroup(w, kh, h0, h1, c0, c1, 0, p.d.T) })
}

// The fused recurrence keeps the state as S = c·S̃, with c the product of
// the decays since the last rebase (the recurrence of doc.go rewritten):
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
// independent, so each column block (as wide as the kernel level's
// registers allow: 32 columns at avx512, 16 at avx2 and neon) runs a
// window of tokens while it sits in L1.

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
// block takes over. The window's rows of q̂, k̂, v and o are staged in
// contiguous scratch (256 KiB at d_k = d_v = 128, so it stays in L2):
// every block then reads them from cache, and the copies stream the rows
// in with many loads in flight, where the sweeps alone would stall once a
// token on each row's cache miss (rows of v and o sit NV·DV floats apart).
const recWindow = 128

// window returns the scalars of tokens [a,b).
func (sc *tokScalars) window(a, b int) tokScalars {
	return tokScalars{sc.yScale[a:b], sc.betaD[a:b], sc.rho[a:b], sc.oScale[a:b]}
}

// recurrentGroup runs tokens [t0,t1) of value heads [h0,h1), which all
// read key head kh, with the fused recurrence, updating their states in
// place. The heads share each window's staged q̂ and k̂.
func (p *problem) recurrentGroup(w *scratch, kh, h0, h1, c0, c1, t0, t1 int) {
	d, ks := p.d, p.ks
	dk, dv, n, nh := d.DK, d.DV, t1-t0, h1-h0
	ldqk, ldv := d.NK*dk, d.NV*dv
	if len(w.toks) < nh {
		w.toks = make([]tokScalars, nh)
	}
	for h := h0; h < h1; h++ {
		w.toks[h-h0].fill(p.g[t0*d.NV+h:], p.beta[t0*d.NV+h:], d.NV, n)
	}
	if n < copyMinTokens {
		// Decode: work on each state in place, one pass per block.
		for h := h0; h < h1; h++ {
			S := p.state[h*dk*dv : (h+1)*dk*dv]
			for j0 := c0; j0 < c1; {
				bw := ks.recBlockWidth(c1 - j0)
				ks.recBlock(S[j0:], dv, bw, dk, p.q[t0*ldqk+kh*dk:], p.k[t0*ldqk+kh*dk:], ldqk,
					p.v[t0*ldv+h*dv+j0:], p.out[t0*ldv+h*dv+j0:], ldv, &w.toks[h-h0], n)
				j0 += bw
			}
		}
		return
	}
	// Copy the states into contiguous column blocks (head h's block j0
	// at (h−h0)·dk·dv + j0·dk).
	w.blk = grow(w.blk, nh*dk*dv)
	for h := h0; h < h1; h++ {
		S, B := p.state[h*dk*dv:(h+1)*dk*dv], w.blk[(h-h0)*dk*dv:]
		for j0 := c0; j0 < c1; {
			bw := ks.recBlockWidth(c1 - j0)
			for i := 0; i < dk; i++ {
				copy(B[j0*dk+i*bw:j0*dk+(i+1)*bw], S[i*dv+j0:])
			}
			j0 += bw
		}
	}
	wn := min(n, recWindow)
	w.wq, w.wk = grow(w.wq, wn*dk), grow(w.wk, wn*dk)
	w.wv, w.wo = grow(w.wv, wn*dv), grow(w.wo, wn*dv)
	for a := 0; a < n; a += recWindow {
		b := min(a+recWindow, n)
		for t := a; t < b; t++ {
			r := t - a
			copy(w.wq[r*dk:(r+1)*dk], p.q[(t0+t)*ldqk+kh*dk:])
			copy(w.wk[r*dk:(r+1)*dk], p.k[(t0+t)*ldqk+kh*dk:])
		}
		for h := h0; h < h1; h++ {
			for t := a; t < b; t++ {
				copy(w.wv[(t-a)*dv+c0:(t-a)*dv+c1], p.v[(t0+t)*ldv+h*dv+c0:])
			}
			sc := w.toks[h-h0].window(a, b)
			B := w.blk[(h-h0)*dk*dv:]
			for j0 := c0; j0 < c1; {
				bw := ks.recBlockWidth(c1 - j0)
				ks.recBlock(B[j0*dk:], bw, bw, dk, w.wq, w.wk, dk, w.wv[j0:], w.wo[j0:], dv, &sc, b-a)
				j0 += bw
			}
			for t := a; t < b; t++ {
				copy(p.out[(t0+t)*ldv+h*dv+c0:(t0+t)*ldv+h*dv+c1], w.wo[(t-a)*dv+c0:])
			}
		}
	}
	for h := h0; h < h1; h++ {
		S, B := p.state[h*dk*dv:(h+1)*dk*dv], w.blk[(h-h0)*dk*dv:]
		for j0 := c0; j0 < c1; {
			bw := ks.recBlockWidth(c1 - j0)
			for i := 0; i < dk; i++ {
				copy(S[i*dv+j0:i*dv+j0+bw], B[j0*dk+i*bw:])
			}
			j0 += bw
		}
	}
}
