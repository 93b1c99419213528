// Package tokenizer implements the byte-level BPE tokenizer that Qwen models
// ship as an HF tokenizer.json, reproducing HF tokenizers' Encode and Decode
// exactly (ids are checked against tokenizers 0.23.2 in the tests).
//
// Encode runs HF's pipeline: added tokens are cut out of the raw text
// first (those marked normalized are cut after normalization instead), the
// rest is normalized (NFC for Qwen), split by the pre-tokenizer (Qwen's
// Split regex, then ByteLevel's byte-to-rune mapping), and each word is
// merged by BPE rank and looked up in the vocabulary. Encode never adds
// special tokens of its own (HF's add_special_tokens=False).
//
// Decode maps ids back to tokens (added tokens as their content), undoes
// the byte-level mapping, and replaces ill-formed UTF-8 with U+FFFD the way
// HF does (one replacement per maximal ill-formed subsequence).
//
// Supported tokenizer.json components: model BPE; normalizers NFC, NFD,
// NFKC, NFKD and Sequence; pre-tokenizers Split, ByteLevel and Sequence;
// decoder ByteLevel or none. Anything else is refused by Load.
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
)

// Tokenizer encodes text to token ids and back. It is immutable after
// loading except for an internal word cache, and safe for concurrent use.
type Tokenizer struct {
	model     *bpe
	added     *addedVocab
	normalize *normalizer
	pre       []preStep
	cut       cutFunc // where text may be cut for pre[0]; nil: nowhere
	byteLevel bool    // decoder is ByteLevel (else tokens are joined by spaces)
	vocabSize int
	rate      time.Duration // CPU time per byte on the calibration text (calibrate)
}

// MaxJSONBytes caps a tokenizer.json, after decompression: Qwen's is
// 11 MB, and the largest published ones are about 35 MB.
const MaxJSONBytes = 64 << 20

// Load reads a tokenizer.json file; a name ending in ".gz" (or any file
// starting with the gzip magic bytes) is decompressed first. The file is
// opened without blocking and must be a regular file; the file and its
// inflated contents are each capped at MaxJSONBytes.
func Load(path string) (*Tokenizer, error) {
	data, err := safeio.ReadCapped(path, MaxJSONBytes, "tokenizer.json")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if strings.HasSuffix(path, ".gz") || isGzip(data) {
		data, err = gunzip(bytes.NewReader(data), path)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, safeio.Clean(path))
	}
	return t, nil
}

// LoadGzip reads a gzip-compressed tokenizer.json from r, for example one
// embedded in a binary with go:embed. The inflated size is capped at
// MaxJSONBytes.
func LoadGzip(r io.Reader) (*Tokenizer, error) {
	data, err := gunzip(r, "gzip stream")
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return FromJSON(data)
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// gunzip inflates r, stopping with a *safeio.LimitError past MaxJSONBytes
// (a small gzip can inflate to gigabytes).
func gunzip(r io.Reader, name string) ([]byte, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%s: gzip: %w", safeio.Clean(name), err)
	}
	defer zr.Close()
	data, err := safeio.ReadAllCapped(zr, MaxJSONBytes, name, "tokenizer.json (inflated)")
	if err != nil {
		if safeio.IsLimit(err) {
			return nil, err
		}
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return data, nil
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json.
func FromJSON(data []byte) (*Tokenizer, error) {
	t, err := fromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

func fromJSON(data []byte) (*Tokenizer, error) {
	f, err := parseFile(data)
	if err != nil {
		return nil, err
	}
	model, err := parseModel(f.Model)
	if err != nil {
		return nil, err
	}
	f.Model = nil // the model section's copy can go
	nz, err := parseNormalizer(f.Normalizer, "normalizer")
	if err != nil {
		return nil, err
	}
	pre, err := parsePreTokenizer(f.PreTokenizer, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{model: model, normalize: nz, pre: pre, cut: segmenterFor(pre)}
	if !isNull(f.Decoder) {
		typ, err := typeOf(f.Decoder, "decoder")
		if err != nil {
			return nil, err
		}
		if typ != "ByteLevel" {
			return nil, fmt.Errorf("decoder.type %q: unsupported decoder (supported: ByteLevel)", typ)
		}
		if err := requireBools(f.Decoder, "decoder", "add_prefix_space", "trim_offsets"); err != nil {
			return nil, err
		}
		t.byteLevel = true
	}
	added, err := parseAddedTokens(f.AddedTokens)
	if err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(added, model, nz); err != nil {
		return nil, err
	}
	// HF's get_vocab_size(with_added_tokens=true).
	t.vocabSize = len(model.vocab) + len(t.added.byContent)
	for c := range t.added.byContent {
		if _, ok := model.vocab[c]; ok {
			t.vocabSize--
		}
	}
	t.rate = t.calibrate()
	return t, nil
}

func firstInvalid(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
	}
	return len(s)
}

// Decode turns ids back into text: added tokens (special or not) appear as
// their content, byte-level tokens are turned back into bytes, and
// ill-formed UTF-8 is replaced by U+FFFD as HF does. An id that is not in
// the vocabulary is an error naming it.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	toks := make([]string, len(ids))
	for i, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok {
			return "", fmt.Errorf("tokenizer: decode: id %d (at position %d) is not in the vocabulary", id, i)
		}
		toks[i] = tok
	}
	if !t.byteLevel {
		return strings.Join(toks, " "), nil
	}
	buf := make([]byte, 0, 4*len(ids))
	for _, tok := range toks {
		buf = byteLevelDecodeToken(buf, tok)
	}
	return lossyUTF8(buf), nil
}

// TokenToID returns the id of a token string: an added token's content, or
// a model vocabulary entry (in byte-level form, e.g. "Ġthe").
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	id, ok := t.model.vocab[tok]
	return id, ok
}

// IDToToken returns the token string of an id (for a normalized added
// token, its normalized content, as HF does).
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if at, ok := t.added.byID[id]; ok {
		if n, ok := t.added.normalForm[id]; ok {
			return n, true
		}
		return at.Content, true
	}
	return t.model.vocabR.get(id)
}

// VocabSize is the number of distinct tokens, added tokens included (HF's
// get_vocab_size(with_added_tokens=True); 151669 for Qwen3). In HF files
// ids are normally dense, 0..VocabSize-1.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// AddedTokens returns every added token, special or not, sorted by id.
func (t *Tokenizer) AddedTokens() []AddedToken { return t.added.tokens() }

// SpecialTokens returns the added tokens marked special (for Qwen3
// <|endoftext|>, <|im_start|>, <|im_end|> and the vision markers), sorted
// by id.
func (t *Tokenizer) SpecialTokens() []AddedToken {
	var out []AddedToken
	for _, a := range t.added.tokens() {
		if t.added.special[a.Content] {
			a.Special = true
			out = append(out, a)
		}
	}
	return out
}

// IsSpecial reports whether id is a special added token.
func (t *Tokenizer) IsSpecial(id int) bool {
	at, ok := t.added.byID[id]
	return ok && t.added.special[at.Content]
}

// resetCache empties the BPE word cache (for benchmarks).
func (t *Tokenizer) resetCache() { t.model.resetCache() }
