package chat

// Expressions.
type (
	expr interface{ lineNo() int }

	constExpr struct {
		line int
		v    value
	}
	nameExpr struct {
		line int
		name string
	}
	// nsRefExpr is the target ns.attr of {% set ns.attr = … %}.
	nsRefExpr struct {
		line       int
		name, attr string
	}
	listExpr struct {
		line  int
		items []expr
		tuple bool
	}
	dictExpr struct {
		line       int
		keys, vals []expr
	}
	getattrExpr struct {
		line int
		obj  expr
		name string
	}
	getitemExpr struct {
		line     int
		obj, key expr
	}
	sliceExpr struct {
		line              int
		start, stop, step expr // nil when left out
	}
	callExpr struct {
		line int
		fn   expr
		args
	}
	// filterExpr is x|name(args); x is nil inside {% filter %} and
	// {% set x | f %} blocks, where the block's text is the argument.
	filterExpr struct {
		line int
		x    expr
		name string
		args
	}
	testExpr struct {
		line int
		x    expr
		name string
		args
	}
	unaryExpr struct {
		line int
		op   string // "-", "+" or "not"
		x    expr
	}
	binExpr struct {
		line int
		op   string // + - * / // % ** and or
		l, r expr
	}
	concatExpr struct {
		line  int
		parts []expr
	}
	compareExpr struct {
		line  int
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	condExpr struct {
		line              int
		test, then, else_ expr // else_ nil when left out
	}
)

// args are a call's arguments: positional, keyword, *args and **kwargs.
type args struct {
	pos       []expr
	kw        []kwExpr
	dynArgs   expr
	dynKwargs expr
}

type kwExpr struct {
	name string
	x    expr
}

func (e *constExpr) lineNo() int   { return e.line }
func (e *nameExpr) lineNo() int    { return e.line }
func (e *nsRefExpr) lineNo() int   { return e.line }
func (e *listExpr) lineNo() int    { return e.line }
func (e *dictExpr) lineNo() int    { return e.line }
func (e *getattrExpr) lineNo() int { return e.line }
func (e *getitemExpr) lineNo() int { return e.line }
func (e *sliceExpr) lineNo() int   { return e.line }
func (e *callExpr) lineNo() int    { return e.line }
func (e *filterExpr) lineNo() int  { return e.line }
func (e *testExpr) lineNo() int    { return e.line }
func (e *unaryExpr) lineNo() int   { return e.line }
func (e *binExpr) lineNo() int     { return e.line }
func (e *concatExpr) lineNo() int  { return e.line }
func (e *compareExpr) lineNo() int { return e.line }
func (e *condExpr) lineNo() int    { return e.line }

// Statements.
type (
	node interface{}

	textNode   struct{ s string }
	outputNode struct {
		line int
		x    expr
	}
	forNode struct {
		line      int
		target    expr // a name or a tuple of names
		iter      expr
		cond      expr // {% for x in xs if cond %}; nil when left out
		body      []node
		else_     []node
		recursive bool
		// keepsScope: the body defines a macro or call block, which keeps
		// the iteration's scope after it ends.
		keepsScope bool
	}
	ifNode struct {
		line   int
		tests  []expr // if and elifs
		bodies [][]node
		else_  []node
	}
	setNode struct {
		line   int
		target expr // a name, a tuple of names, or ns.attr
		x      expr
	}
	setBlockNode struct {
		line   int
		target expr
		filter expr // a filter chain applied to the block's text; nil for none
		body   []node
	}
	macroNode struct {
		line int
		name string
		sig
		body []node
	}
	callBlockNode struct {
		line int
		call *callExpr
		sig  // the caller's parameters
		body []node
	}
	filterBlockNode struct {
		line   int
		filter expr
		body   []node
	}
	withNode struct {
		line    int
		targets []expr
		vals    []expr
		body    []node
	}
	// scopeNode is {% block %} or {% generation %}: its body, rendered in
	// place.
	scopeNode    struct{ body []node }
	nodeList     []node // several statements from one tag ({% print a, b %})
	breakNode    struct{ line int }
	continueNode struct{ line int }
)

// sig is a macro's signature, and which of Jinja's implicit parameters its
// body reads.
type sig struct {
	params                              []string
	defaults                            []expr // for the last len(defaults) params
	usesVarargs, usesKwargs, usesCaller bool
}
