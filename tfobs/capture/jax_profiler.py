"""JAX's profiler as a `framework.Backend`.

JAX links the same XLA/TSL profiler and CUPTI tracer TensorFlow's GPU builds use. A session
is jaxlib's `ProfilerSession` made directly, never through `jax.profiler.start_trace` (whose
module state the user's own profiling owns); `stop()` returns the XSpace. JAX dispatches
steps asynchronously, so a step's Python returns while its kernels still run: `drain()`
runs one tiny computation per local device and waits for it (a device runs its work in
order, so it finishes after everything queued before it). That computation is the jitted
`tfobs_window_end` (its scalar placed with `device_put`, no jax.numpy call): the window's
capture holds its call as `PjitFunction(tfobs_window_end)`, which the reduction leaves out of
the job's own calls (`tfobs.analysis.calls.OWN_CALLS`).

A session held by someone else (the user's `jax.profiler.trace`, a remote capture through
the profiler server) is seen at `stop()`: jaxlib answers ALREADY_EXISTS there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

from tfobs import forks
from tfobs.capture.class_hooks import PreemptingProfilerModule


def jax_marker() -> Callable[[int], Any]:
    """JAX's step marker: a "train" TraceMe with `step_num` and `_r=1` while a profiler
    session records, else None (jaxlib's TraceMe binding only)."""
    from jax._src.lib import _profiler

    trace_me = _profiler.TraceMe

    def marker(step_num: int) -> Any:
        if trace_me.is_enabled():
            return _Marker(trace_me("train", step_num=step_num, _r=1))
        return None

    return marker


class JaxBackend:
    name: Final = "jax"

    def __init__(self) -> None:
        import jax
        from jax._src.lib import _profiler

        self._jax = jax
        self._profiler = _profiler
        self._marker = jax_marker()
        self._zeros: dict[Any, Any] = {}  # device -> a scalar kept on it for drain()
        self._window_end: Any = None  # jax.jit(tfobs_window_end), made at the first drain

    def open(self, logdir: str, levels: tuple[int, int, int]) -> Any:
        self._jax.devices()  # backends first, so their device tracers join the session
        options = self._profiler.ProfileOptions()
        host, _device, python = levels
        options.host_tracer_level = int(host)
        options.python_tracer_level = int(python)
        return self._profiler.ProfilerSession(options)

    def stop(self, session: Any) -> bytes | None:
        return bytes(session.stop())

    def discard(self, session: Any) -> None:
        del session  # the destructor stops tracing without collecting

    def prepare(self) -> None:
        """The drain's jit compiled and its scalars placed (tens of ms, once), by running it
        once on the capture thread: after the job's first step, so JAX's backends are the
        job's own (a `jax.distributed.initialize` comes before any computation)."""
        self._run_window_end()

    def drain(self) -> None:
        self._run_window_end()

    def _run_window_end(self) -> None:
        """`tfobs_window_end` on every local device, waited for."""
        jax = self._jax
        zeros = self._zeros
        window_end = self._window_end
        if window_end is None:  # made here if prepare() has not run yet (or runs now)
            window_end = self._window_end = jax.jit(tfobs_window_end)
        waits = []
        for device in jax.local_devices():
            zero = zeros.get(device)
            if zero is None:
                import numpy as np  # JAX's own dependency

                zero = zeros[device] = jax.device_put(np.zeros((), np.int32), device)
            waits.append(window_end(zero))
        for value in waits:
            value.block_until_ready()

    def is_busy(self, exc: BaseException) -> bool:
        text = str(exc)
        return "ALREADY_EXISTS" in text or "nother profil" in text

    def user_session_active(self) -> bool:
        from jax._src import profiler

        return profiler._profile_state.profile_session is not None

    def marker(self, step_num: int) -> Any:
        return self._marker(step_num)


def tfobs_window_end(x: Any) -> Any:
    """The drain's computation: named so captures tell it from the job's own calls."""
    return x + 1


class _Marker:
    """jaxlib's TraceMe is a context manager; markers end theirs with `Stop()`, as TF's."""

    __slots__ = ("_trace",)

    def __init__(self, trace: Any) -> None:
        self._trace = trace
        trace.__enter__()

    def Stop(self) -> None:  # TF's TraceMe's name
        self._trace.__exit__(None, None, None)


# -- yielding to the user's own profiling ------------------------------------------------

_hook_lock = threading.Lock()
_yield_to: Any = None  # the ProfilerSlot whose window the user's start pre-empts
_original: Any = None


def install_yield_hook(slot: Any) -> None:
    """Make `jax.profiler.start_trace` (and so `jax.profiler.trace`) pre-empt tfobs's window
    (idempotent): the user's own profiling always wins."""
    global _yield_to, _original
    with _hook_lock:
        _yield_to = slot
        if _original is not None:
            return
        import jax.profiler
        from jax._src import profiler

        original = profiler.start_trace

        def start_trace(*args: Any, **kwargs: Any) -> Any:
            _preempt_for_user()
            return original(*args, **kwargs)

        start_trace.__doc__ = original.__doc__
        start_trace.__wrapped__ = original  # type: ignore[attr-defined]
        _original = original
        profiler.start_trace = start_trace  # jax.profiler.trace looks it up here
        jax.profiler.start_trace = start_trace
        # A start_trace imported before enable() is the original: it pre-empts through the
        # module global it makes its session with (tfobs's own sessions use jaxlib's module).
        profiler._profiler = PreemptingProfilerModule(profiler._profiler, _preempt_for_user)
        forks.after_fork_in_child(_forget_slot)  # a child's slot is not the parent's


def _preempt_for_user() -> None:
    slot_now = _yield_to
    if slot_now is not None:
        slot_now.preempt("the user's jax.profiler.start_trace took the profiler")


def _forget_slot() -> None:
    global _yield_to
    _yield_to = None


def uninstall_yield_hook() -> None:
    global _yield_to, _original
    with _hook_lock:
        _yield_to = None
        if _original is None:
            return
        import jax.profiler
        from jax._src import profiler

        profiler.start_trace = _original
        jax.profiler.start_trace = _original
        _original = None
        front = profiler._profiler
        if isinstance(front, PreemptingProfilerModule):
            profiler._profiler = front._tfobs_module
