"""The window's tf.function calls from Python: what a window without training steps holds.

`model.predict`, a SavedModel's serving signature and `model.evaluate` run no training step;
XProf then says "No step time measured". Each call of a `tf.function` (or concrete function,
signature) from Python is one event named for the function carrying a `tf_function_call`
stat; the outermost ones on each thread are the calls the program made (inner ones run only
while a function is traced). Their count, rate and time per call say what the window held.
JAX's jitted calls are `PjitFunction(<name>)` events, counted the same way.
A parameter-server worker runs the functions its coordinator sends (`schedule`): each is an
`EagerLocalExecute: __inference_<function>_<n>` inside an `EagerService:Enqueue` request,
reported as that function's remote calls (the per-worker `step_fn` time).
"""

from __future__ import annotations

import re

import numpy as np

from tfobs.analysis.timeline import Timeline, enclosed, id_array, member, outermost
from tfobs.summary import FunctionCalls

CALL_STAT = "tf_function_call"
JAX_CALL = "PjitFunction("
MAX_CALL_ROWS = 10
REMOTE_REQUEST = "EagerService:Enqueue"
_REMOTE_RUN = re.compile(r"EagerLocalExecute: __inference_(.+?)(?:_\d+)?$")


def _call_mids(host: Timeline) -> np.ndarray:
    """Metadata ids of the function-call events: names without ':' (ops, executor and
    eager events have one) whose first event carries the `tf_function_call` stat, and
    JAX's jitted calls (`PjitFunction(<name>)`)."""
    jitted = [m for m, n in host.names.items() if n.startswith(JAX_CALL)]
    stat_id = host.stat_ids.get(CALL_STAT)
    if stat_id is None:
        return np.array(sorted(jitted), np.int64)
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
    return np.array(sorted(found + jitted), np.int64)


def function_calls(host: Timeline | None, top_n: int = MAX_CALL_ROWS
                   ) -> tuple[FunctionCalls, ...]:
    """Each called function's outermost calls: count, calls per second (first call's start
    to last call's end), time per call; most total time first, at most `top_n` rows."""
    if host is None:
        return ()
    mids = _call_mids(host)
    names = host.names
    per: dict[tuple[str, str], list[int]] = {}  # (name, source) -> count, ps, first, last
    for ld in host.lines if mids.size else ():
        at = outermost(ld, mids)  # not inside an earlier call on this thread
        if not at.size:
            continue
        _add(per, "python", [names.get(m, "") for m in ld.mid_arr[at].tolist()],
             ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps)
    _remote_calls(host, per)
    rows = []
    for (name, source), (count, total, first, last) in per.items():
        span = (last - first) / 1e12
        rows.append(FunctionCalls(
            name=name, count=count, per_s=count / span if span > 0 else 0.0,
            mean_s=total / count / 1e12, total_s=total / 1e12, source=source))
    rows.sort(key=lambda r: (-r.total_s, r.name))
    return tuple(rows[:max(0, top_n)])


def _add(per: dict[tuple[str, str], list[int]], source: str, names: list[str],
         start: np.ndarray, end: np.ndarray) -> None:
    for name, s, e in zip(names, start.tolist(), end.tolist(), strict=True):
        row = per.setdefault((name, source), [0, 0, s, e])
        row[0] += 1
        row[1] += e - s
        row[2] = min(row[2], s)
        row[3] = max(row[3], e)


def _remote_calls(host: Timeline, per: dict[tuple[str, str], list[int]]) -> None:
    """Function runs inside `EagerService:Enqueue` requests, by function name."""
    requests = id_array(host.mids_where(lambda n: n == REMOTE_REQUEST))
    if not requests.size:
        return
    runs = {m: found.group(1) for m, n in host.names.items()
            if (found := _REMOTE_RUN.match(n))}
    run_mids = id_array(runs)
    for ld in host.lines:
        req = np.flatnonzero(member(ld.mid_arr, requests, ld.dense_top))
        if not req.size or not run_mids.size:
            continue
        at = np.flatnonzero(member(ld.mid_arr, run_mids, ld.dense_top))
        if not at.size:
            continue
        at = at[enclosed(ld, req, at)]  # the runs that lie in a request
        _add(per, "remote", [runs[m] for m in ld.mid_arr[at].tolist()],
             ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps)


def calls_note(calls: tuple[FunctionCalls, ...]) -> str:
    """One sentence for a window without training steps, naming its busiest function."""
    if not calls:
        return ""
    c = calls[0]
    remote = " sent by another task (parameter-server coordinator)" if (
        c.source == "remote") else ""
    return (f"no training steps; the window holds {c.count} calls of {c.name!r}{remote} "
            f"({c.per_s:.1f} per s, {1e3 * c.mean_s:.2f} ms per call)")
