"""Long windows of small steps (4,000 tiny `tf.function` steps in one trace, as
high-throughput jobs make): the per-step work is done for all steps at once, and gives what
the per-step code gives. Speed itself is measured in benchmarks/reduce_speed.py, which has
this capture among its defaults."""

from __future__ import annotations

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
    assert all(len(x.top_events) == 5 for x in s.steps.items)


def _per_step(groups: list, top_n: int, names: dict, found: object,
              base_ns: int) -> list[tuple]:
    """The top events step by step, as GPU captures rank them."""
    cands = reduction._host_candidates(groups, top_n, names, found)  # type: ignore[arg-type]
    return [reduction._top_events(g, c, top_n, [], base_ns)
            for g, c in zip(groups, cands, strict=True)]


@pytest.mark.parametrize("capture", [p for p in capture_paths() if "cpu" in p.name],
                         ids=lambda p: p.name.split(".")[0])
def test_top_events_ranked_at_once_equal_step_by_step(
        capture: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = capture.read_bytes()
    at_once = reduction.reduce_xspace(data, top_n=3)
    monkeypatch.setattr(reduction, "_host_top_events", _per_step)
    step_by_step = reduction.reduce_xspace(data, top_n=3)
    assert [s.top_events for s in at_once.steps.items] == [
        s.top_events for s in step_by_step.steps.items]
    assert at_once == step_by_step


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
