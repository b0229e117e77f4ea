"""`tfobs-reduce`: turns each capture into a `WindowSummary`, hands it to every window sink
and charges the window's cost to the duty-cycle budget.

With `reduce_in="process"` (the default) the reduction runs in the reduce helper, a child
process (`tfobs/reduce/helper.py`): this thread only sends the capture's path and waits for the
small summary, so the job's GIL and memory never carry a reduction (in-process, the
reduction held the GIL for 150-230 ms at a time: issue 17). The helper's CPU is charged to
the budget like this thread's. A helper that dies, hangs or runs out of memory fails that
window (counted under stage `reduce_helper`) and is restarted with backoff; where no helper
can be started, tfobs says so once and reduces here, in-process, as with
`reduce_in="thread"`.

It runs at the job's own priority, as every tfobs thread in the job does: a niced Python
thread can be starved where training keeps every core busy, and one preempted while it
holds the GIL (a garbage collection it triggered, a summary it decodes) keeps the training
thread waiting until it gets a core back (DESIGN.md). The CPU-heavy work is in the helper
process, which is niced, with a GIL of its own. A sink that raises misses that window; its
error is counted under its stage.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Sequence

from tfobs.capture.session import CaptureResult
from tfobs.config import Config
from tfobs.export.sinks import WindowSink
from tfobs.health import HealthLedger
from tfobs.once import Once
from tfobs.reduce.helper import CannotStart, HelperFailed, ReduceHelper
from tfobs.runtime.capture_thread import ReduceQueue
from tfobs.runtime.failures import Failures
from tfobs.runtime.keep import Keeper
from tfobs.runtime.windows import Finish, OpenWindow, StepWorkMeter, Windows
from tfobs.summary import ErrorStage, WindowSummary

_log = logging.getLogger(__name__)

# Capture bytes -> summary; `top_n` and `short_gap_s` come from the config.
Reducer = Callable[..., WindowSummary]

# A reduction starts this many of the window's steps after its export, at most
# SETTLE_MAX_S later. TensorFlow's export slows the step it overlaps; the reduction, even
# in the idle-priority helper, slows the steps it runs beside (caches and, on SMT cores,
# execution units shared with training). Started at once, both landed on the same steps:
# the slowest of the three steps after a 5-step window was 1.45x the median step
# (median over windows), 1.17x with the reduction 4 steps later (benchmarks/RESULTS.md).
SETTLE_STEPS = 4
SETTLE_MAX_S = 0.5


class TooLarge(Exception):
    """The capture has more events than max_capture_events."""


class ReduceThread:
    def __init__(self, config: Config, windows: Windows, reduce_queue: ReduceQueue,
                 sinks: Sequence[WindowSink], health: HealthLedger, failures: Failures,
                 step_work: StepWorkMeter, finish: Finish, reducer: Reducer | None,
                 worker: ReduceHelper | None = None,
                 keeper: Keeper | None = None) -> None:
        self._config = config
        self._w = windows
        self._queue = reduce_queue
        self._sinks = tuple(sinks)
        self._health, self._failures, self._finish = health, failures, finish
        self._step_work = step_work
        self._reducer = reducer
        self.worker = worker  # None: reduce in this thread
        self._said_fallback = Once()
        self._keeper = keeper
        self.last_summary: WindowSummary | None = None
        self.thread = threading.Thread(target=self._run, name="tfobs-reduce", daemon=True)

    def _run(self) -> None:
        if self.worker is not None:
            try:
                self.worker.ensure_started()  # at enable(): the first window waits for none
            except CannotStart as exc:
                self._fallback(exc)
            except HelperFailed as exc:
                if not self._w.stopping:  # disable() during the helper's start is no fault
                    self._failures.report("reduce_helper", exc)
        if self._reducer is None and self.worker is None:
            _warm_reducer()
        while True:
            item = self._queue.get()
            if item is None:
                return
            window, result = item
            try:
                self._reduce(window, result)
            except Exception as exc:
                self._failures.report("reduce", exc)
            finally:
                if result.folder:  # the capture left on disk for the helper
                    shutil.rmtree(result.folder, ignore_errors=True)
                self._w.release(window)

    def _reduce(self, window: OpenWindow, result: CaptureResult) -> None:
        record, budget = window.record, self._w.budget
        self._let_steps_pass(window)
        t0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            summary = self._reduce_capture(result)
        except TooLarge as exc:
            record.reduce_s = time.perf_counter() - t0
            budget.charge(background_s=self._cpu_since(cpu0), steps_s=self._step_work.take())
            self._finish(record, "dropped_too_large", str(exc))
            return
        except Exception as exc:
            record.reduce_s = time.perf_counter() - t0
            budget.charge(background_s=self._cpu_since(cpu0), steps_s=self._step_work.take())
            if self._w.stopping:  # the helper was stopped under it: dropped, not failed
                self._health.count_dropped("window")
                return
            # The helper's own faults (died, hung, out of memory) vs a capture that does not
            # reduce (counted as before, wherever it ran).
            helper = isinstance(exc, HelperFailed) and exc.kind != "error"
            stage: ErrorStage = "reduce_helper" if helper else "reduce"
            self._failures.report(stage, exc)
            self._finish(record, "failed", f"reduction failed: {exc}")
            return
        # A capture without the profiler's start time (TensorFlow 2.16) counts its times
        # from that start: the window's own start puts its steps and spans on the wall clock.
        summary = summary.placed_at(record.start_ns)
        record.reduce_s = time.perf_counter() - t0
        reduce_cpu_s = self._cpu_since(cpu0)
        if self._keeper is not None and not self._w.stopping:
            # Before the sinks publish, so the window's span carries the kept path.
            reduce_cpu_s += self._keeper.keep(summary, record, result.data, result.path)
        record.background_cpu_s += reduce_cpu_s
        budget.charge(background_s=reduce_cpu_s, steps_s=self._step_work.take())
        if self._w.stopping:  # reduced, but the sinks are closing
            self._health.count_dropped("window")
            return
        captured = summary.steps.count > 0
        if captured:
            for sink in self._sinks:
                try:
                    sink.publish(summary, record)
                except Exception as exc:
                    self._failures.report(sink.stage, exc)
        self.last_summary = summary
        self._health.observe_capture(record.capture_s, record.capture_bytes)
        self._health.observe_reduce(record.reduce_s)
        if captured:
            self._finish(record, "captured", "")
        else:
            self._finish(record, "empty", summary.steps.note)

    def _let_steps_pass(self, window: OpenWindow) -> None:
        """Wait SETTLE_STEPS of the window's own steps (not past `disable()`)."""
        rec = window.record
        steps = rec.last_step - rec.first_step + 1
        if rec.first_step < 0 or steps <= 0 or rec.end_ns <= rec.start_ns:
            return  # no steps traced (an on-demand capture between steps): nothing to wait for
        deadline = time.monotonic() + min(
            SETTLE_STEPS * (rec.end_ns - rec.start_ns) / 1e9 / steps, SETTLE_MAX_S)
        while not self._w.stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.02))

    def _cpu_since(self, thread_cpu0: float) -> float:
        """This thread's CPU since `thread_cpu0`, plus the helper's since the last call."""
        helper = self.worker.take_cpu() if self.worker is not None else 0.0
        return time.thread_time() - thread_cpu0 + helper

    def _reduce_capture(self, result: CaptureResult) -> WindowSummary:
        cfg, worker = self._config, self.worker
        if result.path and worker is not None:
            try:
                summary = worker.reduce(result.path, top_n=cfg.trace_top_n,
                                        short_gap_s=cfg.short_gap_s,
                                        max_top_events=cfg.trace_max_spans,
                                        max_events=cfg.max_capture_events)
                return WindowSummary.from_dict(summary)
            except CannotStart as exc:
                self._fallback(exc)
            except HelperFailed as exc:
                if exc.kind == "too_large":
                    raise TooLarge(str(exc)) from exc
                raise
        data = result.data
        if result.path:  # no helper: read it here
            with open(result.path, "rb") as fh:
                data = fh.read()
        return self._reduce_bytes(data)

    def _fallback(self, exc: Exception) -> None:
        if self._said_fallback.first():
            _log.warning("tfobs: %s; reducing captures in the training process instead "
                         "(reduce_in='thread')", exc)

    def stop_worker(self, timeout_s: float) -> None:
        if self.worker is not None:
            self.worker.stop(timeout_s)

    def _reduce_bytes(self, data: bytes) -> WindowSummary:
        cfg = self._config
        if self._reducer is not None:
            return self._reducer(data, top_n=cfg.trace_top_n, short_gap_s=cfg.short_gap_s,
                                 max_top_events=cfg.trace_max_spans)
        from tfobs.analysis.pipeline import reduce_xspace
        from tfobs.xspace.reader import parse

        space = parse(data)
        count = space.event_count()
        if count > cfg.max_capture_events:
            raise TooLarge(f"capture has {count} events, over max_capture_events="
                           f"{cfg.max_capture_events}")
        return reduce_xspace(space, top_n=cfg.trace_top_n, short_gap_s=cfg.short_gap_s,
                             max_top_events=cfg.trace_max_spans)


def _warm_reducer() -> None:
    """Import the reduction now, while the job starts, so the first window costs what
    later ones do (the imports take about 0.25 s of CPU)."""
    try:
        import tfobs.analysis.pipeline
        import tfobs.xspace.reader  # noqa: F401
    except Exception:  # reported by the first reduction that needs them
        _log.debug("tfobs could not import its reduction", exc_info=True)


__all__ = ["ReduceThread", "Reducer", "TooLarge"]
