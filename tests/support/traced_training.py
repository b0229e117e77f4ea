"""A real short training run with tfobs tracing on, in a subprocess, for integration tests.

`run_training(endpoint, ...)` starts `python -c SCRIPT` (a custom Keras loop over tf.data with
`tfobs.step`), waits for it, and returns what the script reported as a `Run`: per-step wall
times, the window records, the spans tfobs planned for each captured window, its own metrics
exposition (read from tfobs's registry after `tfobs.disable()`, so late counts are in), the
exporter's `dropped_spans`, how long `disable()` took, and peak RSS.

With `hold_file`, the script keeps serving `/metrics` after training until that file exists
(a Prometheus scrape can then see the last exemplars).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# Small enough to run in a few seconds on 2 busy cores; windows at steps 10, 25, 50, ... 175.
# The tests ask for two captured windows or more: the first window (the profiler's first
# start in the process) costs most, and the budget earns it back over the training that
# follows; 100 steps (about 1 s) once left a fresh-clone CI run's jobs 1 captured window and
# 3 skipped for the budget (3 and 1 here), 200 give the budget twice the training to earn.
OPTIONS = {
    "interval_steps": 25,
    "window_steps": 5,
    "first_window_step": 10,
    "overhead_budget": 0.5,
    "trace_top_n": 3,
    "nvml": False,
    "metrics_bind": "127.0.0.1",
}
STEPS = 200
STEP_SLEEP_S = 0.008  # a steady host-side share per step, so step times are comparable

SCRIPT = r"""
import json, os, resource, sys, time, urllib.request
cfg = json.loads(sys.argv[1])
import tensorflow as tf
import tfobs
from prometheus_client import generate_latest
from tfobs.export.otel import OtelExporter, plan_window
from tfobs.export.prometheus import PrometheusExporter

handle = tfobs.enable(otlp_endpoint=cfg["endpoint"], metrics_port=cfg["port"], **cfg["options"])
otel = next((s for s in handle.sinks if isinstance(s, OtelExporter)), None)
prometheus = next(s for s in handle.sinks if isinstance(s, PrometheusExporter))
planned = []
def on_window(record, summary):
    if record.outcome == "captured" and otel is not None:
        plan = plan_window(summary, record, top_n=handle.config.trace_top_n,
                           max_spans=handle.config.trace_max_spans)
        planned.append({"index": record.index, "trace_id": f"{record.trace_id:032x}",
                        "spans": len(plan.spans)})
handle.add_listener(on_window)

x = tf.random.uniform((512, 32), seed=1)
y = tf.random.uniform((512, 1), seed=2)
ds = (tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
      .map(lambda a, b: (a * 2.0, b)).prefetch(2))
model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, activation="relu"),
                             tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.SGD(0.01)

@tf.function
def train_step(a, b):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(a) - b))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

it = iter(ds)
starts, durs = [], []
t_begin = time.time_ns()
for i in range(cfg["steps"]):
    t0, p0 = time.time_ns(), time.perf_counter()
    with tfobs.step(i):
        time.sleep(cfg["sleep_s"])
        a, b = next(it)
        train_step(a, b)
    durs.append(time.perf_counter() - p0)
    starts.append(t0)
t_end = time.time_ns()
handle.wait_idle(20)
hold = cfg.get("hold_file")
if hold:
    print("READY", flush=True)
    deadline = time.monotonic() + cfg.get("hold_s", 30)
    while not os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)
p0 = time.perf_counter()
tfobs.disable(timeout_s=cfg["disable_timeout_s"])
disable_s = time.perf_counter() - p0
records = []
out = {
    "steps": len(durs), "durs": durs, "starts": starts, "t_begin": t_begin, "t_end": t_end,
    "health_steps": handle.health.steps, "windows": handle.health.windows,
    "dropped": handle.health.dropped, "errors": handle.health.errors,
    "dropped_spans": otel.dropped_spans if otel is not None else None,
    "planned": planned, "disable_s": disable_s,
    "metrics": generate_latest(prometheus.registry).decode(),
    "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
}
print("RESULT " + json.dumps(out), flush=True)
"""


def window_starts(steps: int) -> set[int]:
    """The steps a window can open at: the first window's, then every interval_steps."""
    o = OPTIONS
    return {o["first_window_step"], *range(o["interval_steps"], steps, o["interval_steps"])}


@dataclass
class Run:
    steps: int
    durs: list[float]
    starts: list[int]
    t_begin: int
    t_end: int
    health_steps: int
    windows: dict[str, int]
    dropped: dict[str, int]
    errors: dict[str, int]
    dropped_spans: int | None
    planned: list[dict[str, Any]]
    disable_s: float
    metrics: str
    maxrss_kb: int
    wall_s: float = 0.0

    @property
    def planned_spans(self) -> int:
        return sum(p["spans"] for p in self.planned)

    def window_steps(self) -> set[int]:
        """Step numbers that fall in a (possible) profile window."""
        return {s + k for s in window_starts(STEPS)
                for k in range(OPTIONS["window_steps"] + 1)}

    def sample(self, name: str, **labels: str) -> float:
        """One sample's value from the exposition text (0.0 when absent)."""
        for line in self.metrics.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.split("#")[0].split()[-1])
        return 0.0


def start_training(endpoint: str, port: int, *, env: dict[str, str] | None = None,
                   hold_file: str = "", disable_timeout_s: float = 5.0,
                   steps: int = STEPS) -> subprocess.Popen:
    cfg = {
        "endpoint": endpoint,
        "port": port,
        "options": OPTIONS,
        "steps": steps,
        "sleep_s": STEP_SLEEP_S,
        "disable_timeout_s": disable_timeout_s,
        "hold_file": hold_file,
    }
    full_env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        **(env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, json.dumps(cfg)],
        cwd=str(ROOT),
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_training(proc: subprocess.Popen, t0: float, timeout_s: float = 120) -> Run:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"training did not finish in {timeout_s}s: {err[-3000:]}") from None
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"training failed (rc={proc.returncode}): {err[-3000:]}")
    return Run(**json.loads(lines[-1][len("RESULT "):]), wall_s=time.monotonic() - t0)


def run_training(endpoint: str, port: int, **kwargs: Any) -> Run:
    t0 = time.monotonic()
    return finish_training(start_training(endpoint, port, **kwargs), t0)
