package bench

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/linalg"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tensor"
)

// scaledMatMul is naive's product times 1+1e-3, so a backend built on it
// differs from naive by exactly that much in every projection.
type scaledMatMul struct{ inner linalg.MatMuler }

func (s scaledMatMul) MatMulT(y, x []float32, m int, w *tensor.Matrix) error {
	if err := s.inner.MatMulT(y, x, m, w); err != nil {
		return err
	}
	for i := range y {
		y[i] *= 1 + 1e-3
	}
	return nil
}

func init() {
	model.RegisterBackend("test-scaled", "naive with every product scaled by 1+1e-3 (bench tests)", func() (*model.Backend, error) {
		b, err := model.ParseBackend("naive")
		if err != nil {
			return nil, err
		}
		b.Name, b.MatMul = "test-scaled", scaledMatMul{b.MatMul}
		return b, nil
	})
}

func tinyOptions(t *testing.T, ops string, backends ...string) Options {
	t.Helper()
	o, err := ParseOps(ops)
	require.NoError(t, err)
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	return Options{Ops: o, Seqs: []int{8, 16}, Backends: backends, Config: cfg, ShapeName: "tiny", BF16: true, Seed: 1,
		Method: Method{Reps: 1}, NaiveMaxGFLOP: 1e9, MaxMemBytes: 1 << 30}
}

func find(rs []Result, op, backend string, seq int) Result {
	for _, r := range rs {
		if r.Op == op && r.Backend == backend && r.Seq == seq {
			return r
		}
	}
	return Result{}
}

func TestRunComparesWithNaive(t *testing.T) {
	o := tinyOptions(t, "gdn-core,gdn-layer,model", "test-scaled", "naive")
	var progress bytes.Buffer
	o.Progress = &progress
	groups := 0
	o.OnGroup = func([]Result) error { groups++; return nil }
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 3*2*2)
	assert.Equal(t, 3*2, groups)

	// Naive runs first in each group: its output is the reference.
	assert.Equal(t, "naive", rs[0].Backend)
	for _, r := range rs {
		require.True(t, r.Ran(), r.Skipped)
		assert.GreaterOrEqual(t, r.Runs, 1)
		assert.LessOrEqual(t, r.Min, r.Median)
		assert.LessOrEqual(t, r.Median, r.Max)
		assert.Greater(t, r.GFLOP, 0.0)
		assert.GreaterOrEqual(t, r.Penalty, 1.0)
		assert.GreaterOrEqual(t, r.CPU, time.Duration(0), "CPU time is known on unix")
		if r.Backend == "naive" {
			assert.Zero(t, r.RelL2VsNaive, "naive against itself")
			assert.Zero(t, r.MaxAbsVsNaive)
		}
	}
	// The scaled product leaves the core alone and moves every layer.
	assert.Zero(t, find(rs, "gdn-core", "test-scaled", 8).RelL2VsNaive)
	for _, op := range []string{"gdn-layer", "model"} {
		d := find(rs, op, "test-scaled", 16).RelL2VsNaive
		assert.Greater(t, d, 1e-4, op)
		assert.Less(t, d, 0.1, op)
	}
	// Within each group the fastest backend has penalty exactly 1.
	for i := 0; i < len(rs); i += 2 {
		assert.Equal(t, 1.0, math.Min(rs[i].Penalty, rs[i+1].Penalty))
	}
	assert.Contains(t, progress.String(), "[12/12] model T=16")
}

func TestRunNaiveReferenceWhenNotListed(t *testing.T) {
	o := tinyOptions(t, "mlp", "test-scaled")
	var progress bytes.Buffer
	o.Progress = &progress
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 2, "the reference run is not a result")
	for _, r := range rs {
		assert.Equal(t, "test-scaled", r.Backend)
		// gate, up and down each scaled: about (1+1e-3)³ − 1, bent a little by SiLU.
		assert.InDelta(t, 3e-3, r.RelL2VsNaive, 4e-4)
	}
	assert.Contains(t, progress.String(), "naive: ")
	assert.Contains(t, progress.String(), "reference")
}

// A mix takes its base's kernels with the named parts swapped: swapping
// the scaled product back to naive's gives naive exactly.
func TestRunMixedBackends(t *testing.T) {
	o := tinyOptions(t, "gdn-layer", "naive", "test-scaled:matmul=naive", "naive:matmul=test-scaled", "test-scaled:delta=naive:conv=naive")
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 8)
	assert.Zero(t, find(rs, "gdn-layer", "test-scaled:matmul=naive", 8).RelL2VsNaive)
	assert.Greater(t, find(rs, "gdn-layer", "naive:matmul=test-scaled", 8).RelL2VsNaive, 1e-4)
	assert.Greater(t, find(rs, "gdn-layer", "test-scaled:delta=naive:conv=naive", 16).RelL2VsNaive, 1e-4)
}

func TestRunSkipsNaiveOverBudget(t *testing.T) {
	o := tinyOptions(t, "conv", "naive", "test-scaled")
	o.NaiveMaxGFLOP = 0
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 4)
	nv := find(rs, "conv", "naive", 8)
	assert.False(t, nv.Ran())
	assert.Contains(t, nv.Skipped, "--naive-max-gflop")
	assert.True(t, math.IsNaN(nv.Penalty))
	sc := find(rs, "conv", "test-scaled", 16)
	assert.True(t, sc.Ran())
	assert.True(t, math.IsNaN(sc.RelL2VsNaive))
	assert.True(t, math.IsNaN(sc.MaxAbsVsNaive))
	assert.Contains(t, sc.Note, "naive skipped")
	assert.Equal(t, 1.0, sc.Penalty)
	assert.Greater(t, sc.GBPS, 0.0, "conv is memory-bound: GB/s reported")
}

func TestRunRefusesHugeModel(t *testing.T) {
	o := tinyOptions(t, "model", "naive")
	cfg, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	o.Config, o.ShapeName, o.MaxMemBytes = cfg, "27b", 16<<30
	_, err = Run(o)
	require.Error(t, err)
	assert.ErrorContains(t, err, "--layers N")
	assert.ErrorContains(t, err, "--model DIR")
	assert.ErrorContains(t, err, "27b")

	// Cut to a few layers and a small vocabulary, the estimate fits.
	o.Layers, o.Vocab = 4, 4096
	mc := o.modelConfig()
	assert.Equal(t, 4, mc.NumLayers)
	assert.Equal(t, []model.LayerKind{model.LinearAttention, model.LinearAttention, model.LinearAttention, model.FullAttention}, mc.LayerTypes)
	assert.NoError(t, o.checkMemory(mc, "op model"))
	assert.Equal(t, 64, cfg.NumLayers, "the shape itself is not changed")
}

func TestRunValidates(t *testing.T) {
	base := tinyOptions(t, "conv", "naive")
	for name, mut := range map[string]func(*Options){
		"no ops":      func(o *Options) { o.Ops = nil },
		"no seqs":     func(o *Options) { o.Seqs = nil },
		"bad seq":     func(o *Options) { o.Seqs = []int{0} },
		"no backends": func(o *Options) { o.Backends = nil },
		"bad backend": func(o *Options) { o.Backends = []string{"nope"} },
		"no reps":     func(o *Options) { o.Reps = 0 },
	} {
		o := base
		o.Ops, o.Seqs, o.Backends = slices.Clone(base.Ops), slices.Clone(base.Seqs), slices.Clone(base.Backends)
		mut(&o)
		_, err := Run(o)
		assert.Error(t, err, name)
	}
}

// Every op must compute the same thing on every run: reset restores all
// state the run changes (recurrent state, KV cache, residual stream).
// decode-core is the exception by design: like a model's decode step, each
// run advances one of its states by a token (TestDecodeCoreAdvances).
func TestOpsRepeatable(t *testing.T) {
	o := tinyOptions(t, "all", "naive")
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	o.Ops, err = applicableOps(o.Ops, o.Config) // the dense tiny shape has no moe block (moe_test.go runs it)
	require.NoError(t, err)
	var layerWS *workspace
	for _, op := range o.Ops {
		if op.Name == "decode-core" {
			continue
		}
		ws, err := o.workspaceFor(op, &layerWS)
		require.NoError(t, err, op.Name)
		mk, err := op.prepare(ws, 9, o.Seed)
		require.NoError(t, err, op.Name)
		inst := mk(be)
		inst.reset()
		require.NoError(t, inst.run(), op.Name)
		first := slices.Clone(inst.output())
		require.NotEmpty(t, first, op.Name)
		inst.reset()
		require.NoError(t, inst.run(), op.Name)
		assert.Equal(t, first, inst.output(), op.Name)
		// Fresh inputs for another T or seed differ (the stream is keyed).
		mk2, err := op.prepare(ws, 9, o.Seed+1)
		require.NoError(t, err)
		inst2 := mk2(be)
		inst2.reset()
		require.NoError(t, inst2.run())
		assert.NotEqual(t, first, inst2.output(), op.Name)
	}
}

// The FLOP counts reproduce the anchors' figures for the 27B shapes.
func TestFLOPCountsMatchAnchors(t *testing.T) {
	c, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	assert.InDelta(t, 231.7e6, gdnProjFLOP(c), 0.1e6, "projections per token")
	core, _ := LookupOp("gdn-core")
	assert.InDelta(t, 11.27e9, core.FLOP(c, 2048), 0.01e9, "recurrent core at T=2048")
	layer, _ := LookupOp("gdn-layer")
	assert.InDelta(t, 1.94e12, layer.FLOP(c, 8192), 0.01e12, "one GDN layer at T=8192 (anchors: 1.97 T with the chunked core count)")
	attn, _ := LookupOp("attention-layer")
	assert.Equal(t, 2*512.0*511*256*24, attn.FLOP(c, 512)-attn.FLOP(c, 1)*512, "causal attention term is 2·T²·d_h·n_h")
	mlp, _ := LookupOp("mlp")
	assert.Equal(t, 6.0*5120*17408, mlp.FLOP(c, 1))
	dec, _ := LookupOp("decoder-layer")
	assert.Equal(t, layer.FLOP(c, 100)+mlp.FLOP(c, 100), dec.FLOP(c, 100))
	whole, _ := LookupOp("model")
	assert.InDelta(t, 4.16e14, whole.FLOP(c, 8192), 0.1e14, "anchors: whole-model prefill at T=8192")
}

// decode-core cycles through its states: with two states, runs 1 and 2
// start from different states and run 3 continues state 1 by a token, so
// every backend's k-th run does the same work.
func TestDecodeCoreAdvances(t *testing.T) {
	o := tinyOptions(t, "decode-core", "naive")
	o.States = 2
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	op, _ := LookupOp("decode-core")
	var layerWS *workspace
	ws, err := o.workspaceFor(op, &layerWS)
	require.NoError(t, err)
	mk, err := op.prepare(ws, 1, o.Seed)
	require.NoError(t, err)
	a, b := mk(be).(*decodeCoreInst), mk(be).(*decodeCoreInst)
	var outs [][]float32
	for range 3 {
		require.NoError(t, a.run())
		require.NoError(t, b.run())
		assert.Equal(t, a.out, b.out, "two instances agree run by run")
		outs = append(outs, slices.Clone(a.out))
	}
	assert.NotEqual(t, outs[0], outs[1], "another state")
	assert.NotEqual(t, outs[0], outs[2], "state 1, one token later")
	assert.Equal(t, outs[0], a.output(), "the comparison uses the first run, the same work on every backend")
}

// Batch rows: ops model and decode run each listed B (a runner of B rows,
// each its own sequence), their work scales with B, the notes give tokens/s
// and the speedup over one row, the naive reference runs B rows too (the
// same backend agrees with it exactly), and other ops refuse --batch.
func TestRunBatchRows(t *testing.T) {
	o := tinyOptions(t, "model,decode", "chunked", "naive")
	o.Seqs = []int{8}
	o.Batches = []int{1, 3}
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 2*2*2)
	for _, op := range []string{"model", "decode"} {
		var one, three Result
		for _, r := range rs {
			if r.Op == op && r.Backend == "chunked" {
				if r.Rows == 3 {
					three = r
				} else {
					one = r
				}
			}
		}
		require.Equal(t, 1, one.Rows, op)
		require.Equal(t, 3, three.Rows, op)
		assert.InDelta(t, 3*one.GFLOP, three.GFLOP, 1e-12*three.GFLOP, op)
		assert.Contains(t, one.Note, "tokens/s (1 row)", op)
		assert.Contains(t, three.Note, "tokens/s (3 rows)", op)
		assert.Contains(t, three.Note, "× the tokens/s of one row", op)
		assert.Less(t, three.RelL2VsNaive, 1e-3, op)
	}
	var txt bytes.Buffer
	require.NoError(t, WriteTable(&txt, Meta{Config: o.Config}, rs))
	assert.Contains(t, txt.String(), "    8×3  chunked")

	o = tinyOptions(t, "gdn-core", "chunked")
	o.Batches = []int{4}
	_, err = Run(o)
	assert.ErrorContains(t, err, "batch rows apply to ops model and decode")
	o.Batches = []int{0}
	_, err = Run(o)
	assert.ErrorContains(t, err, "batch rows 0")
}

// A vocabulary that makes the random weights' size overflow int64 is
// refused by the config's own limits before the memory estimate (which
// it would wrap) and before any allocation (a panic in make before).
func TestModelOpValidatesTheConfig(t *testing.T) {
	cfg, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	ops, err := ParseOps("model")
	require.NoError(t, err)
	o := &Options{Config: cfg, ShapeName: "27b", Layers: 1, Vocab: 1801439850948198, MaxMemBytes: 1 << 30}
	var layerWS *workspace
	_, err = o.workspaceFor(ops[0], &layerWS)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "vocab_size is 1801439850948198, over the limit")
}

// op conv over the input generator's limit names the limit and the
// longest T at this width, not "bad dims".
func TestConvOverTheLimitNamesIt(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	maxT := maxConvInputs / cfg.ConvDim()
	_, err = prepareConv(&workspace{cfg: cfg}, maxT+1, 1)
	assert.ErrorContains(t, err, fmt.Sprintf("over the limit of %d values: at this width T is at most %d", maxConvInputs, maxT))
	assert.NotContains(t, fmt.Sprint(err), "bad dims")
}

// A sweep estimated at over a minute says so before its first case, with
// its shape; a short one says nothing.
func TestLongSweepAnnouncesItsEstimate(t *testing.T) {
	cfg, err := model.ShapeConfig("27b")
	require.NoError(t, err)
	ops, err := ParseOps("decoder-layer")
	require.NoError(t, err)
	var b strings.Builder
	o := Options{Ops: ops, Seqs: []int{8192}, Backends: []string{"chunked", "chunked:delta=naive:conv=naive"}, Config: cfg, ShapeName: "27b",
		NaiveMaxGFLOP: 30, Method: Method{Warmup: 1, Reps: 5, MaxTime: time.Minute}, Progress: &b}
	o.announce()
	assert.Contains(t, b.String(), "cases at shape 27b, estimated ")
	assert.Greater(t, o.Estimate(), time.Minute)
	b.Reset()
	o.Config, o.ShapeName, o.Seqs = mustShape(t, "tiny"), "tiny", []int{16}
	o.announce()
	assert.Empty(t, b.String())
}

func mustShape(t *testing.T, name string) *model.Config {
	c, err := model.ShapeConfig(name)
	require.NoError(t, err)
	return c
}
