package chat

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The methods templates call on values: Python's str methods, dict.get and
// friends, and the loop's cycle and changed.

var strMethods = map[string]bool{
	"capitalize": true, "center": true, "count": true, "endswith": true, "find": true, "index": true,
	"isalnum": true, "isalpha": true, "isascii": true, "isdecimal": true, "isdigit": true, "islower": true,
	"isnumeric": true, "isspace": true, "isupper": true, "join": true, "ljust": true, "lower": true,
	"lstrip": true, "partition": true, "removeprefix": true, "removesuffix": true, "replace": true,
	"rfind": true, "rindex": true, "rjust": true, "rpartition": true, "rsplit": true, "rstrip": true,
	"split": true, "splitlines": true, "startswith": true, "strip": true, "swapcase": true, "title": true,
	"upper": true, "zfill": true,
	// Python has these too; calling one is an error that says this
	// renderer lacks it.
	"casefold": false, "encode": false, "expandtabs": false, "format": false, "format_map": false,
	"isidentifier": false, "isprintable": false, "istitle": false, "maketrans": false, "translate": false,
}

// markupWrapped are the str methods Markup overrides: string arguments are
// escaped and string results stay Markup.
var markupWrapped = map[string]bool{
	"capitalize": true, "center": true, "join": true, "ljust": true, "lower": true, "lstrip": true,
	"partition": true, "removeprefix": true, "removesuffix": true, "replace": true, "rjust": true,
	"rpartition": true, "rsplit": true, "rstrip": true, "split": true, "splitlines": true, "strip": true,
	"swapcase": true, "title": true, "upper": true, "zfill": true,
}

var dictMethods = map[string]bool{"keys": true, "values": true, "items": true, "get": true, "copy": true}

var seqMethods = map[string]bool{"index": true, "count": true}

func hasMethod(obj value, name string) bool {
	switch x := obj.(type) {
	case string, markup:
		_, ok := strMethods[name]
		return ok
	case *dict:
		return dictMethods[name]
	case *list:
		return seqMethods[name] || (!x.tuple && name == "copy")
	}
	return false
}

func (r *renderer) callMethod(recv value, name string, pos []value, kw []kwarg, line int) (value, error) {
	if err := r.step(line); err != nil {
		return nil, err
	}
	switch x := recv.(type) {
	case string:
		return r.strMethod(x, false, name, pos, kw, line)
	case markup:
		return r.strMethod(string(x), true, name, pos, kw, line)
	case *dict:
		return r.dictMethod(x, name, pos, kw, line)
	case *list:
		return r.listMethod(x, name, pos, kw, line)
	case *loopCtx:
		return x.method(r, name, pos, line)
	}
	return nil, fmt.Errorf("%s object has no method %s", reprQuick(typeName(recv)), reprQuick(name))
}

func (r *renderer) dictMethod(d *dict, name string, pos []value, kw []kwarg, line int) (value, error) {
	if len(kw) > 0 {
		return nil, fmt.Errorf("dict.%s() takes no keyword arguments", name)
	}
	switch name {
	case "get":
		if len(pos) < 1 || len(pos) > 2 {
			return nil, fmt.Errorf("get expected 1 or 2 arguments, got %d", len(pos))
		}
		if _, err := hashKey(pos[0]); err != nil {
			return nil, err
		}
		if v, ok := d.get(pos[0]); ok {
			return v, nil
		}
		if len(pos) == 2 {
			return pos[1], nil
		}
		return none, nil
	case "keys", "values", "items":
		if len(pos) > 0 {
			return nil, fmt.Errorf("dict.%s() takes no arguments (%d given)", name, len(pos))
		}
		return &dictView{d: d, kind: name}, nil
	case "copy":
		if err := r.charge(80*d.len(), line); err != nil {
			return nil, err
		}
		c := newDict()
		for i, k := range d.keys {
			if err := c.set(k, d.vals[i]); err != nil {
				return nil, err
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("'dict' object has no method %s", reprQuick(name))
}

func (r *renderer) listMethod(l *list, name string, pos []value, kw []kwarg, line int) (value, error) {
	if len(kw) > 0 {
		return nil, fmt.Errorf("%s.%s() takes no keyword arguments", typeName(l), name)
	}
	switch name {
	case "count":
		if len(pos) != 1 {
			return nil, fmt.Errorf("count() takes exactly one argument (%d given)", len(pos))
		}
		n := int64(0)
		for _, it := range l.items {
			eq, err := r.eq(it, pos[0], line)
			if err != nil {
				return nil, err
			}
			if eq {
				n++
			}
		}
		return n, nil
	case "index":
		if len(pos) != 1 {
			return nil, errors.New("index() takes one argument here")
		}
		for i, it := range l.items {
			eq, err := r.eq(it, pos[0], line)
			if err != nil {
				return nil, err
			}
			if eq {
				return int64(i), nil
			}
		}
		return nil, fmt.Errorf("%s is not in list", reprQuick(pos[0]))
	case "copy":
		if err := r.charge(16*len(l.items), line); err != nil {
			return nil, err
		}
		return newList(append([]value(nil), l.items...), false)
	}
	return nil, fmt.Errorf("%s object has no method %s", reprQuick(typeName(l)), reprQuick(name))
}

func (l *loopCtx) method(r *renderer, name string, pos []value, line int) (value, error) {
	switch name {
	case "cycle":
		if len(pos) == 0 {
			return nil, errors.New("no items for cycling given")
		}
		return pos[l.index%len(pos)], nil
	case "changed":
		if l.hasLast {
			eq, err := r.eq(&list{items: pos, depth: 1}, &list{items: l.changed, depth: 1}, line)
			if err != nil || eq {
				return false, err
			}
		}
		l.changed, l.hasLast = pos, true
		return true, nil
	}
	return nil, fmt.Errorf("the loop has no method %s", reprQuick(name))
}

// strArg reads a str method's optional string arguments (None allowed
// where Python allows it); a Markup receiver escapes them.
func (r *renderer) strArg(v value, escape bool, what string, allowNone bool, line int) (*string, error) {
	if _, isNone := v.(noneType); isNone && allowNone {
		return nil, nil
	}
	s, ok := asString(v)
	if !ok {
		return nil, fmt.Errorf("%s must be str, not %s", what, typeName(v))
	}
	if _, isM := v.(markup); escape && !isM {
		var err error
		if s, err = r.escape(s, line); err != nil {
			return nil, err
		}
	}
	return &s, nil
}

func intOpt(v value, what string) (int, error) {
	if _, isNone := v.(noneType); isNone {
		return -1, nil
	}
	n, _, isF, ok := number(v)
	if !ok || isF {
		return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
	}
	if n > MaxOutputBytes {
		return 0, limitError(0, "%s %d is beyond the limit of %d", what, n, MaxOutputBytes)
	}
	return int(max(n, -1)), nil
}

func (r *renderer) strMethod(s string, isM bool, name string, pos []value, kw []kwarg, line int) (value, error) {
	supported, known := strMethods[name]
	if !known || !supported {
		return nil, fmt.Errorf("str.%s() is not supported by this chat template renderer", name)
	}
	esc := isM && markupWrapped[name]
	arg := func(i int) value {
		if i < len(pos) {
			return pos[i]
		}
		return nil
	}
	named := map[string]string{
		"split": "sep,maxsplit", "rsplit": "sep,maxsplit", "replace": "old,new,count",
		"splitlines": "keepends", "center": "width,fillchar", "ljust": "width,fillchar", "rjust": "width,fillchar",
	}
	if len(kw) > 0 {
		names := strings.Split(named[name], ",")
		full := make([]value, len(names))
		copy(full, pos)
		for _, k := range kw {
			i := indexOf(names, k.name)
			if i < 0 || full[i] != nil {
				return nil, fmt.Errorf("str.%s() got an unexpected keyword argument '%s'", name, k.name)
			}
			full[i] = k.val
		}
		for len(full) > 0 && full[len(full)-1] == nil {
			full = full[:len(full)-1]
		}
		pos = full
	}
	if err := r.work(len(s), line); err != nil {
		return nil, err
	}
	wrapStr := func(out string) value {
		if esc {
			return markup(out)
		}
		return out
	}
	nargs := func(lo, hi int) error {
		if len(pos) < lo || len(pos) > hi {
			return fmt.Errorf("str.%s() takes %d to %d arguments (%d given)", name, lo, hi, len(pos))
		}
		for _, p := range pos {
			if p == nil {
				return fmt.Errorf("str.%s(): an argument is missing", name)
			}
		}
		return nil
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		if err := nargs(0, 1); err != nil {
			return nil, err
		}
		var chars *string
		if len(pos) == 1 {
			var err error
			if chars, err = r.strArg(pos[0], esc, "the characters to strip", true, line); err != nil {
				return nil, err
			}
		}
		return wrapStr(pyStrip(s, chars, name != "rstrip", name != "lstrip")), nil
	case "startswith", "endswith":
		if err := nargs(1, 3); err != nil {
			return nil, err
		}
		sub, inRange, err := strRange(s, arg(1), arg(2))
		if err != nil {
			return nil, err
		}
		var cands []string
		switch p := pos[0].(type) {
		case *list:
			if !p.tuple {
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not list", name)
			}
			for _, it := range p.items {
				c, ok := asString(it)
				if !ok {
					return nil, fmt.Errorf("tuple for %s must only contain str, not %s", name, typeName(it))
				}
				cands = append(cands, c)
			}
		default:
			c, ok := asString(p)
			if !ok {
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			cands = []string{c}
		}
		for _, c := range cands {
			if !inRange {
				break
			}
			if name == "startswith" && strings.HasPrefix(sub, c) || name == "endswith" && strings.HasSuffix(sub, c) {
				return true, nil
			}
		}
		return false, nil
	case "split", "rsplit":
		if err := nargs(0, 2); err != nil {
			return nil, err
		}
		var sep *string
		if len(pos) >= 1 {
			var err error
			if sep, err = r.strArg(pos[0], esc, "the separator", true, line); err != nil {
				return nil, err
			}
		}
		maxsplit := -1
		if len(pos) == 2 {
			var err error
			if maxsplit, err = intOpt(pos[1], "maxsplit"); err != nil {
				return nil, err
			}
		}
		split := func(emit func(string)) error { return pySplit(s, sep, maxsplit, emit) }
		if name == "rsplit" {
			split = func(emit func(string)) error { return pyRSplit(s, sep, maxsplit, emit) }
		}
		return r.stringList(split, name == "rsplit", esc, line)
	case "splitlines":
		if err := nargs(0, 1); err != nil {
			return nil, err
		}
		keep := len(pos) == 1 && truthy(pos[0])
		return r.stringList(func(emit func(string)) error { pySplitLines(s, keep, emit); return nil }, false, esc, line)
	case "replace":
		if err := nargs(2, 3); err != nil {
			return nil, err
		}
		old, err := r.strArg(pos[0], esc, "replace() argument 1", false, line)
		if err != nil {
			return nil, err
		}
		new, err := r.strArg(pos[1], esc, "replace() argument 2", false, line)
		if err != nil {
			return nil, err
		}
		count := -1
		if len(pos) == 3 {
			if count, err = intOpt(pos[2], "count"); err != nil {
				return nil, err
			}
		}
		if err := r.charge(replacedLen(s, *old, *new, count), line); err != nil {
			return nil, err
		}
		return wrapStr(pyReplace(s, *old, *new, count)), nil
	case "upper", "lower", "capitalize", "title", "swapcase":
		if err := nargs(0, 0); err != nil {
			return nil, err
		}
		if err := r.chargeCase(s, line); err != nil {
			return nil, err
		}
		f := map[string]func(string) string{"upper": pyUpper, "lower": pyLower, "capitalize": pyCapitalize, "title": pyTitle, "swapcase": pySwapcase}[name]
		return wrapStr(f(s)), nil
	case "find", "rfind", "index", "rindex", "count":
		if err := nargs(1, 3); err != nil {
			return nil, err
		}
		sub, ok := asString(pos[0])
		if !ok {
			return nil, fmt.Errorf("must be str, not %s", typeName(pos[0]))
		}
		part, inRange, err := strRange(s, arg(1), arg(2))
		if err != nil {
			return nil, err
		}
		if !inRange {
			if name == "count" {
				return int64(0), nil
			}
			if name == "index" || name == "rindex" {
				return nil, errors.New("substring not found")
			}
			return int64(-1), nil
		}
		if name == "count" {
			return int64(pyCount(part, sub)), nil
		}
		i := pyFind(part, sub, name[0] == 'r')
		if i < 0 {
			if name == "index" || name == "rindex" {
				return nil, errors.New("substring not found")
			}
			return int64(-1), nil
		}
		start, _ := sliceStart(s, arg(1))
		return int64(i + start), nil
	case "join":
		if err := nargs(1, 1); err != nil {
			return nil, err
		}
		items, err := r.iterate(pos[0], line)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for i, it := range items {
			str, ok := asString(it)
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			if _, itM := it.(markup); esc && !itM {
				if str, err = r.escape(str, line); err != nil {
					return nil, err
				}
			}
			if i > 0 {
				str = s + str
			}
			if b.Len()+len(str) > MaxOutputBytes {
				return nil, limitError(line, "the template built a string of more than %d bytes", MaxOutputBytes)
			}
			if err := r.charge(len(str), line); err != nil {
				return nil, err
			}
			b.WriteString(str)
		}
		return wrapStr(b.String()), nil
	case "center", "ljust", "rjust", "zfill":
		lo, hi := 1, 2
		if name == "zfill" {
			hi = 1
		}
		if err := nargs(lo, hi); err != nil {
			return nil, err
		}
		width, err := intArg(pos[0], "width")
		if err != nil {
			return nil, err
		}
		fill := ' '
		if len(pos) == 2 {
			f, ok := asString(pos[1])
			if !ok || runeLen(f) != 1 {
				return nil, errors.New("The fill character must be exactly one character long")
			}
			fill = []rune(f)[0]
		}
		if err := r.charge(len(s)+4*padLen(s, width), line); err != nil {
			return nil, err
		}
		switch name {
		case "center":
			return wrapStr(pyCenter(s, width, fill)), nil
		case "zfill":
			return wrapStr(pyZfill(s, width)), nil
		}
		return wrapStr(pyJust(s, width, fill, name == "ljust")), nil
	case "partition", "rpartition":
		if err := nargs(1, 1); err != nil {
			return nil, err
		}
		sep, err := r.strArg(pos[0], esc, "the separator", false, line)
		if err != nil {
			return nil, err
		}
		if *sep == "" {
			return nil, errors.New("empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, *sep)
		} else {
			i = strings.LastIndex(s, *sep)
		}
		parts := []string{s, "", ""}
		if name == "rpartition" {
			parts = []string{"", "", s}
		}
		if i >= 0 {
			parts = []string{s[:i], *sep, s[i+len(*sep):]}
		}
		items := make([]value, 3)
		for j, p := range parts {
			items[j] = wrapStr(p)
		}
		return newList(items, true)
	case "removeprefix", "removesuffix":
		if err := nargs(1, 1); err != nil {
			return nil, err
		}
		a, err := r.strArg(pos[0], esc, name+"() argument", false, line)
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return wrapStr(strings.TrimPrefix(s, *a)), nil
		}
		return wrapStr(strings.TrimSuffix(s, *a)), nil
	}
	if err := nargs(0, 0); err != nil {
		return nil, err
	}
	preds := map[string]func(rune) bool{
		"isalnum": isPyAlnum, "isalpha": isPyAlpha, "isdecimal": isPyDecimal, "isdigit": isPyDigit,
		"isnumeric": isPyNumeric, "isspace": pyIsSpace,
	}
	switch name {
	case "isascii":
		return isASCII(s), nil
	case "islower", "isupper":
		return pyIsCase(s, name == "isupper"), nil
	}
	return pyIsAll(s, preds[name]), nil
}

// sliceStart is a find/startswith start argument as a code point index.
func sliceStart(s string, start value) (int, error) {
	if start == nil {
		return 0, nil
	}
	var p *int64
	if _, isNone := start.(noneType); !isNone {
		n, ok := indexValue(start)
		if !ok {
			return 0, errors.New("slice indices must be integers or None or have an __index__ method")
		}
		p = &n
	}
	i, _ := sliceIndices(int64(runeLen(s)), p, nil, 1)
	return int(i), nil
}

// strRange is s[start:end] for the optional start and end arguments of
// find, count, startswith and endswith; inRange is false when start is
// past the end, where Python finds nothing, not even "".
func strRange(s string, start, end value) (sub string, inRange bool, err error) {
	if start == nil && end == nil {
		return s, true, nil
	}
	var bounds [2]*int64
	for i, v := range []value{start, end} {
		if v == nil {
			continue
		}
		if _, isNone := v.(noneType); isNone {
			continue
		}
		n, ok := indexValue(v)
		if !ok {
			return "", false, errors.New("slice indices must be integers or None or have an __index__ method")
		}
		bounds[i] = &n
	}
	n := int64(runeLen(s))
	if bounds[0] != nil && *bounds[0] > n {
		return "", false, nil
	}
	from, count := sliceIndices(n, bounds[0], bounds[1], 1)
	return s[byteOffset(s, int(from)):byteOffset(s, int(from+count))], true, nil
}

// stringList builds the list of the strings split hands out (reversed
// when backwards), counted and charged in a first pass before the second
// builds it: a short template can ask for millions of pieces.
func (r *renderer) stringList(split func(emit func(string)) error, backwards, esc bool, line int) (value, error) {
	n := 0
	if err := split(func(string) { n++ }); err != nil {
		return nil, err
	}
	if err := r.charge(listItemBytes*n, line); err != nil {
		return nil, err
	}
	items := make([]value, 0, n)
	err := split(func(p string) {
		if esc {
			items = append(items, markup(p))
		} else {
			items = append(items, p)
		}
	})
	if err != nil {
		return nil, err
	}
	if backwards {
		slices.Reverse(items)
	}
	return newList(items, false)
}
