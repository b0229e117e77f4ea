"""`tfobs-capture`: waits for the open window to fill (or its time cap), exports the capture
(`ProfilerSlot.finish`, GIL released) and hands the bytes to the reduction queue, which is
bounded and drops (counted) when full.

It also wakes once a second to tidy the step sink and, after the first step (or once the job
has initialised TensorFlow itself: evaluators run no steps), to start the parts that touch
TensorFlow (the TF memory sampler, the device list): TensorFlow's runtime must be left alone
until the job has configured it.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
from collections.abc import Callable

from tfobs.capture import framework, import_watch, markers
from tfobs.capture.session import CaptureResult
from tfobs.export.sinks import StepSink
from tfobs.health import HealthLedger
from tfobs.once import Once
from tfobs.runtime.failures import Failures
from tfobs.runtime.windows import Finish, OpenWindow, StepWorkMeter, Windows

_log = logging.getLogger(__name__)

TIDY_S = 1.0  # how often the step sink is folded while no window runs
# A job that has initialised TensorFlow but marked no step this long after `enable()` gets
# one warning naming the fix: without steps no window ever opens, and the dashboards stay
# empty with nothing saying why (a custom loop without `tfobs.step`).
NO_STEPS_WARN_S = 120.0
NO_STEPS_MESSAGE = (
    "tfobs has seen no training step in the %.0f s since enable(), and profiles nothing "
    "until one is marked: Keras fit and train_on_batch are marked for you, and so are steps "
    "marked `tf.profiler.experimental.Trace(name, step_num=i, _r=1)`; in any other custom "
    "loop wrap each step in `with tfobs.step(step_num):` (docs/usage.md: Custom loops); "
    "evaluate, "
    "predict and *_on_batch inference are not training steps, and are not profiled")
# The same moment in a job whose steps run in JAX while tfobs profiles TensorFlow (it ran
# TensorFlow before enable(): a JAX job that built its tf.data pipeline first), whose
# profiler sees none of JAX's steps.
JAX_UNDER_TF_MESSAGE = (
    "tfobs has seen no training step in the %.0f s since enable(): this job runs JAX, but "
    "tfobs profiles TensorFlow, which the job ran before enable() (a tf.data pipeline built "
    "first), and TensorFlow's profiler sees none of JAX's steps; fix: "
    "tfobs.enable(framework=\"jax\") or TFOBS_FRAMEWORK=jax (docs/frameworks.md)")
# The same moment in a JAX job (JAX's backend set up, TensorFlow not): a loop that marks no
# step, told JAX's own marker.
JAX_NO_STEPS_MESSAGE = (
    "tfobs has seen no training step in the %.0f s since enable(), and profiles nothing "
    "until one is marked: wrap each step of the loop in "
    "`with jax.profiler.StepTraceAnnotation(\"train\", step_num=i):` (or "
    "`with tfobs.step(i):`), with `jax.block_until_ready` on its result inside it; Keras "
    "fit on the JAX backend is marked for you (docs/frameworks.md: A JAX training loop)")
QUEUE_SIZE = 2  # captures waiting for reduction; the budget keeps it from filling
# A capped window waits this long without a step (none running, none begun) for the
# training thread to end it, before this thread ends it itself.
END_GRACE_S = 2.0
WATCH_END_S = 0.05

ReduceQueue = queue.Queue[tuple[OpenWindow, CaptureResult] | None]  # None: stop


class CaptureThread:
    def __init__(self, windows: Windows, reduce_queue: ReduceQueue, health: HealthLedger,
                 failures: Failures, step_sink: StepSink | None, step_work: StepWorkMeter,
                 finish: Finish, after_first_step: Callable[[], bool],
                 hand_over_file: bool = False, tick: Callable[[], None] | None = None) -> None:
        self._w = windows
        self._queue = reduce_queue
        self._health, self._failures, self._finish = health, failures, finish
        self._sink = step_sink
        self._step_work = step_work
        self._read = not hand_over_file  # False: the reduce helper reads the capture
        self._after_first_step: Callable[[], bool] | None = after_first_step
        self._tick = tick  # once a second (the runtime watches what the job imported)
        self._cut_said = Once()  # later cuts are on each window's record
        self._prepared = False  # the backend's prepare() has run
        # When to say that no step was seen (None: said, a step came, or no steps are run
        # here: parameter servers and evaluators).
        self._no_steps_at: float | None = (
            time.monotonic() + NO_STEPS_WARN_S if windows.runs_steps else None)
        self.thread = threading.Thread(target=self._run, name="tfobs-capture", daemon=True)

    def _run(self) -> None:
        w = self._w
        while not w.stopping:
            woke = w.wake.wait(TIDY_S)
            self._tidy()
            if not woke:
                continue
            w.wake.clear()
            window = w.inflight
            if window is None or window.taken:  # stop() wakes us during a reduction too
                continue
            try:
                self._capture(window)
            except Exception as exc:  # a bug here must not kill the thread
                self._failures.report("capture", exc)
                w.release(window)

    def _tidy(self) -> None:
        if self._tick is not None:
            try:
                self._tick()
            except Exception as exc:
                self._failures.report("capture", exc)
        self._prepare_backend()
        start = self._after_first_step
        if start is not None and (self._health.steps > 0 or _tf_runtime_initialised()):
            self._after_first_step = None
            if start() is False:  # not yet: asked again at the next tidy
                self._after_first_step = start
        self._check_steps_seen()
        if self._sink is not None:
            try:
                self._sink.fold()  # bounds the durations waiting in the sink
            except Exception as exc:
                self._failures.report(self._sink.stage, exc)

    def _prepare_backend(self) -> None:
        """The backend's `prepare()`, once, after the first step, while no window is open
        (its work would be in that window's capture)."""
        if self._prepared or self._health.steps <= 0 or self._w.inflight is not None:
            return
        backend = self._w.slot.backend
        if backend is None:
            return
        self._prepared = True
        try:
            backend.prepare()
        except Exception as exc:  # the first window's end makes it instead
            self._failures.report("capture", exc)

    def _check_steps_seen(self) -> None:
        at = self._no_steps_at
        if at is None:
            return
        if self._health.steps > 0 or markers.any_step_begun():
            self._no_steps_at = None
        elif time.monotonic() >= at:
            tf_ran = _tf_runtime_initialised()
            jax_ran = framework.jax_running()
            if not (tf_ran or jax_ran):  # nothing trains yet (a long data load, imports)
                return
            self._no_steps_at = None
            name = getattr(self._w.slot.backend, "name", None)
            if name == "tensorflow" and jax_ran:
                message = JAX_UNDER_TF_MESSAGE
            elif name == "jax" or (jax_ran and not tf_ran):
                message = JAX_NO_STEPS_MESSAGE
            else:
                message = NO_STEPS_MESSAGE
            _log.warning(message, NO_STEPS_WARN_S)

    def _capture(self, window: OpenWindow) -> None:
        w = self._w
        window.taken = True
        left = window.opened_at + w.policy.window_max_s - time.monotonic()
        # filled, capped, dropped, or cut for what it would cost
        cut = w.slot.wait_window(window.close, left) or window.record.cut
        window.record.cut = cut
        if cut:
            self._health.count_cut(w.slot.cut_cause)
        if cut and w.slot.cut_cause != "time" and self._cut_said.first():
            _log.warning("tfobs window %d %s", window.record.index, cut)
        if not window.close.is_set():
            self._await_end(window)
        w.stop_tracing(window)
        record = window.record
        record.end_ns = time.time_ns()
        watch = w.export_began(window)  # the steps it overlaps steer later windows' length
        cpu0 = time.thread_time()
        result = w.slot.finish(read=self._read)
        export_cpu_s = time.thread_time() - cpu0
        if watch is not None:
            watch.ended = time.monotonic()
        end = w.slot.last_end
        if end is not None and end.at == "capture_thread":  # ended here: no boundary came
            record.set_end(end.at, end.drain_s, end.stop_s, end.thread)
        if record.end_at:
            self._health.observe_window_end(record.end_at, record.end_drain_s,
                                            record.end_stop_s)
        record.capture_s = result.export_s
        record.background_cpu_s = export_cpu_s
        record.capture_bytes = result.nbytes
        # Background work is charged by CPU time, not wall time: while the export waits for
        # a core it takes nothing from training. Ending the window took the training
        # thread's own time (the wait for the device, the stop): charged in full.
        w.budget.charge(active_s=result.active_s, background_s=export_cpu_s,
                        steps_s=self._step_work.take() + record.end_on_training_thread_s)
        if w.stopping:  # shut down mid-window: no time left to reduce it
            self._health.count_dropped("window")
            _remove(result.folder)
            w.release(window)
            return
        if not result.ok:
            if result.outcome == "failed":
                self._failures.report("capture", result.reason)
            if result.nbytes:
                self._health.observe_capture(result.export_s, result.nbytes)
            self._finish(record, result.outcome, result.reason)
            w.release(window)
            return
        try:
            self._queue.put_nowait((window, result))
        except queue.Full:
            _remove(result.folder)
            self._health.count_dropped("window")
            self._finish(record, "failed", "reduction queue full")
            w.release(window)


    def _await_end(self, window: OpenWindow) -> None:
        """The window is over (time cap, memory): ask the training thread to end it at its
        next step boundary, and wait. Only where no boundary comes (the job stopped
        stepping: no step has run for END_GRACE_S) or tracing would outgrow the memory bound
        does this thread end it itself (`ProfilerSlot.finish`), counted as such."""
        w = self._w
        window.end_requested = True
        last_seen, seen_at = w.boundary_at, time.monotonic()
        while not window.close.wait(WATCH_END_S):
            if w.stopping:
                return
            now = time.monotonic()
            if w.boundary_at != last_seen or w.in_step:
                last_seen, seen_at = w.boundary_at, now
            if now - seen_at >= END_GRACE_S or w.slot.over_hard_bound():
                return


def _tf_runtime_initialised() -> bool:
    """True once the job itself has initialised TensorFlow's runtime (its device setup is
    over): a process that runs no steps (an evaluator) still gets its TF memory samples."""
    if not import_watch.imported("tensorflow"):  # importing it from this thread while the
        return False  # job's thread imports it would deadlock on the module locks
    try:
        from tensorflow.python.eager import context

        return bool(context.context()._initialized)
    except Exception:  # a TensorFlow without this private flag: wait for a step instead
        _log.debug("tfobs: TensorFlow's initialised flag unreadable", exc_info=True)
        return False


def _remove(folder: str) -> None:
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
