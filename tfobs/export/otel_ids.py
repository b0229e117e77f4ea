"""An OpenTelemetry IdGenerator that hands out the ids tfobs drew when a window opened.

The step-time histogram carries a window's trace and span ids as exemplars *while the
window runs*, long before its spans exist. So the spans must reuse those ids rather than
draw new ones: before each `start_span` the exporter tells this generator which ids come
next; anything not planned (top-event spans) gets a fresh random id.
"""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator


class PlannedIdGenerator(IdGenerator):
    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._next = threading.local()  # plans are per thread: no cross-talk between callers

    def plan(self, *, trace_id: int = 0, span_id: int = 0) -> None:
        """The ids the next span started on this thread gets (0: draw one at random)."""
        self._next.trace_id = trace_id
        self._next.span_id = span_id

    def generate_trace_id(self) -> int:
        planned = getattr(self._next, "trace_id", 0)
        self._next.trace_id = 0
        return planned or self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        planned = getattr(self._next, "span_id", 0)
        self._next.span_id = 0
        return planned or self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        # tfobs draws trace ids from SystemRandom (tfobs/window.py), so ratio samplers work.
        return True
