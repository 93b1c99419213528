#!/usr/bin/env python3
"""Records qwenref doctor's probe on a GPU machine with the real transformers, for the Go tests.

    python3 testdata/gen/gen_doctor_h200.py OUTDIR

Run from the repository root with the interpreter that has torch and transformers. It runs
doctor/probe.py exactly as `qwenref doctor --model testdata/configs/qwen3.5-27b.json` would
(same interpreter, -B, the inherited environment), checks that the JSON is well formed, writes
OUTDIR/h200-transformers-5.17.json, prints what it wrote and exits non-zero on any failure.
The Go tests (doctor/, cmd/qwenref) feed that file through the report code.
"""

import json
import os
import subprocess
import sys

PROBE = os.path.join("doctor", "probe.py")
CONFIG = os.path.join("testdata", "configs", "qwen3.5-27b.json")
NAME = "h200-transformers-5.17.json"
TIMEOUT_S = 300


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_doctor_h200.py OUTDIR")
    for path in (PROBE, CONFIG):
        if not os.path.isfile(path):
            sys.exit("%s not found: run from the repository root" % path)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, NAME)
    cmd = [sys.executable, "-B", PROBE, "--model-config", CONFIG, "--out", out]
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT_S, check=False)
    sys.stderr.write(res.stderr.decode("utf-8", "replace"))
    if res.returncode != 0:
        sys.exit("probe exited %d" % res.returncode)
    with open(out, "r", encoding="utf-8") as f:
        data = json.load(f)
    if data.get("schema") != 1 or data.get("error"):
        sys.exit("probe reported a failure: %r" % data.get("error"))
    tr = data["transformers"]
    if tr["scheme"] in ("no-transformers", "no-qwen3_5", "unknown"):
        sys.exit("nothing to record: transformers route is %r" % tr["scheme"])
    print("wrote %s" % out)
    print("  transformers %s, torch %s, scheme %s, fast path %s"
          % (data["packages"]["transformers"]["version"], data["packages"]["torch"]["version"],
             tr["scheme"], tr["fast_path"]))
    print("  devices: %s" % ", ".join(d["name"] + " sm " + d["capability"] for d in data["cuda"]["devices"]))
    print("  missing: %s" % ", ".join(k["name"] for k in tr["kernels"] if not k["available"]))
    print("  layers: %s" % data.get("model"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
