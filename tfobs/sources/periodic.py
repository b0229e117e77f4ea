"""A named daemon thread that calls one function at a fixed period until stopped.

Shared by the device samplers so each only says what one sample is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    def __init__(self, name: str, interval_s: float, tick: Callable[[], None]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._tick = tick
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Stop and wait at most `timeout_s` for the thread (it is a daemon either way)."""
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._tick()
