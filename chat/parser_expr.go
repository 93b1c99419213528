package chat

import "strings"

// Expression parsing, in Jinja's precedence order.

// parseTuple parses an expression, or a tuple when commas separate several
// (simplified: names and literals only, as assignment targets are).
func (p *parser) parseTuple(simplified, withCond bool, extraEnd []string, explicit, withNS bool) expr {
	line := p.cur().line
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			p.expect(tOp, ",")
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		if simplified {
			items = append(items, p.parsePrimary(withNS))
		} else {
			items = append(items, p.parseExpression(withCond))
		}
		if !p.isOp(",") {
			break
		}
		isTuple = true
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0]
		}
		if !explicit {
			p.fail("Expected an expression, got '%s'", excerpt(p.cur().describe()))
		}
	}
	return &listExpr{line: line, items: items, tuple: true}
}

func (p *parser) isTupleEnd(extraEnd []string) bool {
	t := p.cur()
	switch {
	case t.kind == tVarEnd || t.kind == tBlockEnd || t.kind == tEOF || p.isOp(")"):
		return true
	case t.kind == tName:
		return contains(extraEnd, t.s)
	}
	return false
}

func (p *parser) parseExpression(withCond bool) expr {
	if withCond {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() expr {
	line := p.cur().line
	e := p.parseOr()
	n := 0
	for p.skipName("if") {
		p.enter()
		n++
		test := p.parseOr()
		var else_ expr
		if p.skipName("else") {
			else_ = p.parseCondExpr()
		}
		e = &condExpr{line: line, test: test, then: e, else_: else_}
		line = p.cur().line
	}
	p.leave(n)
	return e
}

// parseBinary parses a left-associative chain of one precedence level.
func (p *parser) parseBinary(operand func() expr, match func() (string, bool)) expr {
	line := p.cur().line
	l := operand()
	n := 0
	for {
		op, ok := match()
		if !ok {
			break
		}
		p.enter()
		n++
		l = &binExpr{line: line, op: op, l: l, r: operand()}
		line = p.cur().line
	}
	p.leave(n)
	return l
}

func (p *parser) nameOp(names ...string) func() (string, bool) {
	return func() (string, bool) {
		for _, s := range names {
			if p.skipName(s) {
				return s, true
			}
		}
		return "", false
	}
}

func (p *parser) symOp(ops ...string) func() (string, bool) {
	return func() (string, bool) {
		for _, s := range ops {
			if p.skipOp(s) {
				return s, true
			}
		}
		return "", false
	}
}

func (p *parser) parseOr() expr  { return p.parseBinary(p.parseAnd, p.nameOp("or")) }
func (p *parser) parseAnd() expr { return p.parseBinary(p.parseNot, p.nameOp("and")) }

func (p *parser) parseNot() expr {
	if p.isName("not") {
		line := p.next().line
		p.enter()
		defer p.leave(1)
		return &unaryExpr{line: line, op: "not", x: p.parseNot()}
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() expr {
	line := p.cur().line
	first := p.parseMath1()
	c := &compareExpr{line: line, first: first}
	for {
		t := p.cur()
		switch {
		case t.kind == tOp && (t.s == "==" || t.s == "!=" || t.s == "<" || t.s == "<=" || t.s == ">" || t.s == ">="):
			p.next()
			c.ops = append(c.ops, t.s)
		case p.isName("in"):
			p.next()
			c.ops = append(c.ops, "in")
		case p.isName("not") && p.look().kind == tName && p.look().s == "in":
			p.next()
			p.next()
			c.ops = append(c.ops, "notin")
		default:
			if len(c.ops) == 0 {
				return first
			}
			p.leave(len(c.ops))
			return c
		}
		p.enter()
		c.rest = append(c.rest, p.parseMath1())
	}
}

func (p *parser) parseMath1() expr { return p.parseBinary(p.parseConcat, p.symOp("+", "-")) }

func (p *parser) parseConcat() expr {
	line := p.cur().line
	first := p.parseMath2()
	if !p.isOp("~") {
		return first
	}
	c := &concatExpr{line: line, parts: []expr{first}}
	for p.skipOp("~") {
		p.enter()
		c.parts = append(c.parts, p.parseMath2())
	}
	p.leave(len(c.parts) - 1)
	return c
}

func (p *parser) parseMath2() expr {
	return p.parseBinary(p.parsePow, p.symOp("*", "/", "//", "%"))
}

func (p *parser) parsePow() expr {
	return p.parseBinary(func() expr { return p.parseUnary(true) }, p.symOp("**"))
}

func (p *parser) parseUnary(withFilter bool) expr {
	t := p.cur()
	p.enter()
	defer p.leave(1)
	var e expr
	if t.kind == tOp && (t.s == "-" || t.s == "+") {
		p.next()
		e = &unaryExpr{line: t.line, op: t.s, x: p.parseUnary(false)}
	} else {
		e = p.parsePrimary(false)
	}
	n := 0
	e = p.parsePostfix(e, &n)
	if withFilter {
		e = p.parseFilterExpr(e, &n)
	}
	p.leave(n)
	return e
}

func (p *parser) parsePrimary(withNS bool) expr {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.s {
		case "true", "True":
			return &constExpr{line: t.line, v: true}
		case "false", "False":
			return &constExpr{line: t.line, v: false}
		case "none", "None":
			return &constExpr{line: t.line, v: none}
		}
		if withNS && p.isOp(".") {
			p.next()
			return &nsRefExpr{line: t.line, name: t.s, attr: p.expectName()}
		}
		return &nameExpr{line: t.line, name: t.s}
	case tString:
		p.next()
		if p.cur().kind != tString {
			return &constExpr{line: t.line, v: t.s}
		}
		var b strings.Builder // adjacent literals join, as in Python
		b.WriteString(t.s)
		for p.cur().kind == tString {
			b.WriteString(p.next().s)
		}
		return &constExpr{line: t.line, v: b.String()}
	case tInt, tFloat:
		p.next()
		return &constExpr{line: t.line, v: t.num}
	case tOp:
		switch t.s {
		case "(":
			p.next()
			p.enter()
			e := p.parseTuple(false, true, nil, true, false)
			p.expect(tOp, ")")
			p.leave(1)
			return e
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	p.fail("unexpected '%s'", excerpt(t.describe()))
	return nil
}

func (p *parser) parseList() expr {
	line := p.next().line
	p.enter()
	defer p.leave(1)
	e := &listExpr{line: line}
	for !p.isOp("]") {
		if len(e.items) > 0 {
			p.expect(tOp, ",")
		}
		if p.isOp("]") {
			break
		}
		e.items = append(e.items, p.parseExpression(true))
	}
	p.expect(tOp, "]")
	return e
}

func (p *parser) parseDict() expr {
	line := p.next().line
	p.enter()
	defer p.leave(1)
	e := &dictExpr{line: line}
	for !p.isOp("}") {
		if len(e.keys) > 0 {
			p.expect(tOp, ",")
		}
		if p.isOp("}") {
			break
		}
		e.keys = append(e.keys, p.parseExpression(true))
		p.expect(tOp, ":")
		e.vals = append(e.vals, p.parseExpression(true))
	}
	p.expect(tOp, "}")
	return e
}

// parsePostfix parses .attr, [item] and (call) after a primary; n counts
// the nesting levels it entered.
func (p *parser) parsePostfix(e expr, n *int) expr {
	for {
		switch {
		case p.isOp(".") || p.isOp("["):
			p.enter()
			*n++
			e = p.parseSubscript(e)
		case p.isOp("("):
			p.enter()
			*n++
			e = p.parseCall(e)
		default:
			return e
		}
	}
}

func (p *parser) parseFilterExpr(e expr, n *int) expr {
	for {
		switch {
		case p.isOp("|"):
			e = p.parseFilter(e, false)
		case p.isName("is"):
			e = p.parseTest(e)
		case p.isOp("("):
			e = p.parseCall(e)
		default:
			return e
		}
		p.enter()
		*n++
	}
}

func (p *parser) parseSubscript(obj expr) expr {
	t := p.next()
	if t.s == "." {
		a := p.next()
		switch a.kind {
		case tName:
			return &getattrExpr{line: t.line, obj: obj, name: a.s}
		case tInt:
			return &getitemExpr{line: t.line, obj: obj, key: &constExpr{line: a.line, v: a.num}}
		}
		p.failAt(a.line, "expected name or number")
	}
	var keys []expr
	for !p.isOp("]") {
		if len(keys) > 0 {
			p.expect(tOp, ",")
		}
		keys = append(keys, p.parseSubscribed())
	}
	p.expect(tOp, "]")
	if len(keys) == 1 {
		return &getitemExpr{line: t.line, obj: obj, key: keys[0]}
	}
	return &getitemExpr{line: t.line, obj: obj, key: &listExpr{line: t.line, items: keys, tuple: true}}
}

func (p *parser) parseSubscribed() expr {
	line := p.cur().line
	var parts []expr
	if p.skipOp(":") {
		parts = []expr{nil}
	} else {
		e := p.parseExpression(true)
		if !p.skipOp(":") {
			return e
		}
		parts = []expr{e}
	}
	switch {
	case p.isOp(":"):
		parts = append(parts, nil)
	case !p.isOp("]") && !p.isOp(","):
		parts = append(parts, p.parseExpression(true))
	default:
		parts = append(parts, nil)
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			parts = append(parts, p.parseExpression(true))
		} else {
			parts = append(parts, nil)
		}
	} else {
		parts = append(parts, nil)
	}
	return &sliceExpr{line: line, start: parts[0], stop: parts[1], step: parts[2]}
}

func (p *parser) parseCallArgs() args {
	open := p.expect(tOp, "(")
	var a args
	ensure := func(ok bool) {
		if !ok {
			p.failAt(open.line, "invalid syntax for function call expression")
		}
	}
	requireComma := false
	for !p.isOp(")") {
		if requireComma {
			p.expect(tOp, ",")
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			ensure(a.dynArgs == nil && a.dynKwargs == nil)
			p.next()
			a.dynArgs = p.parseExpression(true)
		case p.isOp("**"):
			ensure(a.dynKwargs == nil)
			p.next()
			a.dynKwargs = p.parseExpression(true)
		case p.cur().kind == tName && p.look().kind == tOp && p.look().s == "=":
			ensure(a.dynKwargs == nil)
			name := p.next().s
			p.next()
			a.kw = append(a.kw, kwExpr{name: name, x: p.parseExpression(true)})
		default:
			ensure(a.dynArgs == nil && a.dynKwargs == nil && len(a.kw) == 0)
			a.pos = append(a.pos, p.parseExpression(true))
		}
		requireComma = true
	}
	p.expect(tOp, ")")
	return a
}

func (p *parser) parseCall(fn expr) expr {
	line := p.cur().line
	return &callExpr{line: line, fn: fn, args: p.parseCallArgs()}
}

// parseFilter parses |name(args) links; inline starts at a name without |
// (the {% filter %} tag). Within a chain, each filter's x is the previous.
func (p *parser) parseFilter(x expr, inline bool) expr {
	n := 0
	for p.isOp("|") || inline {
		if !inline {
			p.next()
		}
		inline = false
		t := p.expect(tName, "")
		name := t.s
		for p.skipOp(".") {
			name += "." + p.expectName()
		}
		f := &filterExpr{line: t.line, x: x, name: name}
		if p.isOp("(") {
			f.args = p.parseCallArgs()
		}
		x = f
		p.enter()
		n++
	}
	p.leave(n)
	return x
}

func (p *parser) parseTest(x expr) expr {
	t := p.next()
	negated := p.skipName("not")
	name := p.expectName()
	for p.skipOp(".") {
		name += "." + p.expectName()
	}
	e := &testExpr{line: t.line, x: x, name: name}
	c := p.cur()
	switch {
	case p.isOp("("):
		e.args = p.parseCallArgs()
	case c.kind == tName && c.s != "else" && c.s != "or" && c.s != "and",
		c.kind == tString || c.kind == tInt || c.kind == tFloat || p.isOp("[") || p.isOp("{"):
		if p.isName("is") {
			p.fail("You cannot chain multiple tests with is")
		}
		n := 0
		arg := p.parsePostfix(p.parsePrimary(false), &n)
		p.leave(n)
		e.args.pos = []expr{arg}
	}
	if negated {
		return &unaryExpr{line: t.line, op: "not", x: e}
	}
	return e
}
