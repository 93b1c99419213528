package sampling

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// Largest orders as a stable sort by value, descending, would: ties by id,
// NaNs skipped, k clipped to the vocabulary.
func TestLargestMatchesStableSort(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 1 + r.IntN(300)
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.IntN(20)) // many ties
			if trial%7 == 0 && r.IntN(10) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		ids := []int{}
		for i, v := range x {
			if v == v {
				ids = append(ids, i)
			}
		}
		slices.SortStableFunc(ids, func(a, b int) int {
			switch {
			case x[a] > x[b]:
				return -1
			case x[a] < x[b]:
				return 1
			}
			return 0
		})
		k := 1 + r.IntN(n+3)
		got := Largest(x, k)
		want := ids[:min(k, len(ids))]
		require.Equal(t, want, got, "trial %d, k %d", trial, k)
	}
	require.Empty(t, Largest([]float32{1, 2}, 0))
}
