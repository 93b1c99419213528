package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hostile case: a template (and conversation) built to exhaust the
// stack, the CPU or memory, and the error it must end in.
type hostileCase struct {
	name     string
	src      string
	msgs     string // JSON; "" for []
	parseErr bool   // refused by Parse (else by Render)
	want     string // in the error
	limit    bool   // the error wraps ErrLimit
	bigAlloc bool   // may allocate up to the render's budget before refusing
}

func hostileCases() []hostileCase {
	deepParens := strings.Repeat("(", 100_000) + "1" + strings.Repeat(")", 100_000)
	longChain := strings.Repeat("1 + ", 100_000) + "1"
	deepIfs := strings.Repeat("{% if true %}", 10_000) + strings.Repeat("{% endif %}", 10_000)
	bigSyntaxError := strings.Repeat("x", MaxTemplateBytes-100) + "{{ 1 + }}"
	shared := `{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}`
	sharedTuple := `{% set ns = namespace(t=(1,)) %}{% for i in range(60) %}{% set ns.t = (ns.t, ns.t) %}{% endfor %}`
	return []hostileCase{
		{name: "100k nested parentheses", src: "{{ " + deepParens + " }}", parseErr: true, want: "nested deeper than 200", limit: true},
		{name: "100k-term + chain", src: "{{ " + longChain + " }}", parseErr: true, want: "nests deeper than 200", limit: true},
		{name: "10k nested ifs", src: deepIfs, parseErr: true, want: "nests deeper than 200", limit: true},
		{name: "100k nested lists", src: "{{ " + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + " }}", parseErr: true, want: "nested deeper than 200", limit: true},
		{name: "100k not", src: "{{ " + strings.Repeat("not ", 100_000) + "1 }}", parseErr: true, want: "nests deeper", limit: true},
		{name: "100k unary minus", src: "{{ " + strings.Repeat("-", 100_000) + "1 }}", parseErr: true, want: "nests deeper", limit: true},
		{name: "100k filters", src: "{{ 'a'" + strings.Repeat("|upper", 100_000) + " }}", parseErr: true, want: "nests deeper", limit: true},
		{name: "extends itself", src: "{% extends 'chat_template' %}", parseErr: true, want: "may not load other templates ('extends')"},
		{name: "include", src: "{% include 'chat_template' %}", parseErr: true, want: "may not load other templates"},
		{name: "template over the size cap", src: strings.Repeat("x", MaxTemplateBytes+1), parseErr: true, want: "more than the limit", limit: true},
		{name: "syntax error in a huge template", src: bigSyntaxError, parseErr: true, want: "case:1: unexpected 'end of print statement'"},
		{name: "call of a macro without caller", src: `{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() }}`, want: "macro 'f' takes no keyword argument 'caller'"},
		{name: "recursive macro through call", src: `{% macro f() %}{% call f() %}{{ caller() }}{% endcall %}{% endmacro %}{% call f() %}x{% endcall %}`, want: "macro calls nested deeper than 100", limit: true},
		{name: "recursive macro", src: `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, want: "macro calls nested deeper than 100", limit: true},
		{name: "mutual recursion", src: `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, want: "macro calls nested deeper", limit: true},
		{name: "recursive loop", src: `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`, want: "recursive loops nested deeper than 100", limit: true},
		{name: "caller recursion", src: `{% macro f() %}{{ caller() }}{% endmacro %}{% macro g() %}{% call f() %}{{ g() }}{% endcall %}{% endmacro %}{{ g() }}`, want: "nested deeper", limit: true},
		{name: "string times a billion", src: `{{ 'xxxx' * 1000000000 }}`, want: "more than 16777216 bytes", limit: true},
		{name: "list times a billion", src: `{{ [1, 2] * 1000000000 }}`, want: "more than 16777216 bytes", limit: true},
		{name: "center a billion", src: `{{ 'a'|center(1000000000) }}`, want: "beyond the limit", limit: true},
		{name: "str.center a billion", src: `{{ 'a'.center(1000000000) }}`, want: "beyond the limit", limit: true},
		{name: "ljust 16M", src: `{{ 'a'.ljust(16000000, 'é') }}`, want: "bytes", limit: true},
		{name: "indent a million lines", src: `{{ ('a\n' * 1000000)|indent(1000) }}`, want: "bytes", limit: true},
		{name: "indent a billion", src: `{{ 'a\nb'|indent(1000000000) }}`, want: "beyond the limit", limit: true},
		{name: "tojson indent a billion", src: `{{ [[1]]|tojson(indent=1000000000) }}`, want: "beyond the limit", limit: true},
		{name: "tojson indent 10M deep", src: `{{ [[[[[[[[1]]]]]]]]|tojson(indent=10000000) }}`, want: "bytes", limit: true},
		{name: "replace blow-up", src: `{{ ('a' * 100000)|replace('a', 'a' * 100000) }}`, want: "bytes", limit: true},
		{name: "str.replace blow-up", src: `{{ ('a' * 100000).replace('', 'b' * 1000) }}`, want: "bytes", limit: true},
		{name: "splitlines of 16M line breaks", src: `{{ ('\n' * 16777216).splitlines()|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "splitlines keepends", src: `{{ ('\r\n' * 8000000).splitlines(true)|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "split on whitespace", src: `{{ ('a ' * 8000000).split()|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "split on a separator", src: `{{ (',' * 16000000).split(',')|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "rsplit on whitespace with maxsplit", src: `{{ ('a ' * 8000000).rsplit(None, 16000000)|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "rsplit on a separator", src: `{{ (',' * 16000000).rsplit(',')|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "escape of 16M quotes", src: `{{ ('"' * 16000000)|escape|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "forceescape of 16M ampersands", src: `{{ ('&' * 16000000)|forceescape|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "Markup plus 16M quotes", src: `{{ (('x'|safe) + '"' * 16000000)|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "Markup join of 16M quotes", src: `{{ ('x'|safe).join(['"' * 16000000])|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "Markup replace with 16M quotes", src: `{{ ('x'|safe).replace('x', '"' * 16000000)|length }}`, want: "more than 16777216 bytes", limit: true},
		{name: "format width a billion", src: `{{ '%1000000000s'|format(1) }}`, want: "width of more than", limit: true},
		{name: "format precision", src: `{{ '%.100000f'|format(1) }}`, want: "precision of more than", limit: true},
		{name: "percent width 17M", src: `{{ '%17000000d' % 1 }}`, want: "a width of more than", limit: true},
		{name: "~ doubling", src: `{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, want: "bytes", limit: true, bigAlloc: true},
		{name: "+ doubling", src: `{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}`, want: "bytes", limit: true, bigAlloc: true},
		{name: "join blow-up", src: `{{ (range(100000)|list)|join('x' * 1000) }}`, want: "bytes", limit: true, bigAlloc: true},
		{name: "output over the cap", src: `{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}`, want: "rendered text passed 16777216 bytes", limit: true, bigAlloc: true},
		{name: "allocation budget", src: `{% for i in range(100000) %}{% set x = 'x' * 10000000 %}{% endfor %}`, want: "allocated more than", limit: true, bigAlloc: true},
		{name: "quadratic list", src: `{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}`, want: "allocated more than", limit: true, bigAlloc: true},
		{name: "deep list", src: `{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}`, want: "nested deeper than 200", limit: true},
		{name: "deep dict", src: `{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = {'k': ns.d} %}{% endfor %}`, want: "nested deeper than 200", limit: true},
		{name: "busy loop", src: `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, want: "steps", limit: true, bigAlloc: true},
		{name: "scanning loop", src: `{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{{ s.count('y') }}{% endfor %}`, want: "steps", limit: true},
		{name: "equality of shared lists", src: shared + `{{ ns.a == ns.b }}`, want: "steps", limit: true},
		{name: "ordering of shared lists", src: shared + `{{ [ns.a, 1] < [ns.b, 0] }}`, want: "steps", limit: true},
		{name: "in over shared lists", src: shared + `{{ ns.a in [ns.b] }}`, want: "steps", limit: true},
		{name: "repr of shared lists", src: shared + `{{ ns.a }}`, want: "bytes", limit: true, bigAlloc: true},
		{name: "tojson of shared lists", src: shared + `{{ ns.a|tojson }}`, want: "bytes", limit: true, bigAlloc: true},
		{name: "shared tuple as a dict key", src: sharedTuple + `{{ {ns.t: 1} }}`, want: "tuple too large", limit: true},
		{name: "unique of shared tuples", src: sharedTuple + `{{ [ns.t, ns.t]|unique|list|length }}`, want: "tuple too large", limit: true},
		{name: "sort of shared lists", src: shared + `{{ [ns.a, ns.b, ns.a]|sort }}`, want: "steps", limit: true},
		{name: "range over the cap", src: `{{ range(1000000000)|list }}`, want: "Range too big", limit: true},
		{name: "range with a huge step", src: `{{ range(-9223372036854775807, 9223372036854775807, 1000000000000)|length }}`, want: "Range too big", limit: true},
		{name: "power overflow", src: `{{ 2 ** 100000 }}`, want: "too large", limit: false},
		{name: "multiply overflow", src: `{{ 9223372036854775807 * 2 }}`, want: "too large"},
		{name: "raise in a macro through a filter", src: "{% macro m(c) %}\n{{ raise_exception('Unexpected content type.') }}\n{% endmacro %}{{ m(1)|trim }}", want: "case:2: the template raised an error: Unexpected content type."},
		{name: "raise with a huge message", src: `{{ raise_exception('x' * 10000000) }}`, want: "more bytes)"},
		{name: "undefined with a huge name", src: "{{ " + strings.Repeat("a", 500_000) + ".b }}", want: "is undefined"},
		{name: "invalid UTF-8 in messages", src: ChatML, msgs: "[{\"role\": \"user\", \"content\": \"\xff\"}]", want: "invalid UTF-8"},
		{name: "deep JSON", src: ChatML, msgs: strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000), want: "nested deeper than 100"},
		{name: "non-object message", src: ChatML, msgs: `[1]`, want: "want a message object"},
		{name: "message without a role", src: ChatML, msgs: `[{"content": "x"}]`, want: `no string "role"`},
		{name: "conversation over the cap", src: ChatML, msgs: `[{"role": "user", "content": "` + strings.Repeat("x", MaxInputBytes) + `"}]`, want: "more than the limit", limit: true},
	}
}

// Every hostile template or conversation ends quickly in a one-line error,
// allocates within its bounds, and leaves no goroutine behind.
func TestHostileCatalogue(t *testing.T) {
	for _, c := range hostileCases() {
		t.Run(c.name, func(t *testing.T) {
			runtime.GC()
			goroutines := runtime.NumGoroutine()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()

			err := runHostile(c)

			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			require.Error(t, err)
			msg := err.Error()
			assert.Contains(t, msg, c.want)
			assert.NotContains(t, msg, "\n", "one line")
			assert.Less(t, len(msg), 1000, "the error does not echo its input")
			if c.limit {
				assert.ErrorIs(t, err, ErrLimit)
			}
			quick := 5 * time.Second // the step and size budgets end every case well before this
			if raceEnabled {
				quick *= 4
			}
			assert.Less(t, elapsed, quick, "ends quickly")
			allocated := after.TotalAlloc - before.TotalAlloc
			bound := uint64(64 << 20)
			if c.bigAlloc {
				bound = 3 * MaxAllocBytes
			}
			if c.parseErr || c.msgs != "" {
				bound += uint64(len(c.src)+len(c.msgs)) * 40
			}
			assert.Less(t, allocated, bound, "allocated %d MiB", allocated>>20)
			assert.Equal(t, goroutines, runtime.NumGoroutine(), "no goroutine outlives Render")
			t.Logf("%v, %d MiB allocated: %s", elapsed.Round(time.Millisecond), allocated>>20, excerpt(msg))
		})
	}
}

func runHostile(c hostileCase) error {
	tpl, err := Parse(c.src, "case")
	if c.parseErr || err != nil {
		if !c.parseErr && err != nil {
			return fmt.Errorf("unexpected parse error: %w", err)
		}
		if err == nil {
			return errors.New("parsed, but should not have")
		}
		return err
	}
	msgs := c.msgs
	if msgs == "" {
		msgs = "[]"
	}
	_, err = tpl.Render(Input{Messages: json.RawMessage(msgs)})
	return err
}

// After a refused Render nothing keeps running: the heap returns to where
// it was and no goroutine remains, however the template was stopped.
func TestRefusedRenderLeavesNothingRunning(t *testing.T) {
	runtime.GC()
	goroutines := runtime.NumGoroutine()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, src := range []string{
		`{% for i in range(100000) %}{% for j in range(100000) %}{% set x = 'y' * 100 %}{% endfor %}{% endfor %}`,
		`{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`,
		`{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`,
	} {
		tpl := MustParse(src, "case")
		tpl.Timeout = 300 * time.Millisecond
		for range 3 {
			_, err := tpl.Render(Input{Messages: Messages()})
			require.ErrorIs(t, err, ErrLimit)
		}
	}
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	assert.Equal(t, goroutines, runtime.NumGoroutine())
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(16<<20), "heap after the refusals")
}
