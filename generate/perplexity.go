package generate

import (
	"errors"
	"fmt"
	"math"

	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// PerplexityWindow is one forward pass of a windowed perplexity run: the
// model sees ids[Begin:End] alone and scores tokens First..End-1.
type PerplexityWindow struct{ Begin, End, First int }

// PerplexityWindows lays out windows of at most ctx tokens starting at 0,
// stride, 2·stride, … until one reaches the end of t tokens, as the loop in
// transformers' perplexity guide does. Each window scores only the tokens
// after the previous window's end (the first from token 1, which has a
// predecessor), and only tokens with an earlier token inside the window:
// with stride = ctx the first token of every later window goes unscored.
func PerplexityWindows(t, ctx, stride int) ([]PerplexityWindow, error) {
	switch {
	case t < 2:
		return nil, fmt.Errorf("perplexity needs at least 2 tokens, got %d", t)
	case ctx < 2:
		return nil, fmt.Errorf("ctx must be at least 2, got %d", ctx)
	case stride < 1 || stride > ctx:
		return nil, fmt.Errorf("stride must be in [1, ctx=%d] (a larger stride would skip tokens), got %d", ctx, stride)
	}
	var ws []PerplexityWindow
	prevEnd := 0
	for begin := 0; begin < t; begin += stride {
		end := min(begin+ctx, t)
		ws = append(ws, PerplexityWindow{Begin: begin, End: end, First: max(prevEnd, begin+1)})
		prevEnd = end
		if end == t {
			break
		}
	}
	return ws, nil
}

// TokenNLL is −log softmax(logits)[id], computed in float64.
func TokenNLL(logits []float32, id int) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	return (mx - float64(logits[id])) + math.Log(sum)
}

// PerplexityResult holds per-token negative log-likelihoods (nats).
type PerplexityResult struct {
	// NLL[j] is token j's NLL given the tokens before it in its window;
	// NaN for tokens not scored (token 0, and window starts when stride = ctx).
	NLL     []float64
	Scored  int
	Sum     float64 // Σ NLL over scored tokens
	Windows int
}

// MeanNLL is the average NLL per scored token (nats).
func (r *PerplexityResult) MeanNLL() float64 { return r.Sum / float64(r.Scored) }

// Perplexity is exp(MeanNLL).
func (r *PerplexityResult) Perplexity() float64 { return math.Exp(r.MeanNLL()) }

// ScoreLogits fills in the NLLs of one window from its logits [End-Begin, V].
func (r *PerplexityResult) ScoreLogits(w PerplexityWindow, ids []int, logits []float32, vocab int) error {
	if len(logits) != (w.End-w.Begin)*vocab {
		return fmt.Errorf("window [%d, %d): %d logits, want %d×%d", w.Begin, w.End, len(logits), w.End-w.Begin, vocab)
	}
	for j := w.First; j < w.End; j++ {
		p := j - 1 - w.Begin
		nll := TokenNLL(logits[p*vocab:(p+1)*vocab], ids[j])
		r.NLL[j] = nll
		r.Sum += nll
		r.Scored++
	}
	r.Windows++
	return nil
}

// Perplexity scores ids with windows of ctx tokens advanced by stride (see
// PerplexityWindows), on one runner emptied before each window. progress, if set, is
// called after each window with the result so far.
func Perplexity(m *model.Model, ids []int, be *model.Backend, ctx, stride int, progress func(done, total int, sofar *PerplexityResult)) (*PerplexityResult, error) {
	ws, err := PerplexityWindows(len(ids), ctx, stride)
	if err != nil {
		return nil, err
	}
	if err := m.CheckIDs(ids); err != nil {
		return nil, err
	}
	r := &PerplexityResult{NLL: make([]float64, len(ids))}
	for i := range r.NLL {
		r.NLL[i] = math.NaN()
	}
	run, err := model.NewRunner(m, be, 1)
	if err != nil {
		return nil, err
	}
	defer run.Close()
	// The logits of the longest window are allocated once, before the
	// first forward makes garbage, and every window's land in them.
	out := tensor.New(1, ws[0].End-ws[0].Begin, m.Config.VocabSize)
	for i, w := range ws {
		if i > 0 {
			if err := run.Reset(); err != nil {
				return nil, err
			}
		}
		logits, err := run.Forward([][]int{ids[w.Begin:w.End]}, model.RunOptions{Logits: model.AllLogits, Out: out})
		if err != nil {
			return nil, fmt.Errorf("window %d [%d, %d): %w", i, w.Begin, w.End, err)
		}
		if err := r.ScoreLogits(w, ids, logits.Data, m.Config.VocabSize); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(i+1, len(ws), r)
		}
	}
	if r.Scored == 0 {
		return nil, errors.New("no token was scored")
	}
	return r, nil
}
