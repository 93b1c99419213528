package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// maxJSONDepth bounds nesting in messages and tools.
const maxJSONDepth = 100

// decodeJSON turns JSON into template values: objects become exec.Dict (key
// order kept, as a Python dict keeps it), arrays []any, integers int (or
// the literal's digits when beyond int64), other numbers float64.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := exec.Dict{Pairs: []*exec.Pair{}}
			seen := map[string]int{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				// A repeated key keeps its first place and the last value, as json.loads does.
				if i, ok := seen[k]; ok {
					d.Pairs[i].Value = exec.AsValue(v)
					continue
				}
				seen[k] = len(d.Pairs)
				d.Pairs = append(d.Pairs, &exec.Pair{Key: exec.AsValue(k), Value: exec.AsValue(v)})
			}
			_, err := dec.Token()
			return d, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token()
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		s := t.String()
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return int(i), nil
			}
			return bigInt(s), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, err
		}
		return f, nil
	default:
		return t, nil // string, bool or nil
	}
}

// bigInt is an integer literal beyond int64, written back as it came.
type bigInt string

// globals are the functions transformers adds to the template environment.
var globals = map[string]any{
	"raise_exception": func(_ *exec.Evaluator, params *exec.VarArgs) (string, error) {
		return "", fmt.Errorf("the template raised an exception: %s", params.First().String())
	},
	"strftime_now": func(_ *exec.Evaluator, params *exec.VarArgs) (string, error) {
		return strftime(time.Now(), params.First().String()), nil
	},
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

// filterItems is Jinja's items filter, keeping an object's key order.
func filterItems(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	out := [][]any{}
	if in.IsNil() {
		return exec.AsValue(out)
	}
	if d, ok := in.Interface().(exec.Dict); ok {
		for _, p := range d.Pairs {
			out = append(out, []any{p.Key.Interface(), p.Value.Interface()})
		}
		return exec.AsValue(out)
	}
	if !in.IsDict() {
		return exec.AsValue(errors.New("items requires a mapping"))
	}
	for _, k := range in.Keys() {
		v, _ := in.GetItem(k.Interface())
		out = append(out, []any{k.Interface(), v.Interface()})
	}
	return exec.AsValue(out)
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func filterToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	o := dumpOptions{itemSep: ", ", keySep: ": ", indent: -1}
	arg := func(pos int, name string) (*exec.Value, bool) {
		if v, ok := params.KwArgs[name]; ok {
			return v, true
		}
		if pos < len(params.Args) {
			return params.Args[pos], true
		}
		return nil, false
	}
	if v, ok := arg(1, "ensure_ascii"); ok {
		o.ensureASCII = v.IsTrue()
	}
	if v, ok := arg(0, "indent"); ok && !v.IsNil() {
		switch {
		case v.IsInteger():
			o.indent, o.indentStr = v.Integer(), strings.Repeat(" ", max(v.Integer(), 0))
		case v.IsString():
			o.indent, o.indentStr = 1, v.String()
		default:
			return exec.AsValue(fmt.Errorf("tojson: indent must be an integer or a string, got %s", v.String()))
		}
		o.itemSep = ","
	}
	if v, ok := arg(2, "separators"); ok && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 {
			return exec.AsValue(errors.New("tojson: separators must be a pair of strings"))
		}
		o.itemSep, o.keySep = v.Index(0).String(), v.Index(1).String()
	}
	if v, ok := arg(3, "sort_keys"); ok {
		o.sortKeys = v.IsTrue()
	}
	var b strings.Builder
	if err := o.dump(&b, reflect.ValueOf(in.Interface()), 0); err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(b.String())
}

type dumpOptions struct {
	ensureASCII, sortKeys bool
	indent                int // < 0: all on one line
	indentStr             string
	itemSep, keySep       string
}

func (o *dumpOptions) newline(b *strings.Builder, level int) {
	if o.indent < 0 {
		return
	}
	b.WriteByte('\n')
	for range level {
		b.WriteString(o.indentStr)
	}
}

var typeValuePtr = reflect.TypeFor[*exec.Value]()

// dump writes v as Python's json.dumps would.
func (o *dumpOptions) dump(b *strings.Builder, v reflect.Value, level int) error {
	if level > maxJSONDepth {
		return errors.New("value nested too deeply")
	}
	for v.IsValid() && (v.Kind() == reflect.Interface || v.Type() == typeValuePtr) {
		if v.Type() == typeValuePtr {
			if v.IsNil() {
				v = reflect.Value{}
				break
			}
			v = v.Interface().(*exec.Value).Val
			continue
		}
		v = v.Elem()
	}
	if !v.IsValid() {
		b.WriteString("null")
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			b.WriteString("null")
			return nil
		}
		return o.dump(b, v.Elem(), level)
	}
	switch x := v.Interface().(type) {
	case exec.Dict:
		keys := make([]string, len(x.Pairs))
		vals := map[string]*exec.Value{}
		for i, p := range x.Pairs {
			keys[i] = p.Key.String()
			vals[keys[i]] = p.Value
		}
		return o.dumpObject(b, keys, func(k string) reflect.Value { return reflect.ValueOf(vals[k]) }, level)
	case bigInt:
		b.WriteString(string(x))
		return nil
	case string:
		o.dumpString(b, x)
		return nil
	case bool:
		b.WriteString(map[bool]string{true: "true", false: "false"}[x])
		return nil
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		b.WriteString(strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		b.WriteString(pyFloat(v.Float()))
	case reflect.String:
		o.dumpString(b, v.String())
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			o.newline(b, level+1)
			if err := o.dump(b, v.Index(i), level+1); err != nil {
				return err
			}
		}
		o.newline(b, level)
		b.WriteByte(']')
	case reflect.Map:
		keys := make([]string, 0, v.Len())
		byName := map[string]reflect.Value{}
		for _, k := range v.MapKeys() {
			name := fmt.Sprint(k.Interface())
			keys = append(keys, name)
			byName[name] = v.MapIndex(k)
		}
		sort.Strings(keys) // a Go map has no order; sorted is at least stable
		return o.dumpObject(b, keys, func(k string) reflect.Value { return byName[k] }, level)
	default:
		return fmt.Errorf("cannot encode a %s as JSON", v.Type())
	}
	return nil
}

func (o *dumpOptions) dumpObject(b *strings.Builder, keys []string, get func(string) reflect.Value, level int) error {
	if len(keys) == 0 {
		b.WriteString("{}")
		return nil
	}
	if o.sortKeys {
		keys = append([]string(nil), keys...)
		sort.Strings(keys)
	}
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		o.newline(b, level+1)
		o.dumpString(b, k)
		b.WriteString(o.keySep)
		if err := o.dump(b, get(k), level+1); err != nil {
			return err
		}
	}
	o.newline(b, level)
	b.WriteByte('}')
	return nil
}

// dumpString quotes s as json.dumps does: ", \ and control characters
// escaped, and with ensure_ascii everything outside printable ASCII.
func (o *dumpOptions) dumpString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case o.ensureASCII && r > 0x7e:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat is Python's repr of a float: the shortest digits that round-trip,
// fixed notation for decimal exponents -4 ≤ e < 16 (with ".0" when
// integral), else d.ddde±XX.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
