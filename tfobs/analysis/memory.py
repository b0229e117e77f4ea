"""Per-allocator memory peak and fragmentation, as XProf's Memory Profile.

XProf (`xprof/convert/xplane_to_memory_profile.cc`) reads the `MemoryAllocation` /
`MemoryDeallocation` events of the host plane in line order. Each carries the allocator's
state after the operation; the peak is the event with the largest stack + heap (a later
event that reaches the same value wins), and the fragmentation, free bytes and capacity
(stack + heap + free) are that event's. The breakdown table lists the allocations still
live at the peak, largest first.
"""

from __future__ import annotations

from typing import Any

from tfobs.analysis.timeline import Timeline
from tfobs.summary import Allocation, MemoryStat

_STATS = (
    "index_on_host", "device_ordinal", "allocator_name", "bytes_reserved", "bytes_allocated",
    "bytes_available", "fragmentation", "requested_bytes", "allocation_bytes", "addr",
    "tf_op", "region_type", "data_type", "tensor_shapes",
)
_MAX_TRACKED = 1_000_000  # memory events kept per allocator for the breakdown table
_MAX_ALLOCATORS = 1_000


def _num(value: Any) -> int:
    if type(value) is int:
        return value if -(2**63) <= value < 2**63 else 0
    if isinstance(value, float) and abs(value) < 2**63:
        return int(value)
    return 0


_ID_KEYS = ("index_on_host", "device_ordinal", "allocator_name")
_FAST_KEYS = ("bytes_reserved", "bytes_allocated", "addr", "allocation_bytes")


class _Allocator:
    __slots__ = ("name", "peak", "peak_ref", "peak_time", "allocs", "deallocs", "snaps")

    def __init__(self, name: str) -> None:
        self.name = name
        self.peak = 0
        self.peak_ref: tuple[Any, int] | None = None
        self.peak_time = 0
        self.allocs = 0
        self.deallocs = 0
        # (offset ps, is allocation, address, allocation bytes, line, index)
        self.snaps: list[tuple[int, bool, int, int, Any, int]] = []


class _FastReader:
    """Reads the few stats every memory event needs by their position.

    TensorFlow writes the stats of all memory events in one order, so the positions seen
    on one event are checked (by stat id) and reused on the next; an event laid out
    differently is decoded in full. This keeps the per-event cost to a few attribute reads.
    """

    def __init__(self, host: Timeline) -> None:
        self.plane = host.plane
        self.names = host.plane.stat_names
        self.layout: list[tuple[int, int, str, str]] | None = None

    def _learn(self, stats: Any) -> list[tuple[int, int, str, str]]:
        layout = []
        for k, s in enumerate(stats):
            name = self.names.get(s.metadata_id, "")
            if name in _FAST_KEYS or name in _ID_KEYS:
                layout.append((k, s.metadata_id, s.WhichOneof("value") or "int64_value", name))
        return layout

    def read(self, ev: Any) -> tuple[str, int, int, int]:
        """(memory id, stack + heap bytes, address, allocation bytes)."""
        stats = ev.stats
        if self.layout is not None:
            out = self._fast(stats, self.layout)
            if out is not None:
                return out
        self.layout = self._learn(stats)
        return self._fast(stats, self.layout) or ("", 0, 0, 0)

    def _fast(self, stats: Any, layout: list[tuple[int, int, str, str]]) -> Any:
        n = len(stats)
        memory_id, in_use, addr, nbytes = "", 0, 0, 0
        for k, mid, field, name in layout:
            if k >= n:
                return None
            s = stats[k]
            if s.metadata_id != mid:
                return None
            v = getattr(s, field)
            if name in _ID_KEYS:
                memory_id = (self.names.get(v, "") if field == "ref_value"
                             else v if isinstance(v, str) else str(_num(v)))
            elif name == "addr":
                addr = _num(v)
            elif name == "allocation_bytes":
                nbytes = _num(v)
            else:
                in_use += _num(v)
        return memory_id, in_use, addr, nbytes


def reduce_memory(host: Timeline | None, top_n: int = 5) -> tuple[MemoryStat, ...]:
    if host is None:
        return ()
    alloc_mids = host.mids_where(lambda n: n == "MemoryAllocation")
    dealloc_mids = host.mids_where(lambda n: n == "MemoryDeallocation")
    mem_mids = alloc_mids | dealloc_mids
    if not mem_mids:
        return ()
    ids = host.stat_ids
    wanted = {ids[k]: k for k in _STATS if k in ids}
    reader = _FastReader(host)
    allocators: dict[str, _Allocator] = {}
    for ld in host.lines:
        mids, starts, events, order = ld.mids, ld.starts, ld.line.events, ld.order
        # XProf visits events in stored order: ties at the peak resolve the same way.
        if order is None:
            positions = [i for i, m in enumerate(mids) if m in mem_mids]
        else:
            inverse = sorted(range(len(order)), key=order.__getitem__)
            positions = [i for i in inverse if mids[i] in mem_mids]
        for i in positions:
            ev = events[order[i] if order is not None else i]
            name, in_use, addr, nbytes = reader.read(ev)
            a = allocators.get(name)
            if a is None:
                if len(allocators) >= _MAX_ALLOCATORS:
                    continue
                a = allocators[name] = _Allocator(name)
            is_alloc = mids[i] in alloc_mids
            if is_alloc:
                a.allocs += 1
            else:
                a.deallocs += 1
            offset = starts[i]
            if in_use >= a.peak:
                a.peak, a.peak_ref, a.peak_time = in_use, (ld, i), offset
            if len(a.snaps) < _MAX_TRACKED:
                a.snaps.append((offset, is_alloc, addr, nbytes, ld, i))
    return tuple(_summarise(host, a, top_n, wanted) for _, a in sorted(allocators.items()))


def _decode(host: Timeline, ld: Any, i: int, wanted: dict[int, str]) -> dict[str, Any]:
    st: dict[str, Any] = {}
    plane = host.plane
    for s in ld.event(i).stats:
        key = wanted.get(s.metadata_id)
        if key is not None and key not in _ID_KEYS:
            st[key] = plane.value(s)
    return st


def _summarise(host: Timeline, a: _Allocator, top_n: int, wanted: dict[int, str]) -> MemoryStat:
    ps = _decode(host, a.peak_ref[0], a.peak_ref[1], wanted) if a.peak_ref else {}
    stack, heap, free = (_num(ps.get(k)) for k in ("bytes_reserved", "bytes_allocated",
                                                    "bytes_available"))
    frag = ps.get("fragmentation", 0.0)
    frag = float(frag) if isinstance(frag, (int, float)) and 0 <= frag <= 1 else 0.0
    return MemoryStat(
        allocator=a.name,
        peak_bytes=stack + heap,
        capacity_bytes=stack + heap + free,
        fragmentation_ratio=frag,
        allocations=a.allocs,
        deallocations=a.deallocs,
        stack_bytes=stack,
        heap_bytes=heap,
        free_bytes=free,
        top_allocations=_live_at_peak(host, a, top_n, wanted),
    )


def _live_at_peak(
    host: Timeline, a: _Allocator, top_n: int, wanted: dict[int, str]
) -> tuple[Allocation, ...]:
    live: dict[int, tuple[int, Any, int]] = {}
    for offset, is_alloc, addr, nbytes, ld, i in sorted(a.snaps, key=lambda s: s[0]):
        if offset > a.peak_time:
            break
        if is_alloc:
            live[addr] = (nbytes, ld, i)
        else:
            live.pop(addr, None)
    rows = sorted(live.values(), key=lambda r: -r[0])[:top_n]
    out = []
    for nbytes, ld, i in rows:
        st = _decode(host, ld, i, wanted)
        out.append(Allocation(
            op_name=str(st.get("tf_op", "")),
            bytes=nbytes,
            shape=str(st.get("tensor_shapes", "")),
            data_type=str(st.get("data_type", "")),
            region_type=str(st.get("region_type", "")),
        ))
    return tuple(out)
