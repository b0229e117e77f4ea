"""Many GPU planes beside a host of many input waits: the waits' bounds are made once for
the window, not once per GPU plane."""

from __future__ import annotations

import time

import numpy as np

from tfobs.analysis.gpu_idle import covered_ps, merge
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.analysis.timeline import span_bounds
from tfobs.xspace import schema


def _capture(planes: int, waits: int) -> bytes:
    """10 marked steps holding `waits` IteratorGetNext events in all (each an input wait of
    its own), and `planes` GPU planes of two kernels each."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name="/host:CPU")
    for mid, name in ((1, "train"), (2, "IteratorGetNext")):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    for sid, name in ((1, "_r"), (2, "step_num")):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    steps, span = 10, 100 * waits + 1000
    line = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(steps):
        e = line.events.add(metadata_id=1, offset_ps=i * span, duration_ps=span - 10)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
        for j in range(waits // steps):
            line.events.add(metadata_id=2, offset_ps=i * span + 100 * j + 1, duration_ps=50)
    for k in range(planes):
        gpu = x.planes.add(id=10 + k, name=f"/device:GPU:{k}")
        gpu.event_metadata[1].id = 1
        gpu.event_metadata[1].name = "volta_sgemm_128x64_nn"
        gpu.stat_metadata[1].id = 1
        gpu.stat_metadata[1].name = "kernel_details"
        stream = gpu.lines.add(id=1, name="Stream #1", timestamp_ns=1000)
        for at in (10, 5 * span):
            e = stream.events.add(metadata_id=1, offset_ps=at, duration_ps=5000)
            e.stats.add(metadata_id=1, str_value="regs:32 grid:1,1,1 block:1,1,1")
    return x.SerializeToString()


def test_many_gpu_planes_read_the_input_waits_once() -> None:
    # Each GPU plane made the host's input waits into arrays anew: 800 planes beside
    # 100,000 waits (a 1.2 MB capture) cost 20 s, 4,096 planes about 100 s.
    data = _capture(1_000, 60_000)
    t0 = time.process_time()
    s = reduce_xspace(data)
    took = time.process_time() - t0
    assert len(s.devices) == 1_000 and s.breakdown_s["input"] > 0
    first = s.devices[0]
    assert all(d.idle_s == first.idle_s and d.busy_s == first.busy_s for d in s.devices)
    assert took < 3.0, took  # 8 s before


def test_the_waits_cover_what_they_covered() -> None:
    from tfobs.analysis.gpu_idle import _Covered

    rng = np.random.default_rng(7)
    for _ in range(200):
        begin = rng.integers(0, 10_000, rng.integers(0, 40))
        spans = merge(list(zip(begin.tolist(), (begin + rng.integers(0, 500, begin.size)).tolist(),
                               strict=True)))
        lo = rng.integers(-100, 11_000, 30)
        hi = lo + rng.integers(0, 3_000, 30)
        want = (covered_ps(*span_bounds(spans), lo, hi) if spans
                else np.zeros(lo.size, np.int64))
        assert np.array_equal(_Covered(spans)(lo, hi), want)
