package bench

import (
	"fmt"
	"strings"
	"time"
)

// The rates a sweep's estimate assumes before anything is measured: plain
// loops reach about 1 GFLOP/s (a backend with any naive part is priced
// so), the blocked kernels about 20 on the project's two cores. Only
// whether a sweep is long is decided by it, so rough is enough.
const (
	estimateNaiveGFLOPS = 1
	estimateFastGFLOPS  = 20
)

// Estimate predicts how long the sweep's timed cases take, from their FLOP
// counts at the rates above and the method's repetition rules.
func (o *Options) Estimate() time.Duration {
	var total time.Duration
	for _, c := range o.plan() {
		rate := float64(estimateFastGFLOPS)
		if strings.Contains(c.backend, "naive") {
			rate = estimateNaiveGFLOPS
		}
		run := time.Duration(c.gflop / rate * float64(time.Second))
		runs := c.runs
		if runs == 0 {
			runs = o.Method.estimateRuns(run)
		}
		total += time.Duration(runs) * run
	}
	return total
}

// announce says, before a sweep estimated at over a minute starts, how
// long it may take and what shortens it.
func (o *Options) announce() {
	if o.Progress == nil {
		return
	}
	if d := o.Estimate(); d > time.Minute {
		fmt.Fprintf(o.Progress, "bench: %d cases at shape %s, estimated %s (at about %d GFLOP/s naive, %d otherwise); fewer --seq, --op or --backends, or a lower --max-time, shorten it\n",
			len(o.plan()), o.ShapeName, fmtDur(d.Round(time.Second)), estimateNaiveGFLOPS, estimateFastGFLOPS)
	}
}
