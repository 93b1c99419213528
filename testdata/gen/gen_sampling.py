#!/usr/bin/env python3
"""Processed scores of transformers' own logits processors, for qwenref's
sampling tests.

Run from the repository root on a machine with transformers 5.17 and torch
(no network and no Go needed):

    python3 testdata/gen/gen_sampling.py testdata/sampling/expected.json

(`--hashed-check testdata/sampling/hashed.json` writes, with Python alone,
the hashed vectors' checks that the Go test rebuilds them by.)

Each case is a generation_config.json dict, a score vector and a token
history (the prompt and what was generated). The processor list is built as
generate builds it: GenerationConfig(**dict), then the model's
_prepare_generation_config (global defaults such as top_k 50) and
_prepare_special_tokens, then _get_logits_processor, on the committed tiny
checkpoint testdata/golden/causal-f32-t70-b2 (loaded from disk). The list
runs on the CPU in float32 on a (1, V) score tensor and (1, L) input_ids.

Score vectors are either listed (small cases, with ties and -inf, null in
the JSON) or made by hashed(): integers from splitmix64, scaled by powers of
two so that every value, peaks added, is exact in float32 and so rebuilt
bit for bit by the Go test. A hashed case whose cumulative probability (or
other threshold quantity) lies within 1e-6 of its threshold is remade with
the next seed, so float rounding cannot decide its kept set.

torch.sort is patched to stable=True while the processors run: the default
CPU sort (x86-simd-sort) orders ties arbitrarily, CUDA's radix sort of a
large vocabulary orders them by index, and so do qwenref and stable=True.
Each case records whether the unpatched CPU sort gave a different answer.

It writes the facts checked by the Go tests too: the library versions, the
processor class names in order, every GenerationConfig attribute, the global
defaults, and whether GenerationConfig knows presence_penalty. Any failure
exits non-zero.
"""
import copy
import inspect
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKPOINT = os.path.join(ROOT, "testdata", "golden", "causal-f32-t70-b2")
M64 = (1 << 64) - 1
INF = float("inf")


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def h(seed, i):
    return splitmix64(((seed & 0xFFFFFFFF) << 32) | (i & 0xFFFFFFFF))


def hashed(spec):
    """The score vector and history of a hashed spec; the Go test has the
    same function (hashedInput)."""
    n, seed, q = spec["vocab"], spec["seed"], spec.get("quant", 0)
    vals = []
    for i in range(n):
        u = (h(seed, i) >> 40) >> q << q  # 24 bits, the low q cleared: ties
        vals.append((u - (1 << 23)) * 2.0**-20)  # [-8, 8), exact
    for j in range(spec.get("peaks", 0)):
        at = h(seed, (1 << 31) + j) % n
        vals[at] += spec["peak"] + j * 0.125  # exact while |v| < 16
    for j in range(spec.get("neg_inf", 0)):
        vals[h(seed, (1 << 31) + 100000 + j) % n] = -INF
    hist = [h(seed, (1 << 31) + 200000 + j) % n for j in range(spec.get("history", 1))]
    return vals, hist


def cases():
    """(name, generation config, spec) for every case."""
    small = lambda v, hist=(0,): {"values": v, "history": list(hist)}
    qwen3 = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    big = lambda n, seed, **kw: dict({"vocab": n, "seed": seed, "peaks": 24, "peak": 5.0, "history": 200}, **kw)
    out = [
        ("small/top-k ties", {"do_sample": True, "top_k": 3}, small([1, 3, 2, 2, 0, None, 3])),
        ("small/top-p equal scores", {"do_sample": True, "top_k": 0, "top_p": 0.5}, small([0] * 8)),
        ("small/top-p 0", {"do_sample": True, "top_k": 0, "top_p": 0.0}, small([5, 1, 5, 2])),
        ("small/top-p crossing", {"do_sample": True, "top_k": 0, "top_p": 0.75}, small([0, 0, 0, 0])),
        ("small/penalty greedy", {"repetition_penalty": 1.3},
         small([4, -4, 4, 0, 2.5, -1, None], hist=(0, 1, 1, 3, 6))),
        ("small/penalty below 1", {"do_sample": True, "repetition_penalty": 0.7, "top_k": 0},
         small([1.5, 2, -1, 0.5], hist=(0, 2))),
        ("small/temperature ties top-k", {"do_sample": True, "temperature": 0.5, "top_k": 1}, small([1, 2, 2])),
        ("small/min-p", {"do_sample": True, "top_k": 0, "min_p": 0.2}, small([0, -1, -2, -3, 1, None])),
        ("small/all -inf but one", {"do_sample": True, "top_k": 5, "top_p": 0.9}, small([None, None, 1.0, None])),
        ("small/presence_penalty", {"do_sample": True, "top_k": 2, "presence_penalty": 1.5, "frequency_penalty": 0.5},
         small([1, 2, 3, 4], hist=(3,))),
        ("small/do_sample false keeps warpers off", {"temperature": 0.5, "top_k": 1, "top_p": 0.1}, small([1, 2, 3])),
        ("qwen3/151936", qwen3, big(151936, 1)),
        ("qwen3/248320", qwen3, big(248320, 2)),
        ("qwen3 ties/151936", qwen3, big(151936, 3, quant=16)),
        ("qwen2.5 penalty/151936", {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.8,
                                    "repetition_penalty": 1.05}, big(151936, 4, history=400)),
        ("default top_k 50/151936", {"do_sample": True}, big(151936, 5)),
        ("top-p only/151936", {"do_sample": True, "temperature": 0.7, "top_k": 0, "top_p": 0.95}, big(151936, 6)),
        ("top-p only ties/151936", {"do_sample": True, "top_k": 0, "top_p": 0.9}, big(151936, 7, quant=14)),
        ("min-p only/151936", {"do_sample": True, "temperature": 0.8, "top_k": 0, "min_p": 0.05}, big(151936, 8)),
        ("typical/5000", {"do_sample": True, "top_k": 0, "typical_p": 0.9}, big(5000, 9, peaks=4)),
        ("epsilon/5000", {"do_sample": True, "top_k": 0, "epsilon_cutoff": 3e-4}, big(5000, 10, peaks=4)),
        ("eta/5000", {"do_sample": True, "top_k": 0, "eta_cutoff": 2e-3}, big(5000, 11, peaks=4)),
        ("top-h/151936", {"do_sample": True, "top_k": 0, "top_h": 0.5}, big(151936, 12)),
        ("small/top-h tiny temperature", {"do_sample": True, "temperature": 0.05, "top_k": 0, "top_h": 0.4},
         small([0, 60])),
        ("every warper/151936", {"do_sample": True, "temperature": 0.9, "top_k": 400, "top_p": 0.97, "min_p": 0.01,
                                 "typical_p": 0.95, "epsilon_cutoff": 1e-4, "eta_cutoff": 1e-4,
                                 "repetition_penalty": 1.2}, big(151936, 13, neg_inf=500)),
        ("greedy penalty/151936", {"do_sample": False, "repetition_penalty": 1.2}, big(151936, 14)),
        ("temperature only/1000", {"do_sample": True, "temperature": 1.7, "top_k": 0}, big(1000, 15, neg_inf=30)),
    ]
    errors = [
        {"do_sample": True, "temperature": 0.0}, {"do_sample": True, "temperature": 2},
        {"do_sample": True, "top_k": -1}, {"do_sample": True, "top_k": 20.0}, {"repetition_penalty": 0.0},
        {"repetition_penalty": 2}, {"do_sample": True, "typical_p": 0.0}, {"do_sample": True, "min_p": 1.5},
        {"do_sample": True, "top_h": 1.5}, {"do_sample": True, "top_p": -0.5},
    ]
    for e in errors:
        out.append(("error/" + json.dumps(e, sort_keys=True), e, small([1, 2, 3])))
    return out


class StableSort:
    def __init__(self, torch):
        self.torch, self.orig = torch, torch.sort

    def __enter__(self):
        orig = self.orig

        def stable(input, *args, **kwargs):
            kwargs["stable"] = True
            return orig(input, *args, **kwargs)

        self.torch.sort = stable

    def __exit__(self, *exc):
        self.torch.sort = self.orig


def build(model, d, ids):
    from transformers import GenerationConfig, LogitsProcessorList

    gc = GenerationConfig(**copy.deepcopy(d))
    out = model._prepare_generation_config(gc)
    gc = out[0] if isinstance(out, tuple) else out
    try:
        model._prepare_special_tokens(gc, True, device="cpu")
    except TypeError:
        model._prepare_special_tokens(gc)
    want = {"generation_config": gc, "input_ids_seq_length": ids.shape[-1], "encoder_input_ids": ids,
            "prefix_allowed_tokens_fn": None, "logits_processor": LogitsProcessorList(), "device": "cpu",
            "model_kwargs": {}}
    params = inspect.signature(model._get_logits_processor).parameters
    return model._get_logits_processor(**{k: v for k, v in want.items() if k in params})


def margin(torch, proc, ids, s):
    """How far the quantity proc thresholds lies from its threshold."""
    name = type(proc).__name__
    p = torch.softmax(s, dim=-1)[0]
    pos = p > 0
    if name == "TopPLogitsWarper":
        srt, _ = torch.sort(s, descending=False, stable=True)
        cum = srt.softmax(dim=-1).cumsum(dim=-1)[0]
        keep = srt[0] > -INF
        return (cum[keep] - (1 - proc.top_p)).abs().min().item()
    if name == "MinPLogitsWarper":
        return ((p[pos] - proc.min_p * p.max()).abs() / p.max()).min().item()
    if name == "EpsilonLogitsWarper":
        return (p[pos] - proc.epsilon).abs().min().item() / proc.epsilon
    if name == "EtaLogitsWarper":
        ent = torch.distributions.Categorical(logits=s).entropy()
        eta = torch.min(proc.epsilon, torch.sqrt(proc.epsilon) * torch.exp(-ent))
        return ((p[pos] - eta).abs() / eta).min().item()
    if name == "TypicalLogitsWarper":
        norm = torch.nn.functional.log_softmax(s, dim=-1)
        ent = -(norm * norm.exp()).nansum(-1, keepdim=True)
        shifted = ((-norm) - ent).abs()
        _, idx = torch.sort(shifted, descending=False, stable=True)
        cum = s.gather(-1, idx).softmax(dim=-1).cumsum(dim=-1)[0]
        return (cum - proc.mass).abs().min().item()
    if name == "TopHLogitsWarper":
        top, _ = torch.topk(s, min(100, s.shape[-1]), dim=-1)
        dist = torch.distributions.Categorical(logits=top)
        tau = dist.entropy().item() * proc.top_h
        pr = dist.probs[0]
        cum = torch.cumsum(-pr * torch.log(pr), dim=-1)
        return (cum[pr > 0] - tau).abs().min().item()
    return INF


def run_case(torch, model, d, vals, hist):
    ids = torch.tensor([hist], dtype=torch.long)
    scores = torch.tensor([vals], dtype=torch.float32)
    if any(float(torch.tensor(v, dtype=torch.float32)) != v for v in vals if v not in (None, -INF)):
        raise RuntimeError("a score is not exact in float32")
    procs = build(model, d, ids)
    s, margins = scores.clone(), []
    with StableSort(torch):
        for p in procs:
            margins.append(margin(torch, p, ids, s))
            s = p(ids, s)
    plain = procs(ids, scores.clone())
    return procs, s[0], min(margins, default=INF), not torch.equal(plain[0], s[0])


def hashed_check(path):
    """Pure-Python values of hashed() for the Go test to rebuild (no torch)."""
    specs = [{"vocab": 1000, "seed": 1, "peaks": 24, "peak": 5.0, "history": 5},
             {"vocab": 151936, "seed": 3, "peaks": 24, "peak": 5.0, "history": 200, "quant": 16, "neg_inf": 500}]
    out = []
    for spec in specs:
        vals, hist = hashed(spec)
        fin = [v for v in vals if v != -INF]
        out.append({"hashed": spec, "first": [None if v == -INF else v for v in vals[:16]], "history": hist,
                    "sum": math.fsum(fin), "neg_inf": len(vals) - len(fin), "max": max(fin)})
    with open(path + ".tmp", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--hashed-check":
        return hashed_check(sys.argv[2])
    if len(sys.argv) != 2:
        sys.exit("usage: gen_sampling.py OUT.json | --hashed-check OUT.json")
    import torch
    import transformers
    from transformers import GenerationConfig
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq

    torch.manual_seed(0)
    model = mq.Qwen3_5ForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32)
    model.eval()
    defaults = getattr(GenerationConfig, "_get_default_generation_params", lambda: {})()
    doc = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "generation_config_attributes": sorted(k for k in vars(GenerationConfig()) if not k.startswith("_")),
        "global_defaults": {k: v for k, v in defaults.items() if isinstance(v, (int, float, bool))},
        "presence_penalty_known": "presence_penalty" in vars(GenerationConfig()),
        "cases": [],
    }
    for name, d, spec in cases():
        case = {"name": name, "config": d}
        for attempt in range(20):
            if "values" in spec:
                vals = [-INF if v is None else float(v) for v in spec["values"]]
                hist = spec["history"]
            else:
                vals, hist = hashed(spec)
            try:
                procs, out, mg, unstable = run_case(torch, model, d, vals, hist)
            except (ValueError, TypeError) as e:
                if not name.startswith("error/"):
                    raise
                case["error"] = f"{type(e).__name__}: {e}"
                break
            if "values" in spec or mg >= 1e-6:
                break
            spec = dict(spec, seed=spec["seed"] + 1000)
        else:
            raise RuntimeError(f"{name}: no seed gave a comfortable margin")
        if "error" not in case:
            kept = [i for i, v in enumerate(out.tolist()) if v > -INF]
            case["input"] = {"values": [None if v == -INF else v for v in vals], "history": hist} \
                if "values" in spec else {"hashed": spec}
            case["processors"] = [type(p).__name__ for p in procs]
            case["processor_attrs"] = [{k: v for k, v in vars(p).items()
                                        if isinstance(v, (int, float, bool)) and math.isfinite(v)} for p in procs]
            case["kept"] = kept if len(kept) < len(vals) else "all"
            at = kept if len(kept) < len(vals) else sorted(set(hist) | set(range(0, len(vals), 1009)))
            case["values_at"] = at
            case["values"] = [None if out[i].item() == -INF else out[i].item() for i in at]
            case["margin"] = mg if mg < INF else None
            case["unstable_cpu_sort_differs"] = unstable
        doc["cases"].append(case)
        print(name, "error" if "error" in case else f"{len(case['processors'])} processors", file=sys.stderr)
    tmp = sys.argv[1] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
        f.write("\n")
    os.replace(tmp, sys.argv[1])


if __name__ == "__main__":
    main()
