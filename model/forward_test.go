package model

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// CheckRows names the input, and the row when there are several.
func TestCheckRows(t *testing.T) {
	m := &Model{Config: &Config{VocabSize: 10}}
	assert.NoError(t, m.CheckRows(nil, "--ids"))
	assert.NoError(t, m.CheckRows([][]int{{0, 9}}, "--ids"))
	assert.EqualError(t, m.CheckRows([][]int{{1, 10}}, "--ids"), "--ids: token id 10 at position 1 is outside the vocabulary [0, 10)")
	assert.EqualError(t, m.CheckRows([][]int{{1}, {2}, {-1}}, "--ids-json"), "--ids-json row 2: token id -1 at position 0 is outside the vocabulary [0, 10)")
	assert.ErrorIs(t, m.CheckRows([][]int{{}}, "ids"), ErrEmpty)
}
