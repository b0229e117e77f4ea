"""The only code in tfobs that touches the TensorFlow profiler.

One `ProfilerSlot` per process owns tfobs's use of TF's single profiler session:

* `start()` (training thread, 0.1-1 ms) opens a low-level `_pywrap_profiler.ProfilerSession`
  writing to a fresh folder on tmpfs. It never touches `profiler_v2._profiler`, the module
  state behind `tf.profiler.experimental.start/stop`, so tfobs cannot leave it stale.
* `finish()` (capture thread) exports the session (`export_to_tb`, the only binding that
  yields an XSpace), reads the `.xplane.pb` back and deletes the folder.
* `preempt()` gives the profiler up at once. `install_yield_hook()` wraps
  `tf.profiler.experimental.start` so the user's own profiling (a manual start, Keras's
  TensorBoard callback with `profile_batch`, `tf.profiler.experimental.Profile`) always wins:
  tfobs drops its window (counted as skipped_busy) instead of making the user's start fail,
  and TF's stale-state bug after a failed public start is repaired.

Every call returns a `CaptureResult`; nothing here raises into the caller.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tfobs.summary import Outcome

if TYPE_CHECKING:
    from tfobs.config import Config

_log = logging.getLogger("tfobs")

CAPTURED: Outcome = "captured"
SKIPPED_BUSY: Outcome = "skipped_busy"
FAILED: Outcome = "failed"
TOO_LARGE: Outcome = "dropped_too_large"
DIR_PREFIX = "tfobs-"


@dataclass(frozen=True)
class CaptureResult:
    outcome: Outcome  # captured | skipped_busy | failed | dropped_too_large
    reason: str = ""
    data: bytes = b""
    nbytes: int = 0  # size on disk (also set when dropped for size)
    active_s: float = 0.0  # profiler on, start to export
    export_s: float = 0.0  # export + read + delete (capture thread)
    # finish(read=False): the capture left on disk for the reduce helper, in `folder`,
    # which the reader deletes (runtime/reduce_thread.py)
    path: str = ""
    folder: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome == CAPTURED


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


def _public_session_active() -> bool:
    """True while the user's `tf.profiler.experimental.start` session (or TB callback) runs."""
    from tensorflow.python.profiler import profiler_v2

    return profiler_v2._profiler is not None


def _is_already_exists(exc: BaseException) -> bool:
    return type(exc).__name__ == "AlreadyExistsError" or "nother profil" in str(exc)


class ProfilerSlot:
    """tfobs's hold on the process's profiler: idle -> active -> exporting -> idle."""

    def __init__(
        self,
        capture_dir: str,
        *,
        host_tracer_level: int,
        device_tracer_level: int,
        python_tracer_level: int,
        max_capture_bytes: int,
    ) -> None:
        self.capture_dir = capture_dir
        self.max_capture_bytes = max_capture_bytes
        self._options = (host_tracer_level, device_tracer_level, python_tracer_level)
        self._cond = threading.Condition(threading.Lock())
        self._session: Any = None
        self._state = "idle"
        self._logdir = ""
        self._started = 0.0
        self._preempted_reason = ""
        self.preemptions = 0
        self._wake: threading.Event | None = None  # set when an active session is dropped

    @classmethod
    def from_config(cls, config: Config) -> ProfilerSlot:
        return cls(config.resolved_capture_dir(),
                   host_tracer_level=config.host_tracer_level,
                   device_tracer_level=config.device_tracer_level,
                   python_tracer_level=config.python_tracer_level,
                   max_capture_bytes=config.max_capture_bytes)

    @property
    def state(self) -> str:
        return self._state

    # -- training thread -----------------------------------------------------------------

    def start(self, wake: threading.Event | None = None) -> CaptureResult | None:
        """Open a session; None when it runs, else a result saying why not.

        `wake` is set if the session is dropped before `finish()` (the user's own profiling
        took the profiler, or shutdown), so whoever waits for the window stops waiting.
        """
        try:
            from tensorflow.python.profiler.internal import _pywrap_profiler
        except Exception as exc:  # TF missing or broken: nothing to profile with
            return CaptureResult(FAILED, f"TensorFlow profiler unavailable: {exc}")
        with self._cond:
            if self._state != "idle":
                return CaptureResult(SKIPPED_BUSY, f"tfobs window still {self._state}")
            try:
                if _public_session_active():
                    return CaptureResult(SKIPPED_BUSY, "tf.profiler.experimental session active")
                # A configured folder may not exist yet (fresh pod) or may have been
                # removed by a tmp cleaner: make it, as TF's own profiler does for logdirs.
                os.makedirs(self.capture_dir, exist_ok=True)
                logdir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-",
                                          dir=self.capture_dir)
            except Exception as exc:
                return CaptureResult(FAILED, f"cannot create capture folder: {exc}")
            session = _pywrap_profiler.ProfilerSession()
            try:
                session.start(logdir, profiler_options(*self._options))
            except Exception as exc:
                del session
                shutil.rmtree(logdir, ignore_errors=True)
                if _is_already_exists(exc):
                    return CaptureResult(SKIPPED_BUSY, "another profiler session is active "
                                         "(profiler server or another tool)")
                return CaptureResult(FAILED, f"profiler start failed: {exc}")
            self._session, self._logdir, self._state = session, logdir, "active"
            self._wake = wake
            self._started = time.perf_counter()
            self._preempted_reason = ""
        return None

    # -- capture thread ------------------------------------------------------------------

    def finish(self, read: bool = True) -> CaptureResult:
        """Export the open session, read the XSpace bytes, delete the folder.

        `read=False`: leave the capture in its folder (`path`, `folder`) for the reduce
        helper, so its bytes never enter this process; the caller deletes the folder."""
        with self._cond:
            if self._state != "active":
                reason = self._preempted_reason or "no tfobs session was active"
                return CaptureResult(SKIPPED_BUSY, reason)
            session, logdir = self._session, self._logdir
            self._state = "exporting"
        t0 = time.perf_counter()
        active_s = t0 - self._started
        handed = False
        try:
            try:
                session.export_to_tb()  # releases the GIL; stops tracing, writes the file
            finally:
                del session
                with self._cond:
                    self._session = None
            result = self._read(logdir, active_s, t0, read)
            handed = bool(result.path)
            return result
        except Exception as exc:
            return CaptureResult(FAILED, f"profiler export failed: {exc}", active_s=active_s,
                                 export_s=time.perf_counter() - t0)
        finally:
            if not handed:
                shutil.rmtree(logdir, ignore_errors=True)
            with self._cond:
                self._state, self._logdir = "idle", ""
                self._cond.notify_all()

    def _read(self, logdir: str, active_s: float, t0: float, read: bool = True) -> CaptureResult:
        files = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
        if not files:
            return CaptureResult(FAILED, "profiler wrote no .xplane.pb", active_s=active_s,
                                 export_s=time.perf_counter() - t0)
        nbytes = sum(os.path.getsize(f) for f in files)
        if nbytes > self.max_capture_bytes:
            return CaptureResult(TOO_LARGE, f"capture is {nbytes} bytes, over "
                                 f"max_capture_bytes={self.max_capture_bytes}", nbytes=nbytes,
                                 active_s=active_s, export_s=time.perf_counter() - t0)
        if not read:
            return CaptureResult(CAPTURED, nbytes=nbytes, active_s=active_s,
                                 export_s=time.perf_counter() - t0, path=files[0],
                                 folder=logdir)
        with open(files[0], "rb") as fh:  # one host per process: one file
            data = fh.read()
        return CaptureResult(CAPTURED, data=data, nbytes=nbytes, active_s=active_s,
                             export_s=time.perf_counter() - t0)

    # -- any thread ----------------------------------------------------------------------

    def preempt(self, reason: str, timeout_s: float = 10.0) -> bool:
        """Release the profiler now: drop an active session, wait out an export.

        Returns True when the slot is idle afterwards.
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._state == "active":
                session, self._session = self._session, None
                self._state = "idle"
                self._preempted_reason = reason
                self.preemptions += 1
                shutil.rmtree(self._logdir, ignore_errors=True)
                self._logdir = ""
                del session  # the C++ destructor stops tracing without writing anything
                self._cond.notify_all()
                if self._wake is not None:
                    self._wake.set()
            while self._state != "idle":
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        self.preempt("tfobs is shutting down", timeout_s)


# -- yielding to the user's own profiling ------------------------------------------------

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
            slot_now = _hook_slot
            if slot_now is not None:
                slot_now.preempt("the user's tf.profiler.experimental.start took the profiler")
            was_free = profiler_v2._profiler is None
            try:
                original(logdir, options)
            except Exception:
                # TF leaves `_profiler` set after a failed start, breaking every later start
                # (see module doc); undo that when this call created it.
                if was_free and profiler_v2._profiler is not None:
                    profiler_v2._profiler = None
                raise

        start.__doc__ = original.__doc__
        start.__wrapped__ = original  # type: ignore[attr-defined]
        _hook_original = original
        profiler_v2.start = start
        _set_api_start(tf, start)


def _set_api_start(tf: Any, fn: Any) -> None:
    try:
        tf.profiler.experimental.start = fn
    except Exception:  # an API module we cannot write: the hook still covers Profile()
        _log.debug("cannot patch tf.profiler.experimental.start", exc_info=True)


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


_after_fork_keep: list[Any] = []


def forget_after_fork(slot: ProfilerSlot) -> None:
    """In a forked child: drop tfobs's hold without running TF destructors on copied state."""
    global _hook_slot
    _hook_slot = None
    if slot._session is not None:
        _after_fork_keep.append(slot._session)  # never destroyed in the child
    slot._session, slot._state, slot._logdir = None, "idle", ""


def sweep_stale_dirs(capture_dir: str) -> int:
    """Delete capture folders left by tfobs processes that no longer exist."""
    removed = 0
    for path in glob.glob(os.path.join(capture_dir, DIR_PREFIX + "*-*")):
        pid_text = os.path.basename(path)[len(DIR_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        if not _pid_alive(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
