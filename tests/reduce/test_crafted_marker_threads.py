"""Step markers one per thread, their numbers written as text (as TensorFlow writes a
tensor's): each thread's markers are found by one sort of the markers, not a scan of all of
them per thread."""

from __future__ import annotations

import time

import numpy as np

from tfobs.analysis.step_roots import _explicit_roots
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse
from tfobs.xspace.schema import HOST_PLANE


def _threads(n: int) -> Timeline:
    """`n` threads, each one marked step (`step_num` a scalar tensor's text) holding an op."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name=HOST_PLANE)
    for mid, name in ((1, "train"), (2, "MatMul:MatMul")):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    for sid, name in ((1, "_r"), (2, "step_num")):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    for k in range(n):
        line = host.lines.add(id=1 + k, name=f"thread-{k}", timestamp_ns=1000)
        e = line.events.add(metadata_id=1, offset_ps=1000 * k, duration_ps=990)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, str_value=f"tf.Tensor({k + 1}, shape=(), dtype=int64)")
        line.events.add(metadata_id=2, offset_ps=1000 * k + 1, duration_ps=980)
    return Timeline(parse(x.SerializeToString()).plane(HOST_PLANE), 0)


def test_markers_on_many_threads_cost_a_sort() -> None:
    # Each thread intersected its markers with every marker of a text number (a sort of
    # them all per thread): 20,000 threads (a 1.5 MB capture) cost 44 s in tfobs analyze.
    n = 10_000
    host = _threads(n)
    t0 = time.process_time()
    roots, _ = _explicit_roots(host)
    took = time.process_time() - t0
    assert sorted(roots.num) == list(range(1, n + 1))  # every number read from its text
    assert took < 3.0, took  # 11 s before


def test_positions_by_value_are_each_values_positions() -> None:
    from tfobs.analysis.timeline import positions_by_value

    rng = np.random.default_rng(5)
    for size in (0, 1, 2, 50, 400):
        values = rng.integers(0, 7, size)
        got = [(v, on.tolist()) for v, on in positions_by_value(values)]
        want = [(v, np.flatnonzero(values == v).tolist()) for v in np.unique(values).tolist()]
        assert got == want
