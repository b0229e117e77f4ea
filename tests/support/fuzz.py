"""Structure-aware capture mutations for the reducer's fuzz test and benchmark.

Bases are real captures trimmed to a few events per line (keeping step markers, memory
events and the plane metadata), so each mutated capture is small and quick to reduce.
Mutations keep the protobuf valid and break the values: negative or huge times, missing
planes and lines, dangling metadata ids, stats of the wrong type, huge counts.
"""

from __future__ import annotations

import pathlib
import random
from typing import Any

from tfobs.xspace import schema

HUGE = (2**63 - 1, -(2**63), 2**62, -1, 0, 10**15)


def trimmed_base(path: pathlib.Path, per_line: int = 15) -> bytes:
    space = schema.XSpace()
    space.ParseFromString(path.read_bytes())
    for plane in space.planes:
        for md in plane.event_metadata.values():
            md.metadata = b""  # serialized HLO and the like: large, never read
            del md.stats[:]
        del plane.lines[40:]
        if plane.name == "/host:metadata":
            plane.event_metadata.clear()
        keep_names = {mid for mid, md in plane.event_metadata.items()
                      if md.name.startswith(("train", "multi_step", "Memory", "Iterator"))}
        for line in plane.lines:
            events = list(line.events)
            wanted = [e for e in events if e.metadata_id in keep_names][:per_line]
            rest = events[:per_line]
            chosen = sorted({id(e): e for e in wanted + rest}.values(),
                            key=lambda e: e.offset_ps)
            copies = [schema.XEvent() for _ in chosen]
            for c, e in zip(copies, chosen, strict=True):
                c.CopyFrom(e)
            del line.events[:]
            line.events.extend(copies)
    return space.SerializeToString()


def _pick(rng: random.Random, seq: Any) -> Any:
    return seq[rng.randrange(len(seq))] if len(seq) else None


def mutate(base: bytes, rng: random.Random) -> bytes:
    space = schema.XSpace()
    space.ParseFromString(base)
    for _ in range(rng.randint(1, 4)):
        _MUTATIONS[rng.randrange(len(_MUTATIONS))](space, rng)
    return space.SerializeToString()


def _event(space: Any, rng: random.Random) -> Any:
    plane = _pick(rng, space.planes)
    line = _pick(rng, plane.lines) if plane is not None else None
    return _pick(rng, line.events) if line is not None else None


def _times(space: Any, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 20)):
        e = _event(space, rng)
        if e is not None:
            setattr(e, rng.choice(("offset_ps", "duration_ps")), rng.choice(HUGE))


def _line_ts(space: Any, rng: random.Random) -> None:
    plane = _pick(rng, space.planes)
    if plane is not None and len(plane.lines):
        _pick(rng, plane.lines).timestamp_ns = rng.choice(HUGE)


def _drop_plane(space: Any, rng: random.Random) -> None:
    if len(space.planes) > 1:
        del space.planes[rng.randrange(len(space.planes))]


def _drop_lines(space: Any, rng: random.Random) -> None:
    plane = _pick(rng, space.planes)
    if plane is not None and len(plane.lines):
        del plane.lines[rng.randrange(len(plane.lines)):]


def _metadata_ids(space: Any, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 10)):
        e = _event(space, rng)
        if e is not None:
            e.metadata_id = rng.choice((0, -5, 10**12, rng.randint(0, 300)))
            if len(e.stats):
                _pick(rng, e.stats).metadata_id = rng.randint(-2, 400)


def _stat_values(space: Any, rng: random.Random) -> None:
    for _ in range(rng.randint(1, 20)):
        e = _event(space, rng)
        if e is None or not len(e.stats):
            continue
        s = _pick(rng, e.stats)
        kind = rng.randrange(6)
        if kind == 0:
            s.int64_value = rng.choice(HUGE)
        elif kind == 1:
            s.uint64_value = 2**64 - 1
        elif kind == 2:
            s.double_value = rng.choice((float("nan"), float("inf"), -1e300, 0.5))
        elif kind == 3:
            s.str_value = "x" * rng.randint(0, 50)
        elif kind == 4:
            s.ref_value = rng.randint(0, 10**9)
        else:
            s.bytes_value = b"\xff" * 8


def _duplicate(space: Any, rng: random.Random) -> None:
    plane = _pick(rng, space.planes)
    line = _pick(rng, plane.lines) if plane is not None else None
    if line is not None and len(line.events):
        e = _pick(rng, line.events)
        copies = [schema.XEvent() for _ in range(rng.choice((10, 200, 1000)))]
        for c in copies:
            c.CopyFrom(e)
        line.events.extend(copies)


def _metadata_names(space: Any, rng: random.Random) -> None:
    plane = _pick(rng, space.planes)
    if plane is not None and len(plane.event_metadata):
        key = _pick(rng, list(plane.event_metadata.keys()))
        plane.event_metadata[key].name = rng.choice(
            ("train", "MemoryAllocation", "Iterator::Root", "multi_step_on_iterator",
             "a:B", "", "IteratorGetNextOp::DoCompute", "ExecutorState::Process"))


def _num_occurrences(space: Any, rng: random.Random) -> None:
    e = _event(space, rng)
    if e is not None:
        e.num_occurrences = rng.choice(HUGE)


def _plane_stats(space: Any, rng: random.Random) -> None:
    for plane in space.planes:
        for s in plane.stats:
            s.int64_value = rng.choice(HUGE)


_MUTATIONS = (_times, _line_ts, _drop_plane, _drop_lines, _metadata_ids, _stat_values,
              _duplicate, _metadata_names, _num_occurrences, _plane_stats)
