package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// A CPU stand-in for a device-resident backend: it offers random-weight
// runners (built from the seed inside the backend, as the GPU does) and
// times conv itself, so the sweep's device paths run without a GPU.
var devOpened, devClosed atomic.Int64

type countingRunner struct{ model.Runner }

func (r countingRunner) Close() error {
	devClosed.Add(1)
	return r.Runner.Close()
}

// The device time the stand-in's runner reports for every call.
const fakeRunnerDeviceTime = 777 * time.Microsecond

func (r countingRunner) LastDeviceTime() (time.Duration, bool) { return fakeRunnerDeviceTime, true }

var _ model.DeviceTimer = countingRunner{}

const fakeDeviceMedian = 1234 * time.Microsecond

// The stand-in's device: its ceiling, and the refusal its Supports gives.
var fakeCeiling = model.Ceiling{GFLOPS: 1e6, GBPS: 1e4, About: "test device"}

const fakeRefusal = "test: the resident kernels want wider heads"

// fakeDeviceTime times conv, cannot time gdn-core at any shape (saying
// why), and offers nothing for other ops.
func fakeDeviceTime(op string, cfg *model.Config, t int) (*model.DeviceTiming, error) {
	switch op {
	case "conv":
		return &model.DeviceTiming{Median: fakeDeviceMedian, Min: fakeDeviceMedian / 2, Max: 2 * fakeDeviceMedian, Runs: 7, ElemBytes: 2}, nil
	case "gdn-core":
		return nil, model.UnsupportedShape("test: gdn-core is timed at the 27B only")
	}
	return nil, nil
}

func init() {
	model.RegisterBackend("test-devrandom", "test only: chunked, generating its own random weights", func() (*model.Backend, error) {
		be, err := model.ParseBackend("chunked")
		if err != nil {
			return nil, err
		}
		be.Name = "test-devrandom"
		be.Device = &model.Device{Name: "test device", Time: fakeDeviceTime, Ceiling: fakeCeiling,
			Supports: func(*model.Config) error { return errors.New(fakeRefusal) },
			NewRandomRunner: func(cfg *model.Config, seed uint64, rows int) (model.Runner, error) {
				m, err := model.NewRandom(cfg, seed, true)
				if err != nil {
					return nil, err
				}
				r, err := model.NewRunner(m, be, rows)
				if err != nil {
					return nil, err
				}
				devOpened.Add(1)
				return countingRunner{r}, nil
			}}
		return be, nil
	})
}

// With every backend generating its own weights, ops model and decode
// build none in the bench (a 1-byte --max-memory does not stop them), say
// so in the note, have no naive reference, and close every runner. Their
// runner reports each call's device time: that is the record's time, and
// the host clock goes into the note.
func TestDeviceWeightsModelOps(t *testing.T) {
	o := tinyOptions(t, "model,decode", "test-devrandom")
	o.MaxMemBytes = 1
	open0, closed0 := devOpened.Load(), devClosed.Load()
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 4)
	for _, r := range rs {
		assert.True(t, r.Ran(), r.Op)
		assert.Greater(t, r.Median, time.Duration(0), r.Op)
		assert.Contains(t, r.Note, "weights generated on the device from --seed 1", r.Op)
		assert.True(t, math.IsNaN(r.RelL2VsNaive), r.Op)
		assert.Equal(t, fakeRunnerDeviceTime, r.Median, r.Op)
		assert.Contains(t, r.Note, "device time: CUDA events around each call's work", r.Op)
		assert.Contains(t, r.Note, "host clock per call, logits to the host included", r.Op)
	}
	assert.Equal(t, int64(4), devOpened.Load()-open0, "one runner per (op, T)")
	assert.Equal(t, devOpened.Load()-open0, devClosed.Load()-closed0, "every runner closed after its case")

	// A CPU backend beside it needs host weights: the 1-byte limit refuses them.
	o.Backends = []string{"test-devrandom", "chunked"}
	_, err = Run(o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--max-mem")
}

// A backend whose device times ops reports that time, keeps the deltas
// of its host call against naive, and says so; an op its device cannot
// time at the shape keeps the wall-clock figures and says why. Its rows
// are measured against its device's ceiling, which the header names, and
// its device's refusal of the shape is printed before the sweep.
func TestDeviceTimedOps(t *testing.T) {
	o := tinyOptions(t, "conv,gdn-core", "test-devrandom", "naive")
	o.Seqs = []int{8}
	var progress bytes.Buffer
	o.Progress = &progress
	rs, err := Run(o)
	require.NoError(t, err)
	assert.Contains(t, progress.String(), "bench: backend test-devrandom at shape "+o.ShapeName+": "+fakeRefusal)
	conv := find(rs, "conv", "test-devrandom", 8)
	assert.Equal(t, fakeDeviceMedian, conv.Median)
	assert.Equal(t, 7, conv.Runs)
	assert.Less(t, conv.RelL2VsNaive, 1e-5)
	assert.True(t, strings.Contains(conv.Note, "device time"), conv.Note)
	assert.Equal(t, fakeCeiling, conv.Ceiling)
	// A bf16 device run moves half the host op's bytes: GB/s counts those.
	naiveConv := find(rs, "conv", "naive", 8)
	assert.InDelta(t, 0.5, conv.GBPS*conv.Median.Seconds()/(naiveConv.GBPS*naiveConv.Median.Seconds()), 1e-12)
	core := find(rs, "gdn-core", "test-devrandom", 8)
	assert.NotEqual(t, fakeDeviceMedian, core.Median)
	assert.Contains(t, core.Note, "no device time at this shape (test: gdn-core is timed at the 27B only)")
	assert.Less(t, core.RelL2VsNaive, 1e-4)
	assert.Equal(t, model.Ceiling{}, find(rs, "conv", "naive", 8).Ceiling, "the CPU has no device ceiling")

	var table bytes.Buffer
	require.NoError(t, WriteTable(&table, Meta{Shape: o.ShapeName, Config: o.Config, CPUCeiling: 1}, rs))
	assert.Contains(t, table.String(), "; test-devrandom: 1000 TFLOP/s, 10 TB/s copy (test device)")
	pct := fmt.Sprintf(" %.0f%% ", 100*conv.GBPS/fakeCeiling.GBPS)
	found := false
	for _, l := range strings.Split(table.String(), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "8" && f[1] == "test-devrandom" && strings.Contains(l, fmtDur(conv.Median)) {
			found = true
			assert.Contains(t, l, pct, "%%ceil against the device's copy rate")
		}
	}
	assert.True(t, found, table.String())
}

// Timed decode steps follow one another as in generation (position T,
// T+1, ...), re-prefilling after maxDecodeSteps, and the output is always
// the first step's logits at position T.
func TestDecodeStepsAdvance(t *testing.T) {
	o := tinyOptions(t, "decode", "chunked")
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	op, _ := LookupOp("decode")
	var layerWS *workspace
	ws, err := o.workspaceFor(op, &layerWS)
	require.NoError(t, err)
	mk, err := op.prepare(ws, 8, o.Seed)
	require.NoError(t, err)
	inst := mk(be).(*decodeInst)
	defer inst.Close()
	var first []float32
	for i := range maxDecodeSteps + 3 {
		inst.reset()
		require.NoError(t, inst.run())
		assert.Equal(t, 8+1+i%maxDecodeSteps, inst.runner.Pos(), "step %d", i)
		if first == nil {
			first = append([]float32(nil), inst.output()...)
		}
		assert.Equal(t, first, inst.output(), "step %d", i)
	}
}
