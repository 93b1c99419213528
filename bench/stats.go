package bench

import (
	"errors"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
)

// Stats summarise repeated timings of one case.
type Stats struct {
	Median, Min, Max time.Duration
	Runs             int
}

// Summarize returns the median (the mean of the middle two for an even
// count), minimum and maximum of samples. Medians resist the other jobs on
// a shared machine better than means.
func Summarize(samples []time.Duration) (Stats, error) {
	if len(samples) == 0 {
		return Stats{}, errors.New("no samples")
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Stats{Median: med, Min: s[0], Max: s[n-1], Runs: n}, nil
}

// Method says how each case is timed.
type Method struct {
	// Warmup untimed runs first (page faults, goroutine start-up, caches).
	Warmup int
	// Reps timed runs at least.
	Reps int
	// MinTime: keep repeating past Reps until the timed runs add up to it.
	MinTime time.Duration
	// MaxTime: stop repeating once the timed runs add up to it (after at
	// least one). A warm-up run that alone takes MaxTime or longer becomes
	// the single sample instead, so a very slow case costs one run.
	MaxTime time.Duration
}

// gcMinRun is the run time from which every run is preceded by a GC.
const gcMinRun = 20 * time.Millisecond

// MaxRuns caps the repetitions of a tiny case under a large MinTime; the
// CLI holds --reps and --warmup to it too (warm-up runs have no time limit).
const MaxRuns = 10000

// timing is one instance's progress through measureGroup.
type timing struct {
	samples []time.Duration
	cpu     []time.Duration // process CPU time of each sample (-1: unknown)
	dev     []time.Duration // the device's own time of each sample, when the instance reports one
	total   time.Duration
	cold    bool // the only sample is a warm-up run (see Method.MaxTime)
	done    bool
}

// deviceSampler is an instance whose last run can say how long it took on
// its device (CUDA events around the device's work, no host copies).
type deviceSampler interface {
	deviceTime() (time.Duration, bool)
}

// measureGroup times every instance by Method. The instances take turns
// run by run (a round-robin), so a change in the machine's load during a
// case hits all of them alike and their ratios stay fair; each stops on
// its own Reps, MinTime and MaxTime. tick, if set, is called before each
// run with the instance's index and the run's (negative during warm-up).
func measureGroup(insts []instance, m Method, tick func(k, i int)) ([]timing, error) {
	tm := make([]timing, len(insts))
	var last, lastCPU time.Duration
	once := func(k, i int) (time.Duration, error) {
		insts[k].reset()
		// Collect now so garbage from the last run is not charged to this
		// one; for runs much shorter than a collection, only at warm-up.
		if i < 0 || last >= gcMinRun {
			runtime.GC()
		}
		if tick != nil {
			tick(k, i)
		}
		c0, t0 := processCPU(), time.Now()
		err := insts[k].run()
		last = time.Since(t0)
		lastCPU = -1
		if c0 >= 0 {
			lastCPU = processCPU() - c0
		}
		return last, err
	}
	for k := range insts {
		for i := 0; i < m.Warmup; i++ {
			d, err := once(k, i-m.Warmup)
			if err != nil {
				return nil, err
			}
			if m.MaxTime > 0 && d >= m.MaxTime {
				tm[k] = timing{samples: []time.Duration{d}, cpu: []time.Duration{lastCPU}, total: d, cold: true, done: true}
				break
			}
		}
	}
	for {
		ran := false
		for k := range insts {
			t := &tm[k]
			n := len(t.samples)
			enough := n >= m.Reps && t.total >= m.MinTime
			overBudget := n >= 1 && m.MaxTime > 0 && t.total >= m.MaxTime
			if t.done || enough || overBudget || n >= MaxRuns {
				t.done = true
				continue
			}
			d, err := once(k, n)
			if err != nil {
				return nil, err
			}
			t.samples, t.cpu = append(t.samples, d), append(t.cpu, lastCPU)
			if ds, ok := insts[k].(deviceSampler); ok {
				if dd, ok := ds.deviceTime(); ok {
					t.dev = append(t.dev, dd)
				}
			}
			t.total += d
			ran = true
		}
		if !ran {
			return tm, nil
		}
	}
}

// measure times one instance (see measureGroup).
func measure(inst instance, m Method, tick func(i int)) (samples []time.Duration, cold bool, err error) {
	var tk func(k, i int)
	if tick != nil {
		tk = func(_, i int) { tick(i) }
	}
	tm, err := measureGroup([]instance{inst}, m, tk)
	if err != nil {
		return nil, false, err
	}
	return tm[0].samples, tm[0].cold, nil
}

// estimateRuns predicts how many runs (warm-up included) measure makes for
// a case whose single run takes run, for the progress ETA.
func (m Method) estimateRuns(run time.Duration) int {
	if run <= 0 {
		return m.Warmup + max(m.Reps, 1)
	}
	if m.MaxTime > 0 && run >= m.MaxTime {
		return 1 // the first run, warm-up or not, is the only one
	}
	n := max(m.Reps, 1)
	if m.MinTime > 0 && time.Duration(n)*run < m.MinTime {
		n = int(m.MinTime/run) + 1
	}
	if m.MaxTime > 0 && time.Duration(n)*run > m.MaxTime {
		n = int(m.MaxTime/run) + 1
	}
	return min(n, MaxRuns) + m.Warmup
}

// CopyGBPSFor measures the memory copy rate (MeasureCopyGBPS) when an op
// among ops reports bytes moved, the rate its bandwidth column needs, and
// returns 0 otherwise.
func CopyGBPSFor(ops []*Op) float64 {
	for _, op := range ops {
		if op.Bytes != nil {
			return MeasureCopyGBPS()
		}
	}
	return 0
}

// MeasureCopyGBPS measures this machine's memory copy rate (bytes read
// plus bytes written per second, in GB/s) with a 64 MiB copy, best of
// three: the ceiling of a memory-bound op such as the conv.
func MeasureCopyGBPS() float64 {
	const n = 16 << 20 // float32s: 64 MiB, well past the caches
	src, dst := make([]float32, n), make([]float32, n)
	for i := range src {
		src[i] = float32(i)
	}
	copy(dst, src) // fault the pages in
	best := time.Duration(1<<63 - 1)
	for range 3 {
		t0 := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t0))
	}
	// Give the 128 MiB back now: held by the heap, they would count in
	// what the process holds when the sweep's heap is bounded, and leave
	// its cases that much room for garbage past their estimates.
	src, dst = nil, nil
	debug.FreeOSMemory()
	return 2 * 4 * n / best.Seconds() / 1e9
}
