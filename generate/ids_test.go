package generate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIDs(t *testing.T) {
	got, err := ParseIDs([]byte(" [[1,2],[3,4]] "))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{1, 2}, {3, 4}}, got)
	got, err = ParseIDs([]byte("[5,6,7]"))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{5, 6, 7}}, got)
	for _, bad := range []string{"", "{}", "[[]]", "[[1.5]]", "[[1],[2,3]]", `[["a"]]`, "[[1]] x", "[[99999999999]]", "[[1e3]]"} {
		_, err := ParseIDs([]byte(bad))
		assert.Error(t, err, bad)
	}
}

func TestParseIDsStrict(t *testing.T) {
	for in, want := range map[string]string{
		`[[1,"2"]]`:   `id 1 is "2": want a non-negative integer (a JSON number, not a string)`,
		`[[1,[2]]]`:   `id 1 is an array or object ([…): want a non-negative integer; rows are one level deep`,
		`[[{"a":1}]]`: `id 0 is an array or object ({…): want a non-negative integer`,
		`[[true]]`:    `id 0 is true: want a non-negative integer`,
		`[1,2.0]`:     "id 1 is 2.0",
		`[[01]]`:      "",
		`[[-1]]`:      "id 0 is -1",
		`[[1],[2]`:    "invalid JSON",
		`[1,[2]]`:     "want an array of integers",
	} {
		_, err := ParseIDs([]byte(in))
		if assert.Error(t, err, in) && want != "" {
			assert.Contains(t, err.Error(), want, in)
		}
	}
	got, err := ParseIDs([]byte(" [ [ 0 , 12 ] ,\n[3,4] ] "))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{0, 12}, {3, 4}}, got)
	_, err = ParseIDs([]byte("[" + strings.TrimSuffix(strings.Repeat("7,", MaxIDs+1), ",") + "]"))
	assert.ErrorContains(t, err, "more than 4194304 token ids")
	// A golden's inputs.json gives its rows; any other object is refused.
	got, err = ParseIDs([]byte(`{"ids": [[5, 6], [7, 8]], "attention_mask": [[1, 1], [1, 1]]}`))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{5, 6}, {7, 8}}, got)
	_, err = ParseIDs([]byte(`{"input_ids": [[5]]}`))
	assert.ErrorContains(t, err, `{"ids": [[1,2,3]]}`)
	_, err = ParseIDList("1,+5")
	assert.ErrorContains(t, err, `"+5"`)
	ids, err := ParseIDList("1,2,3")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 2, 3}, ids)
	// Digits and commas only: a stray space is an error, not a guess.
	_, err = ParseIDList(" 5")
	assert.ErrorContains(t, err, `" 5"`)
	_, err = ParseIDList("1, 2")
	assert.ErrorContains(t, err, `" 2"`)
	_, err = ParseIDList("")
	assert.ErrorContains(t, err, "empty id list")
}

func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{"[[1,2,3]]", "[1,2]", "[[0],[1]]", "[[1e400]]", "[[-0]]", "[", "null", "[[1],[2,3]]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rows, err := ParseIDs(data)
		if err != nil {
			return
		}
		if len(rows) == 0 {
			t.Fatal("nil error with no rows")
		}
		for _, r := range rows {
			if len(r) != len(rows[0]) || len(r) == 0 {
				t.Fatalf("accepted ragged or empty rows: %v", rows)
			}
			for _, id := range r {
				if id < 0 {
					t.Fatalf("accepted negative id: %v", rows)
				}
			}
		}
	})
}

// FuzzPlainIDsAgree: whatever the fast path accepts, the token-by-token
// parser reads the same way.
func FuzzPlainIDsAgree(f *testing.F) {
	for _, s := range []string{"[[1,2,3]]", "[1,2]", "[[0],[1]]", " [ 7 ] ", "[[1],[2,3]]", "[[01]]", "[2147483648]", "[[1,2],[3,4]]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, plain, err := scanPlainIDs(data)
		if !plain || err != nil {
			return
		}
		slow, err := decodeIDs(data)
		require.NoError(t, err, "%q", data)
		require.Equal(t, slow, fast, "%q", data)
	})
}
