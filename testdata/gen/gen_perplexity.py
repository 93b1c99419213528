#!/usr/bin/env python3
"""Per-token negative log-likelihoods of the golden checkpoints, windowed as
transformers' perplexity guide does, for qwenref's perplexity tests.

Run from the repository root on a machine with transformers 5.17 and torch
(no network and no Go needed):

    python3 testdata/gen/gen_perplexity.py OUT_DIR

For each case in testdata/golden (the committed checkpoints and their ids in
inputs.json) and each (ctx, stride) below, every row is scored with windows
of at most ctx tokens starting at 0, stride, 2*stride, ... until a window
reaches the end (the guide's loop). A window scores only the tokens after
the previous window's end (the first window scores from token 1), and only
tokens with at least one earlier token inside the window; token j is scored
by log_softmax(logits[j-1-begin])[ids[j]] in float64 from a float32 eager
forward of the window alone on the CPU with TF32 off. It writes
OUT_DIR/expected.json. Any failure exits non-zero.
"""
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = ["causal-f32-t70-b2", "hub-bf16-sharded", "causal-f16-t130"]


def windows(t, ctx, stride):
    """(begin, end, first scored token) of each window, as the guide loops."""
    if ctx < 2 or stride < 1 or stride > ctx:
        raise ValueError(f"bad ctx={ctx} stride={stride}")
    out, prev_end = [], 0
    for begin in range(0, t, stride):
        end = min(begin + ctx, t)
        out.append((begin, end, max(prev_end, begin + 1)))
        prev_end = end
        if end == t:
            break
    return out


def settings(t):
    s = [(t, t)]
    for ctx in (t // 2, t // 3):
        for stride in (ctx, ctx // 2, 7):
            if 2 <= stride <= ctx and (ctx, stride) not in s:
                s.append((ctx, stride))
    return s


def load(d):
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    with open(os.path.join(d, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    cls = getattr(mq, arch)
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def score(model, ids, ctx, stride):
    import torch

    nll = [None] * len(ids)
    for begin, end, first in windows(len(ids), ctx, stride):
        x = torch.tensor([ids[begin:end]])
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, dim=-1)
        for j in range(first, end):
            if nll[j] is not None:
                raise RuntimeError(f"token {j} scored twice")
            nll[j] = -lp[j - 1 - begin, ids[j]].item()
    return nll


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_perplexity.py OUT_DIR")
    out_dir = sys.argv[1]
    import torch
    import transformers

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    results = []
    for name in CASES:
        d = os.path.join(ROOT, "testdata", "golden", name)
        with open(os.path.join(d, "inputs.json")) as f:
            rows = json.load(f)["ids"]
        model = load(d)
        for r, ids in enumerate(rows):
            for ctx, stride in settings(len(ids)):
                nll = score(model, ids, ctx, stride)
                got = [v for v in nll if v is not None]
                total = math.fsum(got)
                ppl = math.exp(total / len(got))
                results.append({"case": name, "row": r, "ctx": ctx, "stride": stride,
                                "nll": nll, "scored": len(got), "nll_sum": total, "perplexity": ppl})
                print(f"{name} row {r} ctx {ctx} stride {stride}: {len(got)} tokens, ppl {ppl:.6f}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "expected.json")
    with open(path, "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__,
                   "python": sys.version.split()[0],
                   "precision": "float32 eager forward per window on the CPU, TF32 off; log_softmax in float64",
                   "windows": "begin = 0, stride, 2*stride, ...; end = min(begin+ctx, T); stop after end == T; "
                              "score tokens j in [max(prev_end, begin+1), end) with logits[j-1-begin]",
                   "results": results}, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({len(results)} results)")


if __name__ == "__main__":
    main()
