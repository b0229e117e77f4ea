"""Steps of a JAX training loop, as JAX users already mark them:
`with jax.profiler.StepTraceAnnotation("train", step_num=step): ...`.

The annotation is already a step marker XProf reads (a trace event with `_r=1`), so tfobs
only times it and drives its runtime (`markers.begin_marked`), like `tfobs.step` without a
marker of its own. The class itself is wrapped, so an annotation imported before
`tfobs.enable()` counts too. Installed as soon as the job has imported JAX.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tfobs.capture import markers

_log = logging.getLogger(__name__)

_lock = threading.Lock()
_saved: tuple[Any, Any, Any, Any] | None = None  # (class, __init__, __enter__, __exit__)


def install() -> bool:
    """Wrap `jax.profiler.StepTraceAnnotation` (idempotent); True when wrapped."""
    global _saved
    with _lock:
        if _saved is not None:
            return True
        from jax._src import profiler

        cls = profiler.StepTraceAnnotation
        init, enter, exit_ = cls.__init__, cls.__enter__, cls.__exit__

        def __init__(self: Any, name: str, **kwargs: Any) -> None:
            init(self, name, **kwargs)
            self._tfobs_step_num = kwargs.get("step_num")
            self._tfobs_name = name  # made a str at __enter__, inside its guard

        def __enter__(self: Any) -> Any:
            try:  # before the annotation begins: a window opened here records it
                self._tfobs_marker = markers.begin_marked(
                    getattr(self, "_tfobs_step_num", None), "jax",
                    getattr(self, "_tfobs_name", "train"))
            except Exception:  # never into the training loop: this step goes unmarked
                _log.debug("tfobs: JAX step marker failed", exc_info=True)
                self._tfobs_marker = None
            return enter(self)

        def __exit__(self: Any, *exc: Any) -> Any:
            result = exit_(self, *exc)
            marker = getattr(self, "_tfobs_marker", None)
            if marker is not None:
                self._tfobs_marker = None
                try:
                    marker.__exit__(None, None, None)
                except Exception:  # never into the training loop: this step goes untimed
                    _log.debug("tfobs: JAX step marker end failed", exc_info=True)
            return result

        for name, fn in (("__init__", __init__), ("__enter__", __enter__),
                         ("__exit__", __exit__)):
            setattr(cls, name, fn)  # a class of JAX's: its methods, replaced
        _saved = (cls, init, enter, exit_)
        return True


def uninstall() -> None:
    global _saved
    with _lock:
        if _saved is None:
            return
        cls, init, enter, exit_ = _saved
        for name, fn in (("__init__", init), ("__enter__", enter), ("__exit__", exit_)):
            setattr(cls, name, fn)
        _saved = None
