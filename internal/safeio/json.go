package safeio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// MaxJSONDepth bounds how deeply the files DecodeJSON reads may nest
// (a config is three levels deep, an index two).
const MaxJSONDepth = 64

// MaxJSONMembers bounds the members of one object in the files DecodeJSON
// reads, so that the keys held to find duplicates stay bounded too (the
// largest index lists about 100,000 tensors).
const MaxJSONMembers = 1 << 20

// ReadJSON reads the file at path, at most limit bytes as the file holds
// them (what names it in the limit's message, e.g. "config.json"), and
// decodes it with DecodeJSON. Every error names the file.
func ReadJSON(path string, limit int64, what string, v any) error {
	data, err := ReadCapped(path, limit, what)
	if err != nil {
		return err
	}
	if err := DecodeJSON(data, v); err != nil {
		return fmt.Errorf("%s: %w", Clean(path), err)
	}
	return nil
}

// DecodeJSON decodes one JSON document into v as a strict reader would
// (Python's json.loads, serde_json), and refuses what encoding/json would
// quietly accept:
//
//   - invalid UTF-8 and lone surrogate escapes (CheckJSONText);
//   - a key twice in one object, at any depth (encoding/json keeps the
//     last; transformers' loaders differ), named with its object;
//   - a key that differs from one of v's only in case (encoding/json
//     matches keys case-insensitively; transformers does not);
//   - null where v holds a plain number, string or boolean (encoding/json
//     leaves the zero value, so [null] read as [0]);
//   - a value of the wrong type, named by its key path in JSON's words:
//     `mlp_only_layers[1]: want an integer, got JSON number 1.5`;
//   - nesting deeper than MaxJSONDepth, an object of more than
//     MaxJSONMembers members, and trailing data.
//
// Keys v does not name, and values held as json.RawMessage or any, are
// checked for the text rules and duplicates only.
func DecodeJSON(data []byte, v any) error {
	if err := CheckJSONText(data); err != nil {
		return err
	}
	if !json.Valid(data) { // checked before the walk, which then trusts the syntax
		var raw json.RawMessage
		return fmt.Errorf("invalid JSON: %w", json.Unmarshal(data, &raw))
	}
	var t reflect.Type
	if v != nil {
		t = reflect.TypeOf(v)
		if t.Kind() == reflect.Pointer {
			t = t.Elem() // the document itself is not optional
		}
	}
	w := &jsonWalker{data: data}
	if err := w.value(t, jsonPath{"", -1}, 0); err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) { // a case the walk does not foresee
			return fmt.Errorf("%s: want %s, got JSON %s", te.Field, JSONKind(te.Type), Clean(te.Value))
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	return nil
}

// jsonWalker checks a syntactically valid document byte by byte against
// the Go type it will be decoded into (nil: any value). It allocates only
// for object keys, so a long list costs no more than its bytes.
type jsonWalker struct {
	data []byte
	i    int
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

func (w *jsonWalker) skipSpace() {
	for w.i < len(w.data) && (w.data[w.i] == ' ' || w.data[w.i] == '\t' || w.data[w.i] == '\n' || w.data[w.i] == '\r') {
		w.i++
	}
}

// str steps over the string at w.i and returns its text with the quotes.
func (w *jsonWalker) str() []byte {
	start := w.i
	for w.i++; w.data[w.i] != '"'; w.i++ {
		if w.data[w.i] == '\\' {
			w.i++
		}
	}
	w.i++
	return w.data[start:w.i]
}

// scalar steps over a number or literal and returns its text.
func (w *jsonWalker) scalar() []byte {
	start := w.i
	for w.i < len(w.data) && !strings.ContainsRune(" \t\n\r,]}", rune(w.data[w.i])) {
		w.i++
	}
	return w.data[start:w.i]
}

// jsonPath is where a value sits: its parent's path and, in an array, its
// index. It is spelled out only for a message, so a long list costs
// nothing per element.
type jsonPath struct {
	parent string
	index  int // -1: parent is the value's own path
}

func (p jsonPath) String() string {
	if p.index < 0 {
		return p.parent
	}
	return fmt.Sprintf("%s[%d]", p.parent, p.index)
}

func (w *jsonWalker) value(t reflect.Type, path jsonPath, depth int) error {
	if depth > MaxJSONDepth {
		return fmt.Errorf("%snested deeper than %d levels", at(path.String()), MaxJSONDepth)
	}
	nullable := t == nil || t == rawMessageType
	for t != nil && t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	if t == rawMessageType || t != nil && t.Kind() == reflect.Interface {
		t = nil // any value: text and duplicates only
	}
	mismatch := func(got string) error {
		return fmt.Errorf("%swant %s, got JSON %s", at(path.String()), JSONKind(t), got)
	}
	kind := reflect.Invalid
	if t != nil {
		kind = t.Kind()
	}
	w.skipSpace()
	switch c := w.data[w.i]; c {
	case '[':
		if t != nil && kind != reflect.Slice && kind != reflect.Array {
			return mismatch("array")
		}
		return w.array(t, path, depth)
	case '{':
		if t != nil && kind != reflect.Struct && kind != reflect.Map {
			return mismatch("object")
		}
		return w.object(t, path, depth)
	case '"':
		w.str()
		if t != nil && kind != reflect.String {
			return mismatch("string")
		}
	default:
		lit := w.scalar()
		switch string(lit) {
		case "null":
			if !nullable && kind != reflect.Slice && kind != reflect.Map {
				return mismatch("null")
			}
		case "true", "false":
			if t != nil && kind != reflect.Bool {
				return mismatch("boolean")
			}
		default:
			if t != nil {
				return checkNumber(t, string(lit), mismatch)
			}
		}
	}
	return nil
}

// next steps over a comma and reports whether another element follows
// before the closing bracket or brace.
func (w *jsonWalker) next() bool {
	w.skipSpace()
	if w.data[w.i] == ',' {
		w.i++
		return true
	}
	if w.data[w.i] == ']' || w.data[w.i] == '}' {
		w.i++
	}
	return false
}

func (w *jsonWalker) array(t reflect.Type, path jsonPath, depth int) error {
	parent := path.String()
	var elem reflect.Type
	if t != nil {
		elem = t.Elem()
	}
	w.i++ // [
	if w.skipSpace(); w.data[w.i] == ']' {
		w.i++
		return nil
	}
	for i := 0; ; i++ {
		if err := w.value(elem, jsonPath{parent, i}, depth+1); err != nil {
			return err
		}
		if !w.next() {
			return nil
		}
	}
}

func (w *jsonWalker) object(t reflect.Type, at jsonPath, depth int) error {
	path := at.String()
	w.i++ // {
	if w.skipSpace(); w.data[w.i] == '}' {
		w.i++
		return nil
	}
	seen := make(map[string]bool)
	for {
		w.skipSpace()
		raw := w.str()
		key := string(raw[1 : len(raw)-1])
		if bytes.IndexByte(raw, '\\') >= 0 {
			_ = json.Unmarshal(raw, &key) // valid: checked above
		}
		if seen[key] {
			where := "at the top level"
			if path != "" {
				where = "in " + path
			}
			return fmt.Errorf("the key %s appears twice %s", Quote(key), where)
		}
		seen[key] = true
		if len(seen) > MaxJSONMembers {
			where := "the top-level object"
			if path != "" {
				where = path
			}
			return fmt.Errorf("%s has more than %d members (see docs/limits.md)", where, MaxJSONMembers)
		}
		w.skipSpace()
		w.i++ // :
		var vt reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			vt = t.Elem()
		default:
			f, near := field(t, key)
			if near != "" {
				return fmt.Errorf("the key %s is not %s: keys are case-sensitive", Quote(join(path, key)), near)
			}
			vt = f
		}
		if err := w.value(vt, jsonPath{join(path, key), -1}, depth+1); err != nil {
			return err
		}
		if !w.next() {
			return nil
		}
	}
}

// field finds the struct field that reads key: its type, or the key it
// would have matched under encoding/json's case folding.
func field(t reflect.Type, key string) (reflect.Type, string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "":
			name = f.Name
		}
		if name == key {
			return f.Type, ""
		}
		if strings.EqualFold(name, key) {
			return nil, name
		}
	}
	return nil, ""
}

// checkNumber accepts a number literal where t can hold it.
func checkNumber(t reflect.Type, lit string, mismatch func(string) error) error {
	got := "number " + Clean(lit)
	var err error
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		_, err = strconv.ParseInt(lit, 10, t.Bits())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, err = strconv.ParseUint(lit, 10, t.Bits())
	case reflect.Float32, reflect.Float64:
		_, err = strconv.ParseFloat(lit, t.Bits())
	default:
		return mismatch(got)
	}
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			got += " (out of range)"
		}
		return mismatch(got)
	}
	return nil
}

// join extends a key path; a key that is not a plain name is quoted.
func join(path, key string) string {
	if !plainKey(key) {
		key = Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func plainKey(k string) bool {
	if k == "" || len(k) > maxShown {
		return false
	}
	for _, c := range k {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// at prefixes a message with its key path, if any.
func at(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

// JSONKind names what a Go type decodes from, in JSON's words, for
// messages: "an array of integers" rather than []int.
func JSONKind(t reflect.Type) string {
	n := jsonNoun(t)
	if strings.ContainsRune("aeiou", rune(n[0])) {
		return "an " + n
	}
	return "a " + n
}

func jsonNoun(t reflect.Type) string {
	if t == nil {
		return "value of another type"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonNoun(t.Elem())
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice, reflect.Array:
		return "array of " + jsonNoun(t.Elem()) + "s"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	}
	return "value of another type"
}
