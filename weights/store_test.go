package weights

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/nlpodyssey/safetensors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/tensor"
)

// sample is a small mixed-dtype checkpoint in the CausalLM layout.
func sample() []NamedTensor {
	return []NamedTensor{
		{Name: "model.embed_tokens.weight", DType: "BF16", Shape: []int{7, 4}, Data: seq(28, 1)},
		{Name: "model.layers.0.linear_attn.conv1d.weight", DType: "BF16", Shape: []int{6, 1, 3}, Data: seq(18, 0.5)},
		{Name: "model.layers.0.linear_attn.A_log", DType: "F32", Shape: []int{3}, Data: []float32{0.1, -2.5, 1e-30}},
		{Name: "model.layers.0.mlp.up_proj.weight", DType: "F32", Shape: []int{5, 3}, Data: seq(15, 0.1)},
		{Name: "model.norm.weight", DType: "BF16", Shape: []int{5}, Data: seq(5, 2)},
		{Name: "lm_head.weight", DType: "BF16", Shape: []int{7, 4}, Data: seq(28, -1)},
	}
}

func TestRoundTripF32AndBF16(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	require.NoError(t, WriteFile(path, sample(), map[string]string{"note": "x<y"}))
	s := openT(t, dir)

	assert.Equal(t, []string{
		"embed_tokens.weight", "layers.0.linear_attn.A_log", "layers.0.linear_attn.conv1d.weight",
		"layers.0.mlp.up_proj.weight", "lm_head.weight", "norm.weight",
	}, s.Names())
	assert.Empty(t, s.Skipped())
	assert.Equal(t, []string{path}, s.Files())

	info, ok := s.Info("layers.0.linear_attn.conv1d.weight")
	require.True(t, ok)
	assert.Equal(t, Info{Name: "layers.0.linear_attn.conv1d.weight", Stored: "model.layers.0.linear_attn.conv1d.weight",
		File: path, DType: "BF16", Shape: []int{6, 1, 3}}, info)
	info.Shape[0] = 99 // must not alias the store
	info2, _ := s.Info("layers.0.linear_attn.conv1d.weight")
	assert.Equal(t, 6, info2.Shape[0])
	_, ok = s.Info("model.norm.weight")
	assert.False(t, ok, "stored names are not canonical names")

	for _, nt := range sample() {
		name, _ := testCanonical(nt.Name)
		got, shape, err := s.Float32(name)
		require.NoError(t, err, name)
		assert.Equal(t, nt.Shape, shape, name)
		assert.Equal(t, nt.Data, got, name) // seq values are exact in bf16
		n, err := s.CheckNonFinite(name)
		require.NoError(t, err)
		assert.Zero(t, n)
	}

	// A writer output is aligned, so both dtypes come back zero-copy.
	m, err := s.Matrix("embed_tokens.weight")
	require.NoError(t, err)
	require.True(t, m.IsBF16())
	assert.Equal(t, 7, m.Rows)
	assert.Equal(t, 4, m.Cols)
	assert.True(t, s.isZeroCopy(unsafe.Pointer(&m.BF16[0])))
	assert.Equal(t, seq(28, 1), m.ToFloat32())

	m, err = s.Matrix("layers.0.mlp.up_proj.weight")
	require.NoError(t, err)
	require.False(t, m.IsBF16())
	assert.Equal(t, [2]int{5, 3}, [2]int{m.Rows, m.Cols})
	assert.True(t, s.isZeroCopy(unsafe.Pointer(&m.F32[0])))
	assert.Equal(t, seq(15, 0.1), m.F32)

	m, err = s.Matrix("layers.0.linear_attn.conv1d.weight")
	require.NoError(t, err)
	assert.Equal(t, [2]int{6, 3}, [2]int{m.Rows, m.Cols}, "[C,1,K] becomes [C,K]")
	assert.Equal(t, seq(18, 0.5), m.ToFloat32())
}

// The writer's files must be readable by an independent parser, and laid out
// as the reference implementation lays them out.
func TestWriterOutputAgreesWithLibrary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.safetensors")
	require.NoError(t, WriteFile(path, sample(), map[string]string{"note": "x<y"}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	hlen := binary.LittleEndian.Uint64(raw)
	assert.Zero(t, (8+hlen)%8, "data section starts 8-byte aligned")

	st, err := safetensors.Deserialize(raw)
	require.NoError(t, err)
	_, meta, err := safetensors.ReadMetadata(raw)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"format": "pt", "note": "x<y"}, meta.Metadata())

	// F32 tensors first, then BF16, each group by name.
	var order []string
	for _, tv := range st.Tensors() {
		order = append(order, tv.Name)
	}
	assert.Equal(t, []string{
		"model.layers.0.linear_attn.A_log", "model.layers.0.mlp.up_proj.weight",
		"lm_head.weight", "model.embed_tokens.weight", "model.layers.0.linear_attn.conv1d.weight", "model.norm.weight",
	}, order)

	for _, nt := range sample() {
		tv, ok := st.Tensor(nt.Name)
		require.True(t, ok, nt.Name)
		assert.Equal(t, nt.DType, tv.DType().String())
		require.Len(t, tv.Shape(), len(nt.Shape))
		for i, d := range nt.Shape {
			assert.EqualValues(t, d, tv.Shape()[i])
		}
		b := tv.Data()
		for i, v := range nt.Data {
			if nt.DType == "F32" {
				assert.Equal(t, math.Float32bits(v), binary.LittleEndian.Uint32(b[4*i:]))
			} else {
				assert.Equal(t, tensor.Float32ToBF16(v), binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	}
}

func TestWriterRoundsBF16ToNearestEven(t *testing.T) {
	in := []float32{
		1 + 1.0/256,             // halfway between 1 and 1+2⁻⁷: ties to even (1)
		1 + 3.0/256,             // halfway: ties to even (1+2⁻⁶)
		1 + 1.0/256 + 1.0/65536, // just above halfway: rounds up
		float32(math.Inf(-1)), float32(math.Copysign(0, -1)), math.MaxFloat32,
	}
	want := []float32{1, 1 + 4.0/256, 1 + 2.0/256, float32(math.Inf(-1)), 0, float32(math.Inf(1))}
	path := filepath.Join(t.TempDir(), "r.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{{Name: "v", DType: "BF16", Shape: []int{6}, Data: in}}, nil))
	s := openT(t, path)
	got, _, err := s.Float32("v")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.True(t, math.Signbit(float64(got[4])), "-0 keeps its sign")
	n, err := s.CheckNonFinite("v")
	require.NoError(t, err)
	assert.Equal(t, 2, n, "-Inf and the overflow to +Inf")
}

// F16 is never written by us, so the file is assembled by hand.
func TestReadF16(t *testing.T) {
	halves := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0x8000}
	want := []float32{1, -2, 65504, 1.0 / (1 << 24), float32(math.Inf(1)), 0}
	data := make([]byte, 2*len(halves))
	for i, h := range halves {
		binary.LittleEndian.PutUint16(data[2*i:], h)
	}
	hdr := `{"model.language_model.w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}}`
	path := writeBytes(t, t.TempDir(), "h.safetensors", rawFile(hdr, data))
	s := openT(t, path)

	m, err := s.Matrix("w")
	require.NoError(t, err)
	assert.False(t, m.IsBF16(), "F16 is widened to float32")
	assert.Equal(t, want, m.F32)
	assert.False(t, s.isZeroCopy(unsafe.Pointer(&m.F32[0])))
	got, shape, err := s.Float32("w")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []int{2, 3}, shape)
	n, err := s.CheckNonFinite("w")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

func TestPrefixesAndSkipping(t *testing.T) {
	tiny := func(name string) NamedTensor {
		return NamedTensor{Name: name, DType: "BF16", Shape: []int{2, 2}, Data: seq(4, 1)}
	}
	t.Run("hub VLM layout", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "m.safetensors")
		require.NoError(t, WriteFile(path, []NamedTensor{
			tiny("model.language_model.embed_tokens.weight"),
			tiny("model.language_model.layers.3.self_attn.q_proj.weight"),
			tiny("model.language_model.norm.weight"),
			tiny("model.visual.blocks.0.attn.qkv.weight"),
			tiny("model.visual.merger.linear_fc2.weight"),
			tiny("mtp.fc.weight"),
			tiny("mtp.layers.0.mlp.up_proj.weight"),
			tiny("lm_head.weight"),
		}, nil))
		s := openT(t, path)
		assert.Equal(t, []string{"embed_tokens.weight", "layers.3.self_attn.q_proj.weight", "lm_head.weight", "norm.weight"}, s.Names())
		assert.Equal(t, []string{"model.visual.blocks.0.attn.qkv.weight", "model.visual.merger.linear_fc2.weight",
			"mtp.fc.weight", "mtp.layers.0.mlp.up_proj.weight"}, s.Skipped())
		_, err := s.Matrix("mtp.fc.weight")
		requireErrorMentions(t, err, `"mtp.fc.weight"`)
		info, ok := s.Info("norm.weight")
		require.True(t, ok)
		assert.Equal(t, "model.language_model.norm.weight", info.Stored)
	})
	t.Run("CausalLM layout", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "m.safetensors")
		require.NoError(t, WriteFile(path, []NamedTensor{
			tiny("model.embed_tokens.weight"), tiny("model.layers.0.input_layernorm.weight"), tiny("lm_head.weight"),
		}, nil))
		s := openT(t, path)
		assert.Equal(t, []string{"embed_tokens.weight", "layers.0.input_layernorm.weight", "lm_head.weight"}, s.Names())
	})
}

func TestDuplicateCanonicalNames(t *testing.T) {
	tiny := func(name string) NamedTensor {
		return NamedTensor{Name: name, DType: "F32", Shape: []int{2}, Data: []float32{1, 2}}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "m.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{
		tiny("model.norm.weight"), tiny("model.language_model.norm.weight"), tiny("model.x"), tiny("x"),
	}, nil))
	_, err := openQwen(path)
	requireErrorMentions(t, err, path, `"model.norm.weight"`, `"model.language_model.norm.weight"`, `"norm.weight"`,
		`"model.x"`, `"x"`, "2 problems")
	assert.Equal(t, []string{"m.safetensors"}, dirEntries(t, dir))
}

// writeShards writes a two-shard VLM-layout checkpoint with its index.
func writeShards(t testing.TB, dir string) map[string]string {
	t.Helper()
	shard1 := []NamedTensor{
		{Name: "model.language_model.embed_tokens.weight", DType: "BF16", Shape: []int{4, 3}, Data: seq(12, 1)},
		{Name: "model.language_model.layers.0.linear_attn.dt_bias", DType: "F32", Shape: []int{2}, Data: []float32{0.5, 1}},
	}
	shard2 := []NamedTensor{
		{Name: "model.language_model.norm.weight", DType: "BF16", Shape: []int{3}, Data: seq(3, 1)},
		{Name: "lm_head.weight", DType: "BF16", Shape: []int{4, 3}, Data: seq(12, -1)},
		{Name: "model.visual.pos_embed.weight", DType: "BF16", Shape: []int{2, 3}, Data: seq(6, 1)},
	}
	weightMap := make(map[string]string)
	var total int64
	for i, shard := range [][]NamedTensor{shard1, shard2} {
		name := ShardName(i+1, 2)
		require.NoError(t, WriteFile(filepath.Join(dir, name), shard, nil))
		for _, nt := range shard {
			weightMap[nt.Name] = name
			total += int64(len(nt.Data) * elemSize(nt.DType))
		}
	}
	require.NoError(t, WriteIndex(dir, weightMap, total))
	return weightMap
}

func TestShardedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	for _, path := range []string{dir, filepath.Join(dir, IndexFile)} {
		s := openT(t, path)
		assert.Equal(t, []string{"embed_tokens.weight", "layers.0.linear_attn.dt_bias", "lm_head.weight", "norm.weight"}, s.Names())
		assert.Equal(t, []string{"model.visual.pos_embed.weight"}, s.Skipped())
		assert.Len(t, s.Files(), 2)
		info, _ := s.Info("lm_head.weight")
		assert.Equal(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), info.File)
		m, err := s.Matrix("lm_head.weight")
		require.NoError(t, err)
		assert.Equal(t, seq(12, -1), m.ToFloat32())
		v, _, err := s.Float32("layers.0.linear_attn.dt_bias")
		require.NoError(t, err)
		assert.Equal(t, []float32{0.5, 1}, v)
	}
}

func TestDirectoryFallbacks(t *testing.T) {
	t.Run("model.safetensors wins over other files", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, WriteFile(filepath.Join(dir, "model.safetensors"), []NamedTensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: []float32{1}}}, nil))
		require.NoError(t, WriteFile(filepath.Join(dir, "other.safetensors"), []NamedTensor{{Name: "b", DType: "F32", Shape: []int{1}, Data: []float32{1}}}, nil))
		assert.Equal(t, []string{"a"}, openT(t, dir).Names())
	})
	t.Run("all safetensors files without an index", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, WriteFile(filepath.Join(dir, "x.safetensors"), []NamedTensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: []float32{1}}}, nil))
		require.NoError(t, WriteFile(filepath.Join(dir, "y.safetensors"), []NamedTensor{{Name: "b", DType: "F32", Shape: []int{1}, Data: []float32{2}}}, nil))
		s := openT(t, dir)
		assert.Equal(t, []string{"a", "b"}, s.Names())
		assert.Len(t, s.Files(), 2)
	})
	t.Run("same tensor in two files without an index", func(t *testing.T) {
		dir := t.TempDir()
		x, y := filepath.Join(dir, "x.safetensors"), filepath.Join(dir, "y.safetensors")
		require.NoError(t, WriteFile(x, []NamedTensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: []float32{1}}}, nil))
		require.NoError(t, WriteFile(y, []NamedTensor{{Name: "a", DType: "F32", Shape: []int{1}, Data: []float32{2}}}, nil))
		_, err := openQwen(dir)
		requireErrorMentions(t, err, `"a"`, x, y)
	})
	t.Run("empty directory", func(t *testing.T) {
		dir := t.TempDir()
		_, err := openQwen(dir)
		requireErrorMentions(t, err, dir, "no model.safetensors")
	})
	t.Run("missing path", func(t *testing.T) {
		_, err := openQwen(filepath.Join(t.TempDir(), "nope"))
		requireErrorMentions(t, err, "nope")
	})
}

// Headers that are not padded put the data at any alignment; such files are
// valid and must read correctly, copying where aliasing is impossible.
func TestAlignment(t *testing.T) {
	bf := []uint16{0x3f80, 0xc000, 0x4040} // 1, -2, 3
	f32 := []float32{0.25, -8}
	data := make([]byte, 6+8)
	for i, v := range bf {
		binary.LittleEndian.PutUint16(data[2*i:], v)
	}
	for i, v := range f32 {
		binary.LittleEndian.PutUint32(data[6+4*i:], math.Float32bits(v))
	}
	body := `{"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[0,6]},"f":{"dtype":"F32","shape":[1,2],"data_offsets":[6,14]}}`
	for pad := 0; pad < 4; pad++ {
		hdr := body + fmt.Sprintf("%*s", pad, "")
		start := 8 + len(hdr) // mmap is page-aligned, so this is the alignment
		t.Run(fmt.Sprintf("data at %d mod 4", start%4), func(t *testing.T) {
			s := openT(t, writeBytes(t, t.TempDir(), "a.safetensors", rawFile(hdr, data)))
			m, err := s.Matrix("b")
			require.NoError(t, err)
			assert.Equal(t, bf, m.BF16)
			assert.Equal(t, start%2 == 0, s.isZeroCopy(unsafe.Pointer(&m.BF16[0])), "bf16 aliases iff 2-aligned")
			m, err = s.Matrix("f")
			require.NoError(t, err)
			assert.Equal(t, f32, m.F32)
			assert.Equal(t, (start+6)%4 == 0, s.isZeroCopy(unsafe.Pointer(&m.F32[0])), "f32 aliases iff 4-aligned")
			v, _, err := s.Float32("f")
			require.NoError(t, err)
			assert.Equal(t, f32, v)
			assert.False(t, s.isZeroCopy(unsafe.Pointer(&v[0])), "Float32 always copies")
		})
	}
}

func TestEmptyAndScalarTensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{
		{Name: "empty", DType: "BF16", Shape: []int{0, 4}},
		{Name: "emptyf", DType: "F32", Shape: []int{3, 0}},
		{Name: "scalar", DType: "F32", Data: []float32{7}},
	}, nil))
	s := openT(t, path)
	m, err := s.Matrix("empty")
	require.NoError(t, err)
	assert.True(t, m.IsBF16(), "an empty bf16 matrix still has its storage field set")
	assert.Equal(t, [2]int{0, 4}, [2]int{m.Rows, m.Cols})
	m, err = s.Matrix("emptyf")
	require.NoError(t, err)
	assert.NotNil(t, m.F32)
	v, shape, err := s.Float32("scalar")
	require.NoError(t, err)
	assert.Equal(t, []float32{7}, v)
	assert.Equal(t, []int{}, shape)
}

func TestReadErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{
		{Name: "vec", DType: "F32", Shape: []int{4}, Data: seq(4, 1)},
		{Name: "cube", DType: "BF16", Shape: []int{2, 2, 2}, Data: seq(8, 1)},
	}, nil))
	s, err := openQwen(path)
	require.NoError(t, err)

	_, err = s.Matrix("vec")
	requireErrorMentions(t, err, path, `"vec"`, "not a matrix")
	_, err = s.Matrix("cube")
	requireErrorMentions(t, err, path, `"cube"`, "[2 2 2]")
	_, err = s.Matrix("nope")
	requireErrorMentions(t, err, path, `"nope"`)
	_, _, err = s.Float32("nope")
	requireErrorMentions(t, err, `"nope"`)
	_, err = s.CheckNonFinite("nope")
	requireErrorMentions(t, err, `"nope"`)

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	_, _, err = s.Float32("vec")
	requireErrorMentions(t, err, path, "closed")
}

// Dtypes other than the float ones open fine and fail only when read, except
// CheckNonFinite, which knows integers are always finite.
func TestUnsupportedDTypes(t *testing.T) {
	hdr := `{"i":{"dtype":"I32","shape":[2,1],"data_offsets":[0,8]},` +
		`"f8":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[8,12]},` +
		`"q":{"dtype":"Q4_K","shape":[3],"data_offsets":[12,17]},` +
		`"d":{"dtype":"F64","shape":[1,1],"data_offsets":[17,25]}}`
	data := make([]byte, 25)
	binary.LittleEndian.PutUint64(data[17:], math.Float64bits(math.NaN()))
	path := writeBytes(t, t.TempDir(), "u.safetensors", rawFile(hdr, data))
	s := openT(t, path)
	assert.Equal(t, []string{"d", "f8", "i", "q"}, s.Names())
	info, _ := s.Info("q")
	assert.Equal(t, "Q4_K", info.DType)

	for _, name := range []string{"i", "f8", "q", "d"} {
		info, _ := s.Info(name)
		_, err := s.Matrix(name)
		requireErrorMentions(t, err, path, fmt.Sprintf("%q", name), info.DType)
		if name == "i" {
			continue // integers (token ids) read as float32: TestFloat32ReadsIntegers
		}
		_, _, err = s.Float32(name)
		requireErrorMentions(t, err, path, fmt.Sprintf("%q", name), info.DType)
	}
	n, err := s.CheckNonFinite("i")
	require.NoError(t, err)
	assert.Zero(t, n)
	n, err = s.CheckNonFinite("d")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = s.CheckNonFinite("q")
	requireErrorMentions(t, err, path, `"q"`, "Q4_K")
}

func TestCheckNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	data := []float32{1, nan, -inf, 0, inf, math.MaxFloat32, -0.0, nan}
	path := filepath.Join(t.TempDir(), "n.safetensors")
	require.NoError(t, WriteFile(path, []NamedTensor{
		{Name: "f", DType: "F32", Shape: []int{2, 4}, Data: data},
		{Name: "b", DType: "BF16", Shape: []int{8}, Data: data},
	}, nil))
	s := openT(t, path)
	n, err := s.CheckNonFinite("f")
	require.NoError(t, err)
	assert.Equal(t, 4, n)
	n, err = s.CheckNonFinite("b")
	require.NoError(t, err)
	assert.Equal(t, 5, n, "MaxFloat32 rounds to +Inf in bf16")
}

func TestConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	writeShards(t, dir)
	s := openT(t, dir)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				for _, name := range s.Names() {
					if _, _, err := s.Float32(name); err != nil {
						errs <- err
					}
					if _, ok := s.Info(name); !ok {
						errs <- fmt.Errorf("lost %s", name)
					}
				}
				m, err := s.Matrix("embed_tokens.weight")
				if err != nil || m.At(1, 1) != seq(12, 1)[4] {
					errs <- fmt.Errorf("matrix: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Integer tensors (token ids in features files) read as float32 exactly,
// and a value past float32's exact integers is refused, not rounded.
func TestFloat32ReadsIntegers(t *testing.T) {
	hdr := `{"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},` +
		`"big":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}`
	data := make([]byte, 16)
	binary.LittleEndian.PutUint32(data[0:], uint32(248077))
	binary.LittleEndian.PutUint32(data[4:], uint32(0xffffffff)) // -1
	binary.LittleEndian.PutUint64(data[8:], uint64(1<<24+1))
	path := writeBytes(t, t.TempDir(), "ids.safetensors", rawFile(hdr, data))
	s := openT(t, path)
	got, shape, err := s.Float32("i")
	require.NoError(t, err)
	assert.Equal(t, []int{2}, shape)
	assert.Equal(t, []float32{248077, -1}, got)
	_, _, err = s.Float32("big")
	requireErrorMentions(t, err, path, `"big"`, "16777217", "too large")
}
