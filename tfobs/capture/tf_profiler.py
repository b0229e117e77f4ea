"""TensorFlow's profiler as a `framework.Backend`.

A session is the low-level `_pywrap_profiler.ProfilerSession`, never `profiler_v2._profiler`
(the state behind `tf.profiler.experimental.start/stop`), so tfobs cannot leave that stale.
Its `stop` binding returns trace-viewer JSON, not an XSpace, so `stop()` here is
`export_to_tb`: stop tracing, collect, write the `.xplane.pb` into the session's folder.
tfobs calls it on the training thread at a step boundary, after `drain()`, so XLA's CUPTI
tracer is torn down while no kernel or collective of the job is in flight (`session.py`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from tfobs import forks
from tfobs.capture import quiet_log
from tfobs.capture.class_hooks import PreemptingProfilerModule

if TYPE_CHECKING:
    from tfobs.capture.session import ProfilerSlot

_log = logging.getLogger(__name__)


class _Level:
    """An int option TF's pybind layer accepts.

    TF 2.21 drops plain int profiler options ("expects an i value"); an object with
    `__index__` and no `__bool__` is converted as an integer and takes effect.
    """

    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        self.value = int(value)

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"_Level({self.value})"


def profiler_options(host: int, device: int, python: int) -> dict[str, Any]:
    return {
        "host_tracer_level": _Level(host),
        "device_tracer_level": _Level(device),
        "python_tracer_level": _Level(python),
    }


def tf_marker() -> Callable[[int], Any]:
    """TensorFlow's step marker: a "train" TraceMe with `step_num` and `_r=1` while a
    profiler session (tfobs's or the job's own) records, else None. Imports only TF's
    TraceMe binding (no session, no log set-up)."""
    from tensorflow.python.profiler.internal import _pywrap_traceme

    traceme = _pywrap_traceme.TraceMe
    # TF 2.16 has no `traceme_enabled`: a TraceMe is then made every step, and records
    # nothing (its C++ side checks) while no session runs.
    recording = getattr(_pywrap_traceme, "traceme_enabled", None) or (lambda: True)

    def marker(step_num: int) -> Any:
        return traceme("train", step_num=step_num, _r=1) if recording() else None

    return marker


class TfBackend:
    name: Final = "tensorflow"

    def __init__(self) -> None:
        from tensorflow.python.profiler.internal import _pywrap_profiler

        self._pywrap = _pywrap_profiler
        self._marker = tf_marker()
        self._gpus: list[str] | None = None  # this worker's GPUs, listed at the first drain
        quiet_log.prepare()  # once, here (not on the training thread at a window)

    def open(self, logdir: str, levels: tuple[int, int, int]) -> Any:
        session = self._pywrap.ProfilerSession()
        with quiet_log.quiet():  # TF logs two INFO lines here
            session.start(logdir, profiler_options(*levels))
        return session

    def stop(self, session: Any) -> bytes | None:
        with quiet_log.quiet():  # TF logs three INFO lines here
            session.export_to_tb()  # releases the GIL; stops tracing, writes the file
        return None

    def discard(self, session: Any) -> None:
        with quiet_log.quiet():
            del session  # the C++ destructor stops tracing without writing anything

    def prepare(self) -> None:
        """Nothing to make: SyncDevice and the eager queues' wait are TensorFlow's own."""

    def drain(self) -> None:
        """Wait for the job's queued device work on this worker: a `SyncDevice` op on each
        local GPU (a stream runs its kernels in order), then the async eager queues; the
        same as TF's `sync_devices`, less its remote devices (in a multi-worker job those
        are the other workers': syncing them runs ops there, in their steps)."""
        from tensorflow.python.eager import context

        if not context.executing_eagerly():  # a marker inside a tf.function: nothing queued
            return
        gpus = self._gpus
        if gpus is None:
            gpus = self._gpus = _local_gpus()
        if gpus:
            from tensorflow.python.framework import ops
            from tensorflow.python.ops import gen_sync_ops

            for name in gpus:
                with ops.device(name):
                    gen_sync_ops.SyncDevice()
        context.async_wait()

    def is_busy(self, exc: BaseException) -> bool:
        return type(exc).__name__ == "AlreadyExistsError" or "nother profil" in str(exc)

    def user_session_active(self) -> bool:
        """True while the user's `tf.profiler.experimental.start` session (or TB callback)
        runs."""
        from tensorflow.python.profiler import profiler_v2

        return profiler_v2._profiler is not None

    def marker(self, step_num: int) -> Any:
        return self._marker(step_num)


def _local_gpus() -> list[str]:
    """This worker's logical GPU devices (none of another worker's)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    here = ctx.host_address_space()
    names = [d.name for d in ctx.list_logical_devices("GPU")]
    return [n for n in names if "/job:" not in n or (here and n.startswith(here))]


# -- yielding to the user's own profiling ------------------------------------------------
# `tf.profiler.experimental.start` is wrapped so the user's own profiling (a manual start,
# Keras's TensorBoard callback with `profile_batch`, `tf.profiler.experimental.Profile`)
# always wins: tfobs drops its window (counted as skipped_busy) instead of making the user's
# start fail, and TF's stale state after a failed public start is repaired.

_hook_lock = threading.Lock()
_hook_slot: ProfilerSlot | None = None
_hook_original: Any = None


def install_yield_hook(slot: ProfilerSlot) -> None:
    """Make `tf.profiler.experimental.start` pre-empt tfobs's window (idempotent)."""
    global _hook_slot, _hook_original
    with _hook_lock:
        _hook_slot = slot
        if _hook_original is not None:
            return
        import tensorflow as tf
        from tensorflow.python.profiler import profiler_v2

        original = profiler_v2.start

        def start(logdir: str, options: Any = None) -> None:
            _preempt_for_user()
            was_free = profiler_v2._profiler is None
            try:
                original(logdir, options)
            except Exception:
                # TF leaves `_profiler` set after a failed start, breaking every later start
                # (tfobs's own sessions never touch it); undo that when this call created it.
                if was_free and profiler_v2._profiler is not None:
                    profiler_v2._profiler = None
                raise

        start.__doc__ = original.__doc__
        start.__wrapped__ = original  # type: ignore[attr-defined]
        _hook_original = original
        profiler_v2.start = start
        _set_api_start(tf, start)
        # A `start` imported before enable() is the original: it pre-empts through the
        # module global it makes its session with.
        profiler_v2._pywrap_profiler = PreemptingProfilerModule(
            profiler_v2._pywrap_profiler, _preempt_for_user)
        forks.after_fork_in_child(_forget_slot)  # a child's slot is not the parent's


def _preempt_for_user() -> None:
    slot_now = _hook_slot
    if slot_now is not None:
        slot_now.preempt("the user's tf.profiler.experimental.start took the profiler")


def _set_api_start(tf: Any, fn: Any) -> None:
    try:
        tf.profiler.experimental.start = fn
    except Exception:  # an API module we cannot write: the hook still covers Profile()
        _log.debug("cannot patch tf.profiler.experimental.start", exc_info=True)


def _forget_slot() -> None:
    global _hook_slot
    _hook_slot = None


def uninstall_yield_hook() -> None:
    global _hook_slot, _hook_original
    with _hook_lock:
        _hook_slot = None
        if _hook_original is None:
            return
        import tensorflow as tf
        from tensorflow.python.profiler import profiler_v2

        profiler_v2.start = _hook_original
        _set_api_start(tf, _hook_original)
        _hook_original = None
        front = profiler_v2._pywrap_profiler
        if isinstance(front, PreemptingProfilerModule):
            profiler_v2._pywrap_profiler = front._tfobs_module
