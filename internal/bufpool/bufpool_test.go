package bufpool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each length gets the smallest class that holds it, at most 25% over.
func TestClass(t *testing.T) {
	prev := -1
	for _, n := range []int{minPooled, minPooled + 1, 80000, 81920, 81921, 98304, 114688, 114689, 131071, 131072, 1 << 27, 3<<26 + 5} {
		k, c := class(n)
		assert.GreaterOrEqual(t, c, n, "n=%d", n)
		assert.LessOrEqual(t, float64(c), 1.25*float64(n), "n=%d: capacity %d", n, c)
		assert.GreaterOrEqual(t, k, prev, "classes grow with n")
		prev = k
		k2, c2 := class(c)
		assert.Equal(t, k, k2, "a class's own capacity maps back to it (n=%d)", n)
		assert.Equal(t, c, c2)
	}
}

func TestGetPut(t *testing.T) {
	small := Get(10)
	assert.Len(t, small, 10)
	Put(small) // ignored: too small to pool

	s := Get(100000)
	require.Len(t, s, 100000)
	_, c := class(100000)
	assert.Equal(t, c, cap(s))
	s[0] = 42
	Put(s)
	Put(make([]float32, 100000)) // not one of ours (capacity off class): ignored
	// The pool may drop what it holds at any time; when it does not, a
	// buffer of the same class comes back with its old contents.
	again := Get(99000)
	assert.Len(t, again, 99000)
	assert.Equal(t, c, cap(again))
}

func TestBuffers(t *testing.T) {
	fresh := New(false)
	a := fresh.Get(1 << 17)
	for _, v := range a {
		if v != 0 {
			t.Fatal("an unpooled buffer is freshly zeroed")
		}
	}
	a[0] = 1
	fresh.Release() // nothing lent from the pool: a stays the caller's
	assert.Equal(t, float32(1), a[0])

	pooled := New(true)
	b := pooled.Get(1 << 17)
	c := pooled.Get(1 << 17)
	assert.NotSame(t, &b[0], &c[0], "two live buffers never share memory")
	assert.Len(t, pooled.lent, 2)
	pooled.Release()
	assert.Empty(t, pooled.lent)
}
