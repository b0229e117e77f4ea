"""Python run inside the steps, read from the Python tracer's events.

With the Python tracer on (JAX's `jax.profiler.trace` turns it on by default; TensorFlow's
`python_tracer_level=1`), every Python function call is a host event named `$<file>:<line>
<function>` or `$<module> <builtin>`. XProf types them as host compute like any host event,
so a step that waits 2 ms in `time.sleep` for a Python data loader reads as 2 ms of host
compute and "NOT input-bound". The time a Python event is the innermost event of its thread
inside the steps is the Python the step ran.

Innermost, not self time: the tracer's events overlap the annotations around them by a
few microseconds (a function returning the step marker ends after the marker begins), so
a nesting walk would take the whole marker for the function's own time. At each instant
the innermost event is the one that began last among those still open.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfobs.analysis.gpu_idle import merge
from tfobs.analysis.timeline import LineData, Timeline, id_array, member

PYTHON_EVENT_PREFIX = "$"
TOP_FUNCTIONS = 3


def python_in_steps(host: Timeline | None, spans: Sequence[tuple[int, int]]
                    ) -> tuple[float, tuple[str, ...]]:
    """(seconds of Python inside the steps on the thread that runs them, that thread's
    functions with the most of it, longest first, at most TOP_FUNCTIONS, names without the
    tracer's `$`). `spans`: the steps as (begin, end) ps on the host's time base; the
    thread that runs them is the one holding their markers (a Python loader thread's work
    overlaps the steps without being theirs), the most Python where no thread holds them."""
    if host is None or not spans:
        return 0.0, ()
    py = id_array(host.mids_where(lambda n: n.startswith(PYTHON_EVENT_PREFIX)))
    if not py.size:
        return 0.0, ()
    steps = np.array(merge(sorted(spans)), np.int64).reshape(-1, 2)
    lines = [ld for ld in host.lines if member(ld.mid_arr, py, ld.dense_top).any()]
    marking = [ld for ld in lines if _holds_markers(ld, spans)]
    best: tuple[int, np.ndarray, np.ndarray] = (0, py[:0], py[:0])
    for ld in marking or lines:
        mids, ps = _innermost_python(ld, py, steps)
        total = int(ps.sum())
        if total > best[0]:
            best = (total, mids, ps)
    total, mids, ps = best
    if not total:
        return 0.0, ()
    names, at = np.unique(mids, return_inverse=True)
    sums = np.zeros(names.size, np.int64)
    np.add.at(sums, at, ps)
    label = [host.names[m] for m in names.tolist()]
    top = sorted(range(names.size), key=lambda j: (-int(sums[j]), label[j]))[:TOP_FUNCTIONS]
    return total / 1e12, tuple(label[j][len(PYTHON_EVENT_PREFIX):] for j in top)


def _holds_markers(ld: LineData, spans: Sequence[tuple[int, int]]) -> bool:
    """Some event of the line spans a step exactly: that step's marker."""
    begin = np.array(sorted(b for b, _ in spans), np.int64)
    start = ld.start_arr + ld.start_ps
    at = np.searchsorted(begin, start)
    hit = at < begin.size
    hit[hit] &= begin[at[hit]] == start[hit]
    if not hit.any():
        return False
    ends = {(b, e) for b, e in spans}
    stop = ld.end_arr + ld.start_ps
    return any((b, e) in ends for b, e in zip(start[hit].tolist(), stop[hit].tolist(),
                                              strict=True))


def _innermost_python(ld: LineData, py: np.ndarray, steps: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(metadata id, ps) of each stretch of the line, inside a step, whose innermost event
    is a Python event. Stretches run between consecutive event and step boundaries; the
    innermost event of one is the last-begun event still open at its start."""
    start = ld.start_arr + ld.start_ps
    end = ld.end_arr + ld.start_ps
    cuts = np.unique(np.concatenate([start, end, steps.ravel()]))
    lo, hi = cuts[:-1], cuts[1:]
    k = np.searchsorted(steps[:, 0], lo, side="right") - 1
    in_step = (k >= 0) & (hi <= steps[np.maximum(k, 0), 1])
    lo, hi = lo[in_step], hi[in_step]
    owner = _last_open(start, end, lo)
    found = owner >= 0
    lo, hi, owner = lo[found], hi[found], owner[found]
    mids = ld.mid_arr[owner]
    is_py = member(mids, py)
    return mids[is_py], (hi - lo)[is_py]


def _last_open(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the last event (by start; `start` sorted) that has begun by
    then and ends after it, or -1: below the first unbegun event, skip back over runs of
    events ended by then, in blocks of 2^k found with a table of block maxima of `end`."""
    n = start.size
    pos = np.searchsorted(start, at, side="right")  # events [0, pos) have begun
    if not n:
        return pos - 1
    # table[k][i] = max(end[i : i + 2^k])
    table = [end]
    while (1 << len(table)) <= n:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    for k in range(len(table) - 1, -1, -1):
        size = 1 << k
        can = pos >= size
        block = np.where(can, pos - size, 0)
        ended = can & (table[k][np.minimum(block, table[k].size - 1)] <= at)
        pos = np.where(ended, pos - size, pos)
    return pos - 1
