"""The last few windows' summaries, for the live page's history and `/api/windows`.

A bounded deque written by the reduce thread (one append per window) and read by HTTP
threads; each entry is immutable once added, so a reader copies the deque under the lock and
renders outside it.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from tfobs.summary import WindowSummary, no_nan
from tfobs.window import WindowRecord

DEFAULT_KEEP = 20  # windows kept: the page's history and the JSON endpoint, bounded memory


@dataclass(frozen=True)
class RecentWindow:
    index: int
    first_step: int
    last_step: int
    published_at_s: float  # wall clock, when the summary was published
    summary: WindowSummary

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "first_step": self.first_step,
                "last_step": self.last_step, "published_at_s": self.published_at_s,
                "summary": no_nan(self.summary.to_dict())}


class RecentWindows:
    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self._lock = threading.Lock()
        self._items: deque[RecentWindow] = deque(maxlen=max(1, keep))

    def add(self, summary: WindowSummary, record: WindowRecord | None,
            at_s: float | None = None) -> None:
        entry = RecentWindow(
            index=record.index if record is not None else len(self._items),
            first_step=record.first_step if record is not None else -1,
            last_step=record.last_step if record is not None else -1,
            published_at_s=time.time() if at_s is None else at_s, summary=summary)
        with self._lock:
            self._items.append(entry)

    def items(self) -> list[RecentWindow]:
        """Oldest first."""
        with self._lock:
            return list(self._items)

    def to_json(self, identity: dict[str, str] | None = None) -> str:
        """The body of `/api/windows`: `{"identity": {...}, "windows": [oldest .. newest]}`."""
        return json.dumps({"identity": identity or {},
                           "windows": [w.to_dict() for w in self.items()]},
                          sort_keys=True) + "\n"
