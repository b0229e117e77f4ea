"""Which framework's profiler a job uses, and the one seam tfobs reaches it through.

TensorFlow and JAX each link their own copy of XLA's profiler: a trace started through one
never sees the other's device work or step markers. So tfobs talks to exactly one of them,
through a `Backend`: open a session, end it, drop it, wait for the device, make a step
marker. Everything after the capture file (reduction, export, keep, page, advice) is shared.

`import tfobs` imports neither framework; `resolve()` names the backend from the `framework`
option or, with "auto", from what the job has imported (`choose()`), and imports only that
one.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Callable
from typing import Any, Literal, Protocol

from tfobs.capture.import_watch import imported

_log = logging.getLogger(__name__)

Framework = Literal["tensorflow", "jax"]
FRAMEWORKS: tuple[Framework, ...] = ("tensorflow", "jax")


class Backend(Protocol):
    """A framework's profiler, as tfobs uses it (every call on the thread named)."""

    @property
    def name(self) -> Framework: ...

    def open(self, logdir: str, levels: tuple[int, int, int]) -> Any:
        """Training thread: start tracing; the session, or raise (a busy profiler is told
        apart by `is_busy`)."""

    def stop(self, session: Any) -> bytes | None:
        """Training thread, at a step boundary: stop tracing, collect; the XSpace's bytes,
        or None where the framework wrote it into the session's folder itself."""

    def discard(self, session: Any) -> None:
        """Drop a session without its data (its destructor stops tracing)."""

    def drain(self) -> None:
        """Training thread: wait until the device work the job queued has finished."""

    def prepare(self) -> None:
        """Capture thread, once, after the job's first step and before a window opens:
        make what `drain()` needs, so the first window's end does not make it on the
        training thread."""

    def is_busy(self, exc: BaseException) -> bool:
        """The start failed because another profiler session holds the profiler."""

    def user_session_active(self) -> bool:
        """The job's own profiling (the framework's public start) runs now."""

    def marker(self, step_num: int) -> Any:
        """A step marker (a trace event XProf reads as a step) if a session records, else
        None. The object has `Stop()`."""


def installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def jax_running() -> bool:
    """JAX has set up a backend (the job ran a computation or asked for devices); TF's
    Keras imports JAX when it is installed, so an imported JAX says nothing."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def tensorflow_running() -> bool:
    """TensorFlow's eager context is set up (the job ran an op or built a model), or its
    profiler records: a graph-mode job (`tf.compat.v1.Session.run`) never sets up the eager
    context, and its own profiler session must still get tfobs.step's markers."""
    if not imported("tensorflow"):
        return False
    try:
        from tensorflow.python.eager import context

        if context.context()._initialized:
            return True
        from tensorflow.python.profiler.internal import _pywrap_traceme

        recording = getattr(_pywrap_traceme, "traceme_enabled", None)
        if recording is not None:
            return bool(recording())
        # TF 2.16 has no `traceme_enabled`: a session the job started through
        # tf.profiler.experimental.start (TensorBoard's callback does too).
        v2 = sys.modules.get("tensorflow.python.profiler.profiler_v2")
        return getattr(v2, "_profiler", None) is not None
    except Exception:  # a TensorFlow without this private flag: judge by the import
        _log.debug("tfobs: TensorFlow's initialised flag unreadable", exc_info=True)
        return True


def choose(marked_by: str | None = None) -> Framework | None:
    """The framework a job trains with, judged from what it runs (None: cannot tell yet).

    `marked_by`: the framework whose own step annotation announced steps (a Keras
    callback, `jax.profiler.StepTraceAnnotation`). A JAX job that feeds itself with tf.data
    runs both, so JAX wins over TensorFlow where both run and nothing else says."""
    if marked_by in FRAMEWORKS:
        return "jax" if marked_by == "jax" else "tensorflow"
    if jax_running():
        return "jax"
    if tensorflow_running():
        return "tensorflow"
    return None


def installed_default() -> Framework | None:
    """The only framework installed, or TensorFlow where both are (None: neither)."""
    if installed("tensorflow"):
        return "tensorflow"
    if installed("jax"):
        return "jax"
    return None


def decided_at_enable(option: str) -> Framework | None:
    """The framework known at `enable()`: the option; the only one installed; TensorFlow
    where it has run (a model built, an op run: a TensorFlow job); else what `settled`
    says. None: tfobs decides at the first marked step or window (`choose`). An imported
    TensorFlow says little where JAX is imported too: a JAX job imports it for tf.data, and
    TensorFlow's own import loads JAX where it is installed."""
    if option in FRAMEWORKS:
        return "jax" if option == "jax" else "tensorflow"
    tf, jax = installed("tensorflow"), installed("jax")
    if tf and not jax:
        return "tensorflow"
    if jax and not tf:
        return "jax"
    if imported("tensorflow") and tensorflow_running():
        return "tensorflow"
    return settled()


def settled(marked_by: str | None = None) -> Framework | None:
    """While tfobs waits to decide: a step annotation's framework, else the only framework
    imported (JAX: once it runs). Where both are imported neither running settles it: a
    JAX job that reads tf.data sets TensorFlow up too, often first, and a process that ran
    JAX may go on to train Keras on TensorFlow; the first window's `choose` takes it."""
    if marked_by in FRAMEWORKS:
        return "jax" if marked_by == "jax" else "tensorflow"
    if imported("tensorflow"):
        return None if imported("jax") else "tensorflow"
    return "jax" if jax_running() else None


def step_marker(name: Framework) -> Callable[[int], Any]:
    """The framework's step marker alone: step number -> a marker while a session records
    (None otherwise). What `tfobs.step` marks with while no tfobs runs."""
    if name == "jax":
        from tfobs.capture.jax_profiler import jax_marker

        return jax_marker()
    from tfobs.capture.tf_profiler import tf_marker

    return tf_marker()


def backend(name: Framework) -> Backend:
    """The backend for `name` (imports that framework)."""
    if name == "jax":
        from tfobs.capture.jax_profiler import JaxBackend

        return JaxBackend()
    from tfobs.capture.tf_profiler import TfBackend

    return TfBackend()


MISSING_FIX = {
    "tensorflow": "pip install tensorflow (or set framework='jax' / TFOBS_FRAMEWORK=jax for a "
                  "JAX job)",
    "jax": "pip install 'tfobs[jax]' (or set framework='tensorflow' / "
           "TFOBS_FRAMEWORK=tensorflow for a TensorFlow job)",
}
