//go:build unix

package weights

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openWithin fails the test if Open takes longer than a few seconds (a
// FIFO opened for reading blocks until a writer comes).
func openWithin(t *testing.T, path string) (*Store, error) {
	t.Helper()
	type res struct {
		s   *Store
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := openQwen(path); ch <- res{s, err} }()
	select {
	case r := <-ch:
		return r.s, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("openQwen(%s) blocked", path)
		return nil, nil
	}
}

func TestHostileFIFOsNeverBlock(t *testing.T) {
	// A FIFO as the single file.
	dir := t.TempDir()
	fifo := filepath.Join(dir, SingleFile)
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	_, err := openWithin(t, dir)
	requireErrorMentions(t, err, fifo, "FIFO")

	// A FIFO as the index, and as a shard.
	for _, which := range []string{IndexFile, "model-00002-of-00002.safetensors"} {
		dir := t.TempDir()
		writeShards(t, dir)
		p := filepath.Join(dir, which)
		require.NoError(t, os.Remove(p))
		require.NoError(t, syscall.Mkfifo(p, 0o644))
		_, err := openWithin(t, dir)
		requireErrorMentions(t, err, p, "FIFO")
	}
}

func TestHostileDuplicateFieldInEntry(t *testing.T) {
	dir := t.TempDir()
	p := writeBytes(t, dir, "d.safetensors", rawFile(`{"a":{"dtype":"F32","shape":[1],"dtype":"BF16","data_offsets":[0,4]}}`, make([]byte, 4)))
	_, err := openQwen(p)
	requireFormatError(t, err, p)
	requireErrorMentions(t, err, `tensor "a"`, `field "dtype" appears more than once`)
}

func TestHostileShardCount(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString(`{"weight_map":{`)
	for i := 0; i <= MaxShards; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%d":"s%d.safetensors"`, i, i)
	}
	b.WriteString(`}}`)
	writeBytes(t, dir, IndexFile, []byte(b.String()))
	_, err := openQwen(dir)
	requireErrorMentions(t, err, IndexFile, fmt.Sprintf("%d shard files", MaxShards+1), "limit")
}

func TestHostileNamesAreEscaped(t *testing.T) {
	dir := t.TempDir()
	p := writeBytes(t, dir, "e.safetensors", rawFile(`{"evil\u001b[2J":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)))
	_, err := openQwen(p)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "\x1b", "a terminal escape from the file reached the message")
	assert.Contains(t, err.Error(), `evil\x1b[2J`)
}

// A shard truncated after it was mapped makes reads fault; they must come
// back as an error naming the file, not kill the process with SIGBUS.
func TestHostileTruncatedWhileMapped(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "t.safetensors")
	n := 1 << 16 // several pages, so truncation leaves whole pages unbacked
	require.NoError(t, WriteFile(p, []NamedTensor{
		{Name: "w", DType: "BF16", Shape: []int{2, n}, Data: seq(2*n, 1)},
	}, nil))
	s := openT(t, p)
	require.NoError(t, os.Truncate(p, 4096))
	_, _, err := s.Float32("w")
	var fe *FaultError
	require.True(t, errors.As(err, &fe), "got %v", err)
	requireErrorMentions(t, err, p, "truncated")
	_, err = s.CheckNonFinite("w")
	require.True(t, errors.As(err, &fe), "got %v", err)
	// Zero-copy matrices are not read by Matrix; Guard covers the caller's read.
	m, err := s.Matrix("w")
	require.NoError(t, err)
	err = s.Guard(func() error {
		for _, v := range m.BF16 {
			faultSink += v
		}
		return nil
	})
	require.True(t, errors.As(err, &fe), "got %v", err)
	assert.Greater(t, fe.Offset, int64(4096-1))
}

func TestHostileOutputsAreRefused(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.safetensors")
	require.NoError(t, WriteFile(in, []NamedTensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: []float32{1}}}, nil))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	before := dirEntries(t, dir)
	ts := []NamedTensor{{Name: "b", DType: "F32", Shape: []int{1}, Data: []float32{2}}}
	requireErrorMentions(t, WriteFile(in, ts, nil, WriteOptions{Inputs: []string{in}}), in, "input")
	requireErrorMentions(t, WriteFile(fifo, ts, nil), fifo, "FIFO")
	requireErrorMentions(t, WriteIndex(fifo, map[string]string{"a": "x.safetensors"}, 4), "not a directory")
	assert.Equal(t, before, dirEntries(t, dir))
}

var faultSink uint16

// manyTensors is a valid file of n one-byte tensors.
func manyTensors(n int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"t%07d":{"dtype":"U8","shape":[1],"data_offsets":[%d,%d]}`, i, i, i+1)
	}
	b.WriteString("}")
	return rawFile(b.String(), make([]byte, n))
}

func TestHostileTensorCount(t *testing.T) {
	_, err := parseHeader("f.safetensors", manyTensors(MaxTensors+1))
	requireErrorMentions(t, err, "f.safetensors", fmt.Sprintf("more than %d tensors", MaxTensors))
	hdr, err := parseHeader("f.safetensors", manyTensors(1000))
	require.NoError(t, err)
	assert.Len(t, hdr.tensors, 1000)
}

// A shard name from the index reaches the message escaped, also through
// the error of the failed stat (which would repeat the path as given).
func TestHostileMissingShardNameIsEscaped(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	writeBytes(t, dir, IndexFile, []byte(`{"weight_map":{"x":"\u001b[2J\u202e.safetensors"}}`))
	_, err := openQwen(dir)
	requireErrorMentions(t, err, `\x1b[2J\u202e.safetensors named in the index is missing: no such file or directory`)
	assert.NotContains(t, err.Error(), "\x1b")
	assert.NotContains(t, err.Error(), "\u202e")
}

// Errors of several files come back on one line, at most a dozen listed,
// and each is still found by errors.As.
func TestHostileFileErrorsOnOneLine(t *testing.T) {
	// The index's own problems and a broken shard's, together.
	dir := t.TempDir()
	wm := writeShards(t, dir)
	wm["ghost"] = ShardName(1, 2)
	require.NoError(t, WriteIndex(dir, wm, 0))
	s2 := writeBytes(t, dir, ShardName(2, 2), rawFile(`{"w":`, nil))
	_, err := openQwen(dir)
	requireErrorMentions(t, err, `tensor "ghost"`, s2, "header is not valid JSON")
	assert.NotContains(t, err.Error(), "\n")
	var fe *FormatError
	require.ErrorAs(t, err, &fe)

	// Thirty broken files of a directory without an index.
	dir = t.TempDir()
	for i := range 30 {
		writeBytes(t, dir, fmt.Sprintf("f%02d.safetensors", i), []byte{1})
	}
	_, err = openQwen(dir)
	requireErrorMentions(t, err, "f00.safetensors", "too short", "; and 18 more")
	assert.NotContains(t, err.Error(), "\n")
	assert.NotContains(t, err.Error(), "f29.safetensors")
	require.ErrorAs(t, err, &fe)
}

// A tensor with a zero dim holds no bytes whatever its other dims are, so
// a header may give [3, 2⁶², 0]; Stacked must not wrap A·B into negative
// rows.
func TestHostileStackedRowsOverflow(t *testing.T) {
	p := writeBytes(t, t.TempDir(), "z.safetensors",
		rawFile(`{"e":{"dtype":"F32","shape":[3,4611686018427387904,0],"data_offsets":[0,0]},`+
			`"ok":{"dtype":"F32","shape":[2,0,5],"data_offsets":[0,0]}}`, nil))
	s := openT(t, p)
	m, err := s.Stacked("e")
	assert.Nil(t, m)
	requireErrorMentions(t, err, p, `tensor "e"`, "[3 4611686018427387904 0]", "more rows than an int can count")
	m, err = s.Stacked("ok")
	require.NoError(t, err)
	assert.Equal(t, [2]int{0, 5}, [2]int{m.Rows, m.Cols})
}

// A shape of exactly MaxRank dims is accepted.
func TestHostileRankAtLimit(t *testing.T) {
	shape := "[" + strings.Repeat("1,", MaxRank-1) + "1]"
	hdr, err := parseHeader("r.safetensors", rawFile(`{"w":{"dtype":"U8","shape":`+shape+`,"data_offsets":[0,1]}}`, []byte{7}))
	require.NoError(t, err)
	assert.Len(t, hdr.tensors[0].shape, MaxRank)
}
