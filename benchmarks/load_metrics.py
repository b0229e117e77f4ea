"""Load: /metrics under many concurrent scrapers while a real training job runs.

Usage: python benchmarks/load_metrics.py [--scrapers 50] [--seconds 30] [--interval-s 1.0]
       [--pre 8] [--post 5] [--json]

A training subprocess (custom loop with `tfobs.step`, tens of ms per step, a window every 100
steps) serves tfobs's `/metrics` on 127.0.0.1. After `--pre` seconds of quiet, `--scrapers`
threads in this process each scrape it every `--interval-s` seconds (0 = back to back) for
`--seconds`, then `--post` quiet seconds follow. Each scraper connects from its own loopback
address (127.0.0.2, 127.0.0.3, ...), as separate Prometheus servers would: the metrics server
lets one address hold at most half its connections (SECURITY.md), so 50 scrapers from one
address would be a flood, not a load. Prints: scrapes done and failed (any error,
non-200 or unparsable body), scrape latency p50/p99/max, and the training step time (median)
with and without scrapers. Exits 1 on any failed scrape.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = r"""
import json, sys, time
import tensorflow as tf
import tfobs
seconds = float(sys.argv[1])
rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", interval_steps=100,
                  window_steps=10, first_window_step=20, nvml=False)
ds = tf.data.Dataset.from_tensor_slices(tf.random.uniform((4096, 512), seed=1))
it = iter(ds.repeat().batch(512).prefetch(2))
w = tf.Variable(tf.random.uniform((512, 512), seed=2) / 512)

@tf.function
def step(x):
    y = x
    for _ in range(4):
        y = tf.nn.relu(tf.matmul(y, w))
    w.assign_sub(1e-6 * tf.matmul(x, y, transpose_a=True))
    return tf.reduce_sum(y)

print("url", rt.metrics_url, flush=True)
times = []
end = time.time() + seconds
i = 0
while time.time() < end:
    t0 = time.time()
    with tfobs.step(i):
        step(next(it))
    times.append((t0, time.time() - t0))
    i += 1
rt.wait_idle(30)
print(json.dumps({"steps": i, "times": times, "windows": rt.health.windows,
                  "errors": rt.health.errors}), flush=True)
"""


class Scraper(threading.Thread):
    def __init__(self, url: str, stop: threading.Event, interval_s: float,
                 source: str = "") -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.interval_s = url, stop, interval_s
        self.source = source  # the client address to connect from ("" = any)
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def run(self) -> None:
        if self.interval_s:
            time.sleep(random.uniform(0, self.interval_s))  # scrapers are not in lockstep
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                status, length, body = self._get()
                latency = time.perf_counter() - t0
                # Whole and ours: cheap checks, so the scrapers' own CPU (same 2-core machine)
                # does not stand in for the cost of serving them.
                if (status != 200 or length != str(len(body)) or not body.endswith(b"\n")
                        or b"\ntfobs_step_duration_seconds_count{" not in body):
                    self.failures.append(f"status {status}, {len(body)} of {length} bytes")
                else:
                    self.latencies.append(latency)
            except Exception as exc:
                self.failures.append(repr(exc))
            if self.interval_s:
                self.stop.wait(max(0.0, self.interval_s - (time.perf_counter() - t0)))


    def _get(self) -> tuple[int, str | None, bytes]:
        url = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=10,
                                          source_address=(self.source, 0) if self.source
                                          else None)
        try:
            conn.request("GET", url.path)
            resp = conn.getresponse()
            return resp.status, resp.headers.get("Content-Length"), resp.read()
        finally:
            conn.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(scrapers: int, seconds: float, interval_s: float, pre: float, post: float) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    # Training lasts the quiet time before and after the load, plus start-up slack.
    proc = subprocess.Popen([sys.executable, "-c", TRAIN, str(pre + seconds + post + 2)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        url = ""
        for line in proc.stdout:
            if line.startswith("url "):
                url = line.split()[1]
                break
        if not url:
            raise RuntimeError("training did not start: " + proc.stderr.read()[-2000:])
        time.sleep(pre)
        stop = threading.Event()
        threads = [Scraper(url, stop, interval_s, source=f"127.0.0.{2 + i % 250}")
                   for i in range(scrapers)]
        load_start = time.time()
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join(15)
        load_end = time.time()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    latencies = [x for t in threads for x in t.latencies]
    failures = [x for t in threads for x in t.failures]
    times = report["times"][20:]  # past tracing and warm-up
    under = [d for t0, d in times if load_start + 0.5 <= t0 <= load_end]
    before = [d for t0, d in times if t0 < load_start]
    after = [d for t0, d in times if t0 > load_end + 0.5]
    quiet = before + after
    return {
        "scrapers": scrapers, "seconds": seconds, "interval_s": interval_s,
        "scrapes": len(latencies), "failed": len(failures), "failures": failures[:5],
        "p50_ms": round(percentile(latencies, 0.50) * 1e3, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 2),
        "max_ms": round(max(latencies, default=float("nan")) * 1e3, 2),
        "step_ms_quiet": round(statistics.median(quiet) * 1e3, 3) if quiet else None,
        "step_ms_scraped": round(statistics.median(under) * 1e3, 3) if under else None,
        # The two quiet phases against each other: the run's own noise.
        "step_ms_before": round(statistics.median(before) * 1e3, 3) if before else None,
        "step_ms_after": round(statistics.median(after) * 1e3, 3) if after else None,
        "steps_quiet": len(quiet), "steps_scraped": len(under),
        "windows": report["windows"], "errors": report["errors"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scrapers", type=int, default=50)
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--interval-s", type=float, default=1.0)
    p.add_argument("--pre", type=float, default=8.0)
    p.add_argument("--post", type=float, default=5.0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = run(args.scrapers, args.seconds, args.interval_s, args.pre, args.post)
    if result["step_ms_quiet"] and result["step_ms_scraped"]:
        result["step_ratio"] = round(result["step_ms_scraped"] / result["step_ms_quiet"], 3)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if result["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
