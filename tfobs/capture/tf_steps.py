"""Steps of a TensorFlow loop marked as the TensorFlow Profiler guide marks them:
`with tf.profiler.experimental.Trace("train", step_num=step, _r=1): ...`.

XProf makes every `_r` trace a step (its root), so tfobs times such a trace and drives its
runtime (`markers.begin_marked`), like `tfobs.step` without a marker of its own. TensorFlow's
`Trace` starts its event when it is made, so the step begins in `__init__` (a window opened
there records it) and ends in `__exit__`. The traces Keras makes itself (tf_keras's `fit` and
`evaluate`) are left alone: tfobs's Keras callback times `fit`'s steps, numbered across
epochs, and an evaluation is no training step. The class itself is wrapped, so a `Trace`
imported before `tfobs.enable()` counts too.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from tfobs.capture import markers
from tfobs.capture.class_hooks import ClassHooks, end_marked, exit_ending_step

_log = logging.getLogger(__name__)

# Callers whose `_r` traces are Keras's own, not the job's.
KERAS_MODULES = ("keras.", "tf_keras.", "tensorflow.python.keras.")

hooks = ClassHooks()


def _begin(name: Any, kwargs: dict[str, Any], owner: Any = None) -> markers.step | None:
    """The step a `Trace` made by the job's own code begins, if it is a step root."""
    if not kwargs.get("_r"):
        return None
    frame = sys._getframe(2)  # the code that made the Trace
    caller = frame.f_globals.get("__name__", "")
    if isinstance(caller, str) and caller.startswith(KERAS_MODULES):
        return None
    return markers.begin_marked(kwargs.get("step_num"), "tensorflow", name, frame, owner)


def _trace_class() -> Any:
    from tensorflow.python.profiler import trace

    return trace.Trace


def _wrap(original: dict[str, Any]) -> dict[str, Any]:
    init, exit_ = original["__init__"], original["__exit__"]

    def __init__(self: Any, name: Any, **kwargs: Any) -> None:
        try:  # before the trace begins: a window opened here records it
            marker = _begin(name, kwargs, self)
        except Exception:  # never into the training loop: this step goes unmarked
            _log.debug("tfobs: TensorFlow step marker failed", exc_info=True)
            marker = None
        self._tfobs_marker = marker
        try:
            init(self, name, **kwargs)
        except BaseException:  # no __exit__ will come: the step must not stay open
            self._tfobs_marker = None
            end_marked(marker, "TensorFlow")
            raise

    return {"__init__": __init__, "__exit__": exit_ending_step(exit_, "TensorFlow")}


def install() -> bool:
    """Wrap `tf.profiler.experimental.Trace` (idempotent); True when wrapped."""
    return hooks.install(_trace_class, ("__init__", "__exit__"), _wrap)


def uninstall() -> None:
    hooks.uninstall()
