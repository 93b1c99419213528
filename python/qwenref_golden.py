"""Read `qwenref golden` test vectors and check a kernel against them.

Needs numpy only. Every tensor is returned as a float32 numpy array:
BF16 and F16 tensors are widened exactly, so a bf16 file's inputs are the
bf16 values themselves (cast them back with torch's .to(torch.bfloat16),
which is exact). Layouts are qwenref's, one sequence, row-major:

  gdn-core   q, k [T, NK, DK] (q already scaled by DK**-0.5, both L2-normed),
             v [T, NV, DV], g, beta [T, NV], initial_state [NV, DK, DV]
             ([N, NV, DK, DV] with packed sequences, metadata cu_seqlens),
             outputs out [T, NV, DV], final_state like initial_state
  conv       x [T, C], weight [C, K], initial_state [K, C];
             outputs y [T, C], final_state [K, C]
  attention  q [T, NH, D], k, v [S, NKV, D], metadata scale; output out
  gdn-layer, attention-layer, decoder-layer
             x [T, H] and the layer's weights under checkpoint names
             (e.g. linear_attn.in_proj_qkv.weight [C, H]); output out [T, H]

Gradient files (qwenref golden --grad) add upstream gradients (dout or dy,
dfinal_state) and the expected gradients (dq, ..., dinitial_state);
check_grad hands a backward the inputs and the upstream gradients.

fla's layouts add a batch axis: q[None] is [1, T, H, K]; see
docs/kernel-engineers.md for the exact calls.
"""

import json
import struct

import numpy as np

__all__ = ["read", "compare", "tolerance", "check", "check_grad", "strided", "cu_seqlens", "CheckError"]

_MAX_HEADER = 100_000_000


def _widen_bf16(raw):
    return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)


_DTYPES = {
    "F32": lambda raw: np.frombuffer(raw, dtype="<f4").astype(np.float32),
    "F16": lambda raw: np.frombuffer(raw, dtype="<f2").astype(np.float32),
    "BF16": _widen_bf16,
    "F64": lambda raw: np.frombuffer(raw, dtype="<f8").astype(np.float32),
}


def read(path):
    """Return (tensors, metadata) of a safetensors file: a dict of float32
    arrays in their stored shapes and the __metadata__ strings."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > _MAX_HEADER or 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} is past the file's {len(data)} bytes")
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {}) or {}
    body = memoryview(data)[8 + n :]
    tensors = {}
    for name, h in header.items():
        if h["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {h['dtype']}, not one of {sorted(_DTYPES)}")
        begin, end = h["data_offsets"]
        if not 0 <= begin <= end <= len(body):
            raise ValueError(f"{path}: tensor {name} lies outside the file")
        arr = _DTYPES[h["dtype"]](body[begin:end])
        tensors[name] = arr.reshape(h["shape"])
    return tensors, meta


def compare(got, want):
    """qwenref's stage rule: (relative L2, max-abs scaled by max(1, max|want|))."""
    got = np.asarray(got, dtype=np.float64).reshape(-1)
    want = np.asarray(want, dtype=np.float64).reshape(-1)
    if got.shape != want.shape:
        return float("inf"), float("inf")
    diff = got - want
    if not np.all(np.isfinite(diff)):
        return float("inf"), float("inf")
    den = np.linalg.norm(want)
    rel = np.linalg.norm(diff) / den if den > 0 else np.linalg.norm(diff)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    return float(rel), float(np.max(np.abs(diff)) / scale) if diff.size else 0.0


def tolerance(meta, output):
    """The bars (rel_l2, max_abs_scaled) the file records for one output.

    Each must be a number in [0, 1): an output of zeros has relative L2 1
    and scaled max-abs at most 1, so a bar of 1 or more checks nothing."""
    bars = []
    for key in (f"tol.{output}.rel_l2", f"tol.{output}.max_abs_scaled"):
        if key not in meta:
            raise ValueError(f"the file records no tolerance '{key}' (written by an older qwenref golden?)")
        try:
            v = float(meta[key])
        except ValueError:
            v = float("nan")
        if not 0 <= v < 1:
            raise ValueError(f"metadata {key} is {meta[key][:200]!r}: a bar must be in [0, 1) "
                             "(one of 1 or more passes an output of zeros, so the file checks nothing)")
        bars.append(v)
    return bars[0], bars[1]


def cu_seqlens(meta):
    """fla's cu_seqlens as an int64 array, or None for one sequence."""
    cu = meta.get("cu_seqlens")
    return None if not cu else np.array([int(x) for x in cu.split(",")], dtype=np.int64)


class CheckError(AssertionError):
    """An output of the user's function is missing or outside its bars."""


_OUTPUTS = {"gdn-core": ("out", "final_state"), "conv": ("y", "final_state"), "attention": ("out",), "gated-rmsnorm": ("y",),
            "gdn-layer": ("out",), "attention-layer": ("out",), "decoder-layer": ("out",)}


def check(path, fn):
    """Run fn(inputs, meta) on the file's inputs and compare every output it
    must return (a dict: gdn-core and conv give out/y and final_state,
    attention and the layer ops give out) with the file's expected outputs and tolerances.
    Returns {output: (rel_l2, max_abs_scaled)}; raises CheckError naming the
    first output that is missing or differs."""
    tensors, meta = read(path)
    op = meta.get("op")
    if op not in _OUTPUTS:
        raise ValueError(f"{path}: metadata op is {op!r}, not a file qwenref golden wrote")
    outputs = _OUTPUTS[op]
    grads = set(sum(_GRADS.get(op, ((), ())), ())) | {"dbias"}  # a gradient file's, not the forward's
    inputs = {k: v.copy() for k, v in tensors.items() if k not in outputs and k not in grads}
    got = fn(inputs, meta)
    report = {}
    for name in outputs:
        if name not in got:
            raise CheckError(f"{path}: the function returned no {name!r} (it must return {list(outputs)})")
        want = tensors[name]
        g = np.asarray(got[name], dtype=np.float32)
        if g.size != want.size:
            raise CheckError(f"{path}: {name} has {g.size} values, want {want.size} (shape {list(want.shape)})")
        rel, mx = compare(g, want)
        tol_rel, tol_max = tolerance(meta, name)
        report[name] = (rel, mx)
        if not (rel <= tol_rel and mx <= tol_max):
            raise CheckError(f"{path}: {name} differs: rel L2 {rel:.3e} (bar {tol_rel:.1e}), "
                             f"scaled max-abs {mx:.3e} (bar {tol_max:.1e})")
    return report


# The upstream gradients a gradient file's op takes, and the gradients it
# expects (conv adds dbias in a --bias file).
_GRADS = {"gdn-core": (("dout", "dfinal_state"), ("dq", "dk", "dv", "dg", "dbeta", "dinitial_state")),
          "conv": (("dy", "dfinal_state"), ("dx", "dweight", "dinitial_state")),
          "attention": (("dout",), ("dq", "dk", "dv", "dgate")),
          "gated-rmsnorm": (("dy",), ("dx", "dz", "dweight"))}
_FORWARD = {"out", "y", "final_state"}


def strided(x):
    """x as a read-only view that is not contiguous: its values every other
    element of a buffer twice as long in the last axis, NaN between them,
    as a slice or a transpose hands a kernel an upstream gradient. A kernel
    that reads the buffer as if it were dense reads NaN."""
    x = np.asarray(x, dtype=np.float32)
    shape = x.shape if x.ndim else (1,)
    buf = np.full(shape[:-1] + (2 * shape[-1],), np.nan, dtype=np.float32)
    view = buf[..., ::2]
    view[...] = x.reshape(shape)
    view = view.reshape(x.shape) if x.ndim else view
    view.flags.writeable = False
    return view


def check_grad(path, fn, strided_upstream=False):
    """Check a backward against a gradient file (qwenref golden --grad).

    Calls fn(inputs, upstream, meta): inputs are the forward's inputs (q, k,
    ..., initial_state, as check hands them), upstream the gradients of its
    outputs (dout or dy, and dfinal_state), each a float32 array in
    qwenref's layout; fn returns a dict of every input's gradient (dq, dk,
    ..., dinitial_state; see the file's op). With strided_upstream each
    upstream gradient arrives as a non-contiguous read-only view
    (strided), to catch a backward that assumes a dense dy. Returns
    {gradient: (rel_l2, max_abs_scaled)}; raises CheckError naming the
    first gradient that is missing or outside the file's bars."""
    tensors, meta = read(path)
    op = meta.get("op")
    if meta.get("grad") != "1" or op not in _GRADS:
        raise ValueError(f"{path}: not a gradient file (metadata op {op!r}, grad {meta.get('grad')!r}): "
                         "write one with qwenref golden --grad")
    ups, grads = _GRADS[op]
    if meta.get("bias") == "1":
        grads = grads + ("dbias",)
    skip = set(grads) | set(ups) | _FORWARD
    inputs = {k: v.copy() for k, v in tensors.items() if k not in skip}
    upstream = {k: strided(tensors[k]) if strided_upstream else tensors[k].copy() for k in ups}
    got = fn(inputs, upstream, meta)
    report = {}
    for name in grads:
        if name not in got:
            raise CheckError(f"{path}: the function returned no {name!r} (it must return {list(grads)})")
        want = tensors[name]
        g = np.asarray(got[name], dtype=np.float32)
        if g.size != want.size:
            raise CheckError(f"{path}: {name} has {g.size} values, want {want.size} (shape {list(want.shape)})")
        rel, mx = compare(g, want)
        tol_rel, tol_max = tolerance(meta, name)
        report[name] = (rel, mx)
        if not (rel <= tol_rel and mx <= tol_max):
            raise CheckError(f"{path}: {name} differs: rel L2 {rel:.3e} (bar {tol_rel:.1e}), "
                             f"scaled max-abs {mx:.3e} (bar {tol_max:.1e})")
    return report
