"""One pass over each line of a plane: event times and metadata ids as flat lists.

Every analysis works on these lists instead of the protobuf events, so each event is
touched once from Python (the cost that decides reduction speed). Stats are decoded
later, only for the few events an analysis asks about (`Timeline.stats`).
Times stay in picoseconds relative to the line's own `timestamp_ns`, as XProf uses them.
"""

from __future__ import annotations

from typing import Any

from tfobs.errors import CaptureError
from tfobs.xspace.reader import PlaneView

# Picoseconds far outside any real capture (about 100 days): values past this are corrupt.
MAX_PS = 10**19
MAX_LINES = 100_000


class LineData:
    """Flat event lists of one XLine, sorted by start."""

    __slots__ = ("line", "name", "start_ps", "ts_ns", "starts", "ends", "mids", "order")

    def __init__(self, line: Any) -> None:
        self.line = line
        self.name: str = line.name
        self.ts_ns: int = line.timestamp_ns
        if not -MAX_PS // 1000 < self.ts_ns < MAX_PS // 1000:
            raise CaptureError(f"line {self.name!r} has an impossible timestamp {self.ts_ns}")
        # Absolute line start in ps: XProf's event timespans are line start + offset.
        self.start_ps: int = self.ts_ns * 1000
        starts: list[int] = []
        ends: list[int] = []
        mids: list[int] = []
        sa, ea, ma = starts.append, ends.append, mids.append
        for e in line.events:
            off = e.offset_ps
            ma(e.metadata_id)
            sa(off)
            ea(off + e.duration_ps)
        if starts and (min(starts) < -MAX_PS or max(ends) > MAX_PS):
            raise CaptureError(f"line {self.name!r} has event times out of range")
        # `order` maps sorted position -> index in line.events (None when already sorted).
        self.order: list[int] | None = None
        if any(starts[i] > starts[i + 1] for i in range(len(starts) - 1)):
            order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
            self.order = order
            starts = [starts[i] for i in order]
            ends = [ends[i] for i in order]
            mids = [mids[i] for i in order]
        self.starts, self.ends, self.mids = starts, ends, mids

    def event(self, i: int) -> Any:
        """The protobuf XEvent at sorted position i."""
        return self.line.events[self.order[i] if self.order is not None else i]

    def __len__(self) -> int:
        return len(self.starts)


class Timeline:
    """A plane's lines as `LineData`, plus lookups by event name."""

    def __init__(self, plane: PlaneView, line_filter: Any = None) -> None:
        self.plane = plane
        proto_lines = plane.proto.lines
        if len(proto_lines) > MAX_LINES:
            raise CaptureError(f"plane {plane.name!r} has {len(proto_lines)} lines; too many")
        self.lines: list[LineData] = [
            LineData(line) for line in proto_lines if line_filter is None or line_filter(line)
        ]
        self.names = plane.event_names
        self.stat_ids = plane.stat_ids

    def mids_where(self, predicate: Any) -> set[int]:
        """Metadata ids whose event name satisfies `predicate(name)`."""
        return {mid for mid, name in self.names.items() if predicate(name)}

    def stats(self, line: LineData, i: int) -> dict[str, Any]:
        return self.plane.event_stats(line.event(i))

    def stat_values(self, line: LineData, i: int, wanted: dict[int, str]) -> dict[str, Any]:
        """Only the stats whose metadata id is in `wanted` ({stat id: key})."""
        out: dict[str, Any] = {}
        for s in line.event(i).stats:
            key = wanted.get(s.metadata_id)
            if key is not None:
                out[key] = self.plane.value(s)
        return out
