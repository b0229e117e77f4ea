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
4b. threads: `tfobs.enable(framework="jax")` with two training threads stepping side by side
   (each its own copy of the workload, both marking `StepTraceAnnotation` steps): windows
   captured, ends that came while the other thread's step body ran, processes that die.
5. GPM: `tfobs.enable(framework="jax")` serving its metrics on a local port, three workloads
   in turn (a bf16 8192^3 matmul loop, an fp32 matmul with precision=HIGHEST (no TF32), a
   memory-bound elementwise loop), tfobs's own /metrics scraped during each: the GPU's
   hardware counters (NVML GPM: tensor, SM, DRAM, pipes) beside tfobs's name-based Tensor
   Core share for the same windows, and whether GPM sampling and CUPTI tracing interfere
   (GPM figures read while a window traced against outside, errors, processes that die).

XLA's defaults are left as they are (command buffers on). `--smoke` runs tiny versions of
everything on whatever JAX has (CPU here), as the test suite does; there part 5 reports
"GPM unavailable: <reason>". `--parts` runs a subset (e.g. `--parts gpm`). Results: one JSON line
per job on stdout and `<out>/gpu_window_end.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


GPM_SERIES = ("tfobs_gpu_tensor_active_ratio", "tfobs_gpu_tensor_pipe_active_ratio",
              "tfobs_gpu_sm_active_ratio", "tfobs_gpu_sm_occupancy_ratio",
              "tfobs_gpu_dram_bandwidth_ratio", "tfobs_gpu_math_pipe_active_ratio",
              "tfobs_gpu_utilization_ratio", "tfobs_tensor_core_kernel_ratio",
              "tfobs_gpm_available", "tfobs_window_first_step", "tfobs_errors_total")


def gpm_workload(name: str, smoke: bool):
    """(step, state) for the GPM part: each step a few dependent device ops, async."""
    import jax
    import jax.numpy as jnp

    n = 8192 if not smoke else 64
    key = jax.random.PRNGKey(1)
    if name == "elementwise":  # memory-bound: a 1 GiB array through a loop XLA cannot fuse
        x = jnp.ones((n * n * 4,) if not smoke else (n * n,), jnp.float32)

        passes = 32 if not smoke else 4  # ~15 ms a step on an H100/H200, as the matmuls

        @jax.jit
        def run(x):
            return jax.lax.fori_loop(0, passes, lambda _, y: y * 0.999 + 0.001, x)

        return run, x
    dtype = jnp.bfloat16 if name == "bf16_matmul" else jnp.float32
    precision = jax.lax.Precision.HIGHEST if name == "fp32_highest" else None
    w = (jax.random.normal(key, (n, n)) / n ** 0.5).astype(dtype)
    x = jax.random.normal(key, (n, n)).astype(dtype)
    reps = 8 if name == "bf16_matmul" else 1  # fp32 without TF32 is ~20x slower per matmul

    @jax.jit
    def run(state):  # the weights are an argument: a closed-over array would be a constant
        x, w = state
        y = jax.lax.fori_loop(
            0, reps, lambda _, y: jnp.dot(y, w, precision=precision).astype(dtype), x)
        return y, w

    return run, (x, w)


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, wanted: tuple[str, ...] = GPM_SERIES) -> list[tuple[str, dict, float]]:
    """(name, labels, value) of the wanted series in a Prometheus text page (no client
    library needed on the device image)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name = head.partition("{")[0]
        if name not in wanted:
            continue
        try:
            out.append((name, dict(_LABEL.findall(head)), float(value)))
        except ValueError:
            continue
    return out


def _figure(rows: list[tuple[str, dict, float]], name: str, **labels: str) -> float | None:
    for n, lab, v in rows:
        if n == name and all(lab.get(k) == want for k, want in labels.items()):
            return v
    return None


def _gpm_row(t_ns: int, rows: list[tuple[str, dict, float]]) -> dict:
    """One scrape's figures of the first GPU, GPM beside NVML's utilization and the
    name-based Tensor Core share of the latest window."""
    row: dict = {"t_ns": t_ns}
    for name, key in (("tfobs_gpu_tensor_active_ratio", "tensor"),
                      ("tfobs_gpu_sm_active_ratio", "sm_active"),
                      ("tfobs_gpu_sm_occupancy_ratio", "sm_occupancy"),
                      ("tfobs_gpu_dram_bandwidth_ratio", "dram_bw"),
                      ("tfobs_gpu_utilization_ratio", "nvml_util"),
                      ("tfobs_tensor_core_kernel_ratio", "names_tensor_core_share"),
                      ("tfobs_window_first_step", "window_first_step"),
                      ("tfobs_gpm_available", "gpm_available")):
        row[key] = _figure(rows, name, **({"device": "/device:GPU:0"}
                                           if name.startswith("tfobs_gpu_") else {}))
    for pipe in ("hmma", "imma", "dfma", "dmma"):
        row[pipe] = _figure(rows, "tfobs_gpu_tensor_pipe_active_ratio",
                            device="/device:GPU:0", pipe=pipe)
    for pipe in ("fp16", "fp32", "fp64"):
        row[pipe] = _figure(rows, "tfobs_gpu_math_pipe_active_ratio", device="/device:GPU:0",
                            pipe=pipe)
    row["gpm_errors"] = _figure(rows, "tfobs_errors_total", stage="gpm") or 0.0
    return row


def _median(values: list) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def job_gpm(args) -> dict:
    """Three workloads in turn under tfobs; its /metrics scraped every `scrape_s` from a
    side thread; windows asked for in each workload (capture_now)."""
    import urllib.request

    import jax

    import tfobs

    interval_s = 0.5  # GPM pairs: windows of 1-4 s hold whole ones
    handle = tfobs.enable(framework="jax", metrics_port=0, metrics_bind="127.0.0.1",
                          nvml_interval_s=interval_s, first_window_step=10 ** 9,
                          interval_steps=10 ** 9, window_steps=args.window_steps,
                          overhead_budget=0.5)
    sampler = handle.sources.nvml
    if sampler is None:
        status = "GPM unavailable: NVML sampler off"
    elif sampler.gpm_available:
        status = "GPM available"
    else:
        status = f"GPM unavailable: {sampler.gpm_unavailable_reason}"
    print(status, file=sys.stderr, flush=True)
    records: list = []
    handle.add_listener(lambda rec, summary, out=records: out.append((rec, summary)))
    scrapes: list[dict] = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(args.scrape_s):
            try:
                with urllib.request.urlopen(handle.metrics_url, timeout=5) as r:
                    text = r.read().decode()
                scrapes.append(_gpm_row(time.time_ns(), parse_metrics(text)))
            except Exception as exc:  # a missed scrape is recorded, never fatal
                scrapes.append({"t_ns": time.time_ns(), "error": str(exc)[:200]})

    scraper = threading.Thread(target=scrape, daemon=True)
    scraper.start()
    phases: list[dict] = []
    i = 0
    for name in ("bf16_matmul", "fp32_highest", "elementwise"):
        step, state = gpm_workload(name, args.smoke)
        for _ in range(3):
            state = step(state)
        block(state)  # compiled and warm: the phase's figures are the workload's own
        phase = {"workload": name, "first_step": i, "t0_ns": time.time_ns()}
        t0 = time.monotonic()
        asks = [args.phase_s * 0.3, args.phase_s * 0.65]
        while time.monotonic() - t0 < args.phase_s:
            if asks and time.monotonic() - t0 >= asks[0]:
                asks.pop(0)
                handle.capture_now()
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                state = step(state)
                if i % 4 == 0:
                    block(state)  # keep the queue short: phases do not bleed into each other
            i += 1
        block(state)
        phase.update(last_step=i - 1, t1_ns=time.time_ns())
        phases.append(phase)
        del state
    handle.wait_idle(60)
    time.sleep(args.scrape_s * 1.5)
    stop.set()
    scraper.join(10)
    errors = dict(handle.health.errors)
    windows = dict(handle.health.windows)
    out_phases = []
    # A scrape at t shows the sampler's latest pair, taken at most one interval before t:
    # its GPM interval lies inside [t - lag, t].
    lag_ns = int((2 * interval_s + 0.1) * 1e9)
    for ph in phases:
        inside = [r for r in scrapes if "error" not in r
                  and ph["t0_ns"] + lag_ns <= r["t_ns"] <= ph["t1_ns"]]
        mine = [(rec, summ) for rec, summ in records
                if ph["first_step"] <= rec.first_step <= ph["last_step"]]
        wins = [rec for rec, _ in mine]
        win_rows = []
        for rec, summ in mine:
            k = getattr(summ, "kernels", None)
            share = (k.tensor_core_s / k.total_s) if k is not None and k.total_s > 0 else None
            during = [r for r in inside
                      if r["t_ns"] - lag_ns >= rec.start_ns and r["t_ns"] <= rec.end_ns]
            win_rows.append({"steps": [rec.first_step, rec.last_step], "outcome": rec.outcome,
                             "seconds": (rec.end_ns - rec.start_ns) / 1e9,
                             "names_tensor_core_share": share,
                             "gpm_tensor_while_tracing": _median([r["tensor"] for r in during]),
                             "gpm_scrapes_while_tracing": len(during)})
        # GPM intervals wholly inside a window (traced) or wholly outside every window.
        traced = [r for r in inside if any(r["t_ns"] - lag_ns >= w.start_ns
                                           and r["t_ns"] <= w.end_ns for w in wins)]
        quiet = [r for r in inside if all(r["t_ns"] < w.start_ns or r["t_ns"] - lag_ns > w.end_ns
                                          for w in wins)]
        fig = {key: _median([r.get(key) for r in inside]) for key in (
            "tensor", "hmma", "imma", "dfma", "dmma", "sm_active", "sm_occupancy", "dram_bw",
            "fp16", "fp32", "fp64", "nvml_util")}
        out_phases.append({
            "workload": ph["workload"], "steps": ph["last_step"] - ph["first_step"] + 1,
            "gpm": fig, "scrapes": len(inside),
            "names_tensor_core_share": _median([w["names_tensor_core_share"] for w in win_rows]),
            "windows": win_rows,
            # Interference: GPM read while CUPTI traced against while it did not.
            "gpm_tensor_tracing": _median([r["tensor"] for r in traced]),
            "gpm_tensor_not_tracing": _median([r["tensor"] for r in quiet]),
            "gpm_scrapes_tracing": len(traced), "gpm_scrapes_not_tracing": len(quiet)})
    tfobs.disable()
    return {"status": status, "gpm_available": status == "GPM available",
            "phases": out_phases, "windows": windows, "errors": errors,
            "scrape_errors": [r["error"] for r in scrapes if "error" in r][:5],
            "scrapes": len(scrapes)}


def gpm_verdict(gpm: dict | None) -> dict:
    """The expected order on a GPM GPU: tensor activity bf16 high, fp32-highest and
    elementwise ~0; DRAM bandwidth highest on the elementwise loop."""
    if not gpm or gpm.get("died"):
        return {"gpm": "did not run" if not gpm else "died"}
    if not gpm.get("gpm_available"):
        return {"gpm": gpm.get("status", "GPM unavailable: unknown")}
    by = {p["workload"]: p for p in gpm.get("phases", [])}
    try:
        t = {w: by[w]["gpm"]["tensor"] for w in by}
        d = {w: by[w]["gpm"]["dram_bw"] for w in by}
        ok = (t["bf16_matmul"] > 0.3 and t["fp32_highest"] < 0.05 and t["elementwise"] < 0.05
              and d["elementwise"] > max(d["bf16_matmul"], d["fp32_highest"]))
    except (KeyError, TypeError):
        return {"gpm": "incomplete", "phases": list(by)}
    return {"gpm": "order as expected" if ok else "order NOT as expected",
            "gpm_tensor": t, "gpm_dram_bw": d,
            "names_tensor_core_share": {w: by[w]["names_tensor_core_share"] for w in by},
            "gpm_errors": gpm.get("errors", {}).get("gpm", 0)}


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

def job_threads(args) -> dict:
    """Two training threads under tfobs: does any window stop under the other's step?"""
    import tfobs

    handle = tfobs.enable(framework="jax", metrics_port=-1, nvml=False,
                          first_window_step=5, interval_steps=args.window_steps + 5,
                          window_steps=args.window_steps, overhead_budget=0.5)
    import jax

    from tfobs.capture.jax_profiler import JaxBackend

    running: set[str] = set()  # threads whose step body runs now
    stops: list[list[str]] = []
    stop = JaxBackend.stop

    def recorded_stop(self, session):
        stops.append(sorted(running - {threading.current_thread().name}))
        return stop(self, session)

    JaxBackend.stop = recorded_stop
    deadline = time.monotonic() + args.seconds
    steps = [0, 0]

    def train(k: int) -> None:
        me = threading.current_thread().name
        step, state = workload(args.workload, args.smoke)
        i = 0
        while handle.health.windows.get("captured", 0) < args.windows and (
                time.monotonic() < deadline):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                running.add(me)
                state = step(state)
                block(state)
                running.discard(me)
            i += 1
        steps[k] = i

    threads = [threading.Thread(target=train, args=(k,), name=f"trainer{k}") for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handle.wait_idle(60)
    ends = handle.health.snapshot().window_ends
    under = sum(1 for s in stops if s)
    # Steps that never pause (threads always mid-step) end a window anyway after a bounded
    # wait, counted as `steps_open`; a stop under another step the runtime did not count so
    # is the fault this part looks for.
    return {"steps": steps, "windows": dict(handle.health.windows),
            "errors": dict(handle.health.errors), "ends": ends,
            "stops_under_other_step": under, "stops": len(stops),
            "stops_uncounted": max(0, under - ends.get("steps_open", 0))}


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
    ap.add_argument("--phase-s", type=float, default=15.0)
    ap.add_argument("--scrape-s", type=float, default=0.5)
    ap.add_argument("--parts", default="old_end,new_end,cost,gpm,threads",
                    help="comma-separated parts the driver runs")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.role != "driver":
        job = {"old_end": job_old_end, "new_end": job_new_end, "cost": job_cost,
               "gpm": job_gpm, "threads": job_threads}[args.role]
        print(json.dumps(job(args)), flush=True)
        return
    small = ["--windows", "2", "--window-steps", "3", "--seconds", "60"] if args.smoke else []
    parts = set(args.parts.split(","))
    results: dict = {"old_end": [], "new_end": [], "cost": None, "gpm": None, "threads": []}
    import jax

    results["device"] = str(jax.devices()[0])
    for _ in range(args.old_runs if "old_end" in parts else 0):
        results["old_end"].append(run_job("old_end", args, ["--workload", "mlp",
                                                            "--windows", "5", *small], 300))
    for n in range(args.new_runs if "new_end" in parts else 0):
        results["new_end"].append(run_job(
            "new_end", args, ["--workload", "transformer" if n % 2 else "mlp",
                              "--windows", str(args.windows), *small], 400))
    if "new_end" in parts:
        results["new_end"].append(run_job("new_end", args, ["--workload", "launch",
                                                            "--windows", "10", *small], 300))
    cost = ["--workload", "transformer", "--blocks", str(args.blocks),
            "--block-s", str(args.block_s)]
    if args.smoke:
        cost = ["--workload", "mlp", "--blocks", "1", "--block-s", "3"]
    if "cost" in parts:
        results["cost"] = run_job("cost", args, cost, 600)
    if "gpm" in parts:
        gpm = ["--phase-s", str(args.phase_s), "--window-steps", "150"]  # 1.5-3 s windows
        if args.smoke:
            gpm = ["--phase-s", "3", "--window-steps", "3", "--scrape-s", "0.25"]
        results["gpm"] = run_job("gpm", args, gpm, 300)
    if "threads" in parts:
        for name in ("mlp",) if args.smoke else ("mlp", "transformer"):
            results["threads"].append(run_job("threads", args, [
                "--workload", name, "--windows", "2" if args.smoke else "10",
                "--window-steps", "3" if args.smoke else "20", "--seconds", "60"], 300))
    old_died = sum(r["died"] for r in results["old_end"])
    new_died = sum(r["died"] for r in results["new_end"])
    new_windows = sum(r.get("windows", {}).get("captured", 0) for r in results["new_end"]
                      if isinstance(r.get("windows"), dict))
    results["verdict"] = {"old_end_died": old_died, "old_end_runs": len(results["old_end"]),
                          "new_end_died": new_died, "new_end_runs": len(results["new_end"]),
                          "new_end_windows": new_windows,
                          "cost_ratio": (results["cost"] or {}).get("cost_ratio"),
                          "threads_died": sum(r["died"] for r in results["threads"]),
                          "threads_windows": sum(r.get("windows", {}).get("captured", 0)
                                                 for r in results["threads"]),
                          "threads_stops_under_other_step": sum(
                              r.get("stops_under_other_step", 0) for r in results["threads"]),
                          "threads_stops_uncounted": sum(
                              r.get("stops_uncounted", 0) for r in results["threads"]),
                          **gpm_verdict(results["gpm"])}
    print(json.dumps(results["verdict"]), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_window_end.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
