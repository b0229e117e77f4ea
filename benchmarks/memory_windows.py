"""Memory over many profile windows: RSS after 200 windows minus RSS after 10.

A custom `tf.function` loop with a tf.data pipeline and `tfobs.step`, tfobs enabled with
short windows close together (a high budget), so 200 real windows (capture, read back,
reduce, publish to the Prometheus exporter) run in a minute or two. The first windows pay
one-time costs (profiler libraries, caches); growth after them would be a leak.

    .venv/bin/python benchmarks/memory_windows.py [--windows 200]

Last line: `rss_growth_mb=<x>` (target <= 20).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=10)
    args = parser.parse_args(argv)

    import tensorflow as tf

    import tfobs

    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.fill((32, 32), tf.cast(i, tf.float32)))
    iterator = iter(ds.prefetch(2))
    w = tf.Variable(tf.ones((32, 32)))

    @tf.function
    def train_step(it):
        x = next(it)
        w.assign_sub(0.001 * tf.matmul(x, w) / 1e6)
        return tf.reduce_sum(w)

    runtime = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", interval_steps=40,
                           window_steps=20, first_window_step=40, overhead_budget=0.5,
                           nvml=False)
    marks: dict[int, float] = {}
    step = 0
    t0 = time.monotonic()
    done = lambda: sum(runtime.health.windows.get(k, 0)  # noqa: E731
                       for k in ("captured", "empty", "failed", "dropped_too_large"))
    while done() < args.windows:
        with tfobs.step(step):
            train_step(iterator)
        step += 1
        n = done()
        if n in (args.baseline, args.windows) and n not in marks:
            runtime.wait_idle(30)
            gc.collect()
            marks[n] = rss_mb()
            print(f"after {n} windows ({step} steps, {time.monotonic() - t0:.0f}s): "
                  f"RSS {marks[n]:.1f} MB", flush=True)
        if time.monotonic() - t0 > 1800:
            print("gave up after 30 minutes", flush=True)
            break
    print(f"windows: {dict(runtime.health.windows)}, errors {dict(runtime.health.errors)}, "
          f"dropped {dict(runtime.health.dropped)}", flush=True)
    tfobs.disable()
    growth = marks.get(args.windows, float("nan")) - marks.get(args.baseline, float("nan"))
    print(f"rss_growth_mb={growth:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
