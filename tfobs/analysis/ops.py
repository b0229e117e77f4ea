"""Op time on host and device (TF Stats): count, total and self time per op.

Host ops are the host plane's events whose name XProf's `ParseTfOpFullname` reads as an op:
TF ops (`scope/name:Type`, types starting with `_` such as oneDNN's `_MklNativeConv2D`
included), tf.data iterator events (`Iterator::...`, type `Dataset`), JAX-style names (an XLA
compiled function `__inference_f_12:__inference_f_12`) and memcpy events. An op's self
time is its duration minus the ops nested directly inside it on the same thread, as XProf's
host op metrics. Device ops are
the events of accelerator planes (GPU stream kernels, TPU `XLA Ops`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tfobs.analysis.device_events import GPU_PLANE_PREFIX, PlaneTable
from tfobs.analysis.eventtypes import DATASET, JAX_OP_TYPE, derive_op_type, parse_tf_op
from tfobs.analysis.gpu_idle import merge
from tfobs.analysis.input_stages import stage_ops
from tfobs.analysis.timeline import (
    LineData,
    Timeline,
    clip_to_spans,
    id_array,
    member,
    outermost,
    span_bounds,
    summable,
    sums_fit,
)
from tfobs.errors import CaptureError
from tfobs.summary import Ops, OpStat
from tfobs.xspace.columns import wire
from tfobs.xspace.reader import PlaneView


@dataclass
class OpAgg:
    name: str
    op_type: str
    on_device: bool
    count: int = 0
    self_ps: int = 0
    total_ps: int = 0
    # A loader's input pipeline stage (`input_stages`): op_type is its category.
    stage: bool = False

    def stat(self) -> OpStat:
        return OpStat(self.name, self.op_type, self.on_device, self.count,
                      self.self_ps / 1e12, self.total_ps / 1e12)


def is_host_op(name: str) -> bool:
    return bool(parse_tf_op(name).category)


def host_op_metrics(host: Timeline | None) -> dict[str, OpAgg]:
    """{op name: aggregate} for the host plane (a loader's stages: one row per stage object,
    keyed `name` NUL `stage id`)."""
    out: dict[str, OpAgg] = {}
    if host is None:
        return out
    op_mids = id_array([mid for mid, n in host.names.items() if is_host_op(n)])
    stages = stage_ops(host)
    # Stage ops are keyed past every metadata id (`_add` reads them from `stage_rows`).
    first_key = max(host.names, default=0) + 1
    stage_rows = ({first_key + k: row for k, row in enumerate(
        zip(stages.names, stages.categories, stages.ids, strict=True))} if stages else {})
    closed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # per thread, close order
    for li, ld in enumerate(host.lines):
        is_op = member(ld.mid_arr, op_mids, ld.dense_top)
        keys = ld.mid_arr
        if stages is not None and li in stages.lines:
            # An event with a stage id is an op by its stage alone, never by its name.
            at, key = stages.lines[li]
            is_op = is_op.copy()
            is_op[stages.untaken[li]] = False
            is_op[at] = True
            keys = keys.copy()
            keys[at] = first_key + key
        pos = np.flatnonzero(is_op)
        if not pos.size:
            continue
        done, dur, self_ps = self_times(ld.start_arr[pos], ld.end_arr[pos])
        closed.append((keys[pos[done]], dur, self_ps))
    if not closed:
        return out
    # Every thread at once (names still in order of first appearance, thread by thread)
    # where the sums fit int64 together, as they do but in corrupt captures.
    mids, dur, self_ps = (np.concatenate(c) for c in zip(*closed, strict=True))
    if sums_fit(dur):
        _add(out, host.names, mids, dur, self_ps, stage_rows)
    else:
        for thread in closed:
            _add(out, host.names, *thread, stage_rows)
    return out


def self_times(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """One thread's events sorted by start: (their positions in the order they close, each
    one's duration and self time in that order; ps). Self time is the duration less the
    events nested directly inside (never below 0)."""
    # Compiled; else numpy where events nest cleanly; else (events that overlap without
    # nesting, no compiled walk) the stack walk, which numpy cannot do: each event's
    # parent depends on the stack the events before it left.
    found = op_nesting(starts, ends)
    if found is None:
        found = _nesting_laminar(starts, ends)
    done, child = found if found is not None else _nesting(starts.tolist(), ends.tolist())
    done = np.asarray(done, np.int64)
    dur = ends[done] - starts[done]
    if not sums_fit(dur):
        raise CaptureError("op times too large to add up; the capture is corrupt")
    own = dur - np.asarray(child, np.int64)[done]
    return done, dur, np.where(own > 0, own, 0)


def op_nesting(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The compiled stack walk of host_op_metrics (see _wire.c): (ops in close order,
    their direct children's time); None where `_wire` is missing or a sum overflows."""
    lib = wire()
    if lib is None:
        return None
    done, child = np.empty(starts.size, np.int64), np.empty(starts.size, np.int64)
    ok = lib.op_nesting(np.ascontiguousarray(starts, np.int64),
                        np.ascontiguousarray(ends, np.int64), done, child)
    return (done, child) if ok else None


def _nesting(starts: list[int], ends: list[int]) -> tuple[list[int], list[int]]:
    """(events in the order they close, ps of direct children per event), one thread.

    An op's children are the ops nested inside it; one that overlaps its would-be parent
    without nesting is treated as a sibling (the parent closes). A plain stack walk: the
    order in which ops close decides the order names first appear in, as XProf lists them.
    """
    child = [0] * len(starts)
    done: list[int] = []
    stack_end: list[int] = []
    stack_at: list[int] = []
    for j, (s, e) in enumerate(zip(starts, ends, strict=True)):
        while stack_end and stack_end[-1] < s:
            stack_end.pop()
            done.append(stack_at.pop())
        if stack_end:
            if e <= stack_end[-1]:
                child[stack_at[-1]] += e - s
            else:
                stack_end.pop()
                done.append(stack_at.pop())
        stack_end.append(e)
        stack_at.append(j)
    done.extend(stack_at)
    return done, child


def _nesting_laminar(starts: np.ndarray, ends: np.ndarray) -> tuple[Any, Any] | None:
    """`_nesting` without the loop, for ops that nest cleanly (the usual case), else None.

    When every op lies inside all ops still open at its start, an op's depth is the
    number of ops open at its start (those before it minus those ended before it starts),
    its parent is the last op before it one level up, and it closes (leaves the stack)
    at the first op starting after its end: in that batch innermost first, at the end
    of the thread outermost first. Any op that breaks this returns None.
    """
    n = starts.size
    if (ends < starts).any():
        return None
    at = np.arange(n)
    depth = at - np.searchsorted(np.sort(ends), starts, side="left")
    if (depth < 0).any():
        return None
    key = depth * (n + 1) + at  # by depth, then position
    ranked = np.sort(key)
    inner = np.flatnonzero(depth > 0)
    below = np.searchsorted(ranked, (depth[inner] - 1) * (n + 1) + inner) - 1
    parent_key = ranked[np.maximum(below, 0)]
    if ((below < 0) | (parent_key // (n + 1) != depth[inner] - 1)).any():
        return None
    parent = parent_key % (n + 1)
    if (ends[parent] < ends[inner]).any():  # overlaps its parent without nesting
        return None
    child = np.zeros(n, np.int64)
    np.add.at(child, parent, ends[inner] - starts[inner])
    closes = np.searchsorted(starts, ends, side="right")
    done = np.lexsort((np.where(closes < n, -at, at), closes))
    return done, child


def _add(out: dict[str, OpAgg], names: dict[int, str], mids: np.ndarray, dur: np.ndarray,
         self_ps: np.ndarray, stage_rows: dict[int, tuple[str, str, int]] | None = None
         ) -> None:
    """Add closed ops to `out`, per name in order of first appearance (their sums known
    to fit int64: `sums_fit`); `stage_rows`: key -> (name, category, stage id) of the
    loader's stages among `mids`."""
    unique, first, inverse = np.unique(mids, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    total = np.zeros(unique.size, np.int64)
    self_sum = np.zeros(unique.size, np.int64)
    np.add.at(total, inverse, dur)
    np.add.at(self_sum, inverse, self_ps)
    count = np.bincount(inverse, minlength=unique.size)
    order = np.argsort(first, kind="stable")
    # As Python ints in one conversion each (indexing numpy scalars one by one is slow).
    for mid, n, tot, own in zip(unique[order].tolist(), count[order].tolist(),
                                total[order].tolist(), self_sum[order].tolist(), strict=True):
        stage = stage_rows.get(mid) if stage_rows else None
        if stage is not None:  # XProf keys a stage's row by its stage id
            key = f"{stage[0]}\x00{stage[2]}"
            agg = out.get(key)
            if agg is None:
                agg = out[key] = OpAgg(stage[0], stage[1], False, stage=True)
        else:
            op = parse_tf_op(names[mid])
            agg = out.get(op.name)  # XProf keys its host op table by op name
            if agg is None:
                agg = out[op.name] = OpAgg(op.name, op.type, False)
        agg.count += n
        agg.total_ps += tot
        agg.self_ps += own


def device_op_metrics(
    devices: list[Timeline], hlo: dict[tuple[int, str], str] | None = None,
    table: Callable[[PlaneView], PlaneTable] | None = None,
) -> dict[str, OpAgg]:
    """Device rows of XProf's framework_op_stats (GPU or TPU planes), IDLE left out.

    `table`: a GPU plane's `PlaneTable` when the caller has one (`GpuEvents.table`)."""
    gpu = [tl for tl in devices if tl.plane.name.startswith(GPU_PLANE_PREFIX)]
    if gpu:
        return gpu_op_metrics(gpu, hlo or {}, table)
    return tpu_op_metrics(devices)


def _stored_positions(ld: LineData) -> list[int]:
    """The line's sorted positions in stored order (XProf walks events as stored)."""
    positions = list(range(len(ld)))
    if ld.order is not None:
        for i, k in enumerate(ld.order):
            positions[k] = i
    return positions


def _rows(device_ops: Any) -> dict[str, OpAgg]:
    """Framework rows from device ops [name, type, count, total ps, self ps], as XProf's
    `CreateTfMetricsDbFromDeviceOpMetricsDb`: times add up, occurrences are the largest
    count, the first type seen names the row."""
    out: dict[str, OpAgg] = {}
    for name, op_type, count, total, self_ps in device_ops:
        agg = out.get(name)
        if agg is None:
            agg = out[name] = OpAgg(name, op_type, True)
        agg.count = max(agg.count, count)
        agg.total_ps += total
        agg.self_ps += self_ps
    return out


# TPU lines whose events are ops, and the stats that place an op and name its op.
_TPU_OP_LINES = ("XLA Ops",)
_TPU_TIME_STATS = ("device_offset_ps", "device_duration_ps")
_TPU_MD_STATS = ("program_id", "symbol_id", "tf_op")
# A TPU device op: ((program id, symbol id), display name, framework op)
_TpuOp = tuple[tuple[int, int], str, str]


def tpu_op_metrics(devices: list[Timeline]) -> dict[str, OpAgg]:
    """XProf's device rows of framework_op_stats on TPU planes.

    As `ConvertTensorCoreDeviceTraceXPlaneToOpMetricsDb`: the `XLA Ops` events, timed by
    their `device_offset_ps`/`device_duration_ps` stats where present; an op's self time
    is its time minus that of the ops directly inside it; events whose metadata has no
    program or symbol id (or the root symbol, 0) are no op. Device ops are keyed by
    (program id, symbol id), named by their metadata's display name, and add up over
    planes; the framework op is the metadata's `tf_op` (none: the device op's name,
    type "Unknown").
    """
    device_ops: dict[tuple[int, int], list[Any]] = {}  # [name, type, count, total, self]
    for tl in devices:
        ids = {tl.stat_ids[k]: k for k in _TPU_TIME_STATS if k in tl.stat_ids}
        md_cache: dict[int, _TpuOp | None] = {}

        def key_of(mid: int, tl: Timeline = tl,
                   md_cache: dict[int, _TpuOp | None] = md_cache) -> _TpuOp | None:
            if mid not in md_cache:
                md = tl.plane.metadata_stats(mid)
                program, symbol = md.get("program_id"), md.get("symbol_id")
                if not isinstance(program, int) or not isinstance(symbol, int) or not symbol:
                    md_cache[mid] = None
                else:
                    name = tl.plane.event_display_names.get(mid) or tl.names.get(mid, "")
                    tf_op = md.get("tf_op")
                    md_cache[mid] = ((program, symbol), name,
                                     tf_op if isinstance(tf_op, str) else "")
            return md_cache[mid]

        for ld in tl.lines:
            if ld.name not in _TPU_OP_LINES or not len(ld):
                continue
            positions = _stored_positions(ld)
            stats = tl.stat_values_many(ld, positions, ids) if ids else [{}] * len(ld)
            starts, ends, mids = ld.starts, ld.ends, ld.mids
            stack: list[list[int]] = []  # [mid, begin, duration, children]

            def close(top: list[int]) -> None:
                found = key_of(top[0])
                if found is None:
                    return
                key, name, tf_op = found
                op = device_ops.get(key)
                if op is None:
                    op = device_ops[key] = [name, tf_op, 0, 0, 0]
                op[2] += 1
                op[3] += top[2]
                op[4] += top[2] - top[3]

            for i, st in zip(positions, stats, strict=True):
                begin = st.get("device_offset_ps")
                if not isinstance(begin, int):
                    begin = ld.ts_ns * 1000 + starts[i]  # absolute, as the stat is
                dur = st.get("device_duration_ps")
                if not isinstance(dur, int):
                    dur = ends[i] - starts[i]
                while stack and not (stack[-1][1] <= begin
                                     and begin + dur <= stack[-1][1] + stack[-1][2]):
                    close(stack.pop())
                if stack:
                    stack[-1][3] += dur
                stack.append([mids[i], begin, dur, 0])
            while stack:
                close(stack.pop())
    rows = []
    for name, tf_op, count, total, self_ps in device_ops.values():
        row_name, op_type = device_tf_op(tf_op) if tf_op else (name, "Unknown")
        rows.append((row_name, op_type, count, total, self_ps))
    return _rows(rows)


_GPU_STATS = ("hlo_op", "program_id", "tf_op")


def gpu_op_metrics(devices: list[Timeline], hlo: dict[tuple[int, str], str],
                   table: Callable[[PlaneView], PlaneTable] | None = None
                   ) -> dict[str, OpAgg]:
    """XProf's device rows of framework_op_stats on GPU planes.

    As `ConvertDeviceTraceXPlaneToOpMetricsDb` then `CreateTfMetricsDbFromDeviceOpMetricsDb`:
    an event of a real (not derived) line with an `hlo_op` whose instruction is in the
    capture's HLO protos is one run of the device op (program id, HLO name), whose
    framework op is the instruction's `op_name[:op_type]` (no name: the HLO name, type
    "Unknown"); an event with only a `tf_op` is the device op (0, op/kernel) of that op;
    other events are no op. Device ops add up over planes; a framework row sums their
    time and takes the largest of their occurrence counts. XProf's IDLE row (window
    minus op time) is not listed.
    """
    # key -> [row name, type, count, total ps, self ps]
    device_ops: dict[tuple[int, str], list[Any]] = {}
    for tl in devices:
        plane = tl.plane
        events = table(plane) if table else PlaneTable(plane, tl.base_ps)
        if not len(events):
            continue
        count = np.bincount(events.sig, minlength=len(events.signatures)).tolist()
        duration = summable(events.duration)
        time = np.zeros(len(events.signatures), duration.dtype)
        np.add.at(time, events.sig, duration)
        md_cache: dict[int, dict[str, Any]] = {}
        for j in events.first_seen().tolist():  # the first type seen names a row
            sig = events.signatures[j]
            md = md_cache.get(sig.mid)
            if md is None:
                md = md_cache[sig.mid] = {k: v for k, v in plane.metadata_stats(sig.mid).items()
                                          if k in _GPU_STATS}
            stats = {k: v for k, v in sig.stats.items() if k in _GPU_STATS}
            key = _device_op({**md, **stats}, tl.names.get(sig.mid, ""), hlo)
            if key is None:
                continue
            op = device_ops.get(key[0])
            if op is None:
                op = device_ops[key[0]] = [key[1], key[2], 0, 0, 0]
            ps = int(time[j])
            op[2] += count[j]
            op[3] += ps
            op[4] += ps
    return _rows(device_ops.values())


def _device_op(
    stats: dict[str, Any], event_name: str, hlo: dict[tuple[int, str], str]
) -> tuple[tuple[int, str], str, str] | None:
    """((program id, device op name), framework op name, type) of one device event."""
    hlo_op = stats.get("hlo_op")
    if isinstance(hlo_op, str) and hlo_op:
        hlo_name = hlo_op.split("::")[-1]
        try:
            program = int(stats.get("program_id", ""))
        except (TypeError, ValueError):
            program = -1
        provenance = hlo.get((program, hlo_name))
        if provenance is None:  # instruction not in the capture: XProf skips the event
            return None
        if not provenance:
            return (program, hlo_name), hlo_name, "Unknown"
        return ((program, hlo_name), *device_tf_op(provenance))
    tf_op = stats.get("tf_op")
    if isinstance(tf_op, str) and tf_op:
        name, op_type = device_tf_op(tf_op)
        return (0, f"{name}/{event_name}"), name, op_type
    return None


def device_tf_op(provenance: str) -> tuple[str, str]:
    """(name, type) of a device op's framework op, as XProf 2.24.2 shows them.

    `ParseTfOpFullname`, except that a name without a type (JAX's `jit(f)/dot_general`)
    takes its last name scope as the type (checked against XProf on the AMD captures).
    """
    op = parse_tf_op(provenance)
    if op.category:
        return op.name, op.type or "Unknown"
    if ":" not in provenance:
        kind = derive_op_type(provenance)
        if JAX_OP_TYPE.fullmatch(kind):  # JAX's `params['k2']` is of type `params`
            return provenance, kind.partition("[")[0]
        return provenance, kind if kind and "." not in kind else "Unknown"
    return provenance, "Unknown"


# TensorFlow's collective ops (tf.distribute's cross-worker all-reduce, all-gather,
# broadcast, all-to-all, reduce-scatter), V1 to V3.
_COLLECTIVE_TYPE = re.compile(r"^Collective(Reduce|Gather|Bcast\w*|AllToAll|ReduceScatter)"
                              r"(V\d)?$")


def host_collective_seconds(host: Timeline | None, spans: Sequence[tuple[int, int]]) -> float:
    """Seconds of the steps during which a collective op runs on the host (`spans`: the
    steps' (begin, end) ps on the host's time base; each op cut at the end of the step it
    began in; overlapping ops of several replicas counted once): what the steps wait in
    cross-replica all-reduces."""
    if host is None or not spans:
        return 0.0
    mids = id_array([m for m, n in host.names.items()
                     if _COLLECTIVE_TYPE.match(parse_tf_op(n).type)])
    if not mids.size:
        return 0.0
    steps = sorted(spans)
    begin, end = span_bounds(steps)
    parts: list[tuple[int, int]] = []
    for ld in host.lines:
        at = np.flatnonzero(member(ld.mid_arr, mids, ld.dense_top))
        if not at.size:
            continue
        lo, hi = clip_to_spans(ld.start_arr[at] + ld.start_ps, ld.end_arr[at] + ld.start_ps,
                               begin, end)
        parts.extend(zip(lo.tolist(), hi.tolist(), strict=True))
    return sum(b - a for a, b in merge(parts)) / 1e12


# The update an optimizer applies each step: ops under its name scope (Keras 3 "adam/...",
# "adam_w/..." for AdamW,
# tf_keras "Adam/...", "StatefulPartitionedCall/adam/..." inside fit's function; the scope is
# the optimizer's name, these its classes' defaults) and the fused update kernels tf_keras
# and tf.compat.v1 optimizers run (ResourceApplyAdam, ResourceSparseApplyAdagrad, ...).
OPTIMIZER_SCOPE = re.compile(
    r"(?:^|/)(?:adam|adam_?w|sgd|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lion|lamb|"
    r"adafactor|loss_scale_optimizer|gradientdescent|momentum)(?:_\d+)?/", re.IGNORECASE)
OPTIMIZER_OP_TYPES = ("ResourceApply", "ResourceSparseApply", "Apply")
# A sparse gradient (an Embedding's IndexedSlices) made dense for a dense update.
DENSIFY_OP = "UnsortedSegmentSum"


def optimizer_seconds(host_ops: dict[str, OpAgg], device_ops: dict[str, OpAgg]
                      ) -> tuple[float, float, tuple[str, ...]]:
    """(self seconds of the optimizers' update ops in the window, of it the sparse
    gradients made dense: `UnsortedSegmentSum` under an optimizer's scope, the scopes the
    update ran under as the ops name them ("adagrad", "Adam"; most time first, at most 3))."""
    update = densify = 0
    scopes: dict[str, int] = {}
    for table in (host_ops, device_ops):
        for name, a in table.items():
            # tf.distribute all-reduces the gradients inside the optimizer's scope: that is
            # communication (host_collectives_bound's), not the update.
            if (a.op_type == DATASET or _COLLECTIVE_TYPE.match(a.op_type)
                    or "AllReduce" in a.op_type):  # tf.data's stages are no update
                continue
            scope = OPTIMIZER_SCOPE.search(name)
            if scope or a.op_type.startswith(OPTIMIZER_OP_TYPES):
                update += a.self_ps
                densify += a.self_ps if a.op_type == DENSIFY_OP else 0
            if scope:
                key = re.sub(r"_\d+$", "", scope.group(0).strip("/"))
                scopes[key] = scopes.get(key, 0) + a.self_ps
    named = tuple(sorted(scopes, key=lambda k: (-scopes[k], k))[:3])
    return update / 1e12, densify / 1e12, named


# TensorFlow makes an IndexedSlices dense for an op that takes a tensor with an
# UnsortedSegmentSum named for that op's input (`IsFinite/x`, `clip_by_value/t`); one the
# job calls itself keeps the op's own name.
_OWN_SEGMENT_SUM = re.compile(r"UnsortedSegmentSum(?:_\d+)?")
# A gradient summed with the same tensor's dense gradients from its other uses (the tape's
# aggregation: `AddN/inputs_1`): a gather from an activation (a graph network's messages, a
# skip connection beside it) or a table also used whole (tied embeddings). The sum is dense
# whatever the IndexedSlices, so making them dense for it is the gather's own backward pass,
# not rows updated that the batch never touched.
_AGGREGATED = re.compile(r"(?:^|/)AddN(?:_\d+)?/inputs_\d+$")


def densified_seconds(host_ops: dict[str, OpAgg], device_ops: dict[str, OpAgg]
                      ) -> tuple[float, int, tuple[str, ...]]:
    """(self seconds in the window, runs, names: most time first, at most 3) of the sparse
    gradients made dense outside an optimizer's scope (which `optimizer_seconds` counts)."""
    found = [a for table in (host_ops, device_ops) for name, a in table.items()
             if a.op_type == DENSIFY_OP and not OPTIMIZER_SCOPE.search(name)
             and "/" in name and not _OWN_SEGMENT_SUM.fullmatch(name.rsplit("/", 1)[1])
             and not _AGGREGATED.search(name)]
    found.sort(key=lambda a: (-a.self_ps, a.name))
    return (sum(a.self_ps for a in found) / 1e12, sum(a.count for a in found),
            tuple(a.name for a in found[:3]))


# Keras 3 on TensorFlow runs a channels_first (NCHW) pooling layer on the host by
# transposing its input to NHWC and its output back (TensorFlow's CPU pooling takes NHWC
# only): `<pooling layer>/transpose`, `/transpose_1`, and their gradients'
# `.../transpose/transpose`.
_CHANNELS_FIRST_TRANSPOSE = re.compile(r"pooling[123]d(?:_\d+)*/transpose(?:_\d+)?(?:/transpose)?$")


def channels_first_transposes(host_ops: dict[str, OpAgg]
                              ) -> tuple[float, tuple[str, ...]]:
    """(self seconds in the window, names: most time first, at most 3) of the host
    transposes Keras runs around a channels_first model's pooling layers."""
    found = [a for name, a in host_ops.items()
             if "Transpose" in a.op_type and _CHANNELS_FIRST_TRANSPOSE.search(name)]
    found.sort(key=lambda a: (-a.self_ps, a.name))
    return sum(a.self_ps for a in found) / 1e12, tuple(a.name for a in found[:3])


# Keras 3's train step on TensorFlow runs in a function call of its train function
# (`StatefulPartitionedCall/...`) and names its forward pass by the model, its loss
# `compile_loss/`, its gradient `gradient_tape/` and its update by the optimizer; the loss
# tracker's and the compiled metrics' updates run at the call's top level, under no name
# scope (`StatefulPartitionedCall/Cumsum_3`). tf.data's functions' ops have bare names.
KERAS_LOSS_SCOPE = "compile_loss/"
_CALL_PREFIX = "StatefulPartitionedCall/"
# Ops at the top level that are the step's input, not its metrics.
_NOT_METRIC_TYPES = ("Iterator", "Optional", "Dataset")


def keras_top_level_ops(host_ops: dict[str, OpAgg], device_ops: dict[str, OpAgg]
                        ) -> tuple[float, tuple[str, ...]]:
    """(self seconds in the window, op types: most time first, at most 3) of the ops a
    Keras train step runs outside its model's, loss's, gradient's and optimizer's name
    scopes (its metrics' updates), where the window holds a Keras step (`compile_loss/`
    ops); (0, ()) otherwise."""
    tables = (host_ops, device_ops)
    if not any(KERAS_LOSS_SCOPE in name for table in tables for name in table):
        return 0.0, ()
    by_type: dict[str, int] = {}
    for table in tables:
        for name, a in table.items():
            bare = name
            while bare.startswith(_CALL_PREFIX):
                bare = bare[len(_CALL_PREFIX):]
            # The step's own ops run in its function call; a tf.data function's are bare.
            if (bare == name or "/" in bare or a.stage
                    or a.op_type.startswith(_NOT_METRIC_TYPES)):
                continue
            by_type[a.op_type] = by_type.get(a.op_type, 0) + a.self_ps
    top = sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return sum(by_type.values()) / 1e12, tuple(t for t, _ in top)


# XLA:CPU running a compiled program (a function under jit_compile=True): its ops are XLA's
# thunks, no TensorFlow op.
XLA_PROGRAM = "CpuExecutable::Execute"


def _is_xla_program(name: str) -> bool:
    return name.startswith(XLA_PROGRAM)


def xla_program_seconds(host: Timeline | None) -> float:
    """Window seconds of XLA:CPU's compiled programs: outermost `CpuExecutable::Execute*`
    events on every host thread."""
    if host is None:
        return 0.0
    mids = id_array(host.mids_where_once(_is_xla_program))
    if not mids.size:
        return 0.0
    total = 0
    for ld in host.lines:
        at = outermost(ld, mids)
        if at.size:
            total += int((ld.end_arr[at] - ld.start_arr[at]).sum())
    return total / 1e12


# tf.nn.sampled_softmax_loss, tf.nn.nce_loss and tf.random's candidate samplers.
CANDIDATE_SAMPLER_TYPES = frozenset({
    "LogUniformCandidateSampler", "UniformCandidateSampler", "FixedUnigramCandidateSampler",
    "LearnedUnigramCandidateSampler", "ThreadUnsafeUnigramCandidateSampler",
    "AllCandidateSampler"})

# tf.print in a graph: formatting the values (StringFormat) and writing them (PrintV2).
PRINT_OP_TYPES = frozenset({"PrintV2", "StringFormat", "Print"})


def reduce_ops(host_ops: dict[str, OpAgg], device_ops: dict[str, OpAgg], top_n: int) -> Ops:
    host_ps = sum(a.self_ps for a in host_ops.values())
    device_ps = sum(a.self_ps for a in device_ops.values())
    every = list(host_ops.values()) + list(device_ops.values())
    every.sort(key=lambda a: (-a.self_ps, a.name))
    total = host_ps + device_ps
    update_s, densify_s, scopes = optimizer_seconds(host_ops, device_ops)
    densified = densified_seconds(host_ops, device_ops)
    channels_first = channels_first_transposes(host_ops)
    top_level = keras_top_level_ops(host_ops, device_ops)
    return Ops(
        host_s=host_ps / 1e12,
        device_s=device_ps / 1e12,
        host_ratio=host_ps / total if total > 0 else 0.0,
        top=tuple(a.stat() for a in every[:top_n]),
        optimizer_s=update_s,
        optimizer_densify_s=densify_s,
        optimizer_scopes=scopes,
        candidate_samplers=tuple(sorted({a.op_type for a in every
                                         if a.op_type in CANDIDATE_SAMPLER_TYPES})),
        densified_s=densified[0],
        densified_count=densified[1],
        densified_ops=densified[2],
        channels_first_transpose_s=channels_first[0],
        channels_first_transpose_ops=channels_first[1],
        keras_top_level_s=top_level[0],
        keras_top_level_types=top_level[1],
        print_s=sum(a.self_ps for a in every if a.op_type in PRINT_OP_TYPES) / 1e12,
    )
