package chat

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxFormatPrecision caps a %-format's precision (Python allows more; no
// template needs it).
const maxFormatPrecision = 4096

// printf is Python's format % args (printf-style formatting): args is a
// tuple of values, a dict for %(name)s fields, or one value. With escape
// (a Markup format) %s and %r results are HTML-escaped, as Markup does.
func (r *renderer) printf(format string, args value, escape bool, line int) (string, error) {
	var pos []value
	var mapping *dict
	switch x := args.(type) {
	case *list:
		if x.tuple {
			pos = x.items
		} else {
			pos = []value{x}
		}
	case *dict:
		mapping, pos = x, []value{x}
	default:
		pos = []value{args}
	}
	next := 0
	take := func() (value, error) {
		if next >= len(pos) {
			return nil, errors.New("not enough arguments for format string")
		}
		next++
		return pos[next-1], nil
	}
	usedMapping := false
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			j := strings.IndexByte(format[i:], '%')
			if j < 0 {
				j = len(format) - i
			}
			b.WriteString(format[i : i+j])
			i += j - 1
			continue
		}
		i++
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		var arg value
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return "", errors.New("incomplete format key")
			}
			if mapping == nil {
				return "", errors.New("format requires a mapping")
			}
			key := format[i+1 : i+end]
			v, ok := mapping.getStr(key)
			if !ok {
				return "", fmt.Errorf("KeyError: %s", reprQuick(key))
			}
			arg, haveArg, usedMapping = v, true, true
			i += end + 1
		}
		var spec fmtSpec
		for ; i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0; i++ {
			switch format[i] {
			case '-':
				spec.left = true
			case '+':
				spec.plus = true
			case ' ':
				spec.space = true
			case '#':
				spec.alt = true
			case '0':
				spec.zero = true
			}
		}
		num := func(what string) (int, error) {
			if i < len(format) && format[i] == '*' {
				i++
				v, err := take()
				if err != nil {
					return 0, err
				}
				n, ok := v.(int64)
				if !ok {
					return 0, fmt.Errorf("* wants int")
				}
				if n < 0 && what == "width" {
					spec.left = true
					n = -n
				}
				return int(max(n, 0)), nil
			}
			n := 0
			for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
				n = n*10 + int(format[i]-'0')
				if n > MaxOutputBytes {
					return 0, limitError(line, "a %s of more than %d in a format string", what, MaxOutputBytes)
				}
			}
			return n, nil
		}
		var err error
		if spec.width, err = num("width"); err != nil {
			return "", err
		}
		spec.prec = -1
		if i < len(format) && format[i] == '.' {
			i++
			if spec.prec, err = num("precision"); err != nil {
				return "", err
			}
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		spec.verb = format[i]
		if spec.verb == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if arg, err = take(); err != nil {
				return "", err
			}
		}
		s, err := r.formatOne(arg, &spec, escape, line)
		if err != nil {
			return "", err
		}
		if err := r.charge(len(s), line); err != nil {
			return "", err
		}
		if b.Len()+len(s) > MaxOutputBytes {
			return "", limitError(line, "the template built a string of more than %d bytes", MaxOutputBytes)
		}
		b.WriteString(s)
	}
	if next < len(pos) && mapping == nil && !usedMapping {
		return "", errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

type fmtSpec struct {
	left, plus, space, alt, zero bool
	width, prec                  int
	verb                         byte
}

func (r *renderer) formatOne(arg value, spec *fmtSpec, escape bool, line int) (string, error) {
	if spec.prec > maxFormatPrecision {
		return "", limitError(line, "a precision of more than %d in a format string", maxFormatPrecision)
	}
	if err := r.charge(spec.width, line); err != nil {
		return "", err
	}
	var body, sign string
	numeric := true
	switch spec.verb {
	case 's', 'r', 'a':
		numeric = false
		var s string
		var err error
		if spec.verb == 's' {
			s, err = r.str(arg, line)
		} else {
			w := newTextWriter()
			err = writeRepr(w, arg, 0, nil)
			if err == nil {
				err = w.err()
			}
			s = string(w.b)
			if spec.verb == 'a' {
				s = asciiEscape(s)
			}
		}
		if err != nil {
			return "", err
		}
		if _, isM := arg.(markup); escape && (!isM || spec.verb != 's') {
			if s, err = r.escape(s, line); err != nil {
				return "", err
			}
		}
		if spec.prec >= 0 && runeLen(s) > spec.prec {
			s = s[:byteOffset(s, spec.prec)]
		}
		body = s
	case 'd', 'i', 'u', 'o', 'x', 'X':
		i, f, isF, ok := number(arg)
		if !ok || (isF && spec.verb != 'd' && spec.verb != 'i' && spec.verb != 'u') {
			want := "a real number"
			if spec.verb != 'd' && spec.verb != 'i' && spec.verb != 'u' {
				want = "an integer"
			}
			return "", fmt.Errorf("%%%c format: %s is required, not %s", spec.verb, want, typeName(arg))
		}
		if isF {
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return "", fmt.Errorf("cannot convert float %s to integer", pyFloatRepr(f))
			}
			if math.Abs(f) >= 1<<63 {
				return "", errIntOverflow
			}
			i = int64(f)
		}
		if i < 0 {
			sign = "-"
		}
		u := absU(i)
		switch spec.verb {
		case 'o':
			body = strconv.FormatUint(u, 8)
		case 'x', 'X':
			body = strconv.FormatUint(u, 16)
		default:
			body = strconv.FormatUint(u, 10)
		}
		if spec.prec > len(body) {
			body = strings.Repeat("0", spec.prec-len(body)) + body
		}
		if spec.alt && spec.verb != 'd' && spec.verb != 'i' && spec.verb != 'u' {
			body = "0" + string(spec.verb) + body
		}
		if spec.verb == 'X' {
			body = strings.ToUpper(body)
		}
	case 'e', 'E', 'f', 'F', 'g', 'G':
		i, f, isF, ok := number(arg)
		if !ok {
			return "", fmt.Errorf("must be real number, not %s", typeName(arg))
		}
		if !isF {
			f = float64(i)
		}
		if math.Signbit(f) && !math.IsNaN(f) {
			sign = "-"
			f = -f
		}
		prec := spec.prec
		if prec < 0 {
			prec = 6
		}
		body = formatFloat(f, spec.verb, prec, spec.alt)
		if math.IsInf(f, 0) || math.IsNaN(f) {
			numeric = false
		}
	case 'c':
		numeric = false
		switch x := arg.(type) {
		case int64:
			if x < 0 || x > 0x10ffff || (x >= 0xd800 && x < 0xe000) {
				return "", errors.New("%c arg not in range(0x110000)")
			}
			body = string(rune(x))
		case string:
			if utf8.RuneCountInString(x) != 1 {
				return "", errors.New("%c requires int or char")
			}
			body = x
		default:
			return "", errors.New("%c requires int or char")
		}
	default:
		return "", fmt.Errorf("unsupported format character %s", reprQuick(string(spec.verb)))
	}
	if sign == "" && (spec.verb != 's' && spec.verb != 'r' && spec.verb != 'a' && spec.verb != 'c') {
		if spec.plus {
			sign = "+"
		} else if spec.space {
			sign = " "
		}
	}
	pad := spec.width - runeLen(sign) - runeLen(body)
	switch {
	case pad <= 0:
		return sign + body, nil
	case spec.left:
		return sign + body + strings.Repeat(" ", pad), nil
	case spec.zero && numeric:
		prefix := ""
		if spec.alt && (spec.verb == 'o' || spec.verb == 'x' || spec.verb == 'X') {
			prefix, body = body[:2], body[2:]
		}
		return sign + prefix + strings.Repeat("0", pad) + body, nil
	}
	return strings.Repeat(" ", pad) + sign + body, nil
}

// formatFloat formats a non-negative float for %e, %f and %g as Python
// does.
func formatFloat(f float64, verb byte, prec int, alt bool) string {
	upper := verb == 'E' || verb == 'F' || verb == 'G'
	if math.IsInf(f, 0) || math.IsNaN(f) {
		s := "inf"
		if math.IsNaN(f) {
			s = "nan"
		}
		if upper {
			s = strings.ToUpper(s)
		}
		return s
	}
	var s string
	switch verb {
	case 'f', 'F':
		s = strconv.FormatFloat(f, 'f', prec, 64)
		if alt && prec == 0 {
			s += "."
		}
	case 'e', 'E':
		s = strconv.FormatFloat(f, 'e', prec, 64)
		if alt && prec == 0 {
			m, e, _ := strings.Cut(s, "e")
			s = m + ".e" + e
		}
	default:
		if prec == 0 {
			prec = 1
		}
		e := strconv.FormatFloat(f, 'e', prec-1, 64)
		_, expStr, _ := strings.Cut(e, "e")
		exp, _ := strconv.Atoi(expStr)
		if exp >= -4 && exp < prec {
			s = strconv.FormatFloat(f, 'f', prec-1-exp, 64)
			if !alt && strings.Contains(s, ".") {
				s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
			} else if alt && !strings.Contains(s, ".") {
				s += "."
			}
		} else {
			m, ex, _ := strings.Cut(e, "e")
			if !alt && strings.Contains(m, ".") {
				m = strings.TrimRight(strings.TrimRight(m, "0"), ".")
			} else if alt && !strings.Contains(m, ".") {
				m += "."
			}
			s = m + "e" + ex
		}
	}
	if upper {
		s = strings.ToUpper(s)
	}
	return s
}

// asciiEscape is what ascii() adds to repr(): characters beyond ASCII as
// \x, \u or \U escapes.
func asciiEscape(s string) string {
	if isASCII(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}
