package weights

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWriteFileIsAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	bad := [][]NamedTensor{
		{{Name: "a", DType: "F32", Shape: []int{2, 2}, Data: seq(3, 1)}},                                           // short data
		{{Name: "a", DType: "F64", Shape: []int{1}, Data: seq(1, 1)}},                                              // unwritable dtype
		{{Name: "a", DType: "F32", Shape: []int{1}, Data: seq(1, 1)}, {Name: "a", DType: "BF16", Shape: []int{1}}}, // duplicate
		{{Name: "", DType: "F32", Shape: []int{1}, Data: seq(1, 1)}},                                               // empty name
		{{Name: "__metadata__", DType: "F32", Shape: []int{1}, Data: seq(1, 1)}},                                   // reserved name
		{{Name: "a", DType: "F32", Shape: []int{-1}}},                                                              // negative dim
		{{Name: "\xff", DType: "F32", Shape: []int{1}, Data: seq(1, 1)}},                                           // not UTF-8
	}
	for i, ts := range bad {
		err := WriteFile(path, ts, nil)
		requireErrorMentions(t, err, path)
		assert.Empty(t, dirEntries(t, dir), "case %d left something behind", i)
	}

	// An existing file survives a failed overwrite untouched.
	require.NoError(t, WriteFile(path, []NamedTensor{{Name: "keep", DType: "F32", Shape: []int{1}, Data: []float32{5}}}, nil))
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	err = WriteFile(path, []NamedTensor{{Name: "b", DType: "BF16", Shape: []int{9}, Data: seq(8, 1)}}, nil)
	requireErrorMentions(t, err, path, `"b"`, "want exactly 9")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, []string{"m.safetensors"}, dirEntries(t, dir))

	// Writing into a directory that does not exist fails cleanly.
	err = WriteFile(filepath.Join(dir, "no", "x.safetensors"), nil, nil)
	requireErrorMentions(t, err, filepath.Join(dir, "no", "x.safetensors"))
}

func TestWriteMetadata(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	require.NoError(t, WriteFile(path, nil, map[string]string{"format": "mlx", "k": "v"}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	h, err := parseHeader(path, raw)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"format": "mlx", "k": "v"}, h.metadata, "a caller's format is kept")
	assert.Empty(t, h.tensors)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), info.Mode().Perm())
}

func TestStreamWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.safetensors")
	big := 3*writeChunk + 17 // several conversion chunks
	w, err := NewStreamWriter(path, []TensorHeader{
		{Name: "z", DType: "BF16", Shape: []int{big}},
		{Name: "a", DType: "F32", Shape: []int{2, 3}},
		{Name: "m", DType: "BF16", Shape: []int{3, 1, 2}},
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "m", "z"}, w.Order())
	_, err = os.Stat(path)
	assert.True(t, os.IsNotExist(err), "nothing at path before Close")

	// Out of file order and in uneven pieces, from several goroutines.
	want := seq(big, 1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for off := 0; off < big; off += 50_001 {
			assert.NoError(t, w.Append("z", want[off:min(off+50_001, big)]))
		}
	}()
	go func() {
		defer wg.Done()
		assert.NoError(t, w.Append("m", seq(6, 2)[:1]))
		assert.NoError(t, w.Append("m", seq(6, 2)[1:]))
	}()
	wg.Wait()
	require.NoError(t, w.WriteTensor("a", seq(6, 3)))

	requireErrorMentions(t, w.Append("a", []float32{1}), path, `"a"`, "only 0 of 6 remain")
	requireErrorMentions(t, w.WriteTensor("a", seq(6, 3)), path, `"a"`)
	requireErrorMentions(t, w.Append("nope", nil), path, `"nope"`, "not declared")
	require.NoError(t, w.Close())
	requireErrorMentions(t, w.Close(), path, "already closed")
	requireErrorMentions(t, w.Append("a", nil), path, "already closed")
	require.NoError(t, w.Abort(), "Abort after Close is a no-op")
	assert.Equal(t, []string{"s.safetensors"}, dirEntries(t, dir))

	s := openT(t, path)
	got, _, err := s.Float32("z")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	m, err := s.Matrix("m")
	require.NoError(t, err)
	assert.Equal(t, seq(6, 2), m.ToFloat32())
	got, _, err = s.Float32("a")
	require.NoError(t, err)
	assert.Equal(t, seq(6, 3), got)
}

func TestStreamWriterIncompleteOrAborted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.safetensors")
	hs := []TensorHeader{{Name: "a", DType: "F32", Shape: []int{4}}, {Name: "b", DType: "BF16", Shape: []int{2}}}

	w, err := NewStreamWriter(path, hs, nil)
	require.NoError(t, err)
	require.NoError(t, w.Append("a", seq(3, 1)))
	err = w.Close()
	requireErrorMentions(t, err, path, `tensor "a": only 3 of 4`, `tensor "b": only 0 of 2`)
	assert.Empty(t, dirEntries(t, dir))

	w, err = NewStreamWriter(path, hs, nil)
	require.NoError(t, err)
	assert.True(t, tmpLeft(t, dir), "the temporary file lives beside path")
	require.NoError(t, w.WriteTensor("a", seq(4, 1)))
	require.NoError(t, w.Abort())
	require.NoError(t, w.Abort())
	assert.Empty(t, dirEntries(t, dir))
	requireErrorMentions(t, w.Close(), "already closed")
}

func TestWriteIndex(t *testing.T) {
	dir := t.TempDir()
	wm := map[string]string{"b": "model-00002-of-00002.safetensors", "a": "model-00001-of-00002.safetensors"}
	require.NoError(t, WriteIndex(dir, wm, 1234))
	raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
	require.NoError(t, err)
	var idx struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	require.NoError(t, json.Unmarshal(raw, &idx))
	assert.Equal(t, int64(1234), idx.Metadata["total_size"])
	assert.Equal(t, wm, idx.WeightMap)
	got, err := readIndex(filepath.Join(dir, IndexFile))
	require.NoError(t, err)
	assert.Equal(t, wm, got)

	for _, bad := range []map[string]string{nil, {"a": "../x.safetensors"}, {"a": ""}, {"": "x.safetensors"}} {
		d := t.TempDir()
		err := WriteIndex(d, bad, 0)
		requireErrorMentions(t, err, filepath.Join(d, IndexFile))
		assert.Empty(t, dirEntries(t, d))
	}
	requireErrorMentions(t, WriteIndex(t.TempDir(), wm, -1), "negative total size")
	assert.Equal(t, "model-00003-of-00011.safetensors", ShardName(3, 11))
}

// F16 tensors round to the nearest half and read back as those values.
func TestWriteF16(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.safetensors")
	vals := []float32{1, -2.5, 65504, 1e-7, 3.14159, 70000}
	require.NoError(t, WriteFile(path, []NamedTensor{{Name: "h", DType: "F16", Shape: []int{len(vals)}, Data: vals}}, nil))
	st, err := openQwen(path)
	require.NoError(t, err)
	defer st.Close()
	got, _, err := st.Float32("h")
	require.NoError(t, err)
	for i, v := range vals {
		assert.Equal(t, tensor.F16ToFloat32(tensor.Float32ToF16(v)), got[i], "value %g", v)
	}
}

// TestWriteI64 holds the integer tensors features files store token ids
// in: written exactly, read back by Float32, and a fraction refused.
func TestWriteI64(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ids.safetensors")
	ids := []float32{0, 1, 248319, 1 << 24, -3}
	require.NoError(t, WriteFile(path, []NamedTensor{{Name: "ids", DType: "I64", Shape: []int{5}, Data: ids}}, nil))
	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	info, _ := s.Info("ids")
	assert.Equal(t, "I64", info.DType)
	got, shape, err := s.Float32("ids")
	require.NoError(t, err)
	assert.Equal(t, []int{5}, shape)
	assert.Equal(t, ids, got)
	err = WriteFile(filepath.Join(t.TempDir(), "bad.safetensors"), []NamedTensor{{Name: "ids", DType: "I64", Shape: []int{1}, Data: []float32{1.5}}}, nil)
	assert.ErrorContains(t, err, "not an integer")
}
