package weights

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fileSeeds returns real files from the writer plus hand-built variants
// (F16, odd alignment, unknown dtype), as starting points for FuzzHeader.
func fileSeeds(t testing.TB) [][]byte {
	dir := t.TempDir()
	var seeds [][]byte
	add := func(ts []NamedTensor, meta map[string]string) {
		path := filepath.Join(dir, "s.safetensors")
		require.NoError(t, WriteFile(path, ts, meta))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		seeds = append(seeds, b)
	}
	add(sample(), map[string]string{"k": "v"})
	add(nil, nil)
	add([]NamedTensor{
		{Name: "model.language_model.layers.0.linear_attn.conv1d.weight", DType: "BF16", Shape: []int{2, 1, 2}, Data: seq(4, 1)},
		{Name: "model.visual.merger.norm.weight", DType: "F32", Shape: []int{2}, Data: seq(2, 1)},
		{Name: "mtp.fc.weight", DType: "BF16", Shape: []int{1, 2}, Data: seq(2, 1)},
		{Name: "empty", DType: "F32", Shape: []int{0, 3}},
	}, nil)
	seeds = append(seeds,
		rawFile(`{"w":{"dtype":"F16","shape":[1,2],"data_offsets":[0,4]}}`, []byte{0, 0x3c, 0, 0x7c}),
		rawFile(`{"b":{"dtype":"BF16","shape":[1,1],"data_offsets":[0,2]}} `, []byte{0x80, 0x3f}),
		rawFile(`{"q":{"dtype":"Q4_K","shape":[3],"data_offsets":[0,5]},"i":{"dtype":"I64","shape":[],"data_offsets":[5,13]}}`, make([]byte, 13)),
	)
	return seeds
}

// checkStore exercises every read on an opened store: nothing may panic,
// and whatever succeeds must be self-consistent.
func checkStore(t *testing.T, s *Store) {
	checkReads(t, s)
	require.NoError(t, s.Close())
}

// checkReads is checkStore without the Close.
func checkReads(t *testing.T, s *Store) {
	names := s.Names()
	require.True(t, slices.IsSorted(names))
	require.Len(t, slices.Compact(slices.Clone(names)), len(names), "names are unique")
	for _, name := range names {
		info, ok := s.Info(name)
		require.True(t, ok, name)
		require.Equal(t, name, info.Name)
		canon, skip := testCanonical(info.Stored)
		require.False(t, skip)
		require.Equal(t, name, canon)
		n := 1
		for _, d := range info.Shape {
			n *= d
		}
		if m, err := s.Matrix(name); err == nil {
			require.Equal(t, n, m.Rows*m.Cols, name)
			require.True(t, (m.F32 == nil) != (m.BF16 == nil), "exactly one storage field")
			require.Equal(t, n, len(m.F32)+len(m.BF16))
		}
		if v, shape, err := s.Float32(name); err == nil {
			require.Len(t, v, n, name)
			require.Equal(t, info.Shape, shape)
		}
		if c, err := s.CheckNonFinite(name); err == nil {
			require.True(t, c >= 0 && c <= n)
		}
	}
	for _, name := range s.Skipped() {
		_, skip := testCanonical(name)
		require.True(t, skip, name)
	}
}

// libraryParse runs the nlpodyssey parser, treating a panic as a rejection:
// its bugs are not ours to report here.
func libraryParse(data []byte) (st safetensors.SafeTensors, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	st, err := safetensors.Deserialize(data)
	return st, err == nil
}

// FuzzHeader feeds arbitrary bytes to the header validation Open applies
// to a mapped .safetensors file, in memory (no file or mapping per input,
// so a CI run explores thousands of inputs; Open's file handling is tested
// in store_test.go). It must return an error naming the file or a store
// whose every read is sound; when both it and the nlpodyssey parser accept
// a file, they must agree on every tensor's dtype, shape and bytes.
func FuzzHeader(f *testing.F) {
	for _, s := range fileSeeds(f) {
		f.Add(s)
	}
	const path = "fuzz/f.safetensors"
	f.Fuzz(func(t *testing.T, data []byte) {
		hdr, err := parseHeader(path, data)
		if err != nil {
			require.Contains(t, err.Error(), path)
			return
		}
		s := &Store{source: path, files: []*mappedFile{{path: path, data: data, hdr: hdr}}, namer: testCanonical}
		if err := s.index(); err != nil {
			require.Contains(t, err.Error(), path)
			return
		}
		if lib, ok := libraryParse(data); ok {
			require.Equal(t, lib.Len(), len(hdr.tensors))
			for _, rt := range hdr.tensors {
				tv, ok := lib.Tensor(rt.name)
				require.True(t, ok, rt.name)
				require.Equal(t, rt.dtype, tv.DType().String())
				require.Len(t, tv.Shape(), len(rt.shape))
				for i, d := range tv.Shape() {
					require.EqualValues(t, d, rt.shape[i])
				}
				require.True(t, bytes.Equal(tv.Data(), data[hdr.dataStart+rt.begin:hdr.dataStart+rt.end]), rt.name)
			}
		}
		checkReads(t, s) // no Close: data is not a mapping
	})
}

// FuzzIndex feeds arbitrary JSON as the index of a directory holding two
// real shards. Open must return an error naming the index or a shard, or a
// store whose tensors all come from those shards.
func FuzzIndex(f *testing.F) {
	dir := f.TempDir()
	writeShards(f, dir)
	real, err := os.ReadFile(filepath.Join(dir, IndexFile))
	require.NoError(f, err)
	require.NoError(f, os.Remove(filepath.Join(dir, IndexFile)))
	f.Add(real)
	f.Add([]byte(`{"weight_map":{"lm_head.weight":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"metadata":{"total_size":1},"weight_map":{"a":"../etc/passwd","b":"."}}`))
	f.Add([]byte(`{"weight_map":{"x":"model-00001-of-00002.safetensors","x":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`[]`))
	shards := []string{filepath.Join(dir, ShardName(1, 2)), filepath.Join(dir, ShardName(2, 2))}

	f.Fuzz(func(t *testing.T, index []byte) {
		tmp, err := os.CreateTemp(dir, "*.index.json")
		require.NoError(t, err)
		path := tmp.Name()
		defer os.Remove(path)
		_, err = tmp.Write(index)
		require.NoError(t, err)
		require.NoError(t, tmp.Close())

		s, err := openQwen(path)
		if err != nil {
			require.Nil(t, s)
			msg := err.Error()
			assert.True(t, strings.Contains(msg, path) || strings.Contains(msg, dir), msg)
			return
		}
		for _, name := range s.Names() {
			info, _ := s.Info(name)
			require.Contains(t, shards, info.File)
		}
		checkStore(t, s)
	})
}
