"""Tests of the kit's gradient check (check_grad) against files
`qwenref golden --grad` writes, with numpy backwards as the kernels.

Run:  QWENREF_BIN=/tmp/qwenref /usr/bin/python3 -m pytest -q python
(build the binary first: go build -o /tmp/qwenref ./cmd/qwenref).
"""

import os
import subprocess

import numpy as np
import pytest

import qwenref_golden as qg

QWENREF = os.environ.get("QWENREF_BIN")
pytestmark = pytest.mark.skipif(not QWENREF, reason="set QWENREF_BIN to a built qwenref (go build -o /tmp/qwenref ./cmd/qwenref)")


def golden(tmp_path, name, *args):
    out = tmp_path / (name + ".safetensors")
    subprocess.run([QWENREF, "golden", "--grad", *args, "--out", str(out)], check=True, capture_output=True)
    return str(out)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def conv_backward(inputs, up, meta):
    """The causal conv + SiLU's backward per packed sequence, in float64."""
    x, w = inputs["x"].astype(np.float64), inputs["weight"].astype(np.float64)
    bias = inputs["bias"].astype(np.float64) if "bias" in inputs else np.zeros(w.shape[0])
    T, C = x.shape
    K = w.shape[1]
    cu = qg.cu_seqlens(meta)
    cu = np.array([0, T]) if cu is None else cu
    st = inputs["initial_state"].astype(np.float64).reshape(len(cu) - 1, K, C)
    dfin = np.asarray(up["dfinal_state"], dtype=np.float64).reshape(len(cu) - 1, K, C)
    dy = np.asarray(up["dy"], dtype=np.float64)
    dx, dw, db, dst = np.zeros_like(x), np.zeros_like(w), np.zeros(C), np.zeros_like(st)
    for n in range(len(cu) - 1):
        xs = np.concatenate([st[n], x[cu[n] : cu[n + 1]]])
        dxs = np.zeros_like(xs)
        dxs[-K:] += dfin[n]
        for t in range(cu[n + 1] - cu[n]):
            u = (xs[t + 1 : t + 1 + K] * w.T).sum(0) + bias
            s = sigmoid(u)
            du = dy[cu[n] + t] * s * (1 + u * (1 - s))
            db += du
            dw += (xs[t + 1 : t + 1 + K] * du).T
            dxs[t + 1 : t + 1 + K] += w.T * du
        dst[n], dx[cu[n] : cu[n + 1]] = dxs[:K], dxs[K:]
    out = {"dx": dx, "dweight": dw, "dinitial_state": dst.reshape(inputs["initial_state"].shape)}
    if "bias" in inputs:
        out["dbias"] = db
    return out


def norm_backward(inputs, up, meta, wrong=False):
    """The gated RMSNorm's backward; wrong leaves out the norm's mean term."""
    x, z, w = (inputs[n].astype(np.float64) for n in ("x", "z", "weight"))
    dy = np.asarray(up["dy"], dtype=np.float64)
    eps = float(meta["eps"])
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    n, sz = x * r, z * sigmoid(z)
    dn = dy * w * sz
    dx = r * dn if wrong else r * (dn - n * (dn * n).mean(-1, keepdims=True))
    s = sigmoid(z)
    return {"dx": dx, "dz": dy * n * w * s * (1 + z * (1 - s)), "dweight": (dy * n * sz).reshape(-1, w.size).sum(0)}


def dense(a):
    """a's buffer read as if it were dense, as a kernel handed a raw
    pointer without its strides reads it."""
    return np.lib.stride_tricks.as_strided(a, shape=a.shape, strides=np.empty(a.shape, a.dtype).strides)


def test_conv_backward_with_bias_packed_and_strided(tmp_path):
    path = golden(tmp_path, "conv", "--op", "conv", "--bias", "--dtype", "bf16", "--seqlens", "2,1,13")
    report = qg.check_grad(path, conv_backward)
    assert set(report) == {"dx", "dweight", "dinitial_state", "dbias"}
    seen = {}

    def spy(inputs, up, meta):
        seen.update(up)
        assert "dx" not in inputs and "dy" not in inputs and "y" not in inputs
        return conv_backward(inputs, up, meta)

    qg.check_grad(path, spy, strided_upstream=True)
    tensors, _ = qg.read(path)
    assert not seen["dy"].flags.c_contiguous and not seen["dy"].flags.writeable
    np.testing.assert_array_equal(seen["dy"], tensors["dy"])


def test_a_backward_that_ignores_strides_is_caught(tmp_path):
    path = golden(tmp_path, "conv", "--op", "conv", "--seq", "9")

    def raw(inputs, up, meta):
        return conv_backward(inputs, {k: dense(v) for k, v in up.items()}, meta)

    qg.check_grad(path, raw)  # dense upstream gradients: the bug does not show
    with pytest.raises(qg.CheckError, match="differs"):
        qg.check_grad(path, raw, strided_upstream=True)


def test_gated_rmsnorm_and_a_planted_bug(tmp_path):
    path = golden(tmp_path, "norm", "--op", "gated-rmsnorm", "--nv", "3", "--dv", "32", "--seq", "5")
    assert set(qg.check_grad(path, norm_backward, strided_upstream=True)) == {"dx", "dz", "dweight"}
    with pytest.raises(qg.CheckError, match="dx differs"):
        qg.check_grad(path, lambda i, u, m: norm_backward(i, u, m, wrong=True))
    with pytest.raises(qg.CheckError, match="no 'dweight'"):
        qg.check_grad(path, lambda i, u, m: {k: v for k, v in norm_backward(i, u, m).items() if k != "dweight"})


def test_a_forward_file_is_refused(tmp_path):
    out = tmp_path / "fwd.safetensors"
    subprocess.run([QWENREF, "golden", "--op", "conv", "--seq", "4", "--out", str(out)], check=True, capture_output=True)
    with pytest.raises(ValueError, match="not a gradient file"):
        qg.check_grad(str(out), conv_backward)


def test_strided_view():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = qg.strided(x)
    np.testing.assert_array_equal(v, x)
    assert not v.flags.c_contiguous and not v.flags.writeable
    assert np.isnan(dense(v)).any()
