"""Methods of a framework's class replaced by tfobs's wrappers and put back on uninstall,
for the step markers a job already writes (`jax_steps.py`, `tf_steps.py`). The class itself
is changed, so an instance or an alias made before `tfobs.enable()` is wrapped too. Also the
stand-in for a profiler binding module through which the job's own sessions pre-empt
tfobs's window (`PreemptingProfilerModule`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from tfobs.capture import markers

_log = logging.getLogger(__name__)

Wrap = Callable[[dict[str, Any]], dict[str, Any]]


class ClassHooks:
    """One class's wrapped methods: `install` (idempotent, thread-safe), `uninstall`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.saved: tuple[Any, dict[str, Any]] | None = None  # (class, original methods)

    def install(self, find_class: Callable[[], Any], names: tuple[str, ...],
                wrap: Wrap) -> bool:
        """Replace `names` on the class `find_class()` gives with `wrap(originals)`'s."""
        with self._lock:
            if self.saved is None:
                cls = find_class()
                originals = {name: getattr(cls, name) for name in names}
                for name, fn in wrap(originals).items():
                    setattr(cls, name, fn)  # a class of the framework's: its methods
                self.saved = (cls, originals)
            return True

    def uninstall(self) -> None:
        with self._lock:
            if self.saved is None:
                return
            cls, originals = self.saved
            for name, fn in originals.items():
                setattr(cls, name, fn)
            self.saved = None


def end_marked(marker: markers.step | None, what: str) -> None:
    """End a step `markers.begin_marked` began; never raises into the training loop."""
    if marker is not None:
        try:
            marker.__exit__(None, None, None)
        except Exception:  # this step goes untimed
            _log.debug("tfobs: %s step marker end failed", what, exc_info=True)


def exit_ending_step(exit_: Callable[..., Any], what: str) -> Callable[..., Any]:
    """`__exit__` wrapped: the framework's own, then the end of the step the instance
    began (its `_tfobs_marker`, set where the marker was made)."""
    def __exit__(self: Any, *exc: Any) -> Any:
        result = exit_(self, *exc)
        marker = getattr(self, "_tfobs_marker", None)
        if marker is not None:
            self._tfobs_marker = None
            end_marked(marker, what)
        return result

    return __exit__


class PreemptingProfilerModule:
    """A framework's profiler binding module (TensorFlow's `_pywrap_profiler`, jaxlib's
    `_profiler`) as its Python API module sees it, whose `ProfilerSession(...)` first calls
    `preempt()`: a `start` the job imported before `enable()` (`from jax.profiler import
    start_trace`) is not the wrapped one, but it makes its session through this module
    global, looked up at the call. Everything else is the module's own."""

    def __init__(self, module: Any, preempt: Callable[[], None]) -> None:
        self._tfobs_module = module
        self._tfobs_preempt = preempt

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tfobs_module, name)

    def ProfilerSession(self, *args: Any, **kwargs: Any) -> Any:  # the binding's name
        try:
            self._tfobs_preempt()
        except Exception:  # the user's session is made all the same
            _log.debug("tfobs: pre-empting for the user's profiler failed", exc_info=True)
        return self._tfobs_module.ProfilerSession(*args, **kwargs)
