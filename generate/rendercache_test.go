package generate

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/qwenref/qwenref/bundled"
	"github.com/qwenref/qwenref/chat"
	"github.com/qwenref/qwenref/model"
	"github.com/qwenref/qwenref/tokenizer"
)

// countingCodec counts the bytes a conversation hands the tokenizer.
type countingCodec struct {
	*tokenizer.Tokenizer
	bytes int
}

func (c *countingCodec) Encode(text string) ([]int, error) {
	c.bytes += len(text)
	return c.Tokenizer.Encode(text)
}

// A chat of 300 one-token turns tokenizes about the same bytes per turn at
// its end as at its start (it used to encode the whole conversation twice
// a turn, so the last 100 turns cost about 5× the first 100), and its ids
// are those of encoding the whole render at once. About
// 2 s.
func TestConversationTokenizesOnlyWhatChanged(t *testing.T) {
	m, tok, err := bundled.Model()
	require.NoError(t, err)
	tpl, err := chat.LoadFile("../testdata/chat/qwen3-tokenizer_config.json")
	require.NoError(t, err)
	be, err := model.ParseBackend("chunked")
	require.NoError(t, err)
	cc := &countingCodec{Tokenizer: tok}
	conv, err := NewConversation(m, ConversationOptions{Template: tpl, Codec: cc, Backend: be,
		MaxNewTokens: 1, System: "You are terse.", Context: 1 << 20})
	require.NoError(t, err)
	defer conv.Close()
	var per [3]int
	for i := range 300 {
		before := cc.bytes
		_, err := conv.Send("a", nil)
		require.NoError(t, err, "turn %d", i)
		per[i/100] += cc.bytes - before
		if i%50 == 49 {
			whole, err := tok.Encode(conv.render.text)
			require.NoError(t, err)
			require.Equal(t, whole, conv.render.ids, "turn %d: the cached ids are the whole render's", i)
		}
	}
	t.Logf("bytes tokenized per 100 turns: %v", per)
	assert.Less(t, per[2], per[0]*3/2, "the last 100 turns tokenize no more than the first 100")

}
