package bench

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/model"
)

// The moe op runs the MoE block on every backend, the per-token naive
// kernel swapped into the fast backend included, and all agree with naive;
// the default "layers" sweep drops mlp on a MoE shape and moe on a dense
// one instead of failing.
func TestMoEOp(t *testing.T) {
	cfg, err := model.ShapeConfig("tiny-moe")
	require.NoError(t, err)
	ops, err := ParseOps("moe,decoder-layer")
	require.NoError(t, err)
	o := Options{Ops: ops, Seqs: []int{1, 9}, Backends: []string{"naive", "chunked", "chunked:moe=naive"}, Config: cfg,
		ShapeName: "tiny-moe", BF16: true, Seed: 1, Method: Method{Reps: 1}, NaiveMaxGFLOP: 1e9, MaxMemBytes: 1 << 30}
	rs, err := Run(o)
	require.NoError(t, err)
	require.Len(t, rs, 2*2*3)
	for _, r := range rs {
		require.True(t, r.Ran(), "%s %s T=%d: %s", r.Op, r.Backend, r.Seq, r.Skipped)
		assert.Less(t, r.RelL2VsNaive, 1e-5, "%s %s T=%d", r.Op, r.Backend, r.Seq)
		assert.Greater(t, r.GFLOP, 0.0)
	}

	layers, err := ParseOps("layers")
	require.NoError(t, err)
	got, err := applicableOps(layers, cfg)
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(got, func(o *Op) bool { return o.Name == "moe" }))
	assert.False(t, slices.ContainsFunc(got, func(o *Op) bool { return o.Name == "mlp" }))
	dense, err := model.ShapeConfig("tiny")
	require.NoError(t, err)
	got, err = applicableOps(layers, dense)
	require.NoError(t, err)
	assert.False(t, slices.ContainsFunc(got, func(o *Op) bool { return o.Name == "moe" }))
	moeOnly, _ := ParseOps("moe")
	_, err = applicableOps(moeOnly, dense)
	assert.ErrorContains(t, err, "moe needs a mixture-of-experts model")
}
