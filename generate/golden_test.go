package generate

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The golden cases of testdata/golden (testdata/README.md), as model's
// tests read them: the generation tests need only their inputs.
type goldenCase struct {
	Name string `json:"name"`
}

func goldenCases(t *testing.T) (string, []goldenCase) {
	root := filepath.Join("..", "testdata", "golden")
	data, err := os.ReadFile(filepath.Join(root, "manifest.json"))
	require.NoError(t, err)
	var man struct {
		Cases []goldenCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(data, &man))
	require.NotEmpty(t, man.Cases)
	return root, man.Cases
}

type goldenInputs struct {
	IDs      [][]int `json:"ids"`
	Generate *struct {
		MaxNewTokens int     `json:"max_new_tokens"`
		NewIDs       [][]int `json:"new_ids"`
	} `json:"generate"`
}

func readInputs(t *testing.T, dir string) goldenInputs {
	data, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	require.NoError(t, err)
	var in goldenInputs
	require.NoError(t, json.Unmarshal(data, &in))
	return in
}

// bf16Backends compute in bf16: their greedy choices are compared only
// where the margin is comfortable.
var bf16Backends = map[string]bool{"cuda": true, "chunked-bf16": true}
