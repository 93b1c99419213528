#!/usr/bin/env python3
"""Render @huggingface/jinja's test cases with Python's jinja2, as transformers would.

The cases (testdata/chat/hf_jinja_cases.json, converted from the suite by
testdata/gen/hf_jinja_cases.mjs) are templates and contexts only; this script
renders each in transformers' chat-template environment (chat_jinja_env.py)
and writes testdata/chat/hf_jinja_expected.json: every case with what jinja2
renders, or the phase (parse or render) and message of its error. Run from the
repository root with jinja2 >= 3.1 (transformers itself is not needed):

    python3 testdata/gen/gen_chat_hf_jinja.py testdata/chat

The context is passed as render_jinja_template passes apply_chat_template's
arguments: messages, tools, documents and add_generation_prompt by name, every
other key as a keyword argument. strftime_now reads a fixed clock
(2025-07-10 12:00:00, the time the suite itself pins) so that the renders do
not depend on the day they are made; qwenref's test pins the same.
"""
import json
import os
import platform
import sys
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja2  # noqa: E402
import chat_jinja_env  # noqa: E402

FIXED_NOW = datetime(2025, 7, 10, 12, 0, 0)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_chat_hf_jinja.py DIR (reads DIR/hf_jinja_cases.json, writes DIR/hf_jinja_expected.json)")
    with open(os.path.join(sys.argv[1], "hf_jinja_cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    env = chat_jinja_env.environment()
    env.globals["strftime_now"] = lambda format: FIXED_NOW.strftime(format)
    out = []
    names = set()
    for c in spec["cases"]:
        if c["name"] in names:
            raise SystemExit(f"duplicate case name {c['name']}")
        names.add(c["name"])
        kwargs = dict(c["context"])
        status, result = chat_jinja_env.render(env, c["template"], **kwargs)
        case = {"name": c["name"], "template": c["template"], "context": c["context"]}
        if status == "ok":
            if "object at 0x" in result:
                raise SystemExit(f"{c['name']}: the output names an object's address: {result!r}")
            case["output"] = result
        else:
            case["phase"], case["error"] = status, result
        out.append(case)
    header = {
        "source": spec["source"],
        "commit": spec["commit"],
        "jinja2": jinja2.__version__,
        "python": platform.python_version(),
        "environment": "transformers' chat template environment (testdata/gen/chat_jinja_env.py), strftime_now at 2025-07-10 12:00:00",
        "omitted": spec["omitted"],
    }
    path = os.path.join(sys.argv[1], "hf_jinja_expected.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({**header, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    ok = sum(1 for c in out if "output" in c)
    print(f"wrote {path}: {len(out)} cases, {ok} render, {len(out) - ok} fail")


if __name__ == "__main__":
    main()
