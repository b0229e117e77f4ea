"""Peak memory of a window whose capture is large (issue 13, item 6), before and after the
capture bounds: a tf.while_loop of ITERS iterations per step (so every step records ITERS x a
few op events), a window of WINDOW steps, with and without max_capture_bytes.

Each variant runs in its own process and reports its peak RSS (ru_maxrss) and the window's
outcome; "before" runs tfobs from git revision BEFORE (extracted to a temp folder), "after"
this checkout. Usage: python benchmarks/capture_bounds.py [--iters 5000] [--window 100]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]
BEFORE = "bf0df1d"  # the revision issue 13 was measured on

WORKLOAD = textwrap.dedent("""
    import json, os, resource, sys, time
    import tensorflow as tf
    iters, window, mode, max_bytes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if mode != "none":
        import tfobs
        opts = dict(metrics_port=-1, nvml=False, first_window_step=3, window_steps=window,
                    interval_steps=100000, window_max_s=120, overhead_budget=0.5)
        if max_bytes != "default":
            opts["max_capture_bytes"] = int(max_bytes)
        rt = tfobs.enable(**opts)

    @tf.function
    def step(x):
        return tf.while_loop(lambda i, v: i < iters, lambda i, v: (i + 1, v * 1.0001 + 1.0),
                             (tf.constant(0), x))[1]

    x = tf.ones((4,))
    t0 = time.monotonic()
    n = 3 + window + 2
    for i in range(n):
        if mode != "none":
            with tfobs.step(i):
                step(x)
        else:
            step(x)
    out = {"steps_s": n / (time.monotonic() - t0)}
    if mode != "none":
        rt.train_end()
        rt.wait_idle(300)
        out["windows"] = dict(rt.health.windows)
        out["tfobs"] = tfobs.__file__
        out["cut"] = getattr(rt.slot, "windows_cut", None)
        rec = rt.last_record
        out["window_steps"] = (rec.last_step - rec.first_step + 1) if rec else 0
        out["capture_mb"] = round((rec.capture_bytes if rec else 0) / 1e6, 1)
        tfobs.disable()
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print("RESULT " + json.dumps(out), flush=True)
""")


def _before_tree() -> str:
    folder = tempfile.mkdtemp(prefix="tfobs-before-")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "tfobs"],
                             capture_output=True, check=True).stdout
    tar_path = os.path.join(folder, "src.tar")
    pathlib.Path(tar_path).write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(folder, filter="data")
    return folder


def run(iters: int, window: int, mode: str, max_bytes: str, pythonpath: str) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": pythonpath}
    proc = subprocess.run([sys.executable, "-c", WORKLOAD, str(iters), str(window), mode,
                           max_bytes], capture_output=True, text=True, env=env, timeout=900,
                          cwd=tempfile.gettempdir())  # not ROOT: '' on sys.path would win
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": proc.stderr[-500:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5000)
    ap.add_argument("--window", type=int, default=100)
    args = ap.parse_args()
    before = _before_tree()
    rows = [("no tfobs", "none", "default", str(ROOT))]
    for max_bytes in ("1000000", "default"):
        rows.append((f"before, max_capture_bytes={max_bytes}", "tfobs", max_bytes, before))
        rows.append((f"after,  max_capture_bytes={max_bytes}", "tfobs", max_bytes, str(ROOT)))
    print(f"tf.while_loop of {args.iters} iterations per step, window of {args.window} steps")
    for label, mode, max_bytes, path in rows:
        print(f"{label:40s} {json.dumps(run(args.iters, args.window, mode, max_bytes, path))}",
              flush=True)


if __name__ == "__main__":
    main()
