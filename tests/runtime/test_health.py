"""HealthLedger: one locked set of counts, written from many threads, read on scrape, and
shown by the Prometheus collector exactly as counted (no second copy anywhere)."""

from __future__ import annotations

import threading

from prometheus_client import generate_latest

from tfobs.config import Config
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import WORK_BUCKETS, HealthLedger
from tfobs.summary import OUTCOMES


def test_counts_from_many_threads_add_up_and_snapshots_are_whole() -> None:
    health = HealthLedger()
    snapshots = []
    stop = threading.Event()

    def scrape() -> None:
        while not stop.is_set():
            snapshots.append(health.snapshot())

    def count() -> None:
        for _ in range(5000):
            health.count_window("captured")
            health.count_error("capture")

    scraper = threading.Thread(target=scrape)
    scraper.start()
    writers = [threading.Thread(target=count) for _ in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    scraper.join()
    assert health.windows == {"captured": 20_000} and health.errors == {"capture": 20_000}
    # Snapshots taken meanwhile never go backwards and never see more than was counted.
    seen = [s.windows["captured"] for s in snapshots]
    assert seen == sorted(seen) and all(0 <= n <= 20_000 for n in seen)


def test_every_outcome_starts_at_zero_and_durations_fill_buckets() -> None:
    health = HealthLedger()
    snap = health.snapshot()
    assert snap.windows == dict.fromkeys(OUTCOMES, 0) and health.windows == {}
    health.observe_capture(0.3, 1000)
    health.observe_capture(100.0, 10)  # past the last bucket: +Inf
    health.observe_reduce(0.01)
    snap = health.snapshot()
    assert sum(snap.capture_s.counts) == 2 and snap.capture_s.counts[-1] == 1
    assert snap.capture_s.counts[WORK_BUCKETS.index(0.5)] == 1
    assert snap.capture_bytes == 1010 and snap.reduce_s.sum_s == 0.01
    health.count_dropped("spans", 0)  # nothing dropped: no series appears
    assert health.dropped == {}


def test_the_collector_shows_the_ledger_as_counted() -> None:
    config = Config.load(environ={}, metrics_port=-1)
    health = HealthLedger({"version": "9.9"})
    exporter = PrometheusExporter(config, config.identity(), health)
    health.count_window("skipped_budget", "duty-cycle budget")
    health.count_window("captured", exemplar={"trace_id": "ab", "span_id": "cd"})
    health.count_error("nvml", 3)
    health.count_dropped("window")
    text = generate_latest(exporter.registry).decode()
    assert _series("tfobs_windows_total", outcome="captured") + " 1.0" in text
    assert _series("tfobs_windows_total", outcome="empty") + " 0.0" in text
    assert _series("tfobs_errors_total", stage="nvml") + " 3.0" in text
    assert _series("tfobs_dropped_total", what="window") + " 1.0" in text
    assert 'version="9.9"' in text
    health.count_error("nvml")  # the next scrape reads the ledger again
    assert _series("tfobs_errors_total", stage="nvml") + " 4.0" in generate_latest(
        exporter.registry).decode()


def _series(name: str, **labels: str) -> str:
    """`name{...}` as the text exposition writes it: the identity labels plus `labels`,
    sorted by name."""
    labels = {"tf_job": "local", "tf_task": "0", "tf_cluster": "none", "local_rank": "0",
              **labels}
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
