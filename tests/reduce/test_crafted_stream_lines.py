"""Many GPU stream lines beside many steps: each line searches the steps its events can
reach, not every step."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import numpy as np

from tfobs.analysis.pipeline import _stream_hits
from tfobs.analysis.timeline import Timeline
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
    assert len(hits) == n
    assert all(h[0][0] == k and h[0][1].tolist() == [0] and len(h) == 1
               for k, (_, _, h) in enumerate(hits))
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
        got = {(id(ld), gi): inside.tolist()
               for _, ld, hits in _stream_hits(_steps(spans), devices) for gi, inside in hits}
        want = {}
        for ld in devices[0].lines:
            start, end = ld.start_arr + ld.start_ps, ld.end_arr + ld.start_ps
            for gi, (b, e) in enumerate(spans):
                inside = np.flatnonzero((start < e) & (end > b)).tolist()
                if inside:
                    want[(id(ld), gi)] = inside
        assert got == want
