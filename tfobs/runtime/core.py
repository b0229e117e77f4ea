"""`Runtime`: one tfobs instance in a training process, and the handle `enable()` returns.

It wires the parts given at construction (sinks, step sink, samplers, health ledger) to the
three threads: the training thread's hot path (`windows.py`), `tfobs-capture`
(`capture_thread.py`) and `tfobs-reduce` (`reduce_thread.py`), records each window's end,
and stops everything within one deadline.
"""

from __future__ import annotations

import glob
import logging
import os
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tfobs.capture import framework, markers
from tfobs.capture.folder_cleanup import DIR_PREFIX, owner
from tfobs.capture.schedule import Budget, Policy
from tfobs.capture.session import ProfilerSlot
from tfobs.config import Config
from tfobs.export.sinks import StepSink, WindowSink
from tfobs.health import HealthLedger
from tfobs.identity import runs_steps
from tfobs.once import Once, OncePer
from tfobs.reduce.helper import ReduceHelper, data_limit_bytes
from tfobs.runtime import progress
from tfobs.runtime.capture_thread import QUEUE_SIZE, CaptureThread, ReduceQueue
from tfobs.runtime.failures import Failures
from tfobs.runtime.info import info_labels
from tfobs.runtime.keep import Keeper
from tfobs.runtime.reduce_thread import Reducer, ReduceThread
from tfobs.runtime.windows import StepWorkMeter, Windows
from tfobs.sources.nvml import NvmlSampler
from tfobs.sources.tfmemory import TfMemorySampler
from tfobs.summary import Outcome, WindowSummary
from tfobs.window import WindowRecord

_log = logging.getLogger(__name__)

# Called after each window with its record, and its summary when it was reduced.
Listener = Callable[[WindowRecord, "WindowSummary | None"], None]


@dataclass(frozen=True)
class Sources:
    """The samplers between windows; each counts its own failures in the health ledger."""

    nvml: NvmlSampler | None = None
    tfmemory: TfMemorySampler | None = None  # started after the first step


class Runtime:
    """The running tfobs of this process, as returned by `tfobs.enable()`.

    Read: `identity` (the worker's labels), `health` (windows by outcome, errors, drops: the
    figures `/metrics` serves),
    `last_summary` / `last_record` (the latest window), `metrics_url` / `metrics_port`,
    `config`. Act: `capture_now()`, `wait_idle()`, `train_end()`, `add_listener()`.
    `tfobs.disable()` stops it.
    """

    def __init__(
        self,
        config: Config,
        *,
        health: HealthLedger | None = None,
        sinks: Sequence[WindowSink] = (),
        step_sink: StepSink | None = None,
        sources: Sources = Sources(),
        metrics_url: str = "",
        metrics_port: int = -1,
        reducer: Reducer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.identity = config.identity()  # tf_job, tf_task, tf_cluster, local_rank
        self.health = health if health is not None else HealthLedger(info_labels(False))
        self.sinks = tuple(sinks)
        self.sources = sources
        self.metrics_url = metrics_url  # "" when the metrics server is off
        self.metrics_port = metrics_port  # the port taken (also for metrics_port=0); -1: off
        self.policy = Policy.from_config(config)
        self.budget = Budget(self.policy, clock)
        self.slot = ProfilerSlot.from_config(config)
        self.last_record: WindowRecord | None = None
        self._listeners: list[Listener] = []
        self._failures = Failures(self.health)
        work = StepWorkMeter()
        self._windows = Windows(self.policy, self.budget, self.slot, self.health,
                                self._failures, step_sink, self._finish,
                                runs_steps=runs_steps(self.identity))
        self._no_keep_dir_said = Once()  # a script may ask again and again
        self._said = OncePer()  # outcomes the job's log has had a line for
        self._refusal_said = Once()  # capture_now() said no, and the log said why
        self.keeper = (Keeper(config, self.health, self._failures, self.identity)
                       if config.keep_dir else None)
        reduce_queue: ReduceQueue = queue.Queue(maxsize=QUEUE_SIZE)
        self._queue = reduce_queue
        # An injected reducer (tests) runs in-process; else the helper process reduces.
        worker = None
        if reducer is None and config.reduce_in == "process":
            worker = ReduceHelper(data_limit=data_limit_bytes(config.max_capture_bytes))
        self._capture = CaptureThread(self._windows, reduce_queue, self.health, self._failures,
                                      step_sink, work, self._finish, self._start_tf_parts,
                                      hand_over_file=worker is not None,
                                      tick=self._watch_imports)
        self._reduce = ReduceThread(config, self._windows, reduce_queue, self.sinks,
                                    self.health, self._failures, work, self._finish, reducer,
                                    worker, self.keeper)
        self.pid = os.getpid()
        self.running = False
        self._stopped = False
        self.framework: framework.Framework | None = None  # whose profiler, once known
        self._framework_lock = threading.Lock()
        self._framework_said = Once()
        self._hooked: list[Callable[[], None]] = []  # how to undo each framework hook
        # Keras's fit is wrapped as the job imports Keras (`_watch_both`), not when the
        # framework is decided: that may be at a window's first step, on the training thread.
        self._fit_watched = False
        self.slot.resolve = self.resolve_framework
        # The training thread's hooks (markers.StepHooks), bound once.
        self.step_begin = self._windows.step_begin
        self.step_end = self._windows.step_end

    # -- handle -------------------------------------------------------------------------

    @property
    def last_summary(self) -> WindowSummary | None:
        """The latest reduced window's summary (None before the first)."""
        return self._reduce.last_summary

    @property
    def idle(self) -> bool:
        """True when no window is tracing, exporting or reducing."""
        return self._windows.idle

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no window is tracing, exporting or reducing; True when idle."""
        return self._windows.wait_idle(timeout_s)

    def capture_now(self, keep: bool = False) -> bool:
        """Ask for a window at the next step; False when the budget or a window says no.
        `keep`: also keep its capture in `keep_dir` (logged and ignored when it is unset)."""
        if keep and self.keeper is None and self._no_keep_dir_said.first():
            _log.warning("tfobs: capture_now(keep=True) but keep_dir (TFOBS_KEEP_DIR) is not "
                         "set; the window is captured, not kept")
        granted = self.running and self._windows.request(keep and self.keeper is not None)
        if granted:
            self._refusal_said.reset()
        elif self._refusal_said.first():  # once until granted: a script may ask every step
            progress.say(progress.refused(self))  # a notebook user sees why, and when
        return granted

    def next_scheduled_step(self) -> int:
        """The step the next scheduled window opens at (-1: none scheduled here)."""
        step = self._windows.next_start
        return step if step < sys.maxsize else -1

    def train_end(self) -> None:
        """Training stopped: close an open window now instead of at its cap."""
        self._windows.train_end()

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(record, summary)` after each window (from a tfobs thread)."""
        self._listeners.append(fn)

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Runtime:
        from tfobs.capture.folder_cleanup import start_kill_cleaner, sweep_stale_dirs

        sweep_stale_dirs(self.slot.capture_dir)
        start_kill_cleaner(self.slot.capture_dir)  # removes our folders even after kill -9
        # A runtime judges the job afresh: an annotation seen under an earlier runtime of
        # the process (enable, disable, enable) says nothing of what runs now.
        markers.marked_by = None
        decided = framework.decided_at_enable(self.config.framework)
        if decided is not None:
            self._use_framework(decided)
        else:  # both installed and not settled yet: decide at the first step or window
            self._watch_both()
        self._capture.thread.start()
        self._reduce.thread.start()
        markers.set_hooks(self)
        self.running = True
        return self

    # -- which framework's profiler -------------------------------------------------------

    def resolve_framework(self) -> framework.Backend | None:
        """The framework's profiler backend, chosen now if it was not yet (any thread).
        Where another thread has chosen the framework and is making its backend (the
        capture thread's import watch), `_use_framework` waits for it on its lock, so a
        window opening now gets that backend rather than none."""
        if self.slot.backend is None:
            name = (self.framework or framework.choose(markers.marked_by)
                    or framework.installed_default())
            if name is not None:
                self._use_framework(name)
        return self.slot.backend

    def _watch_imports(self) -> None:
        """Capture thread, once a second while the framework is unknown: chosen as soon as
        what the job runs settles it (`framework.settled`); else when a window opens."""
        if self.framework is None and not self._stopped:
            name = framework.settled(markers.marked_by)
            if name is not None:
                self._use_framework(name)

    def _watch_both(self) -> None:
        """Both frameworks installed, which one unsettled: wrap Keras's fit and JAX's step
        annotation the moment each is imported (now, if it is), so the job's first steps
        are seen (and say which framework it trains with)."""
        from tfobs.capture import import_watch

        self._fit_watched = True
        for module in ("keras", "tf_keras"):
            import_watch.when_imported(module, self._install_fit_hooks)
        import_watch.when_imported("jax", self._install_jax_steps)
        # The job's own TensorFlow profiling pre-empts tfobs's windows from the start, as
        # where TensorFlow is decided at enable(): a JAX job is unaffected by these.
        import_watch.when_imported("tensorflow", self._install_tf_profiler_hooks)
        self._hooked.append(import_watch.forget)

    def _install_tf_profiler_hooks(self) -> None:
        if self._stopped:
            return
        try:  # no lock: called while importing TensorFlow, maybe under _framework_lock
            self._place_tf_profiler_hooks()
            from tfobs.capture import quiet_log

            # TfBackend's one slow part (about 60 ms), done now: the framework may be
            # decided when a window opens, inside a step on the training thread.
            quiet_log.prepare()
        except Exception as exc:  # a hook we cannot place: windows still work
            self._failures.report("capture", exc)

    def _place_tf_profiler_hooks(self) -> None:
        """The job's own tf.profiler sessions and profiler server pre-empt tfobs's windows;
        the job's own step traces (`Trace(..., _r=1)`) are steps (idempotent)."""
        from tfobs.capture import tf_steps
        from tfobs.capture.profiler_server import install_server_hook, uninstall_server_hook
        from tfobs.capture.tf_profiler import install_yield_hook, uninstall_yield_hook

        if uninstall_yield_hook not in self._hooked:
            install_yield_hook(self.slot)
            self._hooked.append(uninstall_yield_hook)
        if uninstall_server_hook not in self._hooked:
            install_server_hook(self.slot)
            self._hooked.append(uninstall_server_hook)
        if self.framework != "jax" and tf_steps.uninstall not in self._hooked:
            tf_steps.install()
            self._hooked.append(tf_steps.uninstall)

    def _install_fit_hooks(self) -> None:
        if self._stopped:
            return
        markers.install_fit_hooks(self.framework)
        if markers.uninstall_fit_hooks not in self._hooked:
            self._hooked.append(markers.uninstall_fit_hooks)

    def _install_jax_steps(self) -> None:
        from tfobs.capture import jax_steps

        if self._stopped or self.framework == "tensorflow":
            return
        try:
            if jax_steps.install() and jax_steps.uninstall not in self._hooked:
                self._hooked.append(jax_steps.uninstall)
        except Exception as exc:
            self._failures.report("capture", exc)

    def _use_framework(self, name: framework.Framework) -> None:
        with self._framework_lock:
            if self.framework is not None:
                return
            self.framework = name
            try:
                backend = framework.backend(name)
            except Exception as exc:  # not installed, or broken: no windows, training goes on
                if self._framework_said.first():
                    _log.warning("tfobs: no windows: %s profiler unavailable (%s); fix: %s",
                                 name, exc, framework.MISSING_FIX[name])
                self._failures.report("capture", exc)
                return
            self.slot.backend = backend
            markers.set_backend(backend)
            self.health.set_info({"framework": name})
            try:
                if name == "jax":
                    self._hook_jax()
                else:
                    self._hook_tensorflow()
            except Exception as exc:  # a hook we cannot place: windows still work
                self._failures.report("capture", exc)

    def _hook_tensorflow(self) -> None:
        self._place_tf_profiler_hooks()
        if not self._fit_watched:
            self._install_fit_hooks()

    def _hook_jax(self) -> None:
        from tfobs.capture import import_watch, jax_profiler

        jax_profiler.install_yield_hook(self.slot)
        self._hooked.append(jax_profiler.uninstall_yield_hook)
        self._install_jax_steps()
        # Keras 3 on its JAX backend: fit is wrapped once the job imports Keras (never
        # imported here: without KERAS_BACKEND=jax it would load TensorFlow).
        import_watch.when_imported("keras", self._install_fit_hooks)
        # A JAX job fed by tf.data: its waits for batches, which jax.profiler cannot see.
        import_watch.when_imported("tensorflow", self._install_tfdata_wait)
        self._hooked.append(import_watch.forget)

    def _install_tfdata_wait(self) -> None:
        from tfobs.capture import tfdata_wait

        if self._stopped or self.framework != "jax":
            return
        try:
            if tfdata_wait.install() and tfdata_wait.uninstall not in self._hooked:
                self._hooked.append(tfdata_wait.uninstall)
        except Exception as exc:  # windows still work; the wait reads as 'All Others'
            self._failures.report("capture", exc)

    def _unhook(self) -> None:
        while self._hooked:
            undo = self._hooked.pop()
            try:
                undo()
            except Exception as exc:
                self._failures.report("capture", exc)

    def stop(self, timeout_s: float) -> None:
        """Stop within `timeout_s`: drop an open window, finish threads, shut the sinks."""
        if self._stopped:
            return
        self._stopped, self.running = True, False
        deadline = time.monotonic() + max(0.0, timeout_s)
        markers.clear_hooks(self)
        with self._framework_lock:
            self._unhook()
        if markers._backend is self.slot.backend:
            markers.set_backend(None)
        w = self._windows
        w.stopping = True
        if w.inflight is not None:
            w.inflight.close.set()
        self.slot.preempt("tfobs is shutting down", timeout_s=_left(deadline))
        w.wake.set()
        self._put_stop()
        self._reduce.stop_worker(min(0.5, _left(deadline)))
        for thread in (self._capture.thread, self._reduce.thread):
            if thread.is_alive():
                thread.join(_left(deadline))
        for source in (self.sources.nvml, self.sources.tfmemory):
            if source is not None:
                try:
                    source.stop(_left(deadline))
                except Exception as exc:
                    self._failures.report("source", exc)
        for sink in self.sinks:
            try:
                sink.shutdown(_left(deadline))
            except Exception as exc:
                self._failures.report(sink.stage, exc)
        self._remove_own_dirs()

    def after_fork_in_child(self) -> None:
        """The child has none of these threads or sessions: go quiet without touching them."""
        self.running = False
        self._stopped = True
        self._windows.stopping = True
        markers.clear_hooks(self)
        self.slot.forget_after_fork()
        if self._reduce.worker is not None:
            self._reduce.worker.forget_after_fork()

    def _put_stop(self) -> None:
        while True:
            try:
                self._queue.put_nowait(None)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self.health.count_dropped("window")
                except queue.Empty:
                    pass

    def _remove_own_dirs(self) -> None:
        pattern = os.path.join(glob.escape(self.slot.capture_dir), f"{DIR_PREFIX}{owner()}-*")
        for path in glob.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)

    def _start_tf_parts(self) -> bool:
        """Once training runs (TensorFlow set up by the job): TF memory sampler, devices.
        The first step decides the framework where nothing settled it before; False (try
        again) while it is unsettled and no step has run (a JAX job builds its tf.data
        pipeline, which sets TensorFlow up, before its first JAX computation)."""
        if self.framework is None:
            if not self.health.steps:
                return False
            self.resolve_framework()
        tfmemory = self.sources.tfmemory
        if tfmemory is not None and self.framework == "tensorflow":
            try:
                tfmemory.start()
            except Exception as exc:
                self._failures.report("tfmemory", exc)
        self.health.set_info(info_labels(True))
        return True

    # -- each window's end --------------------------------------------------------------

    def _finish(self, record: WindowRecord, outcome: Outcome, reason: str) -> None:
        record.outcome, record.reason = outcome, reason
        self.last_record = record
        exemplar = record.exemplar() if outcome == "captured" else None
        self.health.count_window(outcome, reason, exemplar)
        self.health.set_cost(self.budget.duty_cycle(), self.budget.overhead())
        if self.config.verbose:
            _log.info("tfobs window %d: %s %s (steps %d-%d, capture %.3fs, reduce %.3fs)%s",
                      record.index, outcome, reason, record.first_step, record.last_step,
                      record.capture_s, record.reduce_s,
                      f" {record.cut}" if record.cut else "")
        summary = self.last_summary if outcome in ("captured", "empty") else None
        try:
            line = progress.window_line(self, record, summary, self._said)
        except Exception as exc:
            line = ""
            self._failures.report("listener", exc)
        if line:
            progress.say(line)
        for fn in list(self._listeners):
            try:
                fn(record, summary)
            except Exception as exc:
                self._failures.report("listener", exc)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())
