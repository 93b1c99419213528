package chat

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Attribute and item access, indexing and slicing, as Jinja's sandbox
// does them on Python values.

// unsafeAttrs are the attributes the sandbox hides: the methods that would
// change lists and dicts.
var unsafeAttrs = map[string]map[string]bool{
	"dict": {"clear": true, "pop": true, "popitem": true, "setdefault": true, "update": true},
	"list": {"append": true, "clear": true, "pop": true, "reverse": true, "insert": true, "sort": true, "extend": true, "remove": true},
}

func unsafeUndefined(obj value, name string) *undefined {
	return &undefined{name: name, obj: obj, hasObj: true, missing: true,
		hint: fmt.Sprintf("access to attribute %s of %s object is unsafe.", reprQuick(name), reprQuick(typeName(obj)))}
}

// getattr is Jinja's obj.name: the attribute if there is one (a method,
// say), else the item obj["name"], else Undefined.
func (r *renderer) getattr(obj value, name string) (value, error) {
	if u, ok := obj.(*undefined); ok {
		return nil, u.err()
	}
	if strings.HasPrefix(name, "__") && strings.HasSuffix(name, "__") {
		return unsafeUndefined(obj, name), nil
	}
	switch x := obj.(type) {
	case *dict:
		if unsafeAttrs["dict"][name] {
			return unsafeUndefined(obj, name), nil
		}
		if hasMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
		if v, ok := x.getStr(name); ok {
			return v, nil
		}
	case *list:
		if !x.tuple && unsafeAttrs["list"][name] {
			return unsafeUndefined(obj, name), nil
		}
		if hasMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
	case string, markup:
		if hasMethod(obj, name) {
			return &boundMethod{recv: obj, name: name}, nil
		}
	case *namespace:
		if v, ok := x.attrs.getStr(name); ok {
			return v, nil
		}
	case *loopCtx:
		return x.attr(name), nil
	case *macro:
		if name == "name" {
			return x.name, nil
		}
	case *dictView:
		if name == "mapping" {
			return x.d, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getitem is Jinja's obj[key]: the item if there is one, else (for a
// string key) the attribute, else Undefined.
func (r *renderer) getitem(obj value, key value) (value, error) {
	if u, ok := obj.(*undefined); ok {
		return nil, u.err()
	}
	switch x := obj.(type) {
	case *dict:
		if v, ok := x.get(key); ok {
			return v, nil
		}
	case *list, string, markup, rangeV:
		if i, ok := indexValue(key); ok {
			if v, found := indexSeq(obj, i); found {
				return v, nil
			}
			return undefinedAttr(obj, key), nil
		}
	}
	if name, ok := key.(string); ok {
		v, err := r.getattr(obj, name)
		if err != nil {
			return nil, err
		}
		if u, isU := v.(*undefined); isU && u.hint == "" {
			return undefinedAttr(obj, key), nil
		}
		return v, nil
	}
	return undefinedAttr(obj, key), nil
}

// indexValue reads an int (or bool) index.
func indexValue(k value) (int64, bool) {
	switch x := k.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// indexSeq is seq[i] for a list, tuple, string or range, negative i
// counting from the end.
func indexSeq(seq value, i int64) (value, bool) {
	switch x := seq.(type) {
	case *list:
		n := int64(len(x.items))
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return nil, false
		}
		return x.items[i], true
	case string, markup:
		s, _ := asString(x)
		var c string
		if isASCII(s) {
			n := int64(len(s))
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return nil, false
			}
			c = s[i : i+1]
		} else {
			n := int64(utf8.RuneCountInString(s))
			if i < 0 {
				i += n
			}
			if i < 0 || i >= n {
				return nil, false
			}
			off := byteOffset(s, int(i))
			_, size := utf8.DecodeRuneInString(s[off:])
			c = s[off : off+size]
		}
		if _, isM := x.(markup); isM {
			return markup(c), true
		}
		return c, true
	case rangeV:
		n := x.len()
		if i < 0 {
			i += n
		}
		if i < 0 || i >= n {
			return nil, false
		}
		return x.at(i), true
	}
	return nil, false
}

func (r *renderer) evalSlice(obj value, sl *sliceExpr, s *scope, folded bool) (value, error) {
	var bounds [3]*int64
	for i, e := range []expr{sl.start, sl.stop, sl.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, s)
		if err != nil {
			return nil, err
		}
		if _, isNone := v.(noneType); isNone {
			continue
		}
		n, ok := indexValue(v)
		if !ok {
			return nil, fmt.Errorf("slice indices must be integers or None or have an __index__ method")
		}
		bounds[i] = &n
	}
	if u, ok := obj.(*undefined); ok {
		return nil, u.err()
	}
	step := int64(1)
	if bounds[2] != nil {
		step = *bounds[2]
		if step == 0 {
			return nil, fmt.Errorf("slice step cannot be zero")
		}
	}
	var n int64
	switch x := obj.(type) {
	case *list:
		n = int64(len(x.items))
	case string, markup:
		str, _ := asString(x)
		n = int64(runeLen(str))
	case rangeV:
		n = x.len()
	default:
		// jinja2 compiles a slice to Python's own subscript, which raises,
		// except where it folds a constant expression: that goes through
		// its getitem, which gives undefined.
		if folded {
			return undefinedAttr(obj, "slice"), nil
		}
		if _, ok := obj.(*dict); ok {
			return nil, fmt.Errorf("unhashable type: 'slice'")
		}
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	}
	start, count := sliceIndices(n, bounds[0], bounds[1], step)
	if err := r.charge(16*int(count), sl.line); err != nil {
		return nil, err
	}
	switch x := obj.(type) {
	case *list:
		out := make([]value, count)
		for i := range out {
			out[i] = x.items[start+int64(i)*step]
		}
		return newList(out, x.tuple)
	case rangeV:
		return rangeV{start: x.at(start), stop: x.at(start + count*step), step: x.step * step}, nil
	}
	str, _ := asString(obj)
	var b strings.Builder
	if step == 1 {
		b.WriteString(str[byteOffset(str, int(start)):byteOffset(str, int(start+count))])
	} else {
		if err := r.scratch(4*len(str), sl.line); err != nil {
			return nil, err
		}
		rs := []rune(str)
		for i := int64(0); i < count; i++ {
			b.WriteRune(rs[start+i*step])
		}
	}
	if _, isM := obj.(markup); isM {
		return markup(b.String()), nil
	}
	return b.String(), nil
}

// sliceIndices is Python's slice.indices for a sequence of length n: the
// first index and how many items the slice takes.
func sliceIndices(n int64, startP, stopP *int64, step int64) (start, count int64) {
	clamp := func(p *int64, def, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	if step > 0 {
		start = clamp(startP, 0, 0, n)
		stop := clamp(stopP, n, 0, n)
		if stop > start {
			count = (stop - start + step - 1) / step
		}
		return start, count
	}
	start = clamp(startP, n-1, -1, n-1)
	stop := clamp(stopP, -1, -1, n-1)
	if start > stop {
		count = (start-stop-1)/(-step) + 1
	}
	return start, count
}

// loop attributes.
func (l *loopCtx) attr(name string) value {
	n := l.seq.n
	switch name {
	case "index":
		return int64(l.index + 1)
	case "index0":
		return int64(l.index)
	case "revindex":
		return int64(n - l.index)
	case "revindex0":
		return int64(n - l.index - 1)
	case "first":
		return l.index == 0
	case "last":
		return l.index == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(l.depth0 + 1)
	case "depth0":
		return int64(l.depth0)
	case "previtem":
		if l.index == 0 {
			return undefinedHint("there is no previous item")
		}
		return l.seq.at(l.index - 1)
	case "nextitem":
		if l.index+1 >= n {
			return undefinedHint("there is no next item")
		}
		return l.seq.at(l.index + 1)
	case "cycle", "changed":
		return &boundMethod{recv: l, name: name}
	}
	return undefinedAttr(l, name)
}

// constFolded reports whether jinja2 folds obj[sl] at compile time: a
// literal sliced by literal bounds.
func constFolded(obj expr, sl *sliceExpr) bool {
	for _, e := range []expr{obj, sl.start, sl.stop, sl.step} {
		if e != nil && !isLiteral(e) {
			return false
		}
	}
	return true
}

func isLiteral(e expr) bool {
	switch x := e.(type) {
	case *constExpr:
		return true
	case *listExpr:
		for _, it := range x.items {
			if !isLiteral(it) {
				return false
			}
		}
		return true
	case *dictExpr:
		for i := range x.keys {
			if !isLiteral(x.keys[i]) || !isLiteral(x.vals[i]) {
				return false
			}
		}
		return true
	}
	return false
}
