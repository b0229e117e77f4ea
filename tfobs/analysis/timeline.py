"""One pass over each plane: event times and metadata ids as flat lists per line.

Every analysis works on these lists instead of protobuf events; the plane's events are
decoded once, in bulk (`PlaneView.events`, numpy columns), and stats are decoded later,
only for the events an analysis asks about (`Timeline.stat_values`, `memory.py`).
Event times are int64 picoseconds relative to the line's own `timestamp_ns`, as XProf
uses them; a line's `start_ps` is relative to the capture's time base (its earliest line,
a whole nanosecond), so line start + offset + duration and their sums stay far inside
int64 and no analysis needs exact-integer fallbacks. Times beyond that span are corrupt.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

import numpy as np

from tfobs.errors import CaptureError
from tfobs.xspace.columns import (
    KIND_INT64,
    KIND_NONE,
    KIND_REF,
    KIND_UINT64,
    PlaneEvents,
    compiled,
)
from tfobs.xspace.reader import PlaneView

_R = TypeVar("_R")

# Picoseconds far outside any real capture (about 100 days): values past this are corrupt.
MAX_PS = 10**19
MAX_LINES = 100_000
# Every offset, duration, event end and line start (from the time base) lies within this
# span (about 13 days), so sums of a few of them fit int64.
SPAN_PS = 2**60


class LineData:
    """Flat event lists of one XLine, sorted by start."""

    __slots__ = ("line", "name", "start_ps", "ts_ns", "_starts", "_ends", "_mids", "order",
                 "first", "columns", "start_arr", "end_arr", "mid_arr", "_top")

    def __init__(self, line: Any, columns: PlaneEvents, first: int, last: int,
                 base_ps: int = 0) -> None:
        self.line = line
        self.columns = columns
        self.first = first  # plane-wide index of the line's first event (stored order)
        self.name: str = line.name
        self.ts_ns: int = line.timestamp_ns
        if not -MAX_PS // 1000 < self.ts_ns < MAX_PS // 1000:
            raise CaptureError(f"line {self.name!r} has an impossible timestamp {self.ts_ns}")
        # Line start in ps from the time base: XProf's event timespans are start + offset.
        self.start_ps: int = self.ts_ns * 1000 - base_ps
        if last > first and not -SPAN_PS < self.start_ps < SPAN_PS:
            raise CaptureError(f"line {self.name!r} starts {self.start_ps} ps from the "
                               "capture's other lines; its timestamp is corrupt")
        off = columns.offset[first:last]
        dur = columns.duration[first:last]
        mid = columns.mid[first:last]
        # `order` maps sorted position -> stored index (None when already sorted).
        self.order: list[int] | None = None
        self._starts: list[int] | None = None
        self._ends: list[int] | None = None
        self._mids: list[int] | None = None
        self._top: int | None = -1  # `_dense_top` of mid_arr, found on first use
        if off.size and (off.min() <= -SPAN_PS or off.max() >= SPAN_PS
                         or dur.min() <= -SPAN_PS or dur.max() >= SPAN_PS):
            raise CaptureError(f"line {self.name!r} has event times out of range")
        end = off + dur
        if off.size and (end.min() <= -SPAN_PS or end.max() >= SPAN_PS):
            raise CaptureError(f"line {self.name!r} has event times out of range")
        if off.size > 1 and (off[1:] < off[:-1]).any():
            order = np.lexsort((-end, off))  # stable: ties keep stored order
            self.order = order.tolist()
            off, end, mid = off[order], end[order], mid[order]
        # The same in numpy, for selections and interval searches without a Python loop.
        self.start_arr, self.end_arr, self.mid_arr = off, end, mid

    # The same as Python lists, made on first use: most lines are only read in numpy.
    @property
    def starts(self) -> list[int]:
        if self._starts is None:
            self._starts = self.start_arr.tolist()
        return self._starts

    @property
    def ends(self) -> list[int]:
        if self._ends is None:
            self._ends = self.end_arr.tolist()
        return self._ends

    @property
    def mids(self) -> list[int]:
        if self._mids is None:
            self._mids = self.mid_arr.tolist()
        return self._mids

    @property
    def dense_top(self) -> int | None:
        """`_dense_top(mid_arr)`, kept: the line's ids do not change."""
        if self._top == -1:
            self._top = _dense_top(self.mid_arr) if self.mid_arr.size else None
        return self._top

    def where(self, mids: np.ndarray) -> list[int]:
        """Sorted positions of the events whose metadata id is in `mids` (an array)."""
        found: list[int] = np.flatnonzero(member(self.mid_arr, mids, self.dense_top)).tolist()
        return found

    def lookup(self, table: dict[int, int], default: int) -> np.ndarray:
        """`table[mid]` for each event (sorted order), `default` for ids not in it."""
        return lookup(self.mid_arr, table, default, self.dense_top)

    def index(self, i: int) -> int:
        """The plane-wide event index (`PlaneEvents`) of sorted position i."""
        return self.first + (self.order[i] if self.order is not None else i)

    def indices(self, positions: list[int] | np.ndarray) -> np.ndarray:
        """Plane-wide event indices of sorted positions."""
        pos = np.asarray(positions, np.int64)
        if self.order is not None:
            pos = np.asarray(self.order, np.int64)[pos] if pos.size else pos
        return pos + self.first

    def event(self, i: int) -> Any:
        """The protobuf XEvent at sorted position i."""
        return self.columns.event(self.index(i))

    def __len__(self) -> int:
        return self.mid_arr.size


def time_base_ps(planes: list[PlaneView]) -> int:
    """The capture's time base: its earliest start of a line with events, in ps (a whole
    ns; 0 if none).

    Shared by the timelines that are compared with one another (host and devices).
    """
    stamps = [line.timestamp_ns for p in planes
              for line, count in zip(p.lite.lines, p.line_counts, strict=True) if count]
    low = min(stamps, default=0)
    return low * 1000 if -MAX_PS // 1000 < low < MAX_PS // 1000 else 0


class Timeline:
    """A plane's lines as `LineData`, plus lookups by event name."""

    def __init__(self, plane: PlaneView, base_ps: int | None = None) -> None:
        """`base_ps`: the capture's `time_base_ps` (default: this plane's own)."""
        self.plane = plane
        proto_lines = plane.lite.lines
        if len(proto_lines) > MAX_LINES:
            raise CaptureError(
                f"plane {plane.name!r} has {len(proto_lines):,} lines; a profiler writes one "
                f"per thread or stream, and tfobs reads at most {MAX_LINES:,} a plane: "
                "profile again (this file is damaged or not a profiler's)")
        self.base_ps = time_base_ps([plane]) if base_ps is None else base_ps
        columns = plane.events
        self.columns = columns
        bounds = columns.line_start
        self.lines: list[LineData] = [
            LineData(line, columns, bounds[j], bounds[j + 1], self.base_ps)
            for j, line in enumerate(proto_lines)
        ]
        self.names = plane.used_event_names
        self.stat_ids = plane.stat_ids
        self._by_name: dict[str, list[int]] | None = None
        self._where: dict[Any, frozenset[int]] = {}
        self._once: dict[Any, Any] = {}

    def once(self, make: Callable[[Timeline], _R]) -> _R:
        """`make(self)` for a module-level function several analyses ask of this plane:
        computed on the first call, then kept (a scan of every event's stats costs
        milliseconds on a window of thousands of steps)."""
        if make not in self._once:
            self._once[make] = make(self)
        found: _R = self._once[make]
        return found

    def mids_where(self, predicate: Any) -> set[int]:
        """Metadata ids whose event name satisfies `predicate(name)`."""
        return {mid for mid, name in self.names.items() if predicate(name)}

    def mids_where_once(self, predicate: Any) -> frozenset[int]:
        """`mids_where` for a module-level predicate several analyses ask with: scanned
        once per plane (a window of thousands of stage names pays a millisecond a scan)."""
        found = self._where.get(predicate)
        if found is None:
            found = self._where[predicate] = frozenset(self.mids_where(predicate))
        return found

    def mids_named(self, *names: str) -> set[int]:
        """Metadata ids of events named exactly one of `names`: by a name index built on
        the first call (the Python tracer writes thousands of names; a scan per lookup
        costs a millisecond each)."""
        if self._by_name is None:
            by_name: dict[str, list[int]] = {}
            for mid, name in self.names.items():
                by_name.setdefault(name, []).append(mid)
            self._by_name = by_name
        return {mid for name in names for mid in self._by_name.get(name, ())}

    def stats(self, line: LineData, i: int) -> dict[str, Any]:
        return self.plane.event_stats(line.event(i))

    def stat_values(self, line: LineData, i: int, wanted: Mapping[int, str]) -> dict[str, Any]:
        """Only the stats whose metadata id is in `wanted` ({stat id: key})."""
        return self.stat_values_many(line, [i], wanted)[0]

    def stat_values_many(
        self, line: LineData, positions: list[int], wanted: Mapping[int, str]
    ) -> list[dict[str, Any]]:
        """`stat_values` for many sorted positions of one line, decoded in one batch."""
        out: list[dict[str, Any]] = [{} for _ in positions]
        if not positions or not wanted:
            return out
        events = line.indices(positions)
        slot = {int(e): k for k, e in enumerate(events.tolist())}
        ids = np.fromiter(wanted, np.int64, len(wanted))
        batch = self.columns.stats_of(events, ids)
        keep = np.flatnonzero(np.isin(batch.mid, ids))
        names = self.plane.stat_names
        events_kept = batch.event[keep].tolist()
        for ev, mid, kind, value in zip(events_kept, batch.mid[keep].tolist(),
                                        batch.kind[keep].tolist(), batch.pythons(keep),
                                        strict=True):
            if kind == KIND_REF:  # the referenced stat's name, as PlaneView.value gives it
                value = names.get(value, "")
            out[slot[ev]][wanted[mid]] = value
        return out


# Metadata ids are small counters in practice: below this, lookups index an array by id.
DENSE_IDS = 1 << 22


def _dense_top(mids: np.ndarray) -> int | None:
    """The largest id when every id is in 0 .. DENSE_IDS, else None."""
    lo, hi = int(mids.min()), int(mids.max())
    return hi if lo >= 0 and hi < DENSE_IDS else None


def lookup(mids: np.ndarray, table: dict[int, int], default: int,
           top: int | None | bool = False) -> np.ndarray:
    """`table[mid]` for each of `mids`, `default` for ids not in it.

    `top`: `_dense_top(mids)` when the caller knows it (`LineData.dense_top`).
    """
    if not mids.size:
        return np.zeros(0, np.int64)
    if top is False:
        top = _dense_top(mids)
    keys = np.fromiter(table, np.int64, len(table))
    values = np.fromiter(table.values(), np.int64, len(table))
    if top is not None:  # the usual small ids: one array indexed by id
        dense = np.full(top + 1, default, np.int64)
        fit = (keys >= 0) & (keys <= top)
        dense[keys[fit]] = values[fit]
        looked_up: np.ndarray = dense[mids]
        return looked_up
    unique, inverse = np.unique(mids, return_inverse=True)
    out = np.fromiter((table.get(m, default) for m in unique.tolist()), np.int64,
                      unique.size)
    return out[inverse.ravel()]


class IdTable:
    """A {metadata id: value} table as sorted arrays, made once for a plane whose lines are
    looked up one by one (`lookup` lays its table out again per call: thousands of lines
    against a plane of thousands of names cost their product)."""

    __slots__ = ("keys", "values")

    def __init__(self, table: dict[int, int]) -> None:
        keys = np.fromiter(table, np.int64, len(table))
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.values = np.fromiter(table.values(), np.int64, len(table))[order]

    def get(self, mids: np.ndarray, default: int) -> np.ndarray:
        """`table[mid]` for each of `mids`, `default` for ids not in it, as `lookup`."""
        mids = np.asarray(mids).astype(np.int64, copy=False)
        if not self.keys.size or not mids.size:
            return np.full(mids.size, default, np.int64)
        at = np.minimum(np.searchsorted(self.keys, mids), self.keys.size - 1)
        out: np.ndarray = np.where(self.keys[at] == mids, self.values[at], default)
        return out


def plane_indices(lines: list[LineData], line: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Plane-wide event indices (`PlaneEvents`) of sorted `positions`, each on the line
    `lines[line[k]]`: one addition where every line is stored in time order (the usual
    case), so callers read the plane's columns instead of each line's."""
    if all(ld.order is None for ld in lines):
        shifted: np.ndarray = positions + np.array([ld.first for ld in lines], np.int64)[line]
        return shifted
    out = np.empty(positions.size, np.int64)
    for li in unique(line).tolist():
        sel = line == li
        out[sel] = lines[li].indices(positions[sel])
    return out


# Past this many ids, `member` looks a line's ids up in the ids sorted once (`_sorted_ids`)
# rather than laying out a table of all of them per call: thousands of Python threads, each
# looked up against a plane's thousands of Python function names, cost their product
# (40,000 of each, 2.8 MB: 14 s).
_FEW_IDS = 256
_SORTED: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray]] = {}


def _sorted_ids(ids: np.ndarray) -> np.ndarray:
    """`ids` sorted and unique, made once per array while it lives (the id sets a reduction
    builds are made once and not changed)."""
    key = id(ids)
    held = _SORTED.get(key)
    if held is not None and held[0]() is ids:
        return held[1]
    known = np.unique(ids)
    try:
        ref = weakref.ref(ids, lambda _, key=key: _SORTED.pop(key, None))  # type: ignore[misc]
    except TypeError:  # not weakly referable: sorted per call
        return known
    _SORTED[key] = (ref, known)
    return known


def member(mids: np.ndarray, ids: np.ndarray, top: int | None | bool = False) -> np.ndarray:
    """`np.isin(mids, ids)`, by a table indexed by id where the ids are small.

    `top`: `_dense_top(mids)` when the caller knows it (`LineData.dense_top`).
    """
    if not mids.size or not ids.size:
        return np.zeros(mids.size, bool)
    if ids.size > max(_FEW_IDS, mids.size):  # a plane's many ids against a line's few events
        known = _sorted_ids(ids)
        at = np.minimum(np.searchsorted(known, mids), known.size - 1)
        found: np.ndarray = known[at] == mids
        return found
    if top is False:
        top = _dense_top(mids)
    if top is None:
        return np.isin(mids, ids)
    table = np.zeros(top + 1, bool)
    table[ids[(ids >= 0) & (ids <= top)]] = True
    hit: np.ndarray = table[mids]
    return hit


def outermost(ld: LineData, mids: np.ndarray) -> np.ndarray:
    """Positions on `ld` of the events whose metadata id is in `mids` and that no earlier
    such event encloses. A line's events are in start order and nest, so an outermost one
    starts at or after the latest end before it."""
    return outermost_of(ld, np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top)))


def outermost_of(ld: LineData, at: np.ndarray) -> np.ndarray:
    """The positions among `at` (in start order) that no earlier one of them encloses."""
    if not at.size:
        return at
    reach = np.maximum.accumulate(ld.end_arr[at])
    kept: np.ndarray = at[np.r_[True, ld.start_arr[at][1:] >= reach[:-1]]]
    return kept


def enclosed(ld: LineData, outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """For each position in `inner`, whether one of the events at `outer` (positions in
    start order, on the same line) covers it: the latest end among the outer events that
    start at or before it reaches its end (events nest on a line)."""
    reach = np.maximum.accumulate(ld.end_arr[outer])
    k = np.searchsorted(ld.start_arr[outer], ld.start_arr[inner], side="right") - 1
    covered: np.ndarray = (k >= 0) & (reach[np.maximum(k, 0)] >= ld.end_arr[inner])
    return covered


def int_stats(
    tl: Timeline, line: LineData, positions: list[int], wanted: Mapping[int, str],
    raw: bool = False,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (value per position, whether it is an integer)} for the `wanted` stats.

    The same integers `Timeline.stat_values_many` gives (the last record of a stat wins;
    strings, doubles and references are not integers), as columns: values are Python
    ints in an object array, so unsigned values above int64 stay exact; with `raw`, their
    64-bit patterns as uint64 (for equality tests: no Python objects).
    """
    if not len(positions) or not wanted:
        return {}
    return int_stats_at(tl, line.indices(positions), wanted, raw)


def int_stats_at(
    tl: Timeline, events: np.ndarray, wanted: Mapping[int, str], raw: bool = False,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`int_stats` for plane-wide event indices (any lines, one decoding pass)."""
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    n = events.size
    if not n or not wanted:
        return out
    ids = np.fromiter(wanted, np.int64, len(wanted))
    decoded = _compiled_int_stats(tl, events, ids)
    if decoded is not None:
        value, kind = decoded
        is_int = _INTEGER_KIND[kind]  # every cell at once: kinds are small codes
        for j, key in enumerate(wanted.values()):
            if not kind[j].any():  # keyed only when some record of it was read
                continue
            has = is_int[j]
            if raw:  # the walk leaves 0 where no integer record is: the column as it is
                out[key] = (value[j], has)
                continue
            at = np.flatnonzero(has)
            out[key] = (_int_column(n, at, value[j][at], kind[j][at], raw), has)
        return out
    # slot: each record's event; records round by round, an event's in stored order.
    batch, slot = tl.columns.stats_by_slot(events, ids, by_event=False)
    # Each record's place in `wanted` (-1: none), by a table indexed by id where ids are
    # small (as int8: the stable sort below is then a radix sort), then the records
    # grouped by stat in one stable sort: each stat's records stay in record order.
    mid = batch.mid
    if mid.size and ids.size < 128 and 0 <= mid.min() and mid.max() < 256:
        table = np.full(256, -1, np.int8)
        fit = (ids >= 0) & (ids < 256)
        table[ids[fit]] = np.flatnonzero(fit)
        which = table[mid]
    else:
        by_id = np.argsort(ids)
        at = np.minimum(np.searchsorted(ids[by_id], mid), ids.size - 1)
        which = np.where(ids[by_id][at] == mid, by_id[at], -1)
    by_stat = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[by_stat], np.arange(ids.size + 1))
    # Integer records, tested once for all stats (most records are).
    record_is_int = (batch.kind == KIND_INT64) | (batch.kind == KIND_UINT64)
    for j, key in enumerate(wanted.values()):
        sel = by_stat[bounds[j]:bounds[j + 1]]
        if not sel.size:
            continue
        at = slot[sel]
        has = np.zeros(n, bool)
        has[at] = True
        if has.sum() < at.size:  # an event repeats the stat (rare): its last record wins
            by_event = np.argsort(at, kind="stable")  # stored order kept within an event
            sel, at = sel[by_event], at[by_event]
            last = np.r_[at[1:] != at[:-1], True]
            sel, at = sel[last], at[last]
        is_int = record_is_int[sel]
        if not is_int.all():  # `has` then marks only the events with an integer record
            at, sel = at[is_int], sel[is_int]
            has = np.zeros(n, bool)
            has[at] = True
        out[key] = (_int_column(n, at, batch.value[sel], batch.kind[sel], raw), has)
    return out


# Whether a value kind (columns.KIND_*, an int8 code) is an integer record's.
_INTEGER_KIND = np.zeros(256, bool)
_INTEGER_KIND[[KIND_INT64, KIND_UINT64]] = True


def _int_column(n: int, at: np.ndarray, value: np.ndarray, kind: np.ndarray,
                raw: bool) -> np.ndarray:
    """n values, the integer records' `value` (raw uint64) at positions `at`: with `raw`
    as uint64, else as Python ints (int64 records signed, uint64 ones unsigned)."""
    column = np.zeros(n, np.uint64 if raw else object)
    if raw:
        column[at] = value
        return column
    signed = kind == KIND_INT64
    column[at[signed]] = value[signed].view(np.int64).tolist()
    column[at[~signed]] = value[~signed].tolist()
    return column


def _compiled_int_stats(tl: Timeline, events: np.ndarray, ids: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """(raw value, value kind) per wanted id (rows) and event (columns), the last record
    of each winning, by the compiled walk (`columns.int_stats`); None where it is not
    built, an id is past the walk's table (256), or a record is laid out otherwise."""
    cols = tl.columns
    if not compiled() or (ids < 0).any() or (ids >= 256).any():
        return None
    slots = np.full(256, -1, np.int8)
    slots[ids] = np.arange(ids.size)
    value = np.zeros((ids.size, events.size), np.uint64)
    kind = np.zeros((ids.size, events.size), np.int8)
    if not cols.int_stats(np.ascontiguousarray(events, np.int64), slots, value, kind):
        return None
    return value, kind


def stat_present(tl: Timeline, events: np.ndarray, stat_id: int) -> np.ndarray:
    """For each plane-wide event index, whether it carries a record of stat `stat_id`, of
    any value kind (`int_stats_at` reads integer records only)."""
    ids = np.array([stat_id], np.int64)
    decoded = _compiled_int_stats(tl, events, ids)
    if decoded is not None:
        found: np.ndarray = decoded[1][0] != KIND_NONE
        return found
    batch, slot = tl.columns.stats_by_slot(events, ids, by_event=False)
    present = np.zeros(events.size, bool)
    present[slot[batch.mid == stat_id]] = True
    return present


def sums_fit(values: np.ndarray) -> bool:
    """Whether adding up the int64 `values` cannot overflow int64."""
    return not values.size or int(np.abs(values).max()) < 2**62 // values.size


def summable(values: np.ndarray) -> np.ndarray:
    """`values` (int64), as Python ints where a sum of them could pass int64 (corrupt
    times), so numpy's sums stay exact either way."""
    return values if sums_fit(values) else values.astype(object)


def positions_by_value(values: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Each distinct value of `values`, in ascending order, with its positions in `values`
    (ascending): one stable sort, where a scan of `values` per value cost values x rows
    (99,000 threads of one step marker each: lines x markers)."""
    if not values.size:
        return
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    cut = np.flatnonzero(ranked[1:] != ranked[:-1]) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, values.size]
    for value, lo, hi in zip(ranked[starts].tolist(), starts.tolist(), ends.tolist(),
                             strict=True):
        yield value, order[lo:hi]


def unique(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` (sorted distinct values) by one sort: NumPy 2's hash-based
    `unique` is many times slower on the int arrays the analyses pass it."""
    if values.size < 2:
        copied: np.ndarray = values.copy()
        return copied
    ranked = np.sort(values)
    return ranked[np.concatenate(([True], ranked[1:] != ranked[:-1]))]


class Spans(NamedTuple):
    """(begin, end) spans kept as two int64 columns: a long window's thousands of merged
    steps pass from one analysis to the next without a Python tuple each."""

    begin: np.ndarray
    end: np.ndarray


def span_bounds(spans: Sequence[tuple[int, int]] | Spans) -> tuple[np.ndarray, np.ndarray]:
    """The (begin, end) pairs `spans` as two int64 arrays, begins and ends."""
    if isinstance(spans, Spans):
        return spans.begin, spans.end
    columns = getattr(spans, "columns", None)  # a sequence that keeps its columns too
    if isinstance(columns, Spans):
        return columns.begin, columns.end
    both = np.array(spans, np.int64).reshape(-1, 2)
    return np.ascontiguousarray(both[:, 0]), np.ascontiguousarray(both[:, 1])


def span_of(start: np.ndarray, lo: np.ndarray, hi: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """For each of `start`, the span `lo[k]..hi[k]` (in order, not overlapping) it starts
    in: (k, clamped to 0 where there is none, whether `start` lies inside span k)."""
    k = np.searchsorted(lo, start, side="right") - 1  # the last span starting at or before
    kk = np.maximum(k, 0)
    return kk, (k >= 0) & (start < hi[kk])


def clip_to_spans(start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The events (`start`, `end`) that start inside one of the spans `lo[k]..hi[k]` (in
    order, not overlapping), each cut at its span's end."""
    kk, inside = span_of(start, lo, hi)
    return start[inside], np.minimum(end, hi[kk])[inside]


def id_array(mids: Any) -> np.ndarray:
    """Metadata ids as an array for `LineData.where`."""
    return np.fromiter(mids, np.int64, len(mids))
