package safeio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// MaxJSONDepth bounds how deeply the files DecodeJSON reads may nest
// (a config is three levels deep, an index two).
const MaxJSONDepth = 64

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
//   - nesting deeper than MaxJSONDepth and trailing data.
//
// Keys v does not name, and values held as json.RawMessage or any, are
// checked for the text rules and duplicates only.
func DecodeJSON(data []byte, v any) error {
	if err := CheckJSONText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var t reflect.Type
	if v != nil {
		t = reflect.TypeOf(v)
		if t.Kind() == reflect.Pointer {
			t = t.Elem() // the document itself is not optional
		}
	}
	w := &jsonWalker{dec: dec}
	if err := w.value(t, "", 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("invalid JSON: trailing data after the document")
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

// jsonWalker checks a document token by token against the Go type it
// will be decoded into (nil: any value).
type jsonWalker struct{ dec *json.Decoder }

var rawMessageType = reflect.TypeFor[json.RawMessage]()

func (w *jsonWalker) value(t reflect.Type, path string, depth int) error {
	if depth > MaxJSONDepth {
		return fmt.Errorf("%snested deeper than %d levels", at(path), MaxJSONDepth)
	}
	tok, err := w.dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	nullable := t == nil || t == rawMessageType
	for t != nil && t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	if t == rawMessageType || t != nil && t.Kind() == reflect.Interface {
		t = nil // any value: text and duplicates only
	}
	mismatch := func(got string) error {
		return fmt.Errorf("%swant %s, got JSON %s", at(path), JSONKind(t), got)
	}
	kind := reflect.Invalid
	if t != nil {
		kind = t.Kind()
	}
	switch tok := tok.(type) {
	case nil:
		if !nullable && kind != reflect.Slice && kind != reflect.Map {
			return mismatch("null")
		}
	case bool:
		if t != nil && kind != reflect.Bool {
			return mismatch("boolean")
		}
	case string:
		if t != nil && kind != reflect.String {
			return mismatch("string")
		}
	case json.Number:
		return checkNumber(t, string(tok), mismatch)
	case json.Delim:
		if tok == '[' {
			if t != nil && kind != reflect.Slice && kind != reflect.Array {
				return mismatch("array")
			}
			return w.array(t, path, depth)
		}
		if t != nil && kind != reflect.Struct && kind != reflect.Map {
			return mismatch("object")
		}
		return w.object(t, path, depth)
	}
	return nil
}

func (w *jsonWalker) array(t reflect.Type, path string, depth int) error {
	var elem reflect.Type
	if t != nil {
		elem = t.Elem()
	}
	for i := 0; w.dec.More(); i++ {
		if err := w.value(elem, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // ]
	return err
}

func (w *jsonWalker) object(t reflect.Type, path string, depth int) error {
	seen := make(map[string]bool)
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		key, _ := tok.(string)
		if seen[key] {
			where := "at the top level"
			if path != "" {
				where = "in " + path
			}
			return fmt.Errorf("the key %s appears twice %s", Quote(key), where)
		}
		seen[key] = true
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
		if err := w.value(vt, join(path, key), depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // }
	return err
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
	if t == nil {
		return nil
	}
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
