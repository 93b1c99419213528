#!/usr/bin/env python3
"""Render qwenref's chat-template cases with transformers' apply_chat_template.

Run from the repository root on a machine with transformers 5.17 (no network
and no Go needed):

    python3 testdata/gen/gen_chat_template.py OUT_DIR

It builds a tokenizer from the committed Qwen3 tokenizer.json
(testdata/tokenizer/qwen3-tokenizer.json.gz) and tokenizer_config.json with
its chat_template (testdata/chat/qwen3-tokenizer_config.json), renders every
conversation in testdata/chat/cases.json with apply_chat_template(...,
tokenize=False, **kwargs), encodes the text without special tokens added, and
writes OUT_DIR/expected.json.

It then renders every conversation of testdata/chat/template_cases.json with
each Qwen3.5/3.6-style test template it names (apply_chat_template(...,
chat_template=the template's text)), recording the text and its ids, or the
error the template raised, in OUT_DIR/expected_templates.json. Any other
failure exits non-zero.
"""
import gzip
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_cases():
    with open(os.path.join(ROOT, "testdata", "chat", "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate case names in cases.json: {names}")
    return cases


def build_tokenizer(tmp):
    from transformers import AutoTokenizer

    with gzip.open(os.path.join(ROOT, "testdata", "tokenizer", "qwen3-tokenizer.json.gz"), "rb") as src, \
            open(os.path.join(tmp, "tokenizer.json"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(os.path.join(ROOT, "testdata", "chat", "qwen3-tokenizer_config.json"),
                os.path.join(tmp, "tokenizer_config.json"))
    tok = AutoTokenizer.from_pretrained(tmp)
    if not getattr(tok, "chat_template", None):
        raise SystemExit("the tokenizer loaded without a chat_template")
    return tok


def render_style_templates(tok):
    """apply_chat_template with each style template over template_cases.json."""
    import jinja2

    with open(os.path.join(ROOT, "testdata", "chat", "template_cases.json"), encoding="utf-8") as f:
        spec = json.load(f)
    results = []
    for template in spec["templates"]:
        with open(os.path.join(ROOT, "testdata", "chat", template), encoding="utf-8") as f:
            source = f.read()
        for c in spec["cases"]:
            kwargs = dict(c.get("kwargs", {}))
            case = {"template": template, "name": c["name"]}
            try:
                text = tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False,
                                               chat_template=source, **kwargs)
            except jinja2.exceptions.TemplateSyntaxError:
                raise
            except (jinja2.exceptions.TemplateError, TypeError, ValueError) as e:
                case["error"] = f"{type(e).__name__}: {e}"
                results.append(case)
                print(f"{template} {c['name']}: error {case['error']}")
                continue
            if not isinstance(text, str):
                raise SystemExit(f"{template} {c['name']}: apply_chat_template returned {type(text).__name__}")
            case["text"] = text
            case["ids"] = tok(text, add_special_tokens=False)["input_ids"]
            results.append(case)
            print(f"{template} {c['name']}: {len(text)} chars, {len(case['ids'])} tokens")
    return results


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_chat_template.py OUT_DIR")
    out_dir = sys.argv[1]
    import tokenizers
    import transformers
    import jinja2

    cases = load_cases()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tok = build_tokenizer(tmp)
        for c in cases:
            kwargs = dict(c.get("kwargs", {}))
            text = tok.apply_chat_template(c["messages"], tools=c.get("tools"), tokenize=False, **kwargs)
            if not isinstance(text, str) or not text:
                raise SystemExit(f"{c['name']}: apply_chat_template returned {type(text).__name__} {text!r}")
            ids = tok(text, add_special_tokens=False)["input_ids"]
            results.append({"name": c["name"], "text": text, "ids": ids})
            print(f"{c['name']}: {len(text)} chars, {len(ids)} tokens")
        template_results = render_style_templates(tok)
    os.makedirs(out_dir, exist_ok=True)
    header = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
              "jinja2": jinja2.__version__, "python": sys.version.split()[0]}
    path = os.path.join(out_dir, "expected_templates.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**header,
                   "call": "tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, chat_template=template, "
                           "**kwargs); ids from tokenizer(text, add_special_tokens=False)",
                   "cases": template_results}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({len(template_results)} cases)")
    path = os.path.join(out_dir, "expected.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                   "jinja2": jinja2.__version__, "python": sys.version.split()[0],
                   "call": "tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs); "
                           "ids from tokenizer(text, add_special_tokens=False)",
                   "cases": results}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({len(results)} cases)")


if __name__ == "__main__":
    main()
