package weights

import (
	"strings"
	"testing"

	"github.com/qwenref/qwenref/tensor"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type leafParts struct {
	W    *tensor.Matrix `tensor:"w.weight" shape:"2*A+1,B"`
	Bias []float32      `tensor:"bias" shape:"A" init:"zeros"`
	Only []float32      `tensor:"only" shape:"B" when:"flag"`
	Not  []float32      `tensor:"not" shape:"B" when:"!flag"`
}

type rootParts struct {
	Head   *tensor.Matrix `tensor:"head.weight" shape:"A,B" hub:"top"`
	Inline leafParts      // untagged: walked under the same prefix
	Parts  []leafParts    `tensor:"parts.%d."`
	Opt    *leafParts     `tensor:"opt."` // nil: skipped
	Any    any            `tensor:"any."`
	Skip   []string
}

func TestWalkNamesShapesAndBinding(t *testing.T) {
	r := &rootParts{Parts: make([]leafParts, 2), Any: &leafParts{}}
	var names []string
	var shapes [][]int
	err := Walk(r, "m.", Sizes{"A": 3, "B": 4, "flag": 1}, func(f Field) error {
		names = append(names, f.Name)
		shapes = append(shapes, f.Shape)
		if f.IsMatrix() {
			f.SetMatrix(&tensor.Matrix{Rows: f.Shape[0], Cols: f.Shape[1]})
		} else {
			f.SetVector(make([]float32, f.Shape[0]))
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"m.head.weight", "m.w.weight", "m.bias", "m.only",
		"m.parts.0.w.weight", "m.parts.0.bias", "m.parts.0.only", "m.parts.1.w.weight", "m.parts.1.bias", "m.parts.1.only",
		"m.any.w.weight", "m.any.bias", "m.any.only"}, names)
	assert.Equal(t, []int{7, 4}, shapes[1], "2*A+1")
	assert.Equal(t, 7, r.Parts[1].W.Rows, "bound through the slice")
	assert.Len(t, r.Any.(*leafParts).Bias, 3, "bound through the interface")
	assert.Nil(t, r.Inline.Not, "when:!flag skipped")

	// The flag cleared flips the two conditional fields.
	names = nil
	require.NoError(t, Walk(&leafParts{}, "", Sizes{"A": 1, "B": 1}, func(f Field) error {
		names = append(names, f.Name)
		return nil
	}))
	assert.Equal(t, []string{"w.weight", "bias", "not"}, names)
}

func TestWalkFieldAccessors(t *testing.T) {
	r := &rootParts{}
	var sawHead, sawBias bool
	require.NoError(t, Walk(r, "", Sizes{"A": 1, "B": 2}, func(f Field) error {
		switch {
		case f.Is(&r.Head):
			sawHead = true
			assert.Equal(t, "top", f.Tag("hub"))
			assert.True(t, f.IsMatrix())
			assert.Nil(t, f.Matrix())
		case f.Is(&r.Inline.Bias):
			sawBias = true
			assert.Equal(t, "zeros", f.Init)
			assert.False(t, f.IsMatrix())
			assert.Nil(t, f.Vector())
		}
		return nil
	}))
	assert.True(t, sawHead && sawBias)
}

func TestWalkErrors(t *testing.T) {
	visit := func(Field) error { return nil }
	err := Walk(leafParts{}, "", Sizes{}, visit)
	require.ErrorContains(t, err, "want a non-nil pointer to a struct")
	err = Walk(&leafParts{}, "", Sizes{"A": 1}, visit)
	require.ErrorContains(t, err, `unknown size "B"`)
	type badPrefix struct {
		N int `tensor:"n."`
	}
	err = Walk(&badPrefix{}, "", Sizes{}, visit)
	require.ErrorContains(t, err, "not a struct")
	type noShape struct {
		V []float32 `tensor:"v"`
	}
	err = Walk(&noShape{}, "", Sizes{}, visit)
	require.ErrorContains(t, err, "no shape tag")
	// A visit error stops the walk and comes back unchanged.
	stop := Walk(&leafParts{}, "", Sizes{"A": 1, "B": 1}, func(f Field) error {
		if strings.HasSuffix(f.Name, "bias") {
			return assert.AnError
		}
		return nil
	})
	require.ErrorIs(t, stop, assert.AnError)
}
