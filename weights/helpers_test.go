package weights

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// rawFile assembles a safetensors file by hand: the 8-byte length, the
// header text exactly as given, then data. Malformed cases start here.
func rawFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// writeBytes writes b to dir/name and returns the path.
func writeBytes(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// seq returns n distinct float32 values exactly representable in bf16.
func seq(n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = scale * float32(i%61-30) / 8
	}
	return out
}

// openT opens a store and closes it at the end of the test.
func openT(t testing.TB, path string) *Store {
	t.Helper()
	s, err := openQwen(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// requireErrorMentions asserts err is non-nil and contains every fragment.
func requireErrorMentions(t testing.TB, err error, fragments ...string) {
	t.Helper()
	require.Error(t, err)
	for _, f := range fragments {
		require.Contains(t, err.Error(), f)
	}
}

// requireFormatError asserts err wraps a *FormatError about file.
func requireFormatError(t testing.TB, err error, file string) {
	t.Helper()
	var fe *FormatError
	require.True(t, errors.As(err, &fe), "want a *FormatError, got %T: %v", err, err)
	require.Equal(t, file, fe.File)
}

// isZeroCopy reports whether p points into one of the store's mappings.
func (s *Store) isZeroCopy(p unsafe.Pointer) bool {
	for _, mf := range s.files {
		if len(mf.data) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&mf.data[0]))
		if a := uintptr(p); a >= lo && a < lo+uintptr(len(mf.data)) {
			return true
		}
	}
	return false
}

// dirEntries lists a directory's names, to check that nothing is left over.
func dirEntries(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// tmpLeft reports whether a writer's temporary file survived in dir.
func tmpLeft(t testing.TB, dir string) bool {
	for _, n := range dirEntries(t, dir) {
		if strings.Contains(n, ".qwenref-tmp-") {
			return true
		}
	}
	return false
}

// testCanonical is the Qwen families' naming (the model package's), which
// these tests exercise through OpenNamed.
func testCanonical(stored string) (string, bool) {
	switch {
	case strings.HasPrefix(stored, "model.visual."), strings.HasPrefix(stored, "mtp."):
		return "", true
	case strings.HasPrefix(stored, "model.language_model."):
		return strings.TrimPrefix(stored, "model.language_model."), false
	case strings.HasPrefix(stored, "model."):
		return strings.TrimPrefix(stored, "model."), false
	}
	return stored, false
}

// openQwen opens a checkpoint with the Qwen naming.
func openQwen(path string) (*Store, error) { return OpenNamed(path, testCanonical) }
