"""The process-wide tfobs: `enable()` builds and starts it, `disable()` (also at exit) stops
it within a deadline, and a forked child forgets it without touching the parent's threads.

`_build` is the one place the parts are made and handed to each other, in the direction
of the data: health ledger -> samplers -> exporters -> runtime.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING

from tfobs import forks
from tfobs.capture.framework import installed
from tfobs.config import Config
from tfobs.export.sinks import StepSink, WindowSink
from tfobs.health import HealthLedger
from tfobs.runtime import progress
from tfobs.runtime.core import Runtime, Sources
from tfobs.runtime.info import info_labels, worker_resource

if TYPE_CHECKING:
    from tfobs.export.prometheus import PrometheusExporter

_log = logging.getLogger(__name__)

_instance: Runtime | None = None
_instance_lock = threading.Lock()
_starting_on: int | None = None  # the thread inside enable_config's start, while it runs
# disable() reached while enable() was starting on the same thread (a signal handler that
# interrupted it): the start's lock is held below it, so the stop follows the start.
_disable_pending: float | None = None  # its timeout_s
_registered = False


def enable_config(config: Config, explicit: bool = True) -> Runtime | None:
    """Start tfobs with `config` (idempotent: a running instance is returned as it is, with
    a line saying so; `explicit`: options were given, so say when they differ)."""
    global _instance, _starting_on
    if _starting_on == threading.get_ident():
        # enable() reached again from inside its own start, on this thread: an import tfobs
        # makes ran the user's code again (a script named like a standard module, http.py).
        # Waiting for the lock this thread holds would hang the job.
        _log.warning("tfobs: enable() was called again while it was starting, on the same "
                     "thread%s; this call is ignored", shadowing_hint())
        return None
    with _instance_lock:
        _starting_on = threading.get_ident()
        try:
            started = _enable_locked(config, explicit)
        finally:
            _starting_on = None
    timeout_s = _take_pending_disable()
    if timeout_s is not None:
        disable(timeout_s)
        return None
    return started


def _take_pending_disable() -> float | None:
    global _disable_pending
    pending, _disable_pending = _disable_pending, None
    return pending


def _enable_locked(config: Config, explicit: bool) -> Runtime | None:
    """enable_config's work, under `_instance_lock`."""
    global _instance
    running = _instance
    if running is not None and running.running and running.pid == os.getpid():
        differ = explicit and config != running.config
        line = progress.again(running, differ)
        if differ:  # a warning: shown even with quiet
            _log.warning(line)
        else:
            progress.say(line)
        return running
    if not config.enabled:
        return None
    progress.configure(config.quiet)
    missing = framework_missing(config.framework)
    if missing:
        _log.warning(missing)
        return None
    runtime = _build(config)
    try:
        runtime.start()
    except Exception:
        runtime.stop(timeout_s=1.0)
        raise
    _instance = runtime
    _register_process_hooks()
    progress.say(progress.started(runtime))
    return runtime


def shadowing_hint() -> str:
    """'' or, where files outside Python's own library were imported under the names of
    its standard modules (a script named http.py beside the training script), the clause
    that names them and the fix."""
    import sysconfig

    roots = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")}
    found = []
    for name in sorted(sys.stdlib_module_names):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None) if module is not None else None
        if path and not any(os.path.realpath(path).startswith(r + os.sep) for r in roots):
            found.append(f"{path} is imported as Python's '{name}' module")
    if not found:
        return ""
    return ": " + "; ".join(found) + " (rename it: a file named like a standard module " \
        "beside the script shadows it)"


def framework_missing(framework: str = "auto") -> str:
    """'' when the framework tfobs would profile (the `framework` option; "auto": TensorFlow
    or JAX) can be imported here, else the one line that says how to fix it (found without
    importing it: `enable()` initialises nothing in either)."""
    wanted = ("tensorflow", "jax") if framework == "auto" else (framework,)
    if any(installed(name) for name in wanted):
        return ""
    if framework == "jax":
        return (f"tfobs: JAX is not installed for this Python ({sys.executable}); tfobs "
                "stays off and training goes on. To profile, install it in the same "
                "environment: pip install 'tfobs[jax]'")
    return (f"tfobs: TensorFlow is not installed for this Python ({sys.executable}); tfobs "
            "stays off and training goes on. To profile, install it in the same environment: "
            "pip install 'tensorflow>=2.16' (or tensorflow-cpu; a JAX job: "
            "pip install 'tfobs[jax]')")


def disable(timeout_s: float = 5.0) -> None:
    """Stop tfobs within `timeout_s`: no thread, server or capture folder is left."""
    global _instance, _disable_pending
    if _starting_on == threading.get_ident():
        # A signal handler that interrupted enable() on this thread: enable() holds the lock
        # below this frame, and waiting for it would hang the job. It stops once started.
        _disable_pending = timeout_s
        return
    with _instance_lock:
        runtime, _instance = _instance, None
    if runtime is None or runtime.pid != os.getpid():
        return
    if not _inside_tfobs(sys._getframe(1)):
        runtime.stop(timeout_s)
        return
    # Called from code that interrupted tfobs's own on this thread (a signal handler that
    # ran while a window was opening): that frame holds a lock the stop takes, and waiting
    # for it here hung the job for good. The stop runs beside it, waited for up to
    # `timeout_s`, and ends once the interrupted code goes on.
    worker = threading.Thread(target=runtime.stop, args=(timeout_s,), name="tfobs-disable",
                              daemon=True)
    worker.start()
    worker.join(timeout_s)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _inside_tfobs(frame: object) -> bool:
    """True when a tfobs frame is on this thread's stack below the caller of disable() (the
    tfobs frames that called it, `tfobs.disable` itself, left out)."""
    f = frame
    while f is not None and f.f_code.co_filename.startswith(_PACKAGE_DIR):  # type: ignore[attr-defined]
        f = f.f_back  # type: ignore[attr-defined]
    while f is not None:
        if f.f_code.co_filename.startswith(_PACKAGE_DIR):  # type: ignore[attr-defined]
            return True
        f = f.f_back  # type: ignore[attr-defined]
    return False


def capture_now(keep: bool = False) -> bool:
    """Ask the running tfobs for a window at the next step (False when it says no);
    `keep=True` also keeps its capture in `keep_dir` (TensorBoard's layout)."""
    runtime = _instance
    return runtime.capture_now(keep) if runtime is not None else False


def current() -> Runtime | None:
    """The running tfobs of this process, if any."""
    return _instance


def _build(config: Config) -> Runtime:
    health = HealthLedger(info_labels(False))
    sources = _sources(config, health)
    sinks: list[WindowSink] = []
    step_sink: StepSink | None = None
    url, port = "", -1
    try:
        from tfobs.export.prometheus import PrometheusExporter
    except ImportError as exc:
        _log.warning("tfobs: Prometheus exporter unavailable (%s)%s; metrics are not served",
                     exc, shadowing_hint())
    else:
        prometheus = PrometheusExporter(
            config, config.identity(), health, nvml=sources.nvml, tfmemory=sources.tfmemory,
            capture_request=capture_now)
        try:
            _start_server(prometheus)
        except Exception:  # a bad option (TLS files, bind address) names its fix
            _stop_sources(sources)
            raise
        sinks.append(prometheus)
        step_sink, url = prometheus.step_sink, prometheus.url
        port = prometheus.port if prometheus.port > 0 else -1
        if port > 0:
            identity = prometheus.identity
            _log.info("tfobs: serving metrics on port %d (%s) as tf_job=%s tf_task=%s "
                      "local_rank=%s", port, url, identity["tf_job"], identity["tf_task"],
                      identity["local_rank"])
    if config.tracing_enabled:
        try:
            from tfobs.export.otel import OtelExporter

            sinks.append(OtelExporter(config, worker_resource(config.identity()),
                                      health=health))
        except Exception as exc:  # tracing is optional; metrics keep working
            _log.warning("tfobs: OpenTelemetry tracing off: %s", exc)
    return Runtime(config, health=health, sinks=sinks, step_sink=step_sink, sources=sources,
                   metrics_url=url, metrics_port=port)


def _start_server(prometheus: PrometheusExporter) -> None:
    """Serve on the configured port; a taken one (a second run beside a job or notebook)
    never ends training: one line, then a free port, or no server when none can be had."""
    from tfobs.export.http_server import PortInUseError

    try:
        prometheus.start()
        return
    except PortInUseError as exc:
        taken = exc
    try:
        prometheus.start(port=0)
    except Exception as exc:  # no port at all: metrics stay in the process, unserved
        _log.warning("tfobs: port %d on %s is in use and no other port could be opened (%s); "
                     "training goes on without a metrics server", taken.port, taken.bind,
                     " ".join(str(exc).split()))
        return
    _log.warning("tfobs: port %d on %s is in use (another job or notebook serving there?); "
                 "serving on port %d instead: %s (set metrics_port / TFOBS_METRICS_PORT to a "
                 "free port, or -1 for no server)", taken.port, taken.bind, prometheus.port,
                 prometheus.url)


def _sources(config: Config, health: HealthLedger) -> Sources:
    """NVML starts now (it never touches TensorFlow); the TF memory sampler is made here and
    started by the runtime after the first step."""
    nvml = tfmemory = None
    try:
        if config.nvml:
            from tfobs.sources.nvml import NvmlSampler

            nvml = NvmlSampler(config.nvml_interval_s, health=health)
            nvml.start()
        from tfobs.sources.tfmemory import TfMemorySampler

        tfmemory = TfMemorySampler(config.nvml_interval_s, health=health)
    except Exception as exc:
        _log.debug("tfobs sources: %s", exc)
    return Sources(nvml, tfmemory)


def _stop_sources(sources: Sources) -> None:
    if sources.nvml is not None:
        sources.nvml.stop(1.0)


def _register_process_hooks() -> None:
    global _registered
    if _registered:
        return
    _registered = True
    atexit.register(_at_exit)
    forks.after_fork_in_child(_after_fork_child)


def _at_exit() -> None:
    try:
        disable(timeout_s=2.0)
    except Exception:  # interpreter is going down: nothing to tell the job at exit
        _log.debug("tfobs: disable at exit failed", exc_info=True)


def _after_fork_child() -> None:
    global _instance
    runtime, _instance = _instance, None
    if runtime is not None:
        runtime.after_fork_in_child()


# As tfobs.enable: called inside a tf.function, run as written, not converted by AutoGraph.
for _public in (disable, capture_now, current):
    setattr(_public, "autograph_info__", frozenset())  # noqa: B010 - no such attribute typed

