package chat

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The global functions of transformers' template environment: Jinja's
// range, dict and namespace (the sandbox's range, capped at MaxRange), and
// transformers' raise_exception and strftime_now.
var globals map[string]value

func init() {
	globals = map[string]value{
		"range":           &builtin{name: "range", call: globalRange},
		"dict":            &builtin{name: "dict", call: globalDict},
		"namespace":       &builtin{name: "namespace", call: globalNamespace},
		"raise_exception": &builtin{name: "raise_exception", call: globalRaise},
		"strftime_now":    &builtin{name: "strftime_now", call: globalStrftime},
	}
	for _, name := range []string{"cycler", "joiner", "lipsum"} {
		name := name
		globals[name] = &builtin{name: name, call: func(*renderer, int, []value, []kwarg) (value, error) {
			return nil, fmt.Errorf("%s() is not supported by this chat template renderer", name)
		}}
	}
}

func globalRange(_ *renderer, line int, pos []value, kw []kwarg) (value, error) {
	if len(kw) > 0 {
		return nil, errors.New("range() takes no keyword arguments")
	}
	var n [3]int64
	for i, v := range pos {
		if i == 3 {
			return nil, fmt.Errorf("range expected at most 3 arguments, got %d", len(pos))
		}
		x, ok := indexValue(v)
		if err := bigIntError(v); err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%s object cannot be interpreted as an integer", reprQuick(typeName(v)))
		}
		n[i] = x
	}
	var r rangeV
	switch len(pos) {
	case 0:
		return nil, errors.New("range expected at least 1 argument, got 0")
	case 1:
		r = rangeV{0, n[0], 1}
	case 2:
		r = rangeV{n[0], n[1], 1}
	default:
		if n[2] == 0 {
			return nil, errors.New("range() arg 3 must not be zero")
		}
		r = rangeV{n[0], n[1], n[2]}
	}
	if r.len() > MaxRange {
		return nil, limitError(line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MaxRange)
	}
	return r, nil
}

// dictFrom builds dict(*pos, **kw): from a mapping or from pairs, then the
// keywords.
func (r *renderer) dictFrom(pos []value, kw []kwarg, line int) (*dict, error) {
	d := newDict()
	if len(pos) > 1 {
		return nil, fmt.Errorf("dict expected at most 1 argument, got %d", len(pos))
	}
	if len(pos) == 1 {
		switch src := pos[0].(type) {
		case *dict:
			for i, k := range src.keys {
				if err := d.set(k, src.vals[i]); err != nil {
					return nil, err
				}
			}
		case *namespace:
			return nil, errors.New("'Namespace' object is not iterable")
		default:
			items, err := r.iterate(src, line)
			if err != nil {
				return nil, err
			}
			for i, it := range items {
				pair, err := r.iterate(it, line)
				if err != nil {
					return nil, fmt.Errorf("cannot convert dictionary update sequence element #%d to a sequence", i)
				}
				if len(pair) != 2 {
					return nil, fmt.Errorf("dictionary update sequence element #%d has length %d; 2 is required", i, len(pair))
				}
				if err := d.set(pair[0], pair[1]); err != nil {
					return nil, err
				}
			}
		}
	}
	for _, k := range kw {
		if err := d.set(k.name, k.val); err != nil {
			return nil, err
		}
	}
	return d, r.charge(80*d.len(), line)
}

func globalDict(r *renderer, line int, pos []value, kw []kwarg) (value, error) {
	return r.dictFrom(pos, kw, line)
}

func globalNamespace(r *renderer, line int, pos []value, kw []kwarg) (value, error) {
	d, err := r.dictFrom(pos, kw, line)
	if err != nil {
		return nil, err
	}
	return &namespace{attrs: d}, nil
}

// globalRaise is transformers' raise_exception(message): the template's own
// error, which Render returns with the template's message and line.
func globalRaise(r *renderer, line int, pos []value, kw []kwarg) (value, error) {
	msg := ""
	if len(pos) > 0 {
		var err error
		if msg, err = pyStr(pos[0]); err != nil {
			return nil, err
		}
	}
	e := newError(line, "%s", msg)
	e.Raised = true
	return nil, e
}

// clock is strftime_now's time; tests pin it.
var clock = time.Now

func globalStrftime(r *renderer, line int, pos []value, kw []kwarg) (value, error) {
	if len(pos) != 1 || len(kw) > 0 {
		return nil, errors.New("strftime_now() takes exactly one argument")
	}
	f, ok := asString(pos[0])
	if !ok {
		return nil, fmt.Errorf("strftime() argument 1 must be str, not %s", typeName(pos[0]))
	}
	if err := r.charge(16*len(f), line); err != nil {
		return nil, err
	}
	return strftime(clock(), f), nil
}

// strftime formats t with the common C strftime directives.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
