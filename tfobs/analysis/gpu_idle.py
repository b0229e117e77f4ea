"""Per-GPU activity: busy and idle time by cause, launch delays, copies, collectives.

Idle time follows Holistic Trace Analysis's idle-time breakdown, taken per GPU instead of
per stream:
- activity = kernels, memcpy and memset events on the GPU plane (all streams); overlapping
  activity is merged, so `busy_s` counts each instant once;
- `span_s` runs from the first activity's start to the last one's end; idle = span - busy;
- each idle gap is charged to the activity that ends it (the earliest to start after it):
  `kernel_launch` when the host *began* the call that launched it only after the gap began
  (the GPU waited for the CPU), unless the host spent at least half of the gap waiting for
  input (its input events, as the step breakdown classifies them): then `input`; else
  `short_gap` when the gap is under `short_gap_s` (back-to-back launch latency), else
  `other` (synchronisation, copies to wait on, ...).
Host launch calls (cudaLaunchKernel, hipModuleLaunchKernel, cudaMemcpyAsync, ...) are the
host events that share the kernel's `correlation_id` stat. Without a host plane no gap is
a kernel-launch gap and launch delays are not measured.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from tfobs.analysis.device_events import LaunchTable, PlaneTable, is_gpu_plane
from tfobs.analysis.timeline import Spans, span_bounds, summable, time_base_ps
from tfobs.summary import COPY_DIRECTIONS, DeviceActivity, Steps
from tfobs.xspace.reader import PlaneView, SpaceView
from tfobs.xspace.schema import HOST_PLANE

DIRECTIONS = COPY_DIRECTIONS  # defined in summary.py

_COLLECTIVE = re.compile(r"nccl|rccl|AllReduce|AllGather|ReduceScatter|all_reduce|all_gather|"
                         r"reduce_scatter|all_to_all|AllToAll", re.IGNORECASE)
_DIR_PATTERNS = (
    ("h2d", re.compile(r"H2D|HtoD|HostToDevice", re.IGNORECASE)),
    ("d2h", re.compile(r"D2H|DtoH|DeviceToHost", re.IGNORECASE)),
    ("d2d", re.compile(r"D2D|DtoD|DeviceToDevice|P2P|PtoP|PeerToPeer", re.IGNORECASE)),
)
_MEMCPY_NAME = re.compile(r"memcpy|copy(host|device)|memset", re.IGNORECASE)
_SIZE = re.compile(r"\bsize:(\d+)")

_MAX_COPY_BYTES = 2**48  # a copy's stated size past this is corrupt; capped so sums fit


def _copy_bytes(digits: str) -> int:
    """A copy's stated size, capped: a text of more digits than the cap has is the cap, not
    an int() of it (past Python's 4,300 digits that raised, and the capture was lost)."""
    significant = digits.lstrip("0")
    return (_MAX_COPY_BYTES if len(significant) > 15
            else min(int(significant or "0"), _MAX_COPY_BYTES))


_K = TypeVar("_K")  # a step's key (device_step_spans)


KIND_CODES = ("", "kernel", "memcpy", "memset")  # Activities.kind indexes this
_KERNEL, _MEMCPY = 1, 2
_DIRECTION_CODES = ("", *DIRECTIONS)


@dataclass(frozen=True)
class Activities:
    """The kernels, copies and memsets of one GPU plane, sorted by start then end.

    Columns per activity: times (ps on the capture's time base), `kind` (index into
    KIND_CODES), copy `direction` (index into ("", *DIRECTIONS)) and `nbytes`, the
    `launch` (index into the LaunchTable, -1 if the capture holds none), and `sig` (the
    PlaneTable signature, for names).
    """

    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    direction: np.ndarray
    nbytes: np.ndarray
    launch: np.ndarray
    sig: np.ndarray
    table: PlaneTable

    def __len__(self) -> int:
        return int(self.start.size)


def device_activities(table: PlaneTable, launches: LaunchTable) -> Activities:
    """Kernels, copies and memsets of one GPU plane; never raises."""
    plane = table.plane
    lines = plane.lite.lines
    n_sig = len(table.signatures)
    kind = np.zeros(n_sig, np.int64)
    direction = np.zeros(n_sig, np.int64)
    nbytes = np.zeros(n_sig, np.int64)
    for j, signature in enumerate(table.signatures):
        name = plane.event_names.get(signature.mid, "")
        line_name = lines[signature.line].name
        found = _kind(name, signature.stats, _line_kind(line_name), signature.has_correlation)
        kind[j] = KIND_CODES.index(found)
        if found == "memcpy":
            details = str(signature.stats.get("memcpy_details") or "")
            direction[j] = _DIRECTION_CODES.index(_direction(name, details, line_name))
            m = _SIZE.search(details)
            nbytes[j] = _copy_bytes(m.group(1)) if m else 0
    of = kind[table.sig]
    keep = np.flatnonzero(of > 0)
    start, end = table.start[keep], table.end[keep]
    order = np.lexsort((end, start))  # stable: ties keep line and stored order
    keep = keep[order]
    sig = table.sig[keep]
    return Activities(start[order], end[order], of[keep], direction[sig], nbytes[sig],
                      launches.find(table.corr[keep], table.has_corr[keep]), sig, table)


def _line_kind(line_name: str) -> str:
    low = line_name.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    return ""


def _kind(name: str, stats: dict[str, Any], line_kind: str, has_correlation: bool) -> str:
    if stats.get("kernel_details"):
        return "kernel"
    if stats.get("memcpy_details"):
        return "memset" if "memset" in name.lower() else "memcpy"
    if line_kind:
        return line_kind
    if _MEMCPY_NAME.search(name):
        return "memset" if "memset" in name.lower() else "memcpy"
    # A stream event with a correlation id is device work launched by the host.
    return "kernel" if has_correlation else ""


def _direction(name: str, details: str, line_name: str) -> str:
    for text in (name, details, line_name):
        for direction, pattern in _DIR_PATTERNS:
            if pattern.search(text):
                return direction
    return "d2d" if "copy" in name.lower() else ""


class GpuEvents:
    """Host launch calls and each GPU plane's events and activities, read once per
    reduction, on one time base (the caller's, or the capture's host and GPU planes')."""

    def __init__(self, space: SpaceView, base_ps: int | None = None) -> None:
        self.space = space
        if base_ps is None:
            host = space.plane(HOST_PLANE)
            base_ps = time_base_ps([p for p in space.planes if is_gpu_plane(p)]
                                   + ([host] if host is not None else []))
        self.base_ps = base_ps
        self._launches: LaunchTable | None = None
        self._tables: dict[str, PlaneTable] = {}
        self._acts: dict[str, Activities] = {}

    def launches(self) -> LaunchTable:
        if self._launches is None:
            self._launches = LaunchTable(self.space, self.base_ps)
        return self._launches

    def table(self, plane: PlaneView) -> PlaneTable:
        found = self._tables.get(plane.name)
        if found is None:
            found = self._tables[plane.name] = PlaneTable(plane, self.base_ps)
        return found

    def activities(self, plane: PlaneView) -> Activities:
        acts = self._acts.get(plane.name)
        if acts is None:
            acts = self._acts[plane.name] = device_activities(self.table(plane),
                                                              self.launches())
        return acts


def merge(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of [start, end) intervals, sorted."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def merge_columns(begin: np.ndarray, end: np.ndarray) -> list[tuple[int, int]]:
    """`merge` of the intervals `begin[k]..end[k]`, given as columns."""
    merged = merged_spans(begin, end)
    return list(zip(merged.begin.tolist(), merged.end.tolist(), strict=True))


def merged_spans(begin: np.ndarray, end: np.ndarray) -> Spans:
    """`merge_columns`, kept as columns: a long window's thousands of steps merge without
    a Python tuple each."""
    if not begin.size:
        none = np.zeros(0, np.int64)
        return Spans(none, none)
    # Where no span ends before it starts, the order among equal begins changes nothing, so
    # begins already in order (a line's events, the steps) need no sort at all.
    order: np.ndarray | None = None
    if not (end >= begin).all():
        order = np.lexsort((end, begin))
    elif not (begin[1:] >= begin[:-1]).all():
        order = np.argsort(begin, kind="stable")
    b, e = (begin, end) if order is None else (begin[order], end[order])
    reach = np.maximum.accumulate(e)
    # A new interval where it starts after every earlier one has ended; each ends at the
    # reach of its last member (no earlier interval reaches past its start).
    first = np.flatnonzero(np.r_[True, b[1:] > reach[:-1]])
    last = np.r_[first[1:] - 1, b.size - 1]
    return Spans(b[first].astype(np.int64), reach[last].astype(np.int64))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def reduce_devices(
    space: SpaceView, steps: Steps, *, short_gap_s: float = 30e-6, steps_in_window: int = 0,
    events: GpuEvents | None = None, input_spans: list[tuple[int, int]] | None = None,
) -> tuple[DeviceActivity, ...]:
    """One DeviceActivity per GPU plane with device activity (see the module docstring).

    `idle_s`, `busy_s` and `span_s` are totals over the window; copies and collectives are
    per step (per window when the capture has no steps). The window's copies are shared
    over every step it holds (`steps_in_window`), the first and last that the step
    figures leave out included. `input_spans`: the host's input waits (merged, in ps on
    the time base of `events`), which turn a kernel-launch gap into an input one.
    """
    events = events or GpuEvents(space)
    per_step = max(int(steps_in_window or steps.count or 0), 1)
    waits = _Covered(input_spans or [])
    out = []
    for plane in space.planes:
        if not is_gpu_plane(plane):
            continue
        acts = events.activities(plane)
        if not len(acts):
            continue
        launches = events.launches()
        out.append(_device(plane.name, _as_copies_where_launched_as_copies(acts, launches),
                           launches, short_gap_s, per_step, waits))
    return tuple(out)


def _as_copies_where_launched_as_copies(acts: Activities, launches: LaunchTable
                                        ) -> Activities:
    """ROCm runs async copies as kernels (__amd_rocclr_copyBuffer): the host call says so."""
    launched = np.flatnonzero((acts.kind == _KERNEL) & (acts.launch >= 0))
    if not launched.size:
        return acts
    # Each launch name judged once, its kernels found by one table look-up (a scan of the
    # kernels per name cost names x kernels: 160,000 copy calls of their own names, 20 s).
    mids = launches.mid[acts.launch[launched]]
    order = np.argsort(mids, kind="stable")
    ranked = mids[order]
    first = np.r_[True, ranked[1:] != ranked[:-1]]
    names = ranked[first]  # the distinct names' ids; `at`: each kernel's among them
    at = np.empty(mids.size, np.int64)
    at[order] = np.cumsum(first) - 1
    copy_code = np.zeros(names.size, np.int64)  # per name: its direction's code, 0 for none
    for j, mid in enumerate(names.tolist()):
        name = launches.names.get(mid, "")
        if "memcpy" in name.lower():
            copy_code[j] = _DIRECTION_CODES.index(_direction(name, "", "")) + 1
    code = copy_code[at]
    copies = launched[code > 0]
    kind, direction = acts.kind.copy(), acts.direction.copy()
    kind[copies] = _MEMCPY
    direction[copies] = code[code > 0] - 1
    return dataclasses.replace(acts, kind=kind, direction=direction)


class _Covered:
    """Picoseconds of each [lo, hi] inside the merged, sorted `spans`: their bounds and
    running sums made once for every GPU plane (made per plane, 800 planes of a host with
    100,000 input waits cost 20 s)."""

    def __init__(self, spans: list[tuple[int, int]]) -> None:
        self.bounds: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if spans:
            begin, end = span_bounds(spans)
            self.bounds = (begin, end, np.r_[0, np.cumsum(end - begin)])

    def __call__(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        if self.bounds is None:
            return np.zeros(lo.size, np.int64)
        return _covered_by(*self.bounds, lo, hi)


def covered_ps(begin: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray
               ) -> np.ndarray:
    """Picoseconds of each [lo, hi] inside the spans `begin[k]..end[k]` (merged, sorted)."""
    return _covered_by(begin, end, np.r_[0, np.cumsum(end - begin)], lo, hi)


def _covered_by(begin: np.ndarray, end: np.ndarray, before: np.ndarray, lo: np.ndarray,
                hi: np.ndarray) -> np.ndarray:
    """`covered_ps` given `before`, the span time before each span."""

    def upto(t: np.ndarray) -> np.ndarray:  # span time before t
        k = np.searchsorted(begin, t, side="right")
        spent: np.ndarray = before[k] - np.maximum(end[np.maximum(k - 1, 0)] - t, 0) * (k > 0)
        return spent

    covered: np.ndarray = upto(hi) - upto(lo)
    return covered


def _device(
    device: str,
    acts: Activities,
    launches: LaunchTable,
    short_gap_s: float,
    per_step: int,
    waits: _Covered,
) -> DeviceActivity:
    start, end, launch = acts.start, acts.end, acts.launch
    # Activity merges into blocks: a gap opens before an activity that starts after every
    # earlier one has ended; each gap is charged to that activity.
    reach = np.maximum.accumulate(end)
    gap_at = np.flatnonzero(start[1:] > reach[:-1]) + 1
    gap_from = reach[gap_at - 1]
    gap = start[gap_at] - gap_from
    gap_launch = launch[gap_at]
    launched_late = (gap_launch >= 0) & (launches.start[np.maximum(gap_launch, 0)] > gap_from
                                         if launches.start.size else False)
    waiting = waits(gap_from[launched_late], start[gap_at][launched_late])
    late = gap[launched_late]
    short = ~launched_late & (gap < short_gap_s * 1e12)
    idle = {
        "kernel_launch": int(late[2 * waiting < late].sum()),
        "input": int(late[2 * waiting >= late].sum()),
        "short_gap": int(gap[short].sum()),
        "other": int(gap[~launched_late & ~short].sum()),
    }
    span = int(reach[-1]) - int(start[0])
    busy = span - int(gap.sum())

    is_kernel = acts.kind == _KERNEL
    kernels = np.flatnonzero(is_kernel)
    linked = kernels[launch[kernels] >= 0]
    at = launch[linked]
    # Host and device clocks can disagree by a little: a negative delay counts as 0.
    delays = [ps * 1e-12 for ps in np.maximum(start[linked] - launches.end[at], 0).tolist()]
    small = int(((end[linked] - start[linked]) < (launches.end[at] - launches.start[at])).sum())

    copy_ps = dict.fromkeys(DIRECTIONS, 0)
    copy_bytes = dict.fromkeys(DIRECTIONS, 0)
    copies = acts.kind == _MEMCPY
    for code, direction in enumerate(_DIRECTION_CODES):
        if direction:
            sel = copies & (acts.direction == code)
            copy_ps[direction] = int(summable(end[sel] - start[sel]).sum())
            copy_bytes[direction] = int(acts.nbytes[sel].sum())
    names = acts.table.plane.event_names
    collective_sig = np.array([bool(_COLLECTIVE.search(names.get(s.mid, "")))
                               for s in acts.table.signatures], bool)
    sel = np.flatnonzero(is_kernel & collective_sig[acts.sig])
    collectives = merge(list(zip(start[sel].tolist(), end[sel].tolist(), strict=True)))
    collective_ps = sum(e - b for b, e in collectives)
    n_kernels = int(kernels.size)

    return DeviceActivity(
        device=device,
        span_s=span * 1e-12,
        busy_s=busy * 1e-12,
        idle_s={cause: ps * 1e-12 for cause, ps in idle.items()},
        kernel_count=n_kernels,
        mean_kernel_s=(int(summable(end[kernels] - start[kernels]).sum()) / n_kernels * 1e-12
                       if n_kernels else 0.0),
        launch_delay_mean_s=sum(delays) / len(delays) if delays else 0.0,
        launch_delay_p95_s=percentile(delays, 95) if delays else 0.0,
        small_kernel_ratio=small / len(delays) if delays else 0.0,
        copy_s={d: ps * 1e-12 / per_step for d, ps in copy_ps.items()},
        copy_bytes={d: b / per_step for d, b in copy_bytes.items()},
        collective_s=collective_ps * 1e-12 / per_step,
    )


def device_step_spans(events: GpuEvents, step_of: np.ndarray, steps: list[_K]
                      ) -> dict[_K, int]:
    """{step key: XProf's device step time in ps}.

    `step_of[e]` is the step group (index into `steps`, the groups' keys: marker name and
    number, as train and test steps may share a number) of host
    event `e`, -1 for none. XProf 2.24.2 times a GPU step by device activity alone (its
    derived "Steps" line): a device event joins the step group of the host call that
    launched it (same `correlation_id`), an event with no group joins the group of the event
    before it, consecutive events of one group make one span, and a step's time is its
    longest span. Host time plays no part, which is why XProf puts a GPU step's host work in
    "All Others"; tfobs keeps the marker's time and reports this one beside it.
    """
    out: dict[int, int] = {}
    launches = events.launches()
    for plane in events.space.planes:
        if not is_gpu_plane(plane):
            continue
        acts = events.activities(plane)
        if not len(acts):
            continue
        # The group of each event's launch call, -1 where none; then each unlaunched event
        # takes the group of the last event before it that has one.
        host = np.where(acts.launch >= 0, launches.event[np.maximum(acts.launch, 0)]
                        if launches.event.size else -1, -1)
        known = (host >= 0) & (host < len(step_of))
        group = np.full(len(acts), -1, np.int64)
        group[known] = step_of[host[known]]
        has = group >= 0
        last = np.maximum.accumulate(np.where(has, np.arange(len(acts)), -1))
        group = np.where(last >= 0, group[np.maximum(last, 0)], -1)
        keep = np.flatnonzero(group >= 0)
        if not keep.size:
            continue
        g = group[keep]
        begin, end = acts.start[keep], acts.end[keep]
        # Runs of one group in time order; each run spans its earliest start to latest end.
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        spans = np.maximum.reduceat(end, first) - np.minimum.reduceat(begin, first)
        for k, ps in zip(g[first].tolist(), spans.tolist(), strict=True):
            out[k] = max(out.get(k, 0), ps)
    return {steps[g]: ps for g, ps in out.items() if 0 <= g < len(steps)}
