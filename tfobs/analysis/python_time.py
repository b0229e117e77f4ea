"""Python run inside the steps, read from the Python tracer's events.

With the Python tracer on (JAX's `jax.profiler.trace` turns it on by default; TensorFlow's
`python_tracer_level=1`), every Python function call is a host event named `$<file>:<line>
<function>` or `$<module> <builtin>`. XProf types them as host compute like any host event,
so a step that waits 2 ms in `time.sleep` for a Python data loader reads as 2 ms of host
compute and "NOT input-bound". The time a Python event is the innermost event of its thread
inside the steps is the Python the step ran.

Waiting is not Python work: a JAX step that ends in `block_until_ready` (or `float(loss)`)
leaves its own frame innermost while XLA runs the compiled program on the PjRt client's
threads (events with a `program_id`), since the wait itself writes no event but PjRt's
`CommonPjRtBuffer::Await` pair around it. Python time that overlaps the compiled program's
ops on another thread, or such a wait, is left out: the step waits then (or, with async
dispatch, its Python hides behind the program). A program run on the Python thread itself
nests its ops under the call: Python innermost inside them is a host callback's
(jax.debug.print, io_callback), Python the step runs, and it counts.

Innermost, not self time: the tracer's events overlap the annotations around them by a
few microseconds (a function returning the step marker ends after the marker begins), so
a nesting walk would take the whole marker for the function's own time. At each instant
the innermost event is the one that began last among those still open.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from tfobs.analysis.eager import GRAPH_BUILDING, JAX_COMPILES, JAX_LOWERING
from tfobs.analysis.gpu_idle import covered_ps, merge, merged_spans
from tfobs.analysis.input_stages import stage_spans
from tfobs.analysis.timeline import (
    DENSE_IDS,
    LineData,
    Spans,
    Timeline,
    clip_to_spans,
    id_array,
    int_stats_at,
    member,
    outermost,
    span_bounds,
    unique,
)
from tfobs.xspace.columns import wire

PYTHON_EVENT_PREFIX = "$"
TOP_FUNCTIONS = 3


def is_python_event(name: str) -> bool:
    """Whether an event is the Python tracer's (`$<file>:<line> <function>`)."""
    return name.startswith(PYTHON_EVENT_PREFIX)


PythonFigures = tuple[float, tuple[str, ...], float, float, float, float]


def python_in_steps(host: Timeline | None, spans: Sequence[tuple[int, int]] | Spans,
                    within: Sequence[tuple[int, int]] | Spans | None = None
                    ) -> PythonFigures:
    """(seconds of Python inside the steps on the thread that runs them, that thread's
    functions with the most of it, longest first, at most TOP_FUNCTIONS, names without the
    tracer's `$`, the seconds of it inside JAX's host callbacks, the seconds of it inside a
    tf.data iterator's next(), the seconds of it waiting for a batch from another thread:
    `queue.Queue.get`, `Future.result`, the seconds of it in NumPy reads of device values
    (`_device_reads`)). `spans`: the steps as
    (begin, end) ps on the host's time base; the thread that runs them is the one holding
    their markers (a Python loader thread's work overlaps the steps without being theirs),
    the most Python where no thread holds them. `within`: other spans of that thread to
    read instead of the steps (the gaps between them)."""
    return python_in_regions(host, spans, [spans if within is None else within])[0]




def python_in_regions(host: Timeline | None, spans: Sequence[tuple[int, int]] | Spans,
                      regions: Sequence[Sequence[tuple[int, int]] | Spans]
                      ) -> list[PythonFigures]:
    """`python_in_steps` read within each of `regions` (the steps, the gaps between them):
    one pass over the thread's events serves them all (a long window's main thread holds
    tens of thousands)."""
    none: PythonFigures = (0.0, (), 0.0, 0.0, 0.0, 0.0)
    if host is None or not len(spans):
        return [none] * len(regions)
    py = id_array(host.mids_where_once(is_python_event))
    if not py.size:
        return [none] * len(regions)
    rows = [np.stack(merged_spans(*span_bounds(r)), 1) for r in regions]
    lines = [ld for ld in host.lines if member(ld.mid_arr, py, ld.dense_top).any()]
    # One Python thread is the one read, whether it holds the markers or not.
    marking = [ld for ld in lines if holds_markers(ld, spans)] if len(lines) > 1 else lines
    trampolines, nexts, waits = _frame_kinds(host)
    numpy_calls = id_array(host.mids_named(*NUMPY_READS))
    best: list[tuple[int, np.ndarray, np.ndarray, int, int, int, int]] = [
        (0, py[:0], py[:0], 0, 0, 0, 0)] * len(regions)
    for ld in marking or lines:
        # A loader's outermost input stages are input wait to XProf, not host compute.
        # Only the rows the thread's events reach: each thread read against every step
        # made thousands of threads of one event each quadratic (20,000: 24 s).
        a, b = _extent(ld)
        work = compiled_work(host, ld, (a, b))
        busy = work
        if (stages := stage_spans(host, ld)).size:
            busy = union_rows(np.concatenate([busy, stages]))
        found = _innermost_python_in(ld, py, [_reaching(r, a, b) for r in rows],
                                     _reaching(busy, a, b))
        reads = _device_reads(ld, numpy_calls, work)
        for r, (mids, ps, lo) in enumerate(found):
            total = int(ps.sum())
            if total > best[r][0]:
                best[r] = (total, mids, ps, _within(ld, trampolines, lo, ps),
                           _within(ld, nexts, lo, ps), _within(ld, waits, lo, ps),
                           int(ps[_inside(lo, reads)].sum()) if reads.size else 0)
    return [_python_figures(host, steps, *found, marking) if found[0] else none
            for steps, found in zip(rows, best, strict=True)]


def _extent(ld: LineData) -> tuple[int, int]:
    """The first and last time a line's events reach (absolute ps)."""
    if not len(ld):
        return 0, -1
    lo = min(int(ld.start_arr.min()), int(ld.end_arr.min()))
    hi = max(int(ld.start_arr.max()), int(ld.end_arr.max()))
    return lo + ld.start_ps, hi + ld.start_ps


def _reaching(rows: np.ndarray, a: int, b: int) -> np.ndarray:
    """The rows of merged (begin, end) `rows` (sorted, disjoint) that reach into [a, b]:
    those outside cut no stretch of events that lie in it."""
    first = int(np.searchsorted(rows[:, 1], a, side="left"))
    last = int(np.searchsorted(rows[:, 0], b, side="right"))
    return rows[first:max(first, last)]


def _python_figures(host: Timeline, steps: np.ndarray, total: int, mids: np.ndarray,
                    ps: np.ndarray, in_callbacks: int, in_tfdata: int, in_waits: int,
                    in_reads: int, marking: Sequence[LineData] = ()) -> PythonFigures:
    # A callback XLA runs on its own worker threads leaves no Python tracer event there
    # (the tracer sees the threads Python started); its op does, named for the callback.
    # On the steps' own thread (XLA's CPU client runs a small program inline) the tracer
    # saw the callback's Python already: its op there holds that Python, not more of it.
    own = min(_callback_ops_ps(host, steps, only=marking), total) if marking else 0
    in_callbacks = max(in_callbacks, own, _callback_ops_ps(host, steps, skip=marking))
    return (total / 1e12, _top_functions(host, mids, ps), in_callbacks / 1e12,
            in_tfdata / 1e12, in_waits / 1e12, in_reads / 1e12)


# A JAX job's checkpoint library runs in Python (orbax: checkpoint_manager.py,
# async_checkpointer.py, ...; flax's checkpoints.py): the Python tracer's file names say so.
# A save writes files (a millisecond or more); a check whether to save takes microseconds.
CHECKPOINT_FILE = "checkpoint"
MIN_SAVE_PS = 1_000_000_000  # 1 ms


def _checkpoint_python(name: str) -> bool:
    return is_python_event(name) and CHECKPOINT_FILE in name.partition(" ")[0].lower()


def python_checkpoint_saves(host: Timeline | None, lines: Sequence[int] | None
                            ) -> tuple[float, int, np.ndarray]:
    """(seconds, saves, each save's start: absolute ps, sorted) of a checkpoint library's
    Python calls of a millisecond or more, outermost, on the host lines `lines` (the
    threads that run the steps; None: every line), as `eager.checkpoint_writes` reads
    TensorFlow's write ops: a JAX job's saves (orbax's CheckpointManager.save)."""
    none = np.zeros(0, np.int64)
    if host is None:
        return 0.0, 0, none
    mids = id_array(host.mids_where_once(_checkpoint_python))
    if not mids.size:
        return 0.0, 0, none
    total, starts = 0, []
    for li, ld in enumerate(host.lines):
        if lines is not None and li not in lines:
            continue
        at = outermost(ld, mids)
        at = at[(ld.end_arr[at] - ld.start_arr[at]) >= MIN_SAVE_PS]
        total += int((ld.end_arr[at] - ld.start_arr[at]).sum())
        starts.append(ld.start_arr[at] + ld.start_ps)
    found = np.sort(np.concatenate(starts)) if starts else none
    return total / 1e12, int(found.size), found


def _python_function(name: str) -> bool:
    """A Python function's event (`$file.py:12 name`), not a C function's (`$time sleep`,
    `$<unknown> acquire`): C code may wait with the GIL released, Python code holds it."""
    return is_python_event(name) and ":" in name.partition(" ")[0]


# A stretch of a Python thread with no event open, between two of its events, at most this
# long: the thread ran Python bytecode of a frame entered before the trace began (a loop
# calling small functions); a thread waiting for the GIL leaves longer silences.
UNSEEN_PYTHON_PS = 10_000_000  # 10 us


def python_beside_steps(host: Timeline | None, spans: Sequence[tuple[int, int]] | Spans
                        ) -> tuple[float, str, tuple[str, ...]]:
    """(seconds of Python run inside the steps by the busiest Python thread other than the
    one holding the step markers, that thread's name, its functions with the most of it,
    longest first, at most TOP_FUNCTIONS). Python threads share one GIL: a thread that
    keeps running Python (a polling loop, a busy logger) makes the step's own Python wait.
    Counted: stretches whose innermost event is a Python function, and the short silences
    between the thread's events (`UNSEEN_PYTHON_PS`); C calls, which may release the GIL
    (a sleep, a lock, a queue's or a socket's read), are not. Nothing where no thread
    holds the markers."""
    none: tuple[float, str, tuple[str, ...]] = (0.0, "", ())
    if host is None or not len(spans):
        return none
    py = id_array(host.mids_where_once(is_python_event))
    if not py.size:
        return none
    functions = id_array(host.mids_where_once(_python_function))
    lines = [ld for ld in host.lines if member(ld.mid_arr, py, ld.dense_top).any()]
    if len(lines) < 2:  # no other Python thread
        return none
    marking = {id(ld) for ld in lines if holds_markers(ld, spans)}
    if not marking:
        return none
    steps = np.stack(merged_spans(*span_bounds(spans)), 1)
    best: tuple[int, str, np.ndarray, np.ndarray] = (0, "", py[:0], py[:0])
    for ld in lines:
        if id(ld) in marking:
            continue
        lo, hi, _, owner = _stretches(ld, [steps], np.zeros((0, 2), np.int64))
        seen = owner >= 0
        mids = ld.mid_arr[np.maximum(owner, 0)]
        first, last = ld.start_arr[0] + ld.start_ps, ld.end_arr.max() + ld.start_ps
        held = ~seen & (hi - lo <= UNSEEN_PYTHON_PS) & (lo >= first) & (hi <= last)
        held[seen] = member(mids[seen], functions, ld.dense_top)
        total = int((hi - lo)[held].sum())
        if total > best[0]:
            named = held & seen
            best = (total, ld.name, mids[named], (hi - lo)[named])
    total, name, mids, ps = best
    return (total / 1e12, name, _top_functions(host, mids, ps) if mids.size else ()
            ) if total else none


def _top_functions(host: Timeline, mids: np.ndarray, ps: np.ndarray) -> tuple[str, ...]:
    """The functions (metadata ids `mids`, each stretch's `ps`) with the most time, longest
    first, at most TOP_FUNCTIONS, without the tracer's `$`."""
    if 0 <= int(mids.min()) and int(mids.max()) < DENSE_IDS:  # ids are small counters
        by_id = np.zeros(int(mids.max()) + 1, np.int64)
        np.add.at(by_id, mids, ps)
        names = np.flatnonzero(by_id)
        sums = by_id[names]
    else:
        names, at = np.unique(mids, return_inverse=True)
        sums = np.zeros(names.size, np.int64)
        np.add.at(sums, at, ps)
    label = [host.names[m] for m in names.tolist()]
    top = sorted(range(names.size), key=lambda j: (-int(sums[j]), label[j]))[:TOP_FUNCTIONS]
    return tuple(label[j][len(PYTHON_EVENT_PREFIX):] for j in top)


# JAX's trampoline for host callbacks (jax/_src/callback.py): every jax.debug.print,
# io_callback and pure_callback runs its Python inside it.
_CALLBACK_FILE, _CALLBACK_FUNCTION = "callback.py:", " _wrapped_callback"


# XLA's ops running a JAX host callback (jax.debug.print / debug.callback, pure_callback,
# io_callback), on whichever thread XLA runs them.
_CALLBACK_OPS = ("debug_callback", "pure_callback", "io_callback", "xla_python_cpu_callback",
                 "xla_ffi_python_cpu_callback", "xla_python_gpu_callback")


def _is_callback_op(name: str) -> bool:
    return name.startswith(_CALLBACK_OPS)


def _callback_ops_ps(host: Timeline, steps: np.ndarray, skip: Sequence[LineData] = (),
                     only: Sequence[LineData] | None = None) -> int:
    """ps of host callback ops inside the steps (`steps`: merged (begin, end) rows), on
    the lines `only` (default: every line) other than `skip`."""
    ops = id_array(host.mids_where_once(_is_callback_op))
    if not ops.size:
        return 0
    total = 0
    skipped = {id(ld) for ld in skip}
    for ld in host.lines if only is None else only:
        if id(ld) in skipped:
            continue
        at = member(ld.mid_arr, ops, ld.dense_top)
        if at.any():
            lo = ld.start_arr[at] + ld.start_ps
            hi = ld.end_arr[at] + ld.start_ps
            total += int(covered_ps(steps[:, 0], steps[:, 1], lo, hi).sum())
    return total


def _is_callback(name: str) -> bool:
    return (name.startswith(PYTHON_EVENT_PREFIX + _CALLBACK_FILE)
            and name.endswith(_CALLBACK_FUNCTION))


# A tf.data iterator's next() as the Python tracer names it (`$iterator_ops.py:824 __next__`;
# `dataset_ops.py`'s is as_numpy_iterator's): a JAX step fed by tf.data waits there for its
# batch. jax.profiler records no TensorFlow op, so that wait is Python to XProf.
_TFDATA_NEXT = {"iterator_ops.py": ("__next__", "_next_internal", "get_next",
                                    "get_next_as_optional"),
                "multi_device_iterator_ops.py": ("get_next",),
                "dataset_ops.py": ("__next__",)}


def _is_tfdata_next(name: str) -> bool:
    return _frame_in(name, _TFDATA_NEXT)


def _frame_in(name: str, functions: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether the tracer's event `$<file>:<line> <function>` is one of `functions`
    ({file: its functions})."""
    where, _, function = name[len(PYTHON_EVENT_PREFIX):].partition(" ")
    return (name.startswith(PYTHON_EVENT_PREFIX)
            and function in functions.get(where.partition(":")[0], ()))


# A step taking its batch from a loader thread or process of the job's own: a
# `queue.Queue.get`, a `concurrent.futures` `Future.result`, a multiprocessing queue's or
# pool result's `get`. The time inside is a wait for the loader (the lock it blocks on
# releases the GIL), not Python the step runs.
_LOADER_WAIT = {"queue.py": ("get",), "_base.py": ("result",), "queues.py": ("get",),
                "pool.py": ("get",)}


def _is_loader_wait(name: str) -> bool:
    return _frame_in(name, _LOADER_WAIT)


# The files those frames are in, as the tracer names them: a tracer capture holds tens of
# thousands of names, and only these few are read further.
_KIND_FILES = tuple(PYTHON_EVENT_PREFIX + f + ":" for f in (
    _CALLBACK_FILE.rstrip(":"), *_TFDATA_NEXT, *_LOADER_WAIT))


def _frame_kinds(host: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(host callbacks' trampolines, tf.data iterators' next(), loader waits): the ids of
    the Python frames `_is_callback`, `_is_tfdata_next` and `_is_loader_wait` take, in one
    pass over the names."""
    kinds: tuple[set[int], set[int], set[int]] = (set(), set(), set())
    for mid, name in host.names.items():
        if not name.startswith(_KIND_FILES):
            continue
        for kind, test in zip(kinds, (_is_callback, _is_tfdata_next, _is_loader_wait),
                              strict=True):
            if test(name):
                kind.add(mid)
    return id_array(kinds[0]), id_array(kinds[1]), id_array(kinds[2])


# tfobs's own event around a tf.data iterator's next() in a JAX job
# (`capture/tfdata_wait.py`, which holds the same string): the wait without the Python
# tracer, which live windows leave off.
TFDATA_NEXT_EVENT = "tf.data next() (tfobs)"


def annotated_tfdata_next(host: Timeline | None, spans: Sequence[tuple[int, int]],
                          busy: Callable[[], np.ndarray] | None = None) -> float:
    """Seconds inside tfobs's tf.data next() events within the steps (`spans`: (begin,
    end) ps on the host's time base), on the thread holding the step markers: a loader
    thread's fetches overlap the steps without being their wait. `busy`: where a GPU runs
    work, as (begin, end) rows on the same time base, made when asked (most captures hold
    no such event): a fetch while the device computes
    the step dispatched before it (JAX's asynchronous dispatch) stalls nothing, so only
    the part with every device idle counts."""
    if host is None or not spans:
        return 0.0
    ids = id_array(host.mids_named(TFDATA_NEXT_EVENT))
    if not ids.size:
        return 0.0
    steps = np.stack(merged_spans(*span_bounds(spans)), 1)
    waits: list[tuple[int, int]] = []
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, ids, ld.dense_top))
        if not at.size or not holds_markers(ld, spans):
            continue
        start, end = clip_to_spans(ld.start_arr[at] + ld.start_ps,
                                   ld.end_arr[at] + ld.start_ps, steps[:, 0], steps[:, 1])
        real = end > start  # a damaged capture's events may end before they begin
        waits.extend(zip(start[real].tolist(), end[real].tolist(), strict=True))
    merged = merge(waits)
    total = sum(b - a for a, b in merged)
    device = busy() if busy is not None and merged else None
    if device is not None and device.size:
        iv, busy_iv = np.array(merged, np.int64), union_rows(device)
        total -= int(covered_ps(busy_iv[:, 0], busy_iv[:, 1], iv[:, 0], iv[:, 1]).sum())
    return max(total, 0) / 1e12


# NumPy making an array of a jax.Array (np.asarray(loss), np.array(metrics)) calls the
# array's C++ __array__: no JAX Python frame under it, only the tracer's event for the NumPy
# function. Such a call waits for the program that computes the value, then copies it
# back: it ends just after the compiled work it waited for. A loader's np.asarray of a
# list ends when its own work does, whatever a program beside it is doing.
NUMPY_READS = (PYTHON_EVENT_PREFIX + "numpy asarray", PYTHON_EVENT_PREFIX + "numpy array")
# The copy back after the awaited work: at most this share of the call's own time (the
# test captures' reads: 16-33 us after the program, of calls of 1.4-8.2 ms).
READ_TAIL = 0.25


def _device_reads(ld: LineData, numpy_calls: np.ndarray, work: np.ndarray) -> np.ndarray:
    """(begin, end) rows, merged, of the line's NumPy calls (`numpy_calls`: metadata ids)
    that read a device value: compiled work (`work`: merged rows) ran during the call and
    its last row there ended inside the call, no more than READ_TAIL of the call's time
    before the call's end."""
    none = np.zeros((0, 2), np.int64)
    if not numpy_calls.size or not work.size:
        return none
    at = np.flatnonzero(member(ld.mid_arr, numpy_calls, ld.dense_top))
    if not at.size:
        return none
    begin, end = ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps
    # The last row of work begun before each call ends: if it ends after the call, the call
    # did not wait for it.
    k = np.searchsorted(work[:, 0], end, side="left") - 1
    last = np.where(k >= 0, work[np.maximum(k, 0), 1], begin)
    read = (k >= 0) & (last > begin) & (last <= end) & (end - last <= READ_TAIL * (end - begin))
    return union_rows(np.stack([begin[read], end[read]], 1)) if read.any() else none


def _within(ld: LineData, outer: np.ndarray, lo: np.ndarray, ps: np.ndarray) -> int:
    """ps of the stretches (starting at `lo`, sorted) inside one of the line's `outer`
    events."""
    if not outer.size or not lo.size:
        return 0
    at = member(ld.mid_arr, outer, ld.dense_top)
    if not at.any():
        return 0
    iv = np.stack([ld.start_arr[at], ld.end_arr[at]], 1) + ld.start_ps
    return int(ps[_inside(lo, union_rows(iv))].sum())


def holds_markers(ld: LineData, spans: Sequence[tuple[int, int]] | Spans) -> bool:
    """Some event of the line spans a step exactly: that step's marker."""
    begin, end = span_bounds(spans)
    # In (begin, end) order: the steps sharing a begin are then a run sorted by end, searched
    # below instead of read whole for each event (thousands of steps sharing one begin, on
    # as many threads, made this quadratic: 8,000 took 14 s).
    if begin.size > 1 and not ((begin[1:] > begin[:-1])
                               | ((begin[1:] == begin[:-1]) & (end[1:] >= end[:-1]))).all():
        order = np.lexsort((end, begin))
        begin, end = begin[order], end[order]
    start = ld.start_arr + ld.start_ps
    lo = np.searchsorted(begin, start)
    hit = lo < begin.size
    hit[hit] &= begin[lo[hit]] == start[hit]
    if not hit.any():
        return False
    stop = ld.end_arr + ld.start_ps
    at, first = np.flatnonzero(hit), lo[hit]
    if (end[first] == stop[at]).any():
        return True
    # Steps sharing a begin: each of them, not only the first, may be the one matched.
    last = np.searchsorted(begin, start[at], side="right")
    for a, f, n in zip(at.tolist(), first.tolist(), last.tolist(), strict=True):
        if n - f > 1:
            k = f + int(np.searchsorted(end[f:n], stop[a]))
            if k < n and end[k] == stop[a]:
                return True
    return False


# PjRt's wait for a result: `CommonPjRtBuffer::Await` begins it (a `_p` stat) and a second
# `CommonPjRtBuffer::Await` on the same thread (the matching `_c`) marks where it resumed.
BUFFER_AWAIT = "CommonPjRtBuffer::Await"
# XLA's CPU client waiting for a program it runs to complete (on its own thread, while the
# program's thunks run on the Eigen pool): a `block_until_ready` of a tree of several arrays
# waits there with no Await pair, and the thunks leave gaps no op event covers.
PROGRAM_WAIT = "ThunkExecutor::Execute (wait for completion)"
# A function traced or compiled again inside the step: its Python (autograph, JAX's
# lowering) is `tf_function_retracing`'s finding, with that fix; not counted twice here.
REBUILDS = (GRAPH_BUILDING, *JAX_COMPILES, JAX_LOWERING)


def program_op_positions(host: Timeline) -> list[tuple[LineData, np.ndarray]]:
    """Each line's compiled-program ops, as sorted positions: events with a `program_id`
    stat (XLA's CPU thunks in a JAX job). A program's ops are no Python events: only the
    others' stats are read (the Python tracer's events, most of a Python thread's, carry
    none). Ask through `host.once`: several analyses read them."""
    return [(ld, at) for ld, at, _ in host.once(program_op_ids)]


def program_op_ids(host: Timeline) -> list[tuple[LineData, np.ndarray, np.ndarray]]:
    """`program_op_positions` with each op's `program_id` (raw int64: the compiled program
    it belongs to), from the same one reading of the stats. Ask through `host.once`."""
    if "program_id" not in host.stat_ids:
        return []
    program = {host.stat_ids["program_id"]: "program_id"}
    python = id_array(host.mids_where_once(is_python_event))
    out = []
    for ld in host.lines:
        if not len(ld):
            continue
        other = np.flatnonzero(~member(ld.mid_arr, python, ld.dense_top))
        found = int_stats_at(host, ld.indices(other), program, raw=True)
        if "program_id" in found and (has := found["program_id"][1]).any():
            out.append((ld, other[has], found["program_id"][0][has]))
    return out


def compiled_work(host: Timeline, line: LineData | None = None,
                  within: tuple[int, int] | None = None) -> np.ndarray:
    """When a step waits on its compiled program, or builds one again, as merged (begin,
    end) ps rows: the program's ops (events with a `program_id` stat: XLA's CPU thunks in
    a JAX job) on any line of the host plane, XLA's CPU client waiting for a program to
    complete (`PROGRAM_WAIT`), PjRt's buffer waits (from an `Await` to the
    `Await` that consumes it on the same line), and tf.function traces and JAX compiles
    (`REBUILDS`). `line`: the Python thread asked about; a program's ops on that line
    itself are left out: they run there, under the call that waits for them, so the
    nesting already tells the program from the Python inside it (a host callback's:
    jax.debug.print, io_callback). `within`: (a, b), the rows cut to [a, b] (a thread's
    events' reach: what lies outside cuts none of its stretches).

    Asked of every Python thread: what the threads share is read once a plane, and a
    thread's own rows are taken out of the count of rows covering each instant, within
    its reach only (a read of every line per thread made thousands of threads quadratic:
    5,000 threads of a Python event and a program op each, a 0.3 MB capture, 33 s)."""
    every, own, mine_at = host.once(_compiled_rows)
    at = mine_at.get(id(line)) if line is not None else None
    if at is None:  # no program ops or waits of its own: every line's answer, made once
        full = host.once(_all_compiled_work)
        return full if within is None else _cut(_reaching(full, *within), *within)
    if within is None:
        return union_rows(np.concatenate([every, own[:at[0]], own[at[1]:]]))
    a, b = within
    mine = own[at[0]:at[1]]
    t, c = host.once(_all_coverage)
    tm, cm = _coverage(mine)
    first = max(int(np.searchsorted(t, a, side="right")) - 1, 0)
    last = int(np.searchsorted(t, b, side="right"))
    pts = unique(np.concatenate([np.array([a], np.int64), t[first:last],
                                 tm[(tm >= a) & (tm <= b)]]))
    pts = pts[(pts >= a) & (pts <= b)]
    if not pts.size:
        return np.zeros((0, 2), np.int64)
    others = _count_at(t, c, pts) - _count_at(tm, cm, pts)  # rows of other lines open
    ends = np.append(pts[1:], b)
    on = (others > 0) & (ends > pts)
    return union_rows(np.stack([pts[on], ends[on]], 1))


def _cut(rows: np.ndarray, a: int, b: int) -> np.ndarray:
    """Merged (begin, end) rows cut to [a, b]."""
    rows = np.clip(rows, a, b)
    return rows[rows[:, 1] > rows[:, 0]]


def _coverage(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(times, count): how many of `rows` (begin, end) cover [times[i], times[i + 1]); rows
    that end before they begin cover nothing (as in `union_rows`)."""
    rows = rows[rows[:, 1] > rows[:, 0]]
    if not rows.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    times = np.concatenate([rows[:, 0], rows[:, 1]])
    step = np.concatenate([np.ones(len(rows), np.int64), -np.ones(len(rows), np.int64)])
    order = np.argsort(times, kind="stable")
    times, count = times[order], np.cumsum(step[order])
    last = np.append(times[1:] != times[:-1], True)  # each time's count once all apply
    return times[last], count[last]


def _count_at(times: np.ndarray, count: np.ndarray, at: np.ndarray) -> np.ndarray:
    """`_coverage`'s count at each time of `at`."""
    k = np.searchsorted(times, at, side="right") - 1
    if not count.size:
        return np.zeros(at.size, np.int64)
    return np.where(k >= 0, count[np.maximum(k, 0)], 0)


def _all_compiled_work(host: Timeline) -> np.ndarray:
    """`compiled_work` of a line holding no program's ops or waits. Through `host.once`."""
    every, own, _ = host.once(_compiled_rows)
    return union_rows(np.concatenate([every, own]))


def _all_coverage(host: Timeline) -> tuple[np.ndarray, np.ndarray]:
    """`_coverage` of every line's `compiled_work` rows. Through `host.once`."""
    every, own, _ = host.once(_compiled_rows)
    return _coverage(np.concatenate([every, own]))


def _compiled_rows(host: Timeline
                   ) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[int, int]]]:
    """`compiled_work`'s rows, read once a plane (asked of every Python thread, each read of
    every line made it quadratic in threads: 5,000 threads of one Python event, a 0.3 MB
    capture, took 33 s): those of every line (rebuilds, buffer waits); those left out of
    their own line's answer (program waits, a program's ops), a line's together, and
    where each line's lie among them (by the line's `id`). Through `host.once`."""
    ids = host.stat_ids
    rows = [np.zeros((0, 2), np.int64)]
    own = [np.zeros((0, 2), np.int64)]
    mine_at: dict[int, tuple[int, int]] = {}
    held = 0
    awaits = id_array(host.mids_named(BUFFER_AWAIT))
    building = id_array(host.mids_named(*REBUILDS))
    running = id_array(host.mids_named(PROGRAM_WAIT))
    links = {ids[k]: k for k in ("_p", "_c") if k in ids}
    ops = {id(ld): at for ld, at in host.once(program_op_positions)}
    for ld in host.lines:
        if not len(ld):
            continue
        begin, end = ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps
        if building.size and (at := member(ld.mid_arr, building, ld.dense_top)).any():
            rows.append(np.stack([begin[at], end[at]], 1))
        before = held
        if running.size and (at := member(ld.mid_arr, running, ld.dense_top)).any():
            own.append(np.stack([begin[at], end[at]], 1))
            held += len(own[-1])
        if (op := ops.get(id(ld))) is not None:
            own.append(np.stack([begin[op], end[op]], 1))
            held += len(own[-1])
        if held > before:
            mine_at[id(ld)] = (before, held)
        if len(links) < 2 or not awaits.size:
            continue
        pos = np.flatnonzero(member(ld.mid_arr, awaits, ld.dense_top))
        if pos.size:
            found = int_stats_at(host, ld.indices(pos), links, raw=True)
            if "_p" not in found or "_c" not in found:
                continue
            (p_val, p_has), (c_val, c_has) = found["_p"], found["_c"]
            prod, cons = np.flatnonzero(p_has), np.flatnonzero(c_has)
            if prod.size and cons.size:
                order = np.argsort(c_val[cons], kind="stable")
                keys = c_val[cons][order]
                k = np.searchsorted(keys, p_val[prod])
                hit = k < keys.size
                hit[hit] = keys[k[hit]] == p_val[prod][hit]
                first, last = pos[prod[hit]], pos[cons[order[k[hit]]]]
                later = begin[last] >= begin[first]
                rows.append(np.stack([begin[first][later], end[last][later]], 1))
    return np.concatenate(rows), np.concatenate(own), mine_at


def union_rows(iv: np.ndarray) -> np.ndarray:
    """(begin, end) rows as their union: sorted, disjoint rows."""
    iv = iv[iv[:, 1] > iv[:, 0]]  # a damaged capture's events may end before they begin
    return np.stack(merged_spans(iv[:, 0], iv[:, 1]), 1)


def _innermost_python(ld: LineData, py: np.ndarray, steps: np.ndarray, busy: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(metadata id, ps, start) of each stretch of the line, inside a step, whose innermost
    event is a Python event, less the time compiled work (`busy`) runs beside it."""
    return _innermost_python_in(ld, py, [steps], busy)[0]


def _innermost_python_in(ld: LineData, py: np.ndarray, regions: list[np.ndarray],
                         busy: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """`_innermost_python` within each of `regions` (merged (begin, end) rows)."""
    lo, hi, inside, owner = _stretches(ld, regions, busy)
    # Whole-array steps, each once: a long window's Python thread cuts into hundreds of
    # thousands of stretches, nearly all of them Python's (an owner of -1 reads the last
    # event's name here, and is masked out).
    mids = ld.mid_arr[owner]
    is_py = member(mids, py, ld.dense_top)
    is_py &= owner >= 0
    ps = hi - lo
    out = []
    for region in inside:
        k = np.flatnonzero(region & is_py)
        out.append((mids[k], ps[k], lo[k]))
    return out


def _stretches(ld: LineData, regions: list[np.ndarray], busy: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray]:
    """(start, end, whether it lies in each of `regions`, the innermost event open at its
    start or -1) of each stretch of the line that lies in some region and outside `busy`
    (merged (begin, end) rows, absolute ps). Stretches run between consecutive event,
    region and busy bounds: each lies wholly inside or wholly outside every region and the
    busy time. The innermost event of one is the last-begun event still open at its
    start."""
    start = ld.start_arr + ld.start_ps
    end = ld.end_arr + ld.start_ps
    compiled = _compiled_stretches(start, end, regions, busy)
    if compiled is not None:
        return compiled
    cuts = unique(np.concatenate([start, end, *(r.ravel() for r in regions), busy.ravel()]))
    lo, hi = cuts[:-1], cuts[1:]
    inside = [_inside(lo, r) for r in regions]
    keep = np.logical_or.reduce(inside) if len(inside) > 1 else inside[0].copy()
    if busy.size:
        keep &= ~_inside(lo, busy)
    at = np.flatnonzero(keep)
    return lo[at], hi[at], [m[at] for m in inside], _last_open(start, end, lo[at])


def _compiled_stretches(start: np.ndarray, end: np.ndarray, regions: list[np.ndarray],
                        busy: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray] | None:
    """`_stretches` by the compiled sweep (`_wire.stretches`: no sort of every bound, which
    a long window's Python thread of tens of thousands of events pays); None where it is
    not built or the events are laid out otherwise (one ending before it starts)."""
    lib = wire()
    if lib is None or not 1 <= len(regions) < 64:
        return None
    sets = [*(np.ascontiguousarray(r, np.int64).ravel() for r in regions),
            np.ascontiguousarray(busy, np.int64).ravel()]
    offs = np.zeros(len(sets) + 1, np.int64)
    offs[1:] = np.cumsum([s.size for s in sets])
    size = 2 * start.size + int(offs[-1])
    lo, hi, owner = (np.empty(size, np.int64) for _ in range(3))
    flags = np.empty((len(regions), size), np.uint8)
    count = lib.stretches(np.ascontiguousarray(start, np.int64),
                          np.ascontiguousarray(end, np.int64), np.concatenate(sets), offs,
                          lo, hi, owner, flags)
    if count < 0:
        return None
    return lo[:count], hi[:count], [f[:count].view(bool) for f in flags], owner[:count]


def _inside(at: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Which times of `at` (sorted) lie in one of `spans` (merged (begin, end) rows,
    sorted): each span's bounds found in `at`, not each time among the spans."""
    mark = np.zeros(at.size + 1, np.int64)
    np.add.at(mark, np.searchsorted(at, spans[:, 0]), 1)
    np.add.at(mark, np.searchsorted(at, spans[:, 1]), -1)
    return np.cumsum(mark[:-1]) > 0


def _last_open(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each time in `at`, the last event (by start; `start` sorted) that has begun by
    then and ends after it, or -1. Compiled (one stack sweep) where `at` is sorted, as the
    stretches' starts are; else `_np_last_open`."""
    lib = wire()
    if lib is not None and at.size:
        out = np.empty(at.size, np.int64)
        if lib.last_open(np.ascontiguousarray(start, np.int64),
                         np.ascontiguousarray(end, np.int64),
                         np.ascontiguousarray(at, np.int64), out):
            return out
    return _np_last_open(start, end, at)


def _np_last_open(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """`_last_open` in numpy: below the first unbegun event, skip back over runs of
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
