package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Integers beyond int64 and floats beyond it convert as Python's jinja2
// 3.1 converts them (the outputs below are what it renders), instead of
// silently becoming the filter's default; arithmetic on them is still an
// error, one that says why.
func TestBigIntegersConvertExactly(t *testing.T) {
	vars := map[string]json.RawMessage{"inf": json.RawMessage("1e999"), "big": json.RawMessage("1" + strings.Repeat("0", 400))}
	for src, want := range map[string]string{
		`{{ 1e300|int }}`: "1000000000000000052504760255204420248704468581108159154915854115511802457988908195786371375080447864" +
			"043704443832883878176942523235360430575644792184786706982848387200926575803737830233794788090059368953234970" +
			"799945081119038967640880074652742780142494579258788820056842838115669472196386865459400540160",
		`{{ 9223372036854775807.0|int }} {{ -9223372036854775808.0|int }}`:    "9223372036854775808 -9223372036854775808",
		`{{ "99999999999999999999"|int }} {{ "-9223372036854775808"|int }}`:   "99999999999999999999 -9223372036854775808",
		`{{ "-9223372036854775809"|int }} {{ 9223372036854775808|int }}`:      "-9223372036854775809 9223372036854775808",
		`{{ "1e400"|int }} {{ "inf"|int(7) }} {{ "nan"|int }}`:                "0 7 0",
		`{{ ("9" * 5000)|int(3) }}`:                                           "3",
		`{{ big|int|string|length }}`:                                         "401",
		`{{ 9223372036854775808|float }} {{ -9223372036854775809|float }}`:    "9.223372036854776e+18 -9.223372036854776e+18",
		`{{ 9223372036854775808|abs }} {{ -9223372036854775809|abs }}`:        "9223372036854775808 9223372036854775809",
		`{{ 9223372036854775808|round }}`:                                     "9223372036854775808",
		`{{ -9223372036854775808 }} {{ +9223372036854775808 }}`:               "-9223372036854775808 9223372036854775808",
		`{{ --9223372036854775809 }} {{ (-9223372036854775808) is integer }}`: "9223372036854775809 True",
	} {
		out, perr, err := renderCase(src, vars)
		if assert.NoError(t, perr, src) && assert.NoError(t, err, src) {
			assert.Equal(t, want, out, src)
		}
	}
	for src, want := range map[string]string{
		`{{ inf|int }}`:                        "cannot convert float infinity to integer",
		`{{ (-inf)|round|int }}`:               "cannot convert float infinity to integer",
		`{{ big|float }}`:                      "int too large to convert to float",
		`{{ 9223372036854775808 + 1 }}`:        "the integer 9223372036854775808 is beyond 64 bits",
		`{{ 9223372036854775808 > 1 }}`:        "the integer 9223372036854775808 is beyond 64 bits",
		`{{ [9223372036854775808, 1]|max }}`:   "beyond 64 bits",
		`{{ 9223372036854775808 is even }}`:    "beyond 64 bits",
		`{{ range(9223372036854775808) }}`:     "beyond 64 bits",
		`{{ "a" * 9223372036854775808 }}`:      "beyond 64 bits",
		`{{ 9223372036854775808|round(-1) }}`:  "beyond 64 bits",
		`{{ "a"|replace("a", "b", big) }}`:     "beyond 64 bits",
		`{{ -(-9223372036854775807 - 1) }}`:    "integer result too large",
		`{{ (-9223372036854775807 - 1)|abs }}`: "integer result too large",
	} {
		_, perr, err := renderCase(src, vars)
		if assert.NoError(t, perr, src) && assert.Error(t, err, src) {
			assert.Contains(t, err.Error(), want, src)
			assert.Less(t, len(err.Error()), 200, src)
		}
	}
}

// A failed ordering names the innermost pair of values, as Python does:
// sort compares lists of attributes, and [1] < ['a'] fails between 'str'
// and 'int', not between two lists. A for loop over a value that is not
// iterable names its line.
func TestUnorderedAndNotIterableMessages(t *testing.T) {
	for src, want := range map[string]string{
		`{{ [1, "a"]|sort }}`:                               "case:1: '<' not supported between instances of 'str' and 'int'",
		`{{ [[1], ["a"]]|sort }}`:                           "case:1: '<' not supported between instances of 'str' and 'int'",
		`{{ [(1,), [1]]|sort }}`:                            "case:1: '<' not supported between instances of 'list' and 'tuple'",
		`{{ [1, none]|sort }}`:                              "case:1: '<' not supported between instances of 'NoneType' and 'int'",
		`{{ {"a": [1], "b": ["x"]}|dictsort(by="value") }}`: "case:1: '<' not supported between instances of 'str' and 'int'",
		"\n{% for x in 5 %}{% endfor %}":                    "case:2: 'int' object is not iterable",
		"\n\n{% for x in none if x %}{% endfor %}":          "case:3: 'NoneType' object is not iterable",
	} {
		_, perr, err := renderCase(src, nil)
		if assert.NoError(t, perr, src) {
			assert.EqualError(t, err, want, src)
		}
	}
}
