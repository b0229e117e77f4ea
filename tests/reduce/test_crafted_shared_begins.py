"""Steps made to hurt the reduction (red team 3): many steps sharing one begin, as many
threads' markers of one moment do, cost each thread's events a search, not a scan."""

from __future__ import annotations

import random
import time
import types

import numpy as np

from tfobs.analysis.python_time import holds_markers


def _line(start: list[int], end: list[int]) -> types.SimpleNamespace:
    """A host line's columns as holds_markers reads them (times from the line's start)."""
    return types.SimpleNamespace(start_arr=np.array(start, np.int64) - 5,
                                 end_arr=np.array(end, np.int64) - 5, start_ps=5)


def test_steps_sharing_a_begin_are_searched_not_scanned() -> None:
    # 10,000 steps begin at 0 (markers of as many threads) and a thread's 10,000 events
    # begin there too, none ending where a step does: each event read every step's end
    # (8,000 steps on 8,000 threads, a 0.5 MB capture: 14 s in tfobs analyze).
    n = 10_000
    ends = list(range(1, n + 1))
    random.Random(3).shuffle(ends)
    steps = [(0, e) for e in ends]
    t0 = time.process_time()
    assert not holds_markers(_line([0] * n, list(range(n + 1, 2 * n + 1))), steps)
    assert holds_markers(_line([0] * n, list(range(n + 1, 2 * n)) + [7_777]), steps)
    took = time.process_time() - t0
    assert took < 2.0, took


def test_a_marker_among_steps_sharing_its_begin_is_found() -> None:
    steps = [(10, 30), (10, 20), (0, 5), (10, 25)]
    assert holds_markers(_line([10], [25]), steps)
    assert holds_markers(_line([3, 10], [4, 30]), steps)
    assert not holds_markers(_line([10, 10], [21, 40]), steps)
    assert not holds_markers(_line([0, 11], [6, 20]), steps)
