package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseIDsStrict(t *testing.T) {
	for in, want := range map[string]string{
		`[[1,"2"]]`: `id 1 is "2": want a non-negative integer (a JSON number, not a string)`,
		`[1,2.0]`:   "id 1 is 2.0",
		`[[01]]`:    "",
		`[[-1]]`:    "id 0 is -1",
		`[[1],[2]`:  "invalid JSON",
		`[1,[2]]`:   "want an array of integers",
	} {
		_, err := parseIDsJSON([]byte(in))
		if assert.Error(t, err, in) && want != "" {
			assert.Contains(t, err.Error(), want, in)
		}
	}
	got, err := parseIDsJSON([]byte(" [ [ 0 , 12 ] ,\n[3,4] ] "))
	require.NoError(t, err)
	assert.Equal(t, [][]int{{0, 12}, {3, 4}}, got)
	_, err = parseIDsJSON([]byte("[" + strings.TrimSuffix(strings.Repeat("7,", maxIDs+1), ",") + "]"))
	assert.ErrorContains(t, err, "more than 4194304 token ids")
	_, err = parseIDList("1,+5")
	assert.ErrorContains(t, err, `"+5"`)
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
