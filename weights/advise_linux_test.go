package weights

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rssBytes reads this process's resident set from /proc/self/statm.
func rssBytes(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/statm")
	require.NoError(t, err)
	f := strings.Fields(string(data))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// DropPages must really release a mapped matrix's pages: touching 64 MiB
// of bf16 weights raises the resident set by about that much, and dropping
// them takes it back down.
func TestDropPagesReleasesMemory(t *testing.T) {
	const rows, cols = 1024, 32 * 1024 // 64 MiB of bf16
	path := filepath.Join(t.TempDir(), "big.safetensors")
	w, err := NewStreamWriter(path, []TensorHeader{{Name: "w", DType: "BF16", Shape: []int{rows, cols}}}, nil)
	require.NoError(t, err)
	row := make([]float32, cols)
	for i := range row {
		row[i] = float32(i%13) + 1
	}
	for r := 0; r < rows; r++ {
		require.NoError(t, w.Append("w", row))
	}
	require.NoError(t, w.Close())
	st, err := openQwen(path)
	require.NoError(t, err)
	defer st.Close()
	m, err := st.Matrix("w")
	require.NoError(t, err)
	require.True(t, st.isZeroCopy(unsafe.Pointer(&m.BF16[0])), "the matrix must live in the mapping")

	before := rssBytes(t)
	var sum uint32
	for i := 0; i < len(m.BF16); i += 2048 { // one read per 4 KiB page
		sum += uint32(m.BF16[i])
	}
	require.NotZero(t, sum)
	touched := rssBytes(t)
	require.NoError(t, st.DropPages(m))
	dropped := rssBytes(t)
	t.Logf("RSS: %d MiB before, %d MiB touched, %d MiB after DropPages", before>>20, touched>>20, dropped>>20)
	assert.Greater(t, touched-before, int64(48<<20), "touching the mapping pages it in")
	assert.Greater(t, touched-dropped, int64(48<<20), "DropPages releases it")
}
