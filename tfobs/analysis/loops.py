"""In-graph loops inside the steps: the executor's runs of loop iterations, timed.

A `tf.map_fn`, a `tf.while_loop`, a Python loop AutoGraph turned into one, or a Keras RNN's
loop over time steps runs its body once per iteration on TensorFlow's executor, each op
scheduled on its own. Small bodies write no op events (the executor writes those only for
ops that take a while): such a loop shows only as thousands of `ExecutorState::Process`
events whose `iter_num` is past 0 (steps.py's `_Grouper.loop_runs`), in no row of the op
table. Their time here is wall time inside the kept steps, each instant counted once:
the runs overlap one another on a thread, and a loop may run on several threads at once.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tfobs.analysis.eventtypes import parse_tf_op
from tfobs.analysis.gpu_idle import merged_spans
from tfobs.analysis.steps import LoopRuns
from tfobs.analysis.timeline import (
    LineData,
    Timeline,
    clip_to_spans,
    enclosed,
    id_array,
    member,
    outermost_of,
    positions_by_value,
    span_bounds,
    span_of,
    summable,
)
from tfobs.xspace.columns import KIND_REF

# A name scope's parts that say where in a function an op is, not whose op it is: the
# bodies and branches of loops and conds, their numbered function copies, call ops,
# gradients.
_STRUCTURE = re.compile(r"body|cond|then|else|_\d+|\w*PartitionedCall|gradient_tape|"
                        r"gradients|while_grad")
# Keras's recurrent layers and cells by their default names (lstm_1, gru, simple_rnn_2,
# bidirectional's forward_lstm, lstm_cell).
_RECURRENT = re.compile(r"lstm|gru|rnn", re.IGNORECASE)
_CELL = re.compile(r"(^|/)(lstm|gru|simple_rnn|peephole_lstm)_cell(_\d+)?/")
# The op a tf.map_fn, tf.scan or Keras RNN unstacks its input tensor with, before its loop.
_UNSTACK = "/TensorArrayUnstack/TensorListFromTensor"
# tf.vectorized_map (pfor) converts each op of the mapped function under the scope
# `<op>/pfor/`; an op with no batched converter it runs as a while loop over the batch
# (`fallback_to_while_loop=True`, the default), whose per-example results it stacks with
# `<op>/pfor/TensorArrayV2Stack/TensorListStack`: the loop's scope is `<op>/pfor`.
PFOR_SCOPE = "/pfor"
_PFOR_STACK = PFOR_SCOPE + "/TensorArrayV2Stack/TensorListStack"
MAX_SCOPES = 3


class InGraphLoops(NamedTuple):
    seconds: float = 0.0  # inside the kept steps, all of them together
    op_seconds: float = 0.0  # of the op events the iterations wrote (outermost), together
    iterations: int = 0  # the median step's highest loop iteration
    iterations_max: int = 0  # the highest in any step
    scopes: tuple[str, ...] = ()  # the loops' name scopes, most op time first
    recurrent: bool = False  # a Keras recurrent layer's loop


def loop_scope(op_name: str) -> str:
    """The name scope of the loop an op (`scope/name`) runs in: the parts before its last
    `while` part, back to the function structure around them ('' where there is none).
    `StatefulPartitionedCall/sequential_1/gru_1/while/body/_27/sequential_1/gru_1/while/
    gru_cell/MatMul` -> `sequential_1/gru_1`; a loop named `while` at the top -> `while`."""
    parts = op_name.split("/")
    last = max((k for k, p in enumerate(parts) if p == "while"), default=-1)
    if last < 0:
        return ""
    first = last
    while first > 0 and not _STRUCTURE.fullmatch(parts[first - 1]):
        first -= 1
    return "/".join(parts[first:last]) or "while"


def in_graph_loops(host: Timeline | None, runs: LoopRuns | None,
                   steps: Sequence[tuple[int, int]]) -> InGraphLoops:
    """The loop iterations' wall time inside the `steps` (absolute (begin, end) ps, in
    order, not overlapping), each instant once over every thread; each step's highest
    iteration; the loops' scopes from the ops the iterations ran (else from the tensors
    unstacked for them in the steps)."""
    if host is None or runs is None or not len(steps):
        return InGraphLoops()
    lo, hi = span_bounds(steps)
    starts, ends, iters, steps_of = [], [], [], []
    op_mids = id_array(host.mids_where_once(_is_tf_op))
    op_mid: list[np.ndarray] = []
    op_dur: list[np.ndarray] = []
    for li, sel in positions_by_value(runs.line):
        ld = host.lines[li]
        sel = sel[np.argsort(runs.pos[sel], kind="stable")]  # in the line's order
        pos, iteration = runs.pos[sel], runs.iteration[sel]
        begin = ld.start_arr[pos] + ld.start_ps
        k, inside = span_of(begin, lo, hi)
        if not inside.any():
            continue
        start, end = clip_to_spans(begin, ld.end_arr[pos] + ld.start_ps, lo, hi)
        starts.append(start)
        ends.append(np.maximum(end, start))  # a damaged capture's run may end first
        iters.append(iteration[inside])
        steps_of.append(k[inside])
        ops = (np.flatnonzero(member(ld.mid_arr, op_mids, ld.dense_top)) if op_mids.size
               else op_mids)
        if ops.size:
            ops = outermost_of(ld, ops[enclosed(ld, pos[inside], ops)])
            op_mid.append(ld.mid_arr[ops])
            op_dur.append(np.maximum(ld.end_arr[ops] - ld.start_arr[ops], 0))
    if not starts:
        return InGraphLoops()
    # The ops' time by name (a loop's thousands of op runs share a few hundred names).
    scope_ps: Counter[str] = Counter()
    cells = False  # a Keras recurrent cell's ops ran in the iterations
    op_ps = 0
    if op_mid:
        mids, at = np.unique(np.concatenate(op_mid), return_inverse=True)
        dur = np.concatenate(op_dur)
        op_ps = int(summable(dur).sum())
        per_mid = np.bincount(at.ravel(), weights=dur, minlength=mids.size)  # for ranking
        for mid, ps in zip(mids.tolist(), per_mid.tolist(), strict=True):
            name = parse_tf_op(host.names[mid]).name
            scope = loop_scope(name)
            if scope:
                scope_ps[scope] += int(ps)
                cells = cells or bool(_CELL.search(name))
    union = merged_spans(np.concatenate(starts), np.concatenate(ends))  # each instant once
    seconds = int((union.end - union.begin).sum()) / 1e12
    top = np.zeros(lo.size, np.int64)
    np.maximum.at(top, np.concatenate(steps_of), np.concatenate(iters))
    held = top[top > 0]
    scopes = tuple(s for s, _ in scope_ps.most_common(MAX_SCOPES))
    if not scopes:
        scopes = _pfor_fallback_scopes(host, lo, hi) or _unstacked_scopes(host, lo, hi)
    # By the layer's name, or by its cell's ops (a layer given a name of its own).
    recurrent = cells or any(_RECURRENT.search(s.rsplit("/", 1)[-1]) for s in scopes)
    return InGraphLoops(seconds, op_ps / 1e12, int(np.median(held)) if held.size else 0,
                        int(held.max()) if held.size else 0, scopes, recurrent)


def _is_pfor_stack(name: str) -> bool:
    return _PFOR_STACK + ":" in name


def _pfor_fallback_scopes(host: Timeline, lo: np.ndarray, hi: np.ndarray
                          ) -> tuple[str, ...]:
    """The scopes (`<op>/pfor`) of the while loops tf.vectorized_map ran inside the steps
    for ops it could not vectorize, by their stacks of per-example results, most first."""
    def scope(name: str) -> str:
        return name[:name.index(_PFOR_STACK)] + PFOR_SCOPE

    return _scopes_in_steps(host, _is_pfor_stack, scope, lo, hi)


def _is_unstack(name: str) -> bool:
    return _UNSTACK + ":" in name


def _unstacked_scopes(host: Timeline, lo: np.ndarray, hi: np.ndarray) -> tuple[str, ...]:
    """The scopes of the tensors unstacked for a loop (`.../TensorArrayUnstack/
    TensorListFromTensor` ops: tf.map_fn's, tf.scan's, a Keras RNN's) inside the steps,
    most first: a loop whose own ops write no event is named by its input."""
    def scope(name: str) -> str:
        parts = name.split(_UNSTACK)[0].split("/")
        return "/".join(p for p in parts if not _STRUCTURE.fullmatch(p))

    return _scopes_in_steps(host, _is_unstack, scope, lo, hi)


def _scopes_in_steps(host: Timeline, predicate: Callable[[str], bool],
                     scope: Callable[[str], str], lo: np.ndarray, hi: np.ndarray
                     ) -> tuple[str, ...]:
    """The scopes (`scope` of each op's name; "" is none) of the events named by
    `predicate` that start inside the steps (`lo`..`hi`), most events first."""
    mids = id_array(host.mids_where_once(predicate))
    if not mids.size:
        return ()
    count: Counter[str] = Counter()
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
        if not at.size:
            continue
        _, inside = span_of(ld.start_arr[at] + ld.start_ps, lo, hi)
        for mid in ld.mid_arr[at[inside]].tolist():
            if found := scope(parse_tf_op(host.names[mid]).name):
                count[found] += 1
    return tuple(s for s, _ in count.most_common(MAX_SCOPES))


def _is_tf_op(name: str) -> bool:
    return parse_tf_op(name).category == "tf"


# A functional loop op run as such (not lowered into the graph's own control flow: the
# dense recursion of tf.nn.ctc_loss, functional_ops.While) calls its body function once per
# iteration, each call an executor run of its own at iteration 0, so no run carries an
# `iter_num` past 0. The op is asynchronous: its run spans from its
# `ExecutorState::ProcessAsync::Start` to its `ExecutorState::ProcessAsync::Done` (same op
# name and step id), and each iteration writes a `WhileOp-StartBody`.
_ASYNC_START = "ExecutorState::ProcessAsync::Start"
_ASYNC_DONE = "ExecutorState::ProcessAsync::Done"
_LOOP_KERNELS = frozenset({"While", "StatelessWhile"})
_BODY_START = "WhileOp-StartBody"


def functional_loops(host: Timeline | None, steps: Sequence[tuple[int, int]]
                     ) -> InGraphLoops:
    """The functional While ops' runs inside the `steps` (absolute (begin, end) ps, in
    order, not overlapping): their wall time, each instant once over every thread; each
    step's iterations (its body starts over the While runs begun in it, the median step's
    and the highest); the loops' name scopes, most time first."""
    if host is None or not len(steps):
        return InGraphLoops()
    body = id_array(host.mids_named(_BODY_START))
    marks = id_array(host.mids_named(_ASYNC_START, _ASYNC_DONE))
    ids = host.stat_ids
    if not body.size or not marks.size or "kernel_type" not in ids or "name" not in ids:
        return InGraphLoops()
    start_mids = id_array(host.mids_named(_ASYNC_START))
    wanted = {ids["kernel_type"]: "kernel_type", ids["name"]: "name"}
    if "step_id" in ids:
        wanted[ids["step_id"]] = "step_id"
    lo, hi = span_bounds(steps)
    # Per (op name, step id), the starts not yet done, oldest first: a queue (a list's
    # pop(0) moved every start still open: 160,000 open at once cost 3 s, 320,000 12 s).
    opened: dict[tuple[str, str], deque[int]] = {}
    runs: list[tuple[int, int, str]] = []  # (begin, end, op name)
    bodies: list[np.ndarray] = []
    marked: list[tuple[int, int, bool, str, str]] = []
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, body, ld.dense_top))
        if at.size:
            bodies.append(ld.start_arr[at] + ld.start_ps)
        at = np.flatnonzero(member(ld.mid_arr, marks, ld.dense_top))
        if at.size:
            at = at[_maybe_loop_kernel(host, ld, at, ids["kernel_type"])]
        if not at.size:
            continue
        is_start = member(ld.mid_arr[at], start_mids)
        for j, st in enumerate(host.stat_values_many(ld, at.tolist(), wanted)):
            if str(st.get("kernel_type", "")) not in _LOOP_KERNELS:
                continue
            i = int(at[j])
            marked.append((int(ld.start_arr[i]) + ld.start_ps, int(ld.end_arr[i]) + ld.start_ps,
                           bool(is_start[j]), str(st.get("name", "")),
                           str(st.get("step_id", ""))))
    for at_ps, until_ps, starts_run, name, sid in sorted(marked):
        if starts_run:
            opened.setdefault((name, sid), deque()).append(at_ps)
        elif opened.get((name, sid)):
            runs.append((opened[(name, sid)].popleft(), max(until_ps, at_ps), name))
    if not runs or not bodies:
        return InGraphLoops()
    begin = np.array([r[0] for r in runs], np.int64)
    end = np.array([r[1] for r in runs], np.int64)
    order = np.argsort(begin, kind="stable")
    begin, end = begin[order], end[order]
    names = [runs[k][2] for k in order.tolist()]
    k, inside = span_of(begin, lo, hi)
    if not inside.any():
        return InGraphLoops()
    cut_begin, cut_end = clip_to_spans(begin, end, lo, hi)
    union = merged_spans(cut_begin, np.maximum(cut_end, cut_begin))
    seconds = int((union.end - union.begin).sum()) / 1e12
    # The body's ops: outermost op events beginning while a loop runs, on any thread.
    op_mids = id_array(host.mids_where_once(_is_tf_op))
    op_ps = 0
    for ld in host.lines if op_mids.size else ():
        ops = np.flatnonzero(member(ld.mid_arr, op_mids, ld.dense_top))
        if not ops.size:
            continue
        ops = outermost_of(ld, ops)
        _, held_op = span_of(ld.start_arr[ops] + ld.start_ps, union.begin, union.end)
        op_ps += int(summable(np.maximum(ld.end_arr[ops[held_op]]
                                         - ld.start_arr[ops[held_op]], 0)).sum())
    # Iterations a step: the body starts in the step over the loop runs begun there.
    starts = np.sort(np.concatenate(bodies))
    b_k, b_in = span_of(starts, lo, hi)
    per_step = np.bincount(b_k[b_in], minlength=lo.size)
    loops_in = np.bincount(k[inside], minlength=lo.size)
    held = np.flatnonzero(loops_in > 0)
    iters = per_step[held] // loops_in[held]
    scope_ps: Counter[str] = Counter()
    for j in np.flatnonzero(inside).tolist():
        parts = [p for p in names[j].split("/")[:-1] if not _STRUCTURE.fullmatch(p)]
        scope_ps["/".join(parts) or names[j]] += int(end[j] - begin[j])
    scopes = tuple(s for s, _ in scope_ps.most_common(MAX_SCOPES))
    return InGraphLoops(seconds, op_ps / 1e12, int(np.median(iters)) if iters.size else 0,
                        int(iters.max()) if iters.size else 0, scopes,
                        any(_RECURRENT.search(s.rsplit("/", 1)[-1]) for s in scopes))


def _maybe_loop_kernel(host: Timeline, ld: LineData, at: np.ndarray, kernel_type: int
                       ) -> np.ndarray:
    """Which of the line's async op marks `at` may be a loop op's, by their `kernel_type`
    stat read in bulk: a reference to another kernel's name is not (every async op of a
    loop's body writes such marks, thousands a window: decoding each one's stats in Python
    cost a fifth of a ctc_loss capture's reduction); any other layout is read in full."""
    loops = host.once(_loop_kernel_refs)
    events = ld.indices(at)
    batch = host.columns.stats_of(events, np.array([kernel_type], np.int64))
    typed = batch.mid == kernel_type
    other = typed & (batch.kind == KIND_REF) & ~np.isin(batch.value.astype(np.int64), loops)
    dropped = np.isin(events, batch.event[other])
    return ~dropped


def _loop_kernel_refs(host: Timeline) -> np.ndarray:
    """The stat metadata ids naming a loop kernel (a `kernel_type` reference's values).
    Through `host.once`."""
    return np.array([m for m, n in host.plane.stat_names.items() if n in _LOOP_KERNELS],
                    np.int64)
