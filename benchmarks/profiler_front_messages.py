"""Oversized gRPC messages at the profiler port: the job with tfobs's front against
TensorFlow's server alone.

One training process per mode ("front": TensorFlow's profiler server started after
`tfobs.enable()`, so tfobs fronts it; "plain": started before, so it is TensorFlow's alone).
In each, an attacker process sends two 256 MiB requests, then two gzip-compressed 512 MiB
ones (about 1 MB on the wire each), while the training loop runs; printed per mode and
message kind: steps/s during the attack, the five longest gaps between steps, and the job's
RSS growth at its peak so far (VmHWM) and after. TensorFlow's profiler server cannot be stopped once
started, so the two modes run in two processes, one after the other.

Usage: python benchmarks/profiler_front_messages.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

JOB = r'''
import json, socket, subprocess, sys, time
import tensorflow as tf
import tfobs

mode = sys.argv[1]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
if mode == "plain":
    tf.profiler.experimental.server.start(port)
tfobs.enable(metrics_port=-1, nvml=False, interval_steps=100000, first_window_step=100000)
if mode == "front":
    tf.profiler.experimental.server.start(port)
v = tf.Variable(tf.zeros((32, 32)))

@tf.function
def step():
    v.assign(tf.tanh(tf.matmul(v + 0.1, v + 0.2)))

def mem():
    with open("/proc/self/status") as f:
        return {k: int(x.split()[0]) // 1024 for k, x in (l.split(":", 1) for l in f)
                if k in ("VmRSS", "VmHWM")}

ATTACK = """
import grpc, sys
port, kind = int(sys.argv[1]), sys.argv[2]
ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", -1)])
body = bytes((512 if kind == "gzip" else 256) << 20)
codes = []
for _ in range(2):
    try:
        ch.unary_unary("/tensorflow.ProfilerService/Monitor")(
            body, timeout=120, compression=grpc.Compression.Gzip if kind == "gzip" else None)
        codes.append("OK")
    except grpc.RpcError as e:
        codes.append(e.code().name)
print(",".join(codes))
"""
for i in range(300):  # warm-up: the function traced
    step()
before = mem()["VmRSS"]
out = []
for kind in ("plain", "gzip"):
    p = subprocess.Popen([sys.executable, "-c", ATTACK, str(port), kind], stdout=subprocess.PIPE,
                         text=True)
    stamps = []
    t0 = time.monotonic()
    while p.poll() is None:
        with tfobs.step(len(stamps)):
            step()
        stamps.append(time.monotonic())
    gaps = sorted((b - a for a, b in zip(stamps, stamps[1:])), reverse=True)[:5]
    m = mem()
    out.append({"mode": mode, "kind": kind, "codes": p.stdout.read().strip(),
                "steps_s": round(len(stamps) / (time.monotonic() - t0), 1),
                "gaps_s": [round(g, 3) for g in gaps],
                "rss_growth_peak_mb": m["VmHWM"] - before,
                "rss_growth_after_mb": m["VmRSS"] - before})
tfobs.disable()
print("RESULT " + json.dumps(out))
'''


def main() -> None:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    rows = []
    for mode in ("plain", "front"):
        proc = subprocess.run([sys.executable, "-c", JOB, mode], capture_output=True, text=True,
                              env=env, timeout=900)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), "")
        if not line:
            print(proc.stderr[-3000:])
            raise SystemExit(1)
        rows += json.loads(line[7:])
    print("| server | message | answer | steps/s during | 5 longest step gaps (s) | RSS growth "
          "MB peak / after |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        server = "TensorFlow's alone" if r["mode"] == "plain" else "tfobs's front"
        kind = "2 x 256 MiB" if r["kind"] == "plain" else "2 x 512 MiB gzip"
        print(f"| {server} | {kind} | {r['codes']} | {r['steps_s']} | "
              f"{', '.join(map(str, r['gaps_s']))} | {r['rss_growth_peak_mb']} / "
              f"{r['rss_growth_after_mb']} |")
    by = {(r["mode"], r["kind"]): r for r in rows}
    for kind in ("plain", "gzip"):
        ratio = by[("front", kind)]["steps_s"] / max(by[("plain", kind)]["steps_s"], 1e-9)
        print(f"steps/s front / alone, {kind}: {ratio:.2f}")


if __name__ == "__main__":
    main()
