"""Memory events made to hurt the reduction (red team 3): the work of reading a capture's
memory events stays in proportion to their number, however many allocators they name."""

from __future__ import annotations

import time

from tfobs.analysis.memory import _MAX_ALLOCATORS
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.xspace import schema


def _steps_and_allocators(allocators: int, steps: int = 5) -> bytes:
    """`steps` marked steps and one MemoryAllocation event per allocator, each naming its
    own allocator inline (a 1.7 MB file at 60,000)."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name="/host:CPU")
    for mid, name in ((1, "train"), (2, "MemoryAllocation")):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    stats = ("_r", "step_num", "allocator_name", "addr", "allocation_bytes", "bytes_allocated")
    for sid, name in enumerate(stats, 1):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    span = 1_000_000
    marks = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(steps):
        e = marks.events.add(metadata_id=1, offset_ps=i * span, duration_ps=span - 10)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
    mem = host.lines.add(id=2, name="tf_Compute", timestamp_ns=1000)
    for j in range(allocators):
        e = mem.events.add(metadata_id=2, offset_ps=j * steps * span // allocators)
        e.stats.add(metadata_id=3, str_value=f"alloc_{j}")
        e.stats.add(metadata_id=4, int64_value=4096 * (j + 1))
        e.stats.add(metadata_id=5, int64_value=4096)
        e.stats.add(metadata_id=6, int64_value=4096)
    return x.SerializeToString()


def test_many_allocator_names_cost_one_lookup_each() -> None:
    # Each allocator's name was found by a search of the list of names seen so far: 40,000
    # names (a 4.8 MB file) took 9 s, 80,000 50 s. A dict makes it one lookup a name.
    data = _steps_and_allocators(60_000)
    t0 = time.process_time()
    s = reduce_xspace(data)
    took = time.process_time() - t0
    assert len(s.memory) == _MAX_ALLOCATORS
    assert s.memory[0].allocator == "alloc_0"
    assert took < 8.0, took
