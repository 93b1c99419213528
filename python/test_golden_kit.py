"""Tests of the kit against files `qwenref golden` writes.

Run:  QWENREF_BIN=$(go env GOPATH)/bin/qwenref /usr/bin/python3 -m pytest -q python
(build the binary first: go build -o /tmp/qwenref ./cmd/qwenref).
"""

import os
import subprocess

import numpy as np
import pytest

import qwenref_golden as qg

QWENREF = os.environ.get("QWENREF_BIN")
pytestmark = pytest.mark.skipif(not QWENREF, reason="set QWENREF_BIN to a built qwenref (go build -o /tmp/qwenref ./cmd/qwenref)")


def golden(tmp_path, *args):
    out = tmp_path / "g.safetensors"
    subprocess.run([QWENREF, "golden", *args, "--out", str(out)], check=True, capture_output=True)
    return str(out)


def gdn_numpy(inputs, meta, wrong=False):
    """The gated delta rule per sequence, in float64, the way a user's
    kernel is called: fla's cu_seqlens and one state per sequence."""
    q, k, v, g, beta = (inputs[n].astype(np.float64) for n in ("q", "k", "v", "g", "beta"))
    T, NK, DK = q.shape
    NV, DV = v.shape[1], v.shape[2]
    cu = qg.cu_seqlens(meta)
    cu = np.array([0, T]) if cu is None else cu
    S = inputs["initial_state"].astype(np.float64).reshape(len(cu) - 1, NV, DK, DV).copy()
    out = np.zeros((T, NV, DV))
    for n in range(len(cu) - 1):
        for t in range(cu[n], cu[n + 1]):
            for h in range(NV):
                kh = h // (NV // NK)
                a = np.exp(g[t, h])
                if not wrong:
                    S[n, h] *= a
                u = beta[t, h] * (v[t, h] - S[n, h].T @ k[t, kh])
                if wrong:
                    S[n, h] *= a
                S[n, h] += np.outer(k[t, kh], u)
                out[t, h] = S[n, h].T @ q[t, kh]
    return {"out": out, "final_state": S.reshape(inputs["initial_state"].shape)}


def conv_numpy(inputs, meta):
    x, w, st = inputs["x"].astype(np.float64), inputs["weight"].astype(np.float64), inputs["initial_state"].astype(np.float64)
    K = w.shape[1]
    xs = np.concatenate([st, x])
    T = x.shape[0]
    y = np.stack([(xs[t + 1 : t + 1 + K] * w.T).sum(0) for t in range(T)])
    return {"y": y / (1 + np.exp(-y)), "final_state": xs[T:]}


def attention_numpy(inputs, meta):
    q, k, v = (inputs[n].astype(np.float64) for n in ("q", "k", "v"))
    T, NH, D = q.shape
    S, NKV = k.shape[0], k.shape[1]
    scale = float(meta["scale"])
    out = np.zeros_like(q)
    for i in range(T):
        for h in range(NH):
            kv = h // (NH // NKV)
            s = scale * (k[: S - T + i + 1, kv] @ q[i, h])
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[: S - T + i + 1, kv]
    return {"out": out}


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16"])
def test_gdn_core_passes_and_reads_every_output(tmp_path, dtype):
    path = golden(tmp_path, "--op", "gdn-core", "--dtype", dtype, "--seq", "40")
    tensors, meta = qg.read(path)
    assert meta["dtype"] == dtype
    assert tensors["q"].dtype == np.float32 and tensors["q"].shape == (40, 2, 16)
    report = qg.check(path, gdn_numpy)
    assert set(report) == {"out", "final_state"}


def test_packed_sequences_reset_the_state(tmp_path):
    path = golden(tmp_path, "--op", "gdn-core", "--dtype", "bf16", "--seqlens", "37,30,1")
    _, meta = qg.read(path)
    assert list(qg.cu_seqlens(meta)) == [0, 37, 67, 68]
    qg.check(path, gdn_numpy)

    def one_sequence(inputs, meta):
        """A kernel that ignores cu_seqlens and carries the state across."""
        first = dict(inputs, initial_state=inputs["initial_state"][:1])
        res = gdn_numpy(first, {})
        return {"out": res["out"], "final_state": np.repeat(res["final_state"], 3, axis=0)}

    with pytest.raises(qg.CheckError):
        qg.check(path, one_sequence)


def test_a_wrong_kernel_is_caught(tmp_path):
    path = golden(tmp_path, "--op", "gdn-core", "--seq", "20")
    with pytest.raises(qg.CheckError, match="out differs"):
        qg.check(path, lambda i, m: gdn_numpy(i, m, wrong=True))
    with pytest.raises(qg.CheckError, match="no 'final_state'"):
        qg.check(path, lambda i, m: {"out": gdn_numpy(i, m)["out"]})


def test_conv_and_attention(tmp_path):
    qg.check(golden(tmp_path, "--op", "conv", "--dtype", "bf16", "--seq", "9"), conv_numpy)
    qg.check(golden(tmp_path, "--op", "attention", "--seq", "5", "--past", "3"), attention_numpy)
    with pytest.raises(qg.CheckError):
        qg.check(golden(tmp_path, "--op", "attention", "--seq", "5", "--past", "3"),
                 lambda i, m: {"out": attention_numpy(i, m)["out"] * 1.01})


def test_layer_file_reads_weights_and_catches_a_wrong_layer(tmp_path):
    path = golden(tmp_path, "--op", "gdn-layer", "--dtype", "bf16", "--seq", "6")
    tensors, meta = qg.read(path)
    h = int(meta["H"])
    assert tensors["x"].shape == (6, h)
    assert tensors["linear_attn.out_proj.weight"].shape[0] == h
    assert set(qg._OUTPUTS[meta["op"]]) == {"out"}
    with pytest.raises(qg.CheckError, match="out differs"):
        qg.check(path, lambda i, m: {"out": np.zeros_like(i["x"])})


def test_a_bar_that_checks_nothing_is_refused():
    meta = {"tol.out.rel_l2": "1e-5", "tol.out.max_abs_scaled": "1e-4"}
    assert qg.tolerance(meta, "out") == (1e-5, 1e-4)
    for bad in ("1", "1e308", "-1e-5", "nan", "inf", "x"):
        with pytest.raises(ValueError, match="tol.out.rel_l2"):
            qg.tolerance({**meta, "tol.out.rel_l2": bad}, "out")
    with pytest.raises(ValueError, match="no tolerance 'tol.y.rel_l2'"):
        qg.tolerance(meta, "y")
