package bundled

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/generate"
	"github.com/qwenref/qwenref/model"
)

func TestBundledRuns(t *testing.T) {
	m, tok, err := Model()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, m.Config.VocabSize, tok.VocabSize())
	assert.Zero(t, m.Config.VocabSize%128)
	lin, full := m.Config.CountLayers()
	assert.Equal(t, 6, lin)
	assert.Equal(t, 2, full)
	require.Len(t, m.Config.EOSTokenIDs, 2)
	be, err := model.ParseBackend("naive")
	require.NoError(t, err)
	for _, p := range SamplePrompts {
		ids, err := tok.Encode(p)
		require.NoError(t, err)
		require.NotEmpty(t, ids)
		res, err := generate.Generate(m, ids, be, generate.GenerateOptions{MaxNewTokens: 3})
		require.NoError(t, err)
		assert.NotEmpty(t, res.NewIDs)
		_, err = tok.Decode(res.NewIDs)
		assert.NoError(t, err)
	}
}
