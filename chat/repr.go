package chat

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// textWriter builds a string of at most limit bytes; past the limit it
// stops writing and err reports it, so that a huge repr or tojson stops
// early instead of filling memory.
type textWriter struct {
	b     []byte
	limit int
	over  bool
}

func newTextWriter() *textWriter { return &textWriter{limit: MaxOutputBytes} }

func (w *textWriter) str(s string) {
	if w.over {
		return
	}
	if len(w.b)+len(s) > w.limit {
		w.over = true
		return
	}
	w.b = append(w.b, s...)
}

func (w *textWriter) byte(c byte) {
	if w.over {
		return
	}
	if len(w.b)+1 > w.limit {
		w.over = true
		return
	}
	w.b = append(w.b, c)
}

func (w *textWriter) rune(r rune) {
	var buf [utf8.UTFMax]byte
	w.str(string(buf[:utf8.EncodeRune(buf[:], r)]))
}

func (w *textWriter) err() error {
	if w.over {
		return limitError(0, "a string longer than %d bytes", w.limit)
	}
	return nil
}

// pyStr is Python's str(v) as Jinja prints it: Undefined is "", None is
// "None", containers are their repr.
func pyStr(v value) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case markup:
		return string(x), nil
	case *undefined:
		return "", nil
	case noneType:
		return "None", nil
	case bool:
		if x {
			return "True", nil
		}
		return "False", nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return pyFloatRepr(x), nil
	case bigInt:
		return string(x), nil
	}
	w := newTextWriter()
	if err := writeRepr(w, v, 0, nil); err != nil {
		return "", err
	}
	return string(w.b), w.err()
}

// writeRepr writes Python's repr(v). seen holds the namespaces being
// written, which repr as {...} when met again, as Python's reprlib guard
// does.
func writeRepr(w *textWriter, v value, depth int, seen map[*namespace]bool) error {
	if depth > 2*MaxValueDepth {
		return limitError(0, "a value nested too deeply to write")
	}
	if w.over {
		return nil
	}
	switch x := v.(type) {
	case string:
		writeStrRepr(w, x)
	case markup:
		w.str("Markup(")
		writeStrRepr(w, string(x))
		w.byte(')')
	case *undefined:
		w.str("Undefined")
	case noneType, bool, int64, float64, bigInt:
		s, _ := pyStr(x)
		w.str(s)
	case *list:
		open, close := "[", "]"
		if x.tuple {
			open, close = "(", ")"
		}
		w.str(open)
		for i, it := range x.items {
			if i > 0 {
				w.str(", ")
			}
			if err := writeRepr(w, it, depth+1, seen); err != nil {
				return err
			}
			if w.over {
				return nil
			}
		}
		if x.tuple && len(x.items) == 1 {
			w.byte(',')
		}
		w.str(close)
	case *dict:
		return writeDictRepr(w, x, depth, seen)
	case *namespace:
		if seen[x] {
			w.str("<Namespace {...}>")
			return nil
		}
		if seen == nil {
			seen = map[*namespace]bool{}
		}
		seen[x] = true
		defer delete(seen, x)
		w.str("<Namespace ")
		if err := writeDictRepr(w, x.attrs, depth, seen); err != nil {
			return err
		}
		w.byte('>')
	case rangeV:
		if x.step == 1 {
			fmt.Fprintf(w, "range(%d, %d)", x.start, x.stop)
		} else {
			fmt.Fprintf(w, "range(%d, %d, %d)", x.start, x.stop, x.step)
		}
	case *dictView:
		w.str("dict_" + x.kind + "([")
		for i := range x.d.keys {
			if i > 0 {
				w.str(", ")
			}
			var err error
			switch x.kind {
			case "keys":
				err = writeRepr(w, x.d.keys[i], depth+1, seen)
			case "values":
				err = writeRepr(w, x.d.vals[i], depth+1, seen)
			default:
				w.byte('(')
				if err = writeRepr(w, x.d.keys[i], depth+1, seen); err == nil {
					w.str(", ")
					err = writeRepr(w, x.d.vals[i], depth+1, seen)
				}
				w.byte(')')
			}
			if err != nil {
				return err
			}
		}
		w.str("])")
	case *generator:
		// Python adds the object's address, which no two runs share.
		w.str("<generator object " + x.name + ">")
	case *macro:
		w.str("<Macro " + pyStrRepr(x.name) + ">")
	case *loopCtx:
		fmt.Fprintf(w, "<LoopContext %d/%d>", x.index+1, x.seq.n)
	case *builtin:
		w.str("<function " + x.name + ">")
	case *boundMethod:
		w.str("<built-in method " + x.name + " of " + typeName(x.recv) + " object>")
	default:
		return fmt.Errorf("cannot write a %T", v)
	}
	return nil
}

// Write lets fmt.Fprintf write into a textWriter.
func (w *textWriter) Write(p []byte) (int, error) {
	w.str(string(p))
	return len(p), nil
}

func writeDictRepr(w *textWriter, d *dict, depth int, seen map[*namespace]bool) error {
	w.byte('{')
	for i, k := range d.keys {
		if i > 0 {
			w.str(", ")
		}
		if err := writeRepr(w, k, depth+1, seen); err != nil {
			return err
		}
		w.str(": ")
		if err := writeRepr(w, d.vals[i], depth+1, seen); err != nil {
			return err
		}
		if w.over {
			return nil
		}
	}
	w.byte('}')
	return nil
}

// pyStrRepr is Python's repr of a str.
func pyStrRepr(s string) string {
	w := &textWriter{limit: 4*len(s) + 16}
	writeStrRepr(w, s)
	return string(w.b)
}

// writeStrRepr writes repr(s): single quotes unless s has ' and no ",
// backslash escapes for the quote, \\, \t \n \r, and \x \u \U escapes for
// characters that are not printable.
func writeStrRepr(w *textWriter, s string) {
	quote := byte('\'')
	if containsByte(s, '\'') && !containsByte(s, '"') {
		quote = '"'
	}
	w.byte(quote)
	start := 0
	flush := func(i int) {
		if start < i {
			w.str(s[start:i])
		}
	}
	for i, r := range s {
		var esc string
		switch {
		case r == rune(quote) || r == '\\':
			esc = "\\" + string(r)
		case r == '\t':
			esc = `\t`
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case r < 0x20 || r == 0x7f:
			esc = fmt.Sprintf(`\x%02x`, r)
		case r < 0x80 || isPrintable(r):
			continue
		case r < 0x100:
			esc = fmt.Sprintf(`\x%02x`, r)
		case r < 0x10000:
			esc = fmt.Sprintf(`\u%04x`, r)
		default:
			esc = fmt.Sprintf(`\U%08x`, r)
		}
		flush(i)
		w.str(esc)
		start = i + utf8.RuneLen(r)
	}
	flush(len(s))
	w.byte(quote)
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// isPrintable is Python's str.isprintable for one character: assigned, and
// not a control, format, surrogate, private-use or separator character
// (except the space).
func isPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C) {
		return false // unassigned
	}
	return !unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs)
}
