package chat

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// renderer is the state of one Render: it runs in the caller's goroutine
// and counts every step, byte and nested call against the limits, so that
// it stops itself (and nothing keeps running after it refused).
type renderer struct {
	ctx       context.Context
	deadline  time.Time
	timeout   time.Duration
	steps     int
	nextCheck int
	alloc     int
	depth     int // nested evaluation, to bound the Go stack
	calls     int // nested macro calls
	out       []byte
	lim       renderLimits
}

// renderLimits are a render's budgets: the exported limits, or smaller
// ones for fuzzing.
type renderLimits struct {
	steps, alloc, output int
}

var defaultLimits = renderLimits{steps: MaxSteps, alloc: MaxAllocBytes, output: MaxOutputBytes}

// maxEvalDepth bounds recursion in the evaluator: template nesting
// (MaxParseDepth) times macro calls stays well inside it for real
// templates, and far inside Go's stack for hostile ones.
const maxEvalDepth = 20_000

// checkEvery is how many steps pass between clock and context checks.
const checkEvery = 1024

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// scope holds the variables of one frame: the template's top level, a loop
// iteration, a macro call. Most hold a handful, kept in a small slice;
// big ones (the render's variables) in a map.
type scope struct {
	names  []string
	vals   []value
	m      map[string]value
	parent *scope
	inline [4]string
	ivals  [4]value
}

func newScope(parent *scope) *scope {
	s := &scope{parent: parent}
	s.names, s.vals = s.inline[:0], s.ivals[:0]
	return s
}

func mapScope(vars map[string]value, parent *scope) *scope {
	return &scope{m: vars, parent: parent}
}

func (s *scope) lookup(name string) (value, bool) {
	for ; s != nil; s = s.parent {
		if s.m != nil {
			if v, ok := s.m[name]; ok {
				return v, true
			}
			continue
		}
		for i, n := range s.names {
			if n == name {
				return s.vals[i], true
			}
		}
	}
	return nil, false
}

// reset empties a scope for reuse.
func (s *scope) reset() {
	clear(s.vals)
	s.names, s.vals, s.m = s.inline[:0], s.ivals[:0], nil
}

func (s *scope) set(name string, v value) {
	if s.m != nil {
		s.m[name] = v
		return
	}
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	if len(s.names) == 16 {
		s.m = make(map[string]value, 32)
		for i, n := range s.names {
			s.m[n] = s.vals[i]
		}
		s.m[name] = v
		s.names, s.vals = nil, nil
		return
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

// step counts one unit of work and, every checkEvery units, checks the
// step budget, the deadline and the context.
func (r *renderer) step(line int) error {
	r.steps++
	if r.steps < r.nextCheck {
		return nil
	}
	return r.check(line)
}

// work counts the steps of reading or writing n bytes.
func (r *renderer) work(n, line int) error {
	r.steps += n / 64
	if r.steps < r.nextCheck {
		return nil
	}
	return r.check(line)
}

func (r *renderer) check(line int) error {
	r.nextCheck = r.steps + checkEvery
	if r.steps > r.lim.steps {
		return limitError(line, "the template ran more than %d steps", r.lim.steps)
	}
	if !r.deadline.IsZero() && time.Now().After(r.deadline) {
		return limitError(line, "the chat template did not finish within %v", r.timeout)
	}
	if r.ctx != nil {
		if err := r.ctx.Err(); err != nil {
			return newError(line, "rendering stopped: %v", err)
		}
	}
	return nil
}

// listItemBytes is what one string in a list the renderer builds costs:
// its slot in the list and the string header the slot points to.
const listItemBytes = 32

// charge counts n bytes the template is about to allocate against the
// render's allocation budget and the cap on one value.
func (r *renderer) charge(n, line int) error {
	if n > MaxOutputBytes {
		return limitError(line, "the template built a value of more than %d bytes", MaxOutputBytes)
	}
	r.alloc += n
	if r.alloc > r.lim.alloc {
		return limitError(line, "the template allocated more than %d bytes", r.lim.alloc)
	}
	return r.work(n, line)
}

// scratch counts n bytes of working memory an operation allocates and
// drops (a rune copy of a string, the boxed pieces of a loop over one)
// against the render's allocation budget. The template keeps none of it,
// so the cap on one value does not apply.
func (r *renderer) scratch(n, line int) error {
	r.alloc += n
	if r.alloc > r.lim.alloc {
		return limitError(line, "the template allocated more than %d bytes", r.lim.alloc)
	}
	return r.work(n, line)
}

// emitValue prints v as {{ v }} prints it.
func (r *renderer) emitValue(v value, line int) error {
	str, err := r.str(v, line)
	if err != nil {
		return err
	}
	return r.emit(str, line)
}

// emit writes rendered text.
func (r *renderer) emit(s string, line int) error {
	if len(r.out)+len(s) > r.lim.output {
		return limitError(line, "the rendered text passed %d bytes", r.lim.output)
	}
	if err := r.charge(len(s), line); err != nil {
		return err
	}
	r.out = append(r.out, s...)
	return nil
}

// capture renders body into a string of its own (a macro, a set block).
func (r *renderer) capture(body []node, s *scope) (string, error) {
	saved := r.out
	r.out = nil
	err := r.exec(body, s)
	out := string(r.out)
	r.out = saved
	return out, err
}

// wrap gives a plain error the line where it arose.
func wrap(err error, line int) error {
	if err == nil || err == errBreak || err == errContinue {
		return err
	}
	var te *Error
	if errors.As(err, &te) {
		if te.Line == 0 {
			te.Line = line
		}
		return te
	}
	return newError(line, "%v", err)
}

func (r *renderer) exec(body []node, s *scope) error {
	for _, n := range body {
		if err := r.execNode(n, s); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) execNode(n node, s *scope) error {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > maxEvalDepth {
		return limitError(0, "the template nests deeper than %d levels while rendering", maxEvalDepth)
	}
	switch x := n.(type) {
	case *textNode:
		if err := r.step(0); err != nil {
			return err
		}
		return r.emit(x.s, 0)
	case *outputNode:
		if err := r.step(x.line); err != nil {
			return err
		}
		v, err := r.eval(x.x, s)
		if err != nil {
			return err
		}
		return r.emitValue(v, x.line)
	case *ifNode:
		for i, test := range x.tests {
			if err := r.step(x.line); err != nil {
				return err
			}
			v, err := r.eval(test, s)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.exec(x.bodies[i], s)
			}
		}
		return r.exec(x.else_, s)
	case *forNode:
		v, err := r.eval(x.iter, s)
		if err != nil {
			return err
		}
		_, err = r.runLoop(x, s, v, 0, false)
		return err
	case *setNode:
		v, err := r.eval(x.x, s)
		if err != nil {
			return err
		}
		return wrap(r.assign(x.target, v, s), x.line)
	case *setBlockNode:
		text, err := r.capture(x.body, s)
		if err != nil {
			return err
		}
		var v value = text
		if x.filter != nil {
			if v, err = r.evalFilterChain(x.filter, text, s); err != nil {
				return err
			}
		}
		return wrap(r.assign(x.target, v, s), x.line)
	case *macroNode:
		s.set(x.name, &macro{name: x.name, sig: &x.sig, body: x.body, scope: s})
		return nil
	case *callBlockNode:
		caller := &macro{name: "caller", sig: &x.sig, body: x.body, scope: s}
		v, err := r.evalCall(x.call, s, caller)
		if err != nil {
			return err
		}
		return r.emitValue(v, x.line)
	case *filterBlockNode:
		text, err := r.capture(x.body, s)
		if err != nil {
			return err
		}
		v, err := r.evalFilterChain(x.filter, text, s)
		if err != nil {
			return err
		}
		return r.emitValue(v, x.line)
	case *withNode:
		inner := newScope(s)
		for i, t := range x.targets {
			v, err := r.eval(x.vals[i], s)
			if err != nil {
				return err
			}
			if err := r.assign(t, v, inner); err != nil {
				return wrap(err, x.line)
			}
		}
		return r.exec(x.body, inner)
	case *scopeNode:
		return r.exec(x.body, newScope(s))
	case nodeList:
		return r.exec(x, s)
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return fmt.Errorf("unknown node %T", n)
}

// str is Python's str(v) for printing, charged against the budget.
func (r *renderer) str(v value, line int) (string, error) {
	s, err := pyStr(v)
	if err != nil {
		return "", wrap(err, line)
	}
	switch v.(type) {
	case string, markup:
	default:
		if err := r.charge(len(s), line); err != nil {
			return "", err
		}
	}
	return s, nil
}

// assign binds v to a set, for or with target.
func (r *renderer) assign(target expr, v value, s *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		s.set(t.name, v)
		return nil
	case *nsRefExpr:
		nv, _ := s.lookup(t.name)
		ns, ok := nv.(*namespace)
		if !ok {
			return newError(t.line, "cannot assign attribute on non-namespace object")
		}
		return ns.attrs.set(t.attr, v)
	case *listExpr:
		items, err := r.iterate(v, t.line)
		if err != nil {
			return err
		}
		if len(items) < len(t.items) {
			return newError(t.line, "not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		if len(items) > len(t.items) {
			return newError(t.line, "too many values to unpack (expected %d)", len(t.items))
		}
		for i, it := range t.items {
			if err := r.assign(it, items[i], s); err != nil {
				return err
			}
		}
		return nil
	}
	return newError(target.lineNo(), "cannot assign to this target")
}

// loopCtx is Jinja's loop variable.
type loopCtx struct {
	seq     loopSeq
	index   int
	depth0  int
	node    *forNode
	scope   *scope
	changed []value
	hasLast bool
}

// loopSeq is what a loop goes over: a list of items, or a range, whose
// items are made as the loop reaches them.
type loopSeq struct {
	items []value
	rng   *rangeV
	n     int
}

func (q *loopSeq) at(i int) value {
	if q.rng != nil {
		return q.rng.at(int64(i))
	}
	return q.items[i]
}

// runLoop runs a for loop over v. A recursive loop's loop(x) calls it
// again one level deeper, capturing its text.
func (r *renderer) runLoop(x *forNode, s *scope, v value, depth0 int, capture bool) (string, error) {
	var seq loopSeq
	if rng, ok := v.(rangeV); ok && x.cond == nil {
		seq = loopSeq{rng: &rng, n: int(rng.len())}
	} else {
		items, err := r.iterate(v, x.line)
		if err != nil {
			return "", wrap(err, x.line)
		}
		seq = loopSeq{items: items, n: len(items)}
	}
	var saved []byte
	if capture {
		saved, r.out = r.out, nil
		defer func() { r.out = saved }()
	}
	if x.cond != nil {
		kept := make([]value, 0, len(seq.items))
		for _, it := range seq.items {
			if err := r.step(x.line); err != nil {
				return "", err
			}
			inner := newScope(s)
			if err := r.assign(x.target, it, inner); err != nil {
				return "", wrap(err, x.line)
			}
			c, err := r.eval(x.cond, inner)
			if err != nil {
				return "", err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		seq = loopSeq{items: kept, n: len(kept)}
	}
	if seq.n == 0 {
		if err := r.exec(x.else_, s); err != nil {
			return "", err
		}
		return r.captured(capture), nil
	}
	loop := &loopCtx{seq: seq, depth0: depth0, node: x, scope: s}
	var inner *scope
	for i := range seq.n {
		if err := r.step(x.line); err != nil {
			return "", err
		}
		loop.index = i
		// Each iteration has fresh variables; the scope itself is reused
		// unless the body defines a macro, which would keep it.
		if inner == nil || x.keepsScope {
			inner = newScope(s)
		} else {
			inner.reset()
		}
		if err := r.assign(x.target, seq.at(i), inner); err != nil {
			return "", wrap(err, x.line)
		}
		inner.set("loop", loop)
		err := r.exec(x.body, inner)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return "", err
		}
	}
	return r.captured(capture), nil
}

func (r *renderer) captured(capture bool) string {
	if !capture {
		return ""
	}
	return string(r.out)
}

// macro is a {% macro %} (or a call block's caller).
type macro struct {
	name  string
	sig   *sig
	body  []node
	scope *scope
}

// callMacro binds arguments as Jinja does (positional, then keyword, then
// defaults evaluated in the macro's own scope; varargs and kwargs catch the
// rest when the body reads them) and renders the body.
func (r *renderer) callMacro(m *macro, pos []value, kw []kwarg, line int) (value, error) {
	r.calls++
	defer func() { r.calls-- }()
	if r.calls > MaxCallDepth {
		return nil, limitError(line, "macro calls nested deeper than %d (runaway recursion?)", MaxCallDepth)
	}
	sg := m.sig
	s := newScope(m.scope)
	n := len(sg.params)
	if len(pos) > n && !sg.usesVarargs {
		return nil, newError(line, "macro '%s' takes not more than %d argument(s)", m.name, n)
	}
	set := make([]bool, n)
	for i := 0; i < n && i < len(pos); i++ {
		s.set(sg.params[i], pos[i])
		set[i] = true
	}
	extra := newDict()
	var caller value = undefinedName("caller")
	for _, k := range kw {
		i := indexOf(sg.params, k.name)
		switch {
		case i >= 0 && set[i]:
			return nil, newError(line, "macro '%s' got multiple values for argument '%s'", m.name, k.name)
		case i >= 0:
			s.set(k.name, k.val)
			set[i] = true
		case k.name == "caller" && sg.usesCaller:
			caller = k.val
		case sg.usesKwargs:
			if err := extra.set(k.name, k.val); err != nil {
				return nil, err
			}
		default:
			return nil, newError(line, "macro '%s' takes no keyword argument '%s'", m.name, k.name)
		}
	}
	firstDefault := n - len(sg.defaults)
	for i, p := range sg.params {
		if set[i] {
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(sg.defaults[i-firstDefault], s)
			if err != nil {
				return nil, err
			}
			s.set(p, v)
		} else {
			s.set(p, undefinedHint(fmt.Sprintf("parameter '%s' was not provided", p)))
		}
	}
	if sg.usesVarargs {
		var rest []value
		if len(pos) > n {
			rest = pos[n:]
		}
		l, err := newList(rest, true)
		if err != nil {
			return nil, err
		}
		s.set("varargs", l)
	}
	if sg.usesKwargs {
		s.set("kwargs", extra)
	}
	if sg.usesCaller {
		s.set("caller", caller)
	}
	out, err := r.capture(m.body, s)
	if err == errBreak || err == errContinue {
		err = nil
	}
	return out, err
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
