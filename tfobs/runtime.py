"""The running part of tfobs inside a training job: lifecycle, threads, wiring.

Threads (named, daemon, all owned here):
* the training thread calls `step_begin`/`step_end` through the step markers. It only
  compares integers, and at a window boundary starts the profiler (0.1-1 ms) so windows
  begin exactly on a step;
* `tfobs-capture` waits for the window to fill (or its time cap), exports the capture
  (`ProfilerSlot.finish`, GIL released) and hands the bytes to a bounded queue that drops and
  counts when full;
* `tfobs-reduce` runs at a lower OS priority (setpriority on its own thread id: Linux nice
  values are per thread) and turns bytes into a `WindowSummary`, publishes it to the
  exporters, and charges the window's cost to the duty-cycle budget.

Nothing here raises into training code: every exporter call is wrapped and counted as
`tfobs_errors_total{stage}`. `disable()` (also at exit) stops everything within a deadline.
"""

from __future__ import annotations

import atexit
import logging
import os
import platform
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfobs.capture import markers
from tfobs.capture.schedule import Budget, Policy, next_window_start, window_full
from tfobs.capture.session import DIR_PREFIX, CaptureResult, ProfilerSlot
from tfobs.config import Config
from tfobs.errors import ConfigError
from tfobs.summary import WindowSummary
from tfobs.window import WindowRecord

_log = logging.getLogger("tfobs")

QUEUE_SIZE = 2  # captures waiting for reduction; the budget keeps it from filling
REDUCE_NICE = 10
SOURCES_CHECK_S = 1.0  # how often samplers' failure counts reach tfobs_errors_total
_STOP = object()

Listener = Callable[[WindowRecord, "WindowSummary | None"], None]


@dataclass
class Health:
    """tfobs's own counters, kept whether or not an exporter is attached."""

    steps: int = 0
    windows: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    last_reason: str = ""

    def bump(self, table: dict[str, int], key: str, n: int = 1) -> None:
        table[key] = table.get(key, 0) + n


@dataclass
class _OpenWindow:
    record: WindowRecord
    opened_at: float  # time.monotonic()
    first_step: int
    close: threading.Event = field(default_factory=threading.Event)
    captured: bool = False  # the profiler session is finished; reduction may still run


def _lower_this_thread_priority(nice: int) -> None:
    """Lower only the calling thread's CPU priority (Linux: a TID is a PRIO_PROCESS id)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):
        pass  # not Linux, or not permitted: run at normal priority


class Runtime:
    """One tfobs instance in a training process. Use `tfobs.enable()` rather than this."""

    def __init__(
        self,
        config: Config,
        *,
        prometheus: Any = None,
        otel: Any = None,
        sources: tuple[Any, Any] | None = None,
        reducer: Callable[..., WindowSummary] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.identity = config.identity()
        self.policy = Policy.from_config(config)
        self.budget = Budget(self.policy, clock)
        self.clock = clock
        self.health = Health()
        self.prometheus = prometheus
        self.otel = otel
        self.sources = sources
        self._reducer = reducer
        self.slot = ProfilerSlot(
            config.resolved_capture_dir(),
            host_tracer_level=config.host_tracer_level,
            device_tracer_level=config.device_tracer_level,
            python_tracer_level=config.python_tracer_level,
            max_capture_bytes=config.max_capture_bytes,
        )
        self.slot.on_preempt = self.train_end  # the window is gone: stop waiting for it
        self.last_summary: WindowSummary | None = None
        self.last_record: WindowRecord | None = None
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._window: _OpenWindow | None = None  # tracing now
        self._inflight: _OpenWindow | None = None  # tracing, exporting or reducing
        self._next_start = next_window_start(0, self.policy)
        self._on_demand = False
        self._index = 0
        self._own_charged = markers.own_seconds()
        self._step_sink: Callable[[float], None] | None = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_SIZE)
        self._wake = threading.Event()
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._pid = os.getpid()
        self._logged: set[str] = set()
        self._source_errors_seen: dict[str, int] = {}
        # Device queries initialise TensorFlow's runtime, after which device configuration
        # and tf.distribute strategies fail: they wait until training has run a step.
        self._tf_parts_started = False
        self.running = False
        self._stopped = False

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> Runtime:
        from tfobs.capture.session import (
            install_yield_hook,
            start_kill_cleaner,
            sweep_stale_dirs,
        )

        sweep_stale_dirs(self.slot.capture_dir)
        start_kill_cleaner(self.slot.capture_dir)
        install_yield_hook(self.slot)
        self._call("export_prometheus", "set_capture_request_handler", self.capture_now)
        self._call("export_prometheus", "set_info", **info_labels(self.config, self.identity))
        if self.sources is not None:
            self._call("export_prometheus", "set_sources", *self.sources)
        if hasattr(self.prometheus, "step_sink"):
            self._step_sink = self._call("export_prometheus", "step_sink")
        for name, target in (("tfobs-capture", self._capture_loop),
                             ("tfobs-reduce", self._reduce_loop)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        markers.set_hooks(self)
        markers.install_fit_hooks()
        self.running = True
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop within `timeout_s`: drop an open window, finish threads, shut exporters."""
        if self._stopped:
            return
        self._stopped = True
        self.running = False
        deadline = time.monotonic() + max(0.0, timeout_s)
        if markers._hooks is self:
            markers.set_hooks(None)
        markers.uninstall_fit_hooks()
        from tfobs.capture.session import uninstall_yield_hook

        uninstall_yield_hook()
        self._stopping = True
        window = self._inflight
        if window is not None:
            window.close.set()
        self.slot.preempt("tfobs is shutting down", timeout_s=_left(deadline))
        self._wake.set()
        self._put_stop()
        for thread in self._threads:
            thread.join(_left(deadline))
        if self.sources is not None:
            for source in self.sources:
                if source is not None:
                    self._call_on(source, "source", "stop", _left(deadline))
            self._forward_source_errors()
        for exporter, stage in ((self.otel, "export_otel"), (self.prometheus, "export_prometheus")):
            if exporter is not None:
                self._call_on(exporter, stage, "shutdown", _left(deadline))
                if exporter is self.otel:  # spans unsent at shutdown are dropped: count them
                    self._forward_dropped_spans()
        self._remove_own_dirs()

    def _put_stop(self) -> None:
        while True:
            try:
                self._queue.put_nowait(_STOP)
                return
            except queue.Full:
                try:
                    self._queue.get_nowait()
                    self._count_dropped("window")
                except queue.Empty:
                    pass

    def _remove_own_dirs(self) -> None:
        import glob

        pattern = os.path.join(self.slot.capture_dir, f"{DIR_PREFIX}{self._pid}-*")
        for path in glob.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)

    def after_fork_in_child(self) -> None:
        """The child has none of these threads or sessions: go quiet without touching them."""
        from tfobs.capture.session import forget_after_fork

        self.running = False
        self._stopping = True
        self._stopped = True
        self._threads = []
        if markers._hooks is self:
            markers.set_hooks(None)
        forget_after_fork(self.slot)

    def add_listener(self, fn: Listener) -> None:
        """Call `fn(record, summary)` after each window (from the reduction thread)."""
        self._listeners.append(fn)

    # -- training thread (hot path) -----------------------------------------------------

    def step_begin(self, step_num: int) -> None:
        if self._window is not None or (step_num < self._next_start and not self._on_demand):
            return
        try:
            self._open(step_num)
        except Exception as exc:  # never into training
            self._error("schedule", exc)

    def step_end(self, step_num: int, duration_s: float) -> None:
        self.health.steps += 1
        window = self._window
        exemplar = None
        if window is not None:
            window.record.last_step = step_num
            exemplar = window.record.exemplar(step_num)
            if window_full(window.first_step, step_num, self.policy):
                self._window = None
                window.close.set()
        sink = self._step_sink
        if sink is not None and exemplar is None:
            sink(duration_s)  # no Python frame: this runs at every step
            return
        prom = self.prometheus
        if prom is not None:
            try:
                prom.observe_step(duration_s, exemplar)
            except Exception as exc:
                self._error("export_prometheus", exc)

    def _open(self, step_num: int) -> None:
        aligned = step_num >= self._next_start
        if aligned:
            self._next_start = next_window_start(step_num + 1, self.policy)
        if self._stopping:
            return
        on_demand, self._on_demand = self._on_demand, False
        if not on_demand and (self._inflight is not None or not self.budget.allows()):
            self._count_window("skipped_budget", reason="duty-cycle budget")
            return
        if self._inflight is not None:  # on-demand while a window is still being reduced
            self._on_demand = True
            return
        record = WindowRecord(index=self._index, on_demand=on_demand)
        self._index += 1
        refused = self.slot.start()
        if refused is not None:
            if refused.outcome == "failed":
                self._error("capture", refused.reason)
            self._finish_record(record, refused.outcome, refused.reason)
            return
        record.start_ns = time.time_ns()
        record.first_step = step_num
        window = _OpenWindow(record, time.monotonic(), step_num)
        with self._lock:
            self._inflight = window
            self._window = window
        self._wake.set()

    def train_end(self) -> None:
        """Training stopped (end of fit): close an open window now instead of at its cap."""
        window = self._inflight
        if window is not None:
            if self._window is window:
                self._window = None
            window.close.set()

    @property
    def idle(self) -> bool:
        """True when no window is tracing, exporting or reducing."""
        return self._inflight is None

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no window is tracing, exporting or reducing; True when idle."""
        deadline = time.monotonic() + timeout_s
        while self._inflight is not None:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    # -- on demand ----------------------------------------------------------------------

    def capture_now(self) -> bool:
        """Ask for a window at the next step; False when the budget or a window says no."""
        if not self.running or self._inflight is not None or not self.budget.allows():
            return False
        if self._on_demand:  # one is already pending: say so rather than merge into it
            return False
        self._on_demand = True
        return True

    # -- capture thread -----------------------------------------------------------------

    def _capture_loop(self) -> None:
        while not self._stopping:
            woke = self._wake.wait(SOURCES_CHECK_S)
            if not self._tf_parts_started and self.health.steps > 0:
                self._start_tf_parts()
            self._forward_source_errors()  # samplers fail with or without windows
            self._call("export_prometheus", "fold_steps")  # bounds the steps waiting there
            if not woke:
                continue
            self._wake.clear()
            window = self._inflight
            if window is None or window.captured:  # stop() wakes us during a reduction too
                continue
            try:
                self._capture(window)
            except Exception as exc:  # a bug here must not kill the thread
                self._error("capture", exc)
                self._release(window)

    def _start_tf_parts(self) -> None:
        """Once training runs (TF initialised by the job): TF memory sampler, device info."""
        self._tf_parts_started = True
        tfmemory = self.sources[1] if self.sources is not None else None
        if tfmemory is not None:
            self._call_on(tfmemory, "tfmemory", "start")
        self._call("export_prometheus", "set_info", **info_labels(self.config, self.identity))

    def _capture(self, window: _OpenWindow) -> None:
        window.captured = True
        left = window.opened_at + self.policy.window_max_s - time.monotonic()
        self.slot.wait_window(window.close, left)  # filled, time cap, or cut short for cost
        with self._lock:
            if self._window is window:
                self._window = None
        record = window.record
        record.end_ns = time.time_ns()
        cpu0 = time.thread_time()
        result = self.slot.finish()
        export_cpu_s = time.thread_time() - cpu0
        record.capture_s = result.export_s
        record.background_cpu_s = export_cpu_s
        record.capture_bytes = result.nbytes
        # Background work is charged by CPU time, not wall time: a niced thread that waits
        # for a core takes nothing from training meanwhile.
        self.budget.charge(active_s=result.active_s, background_s=export_cpu_s,
                           steps_s=self._step_work_to_charge())
        if self._stopping:  # shut down mid-window: no time left to reduce it
            self._count_dropped("window")
            self._release(window)
            return
        if not result.ok:
            if result.outcome == "failed":
                self._error("capture", result.reason)
            if result.nbytes:
                self._call("export_prometheus", "observe_capture", result.export_s,
                           result.nbytes)
            self._finish_record(record, result.outcome, result.reason)
            self._release(window)
            return
        try:
            self._queue.put_nowait((window, result))
        except queue.Full:
            self._count_dropped("window")
            self._finish_record(record, "failed", "reduction queue full")
            self._release(window)

    def _step_work_to_charge(self) -> float:
        """Seconds of per-step work (markers, histogram) since the budget last heard of it."""
        with self._lock:
            own = markers.own_seconds()
            new, self._own_charged = own - self._own_charged, own
        return max(0.0, new)

    def _release(self, window: _OpenWindow) -> None:
        with self._lock:
            if self._inflight is window:
                self._inflight = None
            if self._window is window:
                self._window = None

    # -- reduction thread ---------------------------------------------------------------

    def _reduce_loop(self) -> None:
        _lower_this_thread_priority(REDUCE_NICE)
        if self._reducer is None:
            _warm_reducer()
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            window, result = item
            try:
                self._reduce(window, result)
            except Exception as exc:
                self._error("reduce", exc)
            finally:
                self._release(window)

    def _reduce(self, window: _OpenWindow, result: CaptureResult) -> None:
        record = window.record
        t0 = time.perf_counter()
        cpu0 = time.thread_time()
        try:
            summary = self._reduce_bytes(result.data)
        except _TooLarge as exc:
            record.reduce_s = time.perf_counter() - t0
            self._finish_record(record, "dropped_too_large", str(exc))
            return
        except Exception as exc:
            record.reduce_s = time.perf_counter() - t0
            self.budget.charge(background_s=time.thread_time() - cpu0,
                               steps_s=self._step_work_to_charge())
            self._error("reduce", exc)
            self._finish_record(record, "failed", f"reduction failed: {exc}")
            return
        record.reduce_s = time.perf_counter() - t0
        reduce_cpu_s = time.thread_time() - cpu0
        record.background_cpu_s += reduce_cpu_s
        self.budget.charge(background_s=reduce_cpu_s, steps_s=self._step_work_to_charge())
        if self._stopping:  # reduced, but the exporters are closing
            self._count_dropped("window")
            return
        outcome = "captured" if summary.steps.count > 0 else "empty"
        if outcome == "captured":
            self._call("export_prometheus", "publish", summary, record)
            if self.otel is not None:
                self._call_on(self.otel, "export_otel", "publish", summary, record)
                self._forward_dropped_spans()
        self.last_summary = summary
        self._call("export_prometheus", "observe_capture", record.capture_s, record.capture_bytes)
        self._call("export_prometheus", "observe_reduce", record.reduce_s)
        self._finish_record(record, outcome, "" if outcome == "captured" else summary.steps.note,
                            summary=summary)

    def _reduce_bytes(self, data: bytes) -> WindowSummary:
        reducer = self._reducer
        if reducer is None:
            from tfobs.analysis import reduce_xspace as reducer
            from tfobs.xspace.reader import parse

            space = parse(data)
            count = space.event_count()
            if count > self.config.max_capture_events:
                raise _TooLarge(f"capture has {count} events, over max_capture_events="
                                f"{self.config.max_capture_events}")
            return reducer(space, top_n=self.config.trace_top_n,
                           short_gap_s=self.config.short_gap_s)
        return reducer(data, top_n=self.config.trace_top_n, short_gap_s=self.config.short_gap_s)

    def _forward_source_errors(self) -> None:
        """NVML / TF memory query failures, counted by the samplers, as errors{stage}."""
        for source, stage in zip(self.sources or (), ("nvml", "tfmemory"), strict=False):
            total = int(getattr(source, "errors", 0) or 0) if source is not None else 0
            new = total - self._source_errors_seen.get(stage, 0)
            if new > 0:
                self._source_errors_seen[stage] = total
                self.health.bump(self.health.errors, stage, new)
                for _ in range(new):
                    self._call("export_prometheus", "count_error", stage)

    def _forward_dropped_spans(self) -> None:
        total = int(getattr(self.otel, "dropped_spans", 0) or 0)
        new = total - getattr(self, "_spans_dropped_seen", 0)
        if new > 0:
            self._spans_dropped_seen = total
            self._count_dropped("spans", new)

    # -- bookkeeping --------------------------------------------------------------------

    def _finish_record(self, record: WindowRecord, outcome: str, reason: str = "",
                       summary: WindowSummary | None = None) -> None:
        record.outcome, record.reason = outcome, reason
        self.last_record = record
        exemplar = record.exemplar() if outcome == "captured" else None
        self._count_window(outcome, reason, exemplar)
        self._call("export_prometheus", "set_cost", self.budget.duty_cycle(),
                   self.budget.overhead())
        if self.config.verbose:
            _log.info("tfobs window %d: %s %s (steps %d-%d, capture %.3fs, reduce %.3fs)",
                      record.index, outcome, reason, record.first_step, record.last_step,
                      record.capture_s, record.reduce_s)
        for fn in list(self._listeners):
            try:
                fn(record, summary)
            except Exception as exc:
                self._error("listener", exc)

    def _count_window(self, outcome: str, reason: str = "",
                      exemplar: dict[str, str] | None = None) -> None:
        self.health.bump(self.health.windows, outcome)
        if reason:
            self.health.last_reason = reason
        self._call("export_prometheus", "count_window", outcome, exemplar)

    def _count_dropped(self, what: str, n: int = 1) -> None:
        self.health.bump(self.health.dropped, what, n)
        self._call("export_prometheus", "count_dropped", what, n)

    def _error(self, stage: str, exc: object) -> None:
        self.health.bump(self.health.errors, stage)
        if stage not in self._logged:  # once per stage: a broken exporter must not flood logs
            self._logged.add(stage)
            _log.warning("tfobs %s error (counted in tfobs_errors_total): %s", stage, exc)
        prom = self.prometheus
        if prom is not None:
            try:
                prom.count_error(stage)
            except Exception:  # the exporter itself is broken: our own count still holds
                pass

    def _call(self, stage: str, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.prometheus is None:
            return None
        return self._call_on(self.prometheus, stage, method, *args, **kwargs)

    def _call_on(self, target: Any, stage: str, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(target, method)(*args, **kwargs)
        except Exception as exc:
            self._error(stage, exc)
            return None


def _warm_reducer() -> None:
    """Import the reduction now, at low priority while the job starts, so the first window
    costs what later ones do (the imports take about 0.25 s of CPU)."""
    try:
        import tfobs.analysis
        import tfobs.xspace.reader  # noqa: F401
    except Exception:  # reported by the first reduction that needs them
        _log.debug("tfobs could not import its reduction", exc_info=True)


class _TooLarge(Exception):
    pass


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def info_labels(config: Config, identity: dict[str, str]) -> dict[str, str]:
    from tfobs import __version__

    labels = {
        "version": __version__,
        "python_version": platform.python_version(),
        "tensorflow_version": "",
        "devices": "",
    }
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        labels["tensorflow_version"] = str(getattr(tf, "__version__", ""))
        try:
            devices = tf.config.list_physical_devices()
            labels["devices"] = ",".join(sorted(d.name.replace("/physical_device:", "/device:")
                                                for d in devices))
        except Exception:
            pass
    return labels


# -- the process-wide instance ------------------------------------------------------------

_instance: Runtime | None = None
_instance_lock = threading.Lock()
_registered = False


def _build(config: Config) -> Runtime:
    identity = config.identity()
    prometheus = None
    try:
        from tfobs.export.prometheus import PrometheusExporter
    except ImportError as exc:
        _log.warning("tfobs: Prometheus exporter unavailable (%s); metrics are not served", exc)
    else:
        prometheus = PrometheusExporter(config, identity)
        prometheus.start()  # a taken port raises ConfigError naming the fix
    otel = None
    if config.tracing_enabled:
        try:
            from tfobs.export.otel import OtelExporter

            otel = OtelExporter(config, resource_attributes(identity))
        except Exception as exc:  # tracing is optional; metrics keep working
            _log.warning("tfobs: OpenTelemetry tracing off: %s", exc)
    return Runtime(config, prometheus=prometheus, otel=otel, sources=_start_sources(config))


def _start_sources(config: Config) -> tuple[Any, Any] | None:
    """NVML starts now (it never touches TensorFlow); the TF memory sampler is created here
    and started by the runtime after the first step."""
    nvml = tfmem = None
    try:
        if config.nvml:
            from tfobs.sources.nvml import NvmlSampler

            nvml = NvmlSampler(interval_s=config.nvml_interval_s)
            nvml.start()
        from tfobs.sources.tfmemory import TfMemorySampler

        tfmem = TfMemorySampler(interval_s=config.nvml_interval_s)
    except Exception as exc:
        _log.debug("tfobs sources: %s", exc)
    return (nvml, tfmem) if (nvml or tfmem) else None


def resource_attributes(identity: dict[str, str]) -> dict[str, Any]:
    """Worker identity and devices; the OTel exporter adds service.name (OTEL_SERVICE_NAME,
    else the script name), host.name and the tfobs version itself."""
    labels = info_labels(Config(), identity)
    attrs: dict[str, Any] = {
        "process.pid": os.getpid(),
        "tf_job": identity["tf_job"],
        "tf_task": identity["tf_task"],
        "devices": [d for d in labels["devices"].split(",") if d],
    }
    if labels["tensorflow_version"]:
        attrs["tensorflow.version"] = labels["tensorflow_version"]
    return attrs


def enable(**options: Any) -> Runtime | None:
    """Start tfobs (idempotent). Bad options raise ConfigError; see README "options"."""
    global _instance
    config = Config.load(**options)
    with _instance_lock:
        if _instance is not None and _instance.running and _instance._pid == os.getpid():
            if options and config != _instance.config:
                _log.warning("tfobs is already enabled; new options are ignored until disable()")
            return _instance
        if not config.enabled:
            return None
        runtime = _build(config)
        try:
            runtime.start()
        except Exception:
            runtime.stop(timeout_s=1.0)
            raise
        _instance = runtime
        _register_process_hooks()
        return runtime


def disable(timeout_s: float = 5.0) -> None:
    global _instance
    with _instance_lock:
        runtime, _instance = _instance, None
    if runtime is not None and runtime._pid == os.getpid():
        runtime.stop(timeout_s)


def capture_now() -> bool:
    runtime = _instance
    return runtime.capture_now() if runtime is not None else False


def current() -> Runtime | None:
    return _instance


def _register_process_hooks() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    atexit.register(_at_exit)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_child)


def _at_exit() -> None:
    try:
        disable(timeout_s=2.0)
    except Exception:  # interpreter is going down: say nothing, leave nothing
        pass


def _after_fork_child() -> None:
    global _instance
    runtime, _instance = _instance, None
    if runtime is not None:
        runtime.after_fork_in_child()


__all__ = ["ConfigError", "Runtime", "capture_now", "current", "disable", "enable"]
