package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func opNames(ops []*Op) []string {
	var n []string
	for _, o := range ops {
		n = append(n, o.Name)
	}
	return n
}

func TestParseOps(t *testing.T) {
	got, err := ParseOps("gdn-core, conv,gdn-core")
	require.NoError(t, err)
	assert.Equal(t, []string{"gdn-core", "conv"}, opNames(got), "order kept, duplicates dropped")

	got, err = ParseOps("layers")
	require.NoError(t, err)
	assert.NotContains(t, opNames(got), "model")
	assert.NotContains(t, opNames(got), "decode")
	assert.Len(t, got, len(Ops())-2, "layers: every op but the whole-model ones")

	got, err = ParseOps("all")
	require.NoError(t, err)
	assert.Equal(t, OpNames(), opNames(got))

	for _, bad := range []string{"gdn", "conv,nope", "MODEL"} {
		_, err := ParseOps(bad)
		assert.ErrorContains(t, err, "unknown op", bad)
	}
	for _, empty := range []string{"", " , ,"} {
		_, err := ParseOps(empty)
		assert.ErrorContains(t, err, "empty op list", empty)
	}
}

func TestParseSeqs(t *testing.T) {
	got, err := ParseSeqs("8192, 512,2048,512")
	require.NoError(t, err)
	assert.Equal(t, []int{512, 2048, 8192}, got, "sorted, duplicates dropped")

	got, err = ParseSeqs("32k,1K,7")
	require.NoError(t, err)
	assert.Equal(t, []int{7, 1024, 32768}, got)

	for _, bad := range []string{"abc", "512,x", "0", "-5", "1.5", "2048k", "99999999"} {
		_, err := ParseSeqs(bad)
		assert.ErrorContains(t, err, "not a sequence length", bad)
	}
	for _, empty := range []string{"", ",", " , "} {
		_, err := ParseSeqs(empty)
		assert.ErrorContains(t, err, "empty", empty)
	}
}

func TestParseBackends(t *testing.T) {
	reg := []string{"naive", "chunked", "cuda"}
	got, err := ParseBackends("", reg)
	require.NoError(t, err)
	assert.Equal(t, reg, got, "empty means all registered")

	got, err = ParseBackends("chunked, naive,chunked", reg)
	require.NoError(t, err)
	assert.Equal(t, []string{"chunked", "naive"}, got)

	got, err = ParseBackends("chunked:delta=naive:conv=naive,naive", reg)
	require.NoError(t, err)
	assert.Equal(t, []string{"chunked:delta=naive:conv=naive", "naive"}, got, "mixes are accepted")
	for bad, want := range map[string]string{
		"metal:delta=naive":             `unknown backend "metal"`,
		"chunked:delta=metal":           `unknown delta kernel "metal" (choose from: naive, chunked`,
		"chunked:core=naive":            "not PART=NAME",
		"chunked:delta":                 "not PART=NAME",
		"chunked:conv=naive:conv=naive": "conv given twice",
	} {
		_, err := ParseBackends(bad, reg)
		assert.ErrorContains(t, err, want, bad)
	}

	_, err = ParseBackends("naive,metal", reg)
	assert.ErrorContains(t, err, `unknown backend "metal"`)
	_, err = ParseBackends(" , ", reg)
	assert.ErrorContains(t, err, "empty backend list")
	_, err = ParseBackends("", nil)
	assert.ErrorContains(t, err, "no backends")
}

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	s, err := Summarize(ms(5, 1, 9))
	require.NoError(t, err)
	assert.Equal(t, Stats{Median: 5 * time.Millisecond, Min: time.Millisecond, Max: 9 * time.Millisecond, Runs: 3}, s)

	in := ms(4, 10, 1, 2)
	s, err = Summarize(in)
	require.NoError(t, err)
	assert.Equal(t, 3*time.Millisecond, s.Median, "even count: mean of the middle two")
	assert.Equal(t, time.Millisecond, s.Min)
	assert.Equal(t, 10*time.Millisecond, s.Max)
	assert.Equal(t, ms(4, 10, 1, 2), in, "the samples are not reordered")

	s, err = Summarize(ms(7))
	require.NoError(t, err)
	assert.Equal(t, 7*time.Millisecond, s.Median)

	_, err = Summarize(nil)
	assert.Error(t, err)
}
