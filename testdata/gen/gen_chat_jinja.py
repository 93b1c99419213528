#!/usr/bin/env python3
"""Render qwenref's Jinja test cases with Python's jinja2, as transformers would.

Run from the repository root with Python 3.11 and jinja2 3.1 (transformers
itself is not needed; the environment is built as transformers builds it,
see chat_jinja_env.py):

    python3 testdata/gen/gen_chat_jinja.py testdata/chat

It writes two files into the directory given:

- jinja_expected.json: the micro-templates below (CASES), each a small
  template and its variables, with what jinja2 renders, or where it fails
  (parse or render) and its message;
- template_expected.json: every conversation of testdata/chat/template_cases.json
  rendered with each Qwen3.5/3.6-style test template it names.

Package chat's tests render the same with qwenref's engine and compare. Any
unexpected failure of the script itself exits non-zero.
"""
import json
import os
import sys
import platform

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja2  # noqa: E402
import chat_jinja_env  # noqa: E402

D = {"a": 1, "b": [1, "x"], "role": "user", "items": "key named items", "_p": 3}
L = [3, 1, 2]
S = "héllo wörld"
NESTED = {"name": "f", "arguments": {"city": "Paris", "days": [1, 2], "opts": {"metric": True, "x": None}}}

CASES = [
    # --- whitespace control: trim_blocks, lstrip_blocks, - and + ---
    ("ws-trim-blocks", "{% if true %}\nA\n{% endif %}\nB\n", {}),
    ("ws-lstrip-blocks", "  {% if true %}\n  A\n  {% endif %}\nB", {}),
    ("ws-lstrip-not-vars", "  {{ 1 }}\n  x", {}),
    ("ws-minus-both", "a  \n  {%- if true -%}  \n  b  {%- endif -%}\n  c", {}),
    ("ws-minus-var", "a \n {{- 'x' -}} \n b", {}),
    ("ws-plus-keeps", "a\n  {%+ if true %}b{% endif +%}\nc", {}),
    ("ws-comment", "a\n  {# note #}\nb {#- x -#} c\n{#+ keep #}d", {}),
    ("ws-raw", "{% raw %}{{ not }}{% endraw %}|  {% raw -%}  x  {%- endraw %}|", {}),
    ("ws-raw-newline", "{% raw %}\n{{a}}\n{% endraw %}\nz", {}),
    ("ws-trailing-newline", "x\n", {}),
    ("ws-two-trailing-newlines", "x\n\n", {}),
    ("ws-crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\rc", {}),
    ("ws-unicode-space-lstrip", "x\n\u3000\u00a0{% if true %}y{% endif %}", {}),
    ("ws-tab-lstrip", "x\n\t {% if true %}\ty\n{% endif %}", {}),
    ("ws-first-line-lstrip", "   {% if true %}z{% endif %}", {}),
    ("ws-after-var-no-lstrip", "{{ 1 }}  {% if true %}z{% endif %}", {}),
    ("ws-trim-after-comment", "a{# c #}\nb", {}),
    ("ws-minus-unicode", "a\u2003\u00a0\x1c {{- 'b' }}", {}),
    ("ws-block-end-minus-eats-lines", "{% set x = 1 -%}\n\n\n  y", {}),
    ("ws-nested-blocks", "{% for i in [1, 2] %}\n  {% if i %}\n    [{{ i }}]\n  {% endif %}\n{% endfor %}\n", {}),

    # --- literals and printing (Python's str and repr) ---
    ("print-none-bools", "{{ none }}|{{ None }}|{{ true }}|{{ False }}", {}),
    ("print-numbers", "{{ 1 }}|{{ -0.0 }}|{{ 1.0 }}|{{ 1e20 }}|{{ 1.5e-7 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 123456789012345678 }}", {}),
    ("print-int-literals", "{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ 1_0.5 }}|{{ 2.5E3 }}", {}),
    ("print-containers", "{{ [1, 'a', none, true, 1.5] }}|{{ {'k': 'v', 'n': [1]} }}|{{ (1,) }}|{{ () }}|{{ (1, 'b') }}|{{ [] }}|{{ {} }}", {}),
    ("print-string-repr", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\there', 'nl\\n', 'back\\\\slash'] }}", {}),
    ("print-unicode-repr", "{{ ['é', '😀', '\\x7f', '\\x85', '\\xa0', '\\u200b', '\\u2028', '\\U000e0001', '\\x00', '\\x1b'] }}", {}),
    ("print-vars", "{{ d }}|{{ l }}|{{ s }}|{{ nested }}", {"d": D, "l": L, "s": S, "nested": NESTED}),
    ("print-undefined", "[{{ nope }}][{{ d.nope }}][{{ l[9] }}]", {"d": D, "l": L}),
    ("print-tuple-expr", "{{ 1, 'a' }}", {}),
    ("print-markup-repr", "{{ ['<b>'|safe] }}|{{ '<b>'|e }}", {}),
    ("print-namespace", "{% set ns = namespace(a=1, b='x') %}{{ ns }}", {}),
    ("print-range", "{{ range(3) }}|{{ range(1, 9, 2) }}|{{ range(3)|list }}", {}),
    ("print-dict-views", "{{ d.keys() }}|{{ d.values() }}|{{ d.items() }}", {"d": {"a": 1, "b": [2]}}),
    ("print-loop", "{% for x in [1, 2] %}{{ loop }};{% endfor %}", {}),
    ("print-macro", "{% macro m() %}{% endmacro %}{{ m }}", {}),
    ("string-escapes", "{{ 'a\\tb\\nc\\\\d\\'e\\\"f\\x41\\u00e9\\U0001F600\\101\\q' }}", {}),
    ("string-adjacent", "{{ 'a' \"b\" 'c' }}", {}),
    ("string-nonascii-escape", "{{ '\\é' }}", {}),
    ("string-multiline-literal", "{{ 'a\nb' }}", {}),

    # --- operators ---
    ("arith-int", "{{ 7 + 3 }}|{{ 7 - 10 }}|{{ 7 * 3 }}|{{ 7 / 2 }}|{{ 6 / 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}", {}),
    ("arith-float", "{{ 7.5 // 2 }}|{{ -7.5 // 2 }}|{{ 7.5 % 2 }}|{{ -7.5 % 2 }}|{{ 1.5 * 2 }}|{{ 2 ** 0.5 }}|{{ 1 + 1.0 }}|{{ 0.1 * 3 }}", {}),
    ("arith-bool", "{{ true + 1 }}|{{ true * 'ab' }}|{{ 3 * 'ab' }}|{{ [1, 2] * 2 }}|{{ 'x' * 0 }}|{{ 'x' * -1 }}", {}),
    ("arith-pow-left-assoc", "{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}", {}),
    ("arith-precedence", "{{ 1 + 2 * 3 - 4 // 3 }}|{{ (1 + 2) * 3 }}|{{ 'a' ~ (1 + 2) }}|{{ 2 * 3 ~ 4 }}|{{ 1 ~ 2 * 3 }}", {}),
    ("arith-concat-binds-tighter-than-plus", "{{ 'a' ~ 1 + 2 }}", {}),
    ("arith-concat", "{{ 'n=' ~ 1 ~ true ~ none ~ 1.5 ~ [1] ~ undefined_thing }}", {}),
    ("arith-string-plus", "{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ (1,) + (2,) }}", {}),
    ("arith-str-plus-int", "{{ 'a' + 1 }}", {}),
    ("arith-int-plus-str", "{{ 1 + 'a' }}", {}),
    ("arith-div-zero", "{{ 1 / 0 }}", {}),
    ("arith-floordiv-zero", "{{ 1 // 0 }}", {}),
    ("arith-mod-zero", "{{ 1.5 % 0 }}", {}),
    ("arith-undefined-plus", "{{ nope + 1 }}", {}),
    ("arith-list-plus-tuple", "{{ [1] + (2,) }}", {}),
    ("arith-unary", "{{ -3 + 1 }}|{{ +3 }}|{{ -(1.5) }}|{{ not 0 }}|{{ not 'a' }}|{{ -true }}", {}),
    ("logic-values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 1 }}|{{ none or [] }}|{{ 1 and none }}", {}),
    ("logic-precedence", "{{ true or false and false }}|{{ not true or true }}|{{ not (true and false) }}", {}),
    ("compare", "{{ 1 < 2 }}|{{ 2 <= 2 }}|{{ 'a' < 'b' }}|{{ 'B' < 'a' }}|{{ [1, 2] < [1, 3] }}|{{ 1 == 1.0 }}|{{ 1 == true }}|{{ 'a' == 'a' }}|{{ [1] == [1] }}|{{ (1,) == [1] }}|{{ none == none }}|{{ {'a': 1} == {'a': 1} }}", {}),
    ("compare-chained", "{{ 1 < 2 < 3 }}|{{ 1 < 3 < 2 }}|{{ 1 == 1 != 2 }}", {}),
    ("compare-unordered", "{{ 1 < 'a' }}", {}),
    ("compare-none", "{{ none < 1 }}", {}),
    ("compare-undefined-eq", "{{ nope == none }}|{{ nope == nope2 }}|{{ nope != 1 }}", {}),
    ("in-ops", "{{ 'a' in 'cat' }}|{{ 1 in [1, 2] }}|{{ 'a' in {'a': 1} }}|{{ 3 not in [1] }}|{{ 'x' in nope }}|{{ 2 in range(3) }}|{{ 'é' in s }}|{{ 1.0 in [1] }}", {"s": S}),
    ("in-string-int", "{{ 1 in 'abc' }}", {}),
    ("in-none", "{{ 1 in none }}", {}),
    ("ternary", "{{ 'y' if true else 'n' }}|{{ 'y' if false else 'n' }}|[{{ 'y' if false }}]|{{ 1 if 0 else 2 if 0 else 3 }}", {}),
    ("ternary-undefined-else", "{{ (1 if false) + 1 }}", {}),
    ("filter-precedence", "{{ -3|abs }}|{{ 'a' ~ 'b'|upper }}|{{ -'a'|length is number }}", {}),
    ("filter-binds-tighter-than-plus", "{{ 1 + 2|string }}", {}),
    ("filter-precedence2", "{{ x | string if x is string else x | tojson | safe }}", {"x": {"b": 1, "a": [1, 2]}}),
    ("test-precedence", "{{ not x is none }}|{{ x is none or true }}|{{ x is not none and 1 }}", {"x": None}),

    # --- attribute and item access ---
    ("access-dict", "{{ d.a }}|{{ d['a'] }}|{{ d.b[1] }}|{{ d.b.1 }}|{{ d['b'][-1] }}|{{ d.role }}", {"d": D}),
    ("access-dict-method-wins", "{{ d.items is callable }}|{{ d['items'] }}|{{ d.get('a') }}|{{ d.get('zz') }}|{{ d.get('zz', 5) }}|{{ d._p }}", {"d": D}),
    ("access-list", "{{ l[0] }}|{{ l[-1] }}|{{ l[5] is undefined }}|{{ l.count(1) }}|{{ l.index(2) }}|{{ l['count'](3) }}", {"l": L}),
    ("access-string", "{{ s[0] }}|{{ s[1] }}|{{ s[-1] }}|{{ s|length }}|{{ s[99] is undefined }}", {"s": S}),
    ("access-none-attr", "{{ x.y is undefined }}", {"x": None}),
    ("access-undefined-attr", "{{ nope.y }}", {}),
    ("access-undefined-attr-of-attr", "{{ d.zz.yy }}", {"d": D}),
    ("access-undefined-item", "{{ nope[0] }}", {}),
    ("access-unsafe-pop", "{{ l.pop() }}", {"l": L}),
    ("access-unsafe-append", "{{ l.append(1) }}", {"l": L}),
    ("access-dunder", "{{ d.__class__ }}", {"d": D}),
    ("slicing", "{{ l[1:] }}|{{ l[:2] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ l[-2:] }}|{{ l[5:] }}|{{ l[1:-1] }}|{{ l[-10:10] }}|{{ l[2:0:-1] }}|{{ l[:] }}", {"l": L}),
    ("slicing-strings", "{{ s[1:4] }}|{{ s[::-1] }}|{{ s[-3:] }}|{{ s[::3] }}|{{ 'abc'[1:] }}", {"s": S}),
    ("slicing-tuple-range", "{{ (1, 2, 3)[1:] }}|{{ range(10)[2:8:3] }}|{{ range(10)[::-1]|list }}", {}),
    ("slicing-step-zero", "{{ l[::0] }}", {"l": L}),
    ("messages-reversed", "{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role }};{% endfor %}",
     {"messages": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]}),

    # --- filters ---
    ("f-string", "{{ none|string }}|{{ true|string }}|{{ [1, 'a', none]|string }}|{{ {'k': 'v'}|string }}|{{ 1.0|string }}|{{ nope|string }}|{{ (1,)|string }}", {}),
    ("f-trim", "[{{ '  a  '|trim }}][{{ '\\x1c\\x1d\\x1e\\x1fa\\x85\\xa0\\u2028\\u3000'|trim }}][{{ 'xxaxx'|trim('x') }}][{{ '\\u200ba\\u200b'|trim }}][{{ none|trim }}][{{ 12|trim }}]", {}),
    ("f-trim-markup", "{{ ' <a> '|safe|trim }}|{{ 'xyx'|safe|trim('x') }}", {}),
    ("f-length", "{{ s|length }}|{{ l|length }}|{{ d|length }}|{{ nope|length }}|{{ range(4)|length }}|{{ 'abc'|count }}", {"s": S, "l": L, "d": D}),
    ("f-length-none", "{{ none|length }}", {}),
    ("f-length-generator", "{{ d|items|length }}", {"d": D}),
    ("f-default", "{{ nope|default('x') }}|{{ ''|default('x') }}|{{ ''|default('x', true) }}|{{ none|default('x') }}|{{ none|d('x', true) }}|{{ 0|default(5, boolean=true) }}|{{ nope|default }}|", {}),
    ("f-join", "{{ l|join }}|{{ l|join(', ') }}|{{ [1, none, 'a', [2]]|join('-') }}|{{ users|join(', ', attribute='name') }}|{{ ['a'|safe, '<b>']|join('|') }}|{{ 'abc'|join('.') }}", {"l": L, "users": [{"name": "ann"}, {"name": "bo"}]}),
    ("f-first-last", "{{ l|first }}|{{ l|last }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ []|first is undefined }}|{{ d|first }}|{{ d|last }}|{{ (d|items)|first }}", {"l": L, "d": D}),
    ("f-last-generator", "{{ d|items|last }}", {"d": D}),
    ("f-list", "{{ 'ab'|list }}|{{ d|list }}|{{ range(3)|list }}|{{ (d|items)|list }}|{{ nope|list }}", {"d": {"x": 1, "y": 2}}),
    ("f-items", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}|{% for k, v in nope|items %}x{% endfor %}", {"d": {"z": 1, "a": "x", "m": True}}),
    ("f-items-string", "{% for k, v in s|items %}{% endfor %}", {"s": "not a mapping"}),
    ("f-items-reuse", "{% set it = d|items %}{% for k, v in it %}{{ k }}{% endfor %}|{% for k, v in it %}{{ k }}{% endfor %}", {"d": {"a": 1, "b": 2}}),
    ("f-tojson", "{{ none|tojson }}|{{ true|tojson }}|{{ 1.5|tojson }}|{{ 'é\"\\n'|tojson }}|{{ [1, 'a']|tojson }}|{{ d|tojson }}|{{ (1, 2)|tojson }}|{{ ''|tojson }}|{{ {}|tojson }}|{{ []|tojson }}", {"d": NESTED}),
    ("f-tojson-indent", "{{ d|tojson(indent=2) }}|{{ d|tojson(indent='\\t') }}|{{ [1, [2, {}]]|tojson(indent=0) }}|{{ [1]|tojson(indent=-1) }}|{{ {'a': []}|tojson(indent=true) }}", {"d": NESTED}),
    ("f-tojson-options", "{{ d|tojson(sort_keys=true) }}|{{ 'é😀'|tojson(ensure_ascii=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {1: 'a', 2.5: 'b', true: 'c', none: 'd'}|tojson }}", {"d": {"b": 1, "a": {"d": 2, "c": 3}}}),
    ("f-tojson-markup", "{{ '<a>'|safe|tojson }}|{{ ('x'|safe)|tojson|safe }}", {}),
    ("f-tojson-undefined", "{{ nope|tojson }}", {}),
    ("f-tojson-namespace", "{{ namespace(a=1)|tojson }}", {}),
    ("f-tojson-big", "{{ d|tojson }}", {"d": {"big": 12345678901234567890123, "neg": -9223372036854775809, "f": 1e300, "small": 5e-324}}),
    ("f-tojson-control", "{{ '\\x00\\x1f\\x7f\\u2028'|tojson }}", {}),
    ("f-upper-lower", "{{ s|upper }}|{{ 'ABC'|lower }}|{{ 'straße ǆ'|upper }}|{{ 'ΣΑΣ ΟΔΟΣ'|lower }}|{{ 'İ'|lower|length }}", {"s": S}),
    ("f-capitalize-title", "{{ 'hELLO wORLD'|capitalize }}|{{ 'hello-world (foo) [bar]baz'|title }}|{{ 'ǆemal ß'|title }}|{{ \"they're\"|title }}", {}),
    ("f-replace", "{{ 'aaa'|replace('a', 'b') }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ 'abc'|replace('', '-') }}|{{ 'abc'|replace('', '-', 2) }}|{{ 123|replace(2, 9) }}|{{ 'x<'|safe|replace('<', '&') }}", {}),
    ("f-center-indent", "[{{ 'ab'|center(7) }}][{{ 'abc'|center(6) }}][{{ 'a'|center(2) }}][{{ 'ab'|center(1) }}]|{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent('> ', blank=true) }}|{{ ''|indent(first=true) }}|{{ 'a\\r\\nb'|indent(1) }}", {}),
    ("f-format", "{{ '%s-%d'|format('a', 3) }}|{{ '%5.2f|%x|%X|%o|%r|%%'|format(3.14159, 255, 255, 8, 'a') }}|{{ '%(n)s=%(v)03d'|format(n='x', v=7) }}|{{ '%-5s|%+d|% d|%05d|%.3s'|format('ab', 3, 4, -5, 'abcdef') }}|{{ '%e|%g|%g|%g|%G'|format(12345.678, 0.0001, 1e-5, 123456789, 1e20) }}|{{ '%#x|%#o|%c|%c'|format(255, 8, 65, 'z') }}", {}),
    ("f-format-errors", "{{ '%d'|format('x') }}", {}),
    ("f-format-too-few", "{{ '%s %s'|format(1) }}", {}),
    ("f-format-too-many", "{{ '%s'|format(1, 2) }}", {}),
    ("percent-operator", "{{ '%s and %s' % ('a', 'b') }}|{{ '%d' % 3 }}|{{ '%s' % [1, 2] }}|{{ '%(a)s' % {'a': 1} }}|{{ '%.1f%%' % 99.95 }}", {}),
    ("f-int-float", "{{ '42'|int }}|{{ '42.7'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.9|int }}|{{ '0x1A'|int(0, 16) }}|{{ ' 12 '|int }}|{{ '1_000'|int }}|{{ true|int }}|{{ '3.5'|float }}|{{ 'x'|float }}|{{ 2|float }}|{{ ' -1e3 '|float }}|{{ 'inf'|float }}|{{ none|int }}", {}),
    ("f-abs-round", "{{ -3|abs }}|{{ -2.5|abs }}|{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.675|round(2) }}|{{ 2.1|round(0, 'ceil') }}|{{ 2.9|round(0, 'floor') }}|{{ 1234|round(-2) }}|{{ 1250|round(-2) }}|{{ 7|round }}|{{ -0.5|round }}", {}),
    ("f-sort", "{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ ['b', 'A', 'a', 'C']|sort }}|{{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }}|{{ users|sort(attribute='age')|map(attribute='name')|join(',') }}|{{ users|sort(attribute='age,name')|map(attribute='name')|join(',') }}", {"l": L, "users": [{"name": "c", "age": 3}, {"name": "a", "age": 1}, {"name": "b", "age": 3}]}),
    ("f-sort-mixed", "{{ [1, 'a']|sort }}", {}),
    ("f-dictsort", "{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}|{{ {'b': 1, 'A': 2, 'a': 3}|dictsort }}|{{ {'b': 1, 'A': 2, 'a': 3}|dictsort(true) }}", {"d": {"b": 2, "c": 1, "a": 3}}),
    ("f-unique", "{{ ['a', 'A', 'b', 'a']|unique|list }}|{{ ['a', 'A', 'b']|unique(case_sensitive=true)|list }}|{{ users|unique(attribute='age')|map(attribute='name')|list }}|{{ [1, 1.0, true, 2]|unique|list }}", {"users": [{"name": "c", "age": 3}, {"name": "a", "age": 1}, {"name": "b", "age": 3}]}),
    ("f-min-max-sum", "{{ l|min }}|{{ l|max }}|{{ ['b', 'A', 'c']|min }}|{{ ['b', 'A', 'c']|max(case_sensitive=true) }}|{{ []|max is undefined }}|{{ l|sum }}|{{ l|sum(start=10) }}|{{ users|sum(attribute='age') }}|{{ users|max(attribute='age') }}|{{ [1.5, 2]|sum }}", {"l": L, "users": [{"name": "c", "age": 3}, {"name": "a", "age": 1}]}),
    ("f-map-select", "{{ users|map(attribute='name')|list }}|{{ users|map(attribute='nick', default='?')|list }}|{{ ['a', 'b']|map('upper')|join }}|{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('odd')|list }}|{{ [0, 1, '', 'a', none]|select|list }}|{{ users|selectattr('age', 'gt', 1)|map(attribute='name')|list }}|{{ users|rejectattr('nick')|list|length }}|{{ users|selectattr('name', 'equalto', 'a')|list }}|{{ [1, 2, 3]|select('in', [2, 3])|list }}|{{ ['a', 'b']|map('replace', 'a', 'z')|list }}", {"users": [{"name": "c", "age": 3}, {"name": "a", "age": 1}]}),
    ("f-map-nested-attr", "{{ users|map(attribute='info.tags.0')|list }}", {"users": [{"info": {"tags": ["x", "y"]}}, {"info": {"tags": ["z"]}}]}),
    ("f-reverse", "{{ 'abc'|reverse }}|{{ l|reverse|list }}|{{ (d|items)|reverse }}|{{ d|reverse|list }}|{{ ('x'|safe)|reverse }}", {"l": L, "d": {"a": 1, "b": 2}}),
    ("f-safe-escape", "{{ '<a href=\"x\">\\'&'|e }}|{{ '<b>'|safe }}|{{ ('<b>'|safe)|e }}|{{ '<b>'|forceescape }}|{{ none|e }}|{{ 1|safe }}", {}),
    ("f-markup-concat", "{{ '<'|safe + '<' }}|{{ '<' + '<'|safe }}|{{ ('<'|safe) ~ '<' }}|{{ ('%s'|safe) % '<' }}|{{ ('<'|safe) * 2 }}", {}),
    ("f-wordcount", "{{ 'hello, wörld_x 42 -- a'|wordcount }}", {}),
    ("f-attr", "{{ d|attr('a') is undefined }}|{{ d|attr('items') is callable }}|{% set ns = namespace(v=3) %}{{ ns|attr('v') }}", {"d": D}),
    ("f-chain", "{{ ' Hello '|trim|lower|replace('l', 'L')|center(9)|length }}", {}),
    ("f-unknown-parse", "{{ x|nosuch }}", {}),
    ("f-unknown-in-if", "{% if false %}{{ x|nosuch }}{% endif %}ok", {}),
    ("f-unknown-in-if-runs", "{% if true %}{{ x|nosuch }}{% endif %}ok", {}),
    ("f-unknown-in-ternary", "{{ x|nosuch if false else 'ok' }}", {}),
    ("f-unknown-in-for", "{% if true %}{% for i in [] %}{{ i|nosuch }}{% endfor %}{% endif %}", {}),

    # --- tests ---
    ("t-types", "{{ 'a' is string }}|{{ 1 is string }}|{{ {} is mapping }}|{{ [] is mapping }}|{{ [] is sequence }}|{{ 'a' is sequence }}|{{ {} is sequence }}|{{ 1 is sequence }}|{{ [] is iterable }}|{{ none is iterable }}|{{ nope is iterable }}|{{ 1 is number }}|{{ 1.5 is number }}|{{ true is number }}|{{ 1 is integer }}|{{ true is integer }}|{{ 1.0 is float }}|{{ true is boolean }}|{{ 0 is boolean }}", {}),
    ("t-none-defined", "{{ none is none }}|{{ nope is none }}|{{ nope is defined }}|{{ nope is undefined }}|{{ none is defined }}|{{ d.a is defined }}|{{ d.zz is defined }}|{{ x is not none }}", {"d": D, "x": 0}),
    ("t-true-false", "{{ true is true }}|{{ 1 is true }}|{{ false is false }}|{{ 0 is false }}|{{ none is false }}|{{ x is false }}|{{ y is true }}", {"x": False, "y": True}),
    ("t-numbers", "{{ 3 is odd }}|{{ 3 is even }}|{{ 4.0 is even }}|{{ 9 is divisibleby 3 }}|{{ 9 is divisibleby(4) }}|{{ -3 is odd }}", {}),
    ("t-compare", "{{ 3 is gt 2 }}|{{ 3 is lt(2) }}|{{ 3 is ge 3 }}|{{ 3 is le 2 }}|{{ 'a' is eq 'a' }}|{{ 'a' is ne 'a' }}|{{ 1 is equalto 1.0 }}|{{ 2 is greaterthan 1 }}|{{ 2 is lessthan 1 }}", {}),
    ("t-sameas-in", "{{ none is sameas none }}|{{ false is sameas false }}|{{ 0 is sameas false }}|{{ 2 is in [1, 2] }}|{{ 'x' is in 'xyz' }}|{{ l is sameas l }}", {"l": L}),
    ("t-case", "{{ 'abc' is lower }}|{{ 'aBc' is lower }}|{{ 'ABC' is upper }}|{{ '123' is upper }}|{{ 'A1' is upper }}", {}),
    ("t-callable-escaped", "{{ d.get is callable }}|{{ raise_exception is callable }}|{{ 1 is callable }}|{{ '<a>'|e is escaped }}|{{ 'a' is escaped }}|{{ 'upper' is filter }}|{{ 'nofilter' is filter }}|{{ 'odd' is test }}", {"d": D}),
    ("t-unknown-parse", "{{ 1 is nosuch }}", {}),
    ("t-is-not", "{{ 1 is not string }}|{{ 'a' is not string }}|{{ not 'a' is string }}", {}),

    # --- str methods ---
    ("m-strip", "[{{ '  a b  '.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\n\\na\\n'.lstrip('\\n') }}][{{ 'a\\n\\n'.rstrip('\\n') }}][{{ '\\x1f a \\x85'.strip() }}][{{ 'abc'.lstrip() }}][{{ 'yxay'.rstrip('xy') }}][{{ ''.strip() }}]", {}),
    ("m-split", "{{ 'a,b,,c'.split(',') }}|{{ '  a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b  c  '.split(none, 1) }}|{{ 'a\\x1cb\\u3000c'.split() }}|{{ ''.split() }}|{{ ''.split(',') }}|{{ 'a</think>b</think>c'.split('</think>') }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a b c  '.rsplit(none, 1) }}|{{ 'a b'.split(sep=' ') }}", {}),
    ("m-split-empty-sep", "{{ 'abc'.split('') }}", {}),
    ("m-splitlines", "{{ 'a\\nb\\r\\nc\\rd\\x0be\\x1cf\\u2028g\\n'.splitlines() }}|{{ 'a\\nb\\n'.splitlines(true) }}|{{ ''.splitlines() }}", {}),
    ("m-starts-ends", "{{ s.startswith('hé') }}|{{ s.endswith('rld') }}|{{ s.startswith(('x', 'h')) }}|{{ s.startswith('l', 2) }}|{{ s.endswith('hé', 0, 2) }}|{{ 'abc'.startswith('', 3) }}|{{ 'abc'.startswith('', 4) }}|{{ '<tool_response>x</tool_response>'.startswith('<tool_response>') and '<tool_response>x</tool_response>'.endswith('</tool_response>') }}", {"s": S}),
    ("m-starts-int", "{{ 'abc'.startswith(1) }}", {}),
    ("m-find-count", "{{ s.find('l') }}|{{ s.rfind('l') }}|{{ s.find('zz') }}|{{ s.index('w') }}|{{ s.count('l') }}|{{ 'aaaa'.count('aa') }}|{{ 'abc'.count('') }}|{{ s.find('l', 4) }}|{{ 'abc'.find('', 5) }}|{{ 'abc'.count('', 5) }}", {"s": S}),
    ("m-index-missing", "{{ 'abc'.index('z') }}", {}),
    ("m-replace", "{{ 'aXbXc'.replace('X', '--') }}|{{ 'aaa'.replace('a', 'b', 1) }}|{{ 'ab'.replace('', '.') }}|{{ 'x'.replace('x', '') }}", {}),
    ("m-case", "{{ 'héllo ß'.upper() }}|{{ 'HÉLLO'.lower() }}|{{ 'hello world'.title() }}|{{ \"they're bill's\".title() }}|{{ 'hELLO'.capitalize() }}|{{ 'HeLLo'.swapcase() }}|{{ 'ΌΣΟΣ'.lower() }}|{{ 'ﬁ'.upper() }}|{{ 'ǆ'.title() }}", {}),
    ("m-is", "{{ '123'.isdigit() }}|{{ '12a'.isdigit() }}|{{ '²'.isdigit() }}|{{ '²'.isdecimal() }}|{{ '五'.isnumeric() }}|{{ 'abc'.isalpha() }}|{{ 'ab1'.isalnum() }}|{{ ' \\t'.isspace() }}|{{ ''.isspace() }}|{{ 'ABC'.isupper() }}|{{ 'abc'.islower() }}|{{ 'é'.isascii() }}", {}),
    ("m-join-pad", "{{ ', '.join(['a', 'b']) }}|{{ '-'.join('abc') }}|{{ 'ab'.center(6, '*') }}|{{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}|{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}", {}),
    ("m-join-int", "{{ ', '.join([1, 2]) }}", {}),
    ("m-partition", "{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.partition('x') }}|{{ 'abc'.rpartition('x') }}|{{ 'prefix-x'.removeprefix('prefix-') }}|{{ 'x.txt'.removesuffix('.txt') }}", {}),
    ("m-unsupported", "{{ 'a'.format() }}", {}),
    ("m-not-a-method", "{{ 'abc'.length is undefined }}|{{ 'abc'.nosuch is undefined }}", {}),
    ("m-dict", "{{ d.keys()|list }}|{{ d.values()|list }}|{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}|{{ d.items()|length }}|{{ 'a' in d.keys() }}|{{ d.copy() }}", {"d": {"a": 1, "b": 2}}),
    ("m-markup-methods", "{{ ('<a>x'|safe).replace('x', '<') }}|{{ ('a b'|safe).split() }}|{{ ('<a>'|safe).upper() }}|{{ ('a'|safe).startswith('a') }}", {}),

    # --- statements: set, for, if, macros, call, filter, with ---
    ("set-basic", "{% set x = 1 %}{% set a, b = 2, 3 %}{% set t = 4, 5 %}{{ x }}{{ a }}{{ b }}{{ t }}", {}),
    ("set-unpack-errors", "{% set a, b = [1] %}", {}),
    ("set-unpack-too-many", "{% set a, b = [1, 2, 3] %}", {}),
    ("set-block", "{% set x %}a{{ 1 }}\nb{% endset %}[{{ x }}]{% set y | upper %}ab{% endset %}{{ y }}{% set z | trim | replace('a', 'b') %}  aa  {% endset %}[{{ z }}]", {}),
    ("set-non-namespace", "{% set d.a = 2 %}", {"d": D}),
    ("scope-loop", "{% set x = 1 %}{% for i in range(3) %}{% if i == 1 %}{% set x = 2 %}{% endif %}{{ x }}{% endfor %}{{ x }}", {}),
    ("scope-loop-fresh-each-iteration", "{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}[{{ y }}]{% endfor %}[{{ y }}]", {}),
    ("scope-if", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", {}),
    ("scope-namespace", "{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }}{{ ns.items }}", {}),
    ("scope-namespace-forms", "{% set a = namespace({'x': 1}, y=2) %}{% set b = namespace() %}{% set b.z = 3 %}{{ a.x }}{{ a.y }}{{ b.z }}{{ b.nope is undefined }}", {}),
    ("scope-macro-sees-later-set", "{% macro f() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ f() }}", {}),
    ("scope-macro-set-local", "{% macro f() %}{% set z = 1 %}{{ z }}{% endmacro %}{{ f() }}[{{ z }}]", {}),
    ("scope-with", "{% set a = 1 %}{% with a = 2, b = 3 %}{{ a }}{{ b }}{% endwith %}{{ a }}[{{ b }}]", {}),
    ("scope-context-shadow", "{{ messages|length }}{% set messages = [1, 2] %}{{ messages|length }}", {"messages": [{"role": "user"}]}),
    ("for-loop-attrs", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }};{% endfor %}", {}),
    ("for-prev-next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}", {}),
    ("for-cycle-changed", "{% for x in [1, 1, 2, 2, 3] %}{{ loop.cycle('a', 'b') }}{% if loop.changed(x) %}!{% endif %}{% endfor %}", {}),
    ("for-else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}x{% else %}none kept{% endfor %}|{% for x in nope %}x{% else %}undef{% endfor %}", {}),
    ("for-filter", "{% for x in [3, 1, 2, 5] if x > 1 %}{{ loop.index }}:{{ x }}/{{ loop.length }} {% endfor %}", {}),
    ("for-unpack", "{% for a, b in [[1, 2], (3, 4)] %}{{ a }}{{ b }}{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}", {}),
    ("for-break-continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("for-nested-loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", {}),
    ("for-recursive", "{% for n in tree recursive %}{{ n.name }}{% if n.kids %}({{ loop(n.kids) }}){% endif %}{{ loop.depth }}{% endfor %}", {"tree": [{"name": "a", "kids": [{"name": "b", "kids": [{"name": "c"}]}, {"name": "d"}]}, {"name": "e"}]}),
    ("for-not-iterable", "{% for x in 5 %}{% endfor %}", {}),
    ("for-none", "{% for x in none %}{% endfor %}", {}),
    ("for-loop-call-non-recursive", "{% for x in [1] %}{{ loop([1]) }}{% endfor %}", {}),
    ("macro-args", "{% macro f(a, b=2, c='x') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, 3) }}|{{ f(1, c='y') }}|{{ f(b=5, a=0) }}|[{{ f() }}]", {}),
    ("macro-varargs-kwargs", "{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1) }}|{{ f(1, 2, 3) }}|{{ f(1, z=5) }}", {}),
    ("macro-too-many", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}", {}),
    ("macro-bad-kwarg", "{% macro f(a) %}{{ a }}{% endmacro %}{{ f(b=2) }}", {}),
    ("macro-default-uses-param", "{% macro f(a, b=a * 2) %}{{ b }}{% endmacro %}{{ f(4) }}", {}),
    ("macro-recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(10) }}", {}),
    ("macro-returns-string", "{% macro f() %} a {% endmacro %}[{{ f()|trim }}][{{ f() is string }}][{{ f()|length }}][{{ (f() + 'x') }}]", {}),
    ("macro-namespace-mutation", "{% set ns = namespace(c=0) %}{% macro bump() %}{% set ns.c = ns.c + 1 %}{% endmacro %}{{ bump() }}{{ bump() }}{{ ns.c }}", {}),
    ("macro-call-block", "{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box('x') %}inner{% endcall %}|{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}", {}),
    ("macro-caller-missing", "{% macro box() %}{{ caller is defined }}{% endmacro %}{{ box() }}", {}),
    ("macro-name", "{% macro hello() %}{% endmacro %}{{ hello.name }}", {}),
    ("filter-block", "{% filter upper %}abc{{ 'd' }}{% endfilter %}|{% filter replace('a', 'b')|trim %}  aaa  {% endfilter %}", {}),
    ("block-and-generation", "{% block x %}B{% endblock %}|{% generation %}G{{ 1 }}{% endgeneration %}", {}),
    ("print-statement", "{% print 'a' %}|{% print 1, 2 %}", {}),

    # --- globals ---
    ("g-range", "{{ range(3)|list }}|{{ range(2, 5)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}|{{ range(3)|length }}|{{ range(3)[1] }}|{{ range(true)|list }}", {}),
    ("g-range-too-big", "{{ range(100001)|length }}", {}),
    ("g-range-max", "{{ range(100000)|length }}", {}),
    ("g-range-step-zero", "{{ range(1, 2, 0) }}", {}),
    ("g-dict", "{{ dict(a=1, b=2) }}|{{ dict([('x', 1), ['y', 2]]) }}|{{ dict({'z': 0}, w=1) }}|{{ dict() }}", {}),
    ("g-raise", "{{ raise_exception('No user query found in messages.') }}", {}),
    ("g-raise-in-macro-through-filter", "{% macro render(c) %}{% if c is not string %}{{ raise_exception('Unexpected content type.') }}{% endif %}{{ c }}{% endmacro %}\n{{ render(x)|trim }}", {"x": 5}),
    ("g-raise-multiline-message", "{{ raise_exception('line one\\nline two') }}", {}),
    ("g-raise-number", "{{ raise_exception(42) }}", {}),
    ("g-undefined-call", "{{ nosuchfunc() }}", {}),
    ("g-call-non-callable", "{{ d() }}", {"d": D}),
    ("g-lipsum-cycler", "{{ cycler is defined }}|{{ joiner is defined }}", {}),

    # --- syntax errors (parse phase) ---
    ("err-unclosed-if", "{% if true %}x", {}),
    ("err-unknown-tag", "{% frobnicate %}", {}),
    ("err-nesting-mistake", "{% for x in y %}{% endif %}", {}),
    ("err-bad-expr", "{{ 1 + }}", {}),
    ("err-unclosed-var", "{{ x ", {}),
    ("err-unexpected-char", "{{ x ! y }}", {}),
    ("err-unbalanced", "{{ (1 }}", {}),
    ("err-unclosed-comment", "a {# b", {}),
    ("err-unclosed-raw", "{% raw %}x", {}),
    ("err-include", "{% include 'x' %}", {}),
    ("err-extends", "{% extends 'chat_template' %}", {}),
    ("err-import", "{% import 'x' as y %}", {}),
    ("err-assign-const", "{% set 1 = 2 %}", {}),
    ("err-break-outside", "{% break %}", {}),
    ("err-truncated-escape", "{{ '\\x4' }}", {}),
    ("err-chained-is", "{{ 1 is number is number }}", {}),
    ("err-endfor-extra", "{% endfor %}", {}),
    ("err-macro-default-order", "{% macro f(a=1, b) %}{% endmacro %}", {}),
    ("err-multiline-line-number", "a\nb\n{{ 1 +* 2 }}", {}),
    ("err-runtime-line-number", "a\nb\n\n{{ nope.attr }}", {}),
    ("err-do-tag", "{% do x %}", {}),
    # --- more edge cases ---
    ("x-namespace-cycle", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", {}),
    ("x-braces-in-strings", "{{ '}}' }}|{% set x = '%}' %}{{ x }}|{{ {'a': {'b': 1}} }}|{# {{ not a tag }} #}|{{ '{%' ~ '#}' }}", {}),
    ("x-ternary-filter", "{{ 'a' if x else 'b' | upper }}|{{ ('a' if x else 'b') | upper }}", {"x": False}),
    ("x-unicode-names", "{% set café = 1 %}{% set _x2 = 2 %}{{ café }}{{ _x2 }}", {}),
    ("x-loop-in-macro", "{% macro m() %}[{{ loop is defined }}]{% endmacro %}{% for i in [1] %}{{ m() }}{% endfor %}", {}),
    ("x-bigint", "{{ big }}|{{ big|tojson }}|{{ big|string }}|{{ big is integer }}|{{ big == big }}", {"big": 123456789012345678901234567890}),
    ("x-bigint-arith", "{{ big + 1 }}", {"big": 123456789012345678901234567890}),
    ("x-pow-overflow", "{{ 2 ** 63 }}", {}),
    ("x-int64-edges", "{{ 2 ** 62 }}|{{ 9223372036854775807 }}|{{ -9223372036854775807 - 1 }}|{{ 10 / 3 }}", {}),
    ("x-sort-none", "{{ [none, 1]|sort }}", {}),
    ("x-batch-unsupported", "{{ [1, 2, 3]|batch(2)|list }}", {}),
    ("x-split-filter", "{{ 'a,b'|split(',') }}", {}),
    ("x-floats", "{{ 1/3 }}|{{ 1e-5 }}|{{ 100.0 }}|{{ 1e22 }}|{{ 123456789.123456789 }}|{{ 2.0 ** 60 }}|{{ 1e15 + 0.5 }}|{{ -1e-300 * 1e-300 }}|{{ 1e308 * 10 }}|{{ -(1e308 * 10) }}|{{ (1e308 * 10) - (1e308 * 10) }}", {}),
    ("x-dict-literals", "{{ {'a': 1, 'b': 2, 'a': 3} }}|{{ {1: 'a', 1.0: 'b', true: 'c'} }}|{{ {(1, 2): 'x'} }}|{{ {none: 1}[none] }}", {}),
    ("x-unhashable-key", "{{ {[1]: 2} }}", {}),
    ("x-str-times-float", "{{ 'abc' * 2.0 }}", {}),
    ("x-percent-formats", "{{ '%s' % none }}|{{ '%5s|%-5s|' % ('ab', 'cd') }}|{{ '%c' % 128512 }}|{{ '%r' % \"it's\" }}|{{ '%a' % 'é' }}|{{ '%i|%u' % (3.9, 4) }}|{{ '%.2e' % 0 }}|{{ '%#.0f|%#g' % (3, 2) }}|{{ '%+.1f' % -0.04 }}|{{ '%x' % -255 }}|{{ '%05.1f' % -2.5 }}|{{ '%f' % (1e308 * 10) }}|{{ '%10.3s|' % 'abcdef' }}", {}),
    ("x-split-edge", "{{ 'a b'.split(' ', 0) }}|{{ ' a b '.split(none, 0) }}|{{ 'a\u00a0b'.split() }}|{{ 'a,b,c'.rsplit(',', 0) }}|{{ 'a,,b'.rsplit(',') }}|{{ '  '.rsplit() }}|{{ 'x'.split('x') }}", {}),
    ("x-strip-edge", "[{{ '  x'.lstrip(none) }}][{{ 'abc'.strip('') }}][{{ 'aaa'.replace('a', 'b', 0) }}][{{ 'aaa'.replace('a', 'b', -1) }}][{{ 'Hello'.startswith('') }}]", {}),
    ("x-center-fill-filter", "{{ 'x'|center(4, '*') }}", {}),
    ("x-loop-outside", "[{{ loop.index }}]", {}),
    ("x-loop-target", "{% for loop in [1] %}{% endfor %}", {}),
    ("x-undefined-attr-default", "{{ nope.attr|default('d') }}", {}),
    ("x-or-default", "{{ (nope or {}).get('x') }}|{{ (nope or 'fallback') }}", {}),
    ("x-messages-filters", "{{ messages|selectattr('role', 'equalto', 'system')|list|length }}|{{ messages|map(attribute='role')|join(',') }}|{{ messages[-1].content }}|{{ messages|rejectattr('content')|list|length }}",
     {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": ""}, {"role": "assistant", "content": "last"}]}),
    ("x-int-float-more", "{{ '  -12 '|int }}|{{ '+5'|int }}|{{ '1e3'|int }}|{{ '1_000.5'|float }}|{{ '.5'|float }}|{{ '5.'|float }}|{{ 'nan'|float }}|{{ '-inf'|float }}|{{ '0x10'|int }}|{{ '010'|int }}|{{ '0b11'|int(base=0) }}|{{ '010'|int(base=0) }}|{{ 'z'|int(base=36) }}|{{ '1__0'|int }}|{{ '_1'|int }}", {}),
    ("x-round-more", "{{ 0.1|round(1) }}|{{ 1.005|round(2) }}|{{ 2.5|round(0) }}|{{ -1.5|round }}|{{ 7|round(-1) }}|{{ 15|round(-1) }}|{{ 25|round(-1) }}|{{ 1.25|round(1) }}|{{ 1234.5678|round(-2) }}|{{ 5|round(2, 'floor') }}", {}),
    ("x-filter-block-indent", "{% filter indent(2) %}a\nb{% endfilter %}", {}),
    ("x-tools-none", "{{ tools|length if tools else 0 }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}", {}),
    ("x-tools-list", "{{ tools|length }}|{{ tools[0].function.name }}|{% for t in tools %}{{ t|tojson }}{% endfor %}", {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": 2}}}]}),
    ("x-content-parts", "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.type }}:{{ p.text|default('-') }};{% endfor %}{% endif %}{% endfor %}",
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}, {"role": "user", "content": "plain"}]}),
    ("x-range-more", "{{ range(5)|reverse|list }}|{{ range(5)|sum }}|{{ range(10, 0, -3)|list }}|{{ range(-3)|list }}|{{ 3 in range(0, 10, 3) }}|{{ 4 in range(0, 10, 3) }}", {}),
    ("x-misc", "{{ [3, 1]|sort|first }}|{{ (1, 2)|list }}|{{ {'a': 1}.items()|list }}|{{ true ~ 1 }}|{{ 'x'|list|length }}|{{ x is string and x.startswith('a') }}", {"x": "abc"}),
    ("x-set-chain-error", "{% set a = b = 1 %}", {}),
    ("x-comment-lstrip", "a\n  {# c #}\nb\n  {#- d #}\nc", {}),
    ("x-trailing-ws-after-block", "{% if true %}x{% endif %}  \ny", {}),
    ("x-var-then-block-line", "{{ 'a' }}\n  {% if true %}\nb\n  {% endif %}\n", {}),
    ("x-raw-lstrip", "a\n  {% raw %}\n  {{ x }}\n  {% endraw %}\nb", {}),
    ("x-minus-raw", "a  {%- raw -%}  b  {%- endraw -%}  c", {}),
    ("x-dict-key-order-json", "{{ d }}|{{ d|tojson }}|{{ d.keys()|list }}", {"d": {"z": 1, "a": 2, "m": {"y": 1, "b": 2}}}),
    ("x-eq-mixed", "{{ 1 == '1' }}|{{ [1] == (1,) }}|{{ none == false }}|{{ 0 == false }}|{{ 1.5 == 1.5 }}|{{ 'a' != 'b' }}|{{ {} == [] }}", {}),
    ("x-string-compare-unicode", "{{ 'é' > 'z' }}|{{ '😀' > '\uffff' }}|{{ 'a' < 'aa' }}|{{ ['a', 'b'] < ['a', 'c'] }}|{{ (1, 2) <= (1, 2) }}", {}),
    # --- slicing what is not a sequence: Python's subscript raises, a folded constant is undefined ---
    ("slice-generator", "{{ (d|items)[1:] }}", {"d": D}),
    ("slice-select", "{{ ([1, 2]|select)[1:] }}", {}),
    ("slice-none-var", "{{ n[1:] }}", {"n": None}),
    ("slice-int-var", "{{ d.a[1:] }}", {"d": D}),
    ("slice-dict-var", "{{ d[1:] }}", {"d": D}),
    ("slice-dict-view", "{{ ({'a': 1}.items())[1:] }}", {}),
    ("slice-loop", "{% for x in [1] %}{{ loop[1:] }}{% endfor %}", {}),
    ("slice-namespace", "{{ namespace(a=1)[1:] }}", {}),
    ("slice-macro", "{% macro m() %}{% endmacro %}{{ m[1:] }}", {}),
    ("slice-const-folded", "[{{ (none)[1:] }}|{{ (1)[1:] }}|{{ ({'a': 1})[1:] }}|{{ true[:] }}]", {}),
    ("generator-twice", "{% set g = [1, 2]|select %}{{ g|list }}{{ g|list }}", {}),
    ("generator-last", "{{ ([1, 2]|select)|last }}", {}),
    ("generator-index", "[{{ ([1, 2]|select)[0] }}]", {}),
    ("x-length-unicode", "{{ '😀é'|length }}|{{ '😀é'[1] }}|{{ '😀é'[::-1] }}|{{ '😀é'|reverse }}|{{ '😀é'|list }}|{{ '日本'.center(6, '*') }}", {}),
]



ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def render_templates(env):
    with open(os.path.join(ROOT, "testdata", "chat", "template_cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    out = []
    for template in spec["templates"]:
        with open(os.path.join(ROOT, "testdata", "chat", template), encoding="utf-8") as f:
            source = f.read()
        for c in spec["cases"]:
            kwargs = dict(c.get("kwargs", {}))
            status, result = chat_jinja_env.render(env, source, messages=c["messages"], tools=c.get("tools"), **kwargs)
            if status == "parse":
                raise SystemExit(f"{template} does not parse: {result}")
            case = {"template": template, "name": c["name"]}
            if status == "ok":
                case["text"] = result
            else:
                case["error"] = result
            out.append(case)
            print(f"{template} {c['name']}: {status}")
    return out


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_chat_jinja.py OUT_DIR")
    names = [c[0] for c in CASES]
    if len(set(names)) != len(names):
        raise SystemExit("duplicate case names")
    env = chat_jinja_env.environment()
    out = []
    for name, source, variables in CASES:
        variables = json.loads(json.dumps(variables))
        kwargs = dict(variables)
        messages = kwargs.pop("messages", [])
        status, result = chat_jinja_env.render(env, source, messages=messages, **kwargs)
        case = {"name": name, "template": source, "vars": variables}
        if status == "ok":
            if "object at 0x" in result:
                raise SystemExit(f"{name}: the output names an object's address: {result!r}")
            case["output"] = result
        else:
            case["phase"], case["error"] = status, result
        out.append(case)
        print(f"{name}: {status}")
    header = {"jinja2": jinja2.__version__, "python": platform.python_version(),
              "environment": "transformers' chat template environment (testdata/gen/chat_jinja_env.py)"}
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, cases in (("jinja_expected.json", out), ("template_expected.json", render_templates(env))):
        path = os.path.join(sys.argv[1], name)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**header, "cases": cases}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
