package parallel

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultSpin is how long a helper of the pool keeps polling for the next
// loop after finishing one, before it parks. Waking a parked thread costs
// a futex call and, in a virtual machine, an interrupt to an idle vCPU: a
// loop of 16 pieces of 0.3 ms took 0.59 ms on the 16-vCPU Xeon of
// docs/perf.md with its helpers parked and 0.36 ms with them polling. A
// model's layers run loop after loop, microseconds apart, so the helpers
// stay awake through them and park only when the work stops, as OpenMP
// runtimes spin before they sleep.
const DefaultSpin = 2 * time.Millisecond

var spinNanos atomic.Int64

func init() { spinNanos.Store(int64(DefaultSpin)) }

// SetSpin sets how long helpers poll before they park (0: park at once)
// and returns the previous setting.
func SetSpin(d time.Duration) time.Duration {
	return time.Duration(spinNanos.Swap(int64(max(d, 0))))
}

// pool is the set of persistent helper goroutines that For hands its
// pieces to. One loop owns it at a time; a loop that finds it taken (a
// nested or a concurrent For) starts goroutines of its own instead.
type pool struct {
	owner sync.Mutex // held by the loop running on the pool
	// job is the latest loop, a new one each time: a helper waits for it to
	// differ from the last one it saw, so it takes part in each loop once
	// (a count of loops beside the job could be read a loop late, and the
	// helper would join the newer job twice).
	job     atomic.Pointer[poolJob]
	mu      sync.Mutex // guards helpers
	helpers []*helper
}

// poolJob is one loop: workers run work(w) for w in [1, workers).
type poolJob struct {
	workers int
	work    func(w int)
	done    sync.WaitGroup
}

type helper struct {
	index  int           // worker number: 1, 2, …
	parked atomic.Bool   // waiting on wake rather than polling
	wake   chan struct{} // buffered(1): a token means "look at job"
}

var workerPool pool

// run runs work(0) on the caller and work(w), w in [1, workers), on the
// pool's helpers, and returns when all are done; false if the pool is
// taken, in which case nothing ran.
func (p *pool) run(workers int, work func(w int)) bool {
	if !p.owner.TryLock() {
		return false
	}
	defer p.owner.Unlock()
	p.ensure(workers - 1)
	j := &poolJob{workers: workers, work: work}
	j.done.Add(workers - 1)
	p.job.Store(j)
	for _, h := range p.helpers[:workers-1] {
		if h.parked.Load() {
			select {
			case h.wake <- struct{}{}:
			default: // a token is already waiting
			}
		}
	}
	work(0)
	j.done.Wait()
	return true
}

// ensure starts helpers until there are at least n.
func (p *pool) ensure(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.helpers) < n {
		h := &helper{index: len(p.helpers) + 1, wake: make(chan struct{}, 1)}
		p.helpers = append(p.helpers, h)
		go h.loop(p, p.job.Load())
	}
}

// loop is a helper's life: wait for a new loop, take part if the loop has
// a worker number for it, repeat.
func (h *helper) loop(p *pool, seen *poolJob) {
	debug.SetPanicOnFault(true)
	for {
		j := h.await(p, seen)
		seen = j
		if h.index < j.workers {
			j.work(h.index)
			j.done.Done()
		}
	}
}

// await returns the first job after seen: polling (and yielding the
// processor) for the spin time, then parked until run sends a token.
func (h *helper) await(p *pool, seen *poolJob) *poolJob {
	spin := time.Duration(spinNanos.Load())
	if h.index >= runtime.GOMAXPROCS(0) {
		spin = 0 // more helpers than processors now: do not compete for them
	}
	deadline := time.Now().Add(spin)
	for i := 0; spin > 0; i++ {
		if j := p.job.Load(); j != seen {
			return j
		}
		if i%64 == 63 {
			if time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		h.parked.Store(true)
		// Check again after announcing the park: run may have stored the
		// job before it could see the flag.
		if j := p.job.Load(); j != seen {
			h.parked.Store(false)
			return j
		}
		<-h.wake
		h.parked.Store(false)
		if j := p.job.Load(); j != seen {
			return j
		}
	}
}
