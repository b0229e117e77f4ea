"""A GPU plane's events as numpy columns, read once for every GPU analysis.

Device activity, kernel statistics, device op rows and device step times all walk the same
device events and key on the same few stats. Here they are decoded once per plane: times
on the capture's time base, the correlation id that links an event to its host launch
call, and a *signature* per event (line, metadata id, and the values of the stats the
analyses read). Analyses then do their Python work once per distinct signature (a few
hundred in a window of thousands of kernels) and their per-event sums in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tfobs.analysis.timeline import unique
from tfobs.xspace.columns import KIND_BYTES, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64
from tfobs.xspace.reader import PlaneView, SpaceView
from tfobs.xspace.schema import HOST_PLANE

GPU_PLANE_PREFIX = "/device:GPU:"

# Lines the profiler derives (steps, XLA ops, ...) carry ids in this range (tsl xplane_schema).
_DERIVED_LINE_MIN = 0xDEADBEEF
_DERIVED_LINE_MAX = _DERIVED_LINE_MIN + 0xFF

# The event stats any GPU analysis keys on (the correlation id is a column of its own).
KEYED_STATS = ("kernel_details", "memcpy_details", "tf_op", "hlo_op", "program_id",
               "equation")


def is_gpu_plane(plane: PlaneView) -> bool:
    return plane.name.startswith(GPU_PLANE_PREFIX)


def is_derived_line(line_id: int) -> bool:
    return _DERIVED_LINE_MIN <= line_id <= _DERIVED_LINE_MAX


@dataclass(frozen=True)
class Signature:
    """What the analyses read of an event besides its times."""

    line: int  # index in the plane's lines
    mid: int  # event metadata id
    has_correlation: bool  # a `correlation_id` record of any kind
    stats: dict[str, Any]  # KEYED_STATS present, as the protobuf accessor gives them
    # (a reference as the referenced stat's name; the last record of a stat wins)


class PlaneTable:
    """The events of one GPU plane's real (not derived) lines, in stored order.

    `start`/`end`: int64 ps on the capture's time base (end = start + duration, a negative
    duration counted as 0); `duration`: the stored duration, as is; `corr`: the 64-bit
    pattern of an integer `correlation_id` (its last record), `has_corr` where there is
    one; `sig[k]`: index into `signatures`.
    """

    def __init__(self, plane: PlaneView, base_ps: int) -> None:
        self.plane = plane
        cols = plane.events
        lines = plane.lite.lines
        bounds = cols.line_start
        real = [j for j, line in enumerate(lines)
                if not is_derived_line(line.id) and bounds[j + 1] > bounds[j]]
        self.events = (np.concatenate([np.arange(bounds[j], bounds[j + 1]) for j in real])
                       if real else np.zeros(0, np.int64))
        sizes = [bounds[j + 1] - bounds[j] for j in real]
        line_of = np.repeat(np.array(real, np.int64), sizes)
        line_base = np.array([lines[j].timestamp_ns * 1000 - base_ps for j in real], np.int64)
        n = self.events.size
        self.duration = cols.duration[self.events]
        self.start = np.repeat(line_base, sizes) + cols.offset[self.events]
        self.end = self.start + np.maximum(self.duration, 0)
        self.mid = cols.mid[self.events]
        self.corr = np.zeros(n, np.int64)
        self.has_corr = np.zeros(n, bool)
        names = plane.stat_ids
        wanted = {names[s]: s for s in (*KEYED_STATS, "correlation_id") if s in names}
        codes: list[np.ndarray] = [line_of, self.mid]
        decoders: list[list[Any]] = []
        corr_present = np.zeros(n, bool)
        if n and wanted:
            batch, slot = cols.stats_by_slot(self.events, np.fromiter(wanted, np.int64,
                                                                      len(wanted)))
            for stat_id, name in wanted.items():
                recs = np.flatnonzero(batch.mid == stat_id)
                if not recs.size:
                    continue
                at = slot[recs]
                last = np.r_[at[1:] != at[:-1], True]  # records of an event are together
                recs, at = recs[last], at[last]
                if name == "correlation_id":
                    corr_present[at] = True
                    kind = batch.kind[recs]
                    is_int = (kind == KIND_INT64) | (kind == KIND_UINT64)
                    self.corr[at[is_int]] = batch.value[recs[is_int]].view(np.int64)
                    self.has_corr[at[is_int]] = True
                    continue
                code, values = _value_codes(batch, recs, plane)
                column = np.full(n, -1, np.int64)
                column[at] = code
                codes.append(column)
                decoders.append([name, values])
        codes.append(corr_present.astype(np.int64))
        self.sig, self.first = _combine(codes)
        self.signatures: list[Signature] = []
        stat_codes = codes[2:-1]
        for k in self.first.tolist():
            stats = {}
            for (name, values), column in zip(decoders, stat_codes, strict=True):
                c = int(column[k])
                if c >= 0:
                    stats[name] = values[c]
            self.signatures.append(Signature(int(line_of[k]), int(self.mid[k]),
                                             bool(corr_present[k]), stats))

    def __len__(self) -> int:
        return int(self.events.size)

    def first_seen(self) -> np.ndarray:
        """Signature indices in the order their first event comes (stored order)."""
        return np.argsort(self.first, kind="stable")


def _value_codes(batch: Any, recs: np.ndarray, plane: PlaneView) -> tuple[np.ndarray,
                                                                          list[Any]]:
    """(code per record, value per code) of stat records: numbers and references by
    their 64-bit value, strings by their text (they are rare on GPU lines)."""
    kind = batch.kind[recs]
    code = np.zeros(recs.size, np.int64)
    values: list[Any] = []
    text = (kind == KIND_STR) | (kind == KIND_BYTES)
    for k in unique(kind[~text]).tolist():
        sel = np.flatnonzero(kind == k)
        _, first, inverse = np.unique(batch.value[recs[sel]], return_index=True,
                                             return_inverse=True)
        code[sel] = inverse.ravel() + len(values)
        for v in batch.pythons(recs[sel[first]]):
            values.append(plane.stat_names.get(v, "") if k == KIND_REF else v)
    if text.any():
        seen: dict[Any, int] = {}
        sel = np.flatnonzero(text)
        for j, v in zip(sel.tolist(), batch.pythons(recs[sel]), strict=True):
            c = seen.get(v)
            if c is None:
                c = seen[v] = len(values)
                values.append(v)
            code[j] = c
    return code, values


def _combine(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(dense code per row of the int64 columns taken together, first row of each code)."""
    n = columns[0].size
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.zeros(n, np.int64)
    top = 0  # key <= top
    for column in columns:
        lo, hi = int(column.min()), int(column.max())
        if hi - lo > 4 * n:  # sparse values (large ids): rank them first
            _, col = np.unique(column, return_inverse=True)
            col, lo, hi = col.ravel(), 0, n - 1
        else:
            col = column - lo
        if (top + 1) * (hi - lo + 1) >= 2**62:  # keep the product inside int64
            _, key = np.unique(key, return_inverse=True)
            key = key.ravel()
            top = int(key.max())
        key = key * (hi - lo + 1) + col
        top = (top + 1) * (hi - lo + 1) - 1
    _, first, key = np.unique(key, return_index=True, return_inverse=True)
    return key.ravel(), first


class LaunchTable:
    """The host calls that launched device work (cudaLaunchKernel, cudaMemcpyAsync, ...):
    per distinct correlation id, sorted by it, the last host event that carries it as its
    first `correlation_id` record; times on the capture's time base."""

    def __init__(self, space: SpaceView, base_ps: int) -> None:
        self.corr = np.zeros(0, np.int64)
        self.start = self.end = self.event = self.mid = np.zeros(0, np.int64)
        self.names: dict[int, str] = {}
        plane = space.plane(HOST_PLANE)
        if plane is None or "correlation_id" not in plane.stat_ids:
            return
        self.names = plane.event_names
        cols = plane.events
        corr_id = plane.stat_ids["correlation_id"]
        with_stats = np.flatnonzero(cols.stats_at < cols.end)  # most host events have none
        batch = cols.stats_of(with_stats, np.array([corr_id], np.int64))
        recs = np.flatnonzero(batch.mid == corr_id)
        if not recs.size:
            return
        events = batch.event[recs]
        first = np.r_[True, events[1:] != events[:-1]]  # an event's records are together
        recs, events = recs[first], events[first]
        is_int = (batch.kind[recs] == KIND_INT64) | (batch.kind[recs] == KIND_UINT64)
        recs, events = recs[is_int], events[is_int]
        corr = batch.value[recs].view(np.int64)
        # Later events win: the last event of each id (stable sort keeps event order).
        order = np.argsort(corr, kind="stable")
        corr, events = corr[order], events[order]
        last = np.r_[corr[1:] != corr[:-1], True]
        self.corr, self.event = corr[last], events[last]
        line_of = np.searchsorted(np.asarray(cols.line_start), self.event, side="right") - 1
        bases = np.array([line.timestamp_ns * 1000 - base_ps for line in plane.lite.lines]
                         or [0], np.int64)
        self.start = bases[line_of] + cols.offset[self.event]
        self.end = self.start + np.maximum(cols.duration[self.event], 0)
        self.mid = cols.mid[self.event]

    def find(self, corr: np.ndarray, has: np.ndarray) -> np.ndarray:
        """Index into this table of each id's launch call, -1 where there is none."""
        if not self.corr.size:
            return np.full(corr.size, -1, np.int64)
        at = np.minimum(np.searchsorted(self.corr, corr), self.corr.size - 1)
        return np.where(has & (self.corr[at] == corr), at, -1)
