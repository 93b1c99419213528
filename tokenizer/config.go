package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/qwenref/qwenref/internal/safeio"
)

// fileJSON is the subset of HF's tokenizer.json that encoding and decoding
// need. Unknown fields are ignored, as HF ignores them; truncation, padding
// and post_processor do not affect Encode (which never adds special tokens)
// and are not read.
type fileJSON struct {
	Version      *string         `json:"version"`
	AddedTokens  []rawAddedToken `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        json.RawMessage `json:"model"`
}

// rawAddedToken is one entry of added_tokens as written. HF requires every
// field (serde has no defaults for them), and so does parseAddedTokens.
type rawAddedToken struct {
	ID         *int64  `json:"id"`
	Content    *string `json:"content"`
	SingleWord *bool   `json:"single_word"`
	LStrip     *bool   `json:"lstrip"`
	RStrip     *bool   `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    *bool   `json:"special"`
}

// addedTokenJSON is a checked added_tokens entry.
type addedTokenJSON struct {
	ID                                              int64
	Content                                         string
	SingleWord, LStrip, RStrip, Normalized, Special bool
}

// MaxAddedTokenBytes caps one added token's content. Matching costs up to
// the longest added token per text position, so a megabyte-long token
// would make Encode quadratic; real ones are under 40 bytes (HF has no
// such cap: this is qwenref's).
const MaxAddedTokenBytes = 256

// parseAddedTokens checks that every entry has all fields, an id that
// fits u32 and content within MaxAddedTokenBytes.
func parseAddedTokens(raws []rawAddedToken) ([]addedTokenJSON, error) {
	out := make([]addedTokenJSON, len(raws))
	for i, r := range raws {
		missing := ""
		switch {
		case r.ID == nil:
			missing = "id"
		case r.Content == nil:
			missing = "content"
		case r.SingleWord == nil:
			missing = "single_word"
		case r.LStrip == nil:
			missing = "lstrip"
		case r.RStrip == nil:
			missing = "rstrip"
		case r.Normalized == nil:
			missing = "normalized"
		case r.Special == nil:
			missing = "special"
		}
		if missing != "" {
			return nil, fmt.Errorf("added_tokens[%d]: missing field %q", i, missing)
		}
		if *r.ID < 0 || *r.ID > math.MaxUint32 {
			return nil, fmt.Errorf("added_tokens[%d].id %d is outside 0..2^32-1", i, *r.ID)
		}
		if len(*r.Content) > MaxAddedTokenBytes {
			return nil, fmt.Errorf("added_tokens[%d].content is %d bytes, over the limit of %d (see docs/limits.md)", i, len(*r.Content), MaxAddedTokenBytes)
		}
		out[i] = addedTokenJSON{
			ID: *r.ID, Content: *r.Content, SingleWord: *r.SingleWord, LStrip: *r.LStrip,
			RStrip: *r.RStrip, Normalized: *r.Normalized, Special: *r.Special,
		}
	}
	return out, nil
}

// requireBools checks that raw (a JSON object) has each named field as a
// boolean, as HF's serde structs demand.
func requireBools(raw json.RawMessage, field string, names ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	for _, n := range names {
		v, ok := m[n]
		if !ok {
			return fmt.Errorf("%s: missing field %q", field, n)
		}
		var b bool
		if err := json.Unmarshal(v, &b); err != nil {
			return fmt.Errorf("%s.%s: want true or false", field, n)
		}
	}
	return nil
}

// modelJSON is the model section; only BPE is supported.
type modelJSON struct {
	Type                    *string         `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 *bool           `json:"fuse_unk"`
	ByteFallback            *bool           `json:"byte_fallback"`
	IgnoreMerges            *bool           `json:"ignore_merges"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

// typedJSON reads the "type" tag of a normalizer, pre-tokenizer or decoder.
type typedJSON struct {
	Type *string `json:"type"`
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// parseFile decodes the top level and checks the version. Like HF, which
// reads the file as UTF-8 text with serde_json, it refuses invalid UTF-8
// and escaped lone surrogates ("\ud800"); Go's decoder would turn either
// into U+FFFD without a word, so that two distinct vocabulary entries
// could become one.
func parseFile(data []byte) (*fileJSON, error) {
	if err := safeio.CheckJSONText(data); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Version != nil && *f.Version != "1.0" {
		return nil, fmt.Errorf("tokenizer.json: version %q: only \"1.0\" is known", *f.Version)
	}
	if isNull(f.Model) {
		return nil, fmt.Errorf("tokenizer.json: model: missing")
	}
	return &f, nil
}

// typeOf reads the "type" tag of a component, naming field in errors.
func typeOf(raw json.RawMessage, field string) (string, error) {
	var t typedJSON
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	if t.Type == nil {
		return "", fmt.Errorf("%s: missing \"type\"", field)
	}
	return *t.Type, nil
}
