package serve

import (
	"context"
	"sync"
)

// gate admits runs to the model: up to n units at once, first come first
// served. A run takes one unit; a run whose memory fits only alone takes
// all n, so it waits for the running ones to end and the runs behind it
// wait for it (the queue is FIFO, so it is not starved by smaller ones).
type gate struct {
	mu      sync.Mutex
	n, free int
	waiters []*waiter
}

type waiter struct {
	units int
	ready chan struct{} // closed when the units are granted
}

func newGate(n int) *gate { return &gate{n: n, free: n} }

// acquire takes units (1 ≤ units ≤ n), waiting its turn; it returns
// ctx's error, holding nothing, if ctx ends first.
func (g *gate) acquire(ctx context.Context, units int) error {
	g.mu.Lock()
	if len(g.waiters) == 0 && g.free >= units {
		g.free -= units
		g.mu.Unlock()
		return nil
	}
	w := &waiter{units: units, ready: make(chan struct{})}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-w.ready: // granted as ctx ended: give the units back
		g.free += units
	default:
		for i, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				break
			}
		}
	}
	g.grant() // the head may have changed
	return ctx.Err()
}

// release gives back units taken by acquire.
func (g *gate) release(units int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free += units
	g.grant()
}

// grant hands free units to the waiters in order, stopping at the first
// that does not fit (so a waiting exclusive run keeps its turn).
func (g *gate) grant() {
	for len(g.waiters) > 0 && g.free >= g.waiters[0].units {
		w := g.waiters[0]
		g.free -= w.units
		g.waiters = g.waiters[1:]
		close(w.ready)
	}
}

// state is the units in use and the runs waiting (tests, health).
func (g *gate) state() (inUse, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n - g.free, len(g.waiters)
}
