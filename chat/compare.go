package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Python's equality, identity and ordering, with the work they do counted
// against a budget (shared lists can make a comparison exponential).

// pyEq is Python's == for values known to be small (keys, test
// arguments); the renderer's eq also bounds the work.
func pyEq(a, b value) bool {
	budget := MaxSteps
	return eqBudget(a, b, &budget)
}

// eqBudget is Python's ==, counting every pair of values it compares
// against budget; once budget goes negative it stops and says false.
func eqBudget(a, b value, budget *int) bool {
	*budget--
	if *budget < 0 {
		return false
	}
	if ai, af, aF, ok := number(a); ok {
		bi, bf, bF, ok := number(b)
		if !ok {
			return false
		}
		switch {
		case !aF && !bF:
			return ai == bi
		case aF && bF:
			return af == bf
		case aF:
			return af == float64(bi) && math.Abs(af) < 1<<63 && int64(af) == bi
		default:
			return bf == float64(ai) && math.Abs(bf) < 1<<63 && int64(bf) == ai
		}
	}
	if as, ok := asString(a); ok {
		bs, ok := asString(b)
		if ok {
			*budget -= len(as) / 64
		}
		return ok && as == bs
	}
	switch x := a.(type) {
	case noneType:
		_, ok := b.(noneType)
		return ok
	case *undefined:
		_, ok := b.(*undefined)
		return ok
	case bigInt:
		y, ok := b.(bigInt)
		return ok && x == y
	case *list:
		y, ok := b.(*list)
		if !ok || x.tuple != y.tuple || len(x.items) != len(y.items) {
			return false
		}
		if x == y {
			return true
		}
		for i := range x.items {
			if !eqBudget(x.items[i], y.items[i], budget) {
				return false
			}
		}
		return true
	case *dict:
		y, ok := b.(*dict)
		if !ok || x.len() != y.len() {
			return false
		}
		if x == y {
			return true
		}
		for i, k := range x.keys {
			yv, ok := y.get(k)
			if !ok || !eqBudget(x.vals[i], yv, budget) {
				return false
			}
		}
		return true
	case rangeV:
		y, ok := b.(rangeV)
		if !ok {
			return false
		}
		n := x.len()
		return n == y.len() && (n == 0 || (x.start == y.start && (n == 1 || x.step == y.step)))
	case *boundMethod:
		y, ok := b.(*boundMethod)
		return ok && x.name == y.name && sameObject(x.recv, y.recv)
	}
	return sameObject(a, b)
}

// sameObject is Python's "is" for the values that have identity.
func sameObject(a, b value) bool {
	switch x := a.(type) {
	case noneType:
		_, ok := b.(noneType)
		return ok
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case *list:
		y, ok := b.(*list)
		return ok && x == y
	case *dict:
		y, ok := b.(*dict)
		return ok && x == y
	case *namespace:
		y, ok := b.(*namespace)
		return ok && x == y
	case *macro:
		y, ok := b.(*macro)
		return ok && x == y
	case *generator:
		y, ok := b.(*generator)
		return ok && x == y
	case *loopCtx:
		y, ok := b.(*loopCtx)
		return ok && x == y
	case *builtin:
		y, ok := b.(*builtin)
		return ok && x == y
	case *dictView:
		y, ok := b.(*dictView)
		return ok && x == y
	case *undefined:
		y, ok := b.(*undefined)
		return ok && x == y
	case int64:
		// CPython caches small ints; "is" on them is what == says.
		y, ok := b.(int64)
		return ok && x == y && x >= -5 && x <= 256
	case string:
		y, ok := b.(string)
		return ok && x == y && len(x) <= 1
	}
	return false
}

func asString(v value) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case markup:
		return string(x), true
	}
	return "", false
}

// pyCompare is Python's <, <=, > and >= (op one of those), which raise
// TypeError between unordered types. Every pair of values it looks at
// counts against budget; past it, the comparison fails with ErrLimit.
func pyCompare(op string, a, b value, budget *int) (bool, error) {
	c, err := pyCmp(a, b, budget)
	if err != nil {
		var u *unorderedError
		if errors.As(err, &u) {
			if err := bigIntError(u.a, u.b); err != nil {
				return false, err
			}
			// As Python, the message names the innermost pair: [1] < ['a']
			// fails between 'int' and 'str'.
			return false, fmt.Errorf("'%s' not supported between instances of %s and %s", op, reprQuick(typeName(u.a)), reprQuick(typeName(u.b)))
		}
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// unorderedError is pyCmp's error for a pair of values Python does not
// order: a and b are that pair, inside the lists compared.
type unorderedError struct{ a, b value }

func (e *unorderedError) Error() string { return "unordered" }

// pyCmp orders a and b as Python does: numbers, strings by code point, and
// lists or tuples item by item. NaN compares as neither less nor greater.
func pyCmp(a, b value, budget *int) (int, error) {
	*budget--
	if *budget < 0 {
		return 0, limitError(0, "the template ran past its budget of steps")
	}
	if ai, af, aF, ok := number(a); ok {
		bi, bf, bF, ok := number(b)
		if !ok {
			return 0, &unorderedError{a, b}
		}
		if !aF && !bF {
			return cmpOrdered(ai, bi), nil
		}
		if !aF {
			af = float64(ai)
		}
		if !bF {
			bf = float64(bi)
		}
		switch {
		case af < bf:
			return -1, nil
		case af > bf:
			return 1, nil
		}
		return 0, nil
	}
	if as, ok := asString(a); ok {
		bs, ok := asString(b)
		if !ok {
			return 0, &unorderedError{a, b}
		}
		*budget -= len(as) / 64
		return strings.Compare(as, bs), nil // UTF-8 byte order is code point order
	}
	x, ok1 := a.(*list)
	y, ok2 := b.(*list)
	if !ok1 || !ok2 || x.tuple != y.tuple {
		return 0, &unorderedError{a, b}
	}
	for i := 0; i < len(x.items) && i < len(y.items); i++ {
		if eqBudget(x.items[i], y.items[i], budget) {
			continue
		}
		if *budget < 0 {
			return 0, limitError(0, "the template ran past its budget of steps")
		}
		return pyCmp(x.items[i], y.items[i], budget)
	}
	return cmpOrdered(len(x.items), len(y.items)), nil
}

func cmpOrdered[T int | int64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
