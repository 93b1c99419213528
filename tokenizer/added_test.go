package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// splitAll runs addedVocab.split over s and renders the result as a list
// of plain stretches and [content] for tokens.
func splitAll(t *testing.T, av *addedVocab, m *matcher, s string) []string {
	t.Helper()
	var out []string
	err := av.split(m, s, func(text string, id int) error {
		if id >= 0 {
			out = append(out, "["+av.byID[id].Content+"]")
		} else {
			out = append(out, text)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func testAddedVocab(t *testing.T, list []addedTokenJSON) *addedVocab {
	t.Helper()
	model := newTestBPE(t, []string{"a", "b", "ab"}, nil, modelJSON{})
	av, err := newAddedVocab(list, model, &normalizer{forms: nil})
	require.NoError(t, err)
	return av
}

func TestAddedLeftmostLongest(t *testing.T) {
	av := testAddedVocab(t, []addedTokenJSON{
		{Content: "<|a|>", Normalized: false},
		{Content: "<|a|><|b|>", Normalized: false},
		{Content: "|", Normalized: false},
	})
	assert.Equal(t, []string{"x", "[<|a|><|b|>]", "y", "[<|a|>]", "<", "[|]", "b", "[|]"},
		splitAll(t, av, &av.raw, "x<|a|><|b|>y<|a|><|b|"))
}

func TestAddedFlags(t *testing.T) {
	av := testAddedVocab(t, []addedTokenJSON{
		{Content: "[SW]", Normalized: false, SingleWord: true},
		{Content: "[L]", Normalized: false, LStrip: true},
		{Content: "[R]", Normalized: false, RStrip: true},
	})
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"[SW]", []string{"[[SW]]"}},
		{"a [SW] b", []string{"a ", "[[SW]]", " b"}},
		{"a[SW] b", []string{"a[SW] b"}},         // word character before
		{"_[SW]", []string{"_[SW]"}},             // '_' is a word character
		{"é[SW]", []string{"é[SW]"}},             // so are letters beyond ASCII
		{"a\u0301[SW]", []string{"a\u0301[SW]"}}, // and marks
		{".[SW].", []string{".", "[[SW]]", "."}},
		{"a \t[L]b", []string{"a", "[[L]]", "b"}},
		{"[L]", []string{"[[L]]"}},
		{"a[R] \n b", []string{"a", "[[R]]", "b"}},
		{"[R][L]", []string{"[[R]]", "[[L]]"}},
		{"x [R]  [L] y", []string{"x ", "[[R]]", "[[L]]", " y"}},
		{"\u3000[L]", []string{"[[L]]"}}, // Unicode whitespace is stripped too
	} {
		assert.Equal(t, c.want, splitAll(t, av, &av.raw, c.in), "%q", c.in)
	}
}

func TestAddedIDsFollowHF(t *testing.T) {
	// Ids come from the model vocabulary if the content is there, else
	// from len(vocab) upwards in file order; the file's ids are ignored.
	av := testAddedVocab(t, []addedTokenJSON{
		{Content: "ab", ID: 9, Normalized: true},
		{Content: "<x>", Special: true, ID: 9},
		{Content: ""},
		{Content: "<y>", Normalized: true},
		{Content: "<x>", Special: false, Normalized: true},
	})
	got := av.tokens()
	require.Len(t, got, 3)
	assert.Equal(t, AddedToken{ID: 2, Content: "ab", Normalized: true}, got[0])
	assert.Equal(t, AddedToken{ID: 3, Content: "<x>", Normalized: true}, got[1], "a repeat keeps the id and takes the new flags")
	assert.Equal(t, AddedToken{ID: 4, Content: "<y>", Normalized: true}, got[2])
	assert.True(t, av.special["<x>"], "special status is never withdrawn")
}

func TestAddedNormalizedForm(t *testing.T) {
	model := newTestBPE(t, []string{"a"}, nil, modelJSON{})
	nz, err := parseNormalizer([]byte(`{"type":"NFC"}`), "normalizer")
	require.NoError(t, err)
	av, err := newAddedVocab([]addedTokenJSON{{Content: "cafe\u0301", Normalized: true}}, model, nz)
	require.NoError(t, err)
	assert.Equal(t, map[int]string{1: "café"}, av.normalForm)
	assert.Equal(t, []string{"[cafe\u0301]", "!"}, splitAll(t, av, &av.norm, "café!"))
	assert.Equal(t, []string{"cafe\u0301!"}, splitAll(t, av, &av.raw, "cafe\u0301!"), "normalized tokens are not matched raw")
}

func TestIsWordChar(t *testing.T) {
	for _, r := range "aZé中_0٣Ⅻ\u0301\u200d\u24b6" {
		assert.True(t, isWordChar(r), "%U", r)
	}
	for _, r := range " .-\u00a0\u3000!😀\u200b" {
		assert.False(t, isWordChar(r), "%U", r)
	}
}

// In a sparse vocabulary an added token's content can be a vocabulary
// entry at or past len(vocab); HF then numbers the next new added token
// after the highest added id, so no two added tokens share an id (the
// second one here once took 5 from the first, which was lost).
func TestAddedIDsAfterSparseVocabulary(t *testing.T) {
	vocab := map[string]int{"a": 0, "b": 1, "ab": 2, "<x>": 3, "<hi>": 9}
	vocabR, _ := newIDTable(vocab)
	model := newBPE(vocab, vocabR, &modelJSON{})
	list := []addedTokenJSON{{Content: "<x>"}, {Content: "<y>"}, {Content: "<hi>"}, {Content: "<z>"}}
	av, err := newAddedVocab(list, model, nil)
	require.NoError(t, err)
	// len(vocab) is 5: <y> takes 5 (the highest added id, 3, is below it);
	// <z> comes after <hi>'s 9.
	want := map[string]int{"<x>": 3, "<y>": 5, "<hi>": 9, "<z>": 10}
	got := map[string]int{}
	for _, a := range av.tokens() {
		got[a.Content] = a.ID
	}
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"[<x>]", "[<hi>]", "[<y>]", "[<z>]"}, splitAll(t, av, &av.raw, "<x><hi><y><z>"))

	vocab = map[string]int{"a": 0, "b": 1, "<x>": 3} // <x> at len(vocab)
	vocabR, _ = newIDTable(vocab)
	av, err = newAddedVocab([]addedTokenJSON{{Content: "<x>"}, {Content: "<y>"}}, newBPE(vocab, vocabR, &modelJSON{}), nil)
	require.NoError(t, err)
	assert.Len(t, av.tokens(), 2, "both added tokens are kept")
	assert.Equal(t, 4, av.byContent["<y>"])
}
