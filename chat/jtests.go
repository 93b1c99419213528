package chat

import (
	"errors"
	"fmt"
)

// Jinja's tests (x is name).

type testFunc func(r *renderer, line int, v value, args []value) (bool, error)

var tests map[string]testFunc

// testProblem says why name cannot be used as a test ("" if it can).
func testProblem(name string) string {
	if tests[name] != nil {
		return ""
	}
	return fmt.Sprintf("No test named '%s'.", excerpt(name))
}

func init() {
	cmp := func(op string) testFunc {
		return func(r *renderer, line int, v value, a []value) (bool, error) {
			if len(a) != 1 {
				return false, fmt.Errorf("the %s test takes one argument", op)
			}
			switch op {
			case "==":
				return r.eq(v, a[0], line)
			case "!=":
				eq, err := r.eq(v, a[0], line)
				return !eq, err
			}
			if err := undefinedOperand(v, a[0]); err != nil {
				return false, err
			}
			return r.compare(op, v, a[0], line)
		}
	}
	tests = map[string]testFunc{
		"odd":         parity(1),
		"even":        parity(0),
		"divisibleby": testDivisibleBy,
		"defined":     noArgs(func(v value) bool { _, u := v.(*undefined); return !u }),
		"undefined":   noArgs(func(v value) bool { _, u := v.(*undefined); return u }),
		"filter":      noArgs(func(v value) bool { s, ok := v.(string); return ok && filters[s] != nil }),
		"test":        noArgs(func(v value) bool { s, ok := v.(string); return ok && tests[s] != nil }),
		"none":        noArgs(func(v value) bool { _, ok := v.(noneType); return ok }),
		"boolean":     noArgs(func(v value) bool { _, ok := v.(bool); return ok }),
		"false":       noArgs(func(v value) bool { b, ok := v.(bool); return ok && !b }),
		"true":        noArgs(func(v value) bool { b, ok := v.(bool); return ok && b }),
		"integer": noArgs(func(v value) bool {
			switch v.(type) {
			case int64, bigInt:
				return true
			}
			return false
		}),
		"float":   noArgs(func(v value) bool { _, ok := v.(float64); return ok }),
		"lower":   strTest(false),
		"upper":   strTest(true),
		"string":  noArgs(func(v value) bool { _, ok := asString(v); return ok }),
		"mapping": noArgs(func(v value) bool { _, ok := v.(*dict); return ok }),
		"number": noArgs(func(v value) bool {
			_, _, _, ok := number(v)
			_, big := v.(bigInt)
			return ok || big
		}),
		"sequence": noArgs(func(v value) bool {
			switch v.(type) {
			case string, markup, *list, *dict, rangeV, *undefined:
				return true
			}
			return false
		}),
		"iterable": noArgs(func(v value) bool {
			switch v.(type) {
			case string, markup, *list, *dict, rangeV, *undefined, *generator, *dictView, *loopCtx:
				return true
			}
			return false
		}),
		"callable": noArgs(func(v value) bool {
			switch v.(type) {
			case *macro, *builtin, *boundMethod, *loopCtx, *undefined:
				return true
			}
			return false
		}),
		"sameas": func(_ *renderer, _ int, v value, a []value) (bool, error) {
			if len(a) != 1 {
				return false, errors.New("the sameas test takes one argument")
			}
			return sameObject(v, a[0]), nil
		},
		"escaped": noArgs(func(v value) bool { _, ok := v.(markup); return ok }),
		"in": func(r *renderer, line int, v value, a []value) (bool, error) {
			if len(a) != 1 {
				return false, errors.New("the in test takes one argument")
			}
			return r.contains(a[0], v, line)
		},
	}
	for _, names := range [][]string{
		{"==", "eq", "equalto"}, {"!=", "ne"}, {">", "gt", "greaterthan"}, {">=", "ge"},
		{"<", "lt", "lessthan"}, {"<=", "le"},
	} {
		f := cmp(names[0])
		for _, n := range names {
			tests[n] = f
		}
	}
}

func noArgs(f func(value) bool) testFunc {
	return func(_ *renderer, _ int, v value, a []value) (bool, error) {
		if len(a) > 0 {
			return false, fmt.Errorf("this test takes no arguments (%d given)", len(a))
		}
		return f(v), nil
	}
}

func strTest(upper bool) testFunc {
	return func(r *renderer, line int, v value, a []value) (bool, error) {
		s, err := r.str(v, line)
		return pyIsCase(s, upper), err
	}
}

func parity(want int64) testFunc {
	return func(r *renderer, line int, v value, _ []value) (bool, error) {
		m, err := r.binOp("%", v, int64(2), line)
		if err != nil {
			return false, err
		}
		return pyEq(m, want), nil
	}
}

func testDivisibleBy(r *renderer, line int, v value, a []value) (bool, error) {
	if len(a) != 1 {
		return false, errors.New("divisibleby takes one argument")
	}
	m, err := r.binOp("%", v, a[0], line)
	if err != nil {
		return false, err
	}
	return pyEq(m, int64(0)), nil
}

func (r *renderer) applyTest(name string, v value, pos []value, kw []kwarg, line int) (value, error) {
	f := tests[name]
	if f == nil {
		return nil, errors.New(testProblem(name))
	}
	if len(kw) > 0 {
		return nil, fmt.Errorf("the %s test takes no keyword arguments", name)
	}
	ok, err := f(r, line, v, pos)
	return ok, err
}
