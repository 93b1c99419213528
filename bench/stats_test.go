package bench

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeInst records the calls measure makes; each run sleeps for sleep.
type fakeInst struct {
	calls strings.Builder
	sleep time.Duration
	err   error
}

func (f *fakeInst) reset()            { f.calls.WriteString("r") }
func (f *fakeInst) output() []float32 { return nil }
func (f *fakeInst) run() error {
	f.calls.WriteString("x")
	time.Sleep(f.sleep)
	return f.err
}

func TestMeasureCountsRuns(t *testing.T) {
	f := &fakeInst{}
	var ticks []int
	samples, cold, err := measure(f, Method{Warmup: 2, Reps: 3}, func(i int) { ticks = append(ticks, i) })
	require.NoError(t, err)
	assert.False(t, cold)
	assert.Len(t, samples, 3, "warm-up runs are not samples")
	assert.Equal(t, "rxrxrxrxrx", f.calls.String(), "every run, warm-up included, starts from a reset")
	assert.Equal(t, []int{-2, -1, 0, 1, 2}, ticks)
}

func TestMeasureMinTimeRepeats(t *testing.T) {
	f := &fakeInst{sleep: time.Millisecond}
	samples, _, err := measure(f, Method{Reps: 2, MinTime: 5 * time.Millisecond}, nil)
	require.NoError(t, err)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	assert.GreaterOrEqual(t, sum, 5*time.Millisecond, "repeats until the timed runs add up to MinTime")
	assert.GreaterOrEqual(t, len(samples), 2)
}

func TestMeasureMaxTime(t *testing.T) {
	// A warm-up run over MaxTime becomes the single, cold sample.
	f := &fakeInst{sleep: 2 * time.Millisecond}
	samples, cold, err := measure(f, Method{Warmup: 1, Reps: 5, MaxTime: time.Millisecond}, nil)
	require.NoError(t, err)
	assert.True(t, cold)
	assert.Len(t, samples, 1)
	assert.Equal(t, "rx", f.calls.String())

	// Without warm-up: one timed run, then the budget is spent.
	f = &fakeInst{sleep: 2 * time.Millisecond}
	samples, cold, err = measure(f, Method{Reps: 5, MaxTime: time.Millisecond}, nil)
	require.NoError(t, err)
	assert.False(t, cold)
	assert.Len(t, samples, 1)
}

// logInst writes its name to a shared log on every run.
type logInst struct {
	name  string
	log   *strings.Builder
	sleep time.Duration
}

func (l *logInst) reset()            {}
func (l *logInst) output() []float32 { return nil }
func (l *logInst) run() error {
	l.log.WriteString(l.name)
	time.Sleep(l.sleep)
	return nil
}

func TestMeasureGroupInterleaves(t *testing.T) {
	var log strings.Builder
	a, b := &logInst{name: "a", log: &log}, &logInst{name: "b", log: &log}
	tm, err := measureGroup([]instance{a, b}, Method{Warmup: 1, Reps: 3}, nil)
	require.NoError(t, err)
	assert.Equal(t, "ab"+"ababab", log.String(), "warm-ups, then the backends take turns")
	require.Len(t, tm, 2)
	assert.Len(t, tm[0].samples, 3)
	assert.Len(t, tm[1].samples, 3)

	// A slow instance goes cold after its warm-up; the fast one goes on.
	log.Reset()
	slow := &logInst{name: "s", log: &log, sleep: 3 * time.Millisecond}
	tm, err = measureGroup([]instance{slow, a}, Method{Warmup: 1, Reps: 2, MaxTime: 2 * time.Millisecond}, nil)
	require.NoError(t, err)
	assert.Equal(t, "sa"+"aa", log.String())
	assert.True(t, tm[0].cold)
	assert.Len(t, tm[0].samples, 1)
	assert.False(t, tm[1].cold)
	assert.Len(t, tm[1].samples, 2)
}

func TestMeasureError(t *testing.T) {
	boom := errors.New("boom")
	for _, m := range []Method{{Warmup: 1, Reps: 1}, {Reps: 3}} {
		_, _, err := measure(&fakeInst{err: boom}, m, nil)
		assert.ErrorIs(t, err, boom)
	}
}

func TestEstimateRuns(t *testing.T) {
	m := Method{Warmup: 1, Reps: 5, MinTime: 100 * time.Millisecond, MaxTime: time.Second}
	assert.Equal(t, 6, m.estimateRuns(0), "unknown run time: warm-up + reps")
	assert.Equal(t, 6, m.estimateRuns(50*time.Millisecond), "reps already exceed MinTime")
	assert.Equal(t, 1+101, m.estimateRuns(time.Millisecond), "MinTime adds runs")
	assert.Equal(t, 1+3, m.estimateRuns(400*time.Millisecond), "MaxTime cuts runs")
	assert.Equal(t, 1, m.estimateRuns(2*time.Second), "one cold run")
}
