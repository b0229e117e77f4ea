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

import bisect
import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tfobs.analysis.kernels import is_derived_line, is_gpu_plane
from tfobs.summary import COPY_DIRECTIONS, DeviceActivity, Steps
from tfobs.xspace.columns import KIND_INT64, KIND_REF, KIND_UINT64
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


@dataclass(frozen=True)
class Activity:
    """One device event on the absolute clock (picoseconds)."""

    start_ps: int
    end_ps: int
    kind: str  # "kernel" | "memcpy" | "memset"
    name: str
    correlation_id: int | None = None
    direction: str = ""  # h2d | d2h | d2d for copies
    nbytes: int = 0


def device_activities(plane: PlaneView) -> list[Activity]:
    """Kernels, copies and memsets of one GPU plane, sorted by start; never raises."""
    out: list[Activity] = []
    ids = {plane.stat_ids[n]: n for n in ("correlation_id", "kernel_details", "memcpy_details")
           if n in plane.stat_ids}
    cols = plane.events
    stats_of = _event_stats(plane, ids)
    for j, line in enumerate(plane.lite.lines):
        if is_derived_line(line.id):
            continue
        base = line.timestamp_ns * 1000
        line_kind = _line_kind(line.name)
        lo, hi = cols.line_start[j], cols.line_start[j + 1]
        for k, mid, offset, duration in zip(range(lo, hi), cols.mid[lo:hi].tolist(),
                                            cols.offset[lo:hi].tolist(),
                                            cols.duration[lo:hi].tolist(), strict=True):
            name = plane.event_names.get(mid, "")
            stats = stats_of.get(k, {})
            kind = _kind(name, stats, line_kind)
            if not kind:
                continue
            start = base + offset
            end = start + max(duration, 0)
            corr = stats.get("correlation_id")
            direction, nbytes = "", 0
            if kind == "memcpy":
                details = str(stats.get("memcpy_details") or "")
                direction = _direction(name, details, line.name)
                m = _SIZE.search(details)
                nbytes = int(m.group(1)) if m else 0
            out.append(Activity(start, end, kind, name,
                                corr if isinstance(corr, int) else None, direction, nbytes))
    out.sort(key=lambda a: (a.start_ps, a.end_ps))
    return out


def _event_stats(plane: PlaneView, ids: Mapping[int, str]) -> dict[int, dict[str, object]]:
    """{plane event index: {wanted stat: value}} from the columns (refs as stat names)."""
    cols = plane.events
    if not ids or not len(cols):
        return {}
    wanted = np.fromiter(ids, np.int64, len(ids))
    batch = cols.stats_of(np.arange(len(cols)), wanted)
    recs = np.flatnonzero(np.isin(batch.mid, wanted))
    out: dict[int, dict[str, object]] = {}
    names = plane.stat_names
    for ev, mid, kind, value in zip(batch.event[recs].tolist(), batch.mid[recs].tolist(),
                                    batch.kind[recs].tolist(), batch.pythons(recs),
                                    strict=True):
        out.setdefault(ev, {})[ids[mid]] = names.get(value, "") if kind == KIND_REF else value
    return out


def _line_kind(line_name: str) -> str:
    low = line_name.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    return ""


def _kind(name: str, stats: dict, line_kind: str) -> str:
    if stats.get("kernel_details"):
        return "kernel"
    if stats.get("memcpy_details"):
        return "memset" if "memset" in name.lower() else "memcpy"
    if line_kind:
        return line_kind
    if _MEMCPY_NAME.search(name):
        return "memset" if "memset" in name.lower() else "memcpy"
    # A stream event with a correlation id is device work launched by the host.
    return "kernel" if "correlation_id" in stats else ""


def _direction(name: str, details: str, line_name: str) -> str:
    for text in (name, details, line_name):
        for direction, pattern in _DIR_PATTERNS:
            if pattern.search(text):
                return direction
    return "d2d" if "copy" in name.lower() else ""


@dataclass(frozen=True)
class Launch:
    start_ps: int
    end_ps: int
    name: str  # the host call: cudaLaunchKernel, hipMemcpyHtoDAsync, ...
    event: int = -1  # its index in the host plane's event columns


def host_launches(space: SpaceView) -> dict[int, Launch]:
    """{correlation_id: Launch} for the host calls that launched device work.

    Read from the host plane's event columns (the first `correlation_id` stat of each
    event that has one, later events winning), so the host plane is not parsed twice.
    """
    out: dict[int, Launch] = {}
    plane = space.plane(HOST_PLANE)
    if plane is None or "correlation_id" not in plane.stat_ids:
        return out
    cols = plane.events
    corr_id = plane.stat_ids["correlation_id"]
    batch = cols.stats_of(np.arange(len(cols)), np.array([corr_id], np.int64))
    recs = np.flatnonzero(batch.mid == corr_id)
    if not recs.size:
        return out
    events = batch.event[recs]
    first = np.r_[True, events[1:] != events[:-1]]  # an event's records are together
    recs, events = recs[first], events[first]
    is_int = (batch.kind[recs] == KIND_INT64) | (batch.kind[recs] == KIND_UINT64)
    recs, events = recs[is_int], events[is_int]
    line_of = np.searchsorted(np.asarray(cols.line_start), events, side="right") - 1
    bases = [line.timestamp_ns * 1000 for line in plane.lite.lines]
    for value, li, offset, duration, mid, event in zip(
            batch.pythons(recs), line_of.tolist(), cols.offset[events].tolist(),
            cols.duration[events].tolist(), cols.mid[events].tolist(), events.tolist(),
            strict=True):
        start = bases[li] + offset
        out[value] = Launch(start, start + max(duration, 0), plane.event_names.get(mid, ""),
                            event)
    return out


class GpuEvents:
    """Host launch calls and each GPU plane's activities, read once per reduction."""

    def __init__(self, space: SpaceView) -> None:
        self.space = space
        self._launches: dict[int, Launch] | None = None
        self._acts: dict[str, list[Activity]] = {}

    def launches(self) -> dict[int, Launch]:
        if self._launches is None:
            self._launches = host_launches(self.space)
        return self._launches

    def activities(self, plane: PlaneView) -> list[Activity]:
        acts = self._acts.get(plane.name)
        if acts is None:
            acts = self._acts[plane.name] = device_activities(plane)
        return acts


def _launch_of(launches: dict[int, Launch], correlation_id: int | None) -> Launch | None:
    """The host call that launched a device event, if the capture holds it."""
    return launches.get(correlation_id) if correlation_id is not None else None


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


def _covered(spans: list[tuple[int, int]], begins: list[int], lo: int, hi: int) -> int:
    """Picoseconds of [lo, hi] inside the merged, sorted `spans`."""
    total = 0
    i = max(bisect.bisect_right(begins, lo) - 1, 0)
    while i < len(spans) and spans[i][0] < hi:
        b, e = spans[i]
        total += max(0, min(e, hi) - max(b, lo))
        i += 1
    return total


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
    figures leave out included. `input_spans`: the host's input waits (absolute ps,
    merged), which turn a kernel-launch gap into an input one.
    """
    events = events or GpuEvents(space)
    per_step = max(int(steps_in_window or steps.count or 0), 1)
    out = []
    for plane in space.planes:
        if not is_gpu_plane(plane):
            continue
        acts = events.activities(plane)
        if not acts:
            continue
        launches = events.launches()
        acts = [_as_copy_if_launched_as_copy(a, launches) for a in acts]
        out.append(_device(plane.name, acts, launches, short_gap_s, per_step,
                           input_spans or []))
    return tuple(out)


def _as_copy_if_launched_as_copy(act: Activity, launches: dict[int, Launch]) -> Activity:
    """ROCm runs async copies as kernels (__amd_rocclr_copyBuffer): the host call says so."""
    if act.kind != "kernel" or act.correlation_id is None:
        return act
    launch = _launch_of(launches, act.correlation_id)
    if launch is None or "memcpy" not in launch.name.lower():
        return act
    return dataclasses.replace(act, kind="memcpy", direction=_direction(launch.name, "", ""))


def _device(
    device: str,
    acts: list[Activity],
    launches: dict[int, Launch],
    short_gap_s: float,
    per_step: int,
    input_spans: list[tuple[int, int]],
) -> DeviceActivity:
    short_gap_ps = short_gap_s * 1e12
    idle = {"kernel_launch": 0, "input": 0, "short_gap": 0, "other": 0}
    input_begins = [b for b, _ in input_spans]
    busy = 0
    block_start, block_end = acts[0].start_ps, acts[0].end_ps
    for act in acts[1:]:
        if act.start_ps <= block_end:
            block_end = max(block_end, act.end_ps)
            continue
        busy += block_end - block_start
        gap = act.start_ps - block_end
        launch = _launch_of(launches, act.correlation_id)
        if launch is not None and launch.start_ps > block_end:
            waiting = _covered(input_spans, input_begins, block_end, act.start_ps)
            idle["input" if 2 * waiting >= gap else "kernel_launch"] += gap
        elif gap < short_gap_ps:
            idle["short_gap"] += gap
        else:
            idle["other"] += gap
        block_start, block_end = act.start_ps, act.end_ps
    busy += block_end - block_start
    span = max(a.end_ps for a in acts) - acts[0].start_ps

    kernels = [a for a in acts if a.kind == "kernel"]
    delays: list[float] = []
    small = linked = 0
    for k in kernels:
        launch = _launch_of(launches, k.correlation_id)
        if launch is None:
            continue
        linked += 1
        # Host and device clocks can disagree by a little: a negative delay counts as 0.
        delays.append(max(k.start_ps - launch.end_ps, 0) * 1e-12)
        if k.end_ps - k.start_ps < launch.end_ps - launch.start_ps:
            small += 1

    copy_ps = dict.fromkeys(DIRECTIONS, 0)
    copy_bytes = dict.fromkeys(DIRECTIONS, 0)
    for a in acts:
        if a.kind == "memcpy" and a.direction in copy_ps:
            copy_ps[a.direction] += a.end_ps - a.start_ps
            copy_bytes[a.direction] += a.nbytes
    collectives = merge([(k.start_ps, k.end_ps) for k in kernels if _COLLECTIVE.search(k.name)])
    collective_ps = sum(end - start for start, end in collectives)

    return DeviceActivity(
        device=device,
        span_s=span * 1e-12,
        busy_s=busy * 1e-12,
        idle_s={cause: ps * 1e-12 for cause, ps in idle.items()},
        kernel_count=len(kernels),
        mean_kernel_s=(sum(k.end_ps - k.start_ps for k in kernels) / len(kernels) * 1e-12
                       if kernels else 0.0),
        launch_delay_mean_s=sum(delays) / len(delays) if delays else 0.0,
        launch_delay_p95_s=percentile(delays, 95) if delays else 0.0,
        small_kernel_ratio=small / linked if linked else 0.0,
        copy_s={d: ps * 1e-12 / per_step for d, ps in copy_ps.items()},
        copy_bytes={d: b / per_step for d, b in copy_bytes.items()},
        collective_s=collective_ps * 1e-12 / per_step,
    )


def device_step_spans(events: GpuEvents, step_of: np.ndarray, steps: list[int]
                      ) -> dict[int, int]:
    """{step number: XProf's device step time in ps}.

    `step_of[e]` is the step group (index into `steps`, the groups' step numbers) of host
    event `e`, -1 for none. XProf 2.24.2 times a GPU step by device activity alone (its
    derived "Steps" line): a device event joins the step group of the host call that
    launched it (same `correlation_id`), an event with no group joins the group of the event
    before it, consecutive events of one group make one span, and a step's time is its
    longest span. Host time plays no part, which is why XProf puts a GPU step's host work in
    "All Others"; tfobs keeps the marker's time and reports this one beside it.
    """
    launches = events.launches()
    out: dict[int, int] = {}
    for plane in events.space.planes:
        if not is_gpu_plane(plane):
            continue
        acts = events.activities(plane)
        if not acts:
            continue
        # The group of each event's launch call, -1 where none; then each unlaunched event
        # takes the group of the last event before it that has one.
        launched = [_launch_of(launches, a.correlation_id) for a in acts]
        host = np.array([-1 if x is None else x.event for x in launched], np.int64)
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
        begin = np.array([a.start_ps for a in acts], np.int64)[keep]
        end = np.array([a.end_ps for a in acts], np.int64)[keep]
        # Runs of one group in time order; each run spans its earliest start to latest end.
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        spans = np.maximum.reduceat(end, first) - np.minimum.reduceat(begin, first)
        for k, ps in zip(g[first].tolist(), spans.tolist(), strict=True):
            out[k] = max(out.get(k, 0), ps)
    return {steps[g]: ps for g, ps in out.items() if 0 <= g < len(steps)}
