"""Many GPU stream lines beside many steps: each line searches the steps its events can
reach, not every step."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import numpy as np

from tfobs.analysis.pipeline import (
    MIN_PAIRS,
    StreamHits,
    _kernel_candidates,
    _stream_hits,
    reduce_xspace,
)
from tfobs.analysis.timeline import LineData, Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse


def _streams(spans: list[list[tuple[int, int]]]) -> list[Timeline]:
    """One GPU plane, a stream line of the (offset, duration) events of each of `spans`."""
    x = schema.XSpace()
    gpu = x.planes.add(id=2, name="/device:GPU:0")
    gpu.event_metadata[1].id = 1
    gpu.event_metadata[1].name = "volta_sgemm_128x64_nn"
    for k, events in enumerate(spans):
        line = gpu.lines.add(id=1 + k, name=f"Stream #{k}", timestamp_ns=0)
        for at, dur in sorted(events):
            line.events.add(metadata_id=1, offset_ps=at, duration_ps=dur)
    return [Timeline(parse(x.SerializeToString()).planes[0], 0)]


def _by_line(hits: StreamHits) -> dict[tuple[int, LineData], list[int]]:
    """{(step, line): positions} of `hits`."""
    lines = {id(ld): ld for _, ld in hits.lines}
    return {(gi, lines[key]): at for (gi, key), at in hits.overlaps().items()}


def _steps(spans: list[tuple[int, int]]) -> list[SimpleNamespace]:
    return [SimpleNamespace(begin_ps=b, end_ps=e) for b, e in spans]


def test_many_streams_beside_many_steps_cost_what_they_reach() -> None:
    # Every stream line searched every step: 40,000 one-kernel streams beside 40,000 steps
    # (a 4 MB capture) cost 17 s in tfobs analyze; 60,000 here took 11 s.
    n = 60_000
    devices = _streams([[(1000 * k + 5, 100)] for k in range(n)])
    steps = _steps([(1000 * i, 1000 * i + 990) for i in range(n)])
    t0 = time.process_time()
    hits = _stream_hits(steps, devices)
    took = time.process_time() - t0
    assert len(hits.lines) == n and hits.bounds.tolist() == list(range(n + 1))
    assert hits.step.tolist() == list(range(n)) and not hits.pos.any()
    assert took < 3.0, took


def test_the_steps_found_are_every_step_an_event_overlaps() -> None:
    rng = random.Random(3)
    for _ in range(150):
        lines = [[(rng.randint(0, 50_000), rng.choice([0, rng.randint(0, 800),
                                                       rng.randint(0, 30_000)]))
                  for _ in range(rng.randint(1, 12))] for _ in range(rng.randint(1, 5))]
        spans = []
        for _ in range(rng.randint(1, 25)):  # unsorted, overlapping, nested steps
            b = rng.randint(-1_000, 52_000)
            spans.append((b, b + rng.randint(0, rng.choice([500, 20_000]))))
        devices = _streams(lines)
        got = {(id(ld), gi): at for (gi, ld), at in _by_line(_stream_hits(_steps(spans),
                                                                       devices)).items()}
        want = {}
        for ld in devices[0].lines:
            start, end = ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps
            for gi, (b, e) in enumerate(spans):
                inside = np.flatnonzero((start < e) & (end > b)).tolist()
                if inside:
                    want[(id(ld), gi)] = inside
        assert got == want


def _named_streams(spans: list[list[tuple[int, int, int]]]) -> list[Timeline]:
    """One GPU plane, a stream line of the (offset, duration, name id) events of each of
    `spans`; names 1-3 share durations, and name 4 is left without metadata."""
    x = schema.XSpace()
    gpu = x.planes.add(id=2, name="/device:GPU:0")
    for mid, name in ((1, "b_kernel"), (2, "a_kernel"), (3, "c_kernel")):
        gpu.event_metadata[mid].id = mid
        gpu.event_metadata[mid].name = name
    for k, events in enumerate(spans):
        line = gpu.lines.add(id=1 + k, name=f"Stream #{k}", timestamp_ns=0)
        for at, dur, mid in sorted(events):
            line.events.add(metadata_id=mid, offset_ps=at, duration_ps=dur)
    return [Timeline(parse(x.SerializeToString()).planes[0], 0)]


def test_each_steps_kernel_candidates_rank_as_its_own_top_events() -> None:
    # All steps' kernels are ranked at once; each step's top n must be what ranking its own
    # overlapping kernels gives (longest, then by name, then line and position order).
    rng = random.Random(11)
    for _ in range(120):
        lines = [[(rng.randint(0, 20_000), rng.choice([100, 200, rng.randint(0, 3_000)]),
                   rng.randint(1, 4)) for _ in range(rng.randint(1, 10))]
                 for _ in range(rng.randint(1, 4))]
        spans = []
        for _ in range(rng.randint(1, 12)):
            b = rng.randint(0, 20_000)
            spans.append((b, b + rng.randint(0, 6_000)))
        devices = _named_streams(lines)
        tl = devices[0]
        top_n = rng.randint(1, 4)
        got = _kernel_candidates(_stream_hits(_steps(spans), devices), len(spans), top_n)
        for gi, (b, e) in enumerate(spans):
            want = []
            for ld in tl.lines:
                for at in range(len(ld)):
                    if ld.starts[at] + ld.start_ps < e and ld.ends[at] + ld.start_ps > b:
                        want.append((ld.ends[at] - ld.starts[at],
                                     tl.names.get(ld.mids[at], ""), "kernel",
                                     (ld.start_ps + ld.starts[at]) // 1000, tl.plane.name))
            want.sort(key=lambda c: (-c[0], c[1]))
            assert got[gi] == want[:top_n]


def _host_and_gpu(x: schema.XSpace) -> tuple[schema.XPlane, schema.XPlane]:
    """The host plane (a "train" step marker with `_r` and `step_num`, a MatMul op) and a GPU
    plane of one kernel name, both empty, added to `x`."""
    host = x.planes.add(id=1, name="/host:CPU")
    for mid, name in ((1, "train"), (2, "MatMul:MatMul")):
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
    for sid, name in ((1, "_r"), (2, "step_num")):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    gpu = x.planes.add(id=2, name="/device:GPU:0")
    gpu.event_metadata[1].id = 1
    gpu.event_metadata[1].name = "volta_sgemm"
    return host, gpu


def _spanning_kernels(n: int) -> bytes:
    """n marked steps, and n stream lines of one kernel each spanning all of them."""
    x = schema.XSpace()
    host, gpu = _host_and_gpu(x)
    marks = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(n):
        e = marks.events.add(metadata_id=1, offset_ps=i * 1000, duration_ps=990)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
        marks.events.add(metadata_id=2, offset_ps=i * 1000 + 1, duration_ps=980)
    for k in range(n):
        line = gpu.lines.add(id=1 + k, name=f"Stream #{k}", timestamp_ns=1000)
        line.events.add(metadata_id=1, offset_ps=5, duration_ps=n * 1000)
    return x.SerializeToString()


def test_kernels_spanning_the_window_on_many_streams_keep_bounded_pairs() -> None:
    # 1,000 steps beside 1,000 streams whose one kernel spans them all (100 KB): one chunk
    # of arrays per (step, stream) took 27 s and 910 MB, and 2,000 of each ran out of 3 GB.
    # The pairs are bounded (`PAIRS_PER_EVENT`); the lines past it are named.
    import tracemalloc

    data = _spanning_kernels(1_000)
    tracemalloc.start()
    t0 = time.process_time()
    s = reduce_xspace(data)
    took = time.process_time() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert s.steps.count == 998
    left = int(s.steps.note.split("the device events of ")[1].split(" ")[0])
    # 2**18 pairs of 1,000 each: 262 lines kept, the rest left out and named.
    assert left == 1_000 - MIN_PAIRS // 1_000, s.steps.note
    assert "stream lines left out of the steps" in s.steps.note
    assert took < 8.0, took
    assert peak < 250e6, peak


def test_kernels_spanning_a_few_streams_are_all_kept() -> None:
    # Under the bound every pair is kept: 300 x 300 is 90,000 pairs.
    s = reduce_xspace(_spanning_kernels(300))
    assert s.steps.count == 298 and "left out" not in s.steps.note
    assert s.steps.items[0].top_events[0].kind == "kernel"


def test_many_steps_overlapping_one_another_keep_bounded_pairs() -> None:
    # 2,000 steps on 2,000 threads, each spanning the window, beside 2,000 kernels: each
    # kernel overlaps every step (4,000,000 pairs from 120 KB). The bound holds here too.
    x = schema.XSpace()
    host, gpu = _host_and_gpu(x)
    n = 2_000
    for i in range(n):
        line = host.lines.add(id=1 + i, name=f"t{i}", timestamp_ns=1000)
        e = line.events.add(metadata_id=1, offset_ps=i, duration_ps=n * 1000)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
        line.events.add(metadata_id=2, offset_ps=i + 1, duration_ps=n * 1000 - 2 * n)
    stream = gpu.lines.add(id=1, name="Stream #1", timestamp_ns=1000)
    for k in range(n):
        stream.events.add(metadata_id=1, offset_ps=k * 1000 + 10, duration_ps=500)
    t0 = time.process_time()
    s = reduce_xspace(x.SerializeToString())
    took = time.process_time() - t0
    assert "the device events of 1 stream line left out of the steps" in s.steps.note
    assert took < 8.0, took


def _one_long_kernel_then_one_a_step(n: int) -> bytes:
    """n marked steps, and one stream line: a kernel spanning them all, then one a step."""
    x = schema.XSpace()
    x.ParseFromString(_spanning_kernels(n))
    gpu = x.planes[1]
    del gpu.lines[1:]
    line = gpu.lines[0]
    line.events[0].offset_ps = 2
    for i in range(n):
        line.events.add(metadata_id=1, offset_ps=i * 1000 + 10, duration_ps=800)
    return x.SerializeToString()


def test_one_kernel_spanning_the_window_leaves_its_streams_kernels_in_the_steps() -> None:
    # 1,000 steps beside one stream of a kernel spanning them all and one kernel a step
    # (46 KB): the steps' own candidates reached back to the long kernel, 500,000 past the
    # bound, so the line was left out and no step kept ("no well-formed step"), with only
    # 2,000 pairs. The events' side is searched where it is the tighter.
    t0 = time.process_time()
    s = reduce_xspace(_one_long_kernel_then_one_a_step(1_000))
    took = time.process_time() - t0
    assert s.steps.count == 998 and "left out" not in s.steps.note, s.steps.note
    step = s.steps.items[0]
    assert step.breakdown_s["device_compute"] > 0
    assert {e.name for e in step.top_events if e.kind == "kernel"} == {"volta_sgemm"}
    assert took < 3.0, took


def test_both_sides_of_the_search_find_every_overlap(monkeypatch) -> None:
    import tfobs.analysis.pipeline as pipeline

    used = {"step": 0, "event": 0}
    by_step, by_event = pipeline._overlapping, pipeline._overlapping_by_event

    def step_side(*a):
        used["step"] += 1
        return by_step(*a)

    def event_side(*a):
        used["event"] += 1
        return by_event(*a)

    monkeypatch.setattr(pipeline, "_overlapping", step_side)
    monkeypatch.setattr(pipeline, "_overlapping_by_event", event_side)
    rng = random.Random(5)
    for _ in range(200):
        lines = []
        for _ in range(rng.randint(1, 4)):
            events = [(rng.randint(0, 50_000), rng.choice([0, rng.randint(0, 800)]))
                      for _ in range(rng.randint(1, 30))]
            if rng.random() < 0.5:  # a kernel spanning (nearly) the window
                events.append((rng.randint(0, 2_000), rng.randint(20_000, 60_000)))
            lines.append(events)
        spans = []
        for _ in range(rng.randint(1, 40)):  # unsorted, overlapping, nested steps
            b = rng.randint(-1_000, 52_000)
            spans.append((b, b + rng.randint(0, rng.choice([500, 1_500, 20_000]))))
        devices = _streams(lines)
        hits = _stream_hits(_steps(spans), devices)
        got = {(id(ld), gi): at for (gi, ld), at in _by_line(hits).items()}
        want = {}
        for ld in devices[0].lines:
            start, end = ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps
            for gi, (b, e) in enumerate(spans):
                inside = np.flatnonzero((start < e) & (end > b)).tolist()
                if inside:
                    want[(id(ld), gi)] = inside
        assert got == want
        # in each line, the pairs by step, then by position
        for k in range(len(hits.lines)):
            lo, hi = int(hits.bounds[k]), int(hits.bounds[k + 1])
            pairs = list(zip(hits.step[lo:hi].tolist(), hits.pos[lo:hi].tolist(), strict=True))
            assert pairs == sorted(pairs)
    assert used["step"] > 20 and used["event"] > 20, used


def _named_kernel_a_stream(steps: int, streams: int) -> bytes:
    """`steps` marked steps, and one GPU plane of `streams` stream lines of one kernel each,
    each kernel of its own name."""
    x = schema.XSpace()
    x.ParseFromString(_spanning_kernels(steps))
    gpu = x.planes[1]
    del gpu.lines[:]
    for k in range(streams):
        gpu.event_metadata[1 + k].id = 1 + k
        gpu.event_metadata[1 + k].name = f"kernel_{k}"
        line = gpu.lines.add(id=1 + k, name=f"Stream #{k}", timestamp_ns=1000)
        line.events.add(metadata_id=1 + k, offset_ps=(k % steps) * 1000 + 10, duration_ps=100)
    return x.SerializeToString()


def test_many_streams_of_a_plane_of_many_names_cost_one_table_a_plane() -> None:
    # 20,000 streams of a kernel each, each of its own name (1 MB): every stream line laid
    # its plane's whole table of names out again, twice (to classify its events and to rank
    # them), and gathered every name again: 38 s (10,000: 9.3 s). One table a plane.
    data = _named_kernel_a_stream(100, 20_000)
    t0 = time.process_time()
    s = reduce_xspace(data)
    took = time.process_time() - t0
    assert s.steps.count == 98
    assert any(e.kind == "kernel" and e.name.startswith("kernel_")
               for e in s.steps.items[0].top_events)
    assert took < 8.0, took


def test_a_planes_table_gives_what_lookup_gives() -> None:
    from tfobs.analysis.timeline import IdTable, lookup

    rng = random.Random(7)
    for _ in range(200):
        table = {rng.choice([rng.randint(-5, 40), rng.randint(-2**63, 2**63 - 1)]):
                 rng.randint(-3, 9) for _ in range(rng.randint(0, 12))}
        mids = np.array([rng.choice([*table, rng.randint(-5, 40), 2**62])
                         if table else rng.randint(-5, 40)
                         for _ in range(rng.randint(0, 20))], np.int64)
        assert IdTable(table).get(mids, -7).tolist() == lookup(mids, table, -7).tolist()


def _kernels_at_both_ends(steps: int, streams: int) -> bytes:
    """`steps` marked steps, and `streams` stream lines, each of a kernel in the first step
    and one in the last."""
    x = schema.XSpace()
    x.ParseFromString(_spanning_kernels(steps))
    gpu = x.planes[1]
    del gpu.lines[:]
    for k in range(streams):
        line = gpu.lines.add(id=1 + k, name=f"Stream #{k}", timestamp_ns=1000)
        line.events.add(metadata_id=1, offset_ps=5, duration_ps=100)
        line.events.add(metadata_id=1, offset_ps=(steps - 1) * 1000 + 5, duration_ps=100)
    return x.SerializeToString()


def test_streams_reaching_every_step_cost_their_own_events() -> None:
    # 40,000 steps beside 40,000 streams of two kernels each, in the first step and the
    # last (3.2 MB): each line searched every step between them, 40,000 x 40,000: 16 s
    # (20,000 of each: 4.8 s). Each line's own events are searched against the steps.
    import tfobs.analysis.pipeline as pipeline

    groups = _steps([(1000 * i, 1000 * i + 990) for i in range(20_000)])
    devices = _streams([[(5, 100), (19_999_000 + 5, 100)] for _ in range(20_000)])
    t0 = time.process_time()
    hits = pipeline._stream_hits(groups, devices)
    took = time.process_time() - t0
    assert len(hits.lines) == 20_000
    assert hits.step.tolist() == [0, 19_999] * 20_000 and not hits.lines_left_out
    assert took < 1.5, took  # 20,000 x 20,000 steps in reach: 3.5 s
    s = reduce_xspace(_kernels_at_both_ends(2_000, 2_000))
    assert s.steps.count == 2 and "left out" not in s.steps.note


def test_a_step_spanning_the_window_is_searched_apart() -> None:
    # The layout above plus one step spanning the window (a second thread's): it kept the
    # steps' latest end past every event, so each line searched every step again: 40,000 of
    # each (3.2 MB) took 17.5 s; 30,000 here took 8.5 s in `_stream_hits`, now 3 s.
    import tfobs.analysis.pipeline as pipeline

    n = 30_000
    groups = _steps([(1000 * i, 1000 * i + 990) for i in range(n)] + [(0, 1000 * n)])
    devices = _streams([[(5, 100), ((n - 1) * 1000 + 5, 100)] for _ in range(n)])
    t0 = time.process_time()
    hits = pipeline._stream_hits(groups, devices)
    took = time.process_time() - t0
    assert len(hits.lines) == n and not hits.lines_left_out
    assert hits.step.tolist() == [0, n - 1, n, n] * n
    assert hits.pos.tolist() == [0, 1, 0, 1] * n
    assert took < 5.0, took
