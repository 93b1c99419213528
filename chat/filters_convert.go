package chat

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// Filters that convert: int, float, round, and transformers' tojson.

func filterFloat(_ *renderer, _ int, v value, a []value) (value, error) {
	if b, ok := v.(bigInt); ok {
		// Python's float(int), correctly rounded; the OverflowError it
		// raises past the float range is not one that do_float catches.
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return nil, errors.New("int too large to convert to float")
		}
		return f, nil
	}
	if f, ok := pyFloatOf(v); ok {
		return f, nil
	}
	return a[0], nil
}

// pyFloatOf is Python's float(v), false where that raises.
func pyFloatOf(v value) (float64, bool) {
	if i, f, isF, ok := number(v); ok {
		if isF {
			return f, true
		}
		return float64(i), true
	}
	s, ok := asString(v)
	if !ok {
		return 0, false
	}
	s = pyStrip(s, nil, true, true)
	low := strings.ToLower(strings.TrimLeft(s, "+-"))
	switch low {
	case "inf", "infinity", "nan":
	default:
		if !validUnderscores(s) || strings.ContainsAny(low, "xp") {
			return 0, false // Python's float() reads no hex
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

// validUnderscores checks Python's rule for _ in numbers: only single
// underscores between digits.
func validUnderscores(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '_' {
			continue
		}
		if i == 0 || i == len(s)-1 || !isDigitByte(s[i-1]) || !isDigitByte(s[i+1]) {
			return false
		}
	}
	return true
}

func isDigitByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func filterInt(_ *renderer, _ int, v value, a []value) (value, error) {
	if s, ok := asString(v); ok {
		base, _, _, _ := number(a[1])
		if n, ok := pyIntOf(s, int(base)); ok {
			return n, nil
		}
		if f, ok := pyFloatOf(s); ok && !math.IsInf(f, 0) {
			return floatToInt(f, a[0]) // int(float(s)), whose OverflowError do_int catches
		}
		return a[0], nil
	}
	if b, ok := v.(bigInt); ok {
		return b, nil
	}
	if i, f, isF, ok := number(v); ok {
		if !isF {
			return i, nil
		}
		return floatToInt(f, a[0])
	}
	return a[0], nil
}

// floatToInt is do_int's int(f) of a float: NaN gives the default (a
// ValueError, which do_int catches), an infinity fails (an OverflowError,
// which it catches only for a string), and a float beyond int64 is its
// exact integer, as digits.
func floatToInt(f float64, def value) (value, error) {
	switch {
	case math.IsNaN(f):
		return def, nil
	case math.IsInf(f, 0):
		return nil, errors.New("cannot convert float infinity to integer")
	case f >= -(1<<63) && f < 1<<63:
		return int64(f), nil
	}
	n, _ := big.NewFloat(f).Int(nil) // f is integral this far out
	return bigInt(n.String()), nil
}

// maxIntDigits is Python's default limit on the digits int(str) reads
// (sys.get_int_max_str_digits), which also keeps the conversion of a
// long string to a big integer's digits cheap.
const maxIntDigits = 4300

// pyIntOf is Python's int(s, base): surrounding whitespace, a sign, the
// base's prefix (0x, 0o, 0b; any of them for base 0), and single
// underscores between digits; base 0 also refuses leading zeros.
func pyIntOf(s string, base int) (value, bool) {
	s = pyStrip(s, nil, true, true)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) >= 2 && s[0] == '0' {
		prefixBase := map[byte]int{'x': 16, 'X': 16, 'o': 8, 'O': 8, 'b': 2, 'B': 2}[s[1]]
		if prefixBase != 0 && (base == 0 || base == prefixBase) {
			base, s = prefixBase, s[2:]
			if strings.HasPrefix(s, "_") {
				s = s[1:]
			}
		}
	}
	if base == 0 {
		base = 10
		if len(s) > 1 && s[0] == '0' && strings.Trim(s, "0_") != "" {
			return nil, false
		}
	}
	if base < 2 || base > 36 || s == "" || !validUnderscores(s) || strings.ContainsAny(s, "+-") {
		return nil, false
	}
	digits := strings.ReplaceAll(s, "_", "")
	if len(digits) > maxIntDigits {
		return nil, false // Python's ValueError: the limit for integer string conversion
	}
	if neg {
		digits = "-" + digits // so that -9223372036854775808 parses
	}
	n, err := strconv.ParseInt(digits, base, 64)
	if err == nil {
		return n, true
	}
	// Beyond int64, Python's int is exact: keep its digits.
	b, ok := new(big.Int).SetString(digits, base)
	if !ok {
		return nil, false
	}
	return bigInt(b.String()), true
}

func filterRound(_ *renderer, _ int, v value, a []value) (value, error) {
	method, _ := a[1].(string)
	if method != "common" && method != "ceil" && method != "floor" {
		return nil, errors.New("method must be common, ceil or floor")
	}
	prec, _, isF, ok := number(a[0])
	if !ok || isF {
		return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a[0]))
	}
	i, f, vF, ok := number(v)
	if b, isBig := v.(bigInt); isBig && method == "common" && prec >= 0 {
		return b, nil // round(int, ndigits ≥ 0) is the int itself
	}
	if err := bigIntError(v); err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("type %s doesn't define __round__ method", typeName(v))
	}
	if method == "common" {
		if !vF {
			if prec >= 0 {
				return i, nil
			}
			return roundIntNeg(i, prec)
		}
		return pyRound(f, int(prec)), nil
	}
	if !vF {
		f = float64(i)
	}
	scale := math.Pow(10, float64(prec))
	if method == "ceil" {
		return math.Ceil(f*scale) / scale, nil
	}
	return math.Floor(f*scale) / scale, nil
}

// pyRound is Python's round(f, ndigits): the float nearest the exactly
// rounded decimal, ties to even.
func pyRound(f float64, ndigits int) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) || ndigits > 320 {
		return f
	}
	if ndigits >= 0 {
		s := strconv.FormatFloat(f, 'f', ndigits, 64)
		out, _ := strconv.ParseFloat(s, 64)
		return out
	}
	scale := math.Pow(10, float64(-ndigits))
	q := f / scale
	rq := math.RoundToEven(q)
	return rq * scale
}

func roundIntNeg(i, prec int64) (value, error) {
	if prec < -18 {
		return int64(0), nil
	}
	p := int64(math.Pow10(int(-prec)))
	q, m := i/p, i%p
	if m < 0 {
		q, m = q-1, m+p
	}
	if 2*m > p || (2*m == p && q%2 != 0) {
		q++
	}
	return mulInt(q, p)
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func filterToJSON(r *renderer, line int, v value, a []value) (value, error) {
	o := jsonOptions{ensureASCII: truthy(a[0]), sortKeys: truthy(a[3]), itemSep: ", ", keySep: ": "}
	switch ind := a[1].(type) {
	case noneType:
	case string:
		o.indent = &ind
	case markup:
		s := string(ind)
		o.indent = &s
	case int64, bool:
		n, err := intArg(ind, "tojson's indent")
		if err != nil {
			return nil, err
		}
		s := strings.Repeat(" ", max(n, 0))
		o.indent = &s
	default:
		return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(ind))
	}
	if o.indent != nil {
		o.itemSep = ","
	}
	if _, isNone := a[2].(noneType); !isNone {
		l, ok := a[2].(*list)
		if !ok || len(l.items) != 2 {
			return nil, errors.New("tojson: separators must be a pair of strings")
		}
		is, ok1 := asString(l.items[0])
		ks, ok2 := asString(l.items[1])
		if !ok1 || !ok2 {
			return nil, errors.New("tojson: separators must be a pair of strings")
		}
		o.itemSep, o.keySep = is, ks
	}
	w := newTextWriter()
	if err := dumpJSON(w, v, &o, 0); err != nil {
		return nil, err
	}
	if err := w.err(); err != nil {
		return nil, err
	}
	return string(w.b), r.charge(len(w.b), line)
}
