"""Scale of a multi-worker job on the Prometheus side: series, scrape and rule cost per worker.

Usage: python benchmarks/workers_scale.py [--workers 8,64,256] [--capture FILE] [--seconds 20]

For each worker count N, one target serves N workers' `tfobs_*` series, built exactly as the
live exporter builds them (`tfobs.export.replay.load_state`: the same collector, histograms
and counters) from one real capture's summary: a CPU custom loop by default, or a GPU
capture (`--capture tests/data/captures/tracelens__mi300_jax08_gemm__tw003.xplane.pb`) for
the per-device families. A real Prometheus scrapes it every second and evaluates
dashboards/alerts.yml every second, all N workers in one training job (the rules' worst
case: one group of N). After `--seconds` it prints, per N: series per worker, exposition
bytes per worker, scrape duration, the evaluation time of each rule group (Prometheus's own
`evaluationTime`), and Prometheus's head series and resident memory.

One target holding N workers stands in for N targets: the series, samples and rules are the
same; N real targets cost Prometheus N connections more, which this does not measure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_CAPTURE = os.path.join(
    ROOT, "tests", "data", "captures", "generated__tf2.20cpu__custom_loop_compute_bfc.xplane.pb")


def _prom_self(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def measure(summary, n: int, seconds: float) -> dict:
    from tests.support.prometheus_server import PrometheusServer, free_port
    from tfobs.export.http_server import MetricsServer
    from tfobs.export.replay import load_state

    state = load_state([summary] * n, tf_job="worker")
    port = free_port()
    server = MetricsServer(state.registry, bind="127.0.0.1", port=port)
    server.start()
    rules = os.path.join(ROOT, "dashboards", "alerts.yml")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
        with PrometheusServer([f"127.0.0.1:{port}"], scrape_interval_s=1.0,
                              rule_files=[rules], evaluation_interval_s=1.0) as prom:
            prom.wait_targets_up(timeout_s=60)
            time.sleep(seconds)
            series = prom.scalar('count({__name__=~"tfobs_.+"})') or 0.0
            target = prom.targets_health()[0]
            groups = {g["name"]: g["evaluationTime"] for g in prom.api("rules")["groups"]}
            head = _prom_self(prom.url, "prometheus_tsdb_head_series")
            rss = _prom_self(prom.url, "process_resident_memory_bytes")
            recorded = prom.scalar("count(tfobs:worker_own_step_seconds)") or 0.0
    finally:
        server.shutdown(2.0)
    return {
        "workers": n,
        "series_per_worker": series / n,
        "exposition_bytes_per_worker": len(body) / n,
        "scrape_s": target["lastScrapeDuration"],
        "rule_groups_s": groups,
        "head_series": head,
        "prometheus_rss_bytes": rss,
        "workers_compared_by_rules": recorded,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="8,64,256")
    ap.add_argument("--capture", default=DEFAULT_CAPTURE)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    import tfobs

    summary = tfobs.analyze(args.capture)
    print(f"capture: {os.path.basename(args.capture)} ({len(summary.devices)} GPU devices)")
    for n in (int(x) for x in args.workers.split(",")):
        r = measure(summary, n, args.seconds)
        print(json.dumps(r))
        groups = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in r["rule_groups_s"].items())
        print(f"N={n}: {r['series_per_worker']:.0f} series/worker, "
              f"{r['exposition_bytes_per_worker'] / 1024:.1f} KiB/worker per scrape, "
              f"scrape {r['scrape_s'] * 1e3:.0f} ms, rules: {groups}; Prometheus head "
              f"{r['head_series']:.0f} series, RSS {r['prometheus_rss_bytes'] / 2**20:.0f} MiB",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
