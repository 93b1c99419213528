package chat

import (
	"fmt"
	"strings"
)

// The parser follows Jinja's grammar and operator precedence (lowest
// first): inline if, or, and, not, comparisons and in, + -, ~, * / // %,
// **, unary - +, then primaries with their .attr, [item] and (call)
// postfixes, filters (|) and tests (is). Nesting is bounded by
// MaxParseDepth, so that no template can exhaust the stack.

type parser struct {
	toks      []token
	i         int
	depth     int
	loops     int        // enclosing for loops, for break and continue
	tagStack  []string   // open block tags, for error messages
	endTokens [][]string // the end tags being looked for
}

// parseError carries a parse error through panics inside the parser.
type parseError struct{ err *Error }

// parseTemplate parses a whole template.
func parseTemplate(src string) (body []node, err error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(parseError)
			if !ok {
				panic(r)
			}
			body, err = nil, pe.err
		}
	}()
	body = p.subparse(nil)
	if p.cur().kind != tEOF {
		p.fail("unexpected %s", p.cur().describe())
	}
	checkNames(body, false)
	return body, nil
}

func (p *parser) cur() token { return p.toks[p.i] }

func (p *parser) look() token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) fail(format string, args ...any) {
	p.failAt(p.cur().line, format, args...)
}

func (p *parser) failAt(line int, format string, args ...any) {
	panic(parseError{newError(line, format, args...)})
}

func (p *parser) enter() {
	p.depth++
	if p.depth > MaxParseDepth {
		panic(parseError{limitError(p.cur().line, "the template nests deeper than %d levels", MaxParseDepth)})
	}
}

func (p *parser) leave(n int) { p.depth -= n }

func (p *parser) isOp(s string) bool   { t := p.cur(); return t.kind == tOp && t.s == s }
func (p *parser) isName(s string) bool { t := p.cur(); return t.kind == tName && t.s == s }

func (p *parser) skipOp(s string) bool {
	if p.isOp(s) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(s string) bool {
	if p.isName(s) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expect(kind tokKind, s string) token {
	t := p.cur()
	if t.kind == kind && (s == "" || t.s == s) {
		return p.next()
	}
	want := s
	if want == "" {
		want = token{kind: kind}.describe()
		if kind == tName {
			want = "name"
		}
	}
	if t.kind == tEOF {
		p.fail("unexpected end of template, expected '%s'.", want)
	}
	p.fail("expected token '%s', got '%s'", want, excerpt(t.describe()))
	return token{}
}

func (p *parser) expectName() string { return p.expect(tName, "").s }

// subparse parses template data and statements until one of end (tag
// names) begins a block, which is left as the current token.
func (p *parser) subparse(end []string) []node {
	if end != nil {
		p.enter()
		defer p.leave(1)
		p.endTokens = append(p.endTokens, end)
		defer func() { p.endTokens = p.endTokens[:len(p.endTokens)-1] }()
	}
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			return body
		case tData:
			p.next()
			body = append(body, &textNode{t.s})
		case tVarBegin:
			p.next()
			body = append(body, &outputNode{line: t.line, x: p.parseTuple(false, true, nil, false, false)})
			p.expect(tVarEnd, "")
		case tBlockBegin:
			p.next()
			if c := p.cur(); c.kind == tName && contains(end, c.s) {
				return body
			}
			if n := p.parseStatement(); n != nil {
				body = append(body, n)
			}
			p.expect(tBlockEnd, "")
		default:
			p.fail("unexpected %s", t.describe())
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseBody parses a statement's body up to one of end, and fails at the
// end of the template.
func (p *parser) parseBody(end ...string) []node {
	p.skipOp(":")
	p.expect(tBlockEnd, "")
	body := p.subparse(end)
	if p.cur().kind == tEOF {
		p.failEOF(end)
	}
	return body
}

// parseBodyDrop is parseBody that also consumes the end tag.
func (p *parser) parseBodyDrop(end ...string) []node {
	body := p.parseBody(end...)
	p.next()
	return body
}

func (p *parser) failEOF(end []string) {
	stack := append(append([][]string{}, p.endTokens...), end)
	p.failTags("", stack)
}

func quoteAll(tags []string) string {
	q := make([]string, len(tags))
	for i, t := range tags {
		q[i] = "'" + t + "'"
	}
	return strings.Join(q, " or ")
}

// failTags explains an unknown tag (name) or an early end of the template
// (name ""), as Jinja does.
func (p *parser) failTags(name string, stack [][]string) {
	msg := []string{"Unexpected end of template."}
	if name != "" {
		msg = []string{fmt.Sprintf("Encountered unknown tag '%s'.", excerpt(name))}
	}
	if len(stack) > 0 {
		looking := stack[len(stack)-1]
		expected := false
		for _, s := range stack {
			expected = expected || contains(s, name)
		}
		if name != "" && expected {
			msg = append(msg, "You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for "+quoteAll(looking)+".")
		} else {
			msg = append(msg, "Jinja was looking for the following tags: "+quoteAll(looking)+".")
		}
	}
	if len(p.tagStack) > 0 {
		msg = append(msg, fmt.Sprintf("The innermost block that needs to be closed is '%s'.", p.tagStack[len(p.tagStack)-1]))
	}
	p.fail("%s", strings.Join(msg, " "))
}

func (p *parser) parseStatement() node {
	t := p.cur()
	if t.kind != tName {
		p.fail("tag name expected")
	}
	if !statementTags[t.s] {
		p.failTags(t.s, p.endTokens)
	}
	p.tagStack = append(p.tagStack, t.s)
	defer func() { p.tagStack = p.tagStack[:len(p.tagStack)-1] }()
	switch t.s {
	case "for":
		return p.parseFor()
	case "if":
		return p.parseIf()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		p.next()
		f := p.parseFilter(nil, true)
		return &filterBlockNode{line: t.line, filter: f, body: p.parseBodyDrop("endfilter")}
	case "with":
		return p.parseWith()
	case "block":
		p.next()
		name := p.expectName()
		p.skipName("scoped")
		p.skipName("required")
		body := p.parseBodyDrop("endblock")
		p.skipName(name)
		return &scopeNode{body: body}
	case "generation":
		// transformers' {% generation %} marks the assistant's text for
		// assistant-token masks; it renders its body unchanged.
		p.next()
		return &scopeNode{body: p.parseBodyDrop("endgeneration")}
	case "print":
		p.next()
		var items nodeList
		for p.cur().kind != tBlockEnd {
			if len(items) > 0 {
				p.expect(tOp, ",")
			}
			items = append(items, &outputNode{line: t.line, x: p.parseExpression(true)})
		}
		return items
	case "break", "continue":
		if p.loops == 0 {
			p.fail("'%s' outside of a loop", t.s)
		}
		p.next()
		if t.s == "break" {
			return &breakNode{t.line}
		}
		return &continueNode{t.line}
	case "extends", "include", "import", "from":
		p.fail("chat templates may not load other templates ('%s')", t.s)
	case "autoescape":
		p.fail("the 'autoescape' tag is not supported")
	}
	return nil
}

var statementTags = map[string]bool{
	"for": true, "if": true, "set": true, "macro": true, "call": true, "filter": true, "with": true,
	"block": true, "generation": true, "print": true, "break": true, "continue": true,
	"extends": true, "include": true, "import": true, "from": true, "autoescape": true,
}

func (p *parser) parseFor() node {
	line := p.next().line
	target := p.parseAssignTarget(true, false, []string{"in"}, false)
	if assignsLoop(target) {
		p.failAt(line, "Can't assign to special loop variable in for-loop target")
	}
	p.expect(tName, "in")
	iter := p.parseTuple(false, false, []string{"recursive"}, false, false)
	var cond expr
	if p.skipName("if") {
		cond = p.parseExpression(true)
	}
	recursive := p.skipName("recursive")
	p.loops++
	body := p.parseBody("endfor", "else")
	p.loops--
	var else_ []node
	if p.next().s == "else" {
		else_ = p.parseBodyDrop("endfor")
	}
	return &forNode{line: line, target: target, iter: iter, cond: cond, body: body, else_: else_, recursive: recursive, keepsScope: definesMacros(body)}
}

func (p *parser) parseIf() node {
	n := &ifNode{line: p.next().line}
	for {
		n.tests = append(n.tests, p.parseTuple(false, false, nil, false, false))
		n.bodies = append(n.bodies, p.parseBody("elif", "else", "endif"))
		switch p.next().s {
		case "elif":
			continue
		case "else":
			n.else_ = p.parseBodyDrop("endif")
		}
		return n
	}
}

func (p *parser) parseSet() node {
	line := p.next().line
	target := p.parseAssignTarget(true, false, nil, true)
	if p.skipOp("=") {
		return &setNode{line: line, target: target, x: p.parseTuple(false, true, nil, false, false)}
	}
	var f expr
	if p.isOp("|") {
		f = p.parseFilter(nil, false)
	}
	return &setBlockNode{line: line, target: target, filter: f, body: p.parseBodyDrop("endset")}
}

func (p *parser) parseMacro() node {
	line := p.next().line
	name := p.expectName()
	n := &macroNode{line: line, name: name}
	n.sig = p.parseSignature()
	loops := p.loops
	p.loops = 0
	n.body = p.parseBodyDrop("endmacro")
	p.loops = loops
	n.sig.scan(n.body)
	return n
}

func (p *parser) parseCallBlock() node {
	line := p.next().line
	var s sig
	if p.isOp("(") {
		s = p.parseSignature()
	}
	call, ok := p.parseExpression(true).(*callExpr)
	if !ok {
		p.failAt(line, "expected call")
	}
	loops := p.loops
	p.loops = 0
	body := p.parseBodyDrop("endcall")
	p.loops = loops
	s.scan(body)
	return &callBlockNode{line: line, call: call, sig: s, body: body}
}

func (p *parser) parseSignature() sig {
	var s sig
	p.expect(tOp, "(")
	for !p.isOp(")") {
		if len(s.params) > 0 {
			p.expect(tOp, ",")
		}
		name := p.expectName()
		if p.skipOp("=") {
			s.defaults = append(s.defaults, p.parseExpression(true))
		} else if len(s.defaults) > 0 {
			p.fail("non-default argument follows default argument")
		}
		s.params = append(s.params, name)
	}
	p.expect(tOp, ")")
	return s
}

func (p *parser) parseWith() node {
	n := &withNode{line: p.next().line}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			p.expect(tOp, ",")
		}
		n.targets = append(n.targets, p.parseAssignTarget(true, false, nil, false))
		p.expect(tOp, "=")
		n.vals = append(n.vals, p.parseExpression(true))
	}
	n.body = p.parseBodyDrop("endwith")
	return n
}

// parseAssignTarget parses what set, for and with assign to: a name, a
// tuple of names, or (with ns) a namespace attribute.
func (p *parser) parseAssignTarget(withTuple, nameOnly bool, extraEnd []string, ns bool) expr {
	line := p.cur().line
	var target expr
	if nameOnly || !withTuple {
		target = p.parsePrimary(ns)
	} else {
		target = p.parseTuple(true, true, extraEnd, false, ns)
	}
	if !canAssign(target) {
		p.failAt(line, "can't assign to %s", exprKind(target))
	}
	return target
}

// assignsLoop reports whether a for target names "loop".
func assignsLoop(e expr) bool {
	switch x := e.(type) {
	case *nameExpr:
		return x.name == "loop"
	case *listExpr:
		for _, it := range x.items {
			if assignsLoop(it) {
				return true
			}
		}
	}
	return false
}

func canAssign(e expr) bool {
	switch x := e.(type) {
	case *nameExpr:
		switch x.name {
		case "true", "false", "none", "True", "False", "None":
			return false
		}
		return true
	case *nsRefExpr:
		return true
	case *listExpr:
		if !x.tuple {
			return false
		}
		for _, it := range x.items {
			if !canAssign(it) {
				return false
			}
		}
		return true
	}
	return false
}

func exprKind(e expr) string {
	switch x := e.(type) {
	case *constExpr:
		return "'const'"
	case *listExpr:
		if x.tuple {
			return "'tuple'"
		}
		return "'list'"
	case *dictExpr:
		return "'dict'"
	}
	return "this expression"
}

// definesMacros reports whether body defines a macro or a call block
// anywhere inside it.
func definesMacros(body []node) bool {
	for _, n := range body {
		switch x := n.(type) {
		case *macroNode, *callBlockNode:
			return true
		case *forNode:
			if definesMacros(x.body) || definesMacros(x.else_) {
				return true
			}
		case *ifNode:
			for _, b := range x.bodies {
				if definesMacros(b) {
					return true
				}
			}
			if definesMacros(x.else_) {
				return true
			}
		case *setBlockNode:
			if definesMacros(x.body) {
				return true
			}
		case *filterBlockNode:
			if definesMacros(x.body) {
				return true
			}
		case *withNode:
			if definesMacros(x.body) {
				return true
			}
		case *scopeNode:
			if definesMacros(x.body) {
				return true
			}
		case nodeList:
			if definesMacros(x) {
				return true
			}
		}
	}
	return false
}

// scan records which of caller, varargs and kwargs a macro body reads.
func (s *sig) scan(body []node) {
	walkNodes(body, func(e expr) bool {
		if n, ok := e.(*nameExpr); ok {
			switch n.name {
			case "varargs":
				s.usesVarargs = true
			case "kwargs":
				s.usesKwargs = true
			case "caller":
				s.usesCaller = true
			}
		}
		return true
	})
	for _, p := range s.params {
		switch p {
		case "varargs":
			s.usesVarargs = false
		case "kwargs":
			s.usesKwargs = false
		case "caller":
			s.usesCaller = false
		}
	}
}
