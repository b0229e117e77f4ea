"""XLA's CPU runtime work against the steps: dispatch-only markers, and work in 'All Others'.

A jitted JAX step returns as soon as its work is queued; XLA's CPU runtime runs that work on
its own threads (`tf_XLAPjRtCpuClient`, `XLAEigen`). A marker around the call alone (no
`block_until_ready` inside it) closes before the work runs, so the steps time the dispatch,
and their breakdown and input verdict describe it, not the training: XProf reports the same
short steps from the same markers. What tells it: the runtime's work on those threads that
falls outside every step, against the steps' own time. (On a GPU the device's activity is
grouped to its step and timed apart: `steps[].device_span_s`.)

Work the runtime runs on threads no step is linked to (Eigen's pool, a multi-device job's
per-device runs) while the step waits for it is unknown time to XProf's breakdown, 'All
Others'; the runtime's work inside those stretches (`breakdown.unknown_spans`) says how much
of 'All Others' is the step's own computation rather than Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tfobs.analysis.calls import JAX_CALL
from tfobs.analysis.gpu_idle import covered_ps
from tfobs.analysis.python_time import program_op_ids, program_op_positions, union_rows
from tfobs.analysis.timeline import LineData, Timeline, id_array, member, span_of
from tfobs.summary import FunctionCalls, Steps

# The threads of XLA's CPU runtime in a JAX process: PjRt's client pool and Eigen's.
XLA_CPU_LINES = ("tf_XLAPjRtCpuClient", "XLAEigen")
# The markers time the dispatch when most of the runtime's work in the window ran outside
# every step, and more of it than the steps' own time. (Steps that wait for their work leave
# 13-25 % of it outside: the first and last steps' work, which XProf drops with them.)
OUTSIDE_SHARE = 0.5
# A window of jitted calls whose runtime work is this many times their own time is timing
# their dispatch.
DISPATCH_SHARE_OF_WORK = 2.0


@dataclass(frozen=True)
class RuntimeWork:
    """Seconds of XLA's CPU runtime work in a window (its threads' events, nested ones once)."""

    # The window's work, less programs run only between the steps (between_s).
    total_s: float = 0.0
    outside_s: float = 0.0  # outside every kept step (of total_s)
    in_other_s: float = 0.0  # inside the steps' unknown time, XProf's 'All Others'
    # The ops of programs the job dispatched only between the steps (an evaluation run
    # between them), outside them: no step's work left to run after its marker.
    between_s: float = 0.0


@dataclass(frozen=True)
class ProgramOps:
    """The compiled programs' ops that start inside the kept steps (events with a
    `program_id` stat: XLA's CPU thunks, on any thread)."""

    count: int = 0
    total_s: float = 0.0  # their durations summed
    median_s: float = 0.0  # the median op's duration
    # Of those ops, how many start inside a control-flow op's run, and those runs' time
    # (overlaps once): a loop's body ops.
    loop_count: int = 0
    loop_s: float = 0.0


# XLA's control-flow thunks (a while loop, lax.cond's conditional, a call): each event spans
# its body's ops, which write events of their own, so they are no op of their own: counted,
# a loop's time would be counted twice and a program of tiny ops in a loop would average
# long ones (optax's L-BFGS in a while loop: 5,278 ops a step of 13.7 us, 4.3 us without).
CONTROL_FLOW_OPS = frozenset(("while", "cond", "conditional", "call"))


def is_control_flow(name: str) -> bool:
    """Whether an XLA CPU op's name (`while.95`, `cond.7.clone`) is a control-flow thunk's."""
    return name.split(".", 1)[0] in CONTROL_FLOW_OPS


def program_ops(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray
                ) -> ProgramOps:
    """The ops of the compiled programs that start inside the steps (`begin_ps`, `end_ps`:
    absolute ps): XLA's CPU runtime writes one event per thunk it runs, with the program's
    `program_id` (a fusion, a dot, a reduce); the Python tracer's events carry none and are
    not read."""
    if host is None or not begin_ps.size:
        return ProgramOps()
    steps = union_rows(np.stack([begin_ps, end_ps], 1).astype(np.int64))
    durations = []
    for ld, at in host.once(program_op_positions):
        _, inside = span_of(ld.start_arr[at] + ld.start_ps, steps[:, 0], steps[:, 1])
        if inside.any():
            durations.append(ld.end_arr[at[inside]] - ld.start_arr[at[inside]])
    if not durations:
        return ProgramOps()
    took = np.concatenate(durations)
    return ProgramOps(int(took.size), int(took.sum()) / 1e12, float(np.median(took)) / 1e12)


@dataclass(frozen=True)
class StepProgramOps:
    """The compiled programs' ops that start inside each kept step, as columns (one row an
    op): its step (an index into the kept steps), absolute start ps, duration ps, metadata
    id (its name: `svd.0`, `fusion.3`, as XProf's trace viewer shows it) and program id."""

    step: np.ndarray
    start_ps: np.ndarray
    duration_ps: np.ndarray
    mid: np.ndarray
    program: np.ndarray

    def figures(self, steps: int, names: Mapping[int, str] | None = None) -> ProgramOps:
        """`program_ops` of the same ops (no step overlaps another: each op is in one);
        with the ops' `names` (metadata id to name), control-flow ops are left out of the
        count and time and give the loop figures instead."""
        took = self.duration_ps
        if not took.size or not steps:
            return ProgramOps()
        if names is None:
            return ProgramOps(int(took.size), int(took.sum()) / 1e12,
                              float(np.median(took)) / 1e12)
        flow = {m for m in np.unique(self.mid).tolist() if is_control_flow(names.get(m, ""))}
        control = np.isin(self.mid, list(flow)) if flow else np.zeros(took.size, bool)
        leaf = took[~control]
        if not leaf.size:
            return ProgramOps()
        loop_count, loop_s = 0, 0.0
        if control.any():
            spans = union_rows(np.stack([self.start_ps[control],
                                         self.start_ps[control] + took[control]], 1))
            _, inside = span_of(self.start_ps[~control], spans[:, 0], spans[:, 1])
            loop_count = int(np.count_nonzero(inside))
            loop_s = int((spans[:, 1] - spans[:, 0]).sum()) / 1e12
        return ProgramOps(int(leaf.size), int(leaf.sum()) / 1e12,
                          float(np.median(leaf)) / 1e12, loop_count, loop_s)

    def program_sets(self, steps: int) -> int:
        """How many different sets of compiled programs the `steps` kept steps ran (1: every
        step ran the same ones; a step that ran none is a set of its own; 0: no op)."""
        if not self.step.size:
            return 0
        idle = int(np.count_nonzero(np.bincount(self.step, minlength=steps)) < steps)
        if (self.program == self.program[0]).all():  # one program (the usual window)
            return 1 + idle
        ranked = np.unique(self.program, return_inverse=True)[1].reshape(-1).astype(np.int64)
        width = int(ranked.max()) + 1
        step, program = np.divmod(np.unique(self.step * width + ranked), width)
        # Each step's set as the wrapping sum of its programs' 64-bit mixes and its size:
        # distinct sets differ there but for a collision no window comes near.
        x = (program.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        x ^= x >> np.uint64(31)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
        key = np.add.reduceat(x, first)
        key += np.diff(np.r_[first, step.size]).astype(np.uint64) * np.uint64(0x94D049BB133111EB)
        return int(np.unique(key).size) + idle


def step_program_ops(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray
                     ) -> StepProgramOps | None:
    """The compiled programs' ops (`program_op_ids`) that start inside each kept step
    (`begin_ps`, `end_ps`: absolute ps, in the kept steps' order); None where there is no
    such op or the steps overlap one another (several threads' steps: an op is no one
    step's)."""
    if host is None or not begin_ps.size:
        return None
    lines = host.once(program_op_ids)
    if not lines:
        return None
    order = None if (begin_ps[1:] >= begin_ps[:-1]).all() else np.argsort(begin_ps,
                                                                            kind="stable")
    begin, end = (begin_ps, end_ps) if order is None else (begin_ps[order], end_ps[order])
    if (begin[1:] < end[:-1]).any():
        return None
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    for ld, at, program in lines:
        start = ld.start_arr[at] + ld.start_ps
        k, inside = span_of(start, begin, end)
        if not inside.any():
            continue
        pos, k = at[inside], k[inside]
        for col, values in zip(cols, (k if order is None else order[k], start[inside],
                                      ld.end_arr[pos] - ld.start_arr[pos], ld.mid_arr[pos],
                                      program[inside]), strict=True):
            col.append(values)
    if not cols[0]:
        return None
    step, start, dur, mid, program = (np.concatenate(c).astype(np.int64, copy=False)
                                      for c in cols)
    return StepProgramOps(step, start, dur, mid, program)


def _between_steps_programs(host: Timeline, steps: np.ndarray) -> np.ndarray:
    """The ops, on XLA's CPU runtime threads, of the compiled programs dispatched only
    between the steps (`steps`: merged (begin, end) ps rows), as merged (begin, end) rows: a
    program none of whose ops starts inside a step, whose module (`hlo_module`, `jit_f`)
    is a jitted function the job called (`PjitFunction(f)`) outside the steps and never
    inside one (an evaluation between the training steps). Empty where no program's op
    starts inside a step: a window of steps that only dispatch could not tell its
    programs from the others'."""
    none = np.zeros((0, 2), np.int64)
    lines = host.once(program_op_ids)
    module_stat = host.stat_ids.get("hlo_module")
    if not lines or module_stat is None or not steps.size:
        return none
    inside: set[int] = set()
    first: dict[int, tuple[LineData, int]] = {}
    for ld, at, program in lines:
        _, held = span_of(ld.start_arr[at] + ld.start_ps, steps[:, 0], steps[:, 1])
        inside.update(np.unique(program[held]).tolist())
        for p, j in zip(*np.unique(program, return_index=True), strict=True):
            first.setdefault(int(p), (ld, int(at[j])))
    if not inside:
        return none
    called: dict[int, np.ndarray] = {}  # each other program's jitted function's call ids
    for p in set(first) - inside:
        ld, i = first[p]
        module = str(host.stat_values(ld, i, {module_stat: "m"}).get("m", ""))
        if module.startswith("jit_"):
            calls = id_array(host.mids_named(f"{JAX_CALL}{module[4:]})"))
            if calls.size:
                called[p] = calls
    if not called:
        return none
    # Every such call found in one scan of each line (a scan per program cost a Python
    # thread's hundreds of thousands of events each time), then told apart by program.
    every = np.unique(np.concatenate(list(called.values())))
    hits = [(ld, at) for ld in host.lines if len(ld)
            for at in [np.flatnonzero(member(ld.mid_arr, every, ld.dense_top))] if at.size]
    foreign = set()
    for p, calls in called.items():
        starts = [ld.start_arr[at[member(ld.mid_arr[at], calls)]] + ld.start_ps
                  for ld, at in hits]
        start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
        if start.size and not span_of(start, steps[:, 0], steps[:, 1])[1].any():
            foreign.add(p)
    if not foreign:
        return none
    keep = np.array(sorted(foreign), np.int64)
    rows = [np.stack([ld.start_arr[at[m]] + ld.start_ps, ld.end_arr[at[m]] + ld.start_ps], 1)
            for ld, at, program in lines if ld.name.startswith(XLA_CPU_LINES)
            for m in [np.isin(program, keep)] if m.any()]
    return union_rows(np.concatenate(rows)) if rows else none


def runtime_work(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray,
                 unknown: Callable[[], np.ndarray] | None = None) -> RuntimeWork:
    """The runtime's work against the kept steps' spans and, where `unknown` is given (it
    returns the steps' unknown time as (begin, end) rows: `breakdown.unknown_spans`),
    against the time XProf's breakdown files under 'All Others'."""
    if host is None:
        return RuntimeWork()
    rows = [np.stack([ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps], 1)
            for ld in host.lines if ld.name.startswith(XLA_CPU_LINES) and len(ld)]
    if not rows:
        return RuntimeWork()
    work = union_rows(np.concatenate(rows))
    total = int((work[:, 1] - work[:, 0]).sum())
    steps = union_rows(np.stack([begin_ps, end_ps], 1).astype(np.int64))
    if not steps.size:
        return RuntimeWork(total / 1e12, total / 1e12)
    inside = int(covered_ps(steps[:, 0], steps[:, 1], work[:, 0], work[:, 1]).sum())
    in_other = 0
    if unknown is not None:
        other = union_rows(unknown())
        if other.size:
            in_other = int(covered_ps(other[:, 0], other[:, 1], work[:, 0], work[:, 1]).sum())
    between = _between_steps_programs(host, steps)
    between_ps = 0
    if between.size:
        ran = int((between[:, 1] - between[:, 0]).sum())
        between_ps = max(ran - int(covered_ps(steps[:, 0], steps[:, 1], between[:, 0],
                                              between[:, 1]).sum()), 0)
    # The programs run between the steps are no step's work: left out of both figures.
    total -= between_ps
    return RuntimeWork(total / 1e12, max(total - inside, 0) / 1e12, in_other / 1e12,
                       between_ps / 1e12)


def markers_time_dispatch(outside_s: float, total_s: float, steps_s: float) -> bool:
    """Whether the steps time the dispatch rather than the work: most of the runtime's work
    ran outside every step, and more of it than the steps' own time (`steps_s`, summed)."""
    return steps_s > 0 and total_s > 0 and outside_s >= OUTSIDE_SHARE * total_s and (
        outside_s >= steps_s)


DISPATCH_NOTE_START = "the steps' compiled work runs after their markers close"


def dispatch_note(outside_s: float, total_s: float, steps_s: float) -> str:
    return (f"{DISPATCH_NOTE_START} ({100 * outside_s / total_s:.0f} % of the window's "
            f"{1e3 * total_s:.3f} ms of work on XLA's CPU threads ran outside every step, "
            f"whose markers hold {1e3 * steps_s:.3f} ms: JAX's asynchronous dispatch); the "
            "step time, breakdown and verdict describe the dispatch, as XProf's do")


def with_dispatch(steps: Steps, host: Timeline | None, begin_ps: np.ndarray,
                  end_ps: np.ndarray, unknown: Callable[[], np.ndarray] | None = None,
                  in_steps: StepProgramOps | None = None) -> Steps:
    """`steps` with the runtime's work outside them (`work_outside_s`, its share
    `work_outside_ratio`), inside them and in their 'All Others' (`work_in_steps_s`,
    `work_in_other_s`, per step), their programs' ops (`xla_cpu_ops`, `xla_cpu_op_s` per
    step, `xla_cpu_op_median_s`; `in_steps`: those ops by step, where the caller found
    them: then also `xla_cpu_program_sets`), and the note where the markers time the
    dispatch."""
    work = runtime_work(host, begin_ps, end_ps, unknown)
    if not steps.count or work.total_s <= 0:
        return steps
    steps_s = steps.mean_s * steps.count
    note = steps.note
    if markers_time_dispatch(work.outside_s, work.total_s, steps_s):
        note = "; ".join(n for n in (note, dispatch_note(work.outside_s, work.total_s, steps_s))
                         if n)
    n = steps.count
    ops = (in_steps.figures(n, host.names if host is not None else None)
           if in_steps is not None else program_ops(host, begin_ps, end_ps))
    return dataclasses.replace(steps, work_outside_s=work.outside_s,
                               work_outside_ratio=work.outside_s / work.total_s,
                               work_in_other_s=work.in_other_s / n, note=note,
                               work_in_steps_s=max(work.total_s - work.outside_s, 0.0) / n,
                               xla_cpu_ops=ops.count / n, xla_cpu_op_s=ops.total_s / n,
                               xla_cpu_op_median_s=ops.median_s,
                               xla_cpu_loop_ops=ops.loop_count / n,
                               xla_cpu_loop_s=ops.loop_s / n,
                               xla_cpu_program_sets=(in_steps.program_sets(n)
                                                     if in_steps is not None else 0))


def calls_work_note(calls: Sequence[FunctionCalls], host: Timeline | None) -> str:
    """Words for a window of jitted calls and no step (a JAX inference loop) where each call
    returns before its work runs: the time per call is its dispatch, the runtime's work in
    the window says what the calls cost. "" where the calls hold their work."""
    jitted = [c for c in calls if c.source == "python" and c.name.startswith(JAX_CALL)]
    if not jitted:
        return ""
    work = runtime_work(host, np.zeros(0, np.int64), np.zeros(0, np.int64)).total_s
    count = sum(c.count for c in jitted)
    dispatch = sum(c.total_s for c in jitted)
    if not count or work <= DISPATCH_SHARE_OF_WORK * dispatch:
        return ""
    per = (f"{1e3 * work / count:.2f} ms per call" if len(jitted) == 1 else
           f"{1e3 * work / count:.2f} ms per call over all {count} jitted calls of "
           f"{len(jitted)} functions (at most {1e3 * work / jitted[0].count:.2f} ms per "
           f"call of {jitted[0].name!r})")
    return (f"JAX returns from each call before its work runs (asynchronous dispatch): "
            f"the time per call is its dispatch, while XLA's CPU threads worked "
            f"{1e3 * work:.2f} ms in the window, {per}")


# PjRt's copy of a host array into a device buffer (`jax.device_put` of a numpy array, a
# batch handed to a jitted function), run on the client's threads; on a CPU "device" too.
H2D_EVENTS = ("H2D Dispatch",)


def host_to_device_s(host: Timeline | None, begin_ps: np.ndarray, end_ps: np.ndarray
                     ) -> float:
    """Seconds of host-to-device copies (`H2D_EVENTS`, on any host thread, overlaps once)
    inside the kept steps (`begin_ps`, `end_ps`: absolute ps). XProf counts them as host
    compute on a host-only capture."""
    if host is None or not begin_ps.size:
        return 0.0
    ids = id_array(host.mids_named(*H2D_EVENTS))
    if not ids.size:
        return 0.0
    rows = []
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, ids, ld.dense_top))
        if at.size:
            rows.append(np.stack([ld.start_arr[at] + ld.start_ps,
                                  ld.end_arr[at] + ld.start_ps], 1))
    if not rows:
        return 0.0
    copies = union_rows(np.concatenate(rows))
    steps = union_rows(np.stack([begin_ps, end_ps], 1).astype(np.int64))
    return int(covered_ps(steps[:, 0], steps[:, 1], copies[:, 0], copies[:, 1]).sum()) / 1e12
