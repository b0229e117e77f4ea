"""tfobs: a TensorFlow training job that explains its own efficiency while it runs.

`tfobs.enable()` in the training script; `with tfobs.step(n):` around each step of a custom
loop (Keras `fit` needs nothing more); `tfobs.analyze(path)` for one capture on disk.

`import tfobs` stays light: TensorFlow, OpenTelemetry, prometheus_client and the HTTP server
load only when `enable()` (or a command that needs them) runs.
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import TYPE_CHECKING, Any

from tfobs.errors import CaptureError, ConfigError
from tfobs.summary import WindowSummary

if TYPE_CHECKING:
    from tfobs.capture.markers import KerasCallbackType as KerasCallback
    from tfobs.capture.markers import step
    from tfobs.runtime.api import enable
    from tfobs.runtime.core import Runtime
    from tfobs.runtime.lifecycle import capture_now, disable

# Loaded on first use, so `tfobs analyze` and `import tfobs` in a reader of captures do not
# load the runtime (config, profiler slot, exporters' glue: about 60 ms).
_LAZY = {
    "enable": "tfobs.runtime.api",
    "Runtime": "tfobs.runtime.core",
    "capture_now": "tfobs.runtime.lifecycle",
    "disable": "tfobs.runtime.lifecycle",
    "step": "tfobs.capture.markers",
    "KerasCallback": "tfobs.capture.markers",  # imports TensorFlow/Keras on first use
}

__version__ = "0.1.0"

__all__ = [
    "CaptureError",
    "ConfigError",
    "KerasCallback",
    "Runtime",
    "WindowSummary",
    "analyze",
    "capture_now",
    "disable",
    "enable",
    "step",
    "__version__",
]


def analyze(
    source: str | os.PathLike[str] | bytes,
    *,
    run: str | None = None,
    top_n: int | None = None,
) -> WindowSummary:
    """Reduce one capture to the figures of one window (what `tfobs analyze FILE` prints).

    `source`: a `.xplane.pb` file, a TensorBoard log folder holding captures (the newest
    run, or `run`), or the XSpace bytes themselves. `top_n`: longest events kept per step
    (default: the `trace_top_n` option's). Raises `tfobs.CaptureError` for a source that is
    missing or not a readable XSpace.
    """
    from tfobs.analysis.pipeline import analyze as _analyze
    from tfobs.config import option

    n = option("trace_top_n").default if top_n is None else top_n
    return _analyze(source, run=run, top_n=n)


# One lazy import at a time: `tfobs.enable` and `tfobs.disable` (or `capture_now`) first
# reached on two threads at once imported tfobs.runtime's modules in two orders, and one
# thread got Python's "deadlock detected" or an ImportError of a partly made module.
_lazy_lock = threading.RLock()


def _new_lazy_lock() -> None:  # a fork's child: no thread of the parent holds it there
    global _lazy_lock
    _lazy_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lazy_lock)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfobs' has no attribute {name!r}")
    with _lazy_lock:
        if name in globals():  # another thread loaded it while this one waited
            return globals()[name]
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups (`tfobs.step` every step) skip this function
    return value
