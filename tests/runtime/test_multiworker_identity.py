"""Worker identity (TF_CONFIG task, cluster hash, local rank) on every series, bounded label
values, and windows that stay on the job's step numbers when a worker joins late or its
steps jump."""

from __future__ import annotations

import json
import logging
import re

import prometheus_client
import pytest

from tfobs.config import Config
from tfobs.export.catalog import IDENTITY_LABELS
from tfobs.health import HealthLedger
from tfobs.identity import runs_steps, worker_identity

CLUSTER = {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}


def _tf_config(task_type: str, index: int, cluster: dict | None = None) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster or CLUSTER,
                                     "task": {"type": task_type, "index": index}})}


def test_identity_names_task_cluster_and_local_rank():
    chief = worker_identity(environ=_tf_config("chief", 0))
    w1 = worker_identity(environ={**_tf_config("worker", 1), "LOCAL_RANK": "3"})
    assert chief["tf_job"] == "chief" and chief["tf_task"] == "0"
    assert w1 == {"tf_job": "worker", "tf_task": "1", "tf_cluster": chief["tf_cluster"],
                  "local_rank": "3"}
    # Every task of one job shares tf_cluster (key order in the JSON does not matter) ...
    reordered = dict(reversed(list(CLUSTER.items())))
    assert worker_identity(environ=_tf_config("worker", 0, reordered))["tf_cluster"] == \
        chief["tf_cluster"]
    # ... another job gets another one; no TF_CONFIG gives "none".
    other = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    assert worker_identity(environ=_tf_config("worker", 0, other))["tf_cluster"] != \
        chief["tf_cluster"]
    assert len(chief["tf_cluster"]) == 8
    assert worker_identity(environ={}) == {"tf_job": "local", "tf_task": "0",
                                           "tf_cluster": "none", "local_rank": "0"}
    assert worker_identity(environ={"OMPI_COMM_WORLD_LOCAL_RANK": "2"})["local_rank"] == "2"


def test_huge_or_odd_task_types_become_bounded_label_values():
    # A value changed to fit ends in 8 hex digits of the original (distinct stays distinct).
    ident = worker_identity(environ=_tf_config("w" * 5000 + '"\n{}', 7))
    assert len(ident["tf_job"]) == 32 and re.fullmatch(r"w{23}-[0-9a-f]{8}", ident["tf_job"])
    ident = worker_identity(environ=_tf_config("my worker/α", 0))
    assert re.fullmatch(r"my_worker_-[0-9a-f]{8}", ident["tf_job"])
    ident = worker_identity(environ=_tf_config("worker", "9" * 100))
    assert re.fullmatch(r"9{23}-[0-9a-f]{8}", ident["tf_task"])
    cfg = Config.load(environ={}, tf_job="x" * 32, tf_task="a.b:c-d_e")
    ident = worker_identity(cfg, environ=_tf_config("worker", 1))
    assert ident["tf_job"] == "x" * 32 and ident["tf_task"] == "a.b:c-d_e"  # options: as given
    assert worker_identity(environ=_tf_config("worker", 3))["tf_job"] == "worker"  # plain: as is


def test_parameter_servers_and_evaluators_run_no_steps():
    assert not runs_steps({"tf_job": "ps"}) and not runs_steps({"tf_job": "evaluator"})
    assert runs_steps({"tf_job": "chief"}) and runs_steps({"tf_job": "worker"})
    assert runs_steps({"tf_job": "local"})


def test_every_series_carries_the_identity_labels(monkeypatch):
    from tfobs.export.prometheus import PrometheusExporter

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER,
                                                "task": {"type": "worker", "index": 1}}))
    monkeypatch.setenv("LOCAL_RANK", "1")
    cfg = Config.load(environ={}, metrics_port=-1)
    health = HealthLedger()
    exp = PrometheusExporter(cfg, cfg.identity(), health)
    exp.step_sink.append(0.01)
    health.count_window("captured")
    health.count_error("capture")
    expected = cfg.identity()
    seen = 0
    for fam in exp.registry.collect():
        for sample in fam.samples:
            assert {k: sample.labels[k] for k in IDENTITY_LABELS} == expected, sample
            seen += 1
    assert seen > 10
    text = prometheus_client.generate_latest(exp.registry).decode()
    assert 'tf_job="worker"' in text and 'local_rank="1"' in text


# -- windows aligned to the job's step numbers ---------------------------------------------

tf = pytest.importorskip("tensorflow")


class _Recorder:
    """Records the windows a Runtime opens (no profiler: the slot is replaced)."""

    def __init__(self, runtime) -> None:
        self.opened: list[int] = []

        def start(wake=None):
            self.opened.append(1)
            return None  # "started"

        runtime.slot.start = start


def _runtime(tmp_path, monkeypatch=None, tf_config: dict | None = None, **kw):
    from tfobs.runtime import Runtime

    if tf_config is not None:
        monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    # Fixed-length windows: these tests are about where windows start and end on each
    # worker (test_window_length.py covers lengths steered by the export's cost).
    opts = {"metrics_port": -1, "interval_steps": 100, "window_steps": 10,
            "first_window_step": 20, "overhead_budget": 0.5, "capture_dir": str(tmp_path),
            "export_step_stretch": 0}
    opts.update(kw)
    return Runtime(Config.load(environ={}, **opts))


def _drive(rt, steps) -> list[tuple[int, int]]:
    """Run step markers through the runtime's hooks; (first, last) of each window closed."""
    rec = _Recorder(rt)
    w = rt._windows
    windows = []
    for n in steps:
        rt.step_begin(n)
        window = w.tracing
        rt.step_end(n, 0.001)
        if window is not None and w.tracing is None:
            windows.append((window.record.first_step, window.record.last_step,
                            window.first_step))
            w.release(window)  # as if reduced
    assert len(rec.opened) == len(windows)
    return windows


def test_a_worker_on_time_captures_the_aligned_steps(tmp_path):
    rt = _runtime(tmp_path)
    got = _drive(rt, range(0, 260))
    assert [(a, b) for a, b, _ in got] == [(20, 29), (100, 109), (200, 209)]


def test_a_worker_that_starts_late_ends_its_window_with_the_others(tmp_path):
    rt = _runtime(tmp_path)
    # Resumed from a checkpoint at step 105: the others' window is 100-109.
    got = _drive(rt, range(105, 215))
    assert [(a, b) for a, b, _ in got] == [(105, 109), (200, 209)]
    # Joined after the others' window closed: waits for the next aligned start.
    rt2 = _runtime(tmp_path)
    got = _drive(rt2, range(150, 215))
    assert [(a, b) for a, b, _ in got] == [(200, 209)]


def test_steps_that_jump_stay_on_the_aligned_window(tmp_path):
    # Keras steps_per_execution=4 reports every 4th step: 0, 4, ..., 96, 100, 104, ...
    rt = _runtime(tmp_path, first_window_step=22)
    got = _drive(rt, range(0, 220, 4))
    # Every worker jumps alike, so all close on the same step (the first past the window).
    assert [(a, b) for a, b, _ in got] == [(24, 32), (100, 112), (200, 212)]
    assert [nominal for _, _, nominal in got] == [22, 100, 200]


def test_parameter_server_schedules_no_window_but_on_demand_works(tmp_path, monkeypatch):
    rt = _runtime(tmp_path, monkeypatch, {"cluster": CLUSTER, "task": {"type": "ps", "index": 0}})
    assert rt.identity["tf_job"] == "ps"
    assert _drive(rt, range(0, 150)) == []
    rt.running = True
    assert rt.capture_now()
    got = _drive(rt, range(150, 170))
    assert [(a, b) for a, b, _ in got] == [(150, 159)]


def test_runtime_uses_the_identity_rule_for_stepless_tasks(tmp_path, monkeypatch):
    from tfobs.runtime import Runtime

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": CLUSTER,
                                                "task": {"type": "evaluator", "index": 0}}))
    cfg = Config.load(environ={}, metrics_port=-1, capture_dir=str(tmp_path))
    rt = Runtime(cfg)
    assert rt.identity["tf_job"] == "evaluator"
    assert _drive(rt, range(0, 600)) == []


@pytest.mark.slow  # starts the metrics HTTP server
def test_port_taken_is_logged_and_on_the_handle(tmp_path, caplog):
    import tfobs

    caplog.set_level(logging.INFO, logger="tfobs")
    handle = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", capture_dir=str(tmp_path),
                          nvml=False)
    try:
        assert handle is not None and handle.metrics_port > 0
        logged = [r.getMessage() for r in caplog.records if "serving metrics" in r.getMessage()]
        assert logged and f"port {handle.metrics_port} " in logged[0], logged
    finally:
        tfobs.disable()
    off = _runtime(tmp_path)
    assert off.metrics_port == -1


def test_every_span_carries_the_identity_as_resource_attributes():
    from tfobs.runtime.info import worker_resource

    ident = worker_identity(environ={**_tf_config("worker", 1), "LOCAL_RANK": "2"})
    attrs = worker_resource(ident)
    assert {k: attrs[k] for k in IDENTITY_LABELS} == ident
    assert attrs["local_rank"] == "2" and attrs["tf_job"] == "worker"
