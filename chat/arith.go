package chat

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// Python's arithmetic on template values. Ints are int64 here: a result
// that Python would carry into a big integer is an error instead.

var errIntOverflow = errors.New("integer result too large (beyond 64 bits)")

func undefinedOperand(vs ...value) error {
	for _, v := range vs {
		if u, ok := v.(*undefined); ok {
			return u.err()
		}
	}
	return nil
}

// bigIntError is the error for computing with an integer beyond int64
// (a literal or JSON number, kept as its digits), where Python would use
// a big integer; nil when no operand is one.
func bigIntError(vs ...value) error {
	for _, v := range vs {
		if b, ok := v.(bigInt); ok {
			return fmt.Errorf("the integer %s is beyond 64 bits, which this renderer cannot compute with", excerpt(string(b)))
		}
	}
	return nil
}

func unaryOp(op string, v value) (value, error) {
	if err := undefinedOperand(v); err != nil {
		return nil, err
	}
	if b, ok := v.(bigInt); ok {
		return negateBig(op, b), nil
	}
	i, f, isF, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for unary %s: %s", op, reprQuick(typeName(v)))
	}
	switch {
	case isF && op == "-":
		return -f, nil
	case isF:
		return f, nil
	case op == "-":
		if i == math.MinInt64 {
			return nil, errIntOverflow
		}
		return -i, nil
	}
	return i, nil
}

// negateBig is unary + or - on a big integer, exact: -9223372036854775808
// is a literal beyond int64 negated into it.
func negateBig(op string, b bigInt) value {
	if op != "-" {
		return b
	}
	s, neg := strings.CutPrefix(string(b), "-")
	if neg {
		return bigInt(s)
	}
	if s == "9223372036854775808" {
		return int64(math.MinInt64)
	}
	return bigInt("-" + s)
}

func opError(op string, a, b value) error {
	if err := bigIntError(a, b); err != nil {
		return err
	}
	return fmt.Errorf("unsupported operand type(s) for %s: %s and %s", op, reprQuick(typeName(a)), reprQuick(typeName(b)))
}

func (r *renderer) binOp(op string, a, b value, line int) (value, error) {
	if err := undefinedOperand(a, b); err != nil {
		return nil, err
	}
	ai, af, aF, aNum := number(a)
	bi, bf, bF, bNum := number(b)
	if aNum && bNum {
		if aF || bF {
			if !aF {
				af = float64(ai)
			}
			if !bF {
				bf = float64(bi)
			}
			return floatOp(op, af, bf)
		}
		return intOp(op, ai, bi)
	}
	switch op {
	case "+":
		return r.add(a, b, line)
	case "*":
		if aNum && !aF {
			return r.repeat(b, ai, line, a)
		}
		if bNum && !bF {
			return r.repeat(a, bi, line, b)
		}
	case "%":
		if s, ok := asString(a); ok {
			_, isM := a.(markup)
			out, err := r.printf(s, b, isM, line)
			if err != nil {
				return nil, err
			}
			if isM {
				return markup(out), nil
			}
			return out, nil
		}
	}
	return nil, opError(op, a, b)
}

func (r *renderer) add(a, b value, line int) (value, error) {
	as, aStr := asString(a)
	bs, bStr := asString(b)
	if aStr && bStr {
		_, aM := a.(markup)
		_, bM := b.(markup)
		var err error
		switch {
		case aM && !bM:
			bs, err = r.escape(bs, line)
		case bM && !aM:
			as, err = r.escape(as, line)
		}
		if err != nil {
			return nil, err
		}
		if err := r.charge(len(as)+len(bs), line); err != nil {
			return nil, err
		}
		if aM || bM {
			return markup(as + bs), nil
		}
		return as + bs, nil
	}
	if aStr {
		return nil, fmt.Errorf(`can only concatenate str (not "%s") to str`, typeName(b))
	}
	x, ok1 := a.(*list)
	y, ok2 := b.(*list)
	if ok1 && ok2 && x.tuple == y.tuple {
		if err := r.charge(16*(len(x.items)+len(y.items)), line); err != nil {
			return nil, err
		}
		items := make([]value, 0, len(x.items)+len(y.items))
		items = append(append(items, x.items...), y.items...)
		return newList(items, x.tuple)
	}
	if ok1 {
		return nil, fmt.Errorf(`can only concatenate %s (not "%s") to %s`, typeName(a), typeName(b), typeName(a))
	}
	return nil, opError("+", a, b)
}

// repeat is seq * n for a string, Markup, list or tuple, checked against
// the size limits before anything is allocated.
func (r *renderer) repeat(seq value, n int64, line int, other value) (value, error) {
	n = max(n, 0)
	size := func(unit int) error {
		if unit > 0 && n > int64(MaxOutputBytes/unit) {
			return limitError(line, "the template built a value of more than %d bytes", MaxOutputBytes)
		}
		return r.charge(unit*int(n), line)
	}
	switch x := seq.(type) {
	case string:
		if err := size(len(x)); err != nil {
			return nil, err
		}
		return strings.Repeat(x, int(n)), nil
	case markup:
		if err := size(len(x)); err != nil {
			return nil, err
		}
		return markup(strings.Repeat(string(x), int(n))), nil
	case *list:
		if err := size(16 * len(x.items)); err != nil {
			return nil, err
		}
		items := make([]value, 0, len(x.items)*int(n))
		for range n {
			items = append(items, x.items...)
		}
		return newList(items, x.tuple)
	}
	return nil, opError("*", seq, other)
}

func intOp(op string, a, b int64) (value, error) {
	switch op {
	case "+":
		s := a + b
		if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
			return nil, errIntOverflow
		}
		return s, nil
	case "-":
		s := a - b
		if (a >= 0) != (b >= 0) && (s >= 0) != (a >= 0) {
			return nil, errIntOverflow
		}
		return s, nil
	case "*":
		return mulInt(a, b)
	case "/":
		if b == 0 {
			return nil, errors.New("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//", "%":
		if b == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		if a == math.MinInt64 && b == -1 {
			if op == "%" {
				return int64(0), nil
			}
			return nil, errIntOverflow
		}
		q, m := a/b, a%b
		if m != 0 && (m < 0) != (b < 0) {
			q--
			m += b
		}
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if b < 0 {
			if a == 0 {
				return nil, errors.New("0.0 cannot be raised to a negative power")
			}
			return math.Pow(float64(a), float64(b)), nil
		}
		result := int64(1)
		base := a
		for e := b; e > 0; e >>= 1 {
			var err error
			if e&1 == 1 {
				if result, err = mulInt(result, base); err != nil {
					return nil, err
				}
			}
			if e > 1 {
				if base, err = mulInt(base, base); err != nil {
					return nil, err
				}
			}
		}
		return result, nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func mulInt(a, b int64) (int64, error) {
	neg := (a < 0) != (b < 0)
	ua, ub := absU(a), absU(b)
	hi, lo := bits.Mul64(ua, ub)
	if hi != 0 || (!neg && lo > math.MaxInt64) || (neg && lo > 1<<63) {
		return 0, errIntOverflow
	}
	if neg {
		return int64(-lo), nil
	}
	return int64(lo), nil
}

func absU(a int64) uint64 {
	if a < 0 {
		return uint64(-a)
	}
	return uint64(a)
}

func floatOp(op string, a, b float64) (value, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, errors.New("float division by zero")
		}
		return a / b, nil
	case "//", "%":
		if b == 0 {
			if op == "%" {
				return nil, errors.New("float modulo")
			}
			return nil, errors.New("float floor division by zero")
		}
		div, mod := floatDivmod(a, b)
		if op == "//" {
			return div, nil
		}
		return mod, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, errors.New("0.0 cannot be raised to a negative power")
		}
		if a < 0 && b != math.Trunc(b) {
			return nil, errors.New("a negative number to a fractional power is complex, which templates cannot use")
		}
		v := math.Pow(a, b)
		if math.IsInf(v, 0) && !math.IsInf(a, 0) && !math.IsInf(b, 0) {
			return nil, errors.New("(34, 'Numerical result out of range')")
		}
		return v, nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// floatDivmod is CPython's float divmod: the floor quotient, and a
// remainder with the divisor's sign.
func floatDivmod(a, b float64) (float64, float64) {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 {
		if (b < 0) != (mod < 0) {
			mod += b
			div -= 1
		}
	} else {
		mod = math.Copysign(0, b)
	}
	var floordiv float64
	if div != 0 {
		floordiv = math.Floor(div)
		if div-floordiv > 0.5 {
			floordiv++
		}
	} else {
		floordiv = math.Copysign(0, a/b)
	}
	return floordiv, mod
}

// htmlEscape is markupsafe's escape: & < > ' " as entities.
func htmlEscape(s string) string {
	if !strings.ContainsAny(s, `&<>'"`) {
		return s
	}
	return htmlReplacer.Replace(s)
}

// escapedLen is len(htmlEscape(s)), counted without building it.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '&', '\'', '"':
			n += 4
		case '<', '>':
			n += 3
		}
	}
	return n
}

// escape is htmlEscape with the escaped text charged before it is built:
// escaping can make a string five times longer.
func (r *renderer) escape(s string, line int) (string, error) {
	if !strings.ContainsAny(s, `&<>'"`) {
		return s, nil
	}
	if err := r.charge(escapedLen(s), line); err != nil {
		return "", err
	}
	return htmlReplacer.Replace(s), nil
}

var htmlReplacer = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", `"`, "&#34;")
