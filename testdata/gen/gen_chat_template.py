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
writes OUT_DIR/expected.json. Any failure exits non-zero.
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
    os.makedirs(out_dir, exist_ok=True)
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
