package safeio

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type jsonDoc struct {
	Size   *int            `json:"hidden_size"`
	Eps    *float64        `json:"rms_norm_eps"`
	Layers []int           `json:"mlp_only_layers"`
	Types  []string        `json:"layer_types"`
	Tied   *bool           `json:"tie_word_embeddings"`
	Text   json.RawMessage `json:"text_config"`
	Rope   *struct {
		Section []int `json:"mrope_section"`
	} `json:"rope_parameters"`
	Map map[string]string `json:"weight_map"`
}

// Each document is one that encoding/json accepts (or turns into a
// different value) and a strict reader refuses; the message names the key
// path and says what was wanted in JSON's words.
func TestDecodeJSONRefusesWhatEncodingJSONAccepts(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"invalid UTF-8", "{\"layer_types\":[\"a\xff\"]}", "invalid UTF-8 at byte 18"},
		{"lone surrogate", `{"layer_types":["\ud800"]}`, `lone surrogate \ud800`},
		{"duplicate key", `{"hidden_size":1,"hidden_size":2}`, `the key "hidden_size" appears twice at the top level`},
		{"duplicate nested", `{"rope_parameters":{"mrope_section":[1],"mrope_section":[2]}}`, `the key "mrope_section" appears twice in rope_parameters`},
		{"duplicate in raw", `{"text_config":{"a":{"b":1,"b":1}}}`, `the key "b" appears twice in text_config.a`},
		{"duplicate tensor", `{"weight_map":{"model.x":"a","model.x":"a"}}`, `the key "model.x" appears twice in weight_map`},
		{"duplicate by escape", `{"hidden_size":1,"hidden\u005fsize":2}`, `the key "hidden_size" appears twice`},
		{"case-folded key", `{"Hidden_Size":7}`, `the key "Hidden_Size" is not hidden_size: keys are case-sensitive`},
		{"null in an int list", `{"mlp_only_layers":[null]}`, "mlp_only_layers[0]: want an integer, got JSON null"},
		{"float in an int list", `{"mlp_only_layers":[0,1.5]}`, "mlp_only_layers[1]: want an integer, got JSON number 1.5"},
		{"1.0 for an integer", `{"hidden_size":1.0}`, "hidden_size: want an integer, got JSON number 1.0"},
		{"string in an int list", `{"rope_parameters":{"mrope_section":["1"]}}`, "rope_parameters.mrope_section[0]: want an integer, got JSON string"},
		{"overflow", `{"hidden_size":99999999999999999999}`, "hidden_size: want an integer, got JSON number 99999999999999999999 (out of range)"},
		{"float overflow", `{"rms_norm_eps":1e400}`, "rms_norm_eps: want a number, got JSON number 1e400 (out of range)"},
		{"bool for a number", `{"rms_norm_eps":true}`, "rms_norm_eps: want a number, got JSON boolean"},
		{"array for an object", `[]`, "want an object, got JSON array"},
		{"null document", `null`, "want an object, got JSON null"},
		{"object for a list", `{"layer_types":{}}`, "layer_types: want an array of strings, got JSON object"},
		{"number for a map value", `{"weight_map":{"model.x":1}}`, `weight_map."model.x": want a string, got JSON number 1`},
		{"deep", `{"text_config":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "nested deeper than 64 levels"},
		{"trailing", `{} {}`, "invalid JSON"},
		{"truncated", `{"hidden_size":`, "invalid JSON"},
	} {
		var d jsonDoc
		err := DecodeJSON([]byte(c.doc), &d)
		assert.ErrorContains(t, err, c.want, c.name)
	}
	var d jsonDoc
	require.NoError(t, DecodeJSON([]byte(`{"hidden_size":64,"rms_norm_eps":1e-6,"mlp_only_layers":[0,3],"layer_types":null,
		"unknown":{"x":[1,"y",null]},"text_config":{"a":1},"rope_parameters":{"mrope_section":[11,11,10]},"weight_map":{"b":"c"},
		"pair":"\ud83d\ude00"}`), &d))
	assert.Equal(t, 64, *d.Size)
	assert.Equal(t, []int{0, 3}, d.Layers)
	assert.Equal(t, []int{11, 11, 10}, d.Rope.Section)
	assert.Equal(t, `{"a":1}`, string(d.Text))
}

// The size limit is the file's own bytes, and every error names the file.
func TestReadJSONNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"hidden_size":1,"hidden_size":1}`), 0o644))
	var d jsonDoc
	err := ReadJSON(path, 1<<10, "config.json", &d)
	assert.ErrorContains(t, err, path+`: the key "hidden_size" appears twice at the top level`)

	// 100 "<" is 102 bytes as written, 602 as encoding/json re-encodes it.
	doc := `{"layer_types":["` + strings.Repeat("<", 100) + `"]}`
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	require.NoError(t, ReadJSON(path, int64(len(doc)), "config.json", &d))
	assert.ErrorContains(t, ReadJSON(path, int64(len(doc))-1, "config.json", &d), "larger than the limit")
}

// The keys held to find duplicates are bounded: an object of more members
// than MaxJSONMembers is refused by its path.
func TestDecodeJSONMemberLimit(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"weight_map":{`)
	for i := range MaxJSONMembers + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%x":0`, i)
	}
	b.WriteString("}}")
	err := DecodeJSON([]byte(b.String()), nil)
	assert.ErrorContains(t, err, fmt.Sprintf("weight_map has more than %d members", MaxJSONMembers))
}
