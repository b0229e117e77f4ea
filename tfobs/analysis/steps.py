"""Steps of a window: step markers grouped with the work they caused, as XProf groups them.

XProf (`tsl/profiler/utils/group_events.cc`, `xprof/convert/xplane_to_step_events.cc`)
starts a group at each root event (`_r` stat; step_roots.py finds them) and extends it to
events nested inside on the same thread and, through producer/consumer context stats
(`_p`/`_pt` -> `_c`/`_ct`), to work on other threads (the executor's ops). A group with
an explicit step marker (`train`, `test`, `TraceContext` with `step_num`) is one step; its
span is the marker's.
Keras 3 `fit` writes no markers: each top-level `multi_step_on_iterator` /
`one_step_on_iterator` execution then stands for one step (`method="inferred"`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar, overload

import numpy as np

from tfobs.analysis import eventtypes as et
from tfobs.analysis.input_stages import root_stages, stage_mids
from tfobs.analysis.step_notes import (
    LOOP_OPS_NOTE,
    TF_LOOP_NOTE,
    inferred_unrooted_note,
    nested_markers_note,
    odd_nums_note,
    unrooted_note,
)
from tfobs.analysis.step_roots import REMOTE_CALL_ROOTS, Roots, find_roots
from tfobs.analysis.timeline import (
    DENSE_IDS,
    LineData,
    Timeline,
    id_array,
    int_stats_at,
    lookup,
    member,
    plane_indices,
    positions_by_value,
    unique,
)
from tfobs.xspace.columns import compiled, wire

# Events that carry the context stats linking a step to its executor threads.
_CONTEXT_PREFIXES = ("FunctionRun", "ExecutorState::", "ExecutorDoneCallback",
                     # a graph-mode (tf.compat.v1) Session.run, linked to its executors
                     "SessionRun",
                     # a thread pool's work linked to where it was scheduled (XLA's CPU
                     # runtime in a JAX job runs each step's computation there)
                     "ThreadpoolListener::Record", "ThreadpoolListener::StartRegion",
                     # PjRt's execution of a program linked to its per-device runs on the
                     # client's threads ("[1] CommonPjRtLoadedExecutable::Execute (jit_f)"),
                     # a JAX job's step on two or more CPU devices
                     "CommonPjRtLoadedExecutable::Execute")
# XProf's inter-thread link: an executor's `ExecutorState::Process` is the parent of the
# `GetNext` call on the tf.data thread with the same step id (`id`) and `iter_num`.
_GET_NEXT_OPS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
# TensorFlow's functional loop ops (a While, For or ParallelFor op run as such, not lowered
# into the graph's own control flow) write these events. XProf (`CheckLoopOp`) groups no
# event of a capture whose planes name one: no step, markers or not.
LOOP_OP_EVENTS = ("WhileOp-EvalCond", "WhileOp-StartBody", "ForOp", "ParallelForOp",
                  "ForeverOp")
# XProf drops the first and last step (often cut by the window) when it has more than this.
DROP_INCOMPLETE_THRESHOLD = 5
_NONE = np.zeros(0, np.int64)
_LOWEST = np.iinfo(np.int64).min


Typed = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class LoopRuns(NamedTuple):
    """The executor runs of in-graph loop iterations (`_Grouper.loop_runs`): each one's
    host line, sorted position on it, and loop iteration."""

    line: np.ndarray
    pos: np.ndarray
    iteration: np.ndarray


_T = TypeVar("_T")


@dataclass(slots=True)
class StepGroup:
    step_num: int
    marker: str  # the step marker's name ("train", "batch", ...)
    begin_ps: int  # absolute (line start + offset)
    end_ps: int
    # (line, sorted indices) of the member events, for the step's top events.
    members: list[tuple[LineData, np.ndarray]] = field(default_factory=list)
    # The group's typed host events: rows lo:hi of the columns (type, begin, end, group)
    # all groups share (`FoundSteps.typed`), its first `events` chunk once read. Thousands
    # of small steps need no arrays of their own where the breakdown reads the columns.
    typed_rows: tuple[Typed, int, int] | None = field(default=None, repr=False)
    _events: list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = field(
        default=None, repr=False)

    @property
    def events(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The group's classified events, as chunks of arrays (event type, absolute begin
        ps, absolute end ps): kept as arrays so the breakdown sweeps all steps at once."""
        if self._events is None:
            self._events = []
            if self.typed_rows is not None:
                (etype, begin, end, _), lo, hi = self.typed_rows
                self._events.append((etype[lo:hi], begin[lo:hi], end[lo:hi]))
        return self._events

    @property
    def name(self) -> str:
        """XProf's name for the step: its marker's name and number."""
        return f"{self.marker} {self.step_num}"

    @property
    def duration_ps(self) -> int:
        return self.end_ps - self.begin_ps


class _GroupColumns:
    """The steps of a compiled walk as columns, and each one's StepGroup once made."""

    __slots__ = ("nums", "markers", "begin", "end", "typed", "bounds", "made")

    def __init__(self, nums: list[int], markers: list[str], spans: tuple[np.ndarray, ...],
                 typed: Typed | None) -> None:
        self.nums, self.markers = nums, markers
        self.begin, self.end = spans
        self.typed = typed
        # Each group's rows of the typed columns (sorted by group), found on first use.
        self.bounds: np.ndarray | None = None
        self.made: list[StepGroup | None] = [None] * len(nums)

    def group(self, k: int) -> StepGroup:
        g = self.made[k]
        if g is None:
            g = self.made[k] = StepGroup(self.nums[k], self.markers[k], int(self.begin[k]),
                                         int(self.end[k]))
            if self.typed is not None:
                if self.bounds is None:
                    self.bounds = np.searchsorted(self.typed[3], np.arange(len(self.nums) + 1))
                g.typed_rows = (self.typed, int(self.bounds[k]), int(self.bounds[k + 1]))
        return g


class StepGroups(Sequence[StepGroup]):
    """Steps found by the compiled walk: a list of StepGroup to its readers, each made when
    first read (the same object after). On a CPU capture the reduction reads the steps'
    columns (spans, typed events, members) and makes none: a long window has thousands."""

    __slots__ = ("_columns", "_rows")

    def __init__(self, columns: _GroupColumns, rows: range) -> None:
        self._columns, self._rows = columns, rows

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, k: int) -> StepGroup: ...

    @overload
    def __getitem__(self, k: slice) -> StepGroups: ...

    def __getitem__(self, k: int | slice) -> StepGroup | StepGroups:
        if isinstance(k, slice):
            return StepGroups(self._columns, self._rows[k])
        return self._columns.group(self._rows[k])

    def __iter__(self) -> Iterator[StepGroup]:
        return map(self._columns.group, self._rows)

    def step_nums(self) -> list[int]:
        """Each step's number, no StepGroup made."""
        return self._rows_of(self._columns.nums)

    def markers(self) -> list[str]:
        """Each step's marker name, no StepGroup made."""
        return self._rows_of(self._columns.markers)

    def _rows_of(self, column: list[_T]) -> list[_T]:
        rows = self._rows
        return column[rows.start:rows.stop] if rows.step == 1 else [column[k] for k in rows]


def step_nums(groups: Sequence[StepGroup]) -> list[int]:
    """The groups' step numbers (from the columns where the walk left them)."""
    if isinstance(groups, StepGroups):
        return groups.step_nums()
    return [g.step_num for g in groups]


def step_markers(groups: Sequence[StepGroup]) -> list[str]:
    """The groups' marker names (from the columns where the walk left them)."""
    if isinstance(groups, StepGroups):
        return groups.markers()
    return [g.marker for g in groups]


# XProf's tf.data function runs: their step ids never make a TF loop.
_TF_DATA_FUNCTIONS = ("InstantiatedCapturedFunction::Run",
                      "InstantiatedCapturedFunction::RunAsync",
                      "InstantiatedCapturedFunction::RunInstantiated",
                      "InstantiatedCapturedFunction::RunWithBorrowedArgs")
MARKERS_TF_LOOP = "markers_tf_loop"

@dataclass
class FoundSteps:
    method: str  # markers | markers_tf_loop | inferred | none
    groups: Sequence[StepGroup]
    note: str = ""
    dropped: int = 0
    # Each host event's group (plane-wide event index -> group number, -1: none), numbered
    # as XProf numbers its step groups (Keras 3's inferred steps too: XProf groups the
    # function runs behind them in the same order); None where no step was found.
    step_of: np.ndarray | None = None
    # Would-be step markers without `_r` (a `step_num` stat): how many, the commonest name.
    unrooted_markers: int = 0
    unrooted_name: str = ""
    # Function runs TensorFlow marks `_r=1` itself (KernelAndDeviceFunc::RunAsync): XProf
    # makes steps of those that run ops here; tfobs never does.
    remote_call_roots: int = 0
    # The groups' spans (begin_ps, end_ps) as columns, where the compiled walk made them.
    spans: tuple[np.ndarray, np.ndarray] | None = None
    # The host lines (threads) the step roots are on: where the training loop runs.
    root_lines: tuple[int, ...] = ()
    # Each group's root line, in the groups' order (several where threads mark steps).
    group_lines: np.ndarray | None = None
    # `member_events(groups)`, read once for the breakdown and the steps' top events.
    members: tuple[list[LineData], np.ndarray, np.ndarray, np.ndarray] | None = None
    # The groups' typed host events as columns (type, begin, end, group number), the
    # chunks `events` holds before any device event joins them.
    typed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    # The executor runs of in-graph loop iterations (tf.map_fn, tf.while_loop, an RNN's
    # loop over time steps), where the capture holds TF loops (`_Grouper.loop_runs`).
    loop_runs: LoopRuns | None = None


def _absolute(times: np.ndarray, ld: LineData) -> np.ndarray:
    """Line-relative times from the time base (int64: the reader bounds every time)."""
    return times + ld.start_ps


def _is_context_event(name: str) -> bool:
    if name.startswith("["):  # a per-device run: "[N] <name>"
        name = name.partition("] ")[2]
    return name.startswith(_CONTEXT_PREFIXES)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cover_walk(rel: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                gid: np.ndarray) -> np.ndarray:
    """`_Grouper._cover` one event at a time (positions relative to the first node), for
    a line where an event begins inside the nodes' reach and runs past it: XProf's
    nesting is a tree (an event's parent is the innermost event holding it), so the
    events inside that overhanging one belong to its subtree, not to the nodes'."""
    nodes = set(rel.tolist())
    out = []
    reach = _LOWEST
    for k, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        if k in nodes:
            out.append(k)
            reach = max(reach, e)
        elif reach >= e and reach >= s and gid[k] < 0:
            out.append(k)
        elif reach >= s and e > reach:
            reach = _LOWEST
    return np.array(out, np.int64)


class _Grouper:
    """Assigns events to groups by nesting and context links."""

    def __init__(self, host: Timeline) -> None:
        self.host = host
        # Functional loop ops in the capture (XProf then groups nothing).
        self.loop_ops = bool(host.mids_named(*LOOP_OP_EVENTS))
        # Line l's events are l's slice first[l]:first[l + 1] of the flat arrays below.
        self.first = np.zeros(len(host.lines) + 1, np.int64)
        self.first[1:] = np.cumsum([len(ld) for ld in host.lines])
        # Group id per event of each line (sorted order); -1 while ungrouped.
        self._gid = np.full(int(self.first[-1]), -1, np.int64)
        self._prod_code = np.full(int(self.first[-1]), -1, np.int64)
        bounds = list(zip(self.first[:-1].tolist(), self.first[1:].tolist(), strict=True))
        self.gid = [self._gid[a:b] for a, b in bounds]  # views: one write serves both
        self.prod_code = [self._prod_code[a:b] for a, b in bounds]
        self.cons_ptr = np.zeros(1, np.int64)
        self.cons_line = self.cons_idx = np.zeros(0, np.int64)
        ids = host.stat_ids
        wanted = {ids[k]: k for k in ("_p", "_pt", "_c", "_ct", "id", "iter_num") if k in ids}
        # Links are keyed (kind, a, b): context links (type, id, 0), GetNext (-1, id, iter),
        # as raw 64-bit patterns, with each key's (line, sorted position); indexed once
        # (`_index_links`).
        self._keys: list[tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, bool]] = []
        # Step ids of executor runs with a non-zero loop iteration, and of tf.data functions
        # (XProf's `ProcessTensorFlowLoop`: a loop in any non-tf.data function).
        self.loop_ids: set[int] = set()
        self.tf_data_ids: set[int] = set()
        # Executor runs: (line, sorted position, step id, iteration), the last two as raw
        # patterns; in line order, then position order.
        self._process = (_NONE, _NONE, _NONE.astype(np.uint64), _NONE.astype(np.uint64))
        # Batch fetches (`GetNext` with a step id and iteration): each one's step id and
        # iteration, raw patterns; a loop that fetches its batches is a loop of steps.
        self._fetches = (_NONE.astype(np.uint64), _NONE.astype(np.uint64))
        if not wanted:
            return
        ctx = host.mids_where_once(_is_context_event)
        process = id_array(host.mids_named("ExecutorState::Process"))
        get_next = id_array(host.mids_named(*_GET_NEXT_OPS))
        tf_data = id_array(host.mids_named(*_TF_DATA_FUNCTIONS))
        linking = unique(np.concatenate((id_array(ctx), get_next, tf_data, stage_mids(host))))
        chosen = [(li, np.flatnonzero(member(ld.mid_arr, linking, ld.dense_top)))
                  for li, ld in enumerate(host.lines)]
        chosen = [(li, at) for li, at in chosen if at.size]
        if chosen:  # every line's linking events at once: one decoding pass, one link pass
            lines = np.concatenate([np.full(at.size, li, np.int64) for li, at in chosen])
            at = np.concatenate([at for _, at in chosen])
            mids = np.concatenate([host.lines[li].mid_arr[a] for li, a in chosen])
            st = int_stats_at(host, np.concatenate(
                [host.lines[li].indices(a) for li, a in chosen]), wanted, raw=True)
            is_process = member(mids, process)
            self._links(lines, at, st, member(mids, get_next), is_process)
            self._loops(st, is_process, member(mids, tf_data))
            if "id" in st and "iter_num" in st:
                keep = is_process & st["id"][1] & st["iter_num"][1]
                self._process = (lines[keep], at[keep], st["id"][0][keep],
                                 st["iter_num"][0][keep])
                fetch = member(mids, get_next) & st["id"][1] & st["iter_num"][1]
                self._fetches = (st["id"][0][fetch], st["iter_num"][0][fetch])
        self._index_links()

    def loop_steps(self) -> np.ndarray:
        """Each host event's group as XProf numbers groups in a capture with TF loops.

        XProf (`ProcessTensorFlowLoop`) then makes one group per loop iteration (step id
        and iteration of the executor runs of every function that loops), numbered in the
        order of each iteration's first run, and groups nothing else. An event takes the
        group of the executor run it lies in on its thread (the runs' nested work; links to
        other threads are not followed here), else none (-1).
        """
        host = self.host
        out = np.full(len(host.columns), -1, np.int64)
        looping = self.loop_ids - self.tf_data_ids
        li_all, at_all, sid, it = self._process
        if not looping or not at_all.size:
            return out
        run_lines = list(positions_by_value(li_all))  # each line's runs, found in one sort
        start = np.zeros(at_all.size, np.int64)
        for li, sel in run_lines:
            start[sel] = _absolute(host.lines[li].start_arr[at_all[sel]], host.lines[li])
        loop_sids = np.sort(np.fromiter(looping, np.uint64, len(looping)))
        which = np.minimum(np.searchsorted(loop_sids, sid), loop_sids.size - 1)
        mine = np.flatnonzero(loop_sids[which] == sid)
        group = np.full(sid.size, -1, np.int64)
        # Iterations (step id, iteration), each numbered by the time of its first run.
        if mine.size and int(it[mine].max()) < 2**32:
            # The usual case: (step id's rank, iteration) packed into one sort key.
            key = (which[mine].astype(np.int64) << 32) | it[mine].astype(np.int64)
            order = _by_key_then_time(key, start[mine])
            by_key, ranked = mine[order], key[order]
            new = np.r_[True, ranked[1:] != ranked[:-1]]
        else:
            by_key = mine[np.lexsort((start[mine], it[mine], sid[mine]))]
            new = np.r_[True, (sid[by_key][1:] != sid[by_key][:-1])
                        | (it[by_key][1:] != it[by_key][:-1])]
        key_of = np.cumsum(new) - 1  # iteration index of each run in by_key
        firsts = by_key[new]
        rank = np.empty(firsts.size, np.int64)
        rank[np.argsort(start[firsts], kind="stable")] = np.arange(firsts.size)
        group[by_key] = rank[key_of]
        for li, sel in run_lines:
            ld = host.lines[li]
            # A line's runs are in position order already (a stable sort's run).
            runs_at, runs_group = at_all[sel], group[sel]
            # The last run starting at or before each event (a running count of the runs:
            # they are distinct positions), if it covers the event.
            k = np.zeros(len(ld), np.int64)
            k[runs_at] = 1
            k = np.cumsum(k) - 1
            ok = k >= 0
            kk = np.maximum(k, 0)
            inside = ok & (ld.end_arr <= ld.end_arr[runs_at][kk])
            ids = np.where(inside, runs_group[kk], -1)
            if ld.order is None:  # stored in time order: the line's events are one slice
                out[ld.first:ld.first + len(ld)] = ids
            else:
                out[ld.indices(np.arange(len(ld)))] = ids
        return out

    def loop_runs(self) -> LoopRuns | None:
        """The executor runs of in-graph loop iterations: `ExecutorState::Process` events
        of a looping step id (tf.data's functions left out) past its first iteration (an
        iteration's runs carry the loop frame's `iter_num`; iteration 0 shares its number
        with the function's own work outside the loop). None where no loop ran.

        A loop that fetches its batches (Keras's steps_per_execution loop: two fetches or
        more under one step id) is a loop of training steps, each a whole step's runs: its
        iterations (as many as its fetches, and the last one's exit test) are left out, and
        of a loop inside it (an RNN's) only the iterations past that count are kept; their
        frames share the step id and iteration numbers."""
        looping = self.loop_ids - self.tf_data_ids
        li, at, sid, it = self._process
        if not looping or not at.size:
            return None
        loop_sids = np.sort(np.fromiter(looping, np.uint64, len(looping)))
        which = np.minimum(np.searchsorted(loop_sids, sid), loop_sids.size - 1)
        # An iteration number is an int64 counting up from 0: a negative one (-1 read as
        # 2**64 - 1) is a damaged stat, not a loop of 2**62 iterations.
        keep = (loop_sids[which] == sid) & (it > 0) & (it < np.uint64(2**63))
        f_sid, f_it = self._fetches
        if f_sid.size:
            # Each looping id's fetches: how many, the highest iteration that fetched.
            f_which = np.minimum(np.searchsorted(loop_sids, f_sid), loop_sids.size - 1)
            mine = loop_sids[f_which] == f_sid
            count = np.bincount(f_which[mine], minlength=loop_sids.size)
            top = np.zeros(loop_sids.size, np.int64)
            np.maximum.at(top, f_which[mine], np.minimum(f_it[mine], 2**62).astype(np.int64))
            cut = np.where(count >= 2, np.maximum(count, top + 1), 0)
            keep &= np.minimum(it, 2**62).astype(np.int64) > cut[which]
        if not keep.any():
            return None
        return LoopRuns(li[keep], at[keep], np.minimum(it[keep], 2**62).astype(np.int64))

    def _index_links(self) -> None:
        """Links as arrays: a code per producer event, the consumers of each code (CSR)."""
        if not self._keys:
            return
        kind, a, b = (np.concatenate([k[j] for k, _, _, _ in self._keys]) for j in range(3))
        lines = np.concatenate([li for _, li, _, _ in self._keys])
        idx = np.concatenate([i for _, _, i, _ in self._keys])
        consumer = np.concatenate([np.full(len(i), c, bool) for _, _, i, c in self._keys])
        # A code names each distinct key (its number does not matter). The kind (a type
        # or -1) and `b` (0 or an iteration) are small: packed into one column when they
        # fit, the keys sort on two columns instead of three.
        kind1 = kind + np.uint64(1)  # -1 wraps to 0
        if kind1.max() < 2**32 and b.max() < 2**32:
            columns: tuple[np.ndarray, ...] = ((kind1 << np.uint64(32)) | b, a)
        else:
            columns = (b, a, kind)
        # Consumers of each code in event order (lines in order, events in order).
        hashed = link_codes(*columns, consumer) if len(columns) == 2 else None
        if hashed is not None:  # compiled: one hash table instead of a sort
            code, per_code, order = hashed
        else:
            by_key = np.lexsort(columns)
            new = np.zeros(by_key.size, bool)
            new[0] = True
            for column in columns:
                ranked = column[by_key]
                new[1:] |= ranked[1:] != ranked[:-1]
            code = np.empty(by_key.size, np.int64)
            code[by_key] = np.cumsum(new) - 1
            # The key order keeps the collection order among equal keys.
            order = by_key[consumer[by_key]]
            per_code = np.bincount(code[order], minlength=int(new.sum()))
        self.cons_ptr = np.zeros(per_code.size + 1, np.int64)
        self.cons_ptr[1:] = np.cumsum(per_code)
        self.cons_line, self.cons_idx = lines[order], idx[order]
        has_consumer = np.diff(self.cons_ptr) > 0
        prod = np.flatnonzero(~consumer)
        prod = prod[has_consumer[code[prod]]]
        # Every line's producers in one assignment (the lines' codes are views of one
        # array); a later record of the same event wins, as a dict assignment would.
        self._prod_code[self.first[lines[prod]] + idx[prod]] = code[prod]

    def _links(self, lines: np.ndarray, picked: np.ndarray,
               st: dict[str, tuple[np.ndarray, np.ndarray]], get_next: np.ndarray,
               process: np.ndarray) -> None:
        """Producers and consumers among the linking events (`lines`, `picked`: each one's
        line and sorted position; line by line, in order).

        A `GetNext` with a step id and iteration consumes (-1, id, iter), which the
        `ExecutorState::Process` with the same two produces; otherwise `_p`/`_pt`
        produce and `_c`/`_ct` consume (type, id, 0).
        """
        none = (np.zeros(picked.size, np.uint64), np.zeros(picked.size, bool))
        (sid, has_sid), (it, has_it), (p, has_p), (pt, has_pt), (c, has_c), (ct, has_ct) = (
            st.get(k, none) for k in ("id", "iter_num", "_p", "_pt", "_c", "_ct"))
        to_next = has_sid & has_it & get_next
        from_process = has_sid & has_it & process & ~get_next
        ctx_p = has_p & has_pt & ~to_next
        ctx_c = has_c & has_ct & ~to_next
        minus_one, zero = np.uint64(np.iinfo(np.uint64).max), np.uint64(0)
        for consumer, mask, ctx_mask, (t, v) in (
                (True, to_next | ctx_c, ctx_c & ~to_next, (ct, c)),
                (False, from_process | ctx_p, ctx_p, (pt, p))):
            sel = np.flatnonzero(mask)
            if not sel.size:
                continue
            ctx_sel = ctx_mask[sel]
            keys = (np.where(ctx_sel, t[sel], minus_one),
                    np.where(ctx_sel, v[sel], sid[sel]),
                    np.where(ctx_sel, zero, it[sel]))
            self._keys.append((keys, lines[sel], picked[sel], consumer))

    def _loops(self, st: dict[str, tuple[np.ndarray, np.ndarray]], process: np.ndarray,
               tf_data: np.ndarray) -> None:
        if "id" not in st:
            return
        sid, has_sid = st["id"]
        # Distinct ids only: a loop's thousands of runs share a handful of step ids.
        self.tf_data_ids.update(unique(sid[has_sid & tf_data]).tolist())
        if "iter_num" in st:
            it, has_it = st["iter_num"]
            looping = has_sid & has_it & process & (it != 0)
            self.loop_ids.update(unique(sid[looping]).tolist())

    @property
    def has_tf_loop(self) -> bool:
        return self.loop_ops or bool(self.loop_ids - self.tf_data_ids)

    def _cover(self, li: int, nodes: np.ndarray) -> np.ndarray:
        """Sorted `nodes` plus the ungrouped events nested inside any of them (same line).

        Event j (after node i in start order) is nested in i when it ends by i's end and
        starts by it; over all nodes before j that is one test against the running
        maximum of their ends, so a whole wave of nodes costs a few numpy passes.
        """
        ld = self.host.lines[li]
        lo = int(nodes[0])
        top = ld.end_arr[nodes].max()
        hi = lo + 1 + int(np.searchsorted(ld.start_arr[lo + 1:], top, side="right"))
        if hi <= lo + 1:
            return nodes
        ends = ld.end_arr[lo:hi]
        rel = nodes - lo
        node_end = np.full(hi - lo, _LOWEST, np.int64)
        node_end[rel] = ends[rel]
        # reach[k]: the latest end of the nodes before event lo + k
        reach = np.empty(hi - lo, np.int64)
        reach[0] = _LOWEST
        np.maximum.accumulate(node_end[:-1], out=reach[1:])
        starts = ld.start_arr[lo:hi]
        inside = (reach >= ends) & (reach >= starts) & (self.gid[li][lo:hi] < 0)
        inside[rel] = True
        over = (reach >= starts) & (ends > reach)
        over[rel] = False
        if over.any():  # an event overhangs the nodes: what lies inside it is not theirs
            return _cover_walk(nodes - lo, starts, ends, self.gid[li][lo:hi]) + lo
        return np.flatnonzero(inside) + lo

    def group_roots(self, roots: list[tuple[int, int]]
                    ) -> list[list[tuple[int, np.ndarray]] | None]:
        """Each root's group members (`group`), or None for a root an earlier root's
        group took; groups numbered 0, 1, ... in root order."""
        walked = self._walk_compiled(roots)
        if walked is not None:
            return walked
        out: list[list[tuple[int, np.ndarray]] | None] = []
        g = 0
        for li, i in roots:
            if self.gid[li][i] >= 0:
                out.append(None)
                continue
            out.append(self.group(g, li, i))
            g += 1
        return out

    def _walk(self, root_line: np.ndarray, root_idx: np.ndarray
              ) -> tuple[np.ndarray, ...] | None:
        """The compiled group walk from the roots (each one's line and sorted position; see
        _wire.c); None where it is missing or refuses the arrays."""
        if not compiled() or not root_line.size:
            return None
        lines = self.host.lines
        start = np.concatenate([ld.start_arr for ld in lines]) if lines else _NONE
        end = np.concatenate([ld.end_arr for ld in lines]) if lines else _NONE
        return group_walk(self.first, start, end, self._gid, self._prod_code,
                          self.cons_ptr, self.cons_line, self.cons_idx, root_line, root_idx)

    def _walk_compiled(self, roots: list[tuple[int, int]]
                       ) -> list[list[tuple[int, np.ndarray]] | None] | None:
        """`group_roots` by the compiled walk (see _wire.c); None where it is missing."""
        pairs = np.array(roots, np.int64).reshape(-1, 2)
        walked = self._walk(pairs[:, 0].copy(), pairs[:, 1].copy())
        if walked is None:
            return None
        root_group, member, chunk_line, chunk_group, chunk_end = walked
        per_group: list[list[tuple[int, np.ndarray]]] = [
            [] for _ in range(int(root_group.max()) + 1)]
        chunk_start = np.r_[0, chunk_end][:-1].tolist()
        for li, g, a, b in zip(chunk_line.tolist(), chunk_group.tolist(), chunk_start,
                               chunk_end.tolist(), strict=True):
            per_group[g].append((li, member[a:b]))
        return [per_group[g] if g >= 0 else None for g in root_group.tolist()]

    def walk_flat(self, root_line: np.ndarray, root_idx: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """`group_roots` as columns, from the roots' lines and sorted positions: each root's
        group (-1: an earlier group took it) and, for every member in walk order, its
        group, line and sorted position; None where the compiled walk is missing."""
        walked = self._walk(root_line, root_idx)
        if walked is None:
            return None
        root_group, member, chunk_line, chunk_group, chunk_end = walked
        sizes = np.diff(np.r_[0, chunk_end])
        return (root_group, np.repeat(chunk_group, sizes).astype(np.int64),
                np.repeat(chunk_line, sizes).astype(np.int64), member.astype(np.int64))

    def group(self, g: int, li: int, i: int) -> list[tuple[int, np.ndarray]]:
        """Propagate group g from root (li, i); returns the members it took, per line.

        Breadth first, one wave per round: each wave's ungrouped events take their nested
        events, and their producers bring in the consumers for the next wave. An event
        grouped by an earlier root stops the walk there, as in XProf.
        """
        members: list[tuple[int, np.ndarray]] = []
        frontier: dict[int, list[np.ndarray]] = {li: [np.array([i], np.int64)]}
        while frontier:
            following: dict[int, list[np.ndarray]] = {}
            for fli, parts in frontier.items():
                gid = self.gid[fli]
                nodes = unique(parts[0] if len(parts) == 1 else np.concatenate(parts))
                nodes = nodes[gid[nodes] < 0]
                if not nodes.size:
                    continue
                taken = self._cover(fli, nodes)
                gid[taken] = g
                members.append((fli, taken))
                codes = self.prod_code[fli][taken]
                codes = unique(codes[codes >= 0])
                if not codes.size:
                    continue
                if codes.size == 1:  # the usual case: one link out of this line
                    code = int(codes[0])
                    flat = np.arange(self.cons_ptr[code], self.cons_ptr[code + 1])
                else:
                    lo, hi = self.cons_ptr[codes], self.cons_ptr[codes + 1]
                    count = hi - lo
                    flat = (np.repeat(lo - np.cumsum(count) + count, count)
                            + np.arange(count.sum()))
                lines, idx = self.cons_line[flat], self.cons_idx[flat]
                if lines.min() == lines.max():  # the usual case: all on one line
                    following.setdefault(int(lines[0]), []).append(idx)
                    continue
                for cl, on in positions_by_value(lines):
                    following.setdefault(cl, []).append(idx[on])
            frontier = following
        return members


def _by_key_then_time(key: np.ndarray, time: np.ndarray) -> np.ndarray:
    """`np.lexsort((time, key))` for non-negative int64 keys, by one stable argsort of
    `time` and one sort of int64 values packing each key over its time's rank (distinct
    ranks, in lexsort's tie order). The runs' times come in a few sorted stretches (line
    by line), which the stable argsort merges quickly: about half lexsort's time."""
    n = time.size
    bits = max(1, (n - 1).bit_length())
    if not n or int(key.max()) >= 1 << (63 - bits):
        return np.lexsort((time, key))
    by_time = np.argsort(time, kind="stable")
    packed = np.left_shift(key, bits)
    packed[by_time] |= np.arange(n)
    packed.sort()
    packed &= (1 << bits) - 1
    order: np.ndarray = by_time[packed]
    return order


def member_events(groups: Sequence[StepGroup]) -> tuple[list[LineData], np.ndarray, np.ndarray,
                                                   np.ndarray]:
    """Every member event of `groups`, in member order, as columns: (the member lines,
    numbered in first-seen order; each event's group; its line's number; its plane-wide
    index into the host plane's columns, `PlaneEvents`)."""
    number: dict[int, int] = {}
    lds: list[LineData] = []
    chunks = []  # (group, line number, sorted positions)
    for k, g in enumerate(groups):
        for ld, idx in g.members:
            if not idx.size:
                continue
            li = number.get(id(ld))
            if li is None:
                li = number[id(ld)] = len(lds)
                lds.append(ld)
            chunks.append((k, li, idx))
    if not chunks:
        return lds, _NONE, _NONE, _NONE
    sizes = [idx.size for _, _, idx in chunks]
    group = np.repeat(np.array([k for k, _, _ in chunks], np.int64), sizes)
    line = np.repeat(np.array([li for _, li, _ in chunks], np.int64), sizes)
    flat = plane_indices(lds, line, np.concatenate([idx for _, _, idx in chunks]))
    return lds, group, line, flat


Members = tuple[list[LineData], np.ndarray, np.ndarray, np.ndarray]


def _making_steps(roots: Roots, root_group: np.ndarray) -> np.ndarray:
    """Which roots make a step (bool per root): those that start a group, less the remote
    calls TensorFlow marks itself."""
    making = root_group >= 0
    if remote := set(REMOTE_CALL_ROOTS).intersection(roots.name):
        making &= np.array([n not in remote for n in roots.name], bool)
    return making


def _groups_from_columns(host: Timeline, roots: Roots, mids_type: dict[int, int],
                         root_group: np.ndarray, m_group: np.ndarray, m_line: np.ndarray,
                         m_pos: np.ndarray, waits: np.ndarray | None = None
                         ) -> tuple[StepGroups, Members, tuple[np.ndarray, np.ndarray],
                                    Typed | None]:
    """The steps of a compiled walk, their members (`member_events`' columns), each step's
    own root left out, their spans (begin_ps, end_ps) and their typed events
    (`_add_typed_events`; `waits`: `input_stages.root_stages`), straight from the walk's
    columns."""
    step_of_group = np.full(int(root_group.max(initial=-1)) + 1, -1, np.int64)
    picked = np.flatnonzero(_making_steps(roots, root_group))
    nums, markers = roots.num, roots.name
    if picked.size < len(roots):
        nums, markers = [nums[k] for k in picked.tolist()], [markers[k] for k in picked.tolist()]
    root_line, root_pos = roots.line[picked], roots.pos[picked]
    # Each step's marker span, gathered line by line (absolute ps).
    begin = np.zeros(root_pos.size, np.int64)
    length = np.zeros(root_pos.size, np.int64)
    for li, on in positions_by_value(root_line):
        ld = host.lines[li]
        begin[on] = ld.start_arr[root_pos[on]] + ld.start_ps
        length[on] = ld.end_arr[root_pos[on]] - ld.start_arr[root_pos[on]]
    step_of_group[root_group[picked]] = np.arange(len(nums))
    spans = (begin, begin + length)

    def steps(typed: Typed | None) -> StepGroups:
        return StepGroups(_GroupColumns(nums, markers, spans, typed), range(len(nums)))

    if not nums or not m_group.size:
        return steps(None), ([], _NONE, _NONE, _NONE), spans, None
    # A loader's stages are typed event by event (the compiled pass types by name).
    fast = None if waits is not None else _compiled_members(
        host, mids_type, (m_group, m_line, m_pos), step_of_group, (root_line, root_pos))
    if fast is not None:
        members, typed = fast
        return steps(typed), members, spans, typed
    k = step_of_group[m_group]
    keep = np.flatnonzero(k >= 0)
    k, m_line, m_pos = k[keep], m_line[keep], m_pos[keep]
    own = (m_line == root_line[k]) & (m_pos == root_pos[k])
    if own.any():
        k, m_line, m_pos = k[~own], m_line[~own], m_pos[~own]
    if k.size > 1 and (k[1:] < k[:-1]).any():  # by step, walk order within one
        order = np.argsort(k, kind="stable")
        k, m_line, m_pos = k[order], m_line[order], m_pos[order]
    # Lines numbered in first-seen order, as `member_events` numbers them.
    used = _first_seen(m_line, len(host.lines))
    number = np.full(len(host.lines), -1, np.int64)
    number[used] = np.arange(used.size)
    lds = [host.lines[li] for li in used.tolist()]
    line = number[m_line]
    members = (lds, k, line, plane_indices(lds, line, m_pos))
    typed = _typed_events(host, mids_type, members, waits)
    return steps(typed), members, spans, typed


def _compiled_members(host: Timeline, mids_type: dict[int, int],
                      walked: tuple[np.ndarray, np.ndarray, np.ndarray],
                      step_of_group: np.ndarray, roots: tuple[np.ndarray, np.ndarray]
                      ) -> tuple[Members, Typed | None] | None:
    """The rest of `_groups_from_columns` and `_add_typed_events` in one compiled pass over
    the walk's members (see _wire.c); None where `_wire` is missing, an id is not small,
    or the pass leaves the case to numpy (lines stored out of time order)."""
    lib = wire()
    if lib is None or (mids_type and (min(mids_type) < 0 or max(mids_type) >= DENSE_IDS)):
        return None
    table = np.full(max(mids_type, default=-1) + 1, -1, np.int64)
    table[np.fromiter(mids_type, np.int64, len(mids_type))] = np.fromiter(
        mids_type.values(), np.int64, len(mids_type))
    lines, cols = host.lines, host.columns
    first = np.array([ld.first for ld in lines], np.int64)
    ordered = np.array([ld.order is None for ld in lines], np.bool_)
    start = np.array([ld.start_ps for ld in lines], np.int64)
    n = walked[0].size
    out = [np.empty(n, np.int64) for _ in range(7)]
    used, counts = np.empty(len(lines), np.int64), np.zeros(3, np.int64)
    args = (*walked, step_of_group, *roots, first, ordered, start, cols.mid, cols.offset,
            cols.duration, table, *out, used, counts)
    if lib.step_members(*(np.ascontiguousarray(a) for a in args[:-9]), *args[-9:]) != 1:
        return None
    kept, typed, numbered = counts.tolist()
    k, line, flat = (x[:kept] for x in out[:3])
    lds = [lines[li] for li in used[:numbered].tolist()]
    if not kept:
        return (lds, k, line, flat), None
    etype, begin, end, step = (x[:typed] for x in out[3:])
    return (lds, k, line, flat), (etype, begin, end, step)


def _first_seen(values: np.ndarray, size: int) -> np.ndarray:
    """The distinct values of `values` (ints in 0..size-1) in first-seen order. A step's
    members lie on a few host lines: one pass per line used beats sorting them all."""
    used = np.flatnonzero(np.bincount(values, minlength=size))
    if used.size > 16:
        _, first = np.unique(values, return_index=True)
    else:
        first = np.array([np.argmax(values == v) for v in used.tolist()], np.int64)
    order: np.ndarray = used[np.argsort(first, kind="stable")]
    return order


def _add_typed_events(host: Timeline, groups: list[StepGroup], mids_type: dict[int, int],
                      members: Members | None = None, waits: np.ndarray | None = None
                      ) -> tuple[Members, Typed | None]:
    """Each group's members with a CPU event type (`mids_type`), as one chunk (type,
    absolute begin, absolute end) in member order: every group in one pass over the
    members of all, read from the plane's columns. Returns `member_events(groups)` (or the
    `members` given) and the chunks as one set of columns (type, begin, end, group)."""
    if members is None:
        members = member_events(groups)
    typed = _typed_events(host, mids_type, members, waits)
    if typed is not None:
        bounds = np.searchsorted(typed[3], np.arange(len(groups) + 1)).tolist()
        for g, lo, hi in zip(groups, bounds, bounds[1:], strict=False):
            g.typed_rows = (typed, lo, hi)
    return members, typed


def _typed_events(host: Timeline, mids_type: dict[int, int], members: Members,
                  waits: np.ndarray | None = None) -> Typed | None:
    """The members with a CPU event type as columns (type, begin, end, group); None
    where there is no member. `waits`: per plane event, a loader's outermost input stage
    (`input_stages.root_stages`), which XProf types as input wait where it would be host
    compute."""
    lds, group, line, flat = members
    if not lds:
        return None
    cols = host.columns
    etype = lookup(cols.mid[flat], mids_type, -1)  # -1: not a CPU event type
    if waits is not None:
        etype[(etype == et.HOST_COMPUTE) & waits[flat]] = et.HOST_WAIT_INPUT
    typed = np.flatnonzero(etype >= 0)
    flat, line, group, etype = flat[typed], line[typed], group[typed], etype[typed]
    begin = cols.offset[flat] + np.array([ld.start_ps for ld in lds], np.int64)[line]
    end = begin + cols.duration[flat]
    return (etype.astype(np.int64, copy=False), begin.astype(np.int64, copy=False),
            end.astype(np.int64, copy=False), group.astype(np.int64, copy=False))


def members_of(found: FoundSteps, kept: Sequence[StepGroup],
               index: np.ndarray | None = None) -> Members:
    """`member_events(kept)` for groups among `found.groups`, from the members `find_steps`
    read already (one pass over thousands of steps' member lists, not two). `index`:
    each kept group's place in `found.groups`, where the caller knows it."""
    if found.members is None:
        return member_events(kept)
    lds, group, line, flat = found.members
    if (index is not None and len(index) == len(kept) and len(index)
            and int(index[-1]) - int(index[0]) + 1 == len(index)
            and (group.size < 2 or bool((group[1:] >= group[:-1]).all()))):
        # A run of the steps (all but the first and last, the usual case) of members held
        # by step: one slice, no index per member.
        first = int(index[0])
        lo, hi = np.searchsorted(group, [first, first + len(index)])
        return lds, group[lo:hi] - first, line[lo:hi], flat[lo:hi]
    rank = np.full(len(found.groups), -1, np.int64)
    if index is not None and len(index) == len(kept):
        rank[index] = np.arange(len(kept))
    else:
        at = {id(g): k for k, g in enumerate(found.groups)}
        for r, g in enumerate(kept):
            k = at.get(id(g))
            if k is None:
                return member_events(kept)
            rank[k] = r
    new = rank[group]
    sel = np.flatnonzero(new >= 0)
    if sel.size and (np.diff(new[sel]) < 0).any():  # kept in another order: follow it
        sel = sel[np.argsort(new[sel], kind="stable")]
    return lds, new[sel], line[sel], flat[sel]


def find_steps(host: Timeline | None, has_device: bool = False) -> FoundSteps:
    if host is None:
        return FoundSteps("none", [], "no host plane")
    method, roots, unrooted = find_roots(host)
    if not roots:
        note = (unrooted_note(unrooted.count, unrooted.name) if unrooted.count
                else "no step markers and no repeating training function")
        return FoundSteps("none", [], note, unrooted_markers=unrooted.count,
                          unrooted_name=unrooted.name)
    grouper = _Grouper(host)
    waits = root_stages(host)
    mids_type = {mid: t for mid, name in host.names.items()
                 if (t := et.classify_cpu(name, has_device)) is not None}
    groups: Sequence[StepGroup]
    # XProf numbers only the roots that start a group (None: an earlier group took it).
    # Remote-call roots group their work as XProf's do (the group numbers stay XProf's)
    # but make no step.
    flat_walk = grouper.walk_flat(roots.line, roots.pos)
    if flat_walk is not None:  # compiled: members as columns, no per-step lists
        groups, read, spans, typed = _groups_from_columns(host, roots, mids_type, *flat_walk,
                                                          waits=waits)
        taken = [roots.name[k] for k in np.flatnonzero(flat_walk[0] < 0).tolist()]
        group_lines = roots.line[_making_steps(roots, flat_walk[0])]
    else:
        spans = None
        built: list[StepGroup] = []
        made_lines: list[int] = []
        walked = grouper.group_roots(list(zip(roots.line.tolist(), roots.pos.tolist(),
                                              strict=True)))
        taken = [r[3] for r, m in zip(roots, walked, strict=True) if m is None]
        for (li, i, num, name), members in zip(roots, walked, strict=True):
            if members is None or name in REMOTE_CALL_ROOTS:
                continue
            ld = host.lines[li]
            start, end = int(ld.start_arr[i]), int(ld.end_arr[i])
            begin = ld.start_ps + start
            step = StepGroup(num, name, begin, begin + end - start)
            for mli, idx in members:
                if mli == li:
                    idx = idx[idx != i]
                step.members.append((host.lines[mli], idx))
            built.append(step)
            made_lines.append(li)
        groups = built
        group_lines = np.array(made_lines, np.int64)
        read, typed = _add_typed_events(host, built, mids_type, waits=waits)
    note = ""
    if method == "inferred":
        # Would-be markers without `_r` (a callback's own Trace per batch) are why
        # XProf finds no step: the note says so, and the advice names their fix.
        note = (
            (inferred_unrooted_note(unrooted.count, unrooted.name) if unrooted.count
             else "no step markers")
            + "; steps inferred from Keras 3 "
            f"{'/'.join(sorted({r[3] for r in roots}))} executions"
        )
        if roots.other_runs:
            note += (f" of its most run function; {roots.other_runs} executions of another "
                     f"({roots.other_function}: an evaluation's, beside training) are no "
                     "step")
    elif grouper.has_tf_loop:
        method = MARKERS_TF_LOOP
        note = TF_LOOP_NOTE if grouper.loop_ids - grouper.tf_data_ids else LOOP_OPS_NOTE
    else:
        note = nested_markers_note([n for n in taken if n not in REMOTE_CALL_ROOTS], groups)
    if roots.odd_nums:
        note = "; ".join(n for n in (note, odd_nums_note(roots.odd_nums, roots.odd_read))
                         if n)
    step_of = None
    loop_runs = None
    if grouper.has_tf_loop:  # XProf groups by loop iteration, markers or not
        step_of = grouper.loop_steps()
        loop_runs = grouper.loop_runs()
    else:
        step_of = np.full(len(host.columns), -1, np.int64)
        for ld, gid in zip(host.lines, grouper.gid, strict=True):
            if ld.order is None:  # stored in time order: the line's own slice
                step_of[ld.first:ld.first + len(ld)] = gid
            else:
                step_of[ld.indices(np.arange(len(ld)))] = gid
    inferred = method == "inferred"
    return FoundSteps(method, groups, note, step_of=step_of, members=read, typed=typed,
                      unrooted_markers=unrooted.count if inferred else 0,
                      unrooted_name=unrooted.name if inferred else "",
                      spans=spans, root_lines=tuple(np.unique(roots.line).tolist()),
                      group_lines=group_lines, loop_runs=loop_runs,
                      remote_call_roots=sum(map(roots.name.count, REMOTE_CALL_ROOTS)))


def link_codes(high: np.ndarray, low: np.ndarray, consumer: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The compiled link index of _Grouper._index_links (see _wire.c): (a code per row, equal
    for equal (high, low) keys; consumers per code; the consumer rows by code), each cut
    to its length; None where `_wire` is missing."""
    lib = wire()
    if lib is None:
        return None
    n = high.size
    code, count, order = (np.empty(n, np.int64) for _ in range(3))
    codes = lib.link_codes(np.ascontiguousarray(high, np.uint64),
                           np.ascontiguousarray(low, np.uint64),
                           np.ascontiguousarray(consumer, np.bool_), code, count, order)
    return code, count[:codes], order[:int(count[:codes].sum())]


def group_walk(first: np.ndarray, start: np.ndarray, end: np.ndarray, gid: np.ndarray,
               prod: np.ndarray, cons_ptr: np.ndarray, cons_line: np.ndarray,
               cons_idx: np.ndarray, root_line: np.ndarray, root_idx: np.ndarray
               ) -> tuple[np.ndarray, ...] | None:
    """The compiled group walk of _Grouper._walk (see _wire.c); `gid` (int64) is updated
    in place. (each root's group or -1, members, each chunk's line, group and end in
    members), cut to their lengths; None where `_wire` is missing or the arrays do not
    hold together."""
    lib = wire()
    if lib is None:
        return None
    n = start.size
    member, chunk_line, chunk_group, chunk_end = (np.empty(n, np.int64) for _ in range(4))
    root_group = np.empty(root_line.size, np.int64)
    first, start, end, prod, cons_ptr, cons_line, cons_idx, root_line, root_idx = (
        np.ascontiguousarray(x, np.int64) for x in (
            first, start, end, prod, cons_ptr, cons_line, cons_idx, root_line, root_idx))
    chunks = lib.group_walk(first, start, end, gid, prod, cons_ptr, cons_line, cons_idx,
                            root_line, root_idx, root_group, member, chunk_line,
                            chunk_group, chunk_end)
    if chunks < 0:
        return None
    used = int(chunk_end[chunks - 1]) if chunks else 0
    return (root_group, member[:used], chunk_line[:chunks], chunk_group[:chunks],
            chunk_end[:chunks])
