"""The step-time histogram: same exposition as prometheus_client's Histogram, cheaper hot path,
no step lost when folding races with training."""

from __future__ import annotations

import random
import threading

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from tfobs.export.step_histogram import MAX_PENDING, STEP_BUCKETS, StepHistogram

NAME = "tfobs_step_duration_seconds"


def _pair():
    ours_reg, ref_reg = CollectorRegistry(auto_describe=False), CollectorRegistry()
    ours = StepHistogram(NAME, "Step time.", ["tf_job", "tf_task"], STEP_BUCKETS)
    ours_reg.register(ours)
    ref = Histogram(NAME, "Step time.", ["tf_job", "tf_task"], buckets=STEP_BUCKETS,
                    unit="seconds", registry=ref_reg)
    return ours, ours_reg, ref, ref_reg


def _lines(text: bytes) -> list[str]:
    # prometheus_client adds `_created` samples of its own; the rest must match exactly.
    return [ln for ln in text.decode().splitlines() if "_created" not in ln]


def test_exposition_matches_prometheus_client_histogram():
    ours, ours_reg, ref, ref_reg = _pair()
    rng = random.Random(3)
    values = [rng.choice(STEP_BUCKETS) for _ in range(50)]  # bucket edges: le is inclusive
    values += [rng.lognormvariate(-4, 1.5) for _ in range(2000)] + [0.0, 120.0]
    for task in ("0", "1"):
        for v in values:
            ours.labels("job", task).observe(v)
            ref.labels("job", task).observe(v)
    assert _lines(generate_latest(ours_reg)) == _lines(generate_latest(ref_reg))
    assert _lines(generate_openmetrics(ours_reg)) == _lines(generate_openmetrics(ref_reg))


def test_exemplars_land_on_the_bucket_of_their_step():
    ours, ours_reg, ref, ref_reg = _pair()
    ours.labels("j", "0").observe(0.015, {"trace_id": "ab" * 16, "span_id": "cd" * 8})
    ours.labels("j", "0").observe(0.003)
    text = generate_openmetrics(ours_reg).decode()
    [line] = [ln for ln in text.splitlines() if " # {" in ln]
    assert line.startswith(f'{NAME}_bucket{{le="0.02",tf_job="j",tf_task="0"}} 2.0 # ')
    assert 'trace_id="' + "ab" * 16 in line and line.split("} ")[-1].startswith("0.015")


def test_bad_input_raises_for_the_caller_to_count():
    ours, *_ = _pair()
    series = ours.labels("j", "0")
    with pytest.raises(ValueError):
        series.observe("fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        series.observe(0.01, {"trace_id": "x" * 200})
    with pytest.raises(ValueError):
        ours.labels("only-one")
    series.observe(float("nan"))  # counted (in +Inf), like a step of unknown length
    buckets, _ = series.snapshot()
    assert buckets[-1][1] == 1.0 and buckets[-2][1] == 0.0


def test_no_step_is_lost_while_scrapes_fold_concurrently():
    ours, ours_reg, *_ = _pair()
    series = ours.labels("j", "0")
    stop = threading.Event()

    def scrape_all_the_time():
        while not stop.is_set():
            generate_latest(ours_reg)
            series.fold()

    scrapers = [threading.Thread(target=scrape_all_the_time) for _ in range(2)]
    for t in scrapers:
        t.start()
    n = 200_000
    for i in range(n):
        series.observe(0.001 * (i % 7))
    stop.set()
    for t in scrapers:
        t.join()
    buckets, total = series.snapshot()
    assert buckets[-1][1] == n
    assert total == pytest.approx(sum(0.001 * (i % 7) for i in range(n)))


def test_pending_steps_are_bounded_without_a_folder():
    ours, *_ = _pair()
    series = ours.labels("j", "0")
    for _ in range(MAX_PENDING + 10):
        series.observe(0.01)
    assert len(series._pending) <= MAX_PENDING
    buckets, _ = series.snapshot()
    assert buckets[-1][1] == MAX_PENDING + 10
