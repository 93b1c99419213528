package tokenizer

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newTestBPE builds a model whose vocabulary ids follow the order of toks.
func newTestBPE(t *testing.T, toks []string, merges [][2]string, m modelJSON) *bpe {
	t.Helper()
	vocab := map[string]int{}
	for _, s := range toks {
		if _, ok := vocab[s]; !ok {
			vocab[s] = len(vocab)
		}
	}
	b, err := newBPEFrom(vocab, merges, &m)
	require.NoError(t, err)
	return b
}

// words tokenizes w and returns the token strings.
func words(t *testing.T, b *bpe, w string) []string {
	t.Helper()
	ids, err := b.tokenize(nil, w)
	require.NoError(t, err)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = b.vocabR.get(id)
	}
	return out
}

func strp(s string) *string { return &s }
func boolp(v bool) *bool    { return &v }

func TestBPEMergesByRank(t *testing.T) {
	toks := []string{"a", "b", "c", "d", "ab", "bc", "cd", "abc", "bcd"}
	// bc has the best rank, so "abcd" becomes a|bc|d, then a+bc is not a
	// rule, bc+d is: a|bcd.
	b := newTestBPE(t, toks, [][2]string{{"b", "c"}, {"a", "b"}, {"c", "d"}, {"bc", "d"}}, modelJSON{})
	assert.Equal(t, []string{"a", "bcd"}, words(t, b, "abcd"))
	// With a first, the same word merges differently.
	b = newTestBPE(t, toks, [][2]string{{"a", "b"}, {"b", "c"}, {"ab", "c"}, {"c", "d"}}, modelJSON{})
	assert.Equal(t, []string{"abc", "d"}, words(t, b, "abcd"))
}

func TestBPELeftmostOnTies(t *testing.T) {
	b := newTestBPE(t, []string{"a", "aa"}, [][2]string{{"a", "a"}}, modelJSON{})
	assert.Equal(t, []string{"aa", "a"}, words(t, b, "aaa"))
	assert.Equal(t, []string{"aa", "aa", "a"}, words(t, b, "aaaaa"))
}

func TestBPEDuplicateMergeLaterRankWins(t *testing.T) {
	toks := []string{"x", "y", "z", "xy", "yz"}
	b := newTestBPE(t, toks, [][2]string{{"x", "y"}, {"y", "z"}, {"x", "y"}}, modelJSON{})
	assert.Equal(t, []string{"x", "yz"}, words(t, b, "xyz"))
}

func TestBPEUnknownAndFallback(t *testing.T) {
	toks := []string{"<unk>", "a", "b", "<0x3F>", "<0xC3>", "<0xA9>"}
	b := newTestBPE(t, toks, nil, modelJSON{UnkToken: strp("<unk>")})
	assert.Equal(t, []string{"a", "<unk>", "<unk>", "b"}, words(t, b, "a?éb"))

	b = newTestBPE(t, toks, nil, modelJSON{UnkToken: strp("<unk>"), FuseUnk: boolp(true)})
	assert.Equal(t, []string{"a", "<unk>", "b", "<unk>"}, words(t, b, "a?éb!"))

	b = newTestBPE(t, toks, nil, modelJSON{UnkToken: strp("<unk>"), ByteFallback: boolp(true)})
	assert.Equal(t, []string{"a", "<0x3F>", "<0xC3>", "<0xA9>", "<unk>"}, words(t, b, "a?é!"))

	b = newTestBPE(t, toks, nil, modelJSON{})
	assert.Equal(t, []string{"a", "b"}, words(t, b, "a?b"), "without unk_token unknown characters vanish")

	b = newTestBPE(t, []string{"a"}, nil, modelJSON{UnkToken: strp("<missing>")})
	_, err := b.tokenize(nil, "a?")
	assert.ErrorContains(t, err, "unk_token")
}

func TestBPEPrefixSuffix(t *testing.T) {
	toks := []string{"a", "##b", "##c</w>", "ab", "abc</w>", "c</w>"}
	b := newTestBPE(t, toks, [][2]string{{"a", "##b"}, {"ab", "##c</w>"}},
		modelJSON{ContinuingSubwordPrefix: strp("##"), EndOfWordSuffix: strp("</w>")})
	assert.Equal(t, []string{"abc</w>"}, words(t, b, "abc"))
	assert.Equal(t, []string{"c</w>"}, words(t, b, "c"))
}

func TestBPEIgnoreMerges(t *testing.T) {
	toks := []string{"a", "b", "c", "ab", "abc"}
	merges := [][2]string{{"a", "b"}}
	b := newTestBPE(t, toks, merges, modelJSON{})
	assert.Equal(t, []string{"ab", "c"}, words(t, b, "abc"))
	b = newTestBPE(t, toks, merges, modelJSON{IgnoreMerges: boolp(true)})
	assert.Equal(t, []string{"abc"}, words(t, b, "abc"))
}

func TestBPEMergeErrors(t *testing.T) {
	vocab := map[string]int{"a": 0, "b": 1, "ab": 2}
	for _, c := range []struct {
		merges [][2]string
		want   string
	}{
		{[][2]string{{"a", "q"}}, `model.merges[0]: token "q" is not in the vocabulary`},
		{[][2]string{{"a", "b"}, {"b", "a"}}, `model.merges[1]: merged token "ba" is not in the vocabulary`},
	} {
		_, err := newBPEFrom(vocab, c.merges, &modelJSON{})
		assert.EqualError(t, err, c.want)
	}
	_, err := newBPEFrom(vocab, [][2]string{{"a", "b"}}, &modelJSON{ContinuingSubwordPrefix: strp("###")})
	assert.ErrorContains(t, err, "shorter than continuing_subword_prefix")
}

func TestBPECacheConcurrent(t *testing.T) {
	toks := []string{"a", "b", "ab"}
	b := newTestBPE(t, toks, [][2]string{{"a", "b"}}, modelJSON{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				ids, err := b.tokenize(nil, "abab")
				if !assert.NoError(t, err) || !assert.Equal(t, []int{2, 2}, ids) {
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Contains(t, b.cache, "abab")
}
