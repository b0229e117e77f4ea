"""The window's tf.function calls from Python: what a window without training steps holds.

`model.predict`, a SavedModel's serving signature and `model.evaluate` run no training step;
XProf then says "No step time measured". Each call of a `tf.function` (or concrete function,
signature) from Python is one event named for the function carrying a `tf_function_call`
stat; the outermost ones on each thread are the calls the program made (inner ones run only
while a function is traced). Their count, rate and time per call say what the window held.
"""

from __future__ import annotations

import numpy as np

from tfobs.analysis.timeline import Timeline, id_array, member
from tfobs.summary import FunctionCalls

CALL_STAT = "tf_function_call"
MAX_CALL_ROWS = 10


def _call_mids(host: Timeline) -> np.ndarray:
    """Metadata ids of the function-call events: names without ':' (ops, executor and
    eager events have one) whose first event carries the `tf_function_call` stat."""
    stat_id = host.stat_ids.get(CALL_STAT)
    if stat_id is None:
        return np.zeros(0, np.int64)
    wanted = {stat_id: CALL_STAT}
    plain = id_array(host.mids_where(lambda n: ":" not in n and not n.startswith("$")))
    found: list[int] = []
    left = set(plain.tolist())
    for ld in host.lines:
        if not left:
            break
        at = np.flatnonzero(member(ld.mid_arr, plain, ld.dense_top))
        if not at.size:
            continue
        mids, first = np.unique(ld.mid_arr[at], return_index=True)
        for mid, i in zip(mids.tolist(), at[first].tolist(), strict=True):
            if mid not in left:
                continue
            left.discard(mid)
            if CALL_STAT in host.stat_values(ld, i, wanted):
                found.append(mid)
    return np.array(sorted(found), np.int64)


def function_calls(host: Timeline | None, top_n: int = MAX_CALL_ROWS
                   ) -> tuple[FunctionCalls, ...]:
    """Each called function's outermost calls: count, calls per second (first call's start
    to last call's end), time per call; most total time first, at most `top_n` rows."""
    if host is None:
        return ()
    mids = _call_mids(host)
    if not mids.size:
        return ()
    names = host.names
    per: dict[int, list[int]] = {}  # mid -> [count, total ps, first start, last end]
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
        if not at.size:
            continue
        start, end = ld.start_arr[at], ld.end_arr[at]
        # Outermost: not inside an earlier call on this thread (running max of the ends).
        reach = np.maximum.accumulate(end)
        outer = np.r_[True, start[1:] >= reach[:-1]]
        at, start, end = at[outer], start[outer] + ld.start_ps, end[outer] + ld.start_ps
        for mid, s, e in zip(ld.mid_arr[at].tolist(), start.tolist(), end.tolist(),
                             strict=True):
            row = per.setdefault(mid, [0, 0, s, e])
            row[0] += 1
            row[1] += e - s
            row[2] = min(row[2], s)
            row[3] = max(row[3], e)
    rows = []
    for mid, (count, total, first, last) in per.items():
        span = (last - first) / 1e12
        rows.append(FunctionCalls(
            name=names.get(mid, ""), count=count, per_s=count / span if span > 0 else 0.0,
            mean_s=total / count / 1e12, total_s=total / 1e12))
    rows.sort(key=lambda r: (-r.total_s, r.name))
    return tuple(rows[:max(0, top_n)])


def calls_note(calls: tuple[FunctionCalls, ...]) -> str:
    """One sentence for a window without training steps, naming its busiest function."""
    if not calls:
        return ""
    c = calls[0]
    return (f"no training steps; the window holds {c.count} calls of {c.name!r} "
            f"({c.per_s:.1f} per s, {1e3 * c.mean_s:.2f} ms per call)")
