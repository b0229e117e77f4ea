"""Per-allocator memory peak and fragmentation, as XProf's Memory Profile.

XProf (`xprof/convert/xplane_to_memory_profile.cc`) reads the `MemoryAllocation` /
`MemoryDeallocation` events of the host plane in line order. Each carries the allocator's
state after the operation; the peak is the event with the largest stack + heap (a later
event that reaches the same value wins), and the fragmentation, free bytes and capacity
(stack + heap + free) are that event's. The breakdown table is XProf's: see
`_active_at_peak`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

from tfobs.analysis.timeline import Timeline, int_stats_at, member, summable, unique
from tfobs.summary import Allocation, MemoryStat
from tfobs.xspace.columns import KIND_REF, KIND_STR

_STATS = (
    "index_on_host", "device_ordinal", "allocator_name", "bytes_reserved", "bytes_allocated",
    "bytes_available", "fragmentation", "requested_bytes", "allocation_bytes", "addr",
    "tf_op", "region_type", "data_type", "shape", "tensor_shapes",
)
_MAX_TRACKED = 1_000_000  # memory events kept per allocator for the breakdown table
_MAX_ALLOCATORS = 1_000
# No allocator holds 2 EiB: a larger byte count is corrupt and clipped here, so the sum of
# an event's counts stays an exact int64 (no object arrays).
_MAX_BYTES = 2**61


def _num(value: Any) -> int:
    if type(value) is int:
        return value if -(2**63) <= value < 2**63 else 0
    if isinstance(value, float) and abs(value) < 2**63:
        return int(value)
    return 0


_ID_KEYS = ("index_on_host", "device_ordinal", "allocator_name")
_IN_USE_KEYS = ("bytes_reserved", "bytes_allocated")
_FAST_KEYS = (*_IN_USE_KEYS, "addr", "allocation_bytes")


class _Events:
    """Per memory event, in XProf's visiting order: allocator, stack + heap, address, size."""

    def __init__(self, host: Timeline, events: np.ndarray) -> None:
        cols = host.columns
        self.names = host.plane.stat_names
        n = events.size
        self.in_use = np.zeros(n, np.int64)
        self.addr = np.zeros(n, np.int64)
        self.nbytes = np.zeros(n, np.int64)
        # Allocator per event, as an index into `texts` (text "" for none).
        self.allocator = np.zeros(n, np.int64)
        self.texts: list[str] = [""]
        # text -> its index in `texts`: a crafted capture may name thousands of allocators,
        # and a list search per name made that quadratic (80,000 names: 50 s).
        self._codes: dict[str, int] = {"": 0}
        # TensorFlow writes every memory event's stats in one order: learn the positions
        # of the wanted stats from the first event, check each event's stat ids there,
        # and read those values in bulk; events laid out otherwise are decoded in full.
        layout = self._layout(cols.event(int(events[0])))
        ok = np.ones(n, bool)
        reserved: list[np.ndarray] = []
        id_batch = None
        batches = cols.nth_stats(events, [k for k, _, _ in layout])
        for (_, mid, name), (batch, present) in zip(layout, batches, strict=True):
            ok &= present & (batch.mid == mid)
            if name in _ID_KEYS:
                id_batch = batch
            elif name == "addr":
                self.addr = batch.numbers()
            elif name == "allocation_bytes":
                self.nbytes = batch.numbers()
            else:
                reserved.append(batch.numbers())
        for r in reserved:
            self.in_use += np.clip(r, -_MAX_BYTES, _MAX_BYTES)
        if id_batch is not None:
            self._allocator_names(id_batch)
        bad = np.flatnonzero(~ok)
        if bad.size:
            self._decode_slow(cols.stats_of(events[bad]), events, bad)

    def _layout(self, event: Any) -> list[tuple[int, int, str]]:
        layout = []
        for k, s in enumerate(event.stats):
            name = self.names.get(s.metadata_id, "")
            if name in _FAST_KEYS or name in _ID_KEYS:
                layout.append((k, s.metadata_id, name))
        return layout

    def _id_text(self, kind: int, value: Any) -> str:
        if kind == KIND_REF:
            return self.names.get(value, "")
        return value if isinstance(value, str) else str(_num(value))

    def _text_code(self, text: str) -> int:
        code = self._codes.get(text)
        if code is None:
            code = self._codes[text] = len(self.texts)
            self.texts.append(text)
        return code

    def _allocator_names(self, batch: Any) -> None:
        # One string per distinct (kind, value): a window has a handful of allocators.
        for kind in unique(batch.kind).tolist():
            of_kind = np.flatnonzero(batch.kind == kind)
            if kind == KIND_STR:  # rare: names written inline, one by one
                for j in of_kind.tolist():
                    self.allocator[j] = self._text_code(self._id_text(kind, batch.python(j)))
                continue
            _, first, inverse = np.unique(batch.value[of_kind], return_index=True,
                                          return_inverse=True)
            codes = np.array([self._text_code(self._id_text(kind, batch.python(int(of_kind[j]))))
                              for j in first.tolist()], np.int64)
            self.allocator[of_kind] = codes[inverse.ravel()]

    def _decode_slow(self, batch: Any, events: np.ndarray, bad: np.ndarray) -> None:
        slot = dict(zip(events[bad].tolist(), bad.tolist(), strict=True))
        seen: set[int] = set()
        for r, (ev, mid) in enumerate(zip(batch.event.tolist(), batch.mid.tolist(),
                                          strict=True)):
            j = slot[ev]
            if j not in seen:
                seen.add(j)
                self.allocator[j], self.in_use[j], self.addr[j], self.nbytes[j] = 0, 0, 0, 0
            name = self.names.get(mid, "")
            if name in _ID_KEYS:
                self.allocator[j] = self._text_code(
                    self._id_text(int(batch.kind[r]), batch.python(r)))
            elif name in _FAST_KEYS:
                value = _num(batch.python(r)) if batch.kind[r] != KIND_STR else 0
                if name == "addr":
                    self.addr[j] = value
                elif name == "allocation_bytes":
                    self.nbytes[j] = value
                else:
                    self.in_use[j] += max(-_MAX_BYTES, min(_MAX_BYTES, value))
        for j in set(bad.tolist()) - seen:  # no stats at all
            self.allocator[j], self.in_use[j], self.addr[j], self.nbytes[j] = 0, 0, 0, 0


def reduce_memory(
    host: Timeline | None, top_n: int = 5, step_of: np.ndarray | None = None,
) -> tuple[MemoryStat, ...]:
    """Per allocator: the peak, its fragmentation and XProf's table of allocations at it.

    `step_of` gives each host event's step (plane-wide index -> group number, -1 for
    events in no step), as XProf's event grouping assigns them; None when XProf would
    group nothing (no step found).
    """
    if host is None:
        return ()
    alloc_mids = host.mids_named("MemoryAllocation")
    dealloc_mids = host.mids_named("MemoryDeallocation")
    mem_mids = alloc_mids | dealloc_mids
    if not mem_mids:
        return ()
    cols = host.columns
    # Plane-wide event order is line order, then stored order: the order XProf visits
    # them in, so ties at the peak resolve the same way.
    events = np.flatnonzero(member(cols.mid, np.fromiter(mem_mids, np.int64)))
    if not events.size:
        return ()
    mem = _Events(host, events)
    is_alloc = member(cols.mid[events], np.fromiter(alloc_mids, np.int64))
    types = _Types(host, events, is_alloc)
    offsets = cols.offset[events]
    steps = step_of[events] if step_of is not None else np.full(events.size, -1, np.int64)
    # Allocators in order of first appearance; past the cap, an allocator's events are
    # dropped whole.
    codes, first, inverse = np.unique(mem.allocator, return_index=True, return_inverse=True)
    kept = np.sort(first)[:_MAX_ALLOCATORS]
    order = {mem.texts[codes[j]]: j for j in np.flatnonzero(np.isin(first, kept)).tolist()}
    slot = inverse.ravel()
    ids = host.stat_ids
    wanted = {ids[k]: k for k in _STATS if k in ids}
    out = []
    for name in sorted(order):
        mine = np.flatnonzero(slot == order[name])
        allocs = int(is_alloc[mine].sum())
        in_use = mem.in_use[mine]
        peak_event = None
        top = in_use.max()
        if top >= 0:
            j = mine[np.flatnonzero(in_use == top)[-1]]  # the last event at the peak wins
            peak_event = int(events[j])
        ps = _decode(host, peak_event, wanted) if peak_event is not None else {}
        table = _active_at_peak(host, mine[:_MAX_TRACKED], is_alloc, mem, offsets, steps,
                                events, top, peak_event, _num(ps.get("bytes_allocated")),
                                _num(ps.get("bytes_reserved")), wanted, top_n)
        by_type, f64_ops = types.of(mine, mem.nbytes)
        out.append(dataclasses.replace(
            _summarise(name, allocs, mine.size - allocs, ps, table),
            allocated_bytes=sum(by_type.values()), allocated_bytes_by_type=by_type,
            float64_top_ops=f64_ops))
    return tuple(out)


FLOAT64 = 2  # DT_DOUBLE
_FLOAT64_TOP = 3  # ops named per allocator


class _Types:
    """Each allocation's `data_type`, read only where the capture has the stat: one
    compiled walk over the allocation events (no names decoded); the `tf_op` of those of
    float64 tensors alone, where there are some."""

    def __init__(self, host: Timeline, events: np.ndarray, is_alloc: np.ndarray) -> None:
        self.host, self.events, self.is_alloc = host, events, is_alloc
        self.dtype = np.zeros(events.size, np.int64)
        dt_mid = host.stat_ids.get("data_type")
        allocs = np.flatnonzero(is_alloc)
        if dt_mid is None or not allocs.size:
            return
        found = int_stats_at(host, events[allocs], {dt_mid: "data_type"}, raw=True)
        if "data_type" in found:  # 0 (INVALID) where the stat is not an integer
            value, has = found["data_type"]
            self.dtype[allocs] = np.where(has, value.view(np.int64), 0)

    def of(self, mine: np.ndarray, nbytes: np.ndarray) -> tuple[dict[str, int], tuple[str, ...]]:
        """(allocated bytes per data type name, the ops allocating the most float64 bytes)
        over the allocations among `mine`."""
        mine = mine[self.is_alloc[mine]]
        sizes = np.clip(nbytes[mine], 0, _MAX_BYTES)
        dtype = self.dtype[mine]
        known = (dtype >= 0) & (dtype < 256)  # TF's enum, references (+100) included
        sums = np.bincount(np.where(known, dtype, 0), weights=sizes, minlength=256)
        by_type: dict[str, int] = {}
        for k in np.flatnonzero(sums > 0).tolist():
            name = data_type_name(k)
            by_type[name] = by_type.get(name, 0) + int(sums[k])
        f64 = mine[dtype == FLOAT64]
        op_mid = self.host.stat_ids.get("tf_op")
        if not f64.size or op_mid is None:
            return by_type, ()
        # The float64 allocations' op names: refs grouped by id, one name per op.
        batch, slot = self.host.columns.stats_by_slot(
            self.events[f64], np.array([op_mid], np.int64), by_event=False)
        per_op: dict[str, int] = {}
        rows = np.flatnonzero(batch.mid == op_mid)
        refs = rows[batch.kind[rows] == KIND_REF]
        ref_bytes = sizes[np.searchsorted(mine, f64[slot[refs]])]
        ids, inverse = np.unique(batch.value[refs], return_inverse=True)
        for key, b in zip(ids.tolist(), np.bincount(inverse.ravel(), weights=ref_bytes,
                                                    minlength=ids.size).tolist(), strict=True):
            name = self.host.plane.stat_names.get(int(key), "")
            per_op[name] = per_op.get(name, 0) + int(b)
        for r in rows[batch.kind[rows] != KIND_REF].tolist():  # written inline (rare)
            name = str(batch.python(r))
            per_op[name] = per_op.get(name, 0) + int(max(0, nbytes[f64[slot[r]]]))
        top = sorted(((b, n) for n, b in per_op.items() if n), key=lambda t: (-t[0], t[1]))
        return by_type, tuple(n for _, n in top[:_FLOAT64_TOP])


def replay(alloc: np.ndarray, addr: np.ndarray, nbytes: np.ndarray, heap: int
           ) -> tuple[np.ndarray, int]:
    """(positions of the allocations still active at the end, `heap` less their bytes)
    of a sequence of allocations and frees in time order.

    As XProf replays them: an allocation makes its address active (whatever was there),
    a free of an active address ends it; each allocation's bytes are taken off `heap`
    and each such free's bytes given back. Per address at once, not event by event.
    """
    n = alloc.size
    by_addr = np.argsort(addr, kind="stable")  # each address's events in time order
    alloc_a, addr_a = alloc[by_addr], addr[by_addr]
    after_alloc = np.zeros(n, bool)  # the address's previous event allocated
    after_alloc[1:] = (addr_a[1:] == addr_a[:-1]) & alloc_a[:-1]
    last = np.ones(n, bool)  # the address's last event
    last[:-1] = addr_a[1:] != addr_a[:-1]
    freed = ~alloc_a & after_alloc
    left = heap - int(summable(nbytes[alloc]).sum()) + int(summable(nbytes[by_addr][freed]).sum())
    return np.sort(by_addr[last & alloc_a]), left


def _xprof_steps(steps: np.ndarray) -> np.ndarray:
    """XProf's `UpdateStepId` over events in time order: an event in no step takes the
    step after the last one seen (0 before any)."""
    seen = np.where(steps >= 0, np.arange(steps.size), -1)
    last = np.maximum.accumulate(seen) if steps.size else seen
    carried = np.where(last >= 0, steps[np.maximum(last, 0)] + 1, 0)
    return np.where(steps >= 0, steps, carried)


def _active_at_peak(
    host: Timeline, mine: np.ndarray, is_alloc: np.ndarray, mem: _Events,
    offsets: np.ndarray, steps: np.ndarray, events: np.ndarray, top: Any,
    peak_event: int | None, peak_heap: int, peak_stack: int, wanted: dict[int, str],
    top_n: int,
) -> list[Allocation]:
    """XProf's memory breakdown table (`ProcessActiveAllocations`).

    The allocations made in the peak's step, up to the peak's time, and not freed by then;
    plus one "unused preallocated device memory" row for the heap bytes at the peak that
    those do not account for. The peak's time is that of the last event at the peak in
    line order, its step that of the last one in time order (XProf does both); largest
    first, ties by requested bytes, then op name, region, type and shape; identical rows
    shown once with their number (`occurrences`).
    """
    if peak_event is None or top_n <= 0 or not mine.size:
        return []
    seq = mine[np.argsort(offsets[mine], kind="stable")]
    step = _xprof_steps(steps[seq])
    at_peak = np.flatnonzero(mem.in_use[seq] == top)
    peak_step = int(step[at_peak[-1]]) if at_peak.size else 0
    peak_time = int(offsets[np.flatnonzero(events == peak_event)[0]])
    upto = np.searchsorted(offsets[seq], peak_time, side="right")
    picked = seq[:upto][step[:upto] == peak_step]
    held, unmapped = replay(is_alloc[picked], mem.addr[picked], mem.nbytes[picked], peak_heap)
    active = picked[held]
    special = [b for b in (unmapped, peak_stack) if b > 0]
    sizes = unique(np.r_[mem.nbytes[active], np.array(special, np.int64)])
    floor = sizes[-top_n] if sizes.size > top_n else None
    rows = []
    for j in active.tolist():
        if floor is not None and int(mem.nbytes[j]) < floor:
            continue  # cannot make the first top_n rows: not decoded
        st = _decode(host, int(events[j]), wanted)
        rows.append(Allocation(
            op_name=str(st.get("tf_op", "")),
            bytes=int(mem.nbytes[j]),
            shape=str(st.get("shape", st.get("tensor_shapes", ""))),
            data_type=data_type_name(st.get("data_type")),
            region_type=str(st.get("region_type", "")),
            requested_bytes=_num(st.get("requested_bytes")),
        ))
    if unmapped > 0:
        rows.append(Allocation(UNUSED_PREALLOCATED, unmapped, "unknown", "INVALID",
                               "persist/dynamic", unmapped))
    if peak_stack > 0:  # TPU stack reservation
        rows.append(Allocation("stack", peak_stack, "unknown", "INVALID", "stack", peak_stack))
    rows.sort(key=lambda a: (-a.bytes, -a.requested_bytes, a.op_name, a.region_type,
                             a.data_type, a.shape))
    merged: list[Allocation] = []
    for row in rows:  # XProf shows identical allocations once, with their count
        if merged and dataclasses.replace(merged[-1], occurrences=1) == row:
            merged[-1] = dataclasses.replace(merged[-1],
                                             occurrences=merged[-1].occurrences + 1)
        else:
            merged.append(row)
    return merged[:top_n]


UNUSED_PREALLOCATED = "unused preallocated device memory"
# A GPU's own memory ("GPU_0_bfc"); host allocators may name GPUs too
# ("bfc_cpu_allocator_for_gpu", "gpu_host_bfc": pinned host memory).
_DEVICE_ALLOCATOR = re.compile(r"GPU_\d+_")


def device_allocator(name: str) -> bool:
    """Whether an allocator is a GPU's own memory, not the host's."""
    return _DEVICE_ALLOCATOR.match(name) is not None

# TensorFlow's DataType enum (types.proto) -> `DataTypeString`, as XProf shows it.
_DATA_TYPES = (
    "INVALID", "float", "double", "int32", "uint8", "int16", "int8", "string", "complex64",
    "int64", "bool", "qint8", "quint8", "qint32", "bfloat16", "qint16", "quint16", "uint16",
    "complex128", "half", "resource", "variant", "uint32", "uint64", "float8_e5m2",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2fnuz", "int4",
    "uint4", "int2", "uint2",
)


def data_type_name(value: Any) -> str:
    """The name of a `data_type` stat (an enum number; reference types end in `_ref`)."""
    if value is None:
        return ""
    if not isinstance(value, int) or isinstance(value, bool):
        return str(value)
    base, ref = (value - 100, "_ref") if value > 100 else (value, "")
    if 0 < base < len(_DATA_TYPES):
        return _DATA_TYPES[base] + ref
    return "INVALID" if value == 0 else f"unknown dtype {value}"


def _decode(host: Timeline, event: int, wanted: dict[int, str]) -> dict[str, Any]:
    st: dict[str, Any] = {}
    plane = host.plane
    for s in host.columns.event(event).stats:
        key = wanted.get(s.metadata_id)
        if key is not None and key not in _ID_KEYS:
            st[key] = plane.value(s)
    return st


def _summarise(
    name: str, allocs: int, deallocs: int, ps: dict[str, Any], rows: list[Allocation],
) -> MemoryStat:
    stack, heap, free = (_num(ps.get(k)) for k in ("bytes_reserved", "bytes_allocated",
                                                    "bytes_available"))
    frag = ps.get("fragmentation", 0.0)
    known = not (isinstance(frag, float) and math.isnan(frag))  # TF writes NaN: unknown
    frag = float(frag) if isinstance(frag, (int, float)) and 0 <= frag <= 1 else (
        math.nan if not known else 0.0)
    return MemoryStat(
        allocator=name,
        peak_bytes=stack + heap,
        capacity_bytes=stack + heap + free,
        fragmentation_ratio=frag,
        allocations=allocs,
        deallocations=deallocs,
        stack_bytes=stack,
        heap_bytes=heap,
        free_bytes=free,
        top_allocations=tuple(rows),
        fragmentation_known=known,
    )
