"""Ops run eagerly (outside `tf.function`), from TensorFlow's `EagerLocalExecute: <op>` events.

XProf counts eager time only from an `is_eager` stat that TensorFlow sets on GPU kernels, so
on a CPU host it reports 0 %. The host's eager runtime marks every op it executes one by one
with `EagerLocalExecute: <op type>`; calls of a `tf.function` show there as
`__inference_...` and are not eager ops; `IteratorGetNext` and `Optional*` (Keras's
iterator) are input time, counted there. Nor are the ops that build a tf.data pipeline and
its iterators (`*Dataset*`, `MakeIterator`, `AnonymousIterator*`: each epoch's start, eager
by design; `tf.function` would not remove them), nor the ops that write a checkpoint
(`CHECKPOINT_WRITE_OPS`: `checkpoint_writes` times them on their own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tfobs.analysis.ops import OpAgg
from tfobs.analysis.timeline import (
    Spans,
    Timeline,
    id_array,
    member,
    outermost,
    span_bounds,
    span_of,
)
from tfobs.summary import OpStat

PREFIX = "EagerLocalExecute: "
_NOT_EAGER = ("__inference_", "__forward_", "__backward_", "Optional")
# The ops that write a checkpoint's files (tf.train.Checkpoint.write / save, CheckpointManager,
# tf_keras's ModelCheckpoint in TensorFlow's format): run eagerly by design, so tf.function
# would not remove them. Keras 3 writes .keras / .weights.h5 files from Python (no op).
CHECKPOINT_WRITE_OPS = frozenset({"SaveV2", "MergeV2Checkpoints", "SaveSlices", "Save"})


def _eager_kind(kind: str) -> bool:
    return (not kind.startswith(_NOT_EAGER) and "Dataset" not in kind and "Iterator" not in kind
            and kind not in CHECKPOINT_WRITE_OPS)


GRAPH_BUILDING = "tf.function-graph_building"  # TensorFlow's mark around a tf.function trace
# JAX's marks (TraceMe, Python tracer or not) around a jitted function's lowering and its XLA
# compile: inside a step they mean the function is compiled again while training (a new
# static argument, shape or dtype). A compile counts once; its lowering adds time only.
JAX_COMPILES = ("backend_compile_and_load", "backend_compile")
JAX_LOWERING = "lower_sharding_computation"
# XLA's own compile of a program (TensorFlow's jit_compile=True and auto-clustering; inside
# JAX's compile marks above, which hold it): a tf.function traced once with a relaxed shape
# is still compiled by XLA for each new concrete shape.
XLA_COMPILES = ("CpuCompiler::RunBackend", "GpuCompiler::RunBackend")


def graph_building(host: Timeline | None, steps: Sequence[tuple[int, int]]
                   ) -> tuple[float, int, int]:
    """(seconds, count, XLA compiles among them) of tf.function traces, XLA compiles or JAX
    compiles that start inside the `steps` (absolute (begin, end) ps, in order, not
    overlapping), the time clipped to the step: `tf.function-graph_building` events (JAX:
    lowering and compile marks; XLA: its compiler's backend run) not inside another
    (tracing a function traces the functions it calls). Traces outside steps (a fit's or an
    epoch's start building its datasets, a first compile before the loop) are left out:
    only a trace inside a step is a function traced again."""
    if host is None or not steps:
        return 0.0, 0, 0
    # Under JAX the XLA backend runs beside its compile marks, not inside them: JAX's count.
    jax = bool(host.mids_named(*JAX_COMPILES, JAX_LOWERING))
    names = (GRAPH_BUILDING, *JAX_COMPILES, JAX_LOWERING, *(() if jax else XLA_COMPILES))
    mids = id_array(host.mids_named(*names))
    if not mids.size:
        return 0.0, 0, 0
    lowering = id_array(host.mids_named(JAX_LOWERING))
    xla = id_array(() if jax else host.mids_named(*XLA_COMPILES))
    begins, step_ends = span_bounds(steps)
    total = count = xla_count = 0
    for ld in host.lines:
        at = outermost(ld, mids)
        if not at.size:
            continue
        start, end = ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps
        kk, inside = span_of(start, begins, step_ends)
        total += int((np.minimum(end, step_ends[kk]) - start)[inside].sum())
        count += int((inside & ~member(ld.mid_arr[at], lowering)).sum())
        xla_count += int((inside & member(ld.mid_arr[at], xla)).sum())
    return total / 1e12, count, xla_count


# TensorFlow's marks around a conversion of a NumPy array or Python value into a tensor
# (tf.convert_to_tensor, tf.constant; a variable's assign converts its value there too).
CONVERSIONS = ("convert_to_tensor", "tf.constant")


def tensor_conversions(host: Timeline | None, steps: Sequence[tuple[int, int]] | Spans,
                       lines: Sequence[int] | None = None) -> float:
    """Seconds of the conversion marks (`CONVERSIONS`) that start inside the `steps`
    (absolute (begin, end) ps, in order, not overlapping) on the `lines` that run them (the
    step markers' threads; None: every line), each clipped to its step. Marks inside a
    tf.function's trace (constants of the graph being built) or inside another mark are
    left out: only the job's own conversions, each array once."""
    if host is None or not len(steps):
        return 0.0
    mids = id_array(host.mids_named(*CONVERSIONS))
    if not mids.size:
        return 0.0
    outer = id_array(host.mids_named(*CONVERSIONS, GRAPH_BUILDING))
    begins, step_ends = span_bounds(steps)
    total = 0
    for li in range(len(host.lines)) if lines is None else lines:
        ld = host.lines[li]
        at = outermost(ld, outer)
        at = at[member(ld.mid_arr[at], mids)]
        if not at.size:
            continue
        start, end = ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps
        kk, inside = span_of(start, begins, step_ends)
        total += int((np.minimum(end, step_ends[kk]) - start)[inside].sum())
    return total / 1e12


# A tf.function's call on the eager runtime, and the kernel run inside it: the time between
# the two is the call's set-up; a concrete function's first call instantiates it there
# (Grappler's passes, kernel creation), no event written for it. A function traced again
# is a new concrete function, with a name of its own (`__inference_step_225`).
FUNCTION_CALL = PREFIX + "__inference_"
KERNEL_EXECUTE = "EagerKernelExecute"
# A first call's set-up is the new function's instantiation where it is this far above the
# typical set-up of calls of functions already run (about 0.03 ms) and over this floor.
SETUP_FACTOR = 10.0
SETUP_MIN_PS = 1_000_000_000  # 1 ms


def _is_function_call(name: str) -> bool:
    return name.startswith(FUNCTION_CALL)


def first_run_setup(host: Timeline | None, steps: Sequence[tuple[int, int]] | Spans
                    ) -> tuple[float, int]:
    """(seconds, count) of the set-up before their first kernel of functions' first calls
    in the window that follow a graph build (`tf.function-graph_building`) in the same step:
    a function traced again, then instantiated on its first run. Counted where the set-up
    is over 1 ms and `SETUP_FACTOR` times the median set-up of the window's calls of
    functions called before in it (already instantiated), clipped to the step."""
    if host is None:
        return 0.0, 0
    builds = id_array(host.mids_named(GRAPH_BUILDING))
    if not builds.size:  # no trace in the window (every JAX one): no name scan
        return 0.0, 0
    calls = id_array(host.mids_where_once(_is_function_call))
    kernels = id_array(host.mids_named(KERNEL_EXECUTE))
    begins, step_ends = span_bounds(steps)
    if not calls.size or not kernels.size or not begins.size:
        return 0.0, 0
    built = np.full(begins.size, np.iinfo(np.int64).max)  # each step's first build's start
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (start, set-up, function)
    for ld in host.lines:
        at = outermost(ld, builds)
        if at.size:
            start = ld.start_arr[at] + ld.start_ps
            kk, inside = span_of(start, begins, step_ends)
            np.minimum.at(built, kk[inside], start[inside])
        call = np.flatnonzero(member(ld.mid_arr, calls, ld.dense_top))
        kernel = np.flatnonzero(member(ld.mid_arr, kernels, ld.dense_top))
        if not call.size or not kernel.size:
            continue
        # A line's events are in start order: a call's first kernel is the first kernel
        # event starting at or after the call, where it starts inside the call.
        first = np.searchsorted(ld.start_arr[kernel], ld.start_arr[call])
        has = first < kernel.size
        call, first = call[has], kernel[first[has]]
        has = ld.start_arr[first] < ld.end_arr[call]
        call, first = call[has], first[has]
        found.append((ld.start_arr[call] + ld.start_ps,
                      ld.start_arr[first] - ld.start_arr[call], ld.mid_arr[call]))
    if not found:
        return 0.0, 0
    start, setup, function = (np.concatenate(c) for c in zip(*found, strict=True))
    order = np.argsort(start, kind="stable")
    start, setup, function = start[order], setup[order], function[order]
    is_first = np.zeros(start.size, bool)
    is_first[np.unique(function, return_index=True)[1]] = True
    kk, inside = span_of(start, begins, step_ends)
    new = is_first & inside & (built[kk] <= start)
    floor = float(SETUP_MIN_PS)
    if not is_first.all():  # calls of functions already run: their set-up is typical
        floor = max(floor, SETUP_FACTOR * float(np.median(setup[~is_first])))
    far = np.flatnonzero(new & (setup > floor))
    end = np.minimum(start[far] + setup[far], step_ends[kk[far]])
    return int((end - start[far]).sum()) / 1e12, int(far.size)


# tf.summary's writes: the ops that write an event (scalars, histograms, images, text) and
# flush the writer, run eagerly or in a graph, where a summary op's own math (a histogram's
# bucketing) sits under a `write_summary` name scope.
SUMMARY_WRITE_OPS = frozenset({
    "WriteSummary", "WriteScalarSummary", "WriteHistogramSummary", "WriteImageSummary",
    "WriteAudioSummary", "WriteRawProtoSummary", "WriteGraphSummary", "FlushSummaryWriter"})
SUMMARY_SCOPE = "write_summary/"


def summary_writes(host: Timeline | None, host_ops: dict[str, OpAgg]) -> float:
    """Seconds of tf.summary work in the window: graph ops of the summary writes and their
    `write_summary/` scopes (self time, as the op table gives it), and the same writes run
    eagerly (a Keras TensorBoard callback's)."""
    graph = sum(a.self_ps for name, a in host_ops.items()
                if a.op_type in SUMMARY_WRITE_OPS or SUMMARY_SCOPE in name)
    eager = 0
    if host is not None:
        kinds = _executed(host, SUMMARY_WRITE_OPS.__contains__)
        if kinds:
            mids = np.fromiter(kinds, np.int64, len(kinds))
            for ld in host.lines:
                hit = member(ld.mid_arr, mids, ld.dense_top)
                eager += int((ld.end_arr[hit] - ld.start_arr[hit]).sum())
    return (graph + eager) / 1e12


def _executed(host: Timeline, keep: Callable[[str], bool]) -> dict[int, str]:
    """Metadata id -> op type of the `EagerLocalExecute: <op type>` events whose type
    `keep` takes."""
    return {mid: n[len(PREFIX):] for mid, n in host.names.items()
            if n.startswith(PREFIX) and keep(n[len(PREFIX):])}


def eager_ops(host: Timeline | None, top_n: int, steps: Sequence[tuple[int, int]] | Spans = (),
              first_kept_ps: int | None = None
              ) -> tuple[float, tuple[OpStat, ...], float, float]:
    """(seconds of eager op execution in the window, the longest eager op types, the
    seconds of it that start outside the `steps`: between them, where Keras callbacks and a
    loop's own Python run, and the seconds that start before the first step kept,
    `first_kept_ps`: set-up, in no step or in the dropped first one). `steps`: absolute
    (begin, end) ps, in order, not overlapping; none: 0 seconds outside them."""
    if host is None:
        return 0.0, (), 0.0, 0.0
    kinds = _executed(host, _eager_kind)
    if not kinds:
        return 0.0, (), 0.0, 0.0
    mids = np.fromiter(kinds, np.int64, len(kinds))
    begins, step_ends = span_bounds(steps)
    total: dict[str, list[int]] = {}
    outside = before = 0
    first = (begins[0] if begins.size else 0) if first_kept_ps is None else first_kept_ps
    for ld in host.lines:
        hit = member(ld.mid_arr, mids, ld.dense_top)  # np.isin, by a table of the ids
        if not hit.any():
            continue
        durations = ld.end_arr[hit] - ld.start_arr[hit]
        if begins.size:
            starts = ld.start_arr[hit] + ld.start_ps
            _, inside = span_of(starts, begins, step_ends)
            outside += int(durations[~inside].sum())
            before += int(durations[starts < first].sum())
        for mid, d in zip(ld.mid_arr[hit].tolist(), durations.tolist(), strict=True):
            agg = total.setdefault(kinds[mid], [0, 0])
            agg[0] += 1
            agg[1] += int(d)
    rows = sorted(total.items(), key=lambda kv: (-kv[1][1], kv[0]))
    stats = tuple(OpStat(k, k, False, c, ps / 1e12, ps / 1e12) for k, (c, ps) in rows[:top_n])
    return sum(ps for _, (_, ps) in rows) / 1e12, stats, outside / 1e12, before / 1e12


# A tf.function's gradient taken by a GradientTape outside it: the tape runs the function's
# backward as a call of its own (`EagerLocalExecute: __inference___backward_<f>_<n>_<m>`).
BACKWARD_CALL = PREFIX + "__inference___backward_"


def _is_backward_call(name: str) -> bool:
    return name.startswith(BACKWARD_CALL)


def backward_calls(host: Timeline | None, steps: Sequence[tuple[int, int]] | Spans = ()) -> int:
    """How many tf.function backward passes were run from an eager `GradientTape` (one
    `BACKWARD_CALL` event each) starting inside the `steps` (absolute (begin, end) ps, in
    order, not overlapping; none: 0)."""
    if host is None:
        return 0
    mids = id_array(host.mids_where_once(_is_backward_call))
    begins, ends = span_bounds(steps)
    if not mids.size or not begins.size:
        return 0
    count = 0
    for ld in host.lines:
        hit = member(ld.mid_arr, mids, ld.dense_top)
        if hit.any():
            _, inside = span_of(ld.start_arr[hit] + ld.start_ps, begins, ends)
            count += int(inside.sum())
    return count


def eager_note(seconds: float, top: tuple[OpStat, ...], window_s: float) -> str:
    """One sentence for a window with no step and no function call that ran ops eagerly
    (a model called outside `tf.function`: eager inference, an eager training loop)."""
    if seconds <= 0:
        return ""
    share = f", {100.0 * seconds / window_s:.1f} % of the window" if window_s > 0 else ""
    named = ", ".join(f"{o.name} {o.count}x" for o in top[:3])
    return (f"the window ran ops eagerly, outside tf.function ({1e3 * seconds:.2f} ms{share}"
            f"{'; top: ' + named if named else ''})")


def checkpoint_writes(host: Timeline | None, lines: Sequence[int] | None
                      ) -> tuple[float, int, np.ndarray]:
    """(seconds, writes, each write op's start: absolute ps, sorted) of checkpoint writes on
    the host lines `lines` (the threads that run the steps; None: every line). A write on a
    thread of its own (`tf.train.CheckpointOptions(experimental_enable_async_checkpoint=
    True)`) does not hold the steps and is left out. One write runs one
    `MergeV2Checkpoints` (or, where none, one save op)."""
    none = np.zeros(0, np.int64)
    if host is None:
        return 0.0, 0, none
    kinds = _executed(host, CHECKPOINT_WRITE_OPS.__contains__)
    if not kinds:
        return 0.0, 0, none
    mids = np.fromiter(kinds, np.int64, len(kinds))
    merge = id_array([m for m, k in kinds.items() if k == "MergeV2Checkpoints"])
    total = merges = saves = 0
    starts = [none]
    for li in range(len(host.lines)) if lines is None else lines:
        ld = host.lines[li]
        hit = member(ld.mid_arr, mids, ld.dense_top)
        if not hit.any():
            continue
        total += int((ld.end_arr[hit] - ld.start_arr[hit]).sum())
        starts.append(ld.start_arr[hit] + ld.start_ps)
        merged = int(member(ld.mid_arr[hit], merge).sum()) if merge.size else 0
        merges += merged
        saves += int(hit.sum()) - merged
    return total / 1e12, merges or saves, np.sort(np.concatenate(starts))


def _holding(write_starts: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which of the spans `begin..end` (any order, overlapping or not) hold a write's start."""
    return (np.searchsorted(write_starts, end, side="left")
            > np.searchsorted(write_starts, begin, side="left"))


class CheckpointSteps(NamedTuple):
    """The steps that hold a checkpoint write (`Ops.checkpoint_steps*`)."""

    steps: int = 0
    excess_s: float = 0.0
    other_s: float = 0.0
    eager_s: float = 0.0


def checkpoint_steps(host: Timeline | None, write_starts: np.ndarray, kept: tuple[
        np.ndarray, np.ndarray, np.ndarray], spans: Sequence[tuple[int, int]] | Spans
        ) -> CheckpointSteps:
    """What a checkpoint save costs the steps it runs in, beyond its write ops: the save's
    Python (CheckpointManager, the object graph's walk), its eager variable reads and its
    files. (kept steps holding a write; their time beyond as many typical steps, the median
    of the others; the same for their 'All Others'; eager op time starting in any found step,
    dropped ones too, that holds a write.) `kept`: the kept steps' begin and end (absolute
    ps) and 'All Others' seconds; `spans`: every found step's (begin, end), in order, not
    overlapping. With no step free of writes there is no typical step: no excess."""
    if not write_starts.size:
        return CheckpointSteps()
    begin, end, other = kept
    held = _holding(write_starts, begin, end)
    count = int(held.sum())
    excess = other_excess = 0.0
    if 0 < count < held.size:
        duration = (end - begin) / 1e12
        excess = max(0.0, float(duration[held].sum() - count * np.median(duration[~held])))
        other_excess = max(0.0, float(other[held].sum() - count * np.median(other[~held])))
    eager = 0
    lo, hi = span_bounds(spans)
    writing = _holding(write_starts, lo, hi)
    kinds = _executed(host, _eager_kind) if host is not None and writing.any() else {}
    if kinds:
        mids = np.fromiter(kinds, np.int64, len(kinds))
        lo, hi = lo[writing], hi[writing]
        for ld in host.lines:  # type: ignore[union-attr]
            hit = member(ld.mid_arr, mids, ld.dense_top)
            if hit.any():
                _, inside = span_of(ld.start_arr[hit] + ld.start_ps, lo, hi)
                eager += int((ld.end_arr[hit] - ld.start_arr[hit])[inside].sum())
    return CheckpointSteps(count, excess, other_excess, eager / 1e12)
