"""Read-only views over a parsed XSpace: planes, lines, events and their stats.

The capture is parsed with its events left unread (`schema.XSpaceLite`): planes, lines and
metadata tables are protobuf messages, events are decoded in bulk into numpy columns
(`PlaneView.events`, see `columns.py`). Code that wants protobuf XEvents (the GPU
analyses) asks for `PlaneView.proto` or `PlaneView.lines`, which parse that one plane in
full on first use. Times are picoseconds (`_ps`) unless named otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf.message import DecodeError, EncodeError

from tfobs.errors import CaptureError
from tfobs.xspace import schema
from tfobs.xspace.columns import LineBytes, PlaneEvents

# Largest capture accepted when parsing; protobuf itself refuses messages over 2 GiB.
MAX_CAPTURE_BYTES = 2**31 - 1
# A profiler writes one plane per device (8-16 GPUs or TPU chips on the largest hosts) and
# a few for the host; every plane costs the reduction its own fixed work (~0.25 ms), so a
# crafted file of 20,000 one-event planes (1 MB) took 15 s. Far past any real host.
MAX_PLANES = 4096
# Every line (a thread, a stream) costs the reduction its own fixed work too (~60 us and
# ~2 KB), whatever plane holds it: 4,095 planes of 1,000 one-event lines (130 MB) ran past
# 400 s and 9 GB. The largest real captures hold a few hundred; 100,000 reduce in ~7 s.
MAX_LINES = 100_000

StatValue = Any  # float | int | str | bytes


class _Names(dict[int, str]):
    """Event names by metadata id; a missing id reads as "" (and is not added)."""

    def __missing__(self, key: int) -> str:
        return ""


class PlaneView:
    """One XPlane with its metadata tables decoded once."""

    __slots__ = ("_lite", "_plane", "_events", "_bytes", "_used_names", "event_names",
                 "event_display_names", "stat_names", "stat_ids")

    def __init__(self, plane: Any) -> None:
        self._lite = plane
        self._plane: Any = None
        self._events: PlaneEvents | None = None
        self._bytes: LineBytes | None = None
        self._used_names: dict[int, str] | None = None
        # An event whose metadata id is not in the table (a damaged or crafted capture) is
        # nameless, as XProf shows it, not a KeyError deep in an analysis.
        self.event_names: dict[int, str] = _Names()
        self.event_display_names: dict[int, str] = {}
        for mid, md in plane.event_metadata.items():
            self.event_names[mid] = md.name
            if md.display_name:
                self.event_display_names[mid] = md.display_name
        self.stat_names: dict[int, str] = {
            mid: md.name for mid, md in plane.stat_metadata.items()
        }
        self.stat_ids: dict[str, int] = {name: mid for mid, name in self.stat_names.items()}

    @property
    def id(self) -> int:
        return int(self._lite.id)

    @property
    def name(self) -> str:
        return str(self._lite.name)

    @property
    def lite(self) -> Any:
        """The XPlaneLite message: lines without their events (`line_counts`, `events`)."""
        return self._lite

    @property
    def line_counts(self) -> list[int]:
        """How many events each of `lite.lines` holds, counted without decoding them."""
        if self._events is not None:
            start = self._events.line_start
            return [b - a for a, b in zip(start, start[1:], strict=False)]
        if self._bytes is None:
            self._bytes = LineBytes(self._lite.lines)
        return self._bytes.counts

    @property
    def events(self) -> PlaneEvents:
        """All events of the plane as columns, decoded on first use."""
        if self._events is None:
            read = self._bytes if self._bytes is not None else LineBytes(self._lite.lines)
            self._events = PlaneEvents(read)
            self._bytes = None  # the events hold its buffer now
        return self._events

    @property
    def used_event_names(self) -> dict[int, str]:
        """`event_names` for scans by name: the whole table, or where it holds more names
        than the plane has events (a crafted table of a million names no event uses, which
        every scan would pay for name by name) those of the ids events use."""
        if self._used_names is None:
            names, mids = self.event_names, self.events.mid
            if len(names) > mids.size:
                names = _Names((m, names[m]) for m in set(mids.tolist()))
            self._used_names = names
        return self._used_names

    @property
    def proto(self) -> Any:
        """The full XPlane message, parsed on first use (costs one parse of this plane)."""
        if self._plane is None:
            try:
                self._plane = schema.XPlane.FromString(self._lite.SerializeToString())
            except (DecodeError, EncodeError, RuntimeError, ValueError) as exc:
                if schema.out_of_memory(exc):
                    raise MemoryError(f"plane {self.name!r}: {exc}") from None
                raise CaptureError(f"not a readable XSpace capture: plane {self.name!r}: "
                                   f"{exc}") from None
        return self._plane

    @property
    def lines(self) -> list[LineView]:
        return [LineView(line) for line in self.proto.lines]

    def line(self, name: str) -> LineView | None:
        for line in self.proto.lines:
            if line.name == name:
                return LineView(line)
        return None

    def value(self, stat: Any) -> StatValue:
        """Decode one XStat; a `ref_value` resolves to the referenced stat name (a string)."""
        kind = stat.WhichOneof("value")
        if kind == "ref_value":
            return self.stat_names.get(stat.ref_value, "")
        if kind is None:
            return None
        return getattr(stat, kind)

    def stats_of(self, stats: Any) -> dict[str, StatValue]:
        """Decode a repeated XStat field into {stat name: value}."""
        names = self.stat_names
        return {names.get(s.metadata_id, str(s.metadata_id)): self.value(s) for s in stats}

    def plane_stats(self) -> dict[str, StatValue]:
        return self.stats_of(self._lite.stats)

    def metadata(self, metadata_id: int) -> Any:
        """The XEventMetadata message (name, display_name, stats, child_id)."""
        return self._lite.event_metadata[metadata_id]

    def metadata_stats(self, metadata_id: int) -> dict[str, StatValue]:
        md = self._lite.event_metadata.get(metadata_id)
        return self.stats_of(md.stats) if md is not None else {}

    def event_stats(self, event: Any, with_metadata: bool = False) -> dict[str, StatValue]:
        """An event's stats; with `with_metadata`, its metadata's stats underneath."""
        out = self.metadata_stats(event.metadata_id) if with_metadata else {}
        out.update(self.stats_of(event.stats))
        return out

    def event_name(self, event: Any) -> str:
        return self.event_names.get(event.metadata_id, "")

    def __repr__(self) -> str:
        return f"PlaneView(id={self.id}, name={self.name!r}, lines={len(self._lite.lines)})"


class LineView:
    """One XLine: a timeline (a thread, a GPU stream, a step row)."""

    __slots__ = ("_line",)

    def __init__(self, line: Any) -> None:
        self._line = line

    @property
    def id(self) -> int:
        return int(self._line.id)

    @property
    def name(self) -> str:
        return str(self._line.name)

    @property
    def display_name(self) -> str:
        return str(self._line.display_name or self._line.name)

    @property
    def timestamp_ns(self) -> int:
        return int(self._line.timestamp_ns)

    @property
    def start_ps(self) -> int:
        """Absolute start of the line; event times are `start_ps + event.offset_ps`."""
        return int(self._line.timestamp_ns) * 1000

    @property
    def events(self) -> Any:
        """The protobuf container of XEvents (metadata_id, offset_ps, duration_ps, stats)."""
        return self._line.events

    def __len__(self) -> int:
        return len(self._line.events)

    def __repr__(self) -> str:
        return f"LineView(id={self.id}, name={self.name!r}, events={len(self)})"


class SpaceView:
    """A parsed capture: its planes by name, hostnames, and the profiler's own errors."""

    __slots__ = ("_space", "planes", "size_bytes")

    def __init__(self, space: Any, size_bytes: int = 0) -> None:
        self._space = space
        self.planes: list[PlaneView] = [PlaneView(p) for p in space.planes]
        self.size_bytes = size_bytes

    @property
    def proto(self) -> Any:
        return self._space

    @property
    def hostnames(self) -> list[str]:
        return list(self._space.hostnames)

    @property
    def errors(self) -> list[str]:
        return list(self._space.errors)

    @property
    def warnings(self) -> list[str]:
        return list(self._space.warnings)

    def plane(self, name: str) -> PlaneView | None:
        for plane in self.planes:
            if plane.name == name:
                return plane
        return None

    def planes_with_prefix(self, prefix: str) -> list[PlaneView]:
        return [p for p in self.planes if p.name.startswith(prefix)]

    def event_count(self) -> int:
        return sum(sum(p.line_counts) for p in self.planes)

    def __iter__(self) -> Iterator[PlaneView]:
        return iter(self.planes)


def parse(data: bytes | bytearray | memoryview) -> SpaceView:
    """Parse XSpace bytes; raise CaptureError (one line) when they are not a capture, and
    MemoryError when protobuf ran out of memory parsing them (a memory limit, not the file)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CaptureError(f"expected XSpace bytes, got {type(data).__name__}")
    size = len(data)
    if size == 0:
        raise CaptureError("capture is empty (0 bytes); profile a window that ran some steps")
    if size > MAX_CAPTURE_BYTES:
        raise CaptureError(f"capture is {size} bytes, over the 2 GiB protobuf limit")
    space = schema.XSpaceLite()
    try:
        space.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        if schema.out_of_memory(exc):
            raise MemoryError(f"parsing a {size}-byte capture: {exc}") from None
        if "UTF-8" in str(exc):  # whole and of the right kind: a name's bytes are wrong
            raise CaptureError(
                f"capture ({size} bytes) holds a name that is not valid UTF-8 (an event, "
                "stat or plane name cut mid-character, or raw bytes a custom TraceMe "
                "wrote); XProf's parser refuses it too. Profile again, and make the names "
                "your code gives its trace events UTF-8 text") from None
        # protobuf 4 says no more than "Error parsing message" for a bad name too
        raise CaptureError(
            f"not a readable XSpace capture ({size} bytes: truncated, another format, or a "
            f"name that is not valid UTF-8): {exc}"
        ) from None
    if not space.planes:
        raise CaptureError(
            f"not an XSpace capture: {size} bytes parsed but hold no profiler planes"
        )
    if len(space.planes) > MAX_PLANES:
        raise CaptureError(
            f"capture ({size} bytes) holds {len(space.planes):,} planes; a profiler writes "
            f"one per device and a few for the host, and tfobs reads at most {MAX_PLANES:,}: "
            "reduce each host's own capture file")
    lines = sum(len(plane.lines) for plane in space.planes)
    if lines > MAX_LINES:
        raise CaptureError(
            f"capture ({size} bytes) holds {lines:,} lines over its planes; a profiler writes "
            f"one per thread or stream, and tfobs reads at most {MAX_LINES:,}: profile "
            "again (this file is damaged or not a profiler's), or reduce each host's own "
            "capture file")
    return SpaceView(space, size)
