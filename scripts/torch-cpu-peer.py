#!/usr/bin/env python3
"""PyTorch's CPU times for the ops `qwenref bench` times, for a side-by-side
comparison in one session (docs/perf.md, "bf16 compute on the CPU").

    python3 scripts/torch-cpu-peer.py --threads 16

Needs torch and transformers 5.x (its Qwen3.5 classes); no GPU, no network.
Every op runs in bf16 on the CPU, the model built from a config with the
library's own random initialisation (values do not change the time):

  gemm           x[T, H] @ W[C, H]^T, the GDN qkv projection (T = 2048 on
                 the 27B: 2048 x 5120 x 10240), torch.nn.functional.linear
  decoder-layer  a one-layer Qwen3_5ForCausalLM's decoder (linear_attention:
                 norm, Gated DeltaNet, residual, norm, SwiGLU MLP, residual,
                 then the final norm) at the 27B width, T = 512
  gdn-layer      that layer's Gated DeltaNet module alone, T = 2048
  model          the whole 0.8B shape (24 layers, 3:1), input ids of length
                 512, logits of the last token only (logits_to_keep=1)

qwenref's shapes are those of `qwenref synth --shape 27b` / `--shape 0.8b`
(model/shapes.go). Where flash-linear-attention and causal-conv1d are absent
(always on a CPU), transformers runs its PyTorch fallbacks: that is the
path measured, and the script prints which one each function took.

Each op: one warm-up call, then the median of --reps calls (wall clock,
time.perf_counter, under torch.inference_mode). Prints a Markdown table and
one JSON line per op; exits non-zero if any op failed.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def text_config(h, layers, nh, nkv, dh, nk, nv, dk, dv, inter, vocab, tied, layer_types=None):
    cfg = dict(
        hidden_size=h, num_hidden_layers=layers, num_attention_heads=nh, num_key_value_heads=nkv,
        head_dim=dh, linear_num_key_heads=nk, linear_num_value_heads=nv, linear_key_head_dim=dk,
        linear_value_head_dim=dv, linear_conv_kernel_dim=4, intermediate_size=inter, vocab_size=vocab,
        rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=262144, tie_word_embeddings=tied,
        attention_bias=False, attention_dropout=0.0, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
    )
    if layer_types is None:
        layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
    cfg["layer_types"] = layer_types
    return cfg


# model/shapes.go: 27b and 0.8b (the vocabulary of the one-layer model is
# small: its embeddings are not timed).
SHAPES = {
    "27b-layer": lambda: text_config(5120, 1, 24, 4, 256, 16, 48, 128, 128, 17408, 256, False,
                                     layer_types=["linear_attention"]),
    "0.8b": lambda: text_config(1024, 24, 8, 2, 256, 16, 16, 128, 128, 3584, 248320, True),
}


def build(torch, mq, Qwen3_5TextConfig, shape):
    config = Qwen3_5TextConfig(**SHAPES[shape]())
    config.use_cache = False
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = mq.Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(old)
    return model.to(torch.bfloat16).eval()


def timed(torch, fn, reps):
    with torch.inference_mode():
        fn()  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads (default: all CPUs)")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per op after one warm-up (default 3)")
    ap.add_argument("--ops", default="gemm,decoder-layer,gdn-layer,model",
                    help="comma-separated: gemm, decoder-layer, gdn-layer, model")
    args = ap.parse_args()
    if args.threads < 1 or args.reps < 1:
        sys.exit("torch-cpu-peer: --threads and --reps must be at least 1")
    ops = [o for o in args.ops.split(",") if o]
    known = {"gemm", "decoder-layer", "gdn-layer", "model"}
    if not ops or set(ops) - known:
        sys.exit("torch-cpu-peer: --ops takes " + ", ".join(sorted(known)) + f", got {args.ops!r}")

    import torch
    import transformers
    from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, transformers {transformers.__version__}, python {platform.python_version()}")
    print(f"# CPU: {cpu_model()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
          f"mkldnn bf16: {torch.backends.mkldnn.is_available()}, load average {os.getloadavg()[0]:.2f}")
    rows, failed = [], False

    def record(op, shape, seq, fn, flop=None, note=""):
        nonlocal failed
        try:
            med, times = timed(torch, fn, args.reps)
        except Exception as e:  # report and go on: one op's failure must not hide the others
            failed = True
            print(f"# {op}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            return
        row = {"op": op, "shape": shape, "T": seq, "median_s": med, "times_s": times, "threads": args.threads,
               "torch": torch.__version__, "transformers": transformers.__version__, "note": note}
        if flop:
            row["gflops"] = flop / med / 1e9
        rows.append(row)
        print(json.dumps(row), flush=True)

    if "gemm" in ops:
        t, h, c = 2048, 5120, 2 * 16 * 128 + 48 * 128
        x = torch.randn(t, h, dtype=torch.bfloat16)
        w = torch.randn(c, h, dtype=torch.bfloat16) * 0.02
        record("gemm", "27b", t, lambda: torch.nn.functional.linear(x, w), flop=2.0 * t * h * c,
               note=f"{t}x{h}x{c} bf16 x @ w.T")
        del x, w

    if "decoder-layer" in ops or "gdn-layer" in ops:
        m = build(torch, mq, Qwen3_5TextConfig, "27b-layer")
        gdn = m.model.layers[0].linear_attn
        found = {n: importlib.util.find_spec(n) is not None for n in ("fla", "causal_conv1d")}
        print("# fla " + ("installed" if found["fla"] else "absent") + ", causal_conv1d " +
              ("installed" if found["causal_conv1d"] else "absent") +
              ": transformers' kernels need CUDA, so on the CPU it runs its PyTorch fallbacks")
        if "decoder-layer" in ops:
            x = torch.randn(1, 512, 5120, dtype=torch.bfloat16)
            record("decoder-layer", "27b", 512, lambda: m.model(inputs_embeds=x, use_cache=False),
                   note="Qwen3_5ForCausalLM.model, one linear_attention layer (+ final norm)")
        if "gdn-layer" in ops:
            x = torch.randn(1, 2048, 5120, dtype=torch.bfloat16)
            record("gdn-layer", "27b", 2048, lambda: gdn(hidden_states=x), note="Qwen3_5GatedDeltaNet")
        del m, gdn

    if "model" in ops:
        m = build(torch, mq, Qwen3_5TextConfig, "0.8b")
        ids = torch.randint(0, 248320, (1, 512))
        record("model", "0.8b", 512, lambda: m(input_ids=ids, use_cache=False, logits_to_keep=1),
               note="Qwen3_5ForCausalLM, 24 layers, last-token logits")
        del m

    print()
    print(f"| op | shape | T | PyTorch {torch.__version__} bf16, {args.threads} threads (median of {args.reps}) |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        rate = f" ({r['gflops']:,.0f} GFLOP/s)" if "gflops" in r else ""
        print(f"| {r['op']} | {r['shape']} | {r['T']} | {r['median_s'] * 1e3:,.1f} ms{rate} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
