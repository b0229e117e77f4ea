"""WindowRecord: what the runtime knows about one profile window besides its summary.

The runtime draws the window's trace and span ids when the window *opens*, so the step-time
histogram can carry them as exemplars while the window runs, and the OpenTelemetry exporter
later sends spans with exactly those ids: a Grafana exemplar then opens the right trace.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from tfobs.summary import OUTCOMES, Outcome

__all__ = [
    "OUTCOMES", "WindowRecord", "format_span_id", "format_trace_id", "new_span_id", "new_trace_id",
]

_rng = random.SystemRandom()


def new_trace_id() -> int:
    return _rng.getrandbits(128) or 1


def new_span_id() -> int:
    return _rng.getrandbits(64) or 1


def format_trace_id(trace_id: int) -> str:
    return f"{trace_id:032x}"


def format_span_id(span_id: int) -> str:
    return f"{span_id:016x}"


@dataclass
class WindowRecord:
    index: int  # 0, 1, 2, ... within this process
    trace_id: int = field(default_factory=new_trace_id)
    span_id: int = field(default_factory=new_span_id)  # the window's root span
    # (marker name, step number) -> span id, drawn when the step ends inside the window.
    # The name is in the key: a loop's train and test steps can share a number.
    step_span_ids: dict[tuple[str, int], int] = field(default_factory=dict)
    # (marker name, step number) -> (wall-clock end ns, duration ns) of each step that ended
    # inside the window, as tfobs's marker timed it: the trace then has a span for a step
    # the reduction leaves out (a window's first and last, dropped as XProf drops them), so
    # every exemplar names a span that is sent.
    step_times: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    start_ns: int = 0  # wall clock, when the profiler session started
    end_ns: int = 0
    first_step: int = -1
    last_step: int = -1
    outcome: Outcome | Literal[""] = ""  # "" while the window is open
    reason: str = ""  # one line: why skipped or failed
    cut: str = ""  # one line: why the window was closed before its planned steps
    capture_bytes: int = 0
    capture_s: float = 0.0  # export + read of the capture
    reduce_s: float = 0.0
    background_cpu_s: float = 0.0  # CPU time of export + reduction (what the budget charges)
    # How tracing was stopped (session.WindowEnd): where ("step_boundary", "train_end",
    # "capture_thread"), the wait for the device and the stop, on the training thread
    # unless `end_at` says otherwise.
    end_at: str = ""
    end_drain_s: float = 0.0
    end_stop_s: float = 0.0
    end_thread: str = ""
    on_demand: bool = False
    keep: bool = False  # asked to be kept (capture_now(keep=True))
    kept_path: str = ""  # where it was kept (keep_dir), "" when it was not

    def set_end(self, at: str, drain_s: float, stop_s: float, thread: str) -> None:
        self.end_at, self.end_drain_s, self.end_stop_s, self.end_thread = (
            at, drain_s, stop_s, thread)

    @property
    def end_on_training_thread_s(self) -> float:
        """What ending the window took from the training thread (0 when another ended it)."""
        return 0.0 if self.end_at in ("", "capture_thread") else (
            self.end_drain_s + self.end_stop_s)

    def step_span_id(self, step_num: int, marker: str = "train") -> int:
        key = (marker, step_num)
        span = self.step_span_ids.get(key)
        if span is None:
            span = self.step_span_ids[key] = new_span_id()
        return span

    def exemplar(self, step_num: int | None = None, marker: str = "train") -> dict[str, str]:
        """OpenMetrics exemplar labels pointing at this window (or one of its steps)."""
        span = self.span_id if step_num is None else self.step_span_id(step_num, marker)
        return {"trace_id": format_trace_id(self.trace_id), "span_id": format_span_id(span)}
