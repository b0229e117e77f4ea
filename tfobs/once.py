"""Saying a thing once: the first of many equal warnings reaches the job's log, the rest are
counted where they happen (as OpenTelemetry's `Once`).

`Once` guards one line per object (or per process, at module level); `reset()` arms it again
where "once until it recovers" is meant. `OncePer` guards one line per key (a stage, a
reason) and holds a bounded number of keys: a key past the bound is said every time rather
than remembered, so a stream of distinct keys cannot grow memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class Once:
    """`first()` is True for the first caller only, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False

    def first(self) -> bool:
        if self._done:  # the common case, without the lock
            return False
        with self._lock:
            done, self._done = self._done, True
        return not done

    def do_once(self, fn: Callable[[], object]) -> bool:
        """Call `fn()` if this is the first time; True when it was called."""
        if self.first():
            fn()
            return True
        return False

    def reset(self) -> None:
        """Arm it again: the next `first()` is True."""
        with self._lock:
            self._done = False


class OncePer:
    """`first(key)` is True for the first caller with that key only, from any thread."""

    def __init__(self, max_keys: int = 256) -> None:
        self._lock = threading.Lock()
        self._seen: set[Hashable] = set()
        self._max_keys = max_keys

    def first(self, key: Hashable) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            if len(self._seen) < self._max_keys:
                self._seen.add(key)
            return True

    def seen(self, key: Hashable) -> bool:
        """True when a `first(key)` has already been True (read only)."""
        with self._lock:
            return key in self._seen
