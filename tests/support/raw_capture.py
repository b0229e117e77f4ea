"""A test capture's host events read from the protobuf itself: what the hand counts hold
tfobs's figures to, apart from tfobs's own reader."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

from tfobs.summary import WindowSummary
from tfobs.xspace import schema


def step_spans_ps(s: WindowSummary) -> list[tuple[int, int]]:
    """The kept steps' (begin, end) in integer wall-clock ps: nanoseconds as floats are 256
    ns apart at today's epoch."""
    return [(st.start_ns * 1000, st.start_ns * 1000 + round(st.duration_s * 1e12))
            for st in s.steps.items]


def host_events(path: pathlib.Path, s: WindowSummary
                ) -> Iterator[tuple[str, dict[str, int], int, Any]]:
    """Each event of the capture's `/host:CPU` plane: its name, its integer stats by name,
    its start in wall-clock ps (relative line times, as TensorFlow's CPU captures write
    them, placed at the profile's start, `s.start_ns`), and the event itself."""
    space = schema.XSpace().FromString(path.read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: m.name for k, m in host.event_metadata.items()}
    stat = {k: m.name for k, m in host.stat_metadata.items()}
    shift = s.start_ns if min(ln.timestamp_ns for ln in host.lines) < 10**15 else 0
    for line in host.lines:
        base = (shift + line.timestamp_ns) * 1000
        for e in line.events:
            stats = {stat[x.metadata_id]: x.int64_value or x.uint64_value for x in e.stats}
            yield names[e.metadata_id], stats, base + e.offset_ps, e
