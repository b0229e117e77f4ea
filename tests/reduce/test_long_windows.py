"""Long windows of small steps (4,000 tiny `tf.function` steps in one trace, as
high-throughput jobs make): the per-step work is done for all steps at once, and gives what
the per-step code gives. Speed itself is measured in benchmarks/reduce_speed.py, which has
this capture among its defaults."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

import tfobs.analysis.pipeline as reduction
from tests.conftest import CAPTURES, capture_paths
from tests.support.xprof_reference import xprof_steps

LONG = CAPTURES / "generated__tf2.21cpu__tiny_steps_long.xplane.pb"


def test_a_long_window_has_xprofs_steps() -> None:
    pytest.importorskip("xprof")
    s = reduction.analyze(LONG)
    steps, _ = xprof_steps(LONG)
    assert s.steps.count == len(steps) == 3998  # 4,000 marked, first and last dropped
    assert [int(r["name"].split()[-1]) for r in steps] == [x.step_num for x in s.steps.items]
    # 5 top events a step, 512 kept in all (the window's longest)
    assert sum(len(x.top_events) for x in s.steps.items) == 512
    assert s.steps.top_events_left_out == 5 * 3998 - 512


def _per_step(groups: list, top_n: int, names: dict, found: object,
              base_ns: int, window: tuple, index: object = None,
              programs: object = None) -> tuple[list[tuple], int]:
    """The top events step by step and bounded as GPU captures rank and bound them (a
    host-only JAX job's XLA CPU ops among the candidates, as at once)."""
    cands = reduction._host_candidates(groups, top_n, names, found,  # type: ignore[arg-type]
                                       programs=programs)  # type: ignore[arg-type]
    return reduction._window_tops([reduction._top_events(c, top_n, [], base_ns)
                                   for c in cands], *window)


@pytest.mark.parametrize("capture", [p for p in capture_paths() if "cpu" in p.name],
                         ids=lambda p: p.name.split(".")[0])
def test_top_events_ranked_at_once_equal_step_by_step(
        capture: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = capture.read_bytes()
    # 7 in all: the window's bound cuts into most captures' steps (3 events each).
    at_once = [reduction.reduce_xspace(data, top_n=3, max_top_events=m) for m in (512, 7)]
    monkeypatch.setattr(reduction, "_host_top_events", _per_step)
    step_by_step = [reduction.reduce_xspace(data, top_n=3, max_top_events=m)
                    for m in (512, 7)]
    for a, b in zip(at_once, step_by_step, strict=True):
        assert [s.top_events for s in a.steps.items] == [s.top_events for s in b.steps.items]
        assert a == b


@pytest.mark.parametrize("capture", [p for p in capture_paths() if "cpu" in p.name],
                         ids=lambda p: p.name.split(".")[0])
def test_breakdown_from_the_typed_columns_equals_the_per_step_chunks(
        capture: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = capture.read_bytes()
    from_columns = reduction.reduce_xspace(data)
    chunks = reduction.bd.step_breakdowns

    def from_chunks(groups: list, has_device: bool, *args: object, typed: object = None,
                    **kw: object) -> object:
        return chunks(groups, has_device, *args, typed=None, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(reduction.bd, "step_breakdowns", from_chunks)
    assert reduction.reduce_xspace(data) == from_columns


def test_a_long_window_keeps_its_longest_top_events_and_counts_the_rest() -> None:
    """4,000 steps of 5 top events each: the summary keeps the window's 512 longest (ties
    to the earlier step), each step's kept events the first of its own, as a trace's
    span cap would pick them; the rest are counted."""
    unbounded = reduction.analyze(LONG, max_top_events=10**9)
    s = reduction.analyze(LONG)
    every = [(e, k, j) for k, st in enumerate(unbounded.steps.items)
             for j, e in enumerate(st.top_events)]
    assert len(every) == 5 * s.steps.count
    longest = sorted(every, key=lambda ekj: (-ekj[0].duration_s, ekj[1], ekj[2]))[:512]
    kept = [(e, k, j) for k, st in enumerate(s.steps.items) for j, e in enumerate(st.top_events)]
    assert len(kept) == 512
    assert {(k, e) for e, k, _ in kept} == {(k, e) for e, k, _ in longest}
    for a, b in zip(s.steps.items, unbounded.steps.items, strict=True):
        assert a.top_events == b.top_events[:len(a.top_events)]  # a prefix of its own
    assert s.steps.top_events_left_out == len(every) - 512
    assert dataclasses.replace(s, steps=dataclasses.replace(
        s.steps, items=unbounded.steps.items, top_events_left_out=0)) == unbounded


@pytest.mark.parametrize("capture", [
    LONG,
    CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb",
    CAPTURES / "recorded__h100_jax0.11.2__launch_bound_tiny_ops.xplane.pb",  # device events
], ids=lambda p: p.name.split(".")[0])
@pytest.mark.parametrize("max_spans", [3, 12, 40, 512])
def test_a_bounded_window_makes_the_trace_an_unbounded_one_makes(
        capture: pathlib.Path, max_spans: int) -> None:
    """The same spans and the same count of spans cut, whether the reduction bounds the
    top events at the span cap or keeps every step's."""
    from tfobs.export.otel import plan_window
    from tfobs.window import WindowRecord

    unbounded = reduction.analyze(capture, max_top_events=10**9)
    bounded = reduction.analyze(capture, max_top_events=max_spans)
    assert sum(len(s.top_events) for s in bounded.steps.items) <= max_spans
    record = WindowRecord(index=0, start_ns=unbounded.start_ns,
                          end_ns=unbounded.start_ns + int(unbounded.duration_s * 1e9),
                          first_step=-1, last_step=-1, outcome="captured")
    a = plan_window(unbounded, record, top_n=5, max_spans=max_spans)
    b = plan_window(bounded, record, top_n=5, max_spans=max_spans)
    assert a.cut == b.cut
    assert [(x.name, x.start_ns, x.end_ns, x.parent) for x in a.spans[1:]] == [
        (x.name, x.start_ns, x.end_ns, x.parent) for x in b.spans[1:]]


@pytest.mark.parametrize("seed", range(6))
def test_packed_orders_equal_the_lexsorts_they_replace(seed: int) -> None:
    """The top events' orders on random rows full of ties, and with values too wide to
    pack (the lexsort itself then)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    step = np.sort(rng.integers(0, 400, n))
    dur = rng.integers(0, 50, n) * (10 ** int(rng.integers(0, 14)))
    name = rng.integers(0, 30, n)
    assert (reduction._by_step_longest_then_name(step, dur, name)
            == np.lexsort((name, -dur, step))).all()
    wide = dur + (1 << 61)
    assert (reduction._by_step_longest_then_name(step, wide, name)
            == np.lexsort((name, -wide, step))).all()
    in_time = rng.permutation(400)
    dur_s = dur / 1e12
    for limit in (0, 1, 7, n // 2, n, n + 3):
        want = np.zeros(n, bool)
        want[np.lexsort((np.arange(n), in_time[step], -dur_s))[:limit]] = True
        assert (reduction._window_longest(in_time, step, dur_s, limit) == want).all()


def test_the_advice_reads_the_reductions_step_sums_and_keeps_no_window_alive() -> None:
    """The rules' step sums are the reduction's own (not added again over 3,998 steps),
    equal to adding them step by step; the cache holds the steps weakly, so a window's
    thousands of steps are freed with its summary, not kept until the next window."""
    import gc
    import weakref

    from tfobs.analysis.advice import rule

    s = reduction.analyze(LONG)
    ref = rule._LAST[0]
    assert ref is not None and ref() is s.steps
    cached = rule._step_sums(s.steps)
    column = rule.step_seconds(s.steps, "input")  # the reduction's own array
    assert rule._LAST[3] is not None
    rule._LAST = (None, 0.0, {}, None)  # recomputed step by step
    assert rule._step_sums(s.steps) == cached
    assert column.tolist() == [st.breakdown_s["input"] for st in s.steps.items]
    assert rule.step_seconds(s.steps, "input").tolist() == column.tolist()
    items = weakref.ref(s.steps)
    del s, ref
    gc.collect()
    assert items() is None and rule._LAST[0] is not None and rule._LAST[0]() is None


def test_a_cpu_window_makes_no_object_per_step_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled walk's steps are columns (`steps.StepGroups`): the reduction of a CPU
    window reads their spans, typed events and members and makes no StepGroup; a reader
    that asks for one gets the same object each time, with the walk's figures."""
    from tfobs.analysis import steps

    made: list[int] = []
    group = steps._GroupColumns.group
    monkeypatch.setattr(steps._GroupColumns, "group",
                        lambda self, k: made.append(k) or group(self, k))
    s = reduction.analyze(LONG)
    assert s.steps.count == 3998 and made == []
    from tfobs.analysis.timeline import Timeline
    from tfobs.xspace.reader import parse

    found = steps.find_steps(Timeline(parse(LONG.read_bytes()).plane("/host:CPU")))
    assert isinstance(found.groups, steps.StepGroups) and made == []
    tail = found.groups[-3:]
    assert isinstance(tail, steps.StepGroups) and len(tail) == 3
    assert tail[0] is found.groups[len(found.groups) - 3]
    assert steps.step_nums(tail) == [g.step_num for g in tail]
    assert found.spans is not None
    assert [g.begin_ps for g in found.groups] == found.spans[0].tolist()
    assert [g.name for g in tail] == [f"train {n}" for n in steps.step_nums(tail)]
