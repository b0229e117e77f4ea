"""The GPU check of tfobs's window end, prepared to run in one device call (JAX, no
TensorFlow), e.g. on a lent H100/H200:

    PYTHONUNBUFFERED=1 python tools/gpu_window_end_check.py --out $OUT

Parts, each job a process of its own (a crash kills only it):
1. old end: plain JAX, a window's tracing stopped by `jax.profiler`'s session `stop()` on a
   second thread while the loop keeps stepping (what tfobs did): processes that die.
2. new end: `tfobs.enable(framework="jax")`, windows ended on the training thread between
   steps after the device drained; two workloads (a compiled transformer-like bf16 training
   step, a launch-bound loop of small ops); windows captured and processes that die.
3. cost: one process, blocks with and without tfobs (default settings) interleaved:
   steps/s of each, and per window the steps inside / outside / overlapping the end, the
   end's own time, capture and reduce time.
4. NVML: the sampler's figures during the cost run.

XLA's defaults are left as they are (command buffers on). `--smoke` runs tiny versions of
everything on whatever JAX has (CPU here), as the test suite does. Results: one JSON line
per job on stdout and `<out>/gpu_window_end.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# -- workloads (in the job process) -------------------------------------------------------

def workload(name: str, smoke: bool):
    """(step function, state): one training step each call; async (no host sync)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    bf16 = jnp.bfloat16
    if name == "launch":  # many tiny ops, dispatched one by one: launch-bound
        x = jnp.ones((256,), jnp.float32)

        def step(state):
            y = state
            for _ in range(40 if not smoke else 5):
                y = jnp.sin(y) * 1.0001 + 0.001
            return y

        return step, x
    width, layers, batch = (2048, 24, 2048) if not smoke else (64, 2, 32)
    if name == "transformer":
        seq, d, heads = (1024, 1024, 16) if not smoke else (16, 32, 4)
        params = {f"w{i}": (jax.random.normal(key, (d, d)) * 0.02).astype(bf16)
                  for i in range(6)}
        x = jax.random.normal(key, (8 if not smoke else 2, seq, d)).astype(bf16)

        def loss(p, x):
            q, k, v = x @ p["w0"], x @ p["w1"], x @ p["w2"]
            b, s, _ = q.shape
            split = lambda t: t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)  # noqa: E731
            att = jax.nn.softmax(split(q) @ split(k).transpose(0, 1, 3, 2) / 8.0, axis=-1)
            h = (att @ split(v)).transpose(0, 2, 1, 3).reshape(b, s, d) @ p["w3"]
            h = jax.nn.gelu((x + h) @ p["w4"]) @ p["w5"]
            return jnp.mean(h.astype(jnp.float32) ** 2)
    else:  # "mlp": the workload the crash was first seen with
        params = {f"w{i}": (jax.random.normal(key, (width, width)) * 0.02).astype(bf16)
                  for i in range(layers)}
        x = jax.random.normal(key, (batch, width)).astype(bf16)

        def loss(p, x):
            h = x
            for i in range(layers):
                h = jax.nn.relu(h @ p[f"w{i}"])
            return jnp.mean(h.astype(jnp.float32) ** 2)

    @jax.jit
    def train(p, x):
        g = jax.grad(loss)(p, x)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b.astype(a.dtype), p, g)

    def step(state):
        return train(state, x)

    return step, params


def block(state) -> None:
    import jax

    jax.block_until_ready(state)


# -- job roles ----------------------------------------------------------------------------

def job_old_end(args) -> dict:
    """Plain JAX: trace `window_steps` steps, then stop on a second thread while stepping."""
    import jax
    from jax._src.lib import _profiler

    step, state = workload(args.workload, args.smoke)
    for _ in range(3):
        state = step(state)
    block(state)
    jax.devices()
    windows = 0
    for _ in range(args.windows):
        session = _profiler.ProfilerSession(_profiler.ProfileOptions())
        for _ in range(args.window_steps):
            state = step(state)
        done = threading.Event()
        threading.Thread(target=lambda s=session, d=done: (s.stop(), d.set()),
                         daemon=True).start()
        while not done.is_set():  # the loop keeps stepping while the side thread stops
            state = step(state)
        block(state)
        windows += 1
        for _ in range(args.window_steps):
            state = step(state)
    block(state)
    return {"windows": windows}


def job_new_end(args) -> dict:
    import tfobs

    handle = tfobs.enable(framework="jax", metrics_port=-1, nvml=False,
                          first_window_step=5, interval_steps=args.window_steps + 5,
                          window_steps=args.window_steps, overhead_budget=0.5)
    import jax

    step, state = workload(args.workload, args.smoke)
    i = 0
    deadline = time.monotonic() + args.seconds
    while handle.health.windows.get("captured", 0) < args.windows and (
            time.monotonic() < deadline):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            state = step(state)
        i += 1
    block(state)
    handle.wait_idle(60)
    ends = handle.health.snapshot()
    return {"steps": i, "windows": dict(handle.health.windows),
            "errors": dict(handle.health.errors), "ends": ends.window_ends,
            "end_s": ends.window_end_s}


def job_cost(args) -> dict:
    """Blocks of `block_s` with tfobs enabled (defaults) and without, interleaved."""
    import jax

    import tfobs

    step, state = workload(args.workload, args.smoke)
    for _ in range(5):
        state = step(state)
    block(state)
    blocks: list[dict] = []
    per_window: list[dict] = []
    nvml: list[dict] = []
    i = 0
    for b in range(args.blocks * 2):
        with_tfobs = b % 2 == (b // 2) % 2  # ABBA order
        handle = None
        records: list = []
        durations: list[tuple[int, float, float]] = []  # (step, start, seconds)
        if with_tfobs:
            handle = tfobs.enable(framework="jax", metrics_port=-1, **(
                {"first_window_step": i + 20} if args.smoke else {}))
            handle.add_listener(lambda rec, summary, out=records: out.append((rec, summary)))
        t0 = time.monotonic()
        n0 = i
        while time.monotonic() - t0 < args.block_s:
            s0 = time.perf_counter()
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                state = step(state)
                if i % 10 == 0:
                    block(state)  # as a job that reads its loss every 10 steps
            durations.append((i, s0, time.perf_counter() - s0))
            i += 1
        block(state)
        wall = time.monotonic() - t0
        blocks.append({"tfobs": with_tfobs, "steps": i - n0, "steps_per_s": (i - n0) / wall})
        if handle is not None:
            handle.wait_idle(60)
            sampler = handle.sources.nvml
            if sampler is not None and getattr(sampler, "available", False):
                nvml.append({"block": b, "nvml": _nvml_figures(sampler)})
            base = statistics.median(d for _, _, d in durations)
            for rec, summary in records:
                inside = [d for n, _, d in durations if rec.first_step <= n <= rec.last_step]
                after = [d for n, _, d in durations if rec.last_step < n <= rec.last_step + 3]
                per_window.append({
                    "outcome": rec.outcome, "steps": [rec.first_step, rec.last_step],
                    "median_step_s": base,
                    "inside_median_s": statistics.median(inside) if inside else None,
                    "after_end_max_s": max(after) if after else None,
                    "end_at": rec.end_at, "end_drain_s": rec.end_drain_s,
                    "end_stop_s": rec.end_stop_s, "capture_s": rec.capture_s,
                    "reduce_s": rec.reduce_s, "capture_bytes": rec.capture_bytes,
                    "tensor_core_ratio": getattr(getattr(summary, "tensor_cores", None),
                                                 "ratio", None) if summary else None})
            overhead = handle.health.snapshot().overhead_ratio
            blocks[-1]["estimated_overhead_ratio"] = overhead
            tfobs.disable()
    on = [b["steps_per_s"] for b in blocks if b["tfobs"]]
    off = [b["steps_per_s"] for b in blocks if not b["tfobs"]]
    return {"blocks": blocks, "windows": per_window, "nvml": nvml,
            "cost_ratio": 1 - statistics.mean(on) / statistics.mean(off)}


def _nvml_figures(sampler) -> dict:
    for name in ("snapshot", "latest", "samples"):
        value = getattr(sampler, name, None)
        if callable(value):
            try:
                got = value()
                return got if isinstance(got, dict) else {"value": repr(got)[:2000]}
            except Exception as exc:  # a figure missing must not lose the run
                return {"error": str(exc)}
    return {}


# -- driver -------------------------------------------------------------------------------

def run_job(role: str, args, extra: list[str], timeout_s: float) -> dict:
    cmd = [sys.executable, __file__, "--role", role, *extra]
    if args.smoke:
        cmd.append("--smoke")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    result = {"role": role, "args": extra, "exit": code, "seconds": time.monotonic() - t0}
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if lines:
        result.update(json.loads(lines[-1]))
    cuda = [ln for ln in err.splitlines() if "CUDA_ERROR" in ln or "Segmentation" in ln
            or "Aborted" in ln or "Fatal" in ln]
    result["died"] = code != 0
    result["error_lines"] = cuda[:5] or err.strip().splitlines()[-3:] if code != 0 else []
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", default="driver")
    ap.add_argument("--workload", default="mlp")
    ap.add_argument("--windows", type=int, default=40)
    ap.add_argument("--window-steps", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--block-s", type=float, default=15.0)
    ap.add_argument("--old-runs", type=int, default=3)
    ap.add_argument("--new-runs", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.role != "driver":
        job = {"old_end": job_old_end, "new_end": job_new_end, "cost": job_cost}[args.role]
        print(json.dumps(job(args)), flush=True)
        return
    small = ["--windows", "2", "--window-steps", "3", "--seconds", "60"] if args.smoke else []
    results: dict = {"old_end": [], "new_end": [], "cost": None}
    import jax

    results["device"] = str(jax.devices()[0])
    for _ in range(args.old_runs):
        results["old_end"].append(run_job("old_end", args, ["--workload", "mlp",
                                                            "--windows", "5", *small], 300))
    for n in range(args.new_runs):
        results["new_end"].append(run_job(
            "new_end", args, ["--workload", "transformer" if n % 2 else "mlp",
                              "--windows", str(args.windows), *small], 400))
    results["new_end"].append(run_job("new_end", args, ["--workload", "launch",
                                                        "--windows", "10", *small], 300))
    cost = ["--workload", "transformer", "--blocks", str(args.blocks),
            "--block-s", str(args.block_s)]
    if args.smoke:
        cost = ["--workload", "mlp", "--blocks", "1", "--block-s", "3"]
    results["cost"] = run_job("cost", args, cost, 600)
    old_died = sum(r["died"] for r in results["old_end"])
    new_died = sum(r["died"] for r in results["new_end"])
    new_windows = sum(r.get("windows", {}).get("captured", 0) for r in results["new_end"]
                      if isinstance(r.get("windows"), dict))
    results["verdict"] = {"old_end_died": old_died, "old_end_runs": len(results["old_end"]),
                          "new_end_died": new_died, "new_end_runs": len(results["new_end"]),
                          "new_end_windows": new_windows,
                          "cost_ratio": (results["cost"] or {}).get("cost_ratio")}
    print(json.dumps(results["verdict"]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_window_end.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
