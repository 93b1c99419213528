package chat

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Template values follow Python's object model as Jinja sees it:
//
//	None         noneType        str        string (valid UTF-8)
//	Undefined    *undefined      Markup     markup (a string marked safe)
//	bool         bool            list/tuple *list
//	int          int64, bigInt   dict       *dict (insertion order kept)
//	float        float64
//
// plus Jinja's namespace, macros, loop objects, ranges, generators (the
// lazy results of filters such as map and items), dict views and callables.
type value = any

type noneType struct{}

var none value = noneType{}

// undefined is Jinja's Undefined: printing it gives "", it is falsy and
// iterates as empty, and most other uses raise an UndefinedError that names
// what was missing.
type undefined struct {
	name    value
	obj     value
	hasObj  bool
	hint    string
	missing bool // name is set
}

func undefinedName(name string) *undefined { return &undefined{name: name, missing: true} }

func undefinedAttr(obj value, name value) *undefined {
	return &undefined{name: name, obj: obj, hasObj: true, missing: true}
}

func undefinedHint(hint string) *undefined { return &undefined{hint: hint} }

// message is the text of the UndefinedError this value raises when used.
func (u *undefined) message() string {
	switch {
	case u.hint != "":
		return u.hint
	case !u.missing:
		return "value is undefined"
	case !u.hasObj:
		return fmt.Sprintf("%s is undefined", reprQuick(u.name))
	}
	if _, isStr := u.name.(string); !isStr {
		return fmt.Sprintf("%s has no element %s", objectTypeRepr(u.obj), reprQuick(u.name))
	}
	return fmt.Sprintf("%s has no attribute %s", reprQuick(objectTypeRepr(u.obj)), reprQuick(u.name))
}

func (u *undefined) err() error { return errors.New(u.message()) }

// markup is markupsafe's Markup: a string that needs no HTML escaping. It
// matters where Python escapes the other operand: Markup + str.
type markup string

// bigInt is an integer beyond int64 from JSON input, kept as its digits: it
// prints and serializes exactly, and refuses arithmetic.
type bigInt string

// list is a Python list, or a tuple when tuple is set. Lists are never
// changed after they are built (the sandbox forbids append and friends).
type list struct {
	items []value
	tuple bool
	depth int
}

// dict is a Python dict: keys in insertion order.
type dict struct {
	keys, vals []value
	index      map[any]int
	depth      int
}

// namespace is Jinja's namespace(): the one mutable object, through
// {% set ns.attr = … %}.
type namespace struct{ attrs *dict }

// rangeV is a Python range.
type rangeV struct{ start, stop, step int64 }

// generator is the lazy result of items, map, select and friends: it can be
// iterated once, has no length and cannot be indexed.
type generator struct {
	items []value
	pos   int
	name  string
}

// dictView is dict.keys(), dict.values() or dict.items().
type dictView struct {
	d    *dict
	kind string // "keys", "values" or "items"
}

// builtin is a global function (range, namespace, raise_exception, …).
type builtin struct {
	name string
	call func(r *renderer, line int, args []value, kw []kwarg) (value, error)
}

// boundMethod is a method looked up on a value (s.upper, d.items), called
// later.
type boundMethod struct {
	recv value
	name string
}

type kwarg struct {
	name string
	val  value
}

func newList(items []value, tuple bool) (*list, error) {
	d := 0
	for _, v := range items {
		d = max(d, valueDepth(v))
	}
	if d+1 > MaxValueDepth {
		return nil, limitError(0, "a list nested deeper than %d levels", MaxValueDepth)
	}
	return &list{items: items, tuple: tuple, depth: d + 1}, nil
}

func newDict() *dict { return &dict{index: map[any]int{}, depth: 1} }

func valueDepth(v value) int {
	switch x := v.(type) {
	case *list:
		return x.depth
	case *dict:
		return x.depth
	}
	return 0
}

// set stores k: v, keeping k's first place when it is already there (as a
// Python dict does).
func (d *dict) set(k, v value) error {
	hk, err := hashKey(k)
	if err != nil {
		return err
	}
	if nd := valueDepth(v) + 1; nd > d.depth {
		if nd > MaxValueDepth {
			return limitError(0, "a dict nested deeper than %d levels", MaxValueDepth)
		}
		d.depth = nd
	}
	if i, ok := d.index[hk]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[hk] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

func (d *dict) get(k value) (value, bool) {
	hk, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[hk]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *dict) getStr(k string) (value, bool) {
	i, ok := d.index[k]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *dict) len() int { return len(d.keys) }

type tupleKey string

// maxTupleKeyBytes caps the key a tuple makes, so that a tuple of shared
// tuples cannot make an exponential one.
const maxTupleKeyBytes = 1 << 16

type undefinedKey struct{}

// hashKey maps a dict key to a Go map key under Python's equality: 1, 1.0
// and True are one key; lists and dicts are unhashable.
func hashKey(k value) (any, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case markup:
		return string(x), nil
	case int64:
		return x, nil
	case bool:
		if x {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return int64(x), nil
		}
		if math.IsNaN(x) {
			return nil, errors.New("NaN as a dict key is not supported")
		}
		return x, nil
	case noneType:
		return x, nil
	case bigInt:
		return tupleKey("int:" + string(x)), nil
	case *undefined:
		return undefinedKey{}, nil
	case *list:
		if !x.tuple {
			return nil, errors.New("unhashable type: 'list'")
		}
		var b strings.Builder
		b.WriteString("tuple:")
		for _, it := range x.items {
			hk, err := hashKey(it)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "%T:%q,", hk, fmt.Sprint(hk))
			if b.Len() > maxTupleKeyBytes {
				return nil, limitError(0, "a tuple too large to be a dict key")
			}
		}
		return tupleKey(b.String()), nil
	case *dict:
		return nil, errors.New("unhashable type: 'dict'")
	}
	return nil, fmt.Errorf("unhashable type: %s", reprQuick(typeName(k)))
}

// typeName is Python's type(v).__name__.
func typeName(v value) string {
	switch x := v.(type) {
	case noneType:
		return "NoneType"
	case *undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64, bigInt:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case markup:
		return "Markup"
	case *list:
		if x.tuple {
			return "tuple"
		}
		return "list"
	case *dict:
		return "dict"
	case *namespace:
		return "Namespace"
	case rangeV:
		return "range"
	case *generator:
		return "generator"
	case *dictView:
		return "dict_" + x.kind
	case *macro:
		return "Macro"
	case *loopCtx:
		return "LoopContext"
	case *builtin:
		return "function"
	case *boundMethod:
		return "builtin_function_or_method"
	}
	return fmt.Sprintf("%T", v)
}

// objectTypeRepr is how Jinja names an object in "has no attribute" errors.
func objectTypeRepr(v value) string {
	switch v.(type) {
	case noneType:
		return "None"
	case *namespace:
		return "jinja2.utils.Namespace object"
	case markup:
		return "markupsafe.Markup object"
	case *macro:
		return "jinja2.runtime.Macro object"
	case *loopCtx:
		return "jinja2.runtime.LoopContext object"
	}
	return typeName(v) + " object"
}

// truthy is Python's bool(v).
func truthy(v value) bool {
	switch x := v.(type) {
	case noneType, *undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case markup:
		return x != ""
	case *list:
		return len(x.items) > 0
	case *dict:
		return x.len() > 0
	case rangeV:
		return x.len() > 0
	case *dictView:
		return x.d.len() > 0
	}
	return true
}

// len is len(range), computed without overflow (past MaxInt64 it says
// MaxInt64).
func (r rangeV) len() int64 {
	var n uint64
	switch {
	case r.step > 0 && r.start < r.stop:
		n = (uint64(r.stop)-uint64(r.start)-1)/uint64(r.step) + 1
	case r.step < 0 && r.start > r.stop:
		n = (uint64(r.start)-uint64(r.stop)-1)/(uint64(-(r.step+1))+1) + 1
	}
	return int64(min(n, math.MaxInt64))
}

func (r rangeV) at(i int64) int64 { return r.start + i*r.step }

// number reads v as a Python number: bools count as 0 and 1.
func number(v value) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	case int64:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

// pyFloatRepr is Python's repr (and str) of a float: the shortest digits
// that round-trip, fixed notation for decimal exponents -4 ≤ e < 16 (with
// ".0" when integral), else d.ddde±XX; inf and nan as Python spells them.
func pyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
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
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// reprQuick is Python's repr of a short scalar, for error messages.
func reprQuick(v value) string {
	switch x := v.(type) {
	case string:
		return pyStrRepr(excerpt(x))
	case int64:
		return strconv.FormatInt(x, 10)
	}
	var w textWriter
	w.limit = 200
	_ = writeRepr(&w, v, 0, nil)
	return excerpt(string(w.b))
}
