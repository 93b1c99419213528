#!/usr/bin/env python3
"""Write qwenref's golden cases: tiny random Qwen3.5 checkpoints, their inputs,
and what transformers computes from them.

Run on a machine with transformers 5.17 and torch (the project's GPU machine):

    python3 testdata/gen/gen_goldens.py --out /tmp/golden
    python3 testdata/gen/gen_goldens.py --moe --out /tmp/golden-moe   # MoE and Qwen3-Next cases only

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


def next_rope(theta, partial):
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial}


# Written with --moe into their own directory (testdata/golden/moe), with
# their own manifest, so the dense cases above and their files stay as
# they are.
MOE_CASES = [
    # Qwen3_5MoeForCausalLM (flat), f32, B=2, T=70: 8 experts, top-2, every
    # layer sparse (qwen3_5_moe has no dense layers), the shared expert and
    # its gate; layer 0's router scores experts 2 and 5 identically, so the
    # golden shows how torch.topk breaks the tie.
    dict(
        name="moe-f32-t70-b2",
        family="qwen3_5_moe",
        kind="causal",
        dtype=torch.float32,
        batch=2,
        seq=70,
        gen_new=8,
        tie_router=(0, 2, 5),
        cfg=text_cfg(
            vocab_size=160,
            hidden_size=64,
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
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=48,
            tie_word_embeddings=True,
            rope_parameters=rope(1e7, 0.25, [2, 1, 1]),
        ),
    ),
    # The 35B-A3B's own layout: Qwen3_5MoeForConditionalGeneration in bf16,
    # two shards with an index, a vision tower and mtp.* tensors to skip;
    # 16 experts, top-4, value/key heads 3 (6/2), untied head.
    dict(
        name="moe-hub-bf16",
        family="qwen3_5_moe",
        kind="vlm",
        dtype=torch.bfloat16,
        batch=1,
        seq=37,
        gen_new=10,
        cfg=text_cfg(
            vocab_size=200,
            hidden_size=96,
            num_hidden_layers=4,
            full_attention_interval=4,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=32,
            linear_num_key_heads=2,
            linear_num_value_heads=6,
            linear_key_head_dim=32,
            linear_value_head_dim=32,
            linear_conv_kernel_dim=4,
            num_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=48,
            shared_expert_intermediate_size=64,
            tie_word_embeddings=False,
            rope_parameters=rope(1e7, 0.25, [2, 1, 1]),
        ),
        eos=[3, 7],
    ),
    # Qwen3NextForCausalLM, f32: the fused in_proj_qkvz / in_proj_ba with two
    # value heads per key head, layer 1 dense through mlp_only_layers, top-3
    # of 8 without renormalisation (norm_topk_prob false).
    dict(
        name="next-f32-t70",
        family="qwen3_next",
        kind="causal",
        dtype=torch.float32,
        batch=1,
        seq=70,
        gen_new=8,
        cfg=text_cfg(
            vocab_size=128,
            hidden_size=64,
            intermediate_size=80,
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
            num_experts=8,
            num_experts_per_tok=3,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            moe_intermediate_size=32,
            shared_expert_intermediate_size=40,
            tie_word_embeddings=False,
            rope_parameters=next_rope(1e7, 0.25),
        ),
    ),
    # Qwen3-Next in bf16 with decoder_sparse_step 2 (layers 1 and 3 sparse),
    # three value heads per key head, attention interleaved, rotary on half
    # the head dim, renormalised top-2 of 6.
    dict(
        name="next-bf16-step2",
        family="qwen3_next",
        kind="causal",
        dtype=torch.bfloat16,
        batch=1,
        seq=40,
        gen_new=6,
        cfg=text_cfg(
            vocab_size=96,
            hidden_size=48,
            intermediate_size=64,
            num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            linear_num_key_heads=1,
            linear_num_value_heads=3,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            num_experts=6,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            decoder_sparse_step=2,
            moe_intermediate_size=24,
            shared_expert_intermediate_size=32,
            tie_word_embeddings=False,
            rope_parameters=next_rope(1e6, 0.5),
        ),
    ),
    # The head dims of every released size (GDN 128/128, attention 256,
    # rotary 64), which the device-resident CUDA model needs, in both sparse
    # families, bf16 as hub checkpoints are, T=80 (crosses the 64-token
    # chunk); written with --bf16 so a bf16 backend has transformers' own
    # bf16 logits to be held to. qwen3_5_moe: every layer sparse, top-2 of 8
    # renormalised.
    dict(
        name="moe-d128",
        family="qwen3_5_moe",
        kind="causal",
        dtype=torch.bfloat16,
        batch=1,
        seq=80,
        gen_new=8,
        cfg=text_cfg(
            vocab_size=256,
            hidden_size=256,
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
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=128,
            tie_word_embeddings=False,
            rope_parameters=rope(1e7, 0.25, [11, 11, 10]),
        ),
    ),
    # Qwen3-Next at the same head dims: the fused in_proj_qkvz / in_proj_ba
    # with two value heads per key head, layer 1 dense (mlp_only_layers),
    # top-3 of 8 without renormalisation.
    dict(
        name="next-d128",
        family="qwen3_next",
        kind="causal",
        dtype=torch.bfloat16,
        batch=1,
        seq=80,
        gen_new=8,
        cfg=text_cfg(
            vocab_size=256,
            hidden_size=256,
            intermediate_size=192,
            num_hidden_layers=3,
            layer_types=["linear_attention", "linear_attention", "full_attention"],
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=256,
            linear_num_key_heads=1,
            linear_num_value_heads=2,
            linear_key_head_dim=128,
            linear_value_head_dim=128,
            linear_conv_kernel_dim=4,
            num_experts=8,
            num_experts_per_tok=3,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
            moe_intermediate_size=64,
            shared_expert_intermediate_size=96,
            tie_word_embeddings=False,
            rope_parameters=next_rope(1e7, 0.25),
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
            elif "mlp.experts." in name and p.dim() == 3:
                # fused experts [E, out, in]: each expert is an nn.Linear of fan-in `in`
                v = torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
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


def install(model, cap, fam=None):
    """Hooks on modules and wrappers around the module-level functions.

    fam (MoE and Qwen3-Next cases) names the modeling module and classes;
    None is the dense Qwen3.5 family, whose behaviour this keeps as it was.
    """
    fam = fam or DENSE
    mod = fam["module"]()
    layers = [m for m in model.modules() if isinstance(m, getattr(mod, fam["layer"]))]
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
        if hasattr(layer.mlp, "experts"):
            handles += install_moe(layer.mlp, cap, state)
        if layer_kind(layer) == "linear_attention":
            la = layer.linear_attn
            nk[i] = (la.num_k_heads, la.num_v_heads)
            if hasattr(la, "in_proj_qkvz"):
                handles += install_fused_projections(la, cap, state)
            else:
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
        old = getattr(mod, name)
        orig[name] = old
        setattr(mod, name, fn)
        for obj in [getattr(mod, fam["gdn"]), getattr(mod, fam["attn"]), *model.modules()]:
            for attr, val in list(vars(obj).items()):
                inner = val.__func__ if isinstance(val, staticmethod) else val
                if inner is old:
                    patched.append((obj, attr, val))
                    setattr(obj, attr, staticmethod(fn) if isinstance(obj, type) else fn)

    o_core = mod.torch_chunk_gated_delta_rule

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
        cap.put(f"layers.{i}.q_l2", mod.l2norm(q_raw.float(), dim=-1, eps=1e-6))
        cap.put(f"layers.{i}.k_l2", mod.l2norm(k_raw.float(), dim=-1, eps=1e-6))
        cap.put(f"layers.{i}.v", value)
        cap.put(f"layers.{i}.g", g)
        cap.put(f"layers.{i}.beta", beta)
        out, st = o_core(query, key, value, g=g, beta=beta, initial_state=initial_state,
                         output_final_state=True, **kw)
        cap.put(f"layers.{i}.core_out", out)
        cap.put(f"layers.{i}.final_state", st)
        return out, (st if output_final_state else None)
    wrap("torch_chunk_gated_delta_rule", core)

    o_rope = mod.apply_rotary_pos_emb

    def rope_fn(q, k, cos, sin, *a, **kw):
        cap.hit("rope")
        qe, ke = o_rope(q, k, cos, sin, *a, **kw)
        i = state["layer"]
        cap.put(f"layers.{i}.q_rope", qe.transpose(1, 2))  # -> [B, T, nh, dh]
        cap.put(f"layers.{i}.k_rope", ke.transpose(1, 2))
        return qe, ke
    wrap("apply_rotary_pos_emb", rope_fn)

    o_attn = mod.eager_attention_forward

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
            setattr(mod, k, v)
        for obj, attr, val in patched:
            setattr(obj, attr, val)
    return undo, layers


# ------------------------------------------- MoE and Qwen3-Next families ----

def _mod_qwen3_5():
    return mq


def _mod_qwen3_5_moe():
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe
    return modeling_qwen3_5_moe


def _mod_qwen3_next():
    from transformers.models.qwen3_next import modeling_qwen3_next
    return modeling_qwen3_next


# The dense family as install() always handled it.
DENSE = dict(module=_mod_qwen3_5, layer="Qwen3_5DecoderLayer", gdn="Qwen3_5GatedDeltaNet", attn="Qwen3_5Attention")

FAMILIES = {
    "qwen3_5_moe": dict(module=_mod_qwen3_5_moe, layer="Qwen3_5MoeDecoderLayer", gdn="Qwen3_5MoeGatedDeltaNet",
                        attn="Qwen3_5MoeAttention", causal="Qwen3_5MoeForCausalLM",
                        vlm="Qwen3_5MoeForConditionalGeneration"),
    # Qwen3-Next's GDN holds its kernels as instance attributes (flash-linear-attention's
    # when installed): force_reference_paths points them at the torch reference.
    "qwen3_next": dict(module=_mod_qwen3_next, layer="Qwen3NextDecoderLayer", gdn="Qwen3NextGatedDeltaNet",
                       attn="Qwen3NextAttention", causal="Qwen3NextForCausalLM", kernel_attrs=True),
}


def layer_kind(layer):
    """Qwen3.5 layers call it block_type, Qwen3-Next layers layer_type."""
    kind = getattr(layer, "block_type", None) or getattr(layer, "layer_type", None)
    if kind not in ("linear_attention", "full_attention"):
        raise RuntimeError(f"{type(layer).__name__}: unknown layer kind {kind!r}")
    return kind


def install_moe(moe, cap, state):
    """Router and expert stages of one sparse MoE block. router_logits are
    recomputed from the router's own input and weight (Qwen3-Next's router
    returns probabilities in that slot); router_weights and router_experts
    are what the router returned (after top-k and renormalisation)."""
    handles = []

    def router(mod, args, out):
        x = args[0].reshape(-1, mod.weight.shape[1])
        i = state["layer"]
        cap.put(f"layers.{i}.router_logits", F.linear(x, mod.weight))
        _, weights, experts = out
        cap.put(f"layers.{i}.router_weights", weights)
        cap.put(f"layers.{i}.router_experts", experts.to(torch.float32))
    handles.append(moe.gate.register_forward_hook(router))

    def put(name):
        def f(mod, args, out):
            cap.put(f"layers.{state['layer']}.{name}", out[0] if isinstance(out, tuple) else out)
        return f
    handles.append(moe.experts.register_forward_hook(put("experts_out")))
    handles.append(moe.shared_expert.register_forward_hook(put("shared_out")))
    handles.append(moe.shared_expert_gate.register_forward_hook(put("shared_gate")))
    return handles


def install_fused_projections(la, cap, state):
    """Qwen3-Next's in_proj_qkvz / in_proj_ba, de-interleaved by the layer's
    own fix_query_key_value_ordering into the flat stages qkv_proj, z_proj,
    b_proj and a_proj that the Qwen3.5 layout records."""
    def pre(mod, args, kwargs):
        hs = kwargs.get("hidden_states", args[0] if args else None)
        i = state["layer"]
        with torch.no_grad():
            qkvz, ba = mod.in_proj_qkvz(hs), mod.in_proj_ba(hs)
            q, k, v, z, b, a = mod.fix_query_key_value_ordering(qkvz, ba)
            bsz, t = hs.shape[:2]
            cap.put(f"layers.{i}.qkv_proj", torch.cat([x.reshape(bsz, t, -1) for x in (q, k, v)], -1))
            cap.put(f"layers.{i}.z_proj", z.reshape(bsz, t, -1))
            cap.put(f"layers.{i}.b_proj", b.reshape(bsz, t, -1))
            cap.put(f"layers.{i}.a_proj", a.reshape(bsz, t, -1))
    return [la.register_forward_pre_hook(pre, with_kwargs=True)]


def force_reference_paths(model, fam):
    """The torch reference kernels everywhere, whatever optional packages
    (flash-linear-attention, causal-conv1d) this Python has: CPU float32,
    eager attention, eager experts."""
    mod = fam["module"]()
    for m in model.modules():
        if fam.get("kernel_attrs") and type(m).__name__ == fam["gdn"]:
            if hasattr(m, "chunk_gated_delta_rule"):
                m.chunk_gated_delta_rule = mod.torch_chunk_gated_delta_rule
            if hasattr(m, "recurrent_gated_delta_rule") and hasattr(mod, "torch_recurrent_gated_delta_rule"):
                m.recurrent_gated_delta_rule = mod.torch_recurrent_gated_delta_rule
            if hasattr(m, "causal_conv1d_fn"):
                m.causal_conv1d_fn = None
            if hasattr(m, "causal_conv1d_update") and hasattr(mod, "torch_causal_conv1d_update"):
                m.causal_conv1d_update = mod.torch_causal_conv1d_update
            gated = [n for n in dir(mod) if n.endswith("RMSNormGated") and not n.startswith("Fused")]
            if gated and not isinstance(m.norm, getattr(mod, gated[0])):
                eps = getattr(m, "layer_norm_epsilon", None) or getattr(m.norm, "eps", 1e-6)
                ref = getattr(mod, gated[0])(m.norm.weight.shape[0], eps=eps)
                with torch.no_grad():
                    ref.weight.copy_(m.norm.weight.float())
                m.norm = ref
    for c in {id(x): x for x in [model.config, getattr(model.config, "text_config", None)] if x is not None}.values():
        for attr in ("_attn_implementation", "_experts_implementation"):
            try:
                if attr == "_attn_implementation" or hasattr(c, attr):
                    setattr(c, attr, "eager")
            except Exception as e:  # a read-only attribute: the from_pretrained argument stands
                print(f"note: {attr}: {e}")
    if hasattr(model, "set_experts_implementation"):
        try:
            model.set_experts_implementation("eager")
        except Exception as e:  # older API: the config attribute above stands
            print(f"note: set_experts_implementation: {e}")


def tie_router_rows(model, layer, a, b):
    """Makes experts a and b of one layer's router score identically, so
    the golden records how transformers breaks the tie in torch.topk."""
    layers = [m for m in model.modules() if hasattr(m, "mlp") and hasattr(m.mlp, "gate")]
    with torch.no_grad():
        w = layers[layer].mlp.gate.weight
        w[b].copy_(w[a])


def build_family(case, seed, fam):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mod = fam["module"]()
    cfg = dict(case["cfg"])
    if case["kind"] == "causal":
        cfg_mod = __import__(mod.__name__.replace(".modeling_", ".configuration_"), fromlist=["x"])
        cls_name = fam["causal"].replace("ForCausalLM", "TextConfig")
        if not hasattr(cfg_mod, cls_name):  # Qwen3NextConfig is the text config itself
            cls_name = fam["causal"].replace("ForCausalLM", "Config")
        config = getattr(cfg_mod, cls_name)(**cfg)
        config._attn_implementation = "eager"
        model = getattr(mod, fam["causal"])(config)
    else:
        cfg_mod = __import__(mod.__name__.replace(".modeling_", ".configuration_"), fromlist=["x"])
        tie = cfg.pop("tie_word_embeddings")
        top = getattr(cfg_mod, fam["vlm"].replace("ForConditionalGeneration", "Config"))
        config = top(text_config=cfg, vision_config=vision_cfg(cfg["hidden_size"]), tie_word_embeddings=tie)
        config._attn_implementation = "eager"
        model = getattr(mod, fam["vlm"])(config)
    model.eval()
    randomise(model, gen)
    if case.get("tie_router"):
        tie_router_rows(model, *case["tie_router"])
    return model, gen


def reload_family(case, d, fam):
    mod = fam["module"]()
    cls = getattr(mod, fam["causal"] if case["kind"] == "causal" else fam["vlm"])
    m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    force_reference_paths(m, fam)
    return m


def stored_names(d):
    """The MoE tensor names as saved (fused 3-D experts or one tensor per
    expert), for the manifest: loaders must read what transformers writes."""
    from safetensors import safe_open
    names = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors") and not f.startswith("expected"):
            with safe_open(os.path.join(d, f), "pt") as st:
                for k in st.keys():
                    if ".mlp." in k and not k.startswith("mtp"):
                        names[k] = list(st.get_slice(k).get_shape())
    return names


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
    fam = FAMILIES.get(case.get("family"))
    model, gen = (build_family(case, seed, fam) if fam else build(case, seed))
    save_checkpoint(model, case, d, gen)
    model = reload_family(case, d, fam) if fam else reload(case, d)

    vocab = case["cfg"]["vocab_size"]
    ids = torch.randint(0, vocab, (case["batch"], case["seq"]), generator=gen)
    cap = Capture()
    undo, layers = install(model, cap, fam)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    undo()
    n_lin = sum(1 for l in layers if layer_kind(l) == "linear_attention")
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
    entry = {"name": case["name"], "kind": case["kind"], "dtype": str(case["dtype"]).replace("torch.", ""),
             "batch": case["batch"], "seq": case["seq"], "layers": len(layers), "stages": sorted(cap.t)}
    if fam:
        entry["family"] = case["family"]
        entry["sparse_layers"] = [i for i, l in enumerate(layers) if hasattr(l.mlp, "experts")]
        entry["stored_tensors"] = stored_names(d)
    return entry


def write_bf16(case_dir, kind, fam=None):
    """transformers in bf16 on the same checkpoint and ids: the logits a
    bf16 run gets (expected_bf16.safetensors), beside the fp32 goldens,
    which this does not touch. It bounds what a bf16 backend may be off.
    fam (the sparse families) names the model classes."""
    if fam:
        mod = fam["module"]()
        cls = getattr(mod, fam["causal"] if kind == "causal" else fam["vlm"])
    else:
        cls = mq.Qwen3_5ForCausalLM if kind == "causal" else mq.Qwen3_5ForConditionalGeneration
    m = cls.from_pretrained(case_dir, dtype=torch.bfloat16, attn_implementation="eager")
    m.eval()
    if fam:
        force_reference_paths(m, fam)
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
    ap.add_argument("--moe", action="store_true", help="write only the MoE and Qwen3-Next cases (MOE_CASES), "
                    "with their own manifest.json, into --out (testdata/golden/moe in the repository)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.moe:
        return main_moe(a)
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


def main_moe(a):
    """The MoE and Qwen3-Next cases: each case is tried even if an earlier
    one failed; any failure makes the exit status non-zero."""
    only = set(a.only.split(",")) if a.only else None
    man_path = os.path.join(a.out, "manifest.json")
    if only and os.path.exists(man_path):
        with open(man_path) as f:
            manifest = json.load(f)
    else:
        manifest = {"transformers": transformers.__version__, "torch": torch.__version__,
                    "python": sys.version.split()[0], "seed": a.seed,
                    "precision": "float32 eager on CPU, TF32 off, eager experts", "cases": []}
    failed = []
    for i, case in enumerate(MOE_CASES):
        if only is not None and case["name"] not in only:
            continue
        try:
            entry = run_case(case, a.out, a.seed + 100 + i)
        except Exception as e:  # reported, and the exit status says so
            import traceback
            traceback.print_exc()
            failed.append(f"{case['name']}: {e}")
            shutil.rmtree(os.path.join(a.out, case["name"]), ignore_errors=True)
            continue
        manifest["cases"] = [c for c in manifest["cases"] if c["name"] != case["name"]] + [entry]
        print(f"wrote {os.path.join(a.out, case['name'])}")
        if a.bf16:
            write_bf16(os.path.join(a.out, case["name"]), case["kind"], FAMILIES[case["family"]])
    with open(man_path, "w") as f:
        json.dump(manifest, f, indent=2)
    print(f"wrote {man_path} ({len(manifest['cases'])} cases)")
    if failed:
        print("FAILED: " + "; ".join(failed), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
