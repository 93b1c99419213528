"""transformers' chat-template environment, for qwenref's generator scripts.

This builds the Jinja environment that transformers' apply_chat_template
renders with (transformers/utils/chat_template_utils.py,
_compile_jinja_template): an ImmutableSandboxedEnvironment with trim_blocks
and lstrip_blocks, the loopcontrols extension and the {% generation %} tag,
transformers' tojson filter, and the raise_exception and strftime_now
globals; and it renders as render_jinja_template does:
template.render(messages=..., tools=..., documents=..., add_generation_prompt=..., **kwargs).

Only jinja2 (>= 3.1) is needed, not transformers.
"""
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    """The {% generation %} tag of transformers' AssistantTracker, which
    renders its body unchanged when no assistant mask is asked for."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, messages=None, tools=None, documents=None, add_generation_prompt=False, **kwargs):
    """Render source as render_jinja_template does; returns ("ok", text),
    ("parse", error) or ("render", error)."""
    try:
        template = env.from_string(source)
    except Exception as e:  # noqa: BLE001 - any compile error is an expected outcome
        return "parse", f"{type(e).__name__}: {e}"
    try:
        text = template.render(messages=messages if messages is not None else [], tools=tools, documents=documents,
                               add_generation_prompt=add_generation_prompt, **kwargs)
    except Exception as e:  # noqa: BLE001
        return "render", f"{type(e).__name__}: {e}"
    return "ok", text
