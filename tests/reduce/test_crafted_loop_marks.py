"""Functional While ops' async marks in a crafted order: every start of one op name and step
id before any of its dones pairs them in the marks' count, not their count squared."""

from __future__ import annotations

import time

from tfobs.analysis.loops import functional_loops
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse
from tfobs.xspace.schema import HOST_PLANE


def _marks(n: int) -> bytes:
    """A host plane of `n` While starts of one name and step id, then their `n` dones, then
    one body start: the loop's runs nest, the first one begun the last one done."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name=HOST_PLANE)
    names = ("ExecutorState::ProcessAsync::Start", "ExecutorState::ProcessAsync::Done",
             "WhileOp-StartBody")
    for mid, name in enumerate(names, 1):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    for sid, name in enumerate(("name", "kernel_type", "step_id", "While", "rnn/while"), 1):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    line = host.lines.add(id=1, name="tf_Compute/1", timestamp_ns=1)
    for mid, at in ((1, 0), (2, n)):
        for i in range(n):
            e = line.events.add(metadata_id=mid, offset_ps=at + i, duration_ps=1)
            e.stats.add(metadata_id=1, ref_value=5)
            e.stats.add(metadata_id=2, ref_value=4)
            e.stats.add(metadata_id=3, int64_value=7)
    line.events.add(metadata_id=3, offset_ps=2 * n, duration_ps=1)
    return x.SerializeToString()


def test_starts_all_open_before_their_dones_pair_in_linear_time() -> None:
    # Each done took the oldest open start off the front of a list, moving every start
    # still open: 320,000 open at once cost 12 s of a 27 MB capture's 21 s.
    n = 300_000
    host = Timeline(parse(_marks(n)).plane(HOST_PLANE), 0)
    t0 = time.process_time()
    loops = functional_loops(host, [(0, 10**9)])
    took = time.process_time() - t0
    assert loops.seconds == 2 * n / 1e12  # from the first start (0) to the last done (2n)
    assert loops.scopes == ("rnn",)
    assert took < 6.0, took


def test_runs_pair_each_done_with_the_oldest_start_open() -> None:
    host = Timeline(parse(_marks(3)).plane(HOST_PLANE), 0)
    loops = functional_loops(host, [(0, 10**9)])
    assert loops.seconds == 6 / 1e12 and loops.scopes == ("rnn",)
