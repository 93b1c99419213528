package chat

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pyFloat writes what Python's repr writes (CPython 3.11's repr of each).
func TestPyFloat(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{
		{1, "1.0"}, {0.1, "0.1"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {1e-5, "1e-05"}, {1e-4, "0.0001"},
		{math.Copysign(0, -1), "-0.0"}, {0, "0.0"}, {1.5e-7, "1.5e-07"}, {123456789, "123456789.0"},
		{0.30000000000000004, "0.30000000000000004"},
	} {
		assert.Equal(t, c.want, pyFloat(c.in), "%v", c.in)
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	for _, bad := range []string{"", "[", `{"a":}`, "[1] 2", strings.Repeat("[", maxJSONDepth+2) + strings.Repeat("]", maxJSONDepth+2)} {
		_, err := decodeJSON([]byte(bad))
		assert.Error(t, err, bad)
	}
	v, err := decodeJSON([]byte(`{"a": 1, "b": 2, "a": 3}`))
	require.NoError(t, err)
	o := dumpOptions{itemSep: ", ", keySep: ": ", indent: -1}
	var b strings.Builder
	require.NoError(t, o.dump(&b, reflect.ValueOf(v), 0))
	assert.Equal(t, `{"a": 3, "b": 2}`, b.String(), "a repeated key keeps its first place and last value, as json.loads")
}

// Whatever JSON decodes, tojson writes back as the same JSON value.
func FuzzToJSONRoundTrip(f *testing.F) {
	for _, s := range []string{`{"z": [1, 2.5, -0.0, 1e300], "a": {"": null}}`, `"\u2028\u0001é😀"`, `[true, false, 12345678901234567890]`, `{}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decodeJSON(data)
		if err != nil {
			return
		}
		o := dumpOptions{itemSep: ", ", keySep: ": ", indent: -1}
		var b strings.Builder
		if err := o.dump(&b, reflect.ValueOf(v), 0); err != nil {
			t.Fatalf("dump %q: %v", data, err)
		}
		var want, got any
		if json.Unmarshal(data, &want) != nil {
			return // Go's decoder is stricter about some inputs (e.g. invalid UTF-8 is replaced)
		}
		if err := json.Unmarshal([]byte(b.String()), &got); err != nil {
			t.Fatalf("tojson of %q wrote invalid JSON %q: %v", data, b.String(), err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("round trip of %q: got %q", data, b.String())
		}
	})
}
