"""A capture's window on the wall clock: from the profiler's own start and stop where the
capture has them (a `Task Environment` plane, TensorFlow 2.17 on, JAX), else from its events.

TensorFlow 2.16 writes neither: its line timestamps count from the profiler's start. The
reduction then takes the window's length from its events and leaves `start_ns` at 0 (no
wall clock in the file); the runtime places the summary at the window's own start
(`WindowSummary.placed_at`), as `tests/runtime/test_runtime.py` checks on a live window.
"""

from __future__ import annotations

import pytest

import tfobs
from tests.conftest import CAPTURES
from tfobs.xspace import schema

TF216 = CAPTURES / "generated__tf2.16cpu__checkpoint_in_steps.xplane.pb"
TF221 = CAPTURES / "generated__tf2.21cpu__checkpoint_in_steps.xplane.pb"


def _planes_and_extent(path) -> tuple[list[str], float]:
    """The capture's plane names and, read with protobuf alone, its events' extent (s)."""
    space = schema.XSpace().FromString(path.read_bytes())
    begins, ends = [], []
    for plane in space.planes:
        for line in plane.lines:
            for e in line.events:
                at = line.timestamp_ns * 1000 + e.offset_ps
                begins.append(at)
                ends.append(at + e.duration_ps)
    return [p.name for p in space.planes], (max(ends) - min(begins)) / 1e12


def test_a_capture_without_the_profilers_start_takes_its_length_from_its_events() -> None:
    planes, extent = _planes_and_extent(TF216)
    assert planes == ["/host:CPU"]  # no Task Environment: nothing says when it started
    s = tfobs.analyze(TF216)
    assert s.start_ns == 0
    assert s.duration_s == pytest.approx(extent, abs=1e-9)
    assert sum(st.duration_s for st in s.steps.items) < s.duration_s
    # The figures that weigh against the window have one: the run's 6 writes, and the rule
    # fires as it does on 2.21 (it said nothing while the window had no length).
    assert s.ops.checkpoint_writes == 6
    assert any(a.code == "checkpoint_writes" for a in s.advice)
    # Its times count from the profiler's start, not from 1970 on a wall clock.
    assert 0 <= s.steps.items[0].start_ns < 10**12


def test_placed_at_moves_every_time_onto_the_wall_clock() -> None:
    s = tfobs.analyze(TF216)
    at = 1_800_000_000_000_000_000
    placed = s.placed_at(at)
    assert placed.start_ns == at and placed.duration_s == s.duration_s
    for old, new in zip(s.steps.items, placed.steps.items, strict=True):
        assert new.start_ns == old.start_ns + at
        assert [e.start_ns for e in new.top_events] == [e.start_ns + at for e in old.top_events]
        assert new.breakdown_s == old.breakdown_s and new.duration_s == old.duration_s
    assert placed.to_dict()["steps"]["items"][0]["start_ns"] == s.steps.items[0].start_ns + at


def test_a_capture_on_the_wall_clock_keeps_its_own_times() -> None:
    s = tfobs.analyze(TF221)
    assert "Task Environment" in _planes_and_extent(TF221)[0]
    assert s.start_ns > 10**18 and s.placed_at(1) is s
