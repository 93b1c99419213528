package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Jinja's filters, with transformers' tojson, written from Jinja's
// documented behaviour and Python's semantics.

type filterFunc func(r *renderer, line int, v value, a []value) (value, error)

type filterDef struct {
	params   []string // after the value; a trailing "*" takes the rest
	defaults []value  // for the last len(defaults) params
	fn       filterFunc
	varKw    bool // takes **kwargs (format, map, namespace-like)
}

var filters map[string]*filterDef

// unsupportedFilters are Jinja's built-in filters this renderer lacks;
// using one is an error that says so.
var unsupportedFilters = map[string]bool{
	"batch": true, "filesizeformat": true, "groupby": true, "pprint": true, "random": true, "slice": true,
	"striptags": true, "truncate": true, "urlencode": true, "urlize": true, "wordwrap": true, "xmlattr": true,
}

// filterProblem says why name cannot be used as a filter ("" if it can).
func filterProblem(name string) string {
	switch {
	case filters[name] != nil:
		return ""
	case unsupportedFilters[name]:
		return fmt.Sprintf("the filter '%s' is not supported by this chat template renderer", name)
	}
	return fmt.Sprintf("No filter named '%s'.", excerpt(name))
}

func init() {
	filters = map[string]*filterDef{
		"abs":         {fn: filterAbs},
		"attr":        {params: []string{"name"}, fn: filterAttr},
		"capitalize":  {fn: strFilter(pyCapitalize, true)},
		"center":      {params: []string{"width"}, defaults: []value{int64(80)}, fn: filterCenter},
		"count":       {fn: filterLength},
		"default":     {params: []string{"default_value", "boolean"}, defaults: []value{"", false}, fn: filterDefault},
		"dictsort":    {params: []string{"case_sensitive", "by", "reverse"}, defaults: []value{false, "key", false}, fn: filterDictsort},
		"escape":      {fn: filterEscape},
		"first":       {fn: filterFirst},
		"float":       {params: []string{"default"}, defaults: []value{0.0}, fn: filterFloat},
		"forceescape": {fn: filterForceEscape},
		"format":      {params: []string{"*"}, varKw: true, fn: filterFormat},
		"indent":      {params: []string{"width", "first", "blank"}, defaults: []value{int64(4), false, false}, fn: filterIndent},
		"int":         {params: []string{"default", "base"}, defaults: []value{int64(0), int64(10)}, fn: filterInt},
		"items":       {fn: filterItems},
		"join":        {params: []string{"d", "attribute"}, defaults: []value{"", none}, fn: filterJoin},
		"last":        {fn: filterLast},
		"length":      {fn: filterLength},
		"list":        {fn: filterList},
		"lower":       {fn: strFilter(pyLower, true)},
		"map":         {params: []string{"*"}, varKw: true, fn: filterMap},
		"max":         {params: []string{"case_sensitive", "attribute"}, defaults: []value{false, none}, fn: minMax(1)},
		"min":         {params: []string{"case_sensitive", "attribute"}, defaults: []value{false, none}, fn: minMax(-1)},
		"reject":      {params: []string{"*"}, fn: selectFilter(false, false)},
		"rejectattr":  {params: []string{"*"}, fn: selectFilter(false, true)},
		"replace":     {params: []string{"old", "new", "count"}, defaults: []value{none}, fn: filterReplace},
		"reverse":     {fn: filterReverse},
		"round":       {params: []string{"precision", "method"}, defaults: []value{int64(0), "common"}, fn: filterRound},
		"safe":        {fn: filterSafe},
		"select":      {params: []string{"*"}, fn: selectFilter(true, false)},
		"selectattr":  {params: []string{"*"}, fn: selectFilter(true, true)},
		"sort":        {params: []string{"reverse", "case_sensitive", "attribute"}, defaults: []value{false, false, none}, fn: filterSort},
		"string":      {fn: filterString},
		"sum":         {params: []string{"attribute", "start"}, defaults: []value{none, int64(0)}, fn: filterSum},
		"title":       {fn: strFilter(pyTitleFilter, false)},
		"tojson":      {params: []string{"ensure_ascii", "indent", "separators", "sort_keys"}, defaults: []value{false, none, none, false}, fn: filterToJSON},
		"trim":        {params: []string{"chars"}, defaults: []value{none}, fn: filterTrim},
		"unique":      {params: []string{"case_sensitive", "attribute"}, defaults: []value{false, none}, fn: filterUnique},
		"upper":       {fn: strFilter(pyUpper, true)},
		"wordcount":   {fn: filterWordcount},
	}
	filters["d"] = filters["default"]
	filters["e"] = filters["escape"]
}

// kwMarker separates a filter's bound arguments from its **kwargs.
type kwMarker struct{ kw []kwarg }

// bindArgs matches positional and keyword arguments to params as Python
// does; missing ones take defaults. A "*" param takes the remaining
// positional arguments as a tuple.
func bindArgs(fname string, params []string, defaults []value, pos []value, kw []kwarg, varKw bool) ([]value, error) {
	out := make([]value, len(params))
	set := make([]bool, len(params))
	for i, v := range pos {
		if i < len(params) && params[i] == "*" {
			rest, err := newList(append([]value(nil), pos[i:]...), true)
			if err != nil {
				return nil, err
			}
			out[i], set[i] = rest, true
			break
		}
		if i >= len(params) {
			return nil, fmt.Errorf("%s() takes at most %d arguments (%d given)", fname, len(params)+1, len(pos)+1)
		}
		out[i], set[i] = v, true
	}
	var extra []kwarg
	for _, k := range kw {
		i := indexOf(params, k.name)
		switch {
		case i >= 0 && set[i]:
			return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fname, k.name)
		case i >= 0:
			out[i], set[i] = k.val, true
		case varKw:
			extra = append(extra, k)
		default:
			return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", fname, k.name)
		}
	}
	first := len(params) - len(defaults)
	for i := range params {
		if set[i] {
			continue
		}
		switch {
		case params[i] == "*":
			out[i] = &list{tuple: true, depth: 1}
		case i >= first:
			out[i] = defaults[i-first]
		default:
			return nil, fmt.Errorf("%s() missing required argument '%s'", fname, params[i])
		}
	}
	if varKw {
		out = append(out, kwMarker{extra})
	}
	return out, nil
}

func (r *renderer) applyFilter(name string, v value, pos []value, kw []kwarg, line int) (value, error) {
	f := filters[name]
	if f == nil {
		return nil, errors.New(filterProblem(name))
	}
	a, err := bindArgs(name, f.params, f.defaults, pos, kw, f.varKw)
	if err != nil {
		return nil, err
	}
	return f.fn(r, line, v, a)
}

// softStr is Jinja's soft_str: strings (and Markup) as they are, anything
// else through str().
func (r *renderer) softStr(v value, line int) (string, bool, error) {
	switch x := v.(type) {
	case string:
		return x, false, nil
	case markup:
		return string(x), true, nil
	}
	s, err := r.str(v, line)
	return s, false, err
}

// strFilter makes a filter of a string function; keepMarkup says whether
// Markup in gives Markup out.
func strFilter(f func(string) string, keepMarkup bool) filterFunc {
	return func(r *renderer, line int, v value, _ []value) (value, error) {
		s, isM, err := r.softStr(v, line)
		if err != nil {
			return nil, err
		}
		if err := r.chargeCase(s, line); err != nil {
			return nil, err
		}
		out := f(s)
		if isM && keepMarkup {
			return markup(out), nil
		}
		return out, nil
	}
}

func filterAbs(_ *renderer, _ int, v value, _ []value) (value, error) {
	if b, ok := v.(bigInt); ok {
		return bigInt(strings.TrimPrefix(string(b), "-")), nil
	}
	i, f, isF, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): %s", reprQuick(typeName(v)))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i == math.MinInt64 {
		return nil, errIntOverflow
	}
	if i < 0 {
		i = -i
	}
	return i, nil
}

func filterAttr(r *renderer, _ int, v value, a []value) (value, error) {
	name, ok := a[0].(string)
	if !ok {
		return nil, errors.New("attribute name must be string")
	}
	// attr never falls back to items: a dict's keys are not attributes.
	has := hasMethod(v, name) || unsafeAttrs["dict"][name] && isDict(v) || unsafeAttrs["list"][name] && isList(v)
	switch x := v.(type) {
	case *namespace:
		_, has = x.attrs.getStr(name)
	case *loopCtx:
		_, isU := x.attr(name).(*undefined)
		has = !isU || name == "previtem" || name == "nextitem"
	case *macro:
		has = name == "name"
	}
	if !has {
		return undefinedAttr(v, name), nil
	}
	return r.getattr(v, name)
}

func isDict(v value) bool { _, ok := v.(*dict); return ok }

func isList(v value) bool { l, ok := v.(*list); return ok && !l.tuple }

func intArg(v value, what string) (int, error) {
	i, _, isF, ok := number(v)
	if !ok || isF {
		return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
	}
	if i > MaxOutputBytes {
		return 0, limitError(0, "%s %d is beyond the limit of %d", what, i, MaxOutputBytes)
	}
	if i < -MaxOutputBytes {
		i = -MaxOutputBytes
	}
	return int(i), nil
}

func filterCenter(r *renderer, line int, v value, a []value) (value, error) {
	s, isM, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	width, err := intArg(a[0], "width")
	if err != nil {
		return nil, err
	}
	if err := r.charge(len(s)+padLen(s, width), line); err != nil {
		return nil, err
	}
	out := pyCenter(s, width, ' ')
	if isM {
		return markup(out), nil
	}
	return out, nil
}

func filterDefault(_ *renderer, _ int, v value, a []value) (value, error) {
	if _, u := v.(*undefined); u || (truthy(a[1]) && !truthy(v)) {
		return a[0], nil
	}
	return v, nil
}

func filterEscape(r *renderer, line int, v value, _ []value) (value, error) {
	if m, ok := v.(markup); ok {
		return m, nil
	}
	s, err := r.str(v, line)
	if err != nil {
		return nil, err
	}
	out, err := r.escape(s, line)
	return markup(out), err
}

func filterForceEscape(r *renderer, line int, v value, _ []value) (value, error) {
	s, _, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	out, err := r.escape(s, line)
	return markup(out), err
}

func filterFormat(r *renderer, line int, v value, a []value) (value, error) {
	s, isM, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	kw := a[1].(kwMarker).kw
	args := a[0]
	if len(kw) > 0 {
		if len(a[0].(*list).items) > 0 {
			return nil, errors.New("can't handle positional and keyword arguments at the same time")
		}
		d := newDict()
		for _, k := range kw {
			if err := d.set(k.name, k.val); err != nil {
				return nil, err
			}
		}
		args = d
	}
	out, err := r.printf(s, args, isM, line)
	if err != nil {
		return nil, err
	}
	if isM {
		return markup(out), nil
	}
	return out, nil
}

// filterIndent indents every line after the first by width spaces (or the
// string width), blank lines too with blank, the first too with first.
func filterIndent(r *renderer, line int, v value, a []value) (value, error) {
	s, isM, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	var ind string
	if w, ok := asString(a[0]); ok {
		ind = w
	} else {
		width, err := intArg(a[0], "width")
		if err != nil {
			return nil, err
		}
		if err := r.charge(max(width, 0), line); err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", max(width, 0))
	}
	breaks := 1
	for _, c := range s {
		if isLineBreak(c) {
			breaks++
		}
	}
	if len(ind) > 0 && breaks > MaxOutputBytes/len(ind) {
		return nil, limitError(line, "the template built a value of more than %d bytes", MaxOutputBytes)
	}
	if err := r.charge(2*len(s)+len(ind)*breaks+16*breaks, line); err != nil {
		return nil, err
	}
	var b strings.Builder
	i := 0
	pySplitLines(s+"\n", false, func(l string) {
		if i > 0 {
			b.WriteByte('\n')
		}
		// The first line is indented only with first (blank or not), the
		// others unless blank, or with blank.
		if i == 0 && truthy(a[1]) || i > 0 && (l != "" || truthy(a[2])) {
			b.WriteString(ind)
		}
		b.WriteString(l)
		i++
	})
	if isM {
		return markup(b.String()), nil
	}
	return b.String(), nil
}

func filterItems(r *renderer, line int, v value, _ []value) (value, error) {
	switch x := v.(type) {
	case *undefined:
		return &generator{name: "do_items"}, nil
	case *dict:
		items, err := r.iterate(&dictView{d: x, kind: "items"}, line)
		if err != nil {
			return nil, err
		}
		return &generator{items: items, name: "do_items"}, nil
	}
	return nil, errors.New("Can only get item pairs from a mapping.")
}

func filterSafe(r *renderer, line int, v value, _ []value) (value, error) {
	if m, ok := v.(markup); ok {
		return m, nil
	}
	s, err := r.str(v, line)
	return markup(s), err
}

func filterString(r *renderer, line int, v value, _ []value) (value, error) {
	switch v.(type) {
	case string, markup:
		return v, nil
	}
	return r.str(v, line)
}

func filterReplace(r *renderer, line int, v value, a []value) (value, error) {
	s, err := r.str(v, line)
	if err != nil {
		return nil, err
	}
	old, err := r.str(a[0], line)
	if err != nil {
		return nil, err
	}
	new, err := r.str(a[1], line)
	if err != nil {
		return nil, err
	}
	count := -1
	if _, isNone := a[2].(noneType); !isNone {
		n, _, isF, ok := number(a[2])
		if err := bigIntError(a[2]); err != nil {
			return nil, err
		}
		if !ok || isF {
			return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a[2]))
		}
		count = int(max(min(n, math.MaxInt32), -1))
	}
	if err := r.work(len(s), line); err != nil {
		return nil, err
	}
	if err := r.charge(replacedLen(s, old, new, count), line); err != nil {
		return nil, err
	}
	return pyReplace(s, old, new, count), nil
}

func filterTrim(r *renderer, line int, v value, a []value) (value, error) {
	s, isM, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	var chars *string
	switch c := a[0].(type) {
	case noneType:
	case string, markup:
		cs, _ := asString(c)
		if isM {
			if cs, err = r.escape(cs, line); err != nil {
				return nil, err
			}
		}
		chars = &cs
	default:
		return nil, fmt.Errorf("strip arg must be None or str")
	}
	if err := r.work(len(s), line); err != nil {
		return nil, err
	}
	out := pyStrip(s, chars, true, true)
	if isM {
		return markup(out), nil
	}
	return out, nil
}

func filterWordcount(r *renderer, line int, v value, _ []value) (value, error) {
	s, _, err := r.softStr(v, line)
	if err != nil {
		return nil, err
	}
	n, in := int64(0), false
	for _, c := range s {
		w := c == '_' || isPyAlnum(c)
		if w && !in {
			n++
		}
		in = w
	}
	return n, nil
}
