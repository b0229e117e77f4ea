"""Soak: many profile windows in one training process, with short windows and a fast schedule.

Usage: python benchmarks/soak.py [--windows 1000] [--warmup 100] [--json]

A custom loop (`tfobs.step`, a small tf.function and a 2 ms host sleep per step) runs with
windows of 2 steps due every 4 steps and the largest duty-cycle budget (0.5), until
`--windows` windows have been profiled (every outcome except skipped_budget). Prints:
RSS after warm-up and at the end (growth must stay <= 20 MB), Python and native thread
counts (must not change), files left in the capture folder (must be none), and the window
outcomes, checked against the number of windows that were due and against tfobs's own
`/metrics` counters. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RSS_LIMIT_MB = 20.0


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def scraped_windows(url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(url, timeout=10).read().decode()
    return {s.labels["outcome"]: s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples
            if s.name == "tfobs_windows_total" and s.value}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--windows", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import tfobs
    from tfobs.capture.schedule import next_window_start

    capture_dir = tempfile.mkdtemp(prefix="tfobs-soak-")
    rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=capture_dir,
                      interval_steps=4, window_steps=2, first_window_step=0,
                      overhead_budget=0.5, nvml=False)

    @tf.function
    def train(x: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.matmul(x, x))

    x = tf.ones((64, 64))

    def profiled() -> int:
        w = rt.health.windows
        return sum(w.values()) - w.get("skipped_budget", 0)

    step = due = 0
    warm: dict[str, float] = {}
    t0 = time.monotonic()
    while profiled() < args.windows:
        if next_window_start(step, rt.policy) == step:  # a window is due here
            due += 1
        with tfobs.step(step):
            time.sleep(0.002)
            train(x)
        step += 1
        if not warm and profiled() >= args.warmup:
            rt.wait_idle(30)
            warm = {"rss_mb": rss_mb(), "py_threads": threading.active_count(),
                    "native_threads": native_threads(), "windows": profiled()}
    rt.train_end()
    rt.wait_idle(30)
    end = {"rss_mb": rss_mb(), "py_threads": threading.active_count(),
           "native_threads": native_threads(), "windows": profiled()}
    outcomes = dict(rt.health.windows)
    scraped = scraped_windows(rt.metrics_url)
    left = os.listdir(capture_dir)
    result = {
        "windows": end["windows"], "steps": step, "due": due, "outcomes": outcomes,
        "outcomes_scraped": scraped, "errors": dict(rt.health.errors),
        "dropped": dict(rt.health.dropped),
        "rss_warm_mb": round(warm["rss_mb"], 1), "rss_end_mb": round(end["rss_mb"], 1),
        "rss_growth_mb": round(end["rss_mb"] - warm["rss_mb"], 1),
        "py_threads": [warm["py_threads"], end["py_threads"]],
        "native_threads": [warm["native_threads"], end["native_threads"]],
        "files_left": len(left), "elapsed_s": round(time.monotonic() - t0, 1),
    }
    checks = {
        "rss_growth_ok": result["rss_growth_mb"] <= RSS_LIMIT_MB,
        "threads_constant": warm["py_threads"] == end["py_threads"]
        and warm["native_threads"] == end["native_threads"],
        "no_files_left": not left,
        "outcomes_all_counted": sum(outcomes.values()) == due
        and {k: float(v) for k, v in outcomes.items()} == scraped,
    }
    result["checks"] = checks
    tfobs.disable()
    os.rmdir(capture_dir)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
