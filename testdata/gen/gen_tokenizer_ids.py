#!/usr/bin/env python3
"""Write qwenref's expected tokenizer outputs, computed by HF `tokenizers`.

Run on a machine with the `tokenizers` Python package (0.23; the project's GPU
machine has 0.23.2):

    python3 testdata/gen/gen_tokenizer_ids.py --out testdata/tokenizer/expected.json

Inputs (all committed under testdata/tokenizer/):
  qwen3-tokenizer.json.gz   the real Qwen3 tokenizer.json
  cases.json                named texts for the Qwen3 tokenizer
  tiny/*.json               small handmade tokenizers exercising single pieces
  tiny/cases.json           named texts for the tiny tokenizers

For every suite (one tokenizer.json) the output records: the exact JSON
handed to Tokenizer.from_str (tiny suites only; Qwen3 is named by file and
sha256), or the error HF raised while loading it; vocabulary sizes; every
added token with its id; and per text the ids, tokens and decode round trip
(encode with add_special_tokens=False, decode with
skip_special_tokens=False). Seeded random texts and random id lists (many of
them invalid UTF-8 on decode) are generated here and written out in full, so
the Go tests need no generator of their own. Nothing is computed by hand.

Every failure inside a suite is recorded, never raised, so one run always
produces a complete file.

With `--nfc-only DIR` it writes only DIR/nfc-combining.json: the Qwen3
tokenizer's ids for texts with long runs of combining marks (over the 30
non-starters after which Unicode's stream-safe format, but not HF's NFC,
inserts U+034F), the texts written out in full:

    python3 testdata/gen/gen_tokenizer_ids.py --nfc-only testdata/tokenizer/nfc
"""
import argparse
import copy
import gzip
import hashlib
import json
import os
import platform
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TESTDATA = os.path.normpath(os.path.join(HERE, "..", "tokenizer"))

# Pieces random texts are built from: scripts, whitespace kinds, specials and
# near-specials, combining marks, NFC singletons, emoji parts, controls.
QWEN_ATOMS = [
    "a", "Z", "hello", " the", "The", "don't", "'s", "'S", "'ll", "'\u017f", "\u017f",
    "\u00e9", "e\u0301", "\u0301", "\u0308", "\u212b", "\u2126", "\ufb01",
    " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085",
    "\u200b", "\u200d", "\ufe0f", "\ufeff",
    "0", "7", "42", "1234567", "\u0663", "\u00bd", "\u216b", "3.14",
    "\u4e2d", "\u6587\u5b57", "\u65e5\u672c\u8a9e", "\u3053\u3093", "\u30ab\u30bf", "\ud55c\uad6d",
    "\u1100\u1161\u11a8", "\u0627\u0644\u0639", "\u05e9\u05dc", "\u041f\u0440\u0438", "\u03c3\u03bf\u03c2",
    "\U0001F600", "\U0001F44D", "\U0001F3FD", "\U0001F468\u200D\U0001F469", "\U0001F1FA\U0001F1F8",
    "\U00010000", "\U0001D400",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<|im_start", "<|", "|>", "<", "|", ">",
    ".", ",", "!", "?", "...", "--", "#", "()", "{}", "\"", "'", "`", "/", "\\", "_", "@",
    "\x00", "\x01", "\x1b", "\x7f", "\x0b", "\x0c", "\x1c", "\x1f", "\u00ad",
]

TINY_ATOMS = [
    "a", "b", "c", "ab", "abc", "x", "y", "z", "xyz", "the", "hello", "world", "hello world",
    "in", "12", "123", "\u4e2d", "\u00e9", "e\u0301", "cafe\u0301", "caf\u00e9", "\u2126", "\u03a9",
    " ", "  ", "\t", "\n", "\r\n", ",", ".", "!", "?", "_", "1",
    "<s>", "<sp>", "[SW]", "[L]", "[R]", "[LR]", "[SW][L]", "[X]", "[", "]",
    "\U0001F600", "\x00", "'s", "'S", "'\u017f", "\u017f", "k", "K", "\u212a",
    "\u03c3", "\u03c2", "\u03a3", "t\u017fs",
]


def random_texts(rng, atoms, count, max_atoms):
    out = []
    for i in range(count):
        n = rng.randint(1, max_atoms)
        out.append({"name": "random_%03d" % i, "text": "".join(rng.choice(atoms) for _ in range(n))})
    return out


def err_text(e):
    return "%s: %s" % (type(e).__name__, e)


def guarded(fn):
    """Run fn, turning any failure (pyo3 panics are BaseExceptions) into a record."""
    try:
        return fn(), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: B036 - Rust panics surface as PanicException
        return None, err_text(e)


def run_suite(Tokenizer, name, json_text, cases, decode_lists, source):
    suite = {"name": name}
    suite.update(source)
    tok, err = guarded(lambda: Tokenizer.from_str(json_text))
    if err is not None:
        suite["load_error"] = err
        return suite
    suite["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
    suite["model_vocab_size"] = tok.get_vocab_size(with_added_tokens=False)
    added = []
    for tid, at in sorted(tok.get_added_tokens_decoder().items()):
        added.append({
            "id": tid,
            "content": at.content,
            "special": at.special,
            "token_to_id": tok.token_to_id(at.content),
            "id_to_token": tok.id_to_token(tid),
        })
    suite["added_tokens"] = added
    suite["id_to_token_probe"] = {str(i): tok.id_to_token(i) for i in probe_ids(suite["vocab_size"])}

    out_cases = []
    for c in cases:
        rec = {"name": c["name"], "text": c["text"]}
        enc, err = guarded(lambda: tok.encode(c["text"], add_special_tokens=False))
        if err is not None:
            rec["error"] = err
        else:
            rec["ids"] = list(enc.ids)
            if not c["name"].startswith("random_"):
                rec["tokens"] = list(enc.tokens)  # for reading failures; random cases skip it
            dec, err = guarded(lambda: tok.decode(list(enc.ids), skip_special_tokens=False))
            if err is not None:
                rec["decode_error"] = err
            else:
                rec["decoded"] = dec
        out_cases.append(rec)
    suite["cases"] = out_cases

    out_dec = []
    for d in decode_lists:
        rec = {"name": d["name"], "ids": d["ids"]}
        dec, err = guarded(lambda: tok.decode(d["ids"], skip_special_tokens=False))
        if err is not None:
            rec["error"] = err
        else:
            rec["decoded"] = dec
        out_dec.append(rec)
    suite["decode_cases"] = out_dec
    return suite


def probe_ids(vocab_size):
    ids = {0, 1, 2, 100, 255, 256, vocab_size - 1, vocab_size, vocab_size + 1}
    return sorted(i for i in ids if i >= 0)


def bytes_to_unicode():
    """GPT-2's byte to printable-character table (to name single-byte tokens)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def qwen_decode_lists(vocab, rng):
    """Id lists for decode-only checks, from token strings (ids looked up in the JSON)."""
    def ids_of(tokens):
        return [vocab[t] for t in tokens]

    bc = bytes_to_unicode()
    # One single-byte token per byte: ill-formed UTF-8 of every kind.
    named = [
        ("lone_lead_byte", b"\xc3"),
        ("two_byte_split", b"\xc3\xa9"),
        ("truncated_emoji", b"\xf0\x9f\x98"),
        ("lone_continuations", b"\x80\x80"),
        ("overlong_c0", b"\xc0\x80"),
        ("surrogate_ed", b"\xed\xa0\x80"),
        ("f4_too_high", b"\xf4\x90\x80\x80"),
        ("e0_bad_second", b"\xe0\x80\x80"),
        ("f5_invalid", b"\xf5a"),
        ("ff_byte", b"\xff"),
        ("truncated_then_ascii", b"\xe4\xb8a"),
        ("truncated_4byte_then_valid", b"\xf0\x9f\xe4\xb8\xad"),
    ]
    out = [{"name": n, "ids": ids_of([bc[b] for b in raw])} for n, raw in named]
    out.append({"name": "with_specials", "ids": [151644] + ids_of(["user", "\u010a", "hi"]) + [151645, 151643]})
    out.append({"name": "nonspecial_added", "ids": [151667, 151668, 151657]})
    byte_tokens = [t for t in vocab if len(t) == 1]
    for i in range(120):
        n = rng.randint(1, 8)
        toks = [rng.choice(byte_tokens) for _ in range(n)]
        ids = ids_of(toks)
        if rng.random() < 0.2:
            ids.insert(rng.randint(0, len(ids)), rng.choice([151643, 151644, 151645, 151667]))
        if rng.random() < 0.3:
            ids.insert(rng.randint(0, len(ids)), rng.randrange(0, 151643))
        out.append({"name": "random_bytes_%03d" % i, "ids": ids})
    return out


def time_encode(tok, text, rounds=200):
    """Single-threaded encode throughput of HF on one text."""
    tok.encode(text, add_special_tokens=False)
    start = time.perf_counter()
    n = 0
    for _ in range(rounds):
        n += len(tok.encode(text, add_special_tokens=False).ids)
    sec = time.perf_counter() - start
    return {"case": "long_text", "rounds": rounds, "seconds": sec,
            "tokens_per_s": n / sec, "mb_per_s": rounds * len(text.encode("utf-8")) / sec / 1e6}


def tiny_variants(tiny_dir):
    """(name, json object) for each tiny suite: committed files and patched copies."""
    def load(name):
        with open(os.path.join(tiny_dir, name), encoding="utf-8") as f:
            return json.load(f)

    bytelevel = load("bytelevel.json")
    split = load("split.json")
    charbpe = load("charbpe.json")
    affix = load("charbpe-affix.json")
    out = [("tiny-bytelevel", bytelevel)]

    v = copy.deepcopy(bytelevel)
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    v["model"]["merges"] = [m.split(" ") for m in v["model"]["merges"]]
    out.append(("tiny-bytelevel-noprefix-tuplemerges", v))

    v = copy.deepcopy(bytelevel)
    v["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": False}
    v["normalizer"] = None
    out.append(("tiny-bytelevel-noregex-nonorm", v))

    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in [False, True]:
            v = copy.deepcopy(split)
            v["pre_tokenizer"]["pretokenizers"][0]["behavior"] = behavior
            v["pre_tokenizer"]["pretokenizers"][0]["invert"] = invert
            out.append(("tiny-split-%s-%s" % (behavior, "invert" if invert else "plain"), v))

    # String patterns and regexes that can match the empty string.
    for label, pattern, behavior in [
        ("string-comma", {"String": ", "}, "Removed"),
        ("string-dot", {"String": "."}, "MergedWithPrevious"),
        ("empty-astar-removed", {"Regex": "a*"}, "Removed"),
        ("empty-astar-contiguous", {"Regex": "a*"}, "Contiguous"),
        ("empty-astar-next", {"Regex": "a*"}, "MergedWithNext"),
        ("empty-lookahead", {"Regex": "x|(?=c)"}, "MergedWithPrevious"),
        ("ignorecase-s", {"Regex": "(?i:'s|k|\u03c3)"}, "Isolated"),
        ("ignorecase-class", {"Regex": "(?i)[a-z]+"}, "Isolated"),
    ]:
        v = copy.deepcopy(split)
        v["pre_tokenizer"]["pretokenizers"][0]["pattern"] = pattern
        v["pre_tokenizer"]["pretokenizers"][0]["behavior"] = behavior
        out.append(("tiny-split-" + label, v))

    out.append(("tiny-charbpe-fallback", charbpe))
    v = copy.deepcopy(charbpe)
    v["model"]["byte_fallback"] = False
    out.append(("tiny-charbpe-unk", v))
    v = copy.deepcopy(charbpe)
    v["model"]["byte_fallback"] = False
    v["model"]["fuse_unk"] = True
    out.append(("tiny-charbpe-fuseunk", v))
    v = copy.deepcopy(charbpe)
    v["model"]["byte_fallback"] = False
    v["model"]["unk_token"] = None
    out.append(("tiny-charbpe-nounk", v))
    v = copy.deepcopy(charbpe)
    v["model"]["ignore_merges"] = True
    out.append(("tiny-charbpe-ignoremerges", v))
    out.append(("tiny-charbpe-affix", affix))

    # Fields left out or inconsistent: whatever HF does (load or refuse),
    # the Go loader must do too.
    v = copy.deepcopy(bytelevel)
    v["pre_tokenizer"] = {"type": "ByteLevel"}
    out.append(("tiny-lenient-bytelevel-noflags", v))
    v = copy.deepcopy(split)
    del v["pre_tokenizer"]["pretokenizers"][0]["invert"]
    out.append(("tiny-lenient-split-noinvert", v))
    v = copy.deepcopy(bytelevel)
    for i, a in enumerate(v["added_tokens"]):
        a["id"] = 1000 + 7 * i
    out.append(("tiny-lenient-file-ids-ignored", v))
    v = copy.deepcopy(bytelevel)
    for a in v["added_tokens"]:
        for k in ("single_word", "lstrip", "rstrip", "normalized"):
            a.pop(k, None)
    out.append(("tiny-lenient-added-defaults", v))
    v = copy.deepcopy(split)
    del v["version"]
    del v["model"]["type"]
    out.append(("tiny-lenient-noversion-notype", v))

    # Files HF must refuse; the Go loader must refuse them too.
    def broken(label, mutate):
        v = copy.deepcopy(bytelevel)
        mutate(v)
        out.append(("tiny-bad-" + label, v))

    broken("merge-oov", lambda v: v["model"]["merges"].append("q \u4e00"))
    broken("merge-result-oov", lambda v: v["model"]["merges"].append("q q"))
    broken("merge-three-parts", lambda v: v["model"]["merges"].append("a b c"))
    broken("version", lambda v: v.update(version="2.0"))
    broken("dropout", lambda v: v["model"].update(dropout=1.5))
    broken("model-type", lambda v: v["model"].update(type="Nope"))
    broken("pretok-type", lambda v: v.update(pre_tokenizer={"type": "Nope"}))
    broken("normalizer-type", lambda v: v.update(normalizer={"type": "Nope"}))
    broken("decoder-type", lambda v: v.update(decoder={"type": "Nope"}))
    broken("no-model", lambda v: v.pop("model"))
    broken("no-merges", lambda v: v["model"].pop("merges"))
    broken("negative-id", lambda v: v["model"]["vocab"].update({"neg": -1}))
    broken("split-regex", lambda v: v.update(pre_tokenizer={
        "type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated", "invert": False}))
    broken("split-behavior", lambda v: v.update(pre_tokenizer={
        "type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": False}))
    return out


def combining_texts():
    """Texts whose NFC differs between HF (plain NFC) and the stream-safe form."""
    marks_above = ["\u0301", "\u0300", "\u0308", "\u0302", "\u030a"]  # ccc 230
    out = []
    for n in [1, 29, 30, 31, 32, 45, 61, 100, 300]:
        out.append({"name": "acute_run_%d" % n, "text": "e" + "\u0301" * n})
        out.append({"name": "below_then_ring_%d" % n, "text": "A" + "\u0316" * n + "\u030a x"})
        out.append({"name": "mixed_ccc_%d" % n,
                    "text": "o" + "".join(("\u0323" if i % 3 == 0 else marks_above[i % 5]) for i in range(n)) + "!"})
    out.append({"name": "alone_marks_40", "text": "\u0301" * 40})
    out.append({"name": "decomposed_in_run", "text": "a" + "\u0316" * 35 + "\u00e9\u0301"})
    out.append({"name": "hangul_then_marks", "text": "\u1100\u1161" + "\u0301" * 33 + "\u11a8"})
    out.append({"name": "words_with_runs", "text": "the caf" + "e" + "\u0301" * 31 + " and na" + "i" + "\u0308" * 40 + "ve"})
    out.append({"name": "cgj_given_in_run", "text": "e" + "\u0301" * 20 + "\u034f" + "\u0301" * 20})
    out.append({"name": "zalgo", "text": "h" + "".join(chr(0x300 + (i * 7) % 0x70) for i in range(90)) + "i"})
    return out


def nfc_only(out_dir, td):
    from tokenizers import Tokenizer
    import tokenizers

    with open(os.path.join(td, "qwen3-tokenizer.json.gz"), "rb") as f:
        qwen_json = gzip.decompress(f.read()).decode("utf-8")
    tok = Tokenizer.from_str(qwen_json)
    norm, _ = guarded(lambda: tok.normalizer)
    cases = []
    for c in combining_texts():
        enc = tok.encode(c["text"], add_special_tokens=False)
        rec = {"name": c["name"], "text": c["text"], "ids": list(enc.ids)}
        normalized, err = guarded(lambda: norm.normalize_str(c["text"]))
        if err is None:
            rec["normalized"] = normalized
        cases.append(rec)
    result = {
        "generator": "testdata/gen/gen_tokenizer_ids.py --nfc-only",
        "tokenizers_version": tokenizers.__version__,
        "tokenizer_file": "qwen3-tokenizer.json.gz",
        "tokenizer_json_sha256": hashlib.sha256(qwen_json.encode("utf-8")).hexdigest(),
        "encode": "Tokenizer.encode(text, add_special_tokens=False)",
        "cases": cases,
    }
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "nfc-combining.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("wrote %s: %d cases, tokenizers %s" % (path, len(cases), tokenizers.__version__), flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="where to write expected.json")
    ap.add_argument("--nfc-only", metavar="DIR", help="write only DIR/nfc-combining.json")
    ap.add_argument("--testdata", default=DEFAULT_TESTDATA, help="testdata/tokenizer directory")
    args = ap.parse_args()
    if args.nfc_only:
        return nfc_only(args.nfc_only, args.testdata)
    if not args.out:
        ap.error("--out or --nfc-only is required")

    import tokenizers
    from tokenizers import Tokenizer

    td = args.testdata
    gz_path = os.path.join(td, "qwen3-tokenizer.json.gz")
    with open(gz_path, "rb") as f:
        gz = f.read()
    qwen_json = gzip.decompress(gz).decode("utf-8")
    with open(os.path.join(td, "cases.json"), encoding="utf-8") as f:
        qwen_cases = json.load(f)
    with open(os.path.join(td, "tiny", "cases.json"), encoding="utf-8") as f:
        tiny_cases = json.load(f)

    rng = random.Random(20260530)
    qwen_vocab = json.loads(qwen_json)["model"]["vocab"]
    suites = []
    print("qwen3: %d named cases" % len(qwen_cases), flush=True)
    suites.append(run_suite(
        Tokenizer, "qwen3", qwen_json,
        qwen_cases + random_texts(rng, QWEN_ATOMS, 300, 24),
        qwen_decode_lists(qwen_vocab, rng),
        {"tokenizer_file": "qwen3-tokenizer.json.gz",
         "tokenizer_json_sha256": hashlib.sha256(qwen_json.encode("utf-8")).hexdigest()},
    ))
    for name, obj in tiny_variants(os.path.join(td, "tiny")):
        text = json.dumps(obj, ensure_ascii=False)
        cases = tiny_cases + random_texts(rng, TINY_ATOMS, 60, 12)
        ids_pool = list(range(0, 300))
        decode_lists = [{"name": "random_%02d" % i,
                         "ids": [rng.choice(ids_pool) for _ in range(rng.randint(1, 6))]}
                        for i in range(30)]
        suites.append(run_suite(Tokenizer, name, text, cases, decode_lists, {"tokenizer_json": text}))
        s = suites[-1]
        print("%s: %s" % (name, s.get("load_error") or "%d cases" % len(s["cases"])), flush=True)

    # For orientation only (another machine than the Go benchmark's).
    long_text = next((c["text"] for c in qwen_cases if c["name"] == "long_text"), "")
    timing, err = guarded(lambda: time_encode(Tokenizer.from_str(qwen_json), long_text))

    result = {
        "generator": "testdata/gen/gen_tokenizer_ids.py",
        "tokenizers_version": tokenizers.__version__,
        "python_version": platform.python_version(),
        "encode": "Tokenizer.encode(text, add_special_tokens=False)",
        "decode": "Tokenizer.decode(ids, skip_special_tokens=False)",
        "hf_encode_timing": timing if err is None else {"error": err},
        "suites": suites,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    n_err = sum(1 for s in suites for c in s.get("cases", []) if "error" in c)
    print("wrote %s: %d suites, %d case errors, tokenizers %s" % (
        args.out, len(suites), n_err, tokenizers.__version__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
