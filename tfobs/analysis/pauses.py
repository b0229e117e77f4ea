"""What runs in the longest pause between the steps, and how much of the gaps holds nothing.

A window whose steps are even but for a few long gaps (an epoch's end: validation, the
old iterator torn down, callbacks) shows the gaps' share and not their cause. The events
that begin inside the longest gap on the threads that run the steps, outermost first
(an event that began before the gap wraps the whole loop and says nothing), name it.
Gaps in which no line of the host plane has any event hold work the capture does not show:
Python with the tracer off, or a wait (a sleep pacing the loop).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfobs.analysis.gpu_idle import merged_spans
from tfobs.analysis.timeline import Timeline, outermost_of

TOP_EVENTS = 3
# The gaps' share of the steps' span below which `gaps_idle` is not measured (0.0):
# step_gap, the one finding that reads it, needs 10 % of the step period, and the two
# shares differ only by the last step's gap; a window of thousands of steps that leave
# little gap (a JAX window of 3,000 steps: 5.5 %, a millisecond of its reduction) pays
# nothing for it.
GAPS_MEASURED_SHARE = 0.08


def longest_pause(host: Timeline | None, lines: Sequence[int], begin_ps: np.ndarray,
                  end_ps: np.ndarray) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """(event names, their seconds) of the events that begin in the longest gap between
    consecutive steps (`begin_ps`, `end_ps`: the kept steps, absolute ps, in order) on
    the host lines `lines`, outermost among those, longest first, at most TOP_EVENTS;
    each event's time clipped to the gap and summed by name."""
    if host is None or begin_ps.size < 2 or not lines:
        return (), ()
    gaps = begin_ps[1:] - end_ps[:-1]
    k = int(np.argmax(gaps))
    if gaps[k] <= 0:
        return (), ()
    lo, hi = int(end_ps[k]), int(begin_ps[k + 1])
    by_name: dict[str, int] = {}
    for li in lines:
        ld = host.lines[li]
        start = ld.start_arr + ld.start_ps
        at = np.flatnonzero((start >= lo) & (start < hi))
        at = outermost_of(ld, at)
        if not at.size:
            continue
        took = np.minimum(ld.end_arr[at] + ld.start_ps, hi) - start[at]
        for mid, ps in zip(ld.mid_arr[at].tolist(), took.tolist(), strict=True):
            name = host.names.get(mid, "")
            by_name[name] = by_name.get(name, 0) + int(ps)
    top = sorted(by_name, key=lambda n: (-by_name[n], n))[:TOP_EVENTS]
    return tuple(top), tuple(by_name[n] / 1e12 for n in top)


def gaps_idle(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray) -> float:
    """The share of the time between consecutive steps (`begin_ps`, `end_ps`: the kept
    steps, absolute ps, in order) that no event on any line of the host plane covers: the
    host idle there (a sleep, a wait on something outside the job's process) or running
    what the capture does not trace (the job's own Python with the Python tracer off).
    0.0 where the gaps hold under `GAPS_MEASURED_SHARE` of the steps' span, or without a
    host plane."""
    if host is None or begin_ps.size < 2:
        return 0.0
    lo, hi = end_ps[:-1], begin_ps[1:]
    apart = hi > lo
    lo, hi = lo[apart], hi[apart]
    total = int((hi - lo).sum())
    if total <= 0 or total < GAPS_MEASURED_SHARE * int(end_ps[-1] - begin_ps[0]):
        return 0.0
    begins, ends = [], []
    for ld in host.lines:
        if len(ld):  # each line's events merged first: its nested events add nothing
            line = merged_spans(ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps)
            begins.append(line.begin)
            ends.append(line.end)
    if not begins:
        return 1.0
    busy = merged_spans(np.concatenate(begins), np.concatenate(ends))
    # The busy time before each instant: the spans begun by then, less the part of the
    # last of them that runs past it.
    before = np.r_[0, np.cumsum(busy.end - busy.begin)]

    def upto(at: np.ndarray) -> np.ndarray:
        k = np.searchsorted(busy.begin, at, side="right")
        past = np.where(k > 0, np.maximum(busy.end[np.maximum(k - 1, 0)] - at, 0), 0)
        covered: np.ndarray = before[k] - past
        return covered

    covered = int((upto(hi) - upto(lo)).sum())
    return max(0.0, 1.0 - covered / total)
