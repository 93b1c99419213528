package bench

import (
	"fmt"
	"io"
	"math"
	"time"

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
	Scored     int     `json:"scored"`
	Windows    int     `json:"windows"`
	Seconds    float64 `json:"seconds"`
	// Against the first backend: mean NLL difference (nats per token) and
	// the largest per-token |ΔNLL|.
	DeltaMeanNLL   *float64 `json:"delta_mean_nll,omitempty"`
	MaxAbsTokenNLL *float64 `json:"max_abs_delta_token_nll,omitempty"`
	nll            [][]float64
}

// Perplexity scores rows (apart, then pooled) on each backend spec in
// turn, in windows of ctx tokens advanced by stride (model.Perplexity),
// and measures every backend after the first against it: the model-level
// cost of a bf16 or fallback kernel, in nats per token. tty, if set, is a
// terminal that shows the windows as they go.
func Perplexity(m *model.Model, specs []string, rows [][]int, ctx, stride int, tty io.Writer) (*PerplexityRun, error) {
	run := &PerplexityRun{Rows: len(rows), Ctx: ctx, Stride: stride}
	for _, ids := range rows {
		run.Tokens += len(ids)
	}
	for _, spec := range specs {
		be, err := model.NewBackend(spec)
		if err != nil {
			return nil, err
		}
		rep, err := perplexityOn(m, be, rows, ctx, stride, tty)
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

func perplexityOn(m *model.Model, be *model.Backend, rows [][]int, ctx, stride int, tty io.Writer) (*PerplexityResult, error) {
	rep := &PerplexityResult{Backend: be.Name}
	start := time.Now()
	var sum float64
	for r, ids := range rows {
		res, err := m.Perplexity(ids, be, ctx, stride, func(done, total int) {
			if tty != nil {
				fmt.Fprintf(tty, "\r%s: row %d/%d, window %d/%d", be.Name, r+1, len(rows), done, total)
			}
		})
		if err != nil {
			return nil, err
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
	rep.MeanNLL = sum / float64(rep.Scored)
	rep.Perplexity = math.Exp(rep.MeanNLL)
	return rep, nil
}

// WriteText prints the run for a person: a line per backend, then each
// one's difference from the first.
func (run *PerplexityRun) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "%d tokens in %d row(s), windows of %d advanced by %d\n", run.Tokens, run.Rows, run.Ctx, run.Stride)
	for _, r := range run.Results {
		fmt.Fprintf(w, "%-24s perplexity %.6f · mean NLL %.8f nats over %d tokens · %d windows in %.2fs\n",
			r.Backend, r.Perplexity, r.MeanNLL, r.Scored, r.Windows, r.Seconds)
	}
	for _, r := range run.Results[1:] {
		_, err := fmt.Fprintf(w, "%s vs %s: Δ mean NLL %+.3e nats/token (perplexity ×%.8f), max |Δ NLL| of a token %.3e\n",
			r.Backend, run.Results[0].Backend, *r.DeltaMeanNLL, math.Exp(*r.DeltaMeanNLL), *r.MaxAbsTokenNLL)
		if err != nil {
			return err
		}
	}
	return nil
}
