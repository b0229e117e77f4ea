"""Host input time split as the Input Pipeline Analyzer does (Section 3).

XProf (`GenerateHostResult`) sums the self time of input ops: enqueue (infeed / host-to-
device copies), file reads (tf.data sources such as `::TFRecord`, read in advance when a
`Prefetch`, `Interleave`, `ParallelMap` or cache stage sits above them, else on demand),
and preprocessing (every other tf.data stage). Without enqueue ops the reads and
preprocessing are reported as they are. tfobs gives XProf's window totals and the same
figures per step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from tfobs.analysis.eventtypes import DATASET, parse_tf_op
from tfobs.analysis.gpu_idle import merge
from tfobs.analysis.input_stages import INPUT_CATEGORIES
from tfobs.analysis.ops import OpAgg
from tfobs.analysis.python_time import TFDATA_NEXT_EVENT, holds_markers
from tfobs.analysis.timeline import (
    LineData,
    Spans,
    Timeline,
    clip_to_spans,
    enclosed,
    id_array,
    int_stats_at,
    member,
    outermost,
    outermost_of,
    span_bounds,
    span_of,
)
from tfobs.summary import INPUT_KINDS, OpStat

_FILE_SOURCES = ("::TFRecord", "::TextLine", "::FixedLengthRecord", "::SSTable",
                 "::RecordIO", "::ArrayRecord")
_ADVANCED = ("::MemoryReader", "::MemoryWriter", "::Interleave", "::Prefetch",
             "::ParallelMap")
KINDS = INPUT_KINDS  # the kinds are defined in summary.py


def kind_of(op: OpAgg) -> str | None:
    # tf.data's stages first: a window may hold thousands of them (a window() per element).
    if op.stage:  # a loader's stage: its category says (`input_stages.INPUT_CATEGORIES`)
        return INPUT_CATEGORIES.get(op.op_type.lower())
    if op.op_type == DATASET:
        if op.name.endswith(_FILE_SOURCES):
            return "advanced_file_read" if any(a in op.name for a in _ADVANCED) else (
                "demanded_file_read")
        return "preprocessing"
    if op.op_type.startswith("InfeedEnqueue") or op.op_type.upper() == "MEMCPYHTOD":
        return "enqueue"
    return None


# XProf 2.24.2 (`IsInputOpNew`) also takes any op whose type is one of these as input:
# "Enqueue" makes a parameter-server worker's `EagerService:Enqueue` (the RPC that queues
# the coordinator's requests, not data) input wait.
_XPROF_INPUT_TYPES = ("enqueue", "read", "preprocessing", "unknown")


def xprof_only_input(host_ops: dict[str, OpAgg]) -> tuple[float, tuple[str, ...]]:
    """(window self seconds, names) of the ops XProf counts as input by type alone."""
    rows = [op for op in host_ops.values()
            if not op.stage and kind_of(op) is None and op.op_type.lower() in _XPROF_INPUT_TYPES]
    rows.sort(key=lambda op: (-op.self_ps, op.name))
    return (sum(op.self_ps for op in rows) / 1e12,
            tuple(f"{op.name}:{op.op_type}" for op in rows))


def host_input_totals(host_ops: dict[str, OpAgg], h2d_ratio: float = 0.0) -> dict[str, float]:
    """Seconds per kind over the whole window (XProf's `input_time_breakdown`).

    `h2d_ratio` is the host-to-device share of the step time: when copies to the device
    are seen, XProf scales reads and preprocessing so that they and the enqueue time keep
    that proportion.
    """
    raw = dict.fromkeys(KINDS, 0.0)
    for op in host_ops.values():
        kind = kind_of(op)
        if kind is not None:
            raw[kind] += op.self_ps / 1e12
    work = raw["demanded_file_read"] + raw["advanced_file_read"] + raw["preprocessing"]
    ratio = min(1.0, max(0.0, h2d_ratio))
    non_enqueue = raw["enqueue"] * (1.0 - ratio) / ratio if ratio > 0 else work
    out = {"enqueue": raw["enqueue"]}
    for kind in ("demanded_file_read", "advanced_file_read", "preprocessing"):
        out[kind] = non_enqueue * raw[kind] / work if work > 0 else 0.0
    out["unclassified"] = max(0.0, non_enqueue - sum(out[k] for k in KINDS[:3]))
    return {k: out[k] for k in KINDS}


def top_input_ops(host_ops: dict[str, OpAgg], top_n: int) -> tuple[OpStat, ...]:
    rows = [op for op in host_ops.values() if kind_of(op) is not None]
    rows.sort(key=lambda a: (-a.self_ps, a.name))
    return tuple(op.stat() for op in rows[:top_n])


PYTHON_OPS = ("EagerPyFunc", "PyFunc", "PyFuncStateless")
TFDATA_THREADS = "tf_data"  # tf.data's thread names: tf_data_private_threadpool/..., ...


# Module-level, so each plane's scan of its names is made once (`mids_where_once`).
def is_python_op(name: str) -> bool:
    """An op that calls back into Python (py_function, numpy_function), by its type."""
    return name.rsplit(":", 1)[-1] in PYTHON_OPS


def is_iterator_event(name: str) -> bool:
    """A tf.data iterator's stage event (`Iterator::...`)."""
    return name.startswith("Iterator::")


# tf.distribute's per-replica iterators (`experimental_distribute_dataset`,
# `distribute_datasets_from_function`) are GeneratorDatasets whose functions read a
# MultiDeviceIterator; each element runs one of these ops.
PER_REPLICA_OPS = ("MultiDeviceIteratorFromStringHandle", "MultiDeviceIteratorGetNextFromShard")


def per_replica_input(host_ops: dict[str, OpAgg]) -> bool:
    """Whether tf.distribute's per-replica input iterators ran in the window."""
    return any(op.op_type in PER_REPLICA_OPS for op in host_ops.values())


# tf.data's copy_to_device (and prefetch_to_device, built on it) is a GeneratorDataset whose
# functions read the source dataset's iterator through a string handle, once per element.
DEVICE_COPY_OPS = ("IteratorFromStringHandleV2",)


def device_copy_input(host_ops: dict[str, OpAgg]) -> bool:
    """Whether copy_to_device / prefetch_to_device's copy ran in the window."""
    return any(op.op_type in DEVICE_COPY_OPS for op in host_ops.values())


def python_op_seconds(host_ops: dict[str, OpAgg], host: Timeline | None = None) -> float:
    """Self time of the ops that call back into Python (py_function, numpy_function,
    from_generator) run by tf.data: with `host`, the share of their time on tf.data's
    threads or inside a tf.data iterator's event (a py_function in the training step has the
    same op name and type, and runs on the step's threads)."""
    total = sum(op.self_ps for op in host_ops.values() if op.op_type in PYTHON_OPS) / 1e12
    if host is None or total <= 0:
        return total
    return total * _inside_tfdata_share(host)


def _python_op_events(host: Timeline) -> Iterator[tuple[LineData, np.ndarray, np.ndarray]]:
    """Each line holding Python ops (py_function, numpy_function, from_generator): the line,
    their sorted positions, and which of them are tf.data's: on a tf.data thread (tf.data
    runs its functions on `tf_data_private_threadpool` threads) or inside an `Iterator::`
    event of their line (a function run inline by the consumer)."""
    py = id_array(host.mids_where_once(is_python_op))
    if not py.size:
        return
    it = id_array(host.mids_where_once(is_iterator_event))
    for ld in host.lines:
        p = np.flatnonzero(member(ld.mid_arr, py, ld.dense_top))
        if not p.size:
            continue
        if ld.name.startswith(TFDATA_THREADS):
            yield ld, p, np.ones(p.size, bool)
            continue
        q = np.flatnonzero(member(ld.mid_arr, it, ld.dense_top)) if it.size else p[:0]
        yield ld, p, (enclosed(ld, q, p) if q.size else np.zeros(p.size, bool))


def _inside_tfdata_share(host: Timeline) -> float:
    """Of the Python ops' event time, the share that is tf.data's (`_python_op_events`)."""
    inside, total = 0, 0
    for ld, p, tfdata in _python_op_events(host):
        dur = ld.end_arr[p] - ld.start_arr[p]
        total += int(dur.sum())
        inside += int(dur[tfdata].sum())
    return inside / total if total > 0 else 1.0


def step_python_op_seconds(host: Timeline, spans: Sequence[tuple[int, int]] | Spans
                           ) -> float:
    """Event time (nested work included) of the Python ops (py_function, numpy_function)
    the steps' own graphs ran inside the kept steps: the ops not tf.data's
    (`_python_op_events`) starting in a step. `python_op_seconds` is the window's, which
    also holds the dropped first and last steps' calls."""
    begin, end = span_bounds(spans)
    order = np.argsort(begin, kind="stable")
    begin, end = begin[order], end[order]
    total = 0
    for ld, p, tfdata in _python_op_events(host):
        p = p[~tfdata]
        at = ld.start_arr[p] + ld.start_ps
        k = np.searchsorted(begin, at, side="right") - 1
        inside = (k >= 0) & (at < end[np.maximum(k, 0)])
        total += int((ld.end_arr[p] - ld.start_arr[p])[inside].sum())
    return total / 1e12


def function_ops(host: Timeline | None, top_n: int = 3) -> tuple[float, tuple[str, ...]]:
    """(seconds, the longest op types) of the TensorFlow ops tf.data's own threads run for
    its stages' functions: a parallel map's or interleave's function (parse_example,
    decoding, augmentation). XProf's stage self times come from the iterators' events
    alone, so this work is in no stage's figure. Python ops (py_function) are left out:
    `python_op_seconds` counts them."""
    if host is None:
        return 0.0, ()
    kinds: dict[int, str] = {}
    for mid, n in host.names.items():
        op = parse_tf_op(n)
        # A function that builds a dataset (interleave's TFRecordDataset) only opens it.
        if op.category in ("tf", "jax") and op.type not in PYTHON_OPS and (
                "Dataset" not in op.type):
            kinds[mid] = op.type
    if not kinds:
        return 0.0, ()
    mids = id_array(kinds)
    by_type: dict[str, int] = {}
    for ld in host.lines:
        if not ld.name.startswith(TFDATA_THREADS):
            continue
        at = outermost(ld, mids)
        for mid, d in zip(ld.mid_arr[at].tolist(), (ld.end_arr[at] - ld.start_arr[at]).tolist(),
                          strict=True):
            by_type[kinds[mid]] = by_type.get(kinds[mid], 0) + int(d)
    top = sorted(by_type, key=lambda k: (-by_type[k], k))[:top_n]
    return sum(by_type.values()) / 1e12, tuple(top)


# The threads tf.data runs its parallel stages' work on (`num_parallel_calls`): a pool sized
# to the host's cores unless the dataset's options cap it.
POOL_THREADS = "tf_data_private_threadpool"


def pool_threads(host: Timeline | None, window_s: float) -> tuple[int, float, float]:
    """(tf.data's pool threads that ran something in the window, the busiest one's busy
    share of the window, all of them's busy seconds: their outermost events' time). One
    thread busy all through the window runs every parallel call one after another; the
    seconds are the pipeline's work on the host's cores (its stages' self times add up
    waits on one another)."""
    if host is None or window_s <= 0:
        return 0, 0.0, 0.0
    busy = [int((ld.end_arr[at] - ld.start_arr[at]).sum())
            for ld in host.lines if ld.name.startswith(POOL_THREADS) and len(ld)
            for at in [outermost_of(ld, np.arange(len(ld)))]]
    if not busy:
        return 0, 0.0, 0.0
    return len(busy), min(1.0, max(busy) / 1e12 / window_s), sum(busy) / 1e12


# The pipeline's last stage as the step sees it: each get_next of a root `prefetch` is one
# such event on the thread that fetches, with the elements its buffer held then.
# Every fetch carries its `buffer_limit`; `buffered_elements` only where the buffer held some.
ROOT_PREFETCH = "Iterator::Root::Prefetch"
BUFFERED, LIMIT = "buffered_elements", "buffer_limit"


class Fetches(NamedTuple):
    """The root prefetch's fetches inside the steps (`prefetch_fetches`)."""

    fetches: int = 0
    ready: int = 0  # of them, those that found a batch in the buffer
    seconds: float = 0.0  # all of them
    empty_s: float = 0.0  # those that found the buffer empty
    # The longest: its seconds, the step it is in (an index into the steps), whether it
    # found a batch ready, its (begin, end) ps; the median fetch's seconds.
    longest_s: float = 0.0
    longest_step: int = -1
    longest_ready: bool = False
    longest_span: tuple[int, int] = (0, 0)
    median_s: float = 0.0
    # The fetches that found a batch ready yet took SLOW_FETCH_FACTOR times the median
    # fetch or more, and a millisecond or more: how many, their seconds, their (begin,
    # end) ps and steps (indices into the steps), in time order.
    slow_ready: int = 0
    slow_ready_s: float = 0.0
    slow_ready_spans: tuple[tuple[int, int], ...] = ()
    slow_ready_steps: tuple[int, ...] = ()


# A ready fetch this many times the median fetch (the hand-over), and a millisecond or
# more, is no hand-over: a tenth of a millisecond or so hands a ready batch over, and an
# in-graph fetch's few microseconds vary by far more than five times.
SLOW_FETCH_FACTOR = 5.0
SLOW_FETCH_MIN_PS = 10**9


def prefetch_fetches(host: Timeline | None, steps: Sequence[tuple[int, int]]) -> Fetches:
    """A root prefetch's fetches that start inside the `steps` (absolute (begin, end) ps,
    in order, not overlapping): how many, how many found a batch ready, seconds of them all
    and of those that found the buffer empty, and the longest and the median fetch. A fetch
    that finds a batch ready costs only the hand-over (a tenth of a millisecond or so): the
    pipeline keeps up, whatever that wait adds up to against short steps. A fetch that
    finds the buffer empty waits for the pipeline."""
    if host is None or not steps or LIMIT not in host.stat_ids:
        return Fetches()
    mids = id_array(host.mids_named(ROOT_PREFETCH))
    if not mids.size:
        return Fetches()
    lo, hi = span_bounds(steps)
    wanted = {host.stat_ids[k]: k for k in (BUFFERED, LIMIT) if k in host.stat_ids}
    fetches = ready = 0
    all_ps = empty_ps = 0
    longest = (-1, -1, False, 0, 0)  # (ps, step, ready, begin, end)
    took_all: list[np.ndarray] = []
    # per fetch: (seconds ps, ready, step, begin ps), for the slow ready ones
    each: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for ld in host.lines:
        pos = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
        if not pos.size:
            continue
        step, inside = span_of(ld.start_arr[pos] + ld.start_ps, lo, hi)
        pos, step = pos[inside], step[inside]
        found = int_stats_at(host, ld.indices(pos), wanted, raw=True) if pos.size else {}
        if LIMIT not in found:  # not the fetching side, or a TensorFlow that writes none
            continue
        fetched = found[LIMIT][1]
        held, has = found.get(BUFFERED, (np.zeros(pos.size, np.int64), fetched & False))
        filled = fetched & has & (held > 0)
        fetches += int(fetched.sum())
        ready += int(filled.sum())
        took = ld.end_arr[pos] - ld.start_arr[pos]
        all_ps += int(took[fetched].sum())
        empty_ps += int(took[fetched & ~filled].sum())
        if fetched.any():
            took_all.append(took[fetched])
            each.append((took[fetched], filled[fetched], step[fetched],
                         ld.start_arr[pos[fetched]] + ld.start_ps))
            j = int(np.flatnonzero(fetched)[np.argmax(took[fetched])])
            if int(took[j]) > longest[0]:
                begin = int(ld.start_arr[pos[j]]) + ld.start_ps
                longest = (int(took[j]), int(step[j]), bool(filled[j]), begin,
                           begin + int(took[j]))
    if not fetches:
        return Fetches()
    median = float(np.median(np.concatenate(took_all)))
    each_took, each_ready, each_step, each_begin = (
        np.concatenate(c) for c in zip(*each, strict=True))
    slow = np.flatnonzero(each_ready & (each_took >= max(SLOW_FETCH_FACTOR * median,
                                                         SLOW_FETCH_MIN_PS)))
    slow = slow[np.argsort(each_begin[slow], kind="stable")]
    slow_took = each_took[slow].tolist()
    return Fetches(fetches, ready, all_ps / 1e12, empty_ps / 1e12, longest[0] / 1e12,
                   longest[1], longest[2], (longest[3], longest[4]), median / 1e12,
                   int(slow.size), sum(slow_took) / 1e12,
                   tuple((int(b), int(b + t)) for b, t in zip(each_begin[slow].tolist(),
                                                             slow_took, strict=True)),
                   tuple(int(k) for k in each_step[slow].tolist()))


def work_during(host: Timeline | None, span: tuple[int, int]) -> tuple[str, str, float]:
    """What tf.data's own threads ran during `span` (absolute begin, end ps): the stage
    (`Iterator::...` event other than the root prefetch) and the TensorFlow op (a stage
    function's: ParseExampleV2, DecodeJpeg) that overlap it longest, and that op's seconds
    in it; "" and 0 where none ran."""
    begin, end = span
    if host is None or end <= begin:
        return "", "", 0.0
    stage: dict[int, int] = {}
    op: dict[int, int] = {}
    for ld in host.lines:
        if not ld.name.startswith(TFDATA_THREADS) or not len(ld):
            continue
        lo, hi = begin - ld.start_ps, end - ld.start_ps
        at = np.flatnonzero((ld.start_arr < hi) & (ld.end_arr > lo))
        if not at.size:
            continue
        overlap = np.minimum(ld.end_arr[at], hi) - np.maximum(ld.start_arr[at], lo)
        for mid, d in zip(ld.mid_arr[at].tolist(), overlap.tolist(), strict=True):
            kind = _work_kind(host, mid)
            into = stage if kind == "stage" else op if kind == "op" else None
            if into is not None:
                into[mid] = max(into.get(mid, 0), int(d))
    top_stage = max(stage, key=lambda m: (stage[m], len(host.names.get(m, ""))),
                    default=None)
    top_op = max(op, key=lambda m: (op[m], -m), default=None)
    return (host.names.get(top_stage, "") if top_stage is not None else "",
            parse_tf_op(host.names.get(top_op, "")).name if top_op is not None else "",
            op[top_op] / 1e12 if top_op is not None else 0.0)


def _work_kind(host: Timeline, mid: int) -> str:
    name = host.names.get(mid, "")
    if is_iterator_event(name):
        return "" if name == ROOT_PREFETCH else "stage"
    op = parse_tf_op(name)
    return "op" if op.category == "tf" and "Dataset" not in op.type else ""


# A `for batch in dataset` loop inside a tf.function: AutoGraph runs it as a ReduceDataset
# op, which makes its iterator (`MakeIterator::*`) and takes each batch (`ReduceIterator::
# Root`) inside the op, on a tf.data thread of its own: no IteratorGetNext, so no input time
# to XProf.
REDUCE_FETCH = "ReduceIterator::Root"
MAKE_ITERATOR = "MakeIterator::"


def in_graph_loop_input(host: Timeline | None, steps: Sequence[tuple[int, int]]
                        ) -> tuple[float, float]:
    """(seconds of batches taken by dataset loops run inside the graph, seconds of iterators
    made for them), of the events that start inside the `steps` (absolute (begin, end) ps,
    in order, not overlapping), outermost ones only."""
    if host is None or not steps:
        return 0.0, 0.0
    fetch = id_array(host.mids_named(REDUCE_FETCH))
    if not fetch.size:
        return 0.0, 0.0
    make = id_array(host.mids_where_once(_is_make_iterator))
    lo, hi = span_bounds(steps)
    out = [0, 0]
    for ld in host.lines:
        for k, mids in enumerate((fetch, make)):
            at = outermost(ld, mids) if mids.size else mids
            if not at.size:
                continue
            _, inside = span_of(ld.start_arr[at] + ld.start_ps, lo, hi)
            out[k] += int((ld.end_arr[at] - ld.start_arr[at])[inside].sum())
    return out[0] / 1e12, out[1] / 1e12


# `iter(dataset)` run from Python (eagerly): the op that binds a new iterator to its dataset.
EAGER_MAKE_ITERATOR = "EagerLocalExecute: MakeIterator"


def iterators_in_steps(host: Timeline | None, steps: Sequence[tuple[int, int]]
                       ) -> tuple[int, float]:
    """(how many of the `steps` (absolute (begin, end) ps, in order, not overlapping) made a
    dataset iterator from Python, window seconds those iterators took to make): a loop that
    takes each batch with `next(iter(dataset))` starts its pipeline over in every step."""
    if host is None or not steps:
        return 0, 0.0
    mids = id_array(host.mids_named(EAGER_MAKE_ITERATOR))
    if not mids.size:
        return 0, 0.0
    lo, hi = span_bounds(steps)
    held: set[int] = set()
    made = 0
    for ld in host.lines:
        at = outermost(ld, mids)
        if not at.size:
            continue
        k, inside = span_of(ld.start_arr[at] + ld.start_ps, lo, hi)
        held.update(k[inside].tolist())
        made += int((ld.end_arr[at] - ld.start_arr[at])[inside].sum())
    return len(held), made / 1e12


def _is_make_iterator(name: str) -> bool:
    return name.startswith(MAKE_ITERATOR)


def _is_get_next(name: str) -> bool:
    return name.lower().startswith("iteratorgetnext")


# A tf.function's call from Python (`EagerLocalExecute: __inference_<name>_<n>`).
FUNCTION_CALL = "EagerLocalExecute: __inference_"


def _is_function_call(name: str) -> bool:
    return name.startswith(FUNCTION_CALL)


def input_between_steps(host: Timeline | None, steps: Sequence[tuple[int, int]]) -> float:
    """Mean input wait per gap between consecutive `steps` (absolute (begin, end) ps, in
    order), in seconds: `IteratorGetNext*` events (XProf's input-wait events), and tfobs's
    tf.data next() events on the thread that marks the steps (a JAX job's), clipped to the
    gaps, overlaps counted once. Input fetched outside the step markers (`for batch in
    dataset:` around a marked step) is a wait no step breakdown sees. A fetch while the
    marking thread runs a tf.function between the steps is that function's own input (Keras
    fit's validation run, an evaluation), not the steps' batch: the gap rules name the
    call."""
    if host is None or len(steps) < 2:
        return 0.0
    mids = id_array(host.mids_where_once(_is_get_next))
    ours = id_array(host.mids_named(TFDATA_NEXT_EVENT))
    if not mids.size and not ours.size:
        return 0.0
    spans_ps = np.fromiter(itertools.chain.from_iterable(steps), np.int64, 2 * len(steps))
    a_end, b_begin = spans_ps[1:-1:2], spans_ps[2::2]  # each step's end, the next's begin
    gap = b_begin > a_end
    if not gap.any():
        return 0.0
    lo, hi = a_end[gap], b_begin[gap]
    calls = id_array(host.mids_where_once(_is_function_call))
    spans: list[tuple[int, int]] = []
    inside_calls: list[tuple[int, int]] = []
    for ld in host.lines:
        at = member(ld.mid_arr, mids, ld.dense_top)
        marks = bool(ours.size or calls.size) and holds_markers(ld, steps)
        if ours.size and marks:  # a loader thread's fetch is no wait
            at |= member(ld.mid_arr, ours, ld.dense_top)
        spans += _clipped(ld, np.flatnonzero(at), lo, hi)
        if calls.size and marks:
            inside_calls += _clipped(
                ld, np.flatnonzero(member(ld.mid_arr, calls, ld.dense_top)), lo, hi)
    waits = _without(merge(spans), merge(inside_calls)) if inside_calls else merge(spans)
    return sum(b - a for a, b in waits) / 1e12 / lo.size


def _clipped(ld: LineData, at: np.ndarray, lo: np.ndarray, hi: np.ndarray
             ) -> list[tuple[int, int]]:
    """The events `at` of the line, clipped to the spans `lo`..`hi`, empty ones left out."""
    if not at.size:
        return []
    start, end = clip_to_spans(ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps,
                               lo, hi)
    real = end > start  # a damaged capture's events may end before they begin
    return list(zip(start[real].tolist(), end[real].tolist(), strict=True))


def _without(spans: list[tuple[int, int]], cut: list[tuple[int, int]]
             ) -> list[tuple[int, int]]:
    """The parts of `spans` outside every span of `cut` (both merged: sorted, apart)."""
    out: list[tuple[int, int]] = []
    k = 0
    for a, b in spans:
        while k < len(cut) and cut[k][1] <= a:
            k += 1
        j = k
        while a < b and j < len(cut) and cut[j][0] < b:
            if cut[j][0] > a:
                out.append((a, cut[j][0]))
            a = max(a, cut[j][1])
            j += 1
        if a < b:
            out.append((a, b))
    return out
