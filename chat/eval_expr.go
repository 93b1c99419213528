package chat

import (
	"fmt"
	"strings"
)

func (r *renderer) eval(e expr, s *scope) (value, error) {
	r.depth++
	if r.depth > maxEvalDepth {
		r.depth--
		return nil, limitError(e.lineNo(), "the template nests deeper than %d levels while rendering", maxEvalDepth)
	}
	v, err := r.eval1(e, s)
	r.depth--
	if err != nil {
		return nil, wrap(err, e.lineNo())
	}
	return v, nil
}

func (r *renderer) eval1(e expr, s *scope) (value, error) {
	if err := r.step(e.lineNo()); err != nil {
		return nil, err
	}
	switch x := e.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := s.lookup(x.name); ok {
			return v, nil
		}
		return undefinedName(x.name), nil
	case *listExpr:
		items := make([]value, len(x.items))
		if err := r.charge(16*len(items), x.line); err != nil {
			return nil, err
		}
		for i, it := range x.items {
			v, err := r.eval(it, s)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return newList(items, x.tuple)
	case *dictExpr:
		d := newDict()
		if err := r.charge(80*len(x.keys), x.line); err != nil {
			return nil, err
		}
		for i := range x.keys {
			k, err := r.eval(x.keys[i], s)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.vals[i], s)
			if err != nil {
				return nil, err
			}
			if err := d.set(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *getattrExpr:
		obj, err := r.eval(x.obj, s)
		if err != nil {
			return nil, err
		}
		return r.getattr(obj, x.name)
	case *getitemExpr:
		obj, err := r.eval(x.obj, s)
		if err != nil {
			return nil, err
		}
		if sl, ok := x.key.(*sliceExpr); ok {
			return r.evalSlice(obj, sl, s, constFolded(x.obj, sl))
		}
		k, err := r.eval(x.key, s)
		if err != nil {
			return nil, err
		}
		return r.getitem(obj, k)
	case *callExpr:
		return r.evalCall(x, s, nil)
	case *filterExpr:
		return r.evalFilterChain(x, nil, s)
	case *testExpr:
		v, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		pos, kw, err := r.evalArgs(&x.args, s)
		if err != nil {
			return nil, err
		}
		return r.applyTest(x.name, v, pos, kw, x.line)
	case *unaryExpr:
		v, err := r.eval(x.x, s)
		if err != nil {
			return nil, err
		}
		if x.op == "not" {
			return !truthy(v), nil
		}
		return unaryOp(x.op, v)
	case *binExpr:
		l, err := r.eval(x.l, s)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(x.r, s)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(x.r, s)
		}
		rv, err := r.eval(x.r, s)
		if err != nil {
			return nil, err
		}
		return r.binOp(x.op, l, rv, x.line)
	case *concatExpr:
		var b strings.Builder
		for _, p := range x.parts {
			v, err := r.eval(p, s)
			if err != nil {
				return nil, err
			}
			str, err := r.str(v, x.line)
			if err != nil {
				return nil, err
			}
			if err := r.charge(len(str), x.line); err != nil {
				return nil, err
			}
			if b.Len()+len(str) > MaxOutputBytes {
				return nil, limitError(x.line, "the template built a string of more than %d bytes", MaxOutputBytes)
			}
			b.WriteString(str)
		}
		return b.String(), nil
	case *compareExpr:
		return r.evalCompare(x, s)
	case *condExpr:
		c, err := r.eval(x.test, s)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(x.then, s)
		}
		if x.else_ == nil {
			return undefinedHint(fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined.", x.line)), nil
		}
		return r.eval(x.else_, s)
	case *nsRefExpr:
		return nil, newError(x.line, "a namespace reference can only be assigned to")
	}
	return nil, fmt.Errorf("unknown expression %T", e)
}

func (r *renderer) evalCompare(x *compareExpr, s *scope) (value, error) {
	left := x.first
	l, err := r.eval(left, s)
	if err != nil {
		return nil, err
	}
	for i, op := range x.ops {
		rv, err := r.eval(x.rest[i], s)
		if err != nil {
			return nil, err
		}
		var ok bool
		switch op {
		case "==", "!=":
			eq, err := r.eq(l, rv, x.line)
			if err != nil {
				return nil, err
			}
			ok = eq == (op == "==")
		case "in", "notin":
			in, err := r.contains(rv, l, x.line)
			if err != nil {
				return nil, err
			}
			ok = in == (op == "in")
		default:
			if err := undefinedOperand(l, rv); err != nil {
				return nil, err
			}
			if ok, err = r.compare(op, l, rv, x.line); err != nil {
				return nil, err
			}
		}
		if !ok {
			return false, nil
		}
		l = rv
	}
	return true, nil
}

// eq is Python's ==, with its work counted against the step budget.
func (r *renderer) eq(a, b value, line int) (bool, error) {
	budget := r.lim.steps - r.steps
	eq := eqBudget(a, b, &budget)
	if budget < 0 {
		return false, limitError(line, "the template ran more than %d steps", r.lim.steps)
	}
	r.steps = r.lim.steps - budget
	return eq, r.step(line)
}

// compare is Python's < <= > >=, its work counted against the budget.
func (r *renderer) compare(op string, a, b value, line int) (bool, error) {
	budget := r.lim.steps - r.steps
	ok, err := pyCompare(op, a, b, &budget)
	r.steps = r.lim.steps - budget
	if err != nil {
		return false, wrap(err, line)
	}
	return ok, r.step(line)
}

// contains is Python's item in container.
func (r *renderer) contains(container, item value, line int) (bool, error) {
	if err := r.step(line); err != nil {
		return false, err
	}
	switch c := container.(type) {
	case string, markup:
		cs, _ := asString(c)
		is, ok := asString(item)
		if !ok {
			if u, isU := item.(*undefined); isU {
				return false, u.err()
			}
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		if err := r.work(len(cs), line); err != nil {
			return false, err
		}
		return strings.Contains(cs, is), nil
	case *dict:
		if _, err := hashKey(item); err != nil {
			return false, err
		}
		_, ok := c.get(item)
		return ok, nil
	case *dictView:
		if c.kind == "keys" {
			_, ok := c.d.get(item)
			return ok, nil
		}
	case rangeV:
		i, f, isF, ok := number(item)
		if !ok {
			break
		}
		if isF {
			if f != float64(int64(f)) {
				return false, nil
			}
			i = int64(f)
		}
		n := c.len()
		if n == 0 || (i-c.start)%c.step != 0 {
			return false, nil
		}
		k := (i - c.start) / c.step
		return k >= 0 && k < n, nil
	case noneType, *namespace, int64, float64, bool, *macro, *builtin, *boundMethod:
		return false, fmt.Errorf("argument of type %s is not iterable", reprQuick(typeName(c)))
	}
	items, err := r.iterate(container, line)
	if err != nil {
		return false, err
	}
	for _, it := range items {
		eq, err := r.eq(it, item, line)
		if err != nil || eq {
			return eq, err
		}
	}
	return false, nil
}

// iterate lists what a for loop over v visits. Generators are used up.
func (r *renderer) iterate(v value, line int) ([]value, error) {
	switch x := v.(type) {
	case *list:
		return x.items, r.work(16*len(x.items), line)
	case string, markup:
		str, _ := asString(x)
		n := runeLen(str)
		if err := r.charge(16*n+len(str), line); err != nil {
			return nil, err
		}
		if err := r.scratch(16*n, line); err != nil { // each character's string header
			return nil, err
		}
		out := make([]value, 0, n)
		for _, c := range str {
			out = append(out, string(c))
		}
		return out, nil
	case *dict:
		return x.keys, r.work(16*len(x.keys), line)
	case rangeV:
		n := x.len()
		if err := r.charge(16*int(n), line); err != nil {
			return nil, err
		}
		out := make([]value, n)
		for i := range out {
			out[i] = x.at(int64(i))
		}
		return out, nil
	case *generator:
		items := x.items[x.pos:]
		x.pos = len(x.items)
		return items, nil
	case *dictView:
		switch x.kind {
		case "keys":
			return x.d.keys, nil
		case "values":
			return x.d.vals, nil
		}
		if err := r.charge(64*x.d.len(), line); err != nil {
			return nil, err
		}
		out := make([]value, x.d.len())
		for i := range out {
			out[i] = &list{items: []value{x.d.keys[i], x.d.vals[i]}, tuple: true, depth: max(valueDepth(x.d.keys[i]), valueDepth(x.d.vals[i])) + 1}
		}
		return out, nil
	case *undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("%s object is not iterable", reprQuick(typeName(v)))
}

func (r *renderer) evalArgs(a *args, s *scope) ([]value, []kwarg, error) {
	pos := make([]value, 0, len(a.pos))
	for _, e := range a.pos {
		v, err := r.eval(e, s)
		if err != nil {
			return nil, nil, err
		}
		pos = append(pos, v)
	}
	var kw []kwarg
	for _, k := range a.kw {
		v, err := r.eval(k.x, s)
		if err != nil {
			return nil, nil, err
		}
		kw = append(kw, kwarg{k.name, v})
	}
	if a.dynArgs != nil {
		v, err := r.eval(a.dynArgs, s)
		if err != nil {
			return nil, nil, err
		}
		items, err := r.iterate(v, a.dynArgs.lineNo())
		if err != nil {
			return nil, nil, err
		}
		pos = append(pos, items...)
	}
	if a.dynKwargs != nil {
		v, err := r.eval(a.dynKwargs, s)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*dict)
		if !ok {
			return nil, nil, fmt.Errorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range d.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, nil, fmt.Errorf("keywords must be strings")
			}
			kw = append(kw, kwarg{ks, d.vals[i]})
		}
	}
	return pos, kw, nil
}

// evalCall evaluates a call; caller is a call block's body, passed as the
// caller keyword.
func (r *renderer) evalCall(x *callExpr, s *scope, caller *macro) (value, error) {
	fn, err := r.eval(x.fn, s)
	if err != nil {
		return nil, err
	}
	pos, kw, err := r.evalArgs(&x.args, s)
	if err != nil {
		return nil, err
	}
	if caller != nil {
		kw = append(kw, kwarg{"caller", caller})
	}
	v, err := r.call(fn, pos, kw, x.line)
	return v, wrap(err, x.line)
}

func (r *renderer) call(fn value, pos []value, kw []kwarg, line int) (value, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, pos, kw, line)
	case *builtin:
		return f.call(r, line, pos, kw)
	case *boundMethod:
		return r.callMethod(f.recv, f.name, pos, kw, line)
	case *loopCtx:
		if !f.node.recursive {
			return nil, fmt.Errorf("Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.")
		}
		if len(pos) != 1 || len(kw) > 0 {
			return nil, fmt.Errorf("loop() takes exactly one argument")
		}
		r.calls++
		defer func() { r.calls-- }()
		if r.calls > MaxCallDepth {
			return nil, limitError(line, "recursive loops nested deeper than %d", MaxCallDepth)
		}
		return r.runLoop(f.node, f.scope, pos[0], f.depth0+1, true)
	case *undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("%s object is not callable", reprQuick(typeName(fn)))
}

// evalFilterChain applies filter chain f; the innermost filter without an
// argument expression takes input (a block's text).
func (r *renderer) evalFilterChain(f expr, input value, s *scope) (value, error) {
	fe, ok := f.(*filterExpr)
	if !ok {
		return r.eval(f, s)
	}
	var v value
	var err error
	if fe.x == nil {
		v = input
	} else if v, err = r.evalFilterChain(fe.x, input, s); err != nil {
		return nil, err
	}
	if err := r.step(fe.line); err != nil {
		return nil, err
	}
	pos, kw, err := r.evalArgs(&fe.args, s)
	if err != nil {
		return nil, err
	}
	out, err := r.applyFilter(fe.name, v, pos, kw, fe.line)
	return out, wrap(err, fe.line)
}
