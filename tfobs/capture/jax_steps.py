"""Steps of a JAX training loop, as JAX users already mark them:
`with jax.profiler.StepTraceAnnotation("train", step_num=step): ...`.

The annotation is already a step marker XProf reads (a trace event with `_r=1`), so tfobs
only times it and drives its runtime (`markers.begin_marked`), like `tfobs.step` without a
marker of its own. jaxlib's TraceMe decides whether it records when it is made (a profiler
session running then), not when it is entered, so the step begins in `__init__`: a window
opened there records it (opened at `__enter__`, every live window lost its first step). The
class itself is wrapped, so an annotation imported before
`tfobs.enable()` counts too. Installed as soon as the job has imported JAX.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from tfobs.capture import markers
from tfobs.capture.class_hooks import ClassHooks, end_marked, exit_ending_step

_log = logging.getLogger(__name__)

hooks = ClassHooks()


def _annotation_class() -> Any:
    from jax._src import profiler

    return profiler.StepTraceAnnotation


def _wrap(original: dict[str, Any]) -> dict[str, Any]:
    init, exit_ = original["__init__"], original["__exit__"]

    def __init__(self: Any, name: str, **kwargs: Any) -> None:
        try:  # before the annotation is made: a window opened here records it
            marker = markers.begin_marked(kwargs.get("step_num"), "jax", name,
                                          sys._getframe(1), self)  # the code making it
        except Exception:  # never into the training loop: this step goes unmarked
            _log.debug("tfobs: JAX step marker failed", exc_info=True)
            marker = None
        self._tfobs_marker = marker
        try:
            init(self, name, **kwargs)
        except BaseException:  # no __exit__ will come: the step must not stay open
            self._tfobs_marker = None
            end_marked(marker, "JAX")
            raise

    return {"__init__": __init__, "__exit__": exit_ending_step(exit_, "JAX")}


def install() -> bool:
    """Wrap `jax.profiler.StepTraceAnnotation` (idempotent); True when wrapped."""
    return hooks.install(_annotation_class, ("__init__", "__exit__"), _wrap)


def uninstall() -> None:
    hooks.uninstall()
