package weights

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMalformedFiles is the catalogue of broken single files. Each must fail
// at Open with a *FormatError whose message names the file and, where one
// tensor is at fault, that tensor.
func TestMalformedFiles(t *testing.T) {
	good := func(t *testing.T) []byte {
		path := filepath.Join(t.TempDir(), "g.safetensors")
		require.NoError(t, WriteFile(path, []NamedTensor{
			{Name: "a", DType: "F32", Shape: []int{2, 2}, Data: seq(4, 1)},
			{Name: "b", DType: "BF16", Shape: []int{3}, Data: seq(3, 1)},
		}, nil))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return b
	}
	ent := func(name, dtype, shape, offs string) string {
		return `"` + name + `":{"dtype":"` + dtype + `","shape":` + shape + `,"data_offsets":` + offs + `}`
	}
	cases := []struct {
		name  string
		build func(t *testing.T) []byte
		want  []string
	}{
		{"shorter than the length field", func(*testing.T) []byte { return []byte{1, 2, 3} },
			[]string{"3 bytes, too short"}},
		{"empty file", func(*testing.T) []byte { return nil },
			[]string{"0 bytes, too short"}},
		{"truncated inside the header", func(t *testing.T) []byte { return good(t)[:20] },
			[]string{"header length field says", "only 12 bytes follow"}},
		{"truncated inside the data", func(t *testing.T) []byte { b := good(t); return b[:len(b)-3] },
			[]string{`tensor "b"`, "out of range"}},
		{"header length beyond the file", func(*testing.T) []byte {
			b := rawFile(`{}`, nil)
			binary.LittleEndian.PutUint64(b, 1<<40)
			return b
		}, []string{"header length field says 1099511627776 bytes"}},
		{"header length field is all ones", func(*testing.T) []byte {
			b := rawFile(`{}`, nil)
			binary.LittleEndian.PutUint64(b, ^uint64(0))
			return b
		}, []string{"header length field says"}},
		{"header JSON garbage", func(*testing.T) []byte { return rawFile(`{"a":{"dtype":`, nil) },
			[]string{"header is not valid JSON"}},
		{"header is an array", func(*testing.T) []byte { return rawFile(`[1,2]`, nil) },
			[]string{"header is not valid JSON", "not a JSON object"}},
		{"trailing junk after the header object", func(*testing.T) []byte { return rawFile(`{} x`, nil) },
			[]string{"header is not valid JSON"}},
		{"header not UTF-8", func(*testing.T) []byte { return rawFile("{\"\xff\":1}", nil) },
			[]string{"not valid UTF-8"}},
		{"entry not an object", func(*testing.T) []byte { return rawFile(`{"w":[1]}`, nil) },
			[]string{`tensor "w"`, "not a JSON object"}},
		{"dtype missing", func(*testing.T) []byte { return rawFile(`{"w":{"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)) },
			[]string{`tensor "w"`, `"dtype" is missing`}},
		{"dtype null", func(*testing.T) []byte {
			return rawFile(`{"w":{"dtype":null,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4))
		},
			[]string{`tensor "w"`, `"dtype"`}},
		{"negative dimension", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F32", "[-1]", "[0,4]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, `"shape"`}},
		{"fractional dimension", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F32", "[1.5]", "[0,4]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, `"shape"`}},
		{"shape null", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F32", "null", "[0,4]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, `"shape"`}},
		{"three data offsets", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F32", "[1]", "[0,4,8]")+`}`, make([]byte, 8)) },
			[]string{`tensor "w"`, `"data_offsets"`}},
		{"shape of more dims than MaxRank", func(*testing.T) []byte {
			return rawFile(`{`+ent("w", "U8", "["+strings.Repeat("1,", MaxRank)+"1]", "[0,1]")+`}`, make([]byte, 1))
		}, []string{`tensor "w"`, `"shape" has more than 64 dims`}},
		{"data_offsets a long list", func(*testing.T) []byte {
			return rawFile(`{`+ent("w", "U8", "[1]", "[0,1"+strings.Repeat(",1", 1000)+"]")+`}`, make([]byte, 1))
		}, []string{`tensor "w"`, `"data_offsets" is missing or not a pair`}},
		{"shape product overflows", func(*testing.T) []byte {
			return rawFile(`{`+ent("w", "F32", "[4294967296,4294967296]", "[0,4]")+`}`, make([]byte, 4))
		}, []string{`tensor "w"`, "overflows"}},
		{"offsets out of range", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F32", "[2]", "[0,8]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, "[0, 8] out of range", "4 bytes"}},
		{"offsets out of range with unknown dtype", func(*testing.T) []byte { return rawFile(`{`+ent("w", "Q4_K", "[2]", "[0,9]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, "out of range"}},
		{"end before start", func(*testing.T) []byte { return rawFile(`{`+ent("w", "U8", "[0]", "[4,0]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, "[4, 0] out of range"}},
		{"overlapping offsets", func(*testing.T) []byte {
			return rawFile(`{`+ent("a", "F32", "[2]", "[0,8]")+`,`+ent("b", "F32", "[2]", "[4,12]")+`}`, make([]byte, 12))
		}, []string{`tensor "b"`, `overlap tensor "a"`}},
		{"gap between tensors", func(*testing.T) []byte {
			return rawFile(`{`+ent("a", "F32", "[1]", "[0,4]")+`,`+ent("b", "F32", "[1]", "[8,12]")+`}`, make([]byte, 12))
		}, []string{`tensor "b"`, "gap of 4 unused bytes"}},
		{"first tensor not at zero", func(*testing.T) []byte { return rawFile(`{`+ent("a", "F32", "[1]", "[4,8]")+`}`, make([]byte, 8)) },
			[]string{`tensor "a"`, "gap of 4"}},
		{"trailing data after the last tensor", func(*testing.T) []byte { return rawFile(`{`+ent("a", "F32", "[1]", "[0,4]")+`}`, make([]byte, 10)) },
			[]string{"6 bytes of trailing data"}},
		{"byte count mismatch", func(*testing.T) []byte { return rawFile(`{`+ent("w", "BF16", "[2,3]", "[0,8]")+`}`, make([]byte, 8)) },
			[]string{`tensor "w"`, "hold 8 bytes", "BF16", "needs 12"}},
		{"byte count mismatch for an extra dtype", func(*testing.T) []byte { return rawFile(`{`+ent("w", "F8_E4M3", "[3]", "[0,4]")+`}`, make([]byte, 4)) },
			[]string{`tensor "w"`, "needs 3"}},
		{"tensor listed twice", func(*testing.T) []byte {
			return rawFile(`{`+ent("w", "F32", "[1]", "[0,4]")+`,`+ent("w", "F32", "[1]", "[0,4]")+`}`, make([]byte, 4))
		}, []string{`tensor "w"`, "more than once"}},
		{"metadata value not a string", func(*testing.T) []byte { return rawFile(`{"__metadata__":{"format":1}}`, nil) },
			[]string{"__metadata__ is not an object of strings"}},
		{"several problems are reported together", func(*testing.T) []byte {
			return rawFile(`{`+ent("a", "F32", "[3]", "[0,4]")+`,`+ent("b", "F32", "[1]", "[4,99]")+`,"c":7}`, make([]byte, 8))
		}, []string{"3 problems", `tensor "a"`, `tensor "b"`, `tensor "c"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeBytes(t, t.TempDir(), "bad.safetensors", c.build(t))
			s, err := openQwen(path)
			require.Nil(t, s)
			requireFormatError(t, err, path)
			requireErrorMentions(t, err, append([]string{path}, c.want...)...)
		})
	}
}

// The 100 MB header limit of the reference implementation, checked on a
// sparse file so the test stays cheap.
func TestHeaderTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.safetensors")
	f, err := os.Create(path)
	require.NoError(t, err)
	n := uint64(maxHeaderSize + 8)
	require.NoError(t, binary.Write(f, binary.LittleEndian, n))
	require.NoError(t, f.Truncate(int64(8+n)))
	require.NoError(t, f.Close())
	_, err = openQwen(path)
	requireFormatError(t, err, path)
	requireErrorMentions(t, err, path, "exceeds the 100000000-byte limit")
}

func TestFormatErrorListsAtMostADozen(t *testing.T) {
	var parts []string
	for i := 0; i < 30; i++ {
		parts = append(parts, `"t`+strings.Repeat("x", i)+`":1`)
	}
	path := writeBytes(t, t.TempDir(), "m.safetensors", rawFile("{"+strings.Join(parts, ",")+"}", nil))
	_, err := openQwen(path)
	requireErrorMentions(t, err, "30 problems", "and 18 more")
}

// TestMalformedShards is the catalogue of broken sharded checkpoints. The
// shards are real writer output; the index or a shard is then damaged.
func TestMalformedShards(t *testing.T) {
	const s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	index := func(t *testing.T, dir, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFile), []byte(body), 0o644))
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string, wm map[string]string)
		file   string // the file the *FormatError is about: "" for the index
		want   []string
	}{
		{"index JSON malformed", func(t *testing.T, dir string, _ map[string]string) { index(t, dir, `{"weight_map":`) },
			"", []string{"index: invalid JSON"}},
		{"index without weight_map", func(t *testing.T, dir string, _ map[string]string) { index(t, dir, `{"metadata":{}}`) },
			"", []string{`no "weight_map" object`}},
		{"weight_map empty", func(t *testing.T, dir string, _ map[string]string) { index(t, dir, `{"weight_map":{}}`) },
			"", []string{"lists no tensors"}},
		{"shard name not a string", func(t *testing.T, dir string, _ map[string]string) { index(t, dir, `{"weight_map":{"x":3}}`) },
			"", []string{`tensor "x"`, "not a string"}},
		{"shard name holds a NUL", func(t *testing.T, dir string, _ map[string]string) {
			index(t, dir, `{"weight_map":{"x":"a\u0000.safetensors"}}`)
		}, "", []string{`tensor "x"`, `"a\x00.safetensors" is not a plain file name`}},
		{"index of too many top-level members", func(t *testing.T, dir string, _ map[string]string) {
			var keys strings.Builder
			for i := range 64 {
				fmt.Fprintf(&keys, `"k%d":1,`, i)
			}
			index(t, dir, `{`+keys.String()+`"weight_map":{"x":"a.safetensors"}}`)
		}, "", []string{"more than 64 top-level members"}},
		{"shard name escapes the directory", func(t *testing.T, dir string, _ map[string]string) {
			index(t, dir, `{"weight_map":{"x":"../model.safetensors"}}`)
		}, "", []string{`tensor "x"`, `"../model.safetensors" is not a plain file name`}},
		{"tensor listed twice in the index", func(t *testing.T, dir string, _ map[string]string) {
			index(t, dir, `{"weight_map":{"lm_head.weight":"`+s2+`","lm_head.weight":"`+s1+`"}}`)
		}, "", []string{`the key "lm_head.weight" appears twice in weight_map`}},
		{"metadata key twice in the index", func(t *testing.T, dir string, _ map[string]string) {
			index(t, dir, `{"metadata":{"total_size":1,"total_size":2},"weight_map":{"lm_head.weight":"`+s2+`"}}`)
		}, "", []string{`the key "total_size" appears twice in metadata`}},
		{"index of invalid UTF-8", func(t *testing.T, dir string, _ map[string]string) {
			index(t, dir, "{\"weight_map\":{\"lm_head.weight\xff\":\""+s2+"\"}}")
		}, "", []string{"index: invalid UTF-8 at byte"}},
		{"shard named in the index is missing", func(t *testing.T, dir string, _ map[string]string) {
			require.NoError(t, os.Remove(filepath.Join(dir, s2)))
		}, "", []string{"shard " + s2 + " named in the index is missing"}},
		{"tensor listed in the index is absent from its shard", func(t *testing.T, dir string, wm map[string]string) {
			wm["model.language_model.layers.9.mlp.up_proj.weight"] = s1
			require.NoError(t, WriteIndex(dir, wm, 0))
		}, "", []string{`tensor "model.language_model.layers.9.mlp.up_proj.weight"`, "absent", s1}},
		{"index places a tensor in the wrong shard", func(t *testing.T, dir string, wm map[string]string) {
			wm["lm_head.weight"] = s1
			require.NoError(t, WriteIndex(dir, wm, 0))
		}, "", []string{`tensor "lm_head.weight"`, "in shard " + s2 + " but the index places it in " + s1}},
		{"shard holds a tensor the index does not list", func(t *testing.T, dir string, wm map[string]string) {
			delete(wm, "lm_head.weight")
			require.NoError(t, WriteIndex(dir, wm, 0))
		}, "", []string{`tensor "lm_head.weight"`, "not listed in the index"}},
		{"same tensor in two shards", func(t *testing.T, dir string, _ map[string]string) {
			require.NoError(t, WriteFile(filepath.Join(dir, s1), []NamedTensor{
				{Name: "model.language_model.embed_tokens.weight", DType: "BF16", Shape: []int{4, 3}, Data: seq(12, 1)},
				{Name: "model.language_model.layers.0.linear_attn.dt_bias", DType: "F32", Shape: []int{2}, Data: []float32{0.5, 1}},
				{Name: "lm_head.weight", DType: "BF16", Shape: []int{1}, Data: []float32{1}},
			}, nil))
		}, "", []string{`tensor "lm_head.weight"`, "present in two shards", s1, s2}},
		{"a shard is itself malformed", func(t *testing.T, dir string, _ map[string]string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, s2), rawFile(`{"w":`, nil), 0o644))
		}, s2, []string{"header is not valid JSON"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			c.damage(t, dir, writeShards(t, dir))
			s, err := openQwen(dir)
			require.Nil(t, s)
			file := filepath.Join(dir, IndexFile)
			if c.file != "" {
				file = filepath.Join(dir, c.file)
			}
			requireFormatError(t, err, file)
			requireErrorMentions(t, err, append([]string{file}, c.want...)...)
		})
	}
}

// Two canonical names colliding across shards is caught after the index
// checks pass.
func TestDuplicateCanonicalAcrossShards(t *testing.T) {
	dir := t.TempDir()
	wm := writeShards(t, dir)
	const s3 = "model-00003-of-00003.safetensors"
	require.NoError(t, WriteFile(filepath.Join(dir, s3), []NamedTensor{
		{Name: "model.norm.weight", DType: "BF16", Shape: []int{3}, Data: seq(3, 1)},
	}, nil))
	wm["model.norm.weight"] = s3
	require.NoError(t, WriteIndex(dir, wm, 0))
	_, err := openQwen(dir)
	requireErrorMentions(t, err, dir, `"model.norm.weight"`, `"model.language_model.norm.weight"`, s3, `canonical name "norm.weight"`)
	assert.NotContains(t, err.Error(), "panic")
}
