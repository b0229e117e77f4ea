"""Steps of a JAX training loop, as JAX users already mark them:
`with jax.profiler.StepTraceAnnotation("train", step_num=step): ...`.

The annotation is already a step marker XProf reads (a trace event with `_r=1`), so tfobs
only times it and drives its runtime (`markers.begin_marked`), like `tfobs.step` without a
marker of its own. The class itself is wrapped, so an annotation imported before
`tfobs.enable()` counts too. Installed as soon as the job has imported JAX.
"""

from __future__ import annotations

import logging
from typing import Any

from tfobs.capture import markers
from tfobs.capture.class_hooks import ClassHooks, exit_ending_step

_log = logging.getLogger(__name__)

hooks = ClassHooks()


def _annotation_class() -> Any:
    from jax._src import profiler

    return profiler.StepTraceAnnotation


def _wrap(original: dict[str, Any]) -> dict[str, Any]:
    init, enter, exit_ = original["__init__"], original["__enter__"], original["__exit__"]

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

    return {"__init__": __init__, "__enter__": __enter__,
            "__exit__": exit_ending_step(exit_, "JAX")}


def install() -> bool:
    """Wrap `jax.profiler.StepTraceAnnotation` (idempotent); True when wrapped."""
    return hooks.install(_annotation_class, ("__init__", "__enter__", "__exit__"), _wrap)


def uninstall() -> None:
    hooks.uninstall()
