package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

const testdataDir = "../testdata/tokenizer"

// expectedFile is testdata/tokenizer/expected.json, written by
// testdata/gen/gen_tokenizer_ids.py from HF tokenizers.
type expectedFile struct {
	TokenizersVersion string          `json:"tokenizers_version"`
	Suites            []expectedSuite `json:"suites"`
}

type expectedSuite struct {
	Name           string             `json:"name"`
	TokenizerFile  string             `json:"tokenizer_file"`
	TokenizerSHA   string             `json:"tokenizer_json_sha256"`
	TokenizerJSON  string             `json:"tokenizer_json"`
	LoadError      string             `json:"load_error"`
	VocabSize      int                `json:"vocab_size"`
	ModelVocabSize int                `json:"model_vocab_size"`
	AddedTokens    []expectedAdded    `json:"added_tokens"`
	IDToTokenProbe map[string]*string `json:"id_to_token_probe"`
	Cases          []expectedCase     `json:"cases"`
	DecodeCases    []expectedDecode   `json:"decode_cases"`
}

type expectedAdded struct {
	ID        int     `json:"id"`
	Content   string  `json:"content"`
	Special   bool    `json:"special"`
	TokenToID *int    `json:"token_to_id"`
	IDToToken *string `json:"id_to_token"`
}

type expectedCase struct {
	Name    string   `json:"name"`
	Text    string   `json:"text"`
	IDs     []int    `json:"ids"`
	Tokens  []string `json:"tokens"`
	Decoded *string  `json:"decoded"`
	Error   string   `json:"error"`
}

type expectedDecode struct {
	Name    string  `json:"name"`
	IDs     []int   `json:"ids"`
	Decoded *string `json:"decoded"`
	Error   string  `json:"error"`
}

var (
	expectedOnce sync.Once
	expectedData *expectedFile
	expectedErr  error

	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

func loadExpected(t testing.TB) *expectedFile {
	t.Helper()
	expectedOnce.Do(func() {
		data, err := os.ReadFile(filepath.Join(testdataDir, "expected.json"))
		if err != nil {
			expectedErr = err
			return
		}
		var f expectedFile
		expectedErr = json.Unmarshal(data, &f)
		expectedData = &f
	})
	require.NoError(t, expectedErr)
	return expectedData
}

// qwen3 loads the real Qwen3 tokenizer once per test binary.
func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	qwenOnce.Do(func() {
		qwenTok, qwenErr = Load(filepath.Join(testdataDir, "qwen3-tokenizer.json.gz"))
	})
	require.NoError(t, qwenErr)
	return qwenTok
}

func TestExpectedFileIsFromHF(t *testing.T) {
	f := loadExpected(t)
	assert.Equal(t, "0.23.2", f.TokenizersVersion)
	require.NotEmpty(t, f.Suites)
	assert.Equal(t, "qwen3", f.Suites[0].Name)
	assert.GreaterOrEqual(t, len(f.Suites[0].Cases), 300, "named plus random cases")
}

func TestQwen3FileMatchesExpected(t *testing.T) {
	f := loadExpected(t)
	s := f.Suites[0]
	require.Equal(t, "qwen3-tokenizer.json.gz", s.TokenizerFile)
	data, err := os.ReadFile(filepath.Join(testdataDir, s.TokenizerFile))
	require.NoError(t, err)
	raw, err := gunzip(bytes.NewReader(data), "test")
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	assert.Equal(t, s.TokenizerSHA, hex.EncodeToString(sum[:]), "expected.json was made from another tokenizer.json")
}

// TestMatchesHF checks every suite of expected.json: load errors, sizes,
// added tokens, ids of every text token for token, decode round trips and
// decoding of arbitrary id lists.
func TestMatchesHF(t *testing.T) {
	f := loadExpected(t)
	for _, s := range f.Suites {
		t.Run(s.Name, func(t *testing.T) {
			var tok *Tokenizer
			var err error
			if s.TokenizerFile != "" {
				tok, err = qwen3(t), qwenErr
			} else {
				tok, err = FromJSON([]byte(s.TokenizerJSON))
			}
			if s.LoadError != "" {
				require.Errorf(t, err, "HF refused this file: %s", s.LoadError)
				return
			}
			require.NoError(t, err)
			checkSuite(t, tok, &s)
		})
	}
}

func checkSuite(t *testing.T, tok *Tokenizer, s *expectedSuite) {
	assert.Equal(t, s.VocabSize, tok.VocabSize(), "VocabSize")
	assert.Equal(t, s.ModelVocabSize, len(tok.model.vocab), "model vocabulary size")
	added := tok.AddedTokens()
	require.Len(t, added, len(s.AddedTokens), "added tokens")
	for i, want := range s.AddedTokens {
		assert.Equal(t, want.ID, added[i].ID, "added token %q id", want.Content)
		assert.Equal(t, want.Content, added[i].Content)
		if want.TokenToID != nil {
			id, ok := tok.TokenToID(want.Content)
			assert.True(t, ok)
			assert.Equal(t, *want.TokenToID, id, "TokenToID(%q)", want.Content)
		}
		if want.IDToToken != nil {
			got, ok := tok.IDToToken(want.ID)
			assert.True(t, ok)
			assert.Equal(t, *want.IDToToken, got, "IDToToken(%d)", want.ID)
		}
	}
	for k, want := range s.IDToTokenProbe {
		id, err := strconv.Atoi(k)
		require.NoError(t, err)
		got, ok := tok.IDToToken(id)
		if want == nil {
			assert.False(t, ok, "IDToToken(%d) should not exist", id)
		} else {
			assert.True(t, ok)
			assert.Equal(t, *want, got, "IDToToken(%d)", id)
		}
	}
	for _, c := range s.Cases {
		require.Empty(t, c.Error, "HF failed on case %s", c.Name)
		ids, err := tok.Encode(c.Text)
		require.NoError(t, err, c.Name)
		if !assert.Equal(t, c.IDs, ids, "case %s: %q", c.Name, c.Text) {
			continue
		}
		for i, id := range ids {
			if _, isAdded := tok.added.byID[id]; isAdded || c.Tokens == nil {
				continue // HF reports an added token's matched text, strips included
			}
			got, _ := tok.IDToToken(id)
			assert.Equal(t, c.Tokens[i], got, "case %s token %d", c.Name, i)
		}
		require.NotNil(t, c.Decoded, c.Name)
		dec, err := tok.Decode(ids)
		require.NoError(t, err)
		assert.Equal(t, *c.Decoded, dec, "case %s: decode", c.Name)
	}
	for _, d := range s.DecodeCases {
		require.Empty(t, d.Error, d.Name)
		dec, err := tok.Decode(d.IDs)
		if allKnown(tok, d.IDs) {
			require.NoError(t, err, d.Name)
			assert.Equal(t, *d.Decoded, dec, "decode case %s: %v", d.Name, d.IDs)
		} else {
			assert.Error(t, err, "decode case %s has an unknown id (HF skips it)", d.Name)
		}
	}
}

func allKnown(tok *Tokenizer, ids []int) bool {
	for _, id := range ids {
		if _, ok := tok.IDToToken(id); !ok {
			return false
		}
	}
	return true
}

// TestQwen3RoundTrip checks Decode(Encode(x)) == NFC(x) on every Qwen3
// case, which is what HF's decode gives for them.
func TestQwen3RoundTrip(t *testing.T) {
	tok := qwen3(t)
	for _, c := range loadExpected(t).Suites[0].Cases {
		ids, err := tok.Encode(c.Text)
		require.NoError(t, err)
		dec, err := tok.Decode(ids)
		require.NoError(t, err)
		assert.Equal(t, norm.NFC.String(c.Text), dec, c.Name)
	}
}
