package chat

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Jinja's filters over sequences.

// attrGetter is Jinja's make_attrgetter: "a.b.0" looks up a, then b, then
// item 0; with a default, an undefined step gives the default; with
// ignoreCase, a string result is lower-cased.
func (r *renderer) attrGetter(attribute value, def value, ignoreCase bool) func(value) (value, error) {
	var parts []value
	switch a := attribute.(type) {
	case noneType:
	case string:
		for _, p := range strings.Split(a, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && isAllDigits(p) {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	default:
		parts = []value{attribute}
	}
	return func(item value) (value, error) {
		for _, p := range parts {
			var err error
			if item, err = r.getitem(item, p); err != nil {
				return nil, err
			}
			if _, u := item.(*undefined); u && def != nil {
				item = def
			}
		}
		if ignoreCase {
			if s, ok := item.(string); ok {
				item = pyLower(s)
			}
		}
		return item, nil
	}
}

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// multiGetter is make_multi_attrgetter: "age,name" gives a list of both.
func (r *renderer) multiGetter(attribute value, ignoreCase bool) func(value) (value, error) {
	var getters []func(value) (value, error)
	if s, ok := attribute.(string); ok {
		for _, a := range strings.Split(s, ",") {
			getters = append(getters, r.attrGetter(a, nil, ignoreCase))
		}
	} else {
		getters = append(getters, r.attrGetter(attribute, nil, ignoreCase))
	}
	return func(item value) (value, error) {
		out := make([]value, len(getters))
		for i, g := range getters {
			v, err := g(item)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return &list{items: out, depth: 1}, nil
	}
}

func filterFirst(r *renderer, line int, v value, _ []value) (value, error) {
	if g, ok := v.(*generator); ok {
		if g.pos < len(g.items) {
			g.pos++
			return g.items[g.pos-1], nil
		}
		return undefinedHint("No first item, sequence was empty."), nil
	}
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefinedHint("No first item, sequence was empty."), nil
	}
	return items[0], nil
}

func filterLast(r *renderer, line int, v value, _ []value) (value, error) {
	switch v.(type) {
	case *list, string, markup, rangeV, *dict, *dictView, *undefined:
	default:
		return nil, fmt.Errorf("%s object is not reversible", reprQuick(typeName(v)))
	}
	if l, ok := indexLast(v); ok {
		return l, nil
	}
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefinedHint("No last item, sequence was empty."), nil
	}
	return items[len(items)-1], nil
}

func indexLast(v value) (value, bool) {
	switch v.(type) {
	case *list, string, markup, rangeV:
		return indexSeq(v, -1)
	}
	return nil, false
}

// length is Python's len().
func length(v value) (int64, error) {
	switch x := v.(type) {
	case string:
		return int64(runeLen(x)), nil
	case markup:
		return int64(runeLen(string(x))), nil
	case *list:
		return int64(len(x.items)), nil
	case *dict:
		return int64(x.len()), nil
	case rangeV:
		return x.len(), nil
	case *dictView:
		return int64(x.d.len()), nil
	case *undefined:
		return 0, nil
	case *loopCtx:
		return int64(x.seq.n), nil
	case *namespace:
		return 0, fmt.Errorf("object of type 'Namespace' has no len()")
	}
	return 0, fmt.Errorf("object of type %s has no len()", reprQuick(typeName(v)))
}

func filterLength(_ *renderer, _ int, v value, _ []value) (value, error) { return length(v) }

func filterList(r *renderer, line int, v value, _ []value) (value, error) {
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if err := r.charge(16*len(items), line); err != nil {
		return nil, err
	}
	return newList(append([]value(nil), items...), false)
}

func filterJoin(r *renderer, line int, v value, a []value) (value, error) {
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	sep, err := r.str(a[0], line)
	if err != nil {
		return nil, err
	}
	var get func(value) (value, error)
	if _, isNone := a[1].(noneType); !isNone {
		get = r.attrGetter(a[1], nil, false)
	}
	var b strings.Builder
	for i, it := range items {
		if err := r.step(line); err != nil {
			return nil, err
		}
		if get != nil {
			if it, err = get(it); err != nil {
				return nil, err
			}
		}
		s, err := r.str(it, line)
		if err != nil {
			return nil, err
		}
		n := len(s)
		if i > 0 {
			n += len(sep)
		}
		if b.Len()+n > MaxOutputBytes {
			return nil, limitError(line, "the template built a string of more than %d bytes", MaxOutputBytes)
		}
		if err := r.charge(n, line); err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// filterMap is map(attribute=…[, default=…]) or map('filter', args…).
func filterMap(r *renderer, line int, v value, a []value) (value, error) {
	pos := a[0].(*list).items
	kw := a[1].(kwMarker).kw
	var fn func(value) (value, error)
	attrIdx := -1
	for i, k := range kw {
		if k.name == "attribute" {
			attrIdx = i
		}
	}
	if len(pos) == 0 && attrIdx >= 0 {
		var def value
		for _, k := range kw {
			switch k.name {
			case "attribute":
			case "default":
				def = k.val
			default:
				return nil, fmt.Errorf("Unexpected keyword argument %s", reprQuick(k.name))
			}
		}
		fn = r.attrGetter(kw[attrIdx].val, def, false)
	} else {
		if len(pos) == 0 {
			return nil, errors.New("map requires a filter argument")
		}
		name, ok := pos[0].(string)
		if !ok {
			return nil, errors.New("map requires a filter name")
		}
		rest := pos[1:]
		fn = func(item value) (value, error) { return r.applyFilter(name, item, rest, kw, line) }
	}
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if err := r.charge(16*len(items), line); err != nil {
		return nil, err
	}
	out := make([]value, len(items))
	for i, it := range items {
		if err := r.step(line); err != nil {
			return nil, err
		}
		if out[i], err = fn(it); err != nil {
			return nil, err
		}
	}
	return &generator{items: out, name: "do_map"}, nil
}

// selectFilter is select/reject (keep) and selectattr/rejectattr (attr).
func selectFilter(keep, attr bool) filterFunc {
	return func(r *renderer, line int, v value, a []value) (value, error) {
		args := a[0].(*list).items
		get := func(x value) (value, error) { return x, nil }
		if attr {
			if len(args) == 0 {
				return nil, errors.New("Missing parameter for attribute name")
			}
			get = r.attrGetter(args[0], nil, false)
			args = args[1:]
		}
		test := func(x value) (bool, error) { return truthy(x), nil }
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, errors.New("the test name must be a string")
			}
			rest := args[1:]
			test = func(x value) (bool, error) {
				t, err := r.applyTest(name, x, rest, nil, line)
				return truthy(t), err
			}
		}
		items, err := r.iterate(v, line)
		if err != nil {
			return nil, err
		}
		var out []value
		for _, it := range items {
			if err := r.step(line); err != nil {
				return nil, err
			}
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				if err := r.scratch(16, line); err != nil { // charged as it grows
					return nil, err
				}
				out = append(out, it)
			}
		}
		return &generator{items: out, name: "select_or_reject"}, nil
	}
}

func minMax(sign int) filterFunc {
	return func(r *renderer, line int, v value, a []value) (value, error) {
		items, err := r.iterate(v, line)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefinedHint("No aggregated item, sequence was empty."), nil
		}
		key := r.attrGetter(a[1], nil, !truthy(a[0]))
		best := items[0]
		bestKey, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			if err := r.step(line); err != nil {
				return nil, err
			}
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			op := ">"
			if sign < 0 {
				op = "<"
			}
			better, err := r.compare(op, k, bestKey, line)
			if err != nil {
				return nil, err
			}
			if better {
				best, bestKey = it, k
			}
		}
		return best, nil
	}
}

func filterReverse(r *renderer, line int, v value, _ []value) (value, error) {
	switch x := v.(type) {
	case string, markup:
		s, _ := asString(x)
		if err := r.scratch(4*len(s), line); err != nil {
			return nil, err
		}
		if err := r.charge(len(s), line); err != nil {
			return nil, err
		}
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		if _, isM := x.(markup); isM {
			return markup(string(rs)), nil
		}
		return string(rs), nil
	case noneType, int64, float64, bool, *namespace, *macro, *builtin, *boundMethod:
		return nil, errors.New("argument must be iterable")
	}
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if err := r.charge(16*len(items), line); err != nil {
		return nil, err
	}
	out := make([]value, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	if _, isGen := v.(*generator); isGen {
		return newList(out, false)
	}
	return &generator{items: out, name: "reversed"}, nil
}

// sortValues sorts items stably by key; Python's sorted(reverse=True)
// keeps equal items in their order too.
func (r *renderer) sortValues(items []value, key func(value) (value, error), reverse bool, line int) ([]value, error) {
	keys := make([]value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var sortErr error
	sort.SliceStable(idx, func(i, j int) bool {
		if sortErr != nil {
			return false
		}
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		less, err := r.compare("<", a, b, line)
		if err != nil {
			sortErr = err
		}
		return less
	})
	if sortErr != nil {
		return nil, sortErr
	}
	if err := r.step(line); err != nil {
		return nil, err
	}
	out := make([]value, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

func filterSort(r *renderer, line int, v value, a []value) (value, error) {
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	if err := r.charge(48*len(items), line); err != nil {
		return nil, err
	}
	out, err := r.sortValues(items, r.multiGetter(a[2], !truthy(a[1])), truthy(a[0]), line)
	if err != nil {
		return nil, err
	}
	return newList(out, false)
}

func filterDictsort(r *renderer, line int, v value, a []value) (value, error) {
	d, ok := v.(*dict)
	if !ok {
		return nil, fmt.Errorf("dictsort requires a mapping, not %s", typeName(v))
	}
	pos := 0
	switch a[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, errors.New(`You can only sort by either "key" or "value"`)
	}
	items, err := r.iterate(&dictView{d: d, kind: "items"}, line)
	if err != nil {
		return nil, err
	}
	ignoreCase := !truthy(a[0])
	key := func(it value) (value, error) {
		k := it.(*list).items[pos]
		if s, ok := k.(string); ok && ignoreCase {
			return pyLower(s), nil
		}
		return k, nil
	}
	out, err := r.sortValues(items, key, truthy(a[2]), line)
	if err != nil {
		return nil, err
	}
	return newList(out, false)
}

func filterSum(r *renderer, line int, v value, a []value) (value, error) {
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	get := func(x value) (value, error) { return x, nil }
	if _, isNone := a[0].(noneType); !isNone {
		get = r.attrGetter(a[0], nil, false)
	}
	total := a[1]
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = r.binOp("+", total, x, line); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterUnique(r *renderer, line int, v value, a []value) (value, error) {
	items, err := r.iterate(v, line)
	if err != nil {
		return nil, err
	}
	key := r.attrGetter(a[1], nil, !truthy(a[0]))
	seen := map[any]bool{}
	var out []value
	for _, it := range items {
		if err := r.step(line); err != nil {
			return nil, err
		}
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		hk, err := hashKey(k)
		if err != nil {
			return nil, err
		}
		if !seen[hk] {
			if err := r.scratch(48, line); err != nil { // charged as it grows
				return nil, err
			}
			seen[hk] = true
			out = append(out, it)
		}
	}
	return &generator{items: out, name: "do_unique"}, nil
}
