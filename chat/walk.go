package chat

// Walks over the syntax tree: finding expressions, and checking filter and
// test names as Jinja does when it compiles a template.

// walkNodes calls fn on every expression in body, nested ones included
// (as walkExpr does).
func walkNodes(body []node, fn func(expr) bool) {
	for _, n := range body {
		switch x := n.(type) {
		case *outputNode:
			walkExpr(x.x, fn)
		case *forNode:
			walkExpr(x.target, fn)
			walkExpr(x.iter, fn)
			walkExpr(x.cond, fn)
			walkNodes(x.body, fn)
			walkNodes(x.else_, fn)
		case *ifNode:
			for i := range x.tests {
				walkExpr(x.tests[i], fn)
				walkNodes(x.bodies[i], fn)
			}
			walkNodes(x.else_, fn)
		case *setNode:
			walkExpr(x.target, fn)
			walkExpr(x.x, fn)
		case *setBlockNode:
			walkExpr(x.filter, fn)
			walkNodes(x.body, fn)
		case *macroNode:
			for _, d := range x.defaults {
				walkExpr(d, fn)
			}
			walkNodes(x.body, fn)
		case *callBlockNode:
			walkExpr(x.call, fn)
			for _, d := range x.defaults {
				walkExpr(d, fn)
			}
			walkNodes(x.body, fn)
		case *filterBlockNode:
			walkExpr(x.filter, fn)
			walkNodes(x.body, fn)
		case *withNode:
			for i := range x.targets {
				walkExpr(x.vals[i], fn)
			}
			walkNodes(x.body, fn)
		case *scopeNode:
			walkNodes(x.body, fn)
		case nodeList:
			walkNodes(x, fn)
		}
	}
}

func walkArgs(a *args, fn func(expr) bool) {
	for _, e := range a.pos {
		walkExpr(e, fn)
	}
	for _, k := range a.kw {
		walkExpr(k.x, fn)
	}
	walkExpr(a.dynArgs, fn)
	walkExpr(a.dynKwargs, fn)
}

// walkExpr calls fn on e and, while fn returns true, on its parts.
func walkExpr(e expr, fn func(expr) bool) {
	if e == nil || !fn(e) {
		return
	}
	switch x := e.(type) {
	case *listExpr:
		for _, it := range x.items {
			walkExpr(it, fn)
		}
	case *dictExpr:
		for i := range x.keys {
			walkExpr(x.keys[i], fn)
			walkExpr(x.vals[i], fn)
		}
	case *getattrExpr:
		walkExpr(x.obj, fn)
	case *getitemExpr:
		walkExpr(x.obj, fn)
		walkExpr(x.key, fn)
	case *sliceExpr:
		walkExpr(x.start, fn)
		walkExpr(x.stop, fn)
		walkExpr(x.step, fn)
	case *callExpr:
		walkExpr(x.fn, fn)
		walkArgs(&x.args, fn)
	case *filterExpr:
		walkExpr(x.x, fn)
		walkArgs(&x.args, fn)
	case *testExpr:
		walkExpr(x.x, fn)
		walkArgs(&x.args, fn)
	case *unaryExpr:
		walkExpr(x.x, fn)
	case *binExpr:
		walkExpr(x.l, fn)
		walkExpr(x.r, fn)
	case *concatExpr:
		for _, it := range x.parts {
			walkExpr(it, fn)
		}
	case *compareExpr:
		walkExpr(x.first, fn)
		for _, it := range x.rest {
			walkExpr(it, fn)
		}
	case *condExpr:
		walkExpr(x.test, fn)
		walkExpr(x.then, fn)
		walkExpr(x.else_, fn)
	}
}

// checkNames fails on a filter or test that does not exist, as Jinja does
// when it compiles the template, except inside if blocks and inline ifs
// (soft), where Jinja waits until the filter is used.
func checkNames(body []node, soft bool) {
	for _, n := range body {
		switch x := n.(type) {
		case *outputNode:
			checkExpr(x.x, soft)
		case *setNode:
			checkExpr(x.x, soft)
		case *ifNode:
			for i := range x.tests {
				checkNames(x.bodies[i], true)
			}
			checkNames(x.else_, true)
		case *forNode:
			checkExpr(x.iter, soft)
			checkExpr(x.cond, false)
			checkNames(x.body, false)
			checkNames(x.else_, soft)
		case *macroNode:
			for _, d := range x.defaults {
				checkExpr(d, soft)
			}
			checkNames(x.body, false)
		case *callBlockNode:
			checkExpr(x.call, soft)
			checkNames(x.body, false)
		case *setBlockNode:
			checkExpr(x.filter, soft)
			checkNames(x.body, false)
		case *filterBlockNode:
			checkExpr(x.filter, soft)
			checkNames(x.body, false)
		case *withNode:
			for _, v := range x.vals {
				checkExpr(v, soft)
			}
			checkNames(x.body, false)
		case *scopeNode:
			checkNames(x.body, soft)
		case nodeList:
			checkNames(x, soft)
		}
	}
}

// checkExpr checks e's filters and tests; an inline if is soft throughout.
func checkExpr(e expr, soft bool) {
	if soft {
		return
	}
	walkExpr(e, func(e expr) bool {
		switch x := e.(type) {
		case *condExpr:
			return false
		case *filterExpr:
			if msg := filterProblem(x.name); msg != "" {
				panic(parseError{newError(x.line, "%s", msg)})
			}
		case *testExpr:
			if msg := testProblem(x.name); msg != "" {
				panic(parseError{newError(x.line, "%s", msg)})
			}
		}
		return true
	})
}
