package weights

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// Dropping a mapped matrix's pages must not change what it reads, and a
// heap matrix is left untouched.
func TestDropPagesKeepsData(t *testing.T) {
	dir := t.TempDir()
	data := make([]float32, 4096*8)
	for i := range data {
		data[i] = float32(i%977) - 400
	}
	path := filepath.Join(dir, "w.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{{Name: "w", DType: "BF16", Shape: []int{8, 4096}, Data: data}}, nil))
	st, err := openQwen(path)
	require.NoError(t, err)
	defer st.Close()
	m, err := st.Matrix("w")
	require.NoError(t, err)
	before := m.ToFloat32()
	require.NoError(t, st.DropPages(m))
	assert.Equal(t, before, m.ToFloat32(), "pages fault back in with the file's contents")

	heap, err := tensor.NewMatrixF32(1, 4096, make([]float32, 4096))
	require.NoError(t, err)
	heap.F32[100] = 7
	require.NoError(t, st.DropPages(heap))
	assert.Equal(t, float32(7), heap.F32[100])
}
