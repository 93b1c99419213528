package bench

import (
	"fmt"
	"io"
	"math"
	"time"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

// PerplexityRun is a text's (or ids') perplexity on one or several
// backends, as `qwenref perplexity --json` prints it.
type PerplexityRun struct {
	Tokens  int                 `json:"tokens"`
	Rows    int                 `json:"rows"`
	Ctx     int                 `json:"ctx"`
	Stride  int                 `json:"stride"`
	Results []*PerplexityResult `json:"results"`
}

// PerplexityResult is one backend's score.
type PerplexityResult struct {
	Backend    string  `json:"backend"`
	Perplexity float64 `json:"perplexity"`
	MeanNLL    float64 `json:"mean_nll"`
	// The standard errors as llama-perplexity estimates them: the mean
	// NLL's is √((E[nll²] − E[nll]²)/(n − 1)) over the n scored tokens, and
	// the perplexity's that times the perplexity (propagated through exp).
	MeanNLLStdErr    float64 `json:"mean_nll_stderr"`
	PerplexityStdErr float64 `json:"perplexity_stderr"`
	Scored           int     `json:"scored"`
	Windows          int     `json:"windows"`
	Seconds          float64 `json:"seconds"`
	// Against the first backend: mean NLL difference (nats per token) and
	// the largest per-token |ΔNLL|.
	DeltaMeanNLL   *float64 `json:"delta_mean_nll,omitempty"`
	MaxAbsTokenNLL *float64 `json:"max_abs_delta_token_nll,omitempty"`
	nll            [][]float64
}

// PerplexityOptions are how Perplexity scores and what it shows.
type PerplexityOptions struct {
	// Ctx and Stride lay out the windows (generate.PerplexityWindows).
	Ctx, Stride int
	// Running, if set, is told the run as llama-perplexity tells it: a
	// header, then per backend the perplexity so far after each window
	// ("[1]12.3456,[2]11.0543,…") as the windows finish, and "Final
	// estimate: PPL = x +/- y".
	Running io.Writer
	// TTY, if set (and Running is not), is a terminal that shows the
	// windows as they go.
	TTY io.Writer
}

// Perplexity scores rows (apart, then pooled) on each backend spec in
// turn, in windows (model.Perplexity), after checking that a window's
// logits fit in half the available memory, and measures every backend after
// the first against it: the model-level cost of a bf16 or fallback kernel,
// in nats per token.
func Perplexity(m *model.Model, specs []string, rows [][]int, o PerplexityOptions) (*PerplexityRun, error) {
	run := &PerplexityRun{Rows: len(rows), Ctx: o.Ctx, Stride: o.Stride}
	longest := 0
	for _, ids := range rows {
		run.Tokens += len(ids)
		longest = max(longest, len(ids))
	}
	// A window's logits are [window, V] float32: refuse what cannot fit.
	need := int64(min(o.Ctx, longest)) * int64(m.Config.VocabSize) * 4
	if avail := model.AvailableMemory(); avail > 0 && need > avail/2 {
		return nil, fmt.Errorf("a %d-token window's logits need %.1f GB (vocabulary %d), more than half the available %.1f GB: lower --ctx",
			min(o.Ctx, longest), float64(need)/1e9, m.Config.VocabSize, float64(avail)/1e9)
	}
	if o.Running != nil {
		fmt.Fprintf(o.Running, "%s in %s, windows of %d advanced by %d\n", plural(run.Tokens, "token"), plural(run.Rows, "row"), o.Ctx, o.Stride)
	}
	for _, spec := range specs {
		be, err := model.ParseBackend(spec)
		if err != nil {
			return nil, err
		}
		rep, err := perplexityOn(m, be, rows, o)
		be.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", be.Name, err)
		}
		if len(run.Results) > 0 {
			ref := run.Results[0]
			d := rep.MeanNLL - ref.MeanNLL
			worst := 0.0
			for r := range rep.nll {
				for j, v := range rep.nll[r] {
					if !math.IsNaN(v) {
						worst = math.Max(worst, math.Abs(v-ref.nll[r][j]))
					}
				}
			}
			rep.DeltaMeanNLL, rep.MaxAbsTokenNLL = &d, &worst
		}
		run.Results = append(run.Results, rep)
	}
	return run, nil
}

func perplexityOn(m *model.Model, be *model.Backend, rows [][]int, o PerplexityOptions) (*PerplexityResult, error) {
	rep := &PerplexityResult{Backend: be.Name}
	tty := o.TTY
	if o.Running != nil {
		tty = nil
		fmt.Fprintf(o.Running, "%s: ", be.Name)
	}
	start := time.Now()
	var sum, sum2 float64
	window := 0
	for r, ids := range rows {
		res, err := generate.Perplexity(m, ids, be, o.Ctx, o.Stride, func(done, total int, sofar *generate.PerplexityResult) {
			if tty != nil {
				fmt.Fprintf(tty, "\r%s: row %d/%d, window %d/%d", be.Name, r+1, len(rows), done, total)
			}
			if window++; o.Running != nil {
				fmt.Fprintf(o.Running, "[%d]%.4f,", window, math.Exp((sum+sofar.Sum)/float64(rep.Scored+sofar.Scored)))
			}
		})
		if err != nil {
			return nil, err
		}
		for _, v := range res.NLL {
			if !math.IsNaN(v) {
				sum2 += v * v
			}
		}
		sum += res.Sum
		rep.Scored += res.Scored
		rep.Windows += res.Windows
		rep.nll = append(rep.nll, res.NLL)
	}
	if tty != nil {
		fmt.Fprint(tty, "\r\033[K")
	}
	rep.Seconds = time.Since(start).Seconds()
	n := float64(rep.Scored)
	rep.MeanNLL = sum / n
	rep.Perplexity = math.Exp(rep.MeanNLL)
	if v := sum2/n - rep.MeanNLL*rep.MeanNLL; v > 0 && rep.Scored > 1 {
		rep.MeanNLLStdErr = math.Sqrt(v / (n - 1))
	}
	rep.PerplexityStdErr = rep.MeanNLLStdErr * rep.Perplexity
	if o.Running != nil {
		fmt.Fprintf(o.Running, "\nFinal estimate: PPL = %.4f +/- %.5f\n", rep.Perplexity, rep.PerplexityStdErr)
		fmt.Fprintf(o.Running, "%s: mean NLL %.8f ± %.8f nats over %s · %s in %.2fs\n",
			be.Name, rep.MeanNLL, rep.MeanNLLStdErr, plural(rep.Scored, "token"), plural(rep.Windows, "window"), rep.Seconds)
	}
	return rep, nil
}

// WriteComparison prints each backend's difference from the first, a line
// each.
func (run *PerplexityRun) WriteComparison(w io.Writer) error {
	for _, r := range run.Results[1:] {
		_, err := fmt.Fprintf(w, "%s vs %s: Δ mean NLL %+.3e nats/token (perplexity ×%.8f), max |Δ NLL| of a token %.3e\n",
			r.Backend, run.Results[0].Backend, *r.DeltaMeanNLL, math.Exp(*r.DeltaMeanNLL), *r.MaxAbsTokenNLL)
		if err != nil {
			return err
		}
	}
	return nil
}

// plural writes n and the noun, plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
