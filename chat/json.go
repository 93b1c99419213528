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
	"unicode/utf8"

	"github.com/qwenref/qwenref/internal/safeio"
)

// maxJSONDepth bounds nesting in messages, tools and Vars.
const maxJSONDepth = 100

// decodeJSON turns JSON into template values as Python's json.loads does:
// objects become dicts (key order kept; a repeated key keeps its first
// place and its last value), arrays lists, integers int (their digits
// when beyond int64), other numbers float. Invalid UTF-8 and escaped lone
// surrogates, which json.loads would not turn into a clean str, are
// refused.
func decodeJSON(data []byte) (value, error) {
	if err := safeio.CheckJSONText(data); err != nil {
		return nil, err
	}
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

func decodeValue(dec *json.Decoder, depth int) (value, error) {
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
			d := newDict()
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
				if err := d.set(k, v); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return newList(items, false)
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		return parseJSONNumber(t.String())
	case nil:
		return none, nil
	default:
		return t, nil // string or bool
	}
}

func parseJSONNumber(s string) (value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		return bigInt(strings.TrimPrefix(s, "+")), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, err
	}
	return f, nil // beyond float64: ±inf, as float() gives
}

// goValue turns a Go value from Input.Vars into a template value: JSON
// (json.RawMessage, json.Number) as json.loads reads it, Go maps with their
// keys sorted, floats as floats, and anything else through its JSON form.
func goValue(v any, depth int) (value, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
	}
	switch x := v.(type) {
	case nil:
		return none, nil
	case bool:
		return x, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, fmt.Errorf("invalid UTF-8 in %q", excerpt(x))
		}
		return x, nil
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case float64:
		return x, nil
	case float32:
		return float64(x), nil
	case json.Number:
		return parseJSONNumber(x.String())
	case json.RawMessage:
		return decodeJSON(x)
	case []any:
		items := make([]value, len(x))
		for i, it := range x {
			var err error
			if items[i], err = goValue(it, depth+1); err != nil {
				return nil, err
			}
		}
		return newList(items, false)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := newDict()
		for _, k := range keys {
			val, err := goValue(x[k], depth+1)
			if err != nil {
				return nil, err
			}
			if err := d.set(k, val); err != nil {
				return nil, err
			}
		}
		return d, nil
	}
	if rv := reflect.ValueOf(v); rv.Kind() >= reflect.Int && rv.Kind() <= reflect.Uint64 {
		return goValue(json.Number(fmt.Sprint(v)), depth)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(b)
}

// jsonOptions are json.dumps's arguments that transformers' tojson passes.
type jsonOptions struct {
	ensureASCII, sortKeys bool
	indent                *string // nil: all on one line
	itemSep, keySep       string
}

// dumpJSON writes v as Python's json.dumps(v, **o) does.
func dumpJSON(w *textWriter, v value, o *jsonOptions, level int) error {
	if level > 2*MaxValueDepth {
		return limitError(0, "a value nested too deeply for tojson")
	}
	if w.over {
		return nil
	}
	switch x := v.(type) {
	case noneType:
		w.str("null")
	case bool:
		if x {
			w.str("true")
		} else {
			w.str("false")
		}
	case int64:
		w.str(strconv.FormatInt(x, 10))
	case bigInt:
		w.str(string(x))
	case float64:
		w.str(jsonFloat(x))
	case string:
		writeJSONString(w, x, o.ensureASCII)
	case markup:
		writeJSONString(w, string(x), o.ensureASCII)
	case *list:
		if len(x.items) == 0 {
			w.str("[]")
			return nil
		}
		w.byte('[')
		for i, it := range x.items {
			if i > 0 {
				w.str(o.itemSep)
			}
			o.newline(w, level+1)
			if err := dumpJSON(w, it, o, level+1); err != nil {
				return err
			}
			if w.over {
				return nil
			}
		}
		o.newline(w, level)
		w.byte(']')
	case *dict:
		return dumpJSONObject(w, x, o, level)
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func (o *jsonOptions) newline(w *textWriter, level int) {
	if o.indent == nil {
		return
	}
	w.byte('\n')
	for range level {
		w.str(*o.indent)
		if w.over {
			return
		}
	}
}

func dumpJSONObject(w *textWriter, d *dict, o *jsonOptions, level int) error {
	if d.len() == 0 {
		w.str("{}")
		return nil
	}
	type pair struct {
		key string
		raw value
		val value
	}
	pairs := make([]pair, d.len())
	for i, k := range d.keys {
		var ks string
		switch x := k.(type) {
		case string:
			ks = x
		case markup:
			ks = string(x)
		case int64:
			ks = strconv.FormatInt(x, 10)
		case bigInt:
			ks = string(x)
		case float64:
			ks = jsonFloat(x)
		case bool:
			ks = map[bool]string{true: "true", false: "false"}[x]
		case noneType:
			ks = "null"
		default:
			return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
		}
		pairs[i] = pair{ks, k, d.vals[i]}
	}
	if o.sortKeys {
		var sortErr error
		budget := MaxSteps
		sort.SliceStable(pairs, func(i, j int) bool {
			c, err := pyCmp(pairs[i].raw, pairs[j].raw, &budget)
			if err != nil && sortErr == nil {
				sortErr = fmt.Errorf("'<' not supported between instances of %s and %s", reprQuick(typeName(pairs[i].raw)), reprQuick(typeName(pairs[j].raw)))
			}
			return c < 0
		})
		if sortErr != nil {
			return sortErr
		}
	}
	w.byte('{')
	for i, p := range pairs {
		if i > 0 {
			w.str(o.itemSep)
		}
		o.newline(w, level+1)
		writeJSONString(w, p.key, o.ensureASCII)
		w.str(o.keySep)
		if err := dumpJSON(w, p.val, o, level+1); err != nil {
			return err
		}
		if w.over {
			return nil
		}
	}
	o.newline(w, level)
	w.byte('}')
	return nil
}

// jsonFloat is float.__repr__ as json.dumps writes it: NaN and
// Infinity for the values JSON lacks.
func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

// writeJSONString quotes s as json.dumps does: ", \ and control characters
// escaped, and with ensure_ascii everything beyond ASCII as \uXXXX (pairs
// of them past U+FFFF).
func writeJSONString(w *textWriter, s string, ensureASCII bool) {
	w.byte('"')
	start := 0
	for i, r := range s {
		size := utf8.RuneLen(r)
		var esc string
		switch {
		case r == '"':
			esc = `\"`
		case r == '\\':
			esc = `\\`
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case r == '\t':
			esc = `\t`
		case r == '\b':
			esc = `\b`
		case r == '\f':
			esc = `\f`
		case r < 0x20:
			esc = fmt.Sprintf(`\u%04x`, r)
		case ensureASCII && r > 0x7f:
			if r > 0xffff {
				r -= 0x10000
				esc = fmt.Sprintf(`\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				esc = fmt.Sprintf(`\u%04x`, r)
			}
		default:
			continue
		}
		if start < i {
			w.str(s[start:i])
		}
		w.str(esc)
		start = i + size
	}
	if start < len(s) {
		w.str(s[start:])
	}
	w.byte('"')
}
