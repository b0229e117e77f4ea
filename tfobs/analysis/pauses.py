"""What runs in the longest pause between the steps.

A window whose steps are even but for a few long gaps (an epoch's end: validation, the
old iterator torn down, callbacks) shows the gaps' share and not their cause. The events
that begin inside the longest gap on the threads that run the steps, outermost first
(an event that began before the gap wraps the whole loop and says nothing), name it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfobs.analysis.timeline import Timeline, outermost_of

TOP_EVENTS = 3


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
