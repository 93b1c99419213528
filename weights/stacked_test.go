package weights

import (
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// Stacked reads [A, B, C] as [A·B, C] over the mapping (bf16 zero-copy),
// refuses other ranks naming the tensor, and the prefetch hints leave
// every value as it was (a heap matrix is not touched).
func TestStackedAndPrefetch(t *testing.T) {
	dir := t.TempDir()
	data := make([]float32, 3*5*4096)
	for i := range data {
		data[i] = float32(i%613) - 300
	}
	path := filepath.Join(dir, "w.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{
		{Name: "experts", DType: "BF16", Shape: []int{3, 5, 4096}, Data: data},
		{Name: "flat", DType: "F32", Shape: []int{2, 4096}, Data: data[:2*4096]},
	}, nil))
	st, err := openQwen(path)
	require.NoError(t, err)
	defer st.Close()
	m, err := st.Stacked("experts")
	require.NoError(t, err)
	assert.Equal(t, 15, m.Rows)
	assert.Equal(t, 4096, m.Cols)
	assert.True(t, st.isZeroCopy(unsafe.Pointer(&m.BF16[0])))
	assert.Equal(t, data[7*4096+11], m.At(7, 11))
	_, err = st.Stacked("flat")
	assert.ErrorContains(t, err, "flat")

	before := m.ToFloat32()
	view := &tensor.Matrix{Rows: 5, Cols: 4096, BF16: m.BF16[5*4096 : 10*4096]}
	require.NoError(t, st.ReadRandom(m))
	require.NoError(t, st.Prefetch(view))
	assert.Equal(t, before, m.ToFloat32())
	heap, _ := tensor.NewMatrixF32(1, 4, []float32{1, 2, 3, 4})
	require.NoError(t, st.Prefetch(heap))
	require.NoError(t, st.ReadRandom(heap))
	assert.Equal(t, []float32{1, 2, 3, 4}, heap.F32)
}
