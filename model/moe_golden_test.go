package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
	"github.com/qwenref/qwenref/weights"
)

// moeGoldenRoot holds the MoE and Qwen3-Next cases, written by
// `gen_goldens.py --moe` with their own manifest (testdata/README.md).
var moeGoldenRoot = filepath.Join("..", "testdata", "golden", "moe")

type moeGoldenCase struct {
	goldenCase
	Family       string `json:"family"`
	SparseLayers []int  `json:"sparse_layers"`
}

func moeGoldenCases(t *testing.T) []moeGoldenCase {
	data, err := os.ReadFile(filepath.Join(moeGoldenRoot, "manifest.json"))
	if os.IsNotExist(err) {
		t.Skip("testdata/golden/moe has not been generated (python3 testdata/gen/gen_goldens.py --moe --out testdata/golden/moe)")
	}
	require.NoError(t, err)
	var man struct {
		Cases []moeGoldenCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &man))
	require.NotEmpty(t, man.Cases)
	return man.Cases
}

// checkMoEGoldens runs every stage of every MoE and Qwen3-Next case at the
// dense goldens' tolerances (runGolden: residual stream chained, each
// layer's stages teacher-forced), router logits, weights and the chosen
// experts included.
func checkMoEGoldens(t *testing.T, backend string) {
	cases := moeGoldenCases(t)
	be, err := ParseBackend(backend)
	require.NoError(t, err)
	defer be.Close()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := filepath.Join(moeGoldenRoot, c.Name)
			m, err := Load(dir)
			require.NoError(t, err)
			var sparse []int
			for i := range m.Config.LayerTypes {
				if m.Config.SparseLayer(i) {
					sparse = append(sparse, i)
				}
			}
			m.Close()
			assert.Equal(t, c.SparseLayers, sparse, "sparse layers as transformers built them")
			checks := runGolden(t, dir, c.goldenCase, be)
			require.NotEmpty(t, checks)
			worst := checks[0]
			for _, ch := range checks {
				if ch.relL2 > worst.relL2 {
					worst = ch
				}
				if !ch.ok() {
					t.Fatalf("first diverging stage: %s (rel L2 %.3e, scaled max-abs %.3e)", ch.name, ch.relL2, ch.maxAbsN)
				}
			}
			t.Logf("%s/%s: %d stage checks, worst rel L2 %.2e (%s)", backend, c.Name, len(checks), worst.relL2, worst.name)
		})
	}
}

func TestMoEGoldensNaive(t *testing.T)   { checkMoEGoldens(t, "naive") }
func TestMoEGoldensChunked(t *testing.T) { checkMoEGoldens(t, "chunked") }

// TestMoEGoldensCUDAFP32 holds the GPU's fp32 model (resident, its router
// on the device in the CPU's tie order) to the CPU backends' bars on every
// MoE and Qwen3-Next case; moe-f32-t70-b2's planted router ties fail it if
// the device router breaks them any other way.
func TestMoEGoldensCUDAFP32(t *testing.T) {
	be := cudaOrSkip(t, "cuda-fp32")
	be.Close()
	checkMoEGoldens(t, "cuda-fp32")
}

// Greedy decoding through the caches matches transformers' generate token
// for token, and cached decoding equals a full forward at the golden bar.
func TestMoEGreedyAndDecodeMatchTransformers(t *testing.T) {
	backends := []string{"naive", "chunked"}
	if be, err := ParseBackend("cuda-fp32"); err == nil { // the GPU's fp32 path, where a GPU is
		be.Close()
		backends = append(backends, "cuda-fp32")
	}
	for _, backend := range backends {
		be, err := ParseBackend(backend)
		require.NoError(t, err)
		for _, c := range moeGoldenCases(t) {
			t.Run(backend+"/"+c.Name, func(t *testing.T) {
				dir := filepath.Join(moeGoldenRoot, c.Name)
				m, err := Load(dir)
				require.NoError(t, err)
				defer m.Close()
				in := readInputs(t, dir)
				exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
				require.NoError(t, err)
				defer exp.Close()
				logits, _, err := exp.Float32("logits")
				require.NoError(t, err)
				per := len(logits) / len(in.IDs)
				for b, ids := range in.IDs {
					s := m.NewSession()
					var got []float32
					pre := max(1, len(ids)-4)
					out, err := s.Forward(ids[:pre], be, Options{})
					require.NoError(t, err)
					got = append(got, out.Data...)
					for _, id := range ids[pre:] {
						out, err := s.Forward([]int{id}, be, Options{})
						require.NoError(t, err)
						got = append(got, out.Data...)
					}
					e := tensor.CompareStage(got, logits[b*per:(b+1)*per])
					assert.True(t, e.Within(tensor.GoldenTolerance), "row %d cached logits vs transformers: %+v", b, e)
					if in.Generate != nil {
						assert.Equal(t, in.Generate.NewIDs[b], greedy(t, m, be, ids, in.Generate.MaxNewTokens), "row %d greedy continuation", b)
					}
				}
			})
		}
	}
}

// The harness can fail: one router row perturbed in the first sparse
// layer must first diverge at that layer's router_logits.
func TestMoEGoldenDivergenceIsDetected(t *testing.T) {
	c := moeGoldenCases(t)[0]
	dir := filepath.Join(moeGoldenRoot, c.Name)
	m, err := Load(dir)
	require.NoError(t, err)
	defer m.Close()
	exp, err := weights.Open(filepath.Join(dir, "expected.safetensors"))
	require.NoError(t, err)
	defer exp.Close()
	li := c.SparseLayers[0]
	r := m.Blocks[li].MoE.W.Router
	f := r.ToFloat32()
	for j := range r.Cols {
		f[j] += 0.5
	}
	m.Blocks[li].MoE.W.Router = &tensor.Matrix{Rows: r.Rows, Cols: r.Cols, F32: f}
	be, _ := ParseBackend("naive")
	var first string
	rec := func(stage string, x *tensor.Tensor) {
		if first != "" || !slices.Contains(c.Stages, stage) {
			return
		}
		want, _, err := exp.Float32(stage)
		require.NoError(t, err)
		if !compareStage(stage, x.Data, want[:len(want)/c.Batch]).ok() {
			first = stage
		}
	}
	_, err = m.NewSession().Forward(readInputs(t, dir).IDs[0], be, Options{Record: rec})
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("layers.%d.router_logits", li), first)
}

// greedy decodes maxNew tokens after prompt through one session's caches,
// stopping at an EOS id, as transformers' generate(do_sample=False) does.
func greedy(t *testing.T, m *Model, be *Backend, prompt []int, maxNew int) []int {
	s := m.NewSession()
	out, err := s.Forward(prompt, be, Options{LastOnly: true})
	require.NoError(t, err)
	var ids []int
	for len(ids) < maxNew {
		id := tensor.Argmax(out.Data)
		ids = append(ids, id)
		if slices.Contains(m.Config.EOSTokenIDs, id) {
			break
		}
		out, err = s.Forward([]int{id}, be, Options{LastOnly: true})
		require.NoError(t, err)
	}
	return ids
}
