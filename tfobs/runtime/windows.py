"""The training thread's side: every step's duration, and windows opened on step boundaries.

`step_begin`/`step_end` run at every step (through the step markers). Between windows they
compare integers and append the duration to the step sink; at a window boundary
`step_begin` starts the profiler (0.1-1 ms) so a window begins exactly on a step, and the
step that fills the window wakes the capture thread. Nothing here raises into training.

`tracing` is the window the profiler records now; `inflight` the one being traced,
exported or reduced (at most one at a time: the capture and reduce threads release it).
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from threading import get_ident

from tfobs.capture import markers
from tfobs.capture.schedule import (
    Budget,
    Policy,
    aligned_start,
    next_window_start,
    window_full,
)
from tfobs.capture.session import EndAt, ProfilerSlot
from tfobs.capture.window_length import WindowLength, idle_cores, machine_ticks, usable_cores
from tfobs.export.sinks import StepSink
from tfobs.health import HealthLedger
from tfobs.once import Once
from tfobs.runtime.failures import Failures
from tfobs.runtime.progress import say
from tfobs.summary import Outcome
from tfobs.window import WindowRecord

UNSAFE_END_ENV = "TFOBS_UNSAFE_WINDOW_END"
# Where several threads mark steps whose steps always overlap, the longest a window's end
# waits for a boundary no other thread's step straddles before it ends at one that is.
OVERLAP_END_WAIT_S = 1.0
# Threads whose latest step number is remembered (`Windows._last_nums`).
MAX_STEP_THREADS = 64
# The longest another thread's step waits to begin while one thread ends a window (the
# device drain and the profiler's stop: milliseconds); never longer, whatever happens there.
END_GATE_WAIT_S = 2.0
# Records a window's end: (record, outcome, one-line reason).
Finish = Callable[[WindowRecord, Outcome, str], None]


@dataclass
class OpenWindow:
    record: WindowRecord
    opened_at: float  # time.monotonic()
    first_step: int
    # Set once the window no longer traces: ended on the training thread, or dropped.
    close: threading.Event = field(default_factory=threading.Event)
    taken: bool = False  # the capture thread has it (tracing, exporting or reducing)
    # The capture thread asks the training thread to end the window at its next step
    # boundary (time cap, memory): tracing is never stopped under the job's running steps.
    end_requested: bool = False
    # time.monotonic() when the window was due to end but another thread's step was open.
    end_deferred_at: float = 0.0
    # The thread that opened it: its steps count the window's length (threads that each
    # run their own loop would otherwise keep it open with numbers of their own).
    owner: int = 0


_said_overlap = Once()
_said_numbers_back = Once()

RECENT_STEPS = 15  # untraced steps kept for the median a window's export is held against
PROBE_STEPS = 10  # steps before the first window whose CPU use says whether a core is free


@dataclass
class ExportWatch:
    """What the training thread sees of one export: the longest step that overlapped it."""

    began: float  # time.monotonic() when the export started
    base_s: float  # median of the untraced steps just before the window
    traced_steps: int
    ended: float = math.inf  # set by the capture thread when the export returns
    worst_s: float = 0.0


class StepWorkMeter:
    """Seconds of tfobs's per-step work (markers, histogram), timed in place by the markers,
    that the budget has not been charged for yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._charged = markers.own_seconds()

    def take(self) -> float:
        with self._lock:
            own = markers.own_seconds()
            new, self._charged = own - self._charged, own
        return max(0.0, new)


class Windows:
    def __init__(self, policy: Policy, budget: Budget, slot: ProfilerSlot,
                 health: HealthLedger, failures: Failures, step_sink: StepSink | None,
                 finish: Finish, runs_steps: bool = True) -> None:
        self.policy, self.budget, self.slot = policy, budget, slot
        self._health, self._failures, self._finish = health, failures, finish
        self._sink = step_sink
        self._append = step_sink.append if step_sink is not None else None
        self.lock = threading.Lock()
        self.wake = threading.Event()  # the capture thread waits on it
        self.tracing: OpenWindow | None = None
        self.inflight: OpenWindow | None = None
        self.stopping = False
        # Parameter servers and evaluators run no steps of their own (`runs_steps` False):
        # no scheduled windows there (an on-demand capture still works).
        self.runs_steps = runs_steps
        self._next_start = next_window_start(0, policy) if runs_steps else sys.maxsize
        # The latest step number each thread began, and how far back a number must go to be
        # a new count (numbered per epoch, a new fit, a stray number): threads that each
        # run a loop of their own number their steps apart (4 threads at steps 4 and 12).
        self._last_nums: dict[int, int] = {}
        self._back_gap = policy.window_steps + 1
        self.length = WindowLength(policy.window_steps, policy.export_step_stretch)
        self._recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self._base_s: float | None = None  # median untraced step when the window opened
        self._watch: ExportWatch | None = None
        # (process CPU, wall) when the probe before the first window began; the probe runs
        # only where the length may change (see WindowLength.first_window)
        probe_at = self._next_start - PROBE_STEPS
        self._probe_at = probe_at if probe_at >= 1 and self.length.steered else sys.maxsize
        self._probe: tuple[float, float, tuple[int, int] | None] | None = None
        self._on_demand = False
        self._keep = False  # the on-demand window is to be kept
        self._index = 0
        # A step is running on the training thread (between its begin and end hooks): the
        # capture thread never ends a window itself then.
        self.in_step = False
        self.boundary_at = 0.0  # time.monotonic() of the latest step boundary in a window
        # Only to reproduce the old window end (benchmarks/window_end_safety.py): the
        # capture thread stops tracing while the job's steps run. Never set it in a job.
        self.end_on_capture_thread = os.environ.get(UNSAFE_END_ENV, "") == "capture_thread"
        # Clear while a training thread ends a window: another thread's step begins after
        # the profiler stopped, not under its stop.
        self.end_running = False  # read by every step_begin: a plain attribute
        self._end_done = threading.Event()
        self._ending = threading.Lock()  # held by the training thread ending a window

    # -- training thread (hot path) -----------------------------------------------------

    def step_begin(self, step_num: int) -> None:
        self.in_step = True
        if self.end_running:  # another thread is ending a window
            self._end_done.wait(END_GATE_WAIT_S)
        window = self.tracing
        thread = get_ident()
        last = self._last_nums.get(thread, 0)
        if step_num + self._back_gap < last:
            self._numbers_went_back(last, step_num, window, thread)
        elif len(self._last_nums) >= MAX_STEP_THREADS and thread not in self._last_nums:
            self._last_nums.clear()  # threads come and go (a pool): bounded
        self._last_nums[thread] = step_num
        if window is not None:
            if window.end_requested:  # capped: end between the last step and this one
                self._end_at_boundary(window)
            return
        if step_num < self._next_start and not self._on_demand:
            if step_num >= self._probe_at:
                self._probe_at = sys.maxsize
                self._probe = (time.process_time(), time.monotonic(), machine_ticks())
            return
        try:
            self._open(step_num)
        except Exception as exc:  # never into training
            self._failures.report("schedule", exc)

    def _numbers_went_back(self, back_from: int, step_num: int, window: OpenWindow | None,
                           thread: int) -> None:
        """A thread's step numbers started over (a loop numbering each epoch's steps from 0,
        a new `fit`, a stray large number): windows are planned again from this number, or
        none would open until the numbers passed the old plan. An open window of this
        thread ends here."""
        if window is not None and window.owner == thread:
            window.end_requested = True  # its steps' numbers no longer count up to its end
        if self.runs_steps:
            self._next_start = next_window_start(step_num, self.policy)
        if _said_numbers_back.first():
            say(f"tfobs: step numbers went back from {back_from} to {step_num} (steps "
                "numbered per epoch, or a new fit): windows are planned again from step "
                f"{self._next_start}")

    def step_end(self, step_num: int, duration_s: float,
                 trace_key: tuple[str, int] | None = None) -> None:
        self._health.steps += 1
        if self._health.steps == 1:
            self.wake.set()  # the capture thread prepares the backend, off this thread
        self.in_step = False
        window = self.tracing
        if window is not None and window.close.is_set():  # the profiler was taken by the
            self.tracing = window = None  # user's own profiling: no exemplar
        if window is None:
            append = self._append
            if append is not None:
                append(duration_s)  # a C-level deque.append: no Python frame
            self._recent.append(duration_s)
            if self._watch is not None:
                self._watch_step(self._watch, duration_s)
            return
        record = window.record
        owned = get_ident() == window.owner
        if owned:
            record.last_step = step_num
        # the exemplar names the step as the trace will (marker name and number)
        key = ("train", step_num) if trace_key is None else trace_key
        exemplar = record.exemplar(key[1], key[0])
        record.step_times[key] = (time.time_ns(), int(duration_s * 1e9))
        if window.end_requested or (owned and window_full(window.first_step, step_num,
                                                          self.length.steps)):
            self._end_at_boundary(window)
        else:
            self.boundary_at = time.monotonic()
            try:
                cut = self.slot.step_ended()  # the trace's memory, read between steps
            except Exception as exc:  # never into training
                cut = ""
                self._failures.report("capture", exc)
            if cut:
                window.record.cut = cut
                self._end_at_boundary(window)
        sink = self._sink
        if sink is not None:
            try:
                sink.observe(duration_s, exemplar)
            except Exception as exc:
                self._failures.report(sink.stage, exc)

    def train_end(self) -> None:
        """Training stopped (end of fit): end an open window now instead of at its cap."""
        self.in_step = False
        window = self.inflight
        if window is not None:
            if self.tracing is window:
                self._end(window, "train_end")
            window.close.set()

    def _end_at_boundary(self, window: OpenWindow) -> None:
        """End the window at this step boundary, unless another thread's step straddles
        it (steps of several threads): then at the next boundary none does, or, where those
        steps always overlap, at the first boundary OVERLAP_END_WAIT_S later, counted
        apart (`steps_open`). While one thread ends it, the others' steps wait to begin."""
        if not self._ending.acquire(blocking=False):
            return  # another training thread is ending it now
        try:
            if self.tracing is not window:
                return  # ended meanwhile
            # Gate first, then look: a step that opens after the look waits at its begin.
            self._end_done.clear()
            self.end_running = True
            try:
                self._end_or_defer(window)
            finally:
                self.end_running = False
                self._end_done.set()
        finally:
            self._ending.release()

    def _end_or_defer(self, window: OpenWindow) -> None:
        if markers.steps_open_elsewhere() == 0:
            self._end(window, "step_boundary")
            return
        now = time.monotonic()
        self.boundary_at = now  # steps still come: the capture thread keeps waiting
        if not window.end_deferred_at:
            window.end_deferred_at, window.end_requested = now, True
        elif now - window.end_deferred_at >= OVERLAP_END_WAIT_S:
            self._end(window, "steps_open")
            if _said_overlap.first():
                say("tfobs: steps of several threads overlap, so a window can end only "
                    "while another thread's step runs; mark the steps of one thread only "
                    "(tfobs.step or a step annotation in the thread that trains) so "
                    "windows end between its steps")

    def _end(self, window: OpenWindow, at: EndAt) -> None:
        """Training thread, between steps: stop tracing here, after the device drained
        (ProfilerSlot.end_tracing), then let the capture thread hand the capture on."""
        self.tracing = None
        if not self.end_on_capture_thread:
            try:
                end = self.slot.end_tracing(at)
                if end is not None:
                    window.record.set_end(end.at, end.drain_s, end.stop_s, end.thread)
            except Exception as exc:  # never into training
                self._failures.report("capture", exc)
        window.close.set()

    def _open(self, step_num: int) -> None:
        nominal = step_num  # where the window would have begun on every worker
        if step_num >= self._next_start:
            nominal = self._next_start
            if step_num > nominal:  # started late, or steps jumped: stay on the others' steps
                nominal = aligned_start(step_num, self.policy)
            self._next_start = next_window_start(step_num + 1, self.policy)
            if window_full(nominal, step_num - 1, self.length.steps) and not self._on_demand:
                return  # the others' window is already over: wait for the next one
        if self.stopping:
            return
        if self._probe is not None:  # the first window: is a core free for its export?
            cpu0, wall0, ticks0 = self._probe
            self._probe, self._probe_at = None, sys.maxsize
            wall = time.monotonic() - wall0
            if wall > 0:
                self.length.first_window((time.process_time() - cpu0) / wall, usable_cores(),
                                         idle_cores(ticks0, machine_ticks()))
        on_demand, self._on_demand = self._on_demand, False
        keep, self._keep = self._keep and on_demand, False
        if on_demand:
            nominal = step_num
        if not on_demand and (self.inflight is not None or not self.budget.allows()):
            self._health.count_window("skipped_budget", "duty-cycle budget")
            return
        if self.inflight is not None:  # on-demand while a window is still being reduced
            self._on_demand, self._keep = True, keep
            return
        record = WindowRecord(index=self._index, on_demand=on_demand, keep=keep)
        self._index += 1
        window = OpenWindow(record, time.monotonic(), nominal, owner=get_ident())
        refused = self.slot.start(wake=window.close)
        if refused is not None:
            if refused.outcome == "failed":
                self._failures.report("capture", refused.reason)
            self._finish(record, refused.outcome, refused.reason)
            return
        window.opened_at = time.monotonic()  # the time cap counts from the session's start
        recent = self._recent
        self._base_s = statistics.median(recent) if len(recent) >= 5 else None
        record.start_ns = time.time_ns()
        record.first_step = step_num
        with self.lock:
            self.inflight = window
            self.tracing = window
        self.wake.set()

    def _watch_step(self, watch: ExportWatch, duration_s: float) -> None:
        """A step ended while an export is watched: keep it if it overlapped the export;
        the first step begun after the export closes the watch and steers the length."""
        try:
            now = time.monotonic()
            began = now - duration_s
            if began >= watch.ended:
                self._watch = None
                stretch = watch.worst_s / watch.base_s
                steps = self.length.observe(stretch, watch.traced_steps)
                self._health.set_window_length(stretch, steps)
            elif now > watch.began and duration_s > watch.worst_s:
                watch.worst_s = duration_s
        except Exception as exc:  # never into training
            self._watch = None
            self._failures.report("schedule", exc)

    # -- capture thread -----------------------------------------------------------------

    def export_began(self, window: OpenWindow) -> ExportWatch | None:
        """The window's export starts: watch the steps that overlap it (None: no usual
        step to hold them against, or the length is fixed)."""
        record, base = window.record, self._base_s
        if base is None or base <= 0 or not self.length.steered or record.last_step < 0:
            return None
        watch = ExportWatch(time.monotonic(), base, record.last_step - record.first_step + 1)
        self._watch = watch
        return watch

    # -- any thread ---------------------------------------------------------------------

    def request(self, keep: bool = False) -> bool:
        """Ask for a window at the next step (`keep`: keep its capture); False when the
        budget or a window says no."""
        if self.stopping or self.inflight is not None or not self.budget.allows():
            return False
        if self._on_demand:  # one is already pending: say so rather than merge into it
            return False
        self._keep = keep
        self._on_demand = True
        return True

    def stop_tracing(self, window: OpenWindow) -> None:
        with self.lock:
            if self.tracing is window:
                self.tracing = None

    def release(self, window: OpenWindow) -> None:
        """The window is done (published, failed or dropped): the next may open."""
        with self.lock:
            if self.inflight is window:
                self.inflight = None
            if self.tracing is window:
                self.tracing = None

    @property
    def idle(self) -> bool:
        return self.inflight is None

    @property
    def next_start(self) -> int:
        """The step the next scheduled window opens at (sys.maxsize: none scheduled)."""
        return self._next_start

    def wait_idle(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.inflight is not None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True
