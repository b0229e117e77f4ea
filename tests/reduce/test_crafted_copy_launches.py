"""Kernels launched by host calls of many names: ROCm's copies run as kernels, told by their
launch call's name; each name is judged once and its kernels found by one look-up, not a
scan of every kernel per name."""

from __future__ import annotations

import time

import numpy as np

from tfobs.analysis.gpu_idle import (
    _DIRECTION_CODES,
    _KERNEL,
    _MEMCPY,
    GpuEvents,
    _as_copies_where_launched_as_copies,
    _direction,
)
from tfobs.xspace import schema
from tfobs.xspace.reader import parse
from tfobs.xspace.schema import HOST_PLANE


def _launched(names: list[str]) -> GpuEvents:
    """One host call per name, each with its own correlation id, launching one GPU kernel."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name=HOST_PLANE)
    host.stat_metadata[1].id = 1
    host.stat_metadata[1].name = "correlation_id"
    mids: dict[str, int] = {}
    line = host.lines.add(id=1, name="launcher", timestamp_ns=1000)
    for k, name in enumerate(names):
        mid = mids.setdefault(name, len(mids) + 1)
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
        e = line.events.add(metadata_id=mid, offset_ps=100 * k + 1, duration_ps=10)
        e.stats.add(metadata_id=1, int64_value=k + 1)
    gpu = x.planes.add(id=2, name="/device:GPU:0")
    gpu.event_metadata[1].id = 1
    gpu.event_metadata[1].name = "__amd_rocclr_copyBuffer"
    for sid, name in ((1, "kernel_details"), (2, "correlation_id")):
        gpu.stat_metadata[sid].id = sid
        gpu.stat_metadata[sid].name = name
    stream = gpu.lines.add(id=1, name="Stream #1", timestamp_ns=1000)
    for k in range(len(names)):
        e = stream.events.add(metadata_id=1, offset_ps=100 * k + 20, duration_ps=50)
        e.stats.add(metadata_id=1, str_value="regs:32 grid:1,1,1 block:1,1,1")
        e.stats.add(metadata_id=2, int64_value=k + 1)
    return GpuEvents(parse(x.SerializeToString()))


def test_many_copy_call_names_cost_one_look_up() -> None:
    # Each distinct copy call's name scanned every launched kernel: 160,000 hipMemcpyAsync
    # calls of their own names (a 17 MB capture) cost 30 s in tfobs analyze.
    n = 160_000
    events = _launched([f"hipMemcpyAsync_{k}" for k in range(n)])
    plane = events.space.planes[1]
    acts = events.activities(plane)
    assert int((acts.kind == _KERNEL).sum()) == n
    t0 = time.process_time()
    out = _as_copies_where_launched_as_copies(acts, events.launches())
    took = time.process_time() - t0
    assert bool((out.kind == _MEMCPY).all())
    assert took < 2.5, took  # 7 s before


def test_each_kernel_takes_its_own_call_names_kind() -> None:
    names = ["hipMemcpyHtoDAsync", "hipLaunchKernel", "hipMemcpyDtoHAsync", "cuMemcpyAsync",
             "hipMemcpyDtoDAsync", "hipLaunchKernel", "hipMemcpyHtoDAsync", "memcpy_peer"]
    events = _launched(names * 3)
    acts = events.activities(events.space.planes[1])
    out = _as_copies_where_launched_as_copies(acts, events.launches())
    for j in range(len(acts.kind)):
        name = events.launches().names[int(events.launches().mid[acts.launch[j]])]
        copy = "memcpy" in name.lower()
        assert out.kind[j] == (_MEMCPY if copy else acts.kind[j])
        want = _DIRECTION_CODES.index(_direction(name, "", "")) if copy else acts.direction[j]
        assert out.direction[j] == want
    assert np.array_equal(out.start, acts.start)
