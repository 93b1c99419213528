#!/usr/bin/env python3
"""Write qwenref's golden cases: tiny random Qwen3.5 checkpoints, their inputs,
and what transformers computes from them.

Run on a machine with transformers 5.17 and torch (the project's GPU machine):

    python3 testdata/gen/gen_goldens.py --out /tmp/golden

Every parameter is randomised (norms and gates included) so that no stage is
an identity. Expected outputs are computed in float32, eager attention, TF32
off, on the CPU, from the weights exactly as saved (bf16/f16 checkpoints are
widened on load, which is exact). Per-layer intermediates are captured with
forward hooks and by wrapping the module-level functions that the layer code
calls (the conv, the core rule, RoPE and the eager attention); each wrapper
asserts it ran, so a transformers refactor fails loudly instead of writing
silent garbage.
"""
import argparse
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F

import transformers
from safetensors.torch import load_file, save_file
from transformers.models.qwen3_5 import modeling_qwen3_5 as mq
from transformers.models.qwen3_5.configuration_qwen3_5 import (
    Qwen3_5Config,
    Qwen3_5TextConfig,
)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")


# ---------------------------------------------------------------- cases ----

def text_cfg(**kw):
    base = dict(
        hidden_act="silu",
        rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        attention_bias=False,
        attention_dropout=0.0,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    base.update(kw)
    return base


def rope(theta, partial, section):
    return {
        "rope_type": "default",
        "rope_theta": theta,
        "partial_rotary_factor": partial,
        "mrope_section": section,
        "mrope_interleaved": True,
    }


CASES = [
    # Flat Qwen3_5ForCausalLM, float32 single file, B=2, T=70 (crosses the
    # 64-token chunk), d_k != d_v, value/key head ratio 2, tied embeddings.
    dict(
        name="causal-f32-t70-b2",
        kind="causal",
        dtype=torch.float32,
        batch=2,
        seq=70,
        gen_new=8,
        cfg=text_cfg(
            vocab_size=160,
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=4,
            layer_types=["linear_attention"] * 3 + ["full_attention"],
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=24,
            linear_conv_kernel_dim=4,
            tie_word_embeddings=True,
            rope_parameters=rope(1e7, 0.25, [2, 1, 1]),
        ),
    ),
    # The hub layout: Qwen3_5ForConditionalGeneration saved by transformers in
    # bf16, two shards with an index, a vision tower and injected mtp.* tensors
    # that a text loader must skip; 8 layers from full_attention_interval=4,
    # GQA 4, value/key ratio 3 (as in the 27B), untied head.
    dict(
        name="hub-bf16-sharded",
        kind="vlm",
        dtype=torch.bfloat16,
        batch=1,
        seq=37,
        gen_new=10,
        cfg=text_cfg(
            vocab_size=200,
            hidden_size=96,
            intermediate_size=128,
            num_hidden_layers=8,
            full_attention_interval=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=6,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            linear_conv_kernel_dim=4,
            tie_word_embeddings=False,
            rope_parameters=rope(1e7, 0.25, [2, 1, 1]),
        ),
        eos=[3, 7],
    ),
    # float16 weights, T=130 (three chunks, ragged), attention first so that a
    # full layer feeds GDN layers; rotary on half the head dim.
    dict(
        name="causal-f16-t130",
        kind="causal",
        dtype=torch.float16,
        batch=1,
        seq=130,
        gen_new=0,
        cfg=text_cfg(
            vocab_size=96,
            hidden_size=48,
            intermediate_size=80,
            num_hidden_layers=4,
            layer_types=["full_attention", "linear_attention", "linear_attention", "full_attention"],
            num_attention_heads=2,
            num_key_value_heads=2,
            head_dim=16,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            tie_word_embeddings=False,
            rope_parameters=rope(1e6, 0.5, [2, 1, 1]),
        ),
    ),
    # The head dims of every released Qwen3.5/3.6 size (GDN 128/128,
    # attention 256, rotary 64), which the device-resident CUDA model needs;
    # bf16 as hub checkpoints are, T=80 (crosses the 64-token chunk), one
    # layer of each kind to keep the checkpoint small.
    dict(
        name="device-d128",
        kind="causal",
        dtype=torch.bfloat16,
        batch=1,
        seq=80,
        gen_new=8,
        cfg=text_cfg(
            vocab_size=256,
            hidden_size=256,
            intermediate_size=256,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=256,
            linear_num_key_heads=1,
            linear_num_value_heads=2,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_conv_kernel_dim=4,
            tie_word_embeddings=False,
            rope_parameters=rope(1e7, 0.25, [11, 11, 10]),
        ),
    ),
]


# ------------------------------------------------------- randomisation ----

def randomise(model, gen):
    """Overwrite every parameter with non-trivial random values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("A_log"):
                v = torch.empty(shape).uniform_(0.05, 8.0, generator=gen).log()
            elif name.endswith("dt_bias"):
                v = torch.empty(shape).uniform_(-1.0, 1.0, generator=gen)
            elif name.endswith("linear_attn.norm.weight"):
                v = torch.empty(shape).uniform_(0.5, 1.5, generator=gen)  # plain scale
            elif "norm" in name and p.dim() == 1:
                v = torch.empty(shape).uniform_(-0.5, 0.5, generator=gen)  # (1+w) scale
            elif "conv1d" in name and "visual" not in name:
                v = torch.randn(shape, generator=gen) * 0.5
            elif "embed_tokens" in name:
                v = torch.randn(shape, generator=gen)
            elif p.dim() >= 2:
                fan_in = math.prod(shape[1:])
                v = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
            else:
                v = torch.randn(shape, generator=gen) * 0.1
            p.copy_(v.to(p.dtype))


# ------------------------------------------------------------ capture ----

class Capture:
    """Records named float32 tensors; layer index comes from the module."""

    def __init__(self):
        self.t = {}
        self.calls = {}

    def put(self, name, x):
        if name in self.t:
            raise RuntimeError(f"stage {name} recorded twice")
        self.t[name] = x.detach().to(torch.float32).cpu().clone().contiguous()

    def hit(self, what):
        self.calls[what] = self.calls.get(what, 0) + 1


def install(model, cap):
    """Hooks on modules and wrappers around the module-level functions."""
    layers = [m for m in model.modules() if isinstance(m, mq.Qwen3_5DecoderLayer)]
    handles = []
    state = {"layer": None}
    nk = {}

    def pre_layer(idx):
        def f(mod, args, kwargs):
            state["layer"] = idx
            hs = kwargs.get("hidden_states", args[0] if args else None)
            cap.put(f"layers.{idx}.input", hs)
        return f

    def post(name):
        def f(mod, args, out):
            out = out[0] if isinstance(out, tuple) else out
            cap.put(f"layers.{state['layer']}.{name}", out)
        return f

    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(pre_layer(i), with_kwargs=True))
        handles.append(layer.register_forward_hook(post("output")))
        handles.append(layer.input_layernorm.register_forward_hook(post("mixer_in")))
        handles.append(layer.post_attention_layernorm.register_forward_hook(post("mlp_in")))
        handles.append(layer.mlp.register_forward_hook(post("mlp_out")))
        if layer.block_type == "linear_attention":
            la = layer.linear_attn
            nk[i] = (la.num_k_heads, la.num_v_heads)
            handles.append(la.in_proj_qkv.register_forward_hook(post("qkv_proj")))
            handles.append(la.in_proj_z.register_forward_hook(post("z_proj")))
            handles.append(la.in_proj_b.register_forward_hook(post("b_proj")))
            handles.append(la.in_proj_a.register_forward_hook(post("a_proj")))
            handles.append(la.norm.register_forward_hook(post("gated_norm_out")))
            handles.append(la.register_forward_hook(post("mixer_out")))
        else:
            sa = layer.self_attn
            handles.append(sa.q_proj.register_forward_hook(post("q_proj")))
            handles.append(sa.k_proj.register_forward_hook(post("k_proj")))
            handles.append(sa.v_proj.register_forward_hook(post("v_proj")))

            def o_in(mod, args):
                cap.put(f"layers.{state['layer']}.gated", args[0])
            handles.append(sa.o_proj.register_forward_pre_hook(o_in))
            handles.append(sa.register_forward_hook(post("mixer_out")))

    orig = {}

    patched = []

    def wrap(name, fn):
        # The layer code may reach the function as a module global, a class
        # attribute or an instance attribute (hub-kernel plumbing): patch all.
        old = getattr(mq, name)
        orig[name] = old
        setattr(mq, name, fn)
        for obj in [mq.Qwen3_5GatedDeltaNet, mq.Qwen3_5Attention, *model.modules()]:
            for attr, val in list(vars(obj).items()):
                inner = val.__func__ if isinstance(val, staticmethod) else val
                if inner is old:
                    patched.append((obj, attr, val))
                    setattr(obj, attr, staticmethod(fn) if isinstance(obj, type) else fn)

    o_core = mq.torch_chunk_gated_delta_rule

    def core(query, key, value, g, beta, initial_state=None, output_final_state=False, **kw):
        cap.hit("core")
        i = state["layer"]
        b, t = query.shape[:2]
        # transformers 5.17 repeat_interleaves q/k to the value heads before the
        # core (modeling_qwen3_5.py:620-622); undo it, after checking that the
        # copies really are copies, to record the per-key-head conv output.
        n_k, n_v = nk[i]
        if query.shape[2] == n_v and n_v != n_k:
            r = n_v // n_k
            q0, k0 = query[:, :, ::r], key[:, :, ::r]
            if not (torch.equal(q0.repeat_interleave(r, 2), query) and torch.equal(k0.repeat_interleave(r, 2), key)):
                raise RuntimeError(f"layer {i}: q/k heads are not a repeat_interleave of the key heads")
            q_raw, k_raw = q0, k0
        elif query.shape[2] == n_k:
            q_raw, k_raw = query, key
        else:
            raise RuntimeError(f"layer {i}: core got {query.shape[2]} q heads; key heads {n_k}, value heads {n_v}")
        cap.put(f"layers.{i}.conv_out", torch.cat([q_raw.reshape(b, t, -1), k_raw.reshape(b, t, -1), value.reshape(b, t, -1)], -1))
        # q and k as the core sees them after its own L2 norm (transformers' l2norm, eps on the sum), unscaled.
        cap.put(f"layers.{i}.q_l2", mq.l2norm(q_raw.float(), dim=-1, eps=1e-6))
        cap.put(f"layers.{i}.k_l2", mq.l2norm(k_raw.float(), dim=-1, eps=1e-6))
        cap.put(f"layers.{i}.v", value)
        cap.put(f"layers.{i}.g", g)
        cap.put(f"layers.{i}.beta", beta)
        out, st = o_core(query, key, value, g=g, beta=beta, initial_state=initial_state,
                         output_final_state=True, **kw)
        cap.put(f"layers.{i}.core_out", out)
        cap.put(f"layers.{i}.final_state", st)
        return out, (st if output_final_state else None)
    wrap("torch_chunk_gated_delta_rule", core)

    o_rope = mq.apply_rotary_pos_emb

    def rope_fn(q, k, cos, sin, *a, **kw):
        cap.hit("rope")
        qe, ke = o_rope(q, k, cos, sin, *a, **kw)
        i = state["layer"]
        cap.put(f"layers.{i}.q_rope", qe.transpose(1, 2))  # -> [B, T, nh, dh]
        cap.put(f"layers.{i}.k_rope", ke.transpose(1, 2))
        return qe, ke
    wrap("apply_rotary_pos_emb", rope_fn)

    o_attn = mq.eager_attention_forward

    def attn(module, q, k, v, mask, *a, **kw):
        cap.hit("attn")
        out, w = o_attn(module, q, k, v, mask, *a, **kw)
        cap.put(f"layers.{state['layer']}.attn_core", out)  # [B, T, nh, dh], before the gate
        return out, w
    wrap("eager_attention_forward", attn)

    def undo():
        for h in handles:
            h.remove()
        for k, v in orig.items():
            setattr(mq, k, v)
        for obj, attr, val in patched:
            setattr(obj, attr, val)
    return undo, layers


# --------------------------------------------------------------- build ----

def vision_cfg(out_hidden):
    return dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=2,
                temporal_patch_size=2, spatial_merge_size=2, in_channels=3,
                out_hidden_size=out_hidden, num_position_embeddings=16)


def build(case, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = dict(case["cfg"])
    if case["kind"] == "causal":
        config = Qwen3_5TextConfig(**cfg)
        config._attn_implementation = "eager"
        model = mq.Qwen3_5ForCausalLM(config)
    else:
        tie = cfg.pop("tie_word_embeddings")
        config = Qwen3_5Config(text_config=cfg, vision_config=vision_cfg(cfg["hidden_size"]),
                               tie_word_embeddings=tie)
        config._attn_implementation = "eager"
        model = mq.Qwen3_5ForConditionalGeneration(config)
    model.eval()
    randomise(model, gen)
    return model, gen


def inject_mtp(d, hidden, gen):
    """Add mtp.* tensors to the last shard, as hub checkpoints carry them."""
    idx_path = os.path.join(d, "model.safetensors.index.json")
    with open(idx_path) as f:
        idx = json.load(f)
    shard = sorted(set(idx["weight_map"].values()))[-1]
    path = os.path.join(d, shard)
    tensors = load_file(path)
    extra = {
        "mtp.fc.weight": torch.randn(hidden, 2 * hidden, generator=gen),
        "mtp.norm.weight": torch.randn(hidden, generator=gen),
        "mtp.pre_fc_norm_embedding.weight": torch.randn(hidden, generator=gen),
        "mtp.pre_fc_norm_hidden.weight": torch.randn(hidden, generator=gen),
        "mtp.layers.0.mlp.up_proj.weight": torch.randn(8, hidden, generator=gen),
    }
    for k, v in extra.items():
        tensors[k] = v.to(torch.bfloat16)
        idx["weight_map"][k] = shard
    save_file(tensors, path, metadata={"format": "pt"})
    with open(idx_path, "w") as f:
        json.dump(idx, f, indent=2, sort_keys=True)


def save_checkpoint(model, case, d, gen):
    if case["kind"] == "causal":
        model.to(case["dtype"]).save_pretrained(d, safe_serialization=True)
        return
    nbytes = sum(p.numel() for p in model.parameters()) * 2
    model.to(case["dtype"]).save_pretrained(d, safe_serialization=True, max_shard_size=int(nbytes * 0.6))
    shards = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    if len(shards) != 2:
        raise RuntimeError(f"expected 2 shards, got {shards}")
    inject_mtp(d, case["cfg"]["hidden_size"], gen)
    if case.get("eos"):
        gc_path = os.path.join(d, "generation_config.json")
        gc = json.load(open(gc_path)) if os.path.exists(gc_path) else {}
        gc["eos_token_id"] = case["eos"]
        json.dump(gc, open(gc_path, "w"), indent=2)


def reload(case, d):
    cls = mq.Qwen3_5ForCausalLM if case["kind"] == "causal" else mq.Qwen3_5ForConditionalGeneration
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def run_case(case, root, seed):
    d = os.path.join(root, case["name"])
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    model, gen = build(case, seed)
    save_checkpoint(model, case, d, gen)
    model = reload(case, d)

    vocab = case["cfg"]["vocab_size"]
    ids = torch.randint(0, vocab, (case["batch"], case["seq"]), generator=gen)
    cap = Capture()
    undo, layers = install(model, cap)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    undo()
    n_lin = sum(1 for l in layers if l.block_type == "linear_attention")
    n_full = len(layers) - n_lin
    if cap.calls.get("core", 0) != n_lin or cap.calls.get("rope", 0) != n_full or cap.calls.get("attn", 0) != n_full:
        raise RuntimeError(f"wrappers not called as expected: {cap.calls}, lin={n_lin} full={n_full}")
    cap.put("logits", out.logits)

    # The final norm's output, recomputed by transformers' own module from the
    # last layer's output, so a divergence before the head is located.
    text = model.model.language_model if case["kind"] == "vlm" else model.model
    with torch.no_grad():
        cap.put("final_norm", text.norm(cap.t[f"layers.{len(layers) - 1}.output"]))
        cap.put("embeddings", text.embed_tokens(ids))

    save_file(cap.t, os.path.join(d, "expected.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__})
    meta = {"ids": ids.tolist()}
    if case["gen_new"]:
        with torch.no_grad():
            g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                               max_new_tokens=case["gen_new"], do_sample=False, use_cache=True)
        meta["generate"] = {"max_new_tokens": case["gen_new"], "greedy": True,
                            "new_ids": g[:, ids.shape[1]:].tolist()}
    with open(os.path.join(d, "inputs.json"), "w") as f:
        json.dump(meta, f)
    print(f"{case['name']}: {len(cap.t)} tensors, logits {tuple(out.logits.shape)} "
          f"|logits|max {out.logits.abs().max().item():.3f}, calls {cap.calls}")
    return {"name": case["name"], "kind": case["kind"], "dtype": str(case["dtype"]).replace("torch.", ""),
            "batch": case["batch"], "seq": case["seq"], "layers": len(layers), "stages": sorted(cap.t)}


def write_bf16(case_dir, kind):
    """transformers in bf16 on the same checkpoint and ids: the logits a
    bf16 run gets (expected_bf16.safetensors), beside the fp32 goldens,
    which this does not touch. It bounds what a bf16 backend may be off."""
    cls = mq.Qwen3_5ForCausalLM if kind == "causal" else mq.Qwen3_5ForConditionalGeneration
    m = cls.from_pretrained(case_dir, dtype=torch.bfloat16, attn_implementation="eager")
    m.eval()
    with open(os.path.join(case_dir, "inputs.json")) as f:
        ids = torch.tensor(json.load(f)["ids"])
    with torch.no_grad():
        logits = m(input_ids=ids, use_cache=False).logits.float()
    save_file({"logits": logits.contiguous()}, os.path.join(case_dir, "expected_bf16.safetensors"),
              metadata={"transformers": transformers.__version__, "torch": torch.__version__,
                        "precision": "bfloat16 weights and activations, eager, CPU"})
    print(f"{os.path.basename(case_dir)}: bf16 logits {tuple(logits.shape)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write the cases into")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--dump-source", help="also copy transformers' modeling_qwen3_5.py here (for reading)")
    ap.add_argument("--only", help="comma-separated case names: write only these cases and merge them into "
                    "the existing manifest.json in --out (the other cases' files are left alone)")
    ap.add_argument("--bf16", action="store_true", help="also write expected_bf16.safetensors (transformers "
                    "in bf16) for every case written, or, with --bf16-only, for the cases already in --out")
    ap.add_argument("--bf16-only", action="store_true", help="write only the bf16 logits of existing cases")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.dump_source:
        shutil.copy(mq.__file__, a.dump_source)
    only = set(a.only.split(",")) if a.only else None
    man_path = os.path.join(a.out, "manifest.json")
    if only or a.bf16_only:
        with open(man_path) as f:
            manifest = json.load(f)
    else:
        manifest = {"transformers": transformers.__version__, "torch": torch.__version__,
                    "python": sys.version.split()[0], "seed": a.seed,
                    "precision": "float32 eager on CPU, TF32 off", "cases": []}
    for i, case in enumerate(CASES):
        if a.bf16_only:
            if only is None or case["name"] in only:
                write_bf16(os.path.join(a.out, case["name"]), case["kind"])
            continue
        if only is not None and case["name"] not in only:
            continue
        entry = run_case(case, a.out, a.seed + i)
        manifest["cases"] = [c for c in manifest["cases"] if c["name"] != case["name"]] + [entry]
        if a.bf16:
            write_bf16(os.path.join(a.out, case["name"]), case["kind"])
    if not a.bf16_only:
        with open(man_path, "w") as f:
            json.dump(manifest, f, indent=2)


if __name__ == "__main__":
    main()
