package generate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/qwenref/qwenref/internal/safeio"
)

// Token ids come from files and command lines that other people wrote:
// ParseIDs and ParseIDList read them strictly and within MaxIDs, and
// CheckRows checks them against a model's vocabulary, for every command.

// MaxIDs caps how many token ids one input may hold in all rows: far more
// than any model's context (Qwen3.5's is 262,144), few enough that the
// ids themselves stay small. Longer inputs are refused before any model
// work (docs/limits.md).
const MaxIDs = 1 << 22

// ParseIDs reads token ids as a JSON array of equal-length arrays of
// non-negative integers, e.g. [[1,2,3],[4,5,6]]. A flat array [1,2,3] is
// accepted as one row. Only JSON numbers are ids: "2", 2.0, 1e3 and -1 are
// refused, as are trailing data and more than MaxIDs ids. A golden's
// inputs.json, {"ids": [[...], ...]}, gives its rows. The input is read
// token by token, so no allocation is sized by it.
func ParseIDs(data []byte) ([][]int, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty input: want a JSON array of token-id arrays, e.g. [[1,2,3]]")
	}
	if data[0] == '{' {
		var wrapped struct {
			IDs json.RawMessage `json:"ids"`
		}
		if err := json.Unmarshal(data, &wrapped); err != nil || len(bytes.TrimSpace(wrapped.IDs)) == 0 || bytes.TrimSpace(wrapped.IDs)[0] != '[' {
			return nil, fmt.Errorf(`want [1,2,3], [[1,2,3]] or {"ids": [[1,2,3]]}`)
		}
		data = bytes.TrimSpace(wrapped.IDs)
	}
	if rows, plain, err := scanPlainIDs(data); plain {
		return rows, err
	}
	return decodeIDs(data)
}

// decodeIDs is ParseIDs' token-by-token parser, for any input.
func decodeIDs(data []byte) ([][]int, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := expectDelim(dec, '['); err != nil {
		return nil, fmt.Errorf("want a JSON array of token-id arrays, e.g. [[1,2,3]]: %v", err)
	}
	var rows [][]int
	var flat []int
	total := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %v", err)
		}
		switch v := tok.(type) {
		case json.Delim:
			if v != '[' || flat != nil {
				return nil, fmt.Errorf("row %d: want an array of integers", len(rows))
			}
			row, err := parseRow(dec, &total)
			if err != nil {
				return nil, fmt.Errorf("row %d: %w", len(rows), err)
			}
			if len(row) == 0 {
				return nil, fmt.Errorf("row %d is empty: every sequence needs at least one token", len(rows))
			}
			if len(rows) > 0 && len(row) != len(rows[0]) {
				return nil, fmt.Errorf("row %d has %d ids but row 0 has %d: rows must have equal length (no padding support)", len(rows), len(row), len(rows[0]))
			}
			rows = append(rows, row)
		default:
			if rows != nil {
				return nil, fmt.Errorf("id %d: an array of arrays cannot also hold %v", len(flat), tok)
			}
			id, err := idValue(tok, len(flat))
			if err != nil {
				return nil, err
			}
			if total++; total > MaxIDs {
				return nil, fmt.Errorf("more than %d token ids (the limit; see docs/limits.md)", MaxIDs)
			}
			flat = append(flat, id)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return nil, fmt.Errorf("invalid JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("trailing data after the array")
	}
	if flat != nil {
		return [][]int{flat}, nil
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("empty input: the array holds no sequences")
	}
	return rows, nil
}

// parseRow reads the ids of one row after its opening bracket.
func parseRow(dec *json.Decoder, total *int) ([]int, error) {
	var row []int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("want an array of integers: %v", err)
		}
		id, err := idValue(tok, len(row))
		if err != nil {
			return nil, err
		}
		if *total++; *total > MaxIDs {
			return nil, fmt.Errorf("more than %d token ids (the limit; see docs/limits.md)", MaxIDs)
		}
		row = append(row, id)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("want an array of integers: %v", err)
	}
	return row, nil
}

// idValue accepts a JSON number written as a plain non-negative integer.
func idValue(tok json.Token, j int) (int, error) {
	n, ok := tok.(json.Number)
	if !ok {
		switch v := tok.(type) {
		case string:
			return 0, fmt.Errorf("id %d is %s: want a non-negative integer (a JSON number, not a string)", j,
				safeio.Quote(v)) // cut: a string id may be megabytes long
		case json.Delim: // a nested array or an object where an id belongs
			return 0, fmt.Errorf("id %d is an array or object (%s…): want a non-negative integer; rows are one level deep, [[1,2],[3]]", j, v)
		}
		return 0, fmt.Errorf("id %d is %v: want a non-negative integer", j, tok)
	}
	v, err := strconv.ParseUint(n.String(), 10, 31)
	if err != nil || !isDigits(n.String()) || v > math.MaxInt32 {
		return 0, fmt.Errorf("id %d is %s: want a non-negative integer", j, n.String())
	}
	return int(v), nil
}

// isDigits reports whether s is one or more ASCII digits and nothing else
// (strconv accepts a sign and underscores that ids must not have).
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("got %v", tok)
	}
	return nil
}

// scanPlainIDs is the fast path for the usual input: brackets, commas,
// whitespace and plain decimal ids (no leading zeros), at about a
// nanosecond a byte. plain is false for anything else, which the
// token-by-token parser then reads to give a precise message.
func scanPlainIDs(data []byte) (rows [][]int, plain bool, err error) {
	i := 0
	ws := func() {
		for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
			i++
		}
	}
	total := 0
	// row reads "id, id, ... ]" after an opening bracket.
	row := func() ([]int, bool) {
		var out []int
		for {
			ws()
			start := i
			v := 0
			for i < len(data) && data[i] >= '0' && data[i] <= '9' && i-start < 10 {
				v = v*10 + int(data[i]-'0')
				i++
			}
			if i == start || i-start > 1 && data[start] == '0' || v > math.MaxInt32 ||
				i < len(data) && data[i] >= '0' && data[i] <= '9' {
				return nil, false
			}
			if total++; total > MaxIDs {
				return nil, true
			}
			out = append(out, v)
			ws()
			if i < len(data) && data[i] == ',' {
				i++
				continue
			}
			if i < len(data) && data[i] == ']' {
				i++
				return out, true
			}
			return nil, false
		}
	}
	tooMany := fmt.Errorf("more than %d token ids (the limit; see docs/limits.md)", MaxIDs)
	ws()
	if i >= len(data) || data[i] != '[' {
		return nil, false, nil
	}
	i++
	ws()
	if i < len(data) && data[i] == '[' { // rows
		for {
			i++
			r, ok := row()
			if total > MaxIDs {
				return nil, true, tooMany
			}
			if !ok || len(rows) > 0 && len(r) != len(rows[0]) {
				return nil, false, nil
			}
			rows = append(rows, r)
			ws()
			if i < len(data) && data[i] == ',' {
				i++
				ws()
				if i < len(data) && data[i] == '[' {
					continue
				}
				return nil, false, nil
			}
			break
		}
		if ws(); i >= len(data) || data[i] != ']' {
			return nil, false, nil
		}
		i++
	} else { // one flat row
		r, ok := row()
		if total > MaxIDs {
			return nil, true, tooMany
		}
		if !ok {
			return nil, false, nil
		}
		rows = [][]int{r}
	}
	if ws(); i != len(data) {
		return nil, false, nil
	}
	return rows, true, nil
}

// ParseIDList parses one row of ids written "1,2,3": digits and commas
// only, so a stray space or sign is an error rather than a guess, with
// the same limits as ParseIDs.
func ParseIDList(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("empty id list: want e.g. --ids 1,2,3")
	}
	var ids []int
	for i, f := range strings.Split(s, ",") {
		if i >= MaxIDs {
			return nil, fmt.Errorf("more than %d token ids (the limit; see docs/limits.md)", MaxIDs)
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || !isDigits(f) {
			return nil, fmt.Errorf("id %d (%q) is not a non-negative integer written in digits (no spaces or signs)", i, f)
		}
		ids = append(ids, v)
	}
	return ids, nil
}
