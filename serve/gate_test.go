package serve

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A run waiting to run alone keeps its turn: a later one-unit run waits
// behind it although a unit is free; when the lone run gives up (its
// client went away), the one behind it is let in at once.
func TestGateLoneRunKeepsTurnAndCancelLetsOthersIn(t *testing.T) {
	g := newGate(2)
	bg := context.Background()
	require.NoError(t, g.acquire(bg, 1)) // one run holds a unit
	ctx, cancel := context.WithCancel(bg)
	lone := make(chan error, 1)
	go func() { lone <- g.acquire(ctx, 2) }()
	waitFor(t, "the lone run to wait", func() bool { _, w := g.state(); return w == 1 })
	next := make(chan error, 1)
	go func() { next <- g.acquire(bg, 1) }()
	waitFor(t, "the next run to wait", func() bool { _, w := g.state(); return w == 2 })
	select {
	case <-next:
		t.Fatal("a later run went ahead of the one waiting to run alone")
	default:
	}
	cancel()
	assert.ErrorIs(t, <-lone, context.Canceled)
	select {
	case err := <-next:
		require.NoError(t, err)
	case <-time.After(waitLimit):
		t.Fatal("the run behind the cancelled one was not let in")
	}
	inUse, waiting := g.state()
	assert.Equal(t, 2, inUse)
	assert.Zero(t, waiting)
	g.release(1)
	g.release(1)
	inUse, _ = g.state()
	assert.Zero(t, inUse)
	require.NoError(t, g.acquire(bg, 2), "the lone run's units were not all given back")
}
