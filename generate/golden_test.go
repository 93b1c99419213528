package generate

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/internal/goldens"
)

// The golden cases of testdata/golden (testdata/README.md), as model's
// tests read them: the generation tests need only their inputs.
func goldenCases(t *testing.T) (string, []goldens.Case) {
	root := filepath.Join("..", "testdata", "golden")
	cases, err := goldens.ReadManifest(root)
	require.NoError(t, err)
	return root, cases
}

func readInputs(t *testing.T, dir string) goldens.Inputs {
	in, err := goldens.ReadInputs(dir)
	require.NoError(t, err)
	return in
}

// bf16Backends compute in bf16: their greedy choices are compared only
// where the margin is comfortable.
var bf16Backends = map[string]bool{"cuda": true, "chunked-bf16": true}
