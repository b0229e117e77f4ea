"""The window's tf.function calls from Python: what a window without training steps holds.

`model.predict`, a SavedModel's serving signature and `model.evaluate` run no training step;
XProf then says "No step time measured". Each call of a `tf.function` (or concrete function,
signature) from Python is one event named for the function carrying a `tf_function_call`
stat; the outermost ones on each thread are the calls the program made (inner ones run only
while a function is traced). Their count, rate and time per call say what the window held.
JAX's jitted calls are `PjitFunction(<name>)` events, and a graph-mode (`tf.compat.v1`)
job's `Session.run` calls `SessionRun` events, counted the same way.
A parameter-server worker runs the functions its coordinator sends (`schedule`): each is an
`EagerLocalExecute: __inference_<function>_<n>` inside an `EagerService:Enqueue` request,
reported as that function's remote calls (the per-worker `step_fn` time). On the
coordinator, a call whose eager execution runs nothing on this host is "dispatched": the
round trip of a `schedule`d function, not its work.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np

from tfobs.analysis.timeline import LineData, Timeline, enclosed, id_array, member, outermost_of
from tfobs.summary import FunctionCalls

CALL_STAT = "tf_function_call"
JAX_CALL = "PjitFunction("
# Keras 3's JAX trainer jits its `train_step` (one call per batch, `steps_per_execution`
# calls per execution, from Python) and writes no step marker.
KERAS_JAX_TRAIN_STEP = JAX_CALL + "train_step)"
# Keras 3's TensorFlow trainer: the tf.function `model.predict` and `predict_on_batch` call
# once per batch (steps_per_execution=1); fit and evaluate call others.
KERAS_TF_PREDICT = "one_step_on_data_distributed"
SESSION_RUN = "SessionRun"
# tfobs's own call in a live JAX window: the drain that ends it (capture/jax_profiler.py).
OWN_CALLS = frozenset({JAX_CALL + "tfobs_window_end)"})
MAX_CALL_ROWS = 10
REMOTE_REQUEST = "EagerService:Enqueue"
# A call's eager execution, and the part of it run on this host: a parameter-server
# coordinator's `schedule`d function executes (`EagerExecute`) with no local run inside.
EXECUTE = "EagerExecute"
LOCAL_EXECUTE = "EagerLocalExecute"
_REMOTE_RUN = re.compile(r"EagerLocalExecute: __inference_(.+?)(?:_\d+)?$")
# Events read after a name's first one to tell a step marker named as its function.
_MIXED_PROBE = 8


# Module-level, so each plane scans its names for them once (`Timeline.mids_where_once`).
def _is_plain_name(name: str) -> bool:
    """Neither an op (`name:Type`) nor a Python tracer frame: a call's own TraceMe."""
    return ":" not in name and not name.startswith("$")


def _is_local_execute(name: str) -> bool:
    return name.startswith(LOCAL_EXECUTE)


def _call_mids(host: Timeline) -> tuple[np.ndarray, set[int]]:
    """(metadata ids of the function-call events, those of them whose events are not all
    calls). Calls: names without ':' (ops, executor and eager events have one) whose first
    event carries the `tf_function_call` stat, JAX's jitted calls (`PjitFunction(<name>)`)
    and Session.run calls (`SessionRun`). A user's step marker named as the function it
    calls (`Trace("train_step", _r=1)` around `train_step(...)`) shares its name, so where the
    first event lacks the stat a few more are read: if one has it, the name is "mixed" and
    only its events with the stat count."""
    jitted = [m for m, n in host.names.items()
              if (n.startswith(JAX_CALL) and n not in OWN_CALLS) or n == SESSION_RUN]
    stat_id = host.stat_ids.get(CALL_STAT)
    if stat_id is None:
        return np.array(sorted(jitted), np.int64), set()
    wanted = {stat_id: CALL_STAT}
    plain = id_array(host.mids_where_once(_is_plain_name))
    found: list[int] = []
    mixed: set[int] = set()
    left = set(plain.tolist())
    for ld in host.lines:
        if not left:
            break
        at = np.flatnonzero(member(ld.mid_arr, plain, ld.dense_top))
        if not at.size:
            continue
        sub = ld.mid_arr[at]
        todo = _first_events(sub, left, ld.dense_top)
        # Each name's first event, read in one batch (positions in line order).
        heads = [int(at[first]) for _, first in todo]
        order = sorted(range(len(heads)), key=heads.__getitem__)
        read = host.stat_values_many(ld, [heads[j] for j in order], wanted)
        has_stat = [False] * len(heads)
        for j, values in zip(order, read, strict=True):
            has_stat[j] = CALL_STAT in values
        ranked: np.ndarray | None = None  # the line's positions by name, then its names
        ranked_mid = sub
        for (mid, _), i, called in zip(todo, heads, has_stat, strict=True):
            left.discard(mid)
            if called:
                found.append(mid)
                continue
            # A rare second look, at the name's first events: a run of the line's events
            # sorted by name (a scan of the line per name cost names x events: 160,000
            # names of one event each, 32 s).
            if ranked is None:
                ranked = np.argsort(sub, kind="stable")
                ranked_mid = sub[ranked]
            lo = int(np.searchsorted(ranked_mid, mid, side="left"))
            run = slice(lo, lo + 1 + _MIXED_PROBE)
            events = ranked[run][ranked_mid[run] == mid]
            if events.size > 1 and ld.start_arr[at[events[1]]] < ld.end_arr[i]:
                # its next event lies inside it: a marker around a call of its own name?
                probe = at[events[1:1 + _MIXED_PROBE]].tolist()
                if any(CALL_STAT in v for v in host.stat_values_many(ld, probe, wanted)):
                    found.append(mid)
                    mixed.add(mid)
    return np.array(sorted(found + jitted), np.int64), mixed


def _first_events(mids: np.ndarray, wanted: set[int], top: int | None
                  ) -> list[tuple[int, int]]:
    """For each id of `wanted` among `mids`, in id order: the id and the position of its
    first event in `mids`. One unbuffered pass where the ids are small (each id's least
    position), else one sort."""
    if top is None:
        ids, first_at = np.unique(mids, return_index=True)
        return [(m, k) for m, k in zip(ids.tolist(), first_at.tolist(), strict=True)
                if m in wanted]
    none = np.iinfo(np.int64).max
    first = np.full(top + 1, none, np.int64)
    np.minimum.at(first, mids, np.arange(mids.size))
    return [(m, int(first[m])) for m in np.flatnonzero(first != none).tolist() if m in wanted]


def _calls_at(host: Timeline, ld: LineData, mids: np.ndarray, mixed: set[int]) -> np.ndarray:
    """Positions on `ld` of the outermost function calls: events of `mids`, those of a mixed
    name only where they carry the call stat, not inside an earlier call on this thread."""
    at = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
    if mixed and at.size:
        odd = np.flatnonzero(np.isin(ld.mid_arr[at], np.fromiter(mixed, np.int64)))
        if odd.size:
            wanted = {host.stat_ids[CALL_STAT]: CALL_STAT}
            values = host.stat_values_many(ld, at[odd].tolist(), wanted)
            drop = odd[[CALL_STAT not in v for v in values]]
            at = np.delete(at, drop)
    return outermost_of(ld, at)


def function_calls(host: Timeline | None, top_n: int = MAX_CALL_ROWS
                   ) -> tuple[FunctionCalls, ...]:
    """Each called function's outermost calls: count, calls per second (first call's start
    to last call's end), time per call; most total time first, at most `top_n` rows."""
    if host is None:
        return ()
    mids, mixed = _call_mids(host)
    names = host.names
    per: dict[tuple[str, str], list[int]] = {}  # (name, source) -> count, ps, first, last
    runs: dict[str, list[int]] = {}  # name -> eager executions, local ones, inside its calls
    executes = id_array(host.mids_named(EXECUTE))
    local = id_array(host.mids_where_once(_is_local_execute))
    for ld in host.lines if mids.size else ():
        at = _calls_at(host, ld, mids, mixed)
        if not at.size:
            continue
        seen, inverse = _by_first_seen(ld.mid_arr[at])
        called = [names.get(m, "") for m in ld.mid_arr[at[seen]].tolist()]
        _add(per, "python", called, inverse, ld.start_arr[at] + ld.start_ps,
             ld.end_arr[at] + ld.start_ps)
        executed = np.bincount(inverse, _inside(ld, at, executes), len(seen))
        here = np.bincount(inverse, _inside(ld, at, local), len(seen))
        for name, xs, ks in zip(called, executed.astype(np.int64).tolist(),
                                here.astype(np.int64).tolist(), strict=True):
            row = runs.setdefault(name, [0, 0])
            row[0] += xs
            row[1] += ks
    _remote_calls(host, per)
    rows = []
    for (name, source), (count, total, first, last) in per.items():
        x, k = runs.get(name, (0, 0)) if source == "python" else (0, 0)
        if x and not k:  # executed, never here: the function ran on another task
            source = "dispatched"
        span = (last - first) / 1e12
        rows.append(FunctionCalls(
            name=name, count=count, per_s=count / span if span > 0 else 0.0,
            mean_s=total / count / 1e12, total_s=total / 1e12, source=source))
    rows.sort(key=lambda r: (-r.total_s, r.name))
    return tuple(rows[:max(0, top_n)])


def _is_jitted_call(name: str) -> bool:
    return name.startswith(JAX_CALL) and name not in OWN_CALLS


def jitted_calls_in_spans(host: Timeline | None, lines: Sequence[int] | None,
                          begin_ps: np.ndarray, end_ps: np.ndarray) -> int:
    """JAX's outermost jitted calls (`PjitFunction(...)`) on `lines` (the threads that run
    the steps) that start inside one of the spans (`begin_ps` sorted, absolute ps): the
    steps' own calls, not a loader thread's."""
    if host is None or not lines or not begin_ps.size:
        return 0
    mids = id_array(host.mids_where_once(_is_jitted_call))
    if not mids.size:
        return 0
    found = 0
    for ld in (host.lines[li] for li in lines):
        at = outermost_of(ld, np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top)))
        if not at.size:
            continue
        starts = ld.start_arr[at] + ld.start_ps
        k = np.searchsorted(begin_ps, starts, side="right") - 1
        found += int(((k >= 0) & (starts < end_ps[np.maximum(k, 0)])).sum())
    return found


def _by_first_seen(mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the position of each distinct metadata id's first event, in order of first
    appearance; each event's number in that order)."""
    distinct, first, inverse = np.unique(mids, return_index=True, return_inverse=True)
    seen = np.argsort(first, kind="stable")
    number = np.empty(distinct.size, np.int64)
    number[seen] = np.arange(distinct.size)
    return first[seen], number[inverse.ravel()]


def _add(per: dict[tuple[str, str], list[int]], source: str, names: list[str],
         which: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
    """Count the calls of each of `names` (`which`: each call's name, as an index into
    `names`) into `per`: calls, total ps, first start, last end."""
    order = np.argsort(which, kind="stable")
    cuts = np.flatnonzero(np.r_[True, np.diff(which[order]) != 0])
    start, end = start[order].astype(np.int64), end[order].astype(np.int64)
    count = np.diff(np.r_[cuts, which.size]).tolist()
    total = np.add.reduceat(end - start, cuts).tolist()
    low = np.minimum.reduceat(start, cuts).tolist()
    high = np.maximum.reduceat(end, cuts).tolist()
    for j, k in enumerate(which[order[cuts]].tolist()):
        row = per.setdefault((names[k], source), [0, 0, low[j], high[j]])
        row[0] += count[j]
        row[1] += total[j]
        row[2] = min(row[2], low[j])
        row[3] = max(row[3], high[j])


def _inside(ld: LineData, at: np.ndarray, mids: np.ndarray) -> np.ndarray:
    """How many events of `mids` start inside each call at `at` on this line (a line's
    events are in start order and nest, so those are the call's own)."""
    x = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
    if not x.size:
        return np.zeros(at.size, np.int64)
    starts = ld.start_arr[x]
    inside: np.ndarray = (np.searchsorted(starts, ld.end_arr[at], side="right")
                          - np.searchsorted(starts, ld.start_arr[at], side="left"))
    return inside


def _remote_calls(host: Timeline, per: dict[tuple[str, str], list[int]]) -> None:
    """Function runs inside `EagerService:Enqueue` requests, by function name."""
    requests = id_array(host.mids_named(REMOTE_REQUEST))
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
        if not at.size:
            continue
        first, inverse = _by_first_seen(ld.mid_arr[at])
        _add(per, "remote", [runs[m] for m in ld.mid_arr[at[first]].tolist()], inverse,
             ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps)


def calls_note(calls: tuple[FunctionCalls, ...]) -> str:
    """One sentence for a window without training steps, naming its busiest function."""
    if not calls:
        return ""
    c = calls[0]
    remote = {"remote": " sent by another task (parameter-server coordinator)",
              "dispatched": " run on other tasks (a parameter-server coordinator's schedule: "
                            "the workers' captures hold the function's time)"}.get(c.source, "")
    held = (f", each inside an annotation {c.marker!r} ({1e3 * c.marker_mean_s:.2f} ms "
            "each) that carries no step number, so no tool takes it as a step"
            if c.marker else "")
    return (f"no training steps; the window holds {c.count} calls of {c.name!r}{remote} "
            f"({c.per_s:.1f} per s, {1e3 * c.mean_s:.2f} ms per call){held}")


def call_marker(host: Timeline | None, row: FunctionCalls) -> FunctionCalls:
    """`row` with the annotation that holds each of its calls, if there is one: on the line
    of the calls, the events of one plain name (no op, no Python tracer frame, no call) as
    many as the calls, the k-th enclosing the k-th call; where several names do, the
    outermost (the longest). A step marker that lacks its step number and `_r`
    (`jax.profiler.TraceAnnotation("train_step")`): what the job meant as its step."""
    if host is None or row.source != "python":
        return row
    calls = id_array(host.mids_named(row.name))
    plain = id_array(host.mids_where_once(_is_plain_name))
    best = ("", 0, 0.0)  # name, count, mean ps
    for ld in host.lines:
        at = outermost_of(ld, np.flatnonzero(member(ld.mid_arr, calls, ld.dense_top)))
        if at.size < 2:
            continue
        cand = np.flatnonzero(member(ld.mid_arr, plain, ld.dense_top))
        cand = cand[~np.isin(ld.mid_arr[cand], calls)]
        # an annotation starts before its call: keep the events that hold a call
        k = np.searchsorted(ld.start_arr[at], ld.start_arr[cand], side="left")
        k = np.minimum(k, at.size - 1)
        holds = ((ld.start_arr[cand] <= ld.start_arr[at[k]])
                 & (ld.end_arr[cand] >= ld.end_arr[at[k]]))
        cand = cand[holds]
        for mid in np.unique(ld.mid_arr[cand]).tolist():
            name = host.names.get(mid, "")
            if name.startswith(JAX_CALL) or name == SESSION_RUN:
                continue
            ev = outermost_of(ld, np.flatnonzero(ld.mid_arr == mid))
            if ev.size != at.size:
                continue
            starts, ends = ld.start_arr[ev], ld.end_arr[ev]
            if not (np.all(starts <= ld.start_arr[at]) and np.all(ends >= ld.end_arr[at])
                    and np.all(starts[1:] >= ld.end_arr[at][:-1])):
                continue  # not one call each
            mean = float(np.mean(ends - starts))
            if mean > best[2]:
                best = (name, int(ev.size), mean)
    if not best[0]:
        return row
    return dataclasses.replace(row, marker=best[0], marker_mean_s=best[2] / 1e12)
