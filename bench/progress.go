package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// planned is one case the sweep will run, for the ETA. runs > 0 fixes the
// run count (the untimed naive reference run).
type planned struct {
	op, backend string
	gflop       float64
	runs        int
}

// progress reports each case on a writer: a line per case, or one line
// rewritten in place on a terminal. The ETA prices the remaining cases
// with the seconds per GFLOP each backend has shown so far on the op (or
// on any op, before it has run the op).
type progress struct {
	w      io.Writer
	tty    bool
	method Method
	todo   []planned
	n      int // cases done
	begin  time.Time
	// seconds per GFLOP per run, by "backend" and by "backend/op".
	secs, gf map[string]float64
	cur      string
	curStart time.Time
	lastLen  int
}

func newProgress(w io.Writer, tty bool, m Method) *progress {
	return &progress{w: w, tty: tty, method: m, begin: time.Now(), secs: map[string]float64{}, gf: map[string]float64{}}
}

func (p *progress) plan(todo []planned) { p.todo = todo }

func (p *progress) total() int { return len(p.todo) }

// rate returns seconds per GFLOP for a backend on an op, and whether any
// is known.
func (p *progress) rate(backend, op string) (float64, bool) {
	for _, k := range []string{backend + "/" + op, backend} {
		if p.gf[k] > 0 {
			return p.secs[k] / p.gf[k], true
		}
	}
	return 0, false
}

// eta sums the predicted time of the cases not yet done; partial is true
// when some backend has no rate yet (the ETA is then a lower bound).
func (p *progress) eta() (time.Duration, bool) {
	var total time.Duration
	partial := false
	for _, c := range p.todo[min(p.n, len(p.todo)):] {
		spg, ok := p.rate(c.backend, c.op)
		if !ok {
			partial = true
			continue
		}
		run := time.Duration(spg * c.gflop * float64(time.Second))
		runs := c.runs
		if runs == 0 {
			runs = p.method.estimateRuns(run)
		}
		total += time.Duration(runs) * run
	}
	return total, partial
}

func (p *progress) etaString() string {
	d, partial := p.eta()
	if partial && d == 0 {
		return "ETA ?"
	}
	s := "ETA " + fmtDur(d)
	if partial {
		s = "ETA > " + fmtDur(d)
	}
	return s
}

func (p *progress) start(op string, t int, backend, what string) {
	if p.w == nil {
		return
	}
	p.cur = fmt.Sprintf("%s T=%d %s", op, t, backend)
	if what != "" {
		p.cur += " (" + what + ")"
	}
	p.curStart = time.Now()
	if p.tty {
		p.line(fmt.Sprintf("[%d/%d] %s …  elapsed %s, %s", p.n+1, p.total(), p.cur, fmtDur(time.Since(p.begin)), p.etaString()))
	}
}

// tick updates the terminal line with the run in progress.
func (p *progress) tick(backend string, i int) {
	if p.w == nil || !p.tty {
		return
	}
	what := fmt.Sprintf("%s run %d", backend, i+1)
	if i < 0 {
		what = backend + " warm-up"
	}
	p.line(fmt.Sprintf("[%d/%d] %s: %s …  elapsed %s, %s", p.n+1, p.total(), p.cur, what, fmtDur(time.Since(p.begin)), p.etaString()))
}

func (p *progress) done(op string, t int, backend string, gflop float64, samples []time.Duration, what string) {
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	for _, k := range []string{backend + "/" + op, backend} {
		p.secs[k] += sum.Seconds()
		p.gf[k] += gflop * float64(len(samples))
	}
	p.n++
	if p.w == nil {
		return
	}
	st, _ := Summarize(samples)
	msg := fmt.Sprintf("[%d/%d] %s T=%d %s: %s", p.n, p.total(), op, t, backend, fmtDur(st.Median))
	if what != "" {
		msg += " " + what
	} else {
		msg += fmt.Sprintf(" median of %d", len(samples))
	}
	msg += fmt.Sprintf("  (group %s; elapsed %s, %s)", fmtDur(time.Since(p.curStart)), fmtDur(time.Since(p.begin)), p.etaString())
	p.emit(msg)
}

func (p *progress) skip(op string, t int, backend, why string) {
	if p.w == nil {
		return
	}
	p.emit(fmt.Sprintf("[-] %s T=%d %s: %s", op, t, backend, why))
}

// emit prints a finished case: a new line, or on a terminal the live
// line rewritten, so the screen keeps one line.
func (p *progress) emit(msg string) {
	if p.tty {
		p.line(msg)
		return
	}
	fmt.Fprintln(p.w, msg)
}

func (p *progress) line(s string) {
	pad := ""
	if n := p.lastLen - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprint(p.w, "\r"+s+pad)
	p.lastLen = len(s)
}

func (p *progress) finish() {
	if p.w != nil && p.tty && p.lastLen > 0 {
		fmt.Fprintln(p.w)
	}
}

// fmtDur prints a duration with three significant digits.
func fmtDur(d time.Duration) string {
	s := d.Seconds()
	switch {
	case d <= 0:
		return "0"
	case s < 1e-3:
		return fmt.Sprintf("%.3g µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3g ms", s*1e3)
	case s < 120:
		return fmt.Sprintf("%.3g s", s)
	case s < 7200:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
	}
}
