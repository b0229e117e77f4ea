"""A loader that marks its own stages (grain's `_ipl_stage_*` stats), read as XProf 2.24.2 reads
them: the outermost stage in a step is input wait, each stage object a host op, the stage's
category its input kind. Real grain captures (tools/record_jax_cpu_captures.py, grain 0.2.18)
and a synthetic one for the rule no grain capture here exercises (a worker's stage that
consumes a stage of the main thread), each held against XProf run on it."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.xprof_reference import xprof_steps
from tfobs.analysis import input_stages
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse

THREADS = CAPTURES / "generated__jax0.10cpu__grain_threads_steps.xplane.pb"
WORKERS = CAPTURES / "generated__jax0.10cpu__grain_workers_steps.xplane.pb"
CONTEXT = 9999  # a producer/consumer type of the loader's own, as XProf's grain test has


def _host(path: pathlib.Path) -> Timeline:
    view = parse(path.read_bytes()).plane(schema.HOST_PLANE)
    assert view is not None
    return Timeline(view)


def _codes(s: tfobs.WindowSummary) -> list[str]:
    return [a.code for a in s.advice]


def test_the_step_waits_in_the_outermost_stage_as_xprof_times_it() -> None:
    pytest.importorskip("xprof")
    s = tfobs.analyze(WORKERS)
    ref, _ = xprof_steps(WORKERS)
    assert s.input_bound.verdict == "highly"
    assert [st.breakdown_s["input"] for st in s.steps.items] == pytest.approx(
        [r["input"] for r in ref], abs=1e-9)
    # the input is the main thread's outermost stage: the one it encloses is not
    roots = input_stages.root_stages(_host(WORKERS))
    host = _host(WORKERS)
    assert roots is not None
    named = {host.names[int(m)] for m in host.columns.mid[np.flatnonzero(roots)].tolist()}
    assert named == {"InterleaveDatasetIterator.__next__"}
    assert s.input_pipeline.loader_stages == ("InterleaveDatasetIterator.__next__",)
    assert s.input_pipeline.loader_input_s == pytest.approx(s.breakdown_s["input"])


def test_each_stage_object_is_a_row_typed_by_its_category() -> None:
    s = tfobs.analyze(WORKERS)
    rows = [o for o in s.ops.top if o.name == "ThreadPrefetchDatasetIterator.__next__"]
    assert len(rows) == 2 and {o.op_type for o in rows} == {"prefetch"}  # two stage ids
    assert sum(o.count for o in rows) == 12
    (interleave,) = [o for o in s.ops.top if o.name == "InterleaveDatasetIterator.__next__"]
    assert interleave.op_type == "preprocessing"
    # its self time: its duration less the prefetch stage inside it
    assert interleave.self_s < 0.01 * interleave.total_s


def test_stage_categories_give_the_input_kinds() -> None:
    """ "read" is a demanded file read, "preprocessing" preprocessing, "prefetch" no input
    op (XProf's IsInputOpNew)."""
    s = tfobs.analyze(THREADS)
    ip = s.input_pipeline
    assert ip.host_input_total_s["demanded_file_read"] > 0
    assert ip.host_input_total_s["preprocessing"] > 0
    assert {o.op_type for o in ip.top_input_ops} == {"read", "preprocessing"}
    assert ip.xprof_only_input_s == 0.0


def test_the_fix_names_the_loaders_knobs_not_a_loader_to_add() -> None:
    for path in (THREADS, WORKERS):
        s = tfobs.analyze(path)
        (bound,) = [a for a in s.advice if a.code == "input_bound"]
        assert "worker_count" in bound.fix and "prefetch_buffer_size" in bound.fix
        assert s.input_pipeline.loader_stages[0] in bound.fix
        # The Python inside the stages is the wait XProf calls input, not host compute.
        assert "python_in_step" not in _codes(s)
        assert s.steps.python_traced_s < 0.05 * s.steps.mean_s


def test_a_capture_without_stages_has_no_loader_figures() -> None:
    s = tfobs.analyze(CAPTURES / "generated__jax0.10cpu__tfdata_loader_steps.xplane.pb")
    assert s.input_pipeline.loader_input_s == 0.0 and s.input_pipeline.loader_stages == ()
    assert input_stages.root_stages(
        _host(CAPTURES / "generated__jax0.10cpu__step_annotation.xplane.pb")) is None


def test_the_loader_figures_round_trip_through_json() -> None:
    s = tfobs.analyze(THREADS)
    back = tfobs.WindowSummary.from_dict(s.to_dict())
    assert back.input_pipeline.loader_stages == s.input_pipeline.loader_stages
    assert back.input_pipeline.loader_input_s == s.input_pipeline.loader_input_s


def _consumer_space() -> bytes:
    """Five steps on a main thread, each fetching from a prefetch stage that produces
    (`_pt`, `_p`) what a worker thread's map stage consumes (`_ct`, `_c`), then a short
    update: the worker's stage joins the step by that link and, as a descendant of the
    main thread's stage, is host compute, not input wait of its own (it ends after the
    prefetch stage, so the two readings differ)."""
    space = schema.XSpace()
    plane = space.planes.add(id=1, name=schema.HOST_PLANE)
    stats = ["_r", "step_num", "_ipl_stage_name", "_ipl_stage_id", "_ipl_stage_cat",
             "_pt", "_p", "_ct", "_c"]
    for k, name in enumerate(stats, 1):
        plane.stat_metadata[k].id, plane.stat_metadata[k].name = k, name
    sid = {name: k for k, name in enumerate(stats, 1)}
    for k, name in enumerate(["train", "PrefetchDatasetIterator.__next__",
                              "MapDataset.__getitem__", "update"], 1):
        plane.event_metadata[k].id, plane.event_metadata[k].name = k, name
    main = plane.lines.add(id=1, display_id=1, name="main", timestamp_ns=1_000)
    worker = plane.lines.add(id=2, display_id=2, name="worker", timestamp_ns=1_000)

    def event(line: object, mid: int, at_us: int, us: int, **values: object) -> None:
        e = line.events.add(metadata_id=mid, offset_ps=at_us * 10**6,  # type: ignore
                            duration_ps=us * 10**6)
        for key, value in values.items():
            st = e.stats.add(metadata_id=sid[key])
            if isinstance(value, str):
                st.str_value = value
            else:
                st.int64_value = int(value)  # type: ignore[call-overload]

    for i in range(5):
        t = 200 * i
        event(main, 1, t, 100, _r=1, step_num=i)
        event(main, 2, t + 10, 60, _ipl_stage_name="Prefetch", _ipl_stage_id=7,
              _ipl_stage_cat="prefetch", _pt=CONTEXT, _p=i + 1)
        event(main, 4, t + 70, 5)
        # the element made after the main thread's stage gave up waiting
        event(worker, 3, t + 75, 20, _ipl_stage_name="MapDataset", _ipl_stage_id=8,
              _ipl_stage_cat="preprocessing", _ct=CONTEXT, _c=i + 1)
    return space.SerializeToString()


def test_a_stage_that_consumes_another_threads_stage_is_no_input_wait(
        tmp_path: pathlib.Path) -> None:
    pytest.importorskip("xprof")
    path = tmp_path / "consumer.xplane.pb"
    path.write_bytes(_consumer_space())
    s = tfobs.analyze(path)
    ref, _ = xprof_steps(path)
    assert len(ref) == s.steps.count == 5
    for st, r in zip(s.steps.items, ref, strict=True):
        assert st.breakdown_s["input"] == pytest.approx(r["input"], abs=1e-12)
        assert st.breakdown_s["host_compute"] == pytest.approx(r["host_compute"], abs=1e-12)
    # 60 us of input a step, the prefetch stage; 25 us of host compute, the update and
    # the worker's map
    assert s.steps.items[0].breakdown_s["input"] == pytest.approx(60e-6)
    assert s.steps.items[0].breakdown_s["host_compute"] == pytest.approx(25e-6)
    roots = input_stages.root_stages(_host(path))
    assert roots is not None and int(roots.sum()) == 5
