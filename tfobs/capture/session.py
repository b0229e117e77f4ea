"""The only code in tfobs that touches the TensorFlow profiler.

One `ProfilerSlot` per process owns tfobs's use of TF's single profiler session:

* `start()` (training thread, 0.1-1 ms) opens a low-level `_pywrap_profiler.ProfilerSession`
  writing to a fresh folder on tmpfs. It never touches `profiler_v2._profiler`, the module
  state behind `tf.profiler.experimental.start/stop`, so tfobs cannot leave it stale.
* `finish()` (capture thread) exports the session (`export_to_tb`, the only binding that
  yields an XSpace), reads the `.xplane.pb` back and deletes the folder.
* `wait_window()` (capture thread) waits for the window to fill, but cuts it short when what
  it will cost grows too large: the profiler buffers every event in memory until export (and
  export then copies them several times), so a window is bounded before it is exported by
  (a) a time cap learned from earlier windows' capture bytes per second, so the expected
  capture stays under half of `max_capture_bytes`, and (b) the memory it grows since the
  window opened: the trace's own (malloc's live bytes, where glibc tells them, read between
  steps by `step_ended()`) at most a quarter of `max_capture_bytes` (16 MiB at least: memory
  is noisy), and RSS, which also holds the freed tensors glibc's heap keeps while trace
  buffers pin it, at most all of it (a quarter where live bytes are unknown).
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

from tfobs.capture import quiet_log
from tfobs.capture.heap import live_bytes, rss_bytes
from tfobs.summary import CutCause, Outcome

if TYPE_CHECKING:
    from tfobs.config import Config

_log = logging.getLogger("tfobs")

CAPTURED: Outcome = "captured"
SKIPPED_BUSY: Outcome = "skipped_busy"
FAILED: Outcome = "failed"
TOO_LARGE: Outcome = "dropped_too_large"
DIR_PREFIX = "tfobs-"
MIN_GROWTH_BYTES = 16 * 1024 * 1024  # RSS moves this much on its own: never cut below it
WATCH_S = 0.05  # how often a window's memory growth is checked
LIVE_EVERY_S = 0.25  # malloc's live bytes (0.1-0.3 ms, arena locks) at most this often
# Both measured by benchmarks/tracing_memory.py; the threshold slowed the demo's CPU steps.
# A capture folder needs room for the next capture: this many times the last one's size.
ROOM_FACTOR = 2
DIR_FIX = "set capture_dir (TFOBS_CAPTURE_DIR) to a folder with room"
SHM_FIX = ("give the container more shared memory (docker run --shm-size=1g; Kubernetes: an "
           "emptyDir with medium: Memory mounted at /dev/shm), or " + DIR_FIX)
MALLOC_FIX = ("raise max_capture_bytes to let windows hold more, or set "
              "MALLOC_MMAP_THRESHOLD_=131072 in the job's environment (large tensors kept out "
              "of the heap; CPU steps 25 % slower in the benchmark)")


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
        fallback_dir: str = "",
    ) -> None:
        self.capture_dir = capture_dir
        # Where captures go once `capture_dir` fills up: set only where tfobs chose the
        # folder itself (/dev/shm), never over a folder the user named.
        self._fallback_dir = fallback_dir if fallback_dir != capture_dir else ""
        self._room_warned = False
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
        self._rss_at_start = 0
        self._live_at_start: int | None = None
        self._live_checked = 0.0
        self.bytes_per_s = 0.0  # capture bytes per second of tracing, from earlier windows
        self.windows_cut = 0  # windows closed early because of their expected cost
        self.cut_cause: CutCause = "time"  # the latest cut's

    @classmethod
    def from_config(cls, config: Config) -> ProfilerSlot:
        quiet_log.prepare()  # here (enable()), not on the training thread at a window
        return cls(config.resolved_capture_dir(),
                   host_tracer_level=config.host_tracer_level,
                   device_tracer_level=config.device_tracer_level,
                   python_tracer_level=config.python_tracer_level,
                   max_capture_bytes=config.max_capture_bytes,
                   fallback_dir="" if config.capture_dir else tempfile.gettempdir())

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
                with quiet_log.quiet():  # TF logs two INFO lines here
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
            self._rss_at_start = rss_bytes()
            self._live_at_start = live_bytes()
            self._live_checked = time.monotonic()
            self._preempted_reason = ""
        return None

    # -- capture thread ------------------------------------------------------------------

    def time_cap_s(self) -> float:
        """Longest window whose capture should stay under half of max_capture_bytes, judged
        by earlier windows (inf before the first one)."""
        if self.bytes_per_s <= 0:
            return float("inf")
        return 0.5 * self.max_capture_bytes / self.bytes_per_s

    def wait_window(self, closed: threading.Event, seconds: float) -> str:
        """Wait until `closed` is set or `seconds` pass, whichever is first; cut the window
        short (return why) when its learned time cap passes or memory grows too much."""
        deadline = time.monotonic() + max(0.0, min(seconds, 86400.0))
        cap = self.time_cap_s()
        if cap < seconds:
            deadline = time.monotonic() + max(cap, WATCH_S)
        limit = self._growth_limit()
        # With malloc's live bytes known (checked at step ends, see `step_ended`), RSS is
        # held to the hard bound only: it also holds what the heap keeps of freed tensors.
        rss_limit = limit if self._live_at_start is None else max(limit, self.max_capture_bytes)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                if cap < seconds:
                    self._cut("time")
                    return f"cut at {cap:.2f} s: earlier windows captured " \
                           f"{self.bytes_per_s / 1e6:.1f} MB/s"
                return ""
            if closed.wait(min(left, WATCH_S)):
                return ""
            base = self._rss_at_start
            grown = rss_bytes() - base if base else 0
            if grown <= rss_limit:
                continue
            self._cut("rss")
            live0, live = self._live_at_start, live_bytes()
            if live0 is None or live is None:  # no mallinfo2: RSS is all there is
                return f"cut: memory grew {grown >> 20} MiB while tracing (limit {limit >> 20})"
            traced = live - live0
            return (f"cut: memory grew {grown >> 20} MiB (RSS) while tracing, malloc's live "
                    f"bytes {max(traced, 0) >> 20} MiB: the heap kept freed tensors (limit "
                    f"{rss_limit >> 20}); {MALLOC_FIX}")

    def _growth_limit(self) -> int:
        """Export and reduction multiply a capture many times over (RESULTS.md "Capture
        bounds"), so tracing may grow memory by a quarter of max_capture_bytes at most."""
        return max(MIN_GROWTH_BYTES, self.max_capture_bytes // 4)

    def _cut(self, cause: CutCause) -> None:
        self.windows_cut += 1
        self.cut_cause = cause

    def step_ended(self) -> str:
        """Training thread, at a traced step's end (every LIVE_EVERY_S at most): why the
        window is cut ("" if it is not) because malloc's live bytes, which hold the trace's
        buffers, grew over a quarter of max_capture_bytes. Read between steps, they leave
        out the step's own tensors, which come and go within it."""
        live0 = self._live_at_start
        now = time.monotonic()
        if live0 is None or now - self._live_checked < LIVE_EVERY_S:
            return ""
        self._live_checked = now
        live = live_bytes()
        limit = self._growth_limit()
        if live is None or live - live0 <= limit:
            return ""
        self._cut("live_bytes")
        return (f"cut: memory grew {(live - live0) >> 20} MiB (malloc's live bytes) while "
                f"tracing (limit {limit >> 20})")

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
                with quiet_log.quiet():  # TF logs three INFO lines here
                    session.export_to_tb()  # releases the GIL; stops tracing, writes the file
            finally:
                del session
                with self._cond:
                    self._session = None
            result = self._read(logdir, active_s, t0, read)
            handed = bool(result.path)
            return result
        except Exception as exc:
            reason = f"profiler export failed: {exc}"
            if "No space left on device" in str(exc):  # TF's own error type, no errno
                reason = self._folder_full(logdir)
            return CaptureResult(FAILED, reason, active_s=active_s,
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
        if active_s > 0:  # what the next windows may expect (decays so one outlier fades)
            self.bytes_per_s = max(nbytes / active_s, 0.5 * self.bytes_per_s)
        self._check_room(nbytes)
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

    def _folder_full(self, logdir: str) -> str:
        """The export found the capture folder full: the reason to count, after moving
        later windows to the fallback folder where there is one."""
        full = os.path.dirname(logdir) or self.capture_dir
        if self._use_fallback():
            return (f"profiler export failed: capture folder {full} is full (No space left "
                    f"on device); later windows go to {self.capture_dir}. To keep captures "
                    f"in memory, {SHM_FIX}")
        return (f"profiler export failed: capture folder {full} is full (No space left on "
                f"device): {DIR_FIX}, or lower window_steps")

    def _check_room(self, nbytes: int) -> None:
        """After a window: move on (or warn once) when the folder could not hold the next
        capture of about this size, so the next window is not traced in vain."""
        try:
            st = os.statvfs(self.capture_dir)
        except (OSError, AttributeError):  # no statvfs (Windows) or a vanished folder
            return
        free = st.f_bavail * st.f_frsize
        if free >= ROOM_FACTOR * nbytes:
            return
        short = (f"tfobs: capture folder {self.capture_dir} has {free >> 20} MiB free, too "
                 f"little for the next capture (the last one was {nbytes >> 20} MiB)")
        if self._use_fallback():
            _log.warning("%s; windows now go to %s. To keep captures in memory, %s", short,
                         self.capture_dir, SHM_FIX)
        elif not self._room_warned:
            self._room_warned = True
            _log.warning("%s: %s", short, DIR_FIX)

    def _use_fallback(self) -> bool:
        """Switch to the fallback folder, once; False where there is none."""
        fallback, self._fallback_dir = self._fallback_dir, ""
        if not fallback:
            return False
        self.capture_dir = fallback
        sweep_stale_dirs(fallback)
        start_kill_cleaner(fallback)  # as at start, for the new folder
        return True

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
                with quiet_log.quiet():
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
    """In a forked child: drop tfobs's hold, and stop the tracing a copied session left on.

    A fork during a window copies an active profiler session: left alone, the child keeps
    tracing (its memory grows with every op) and its own profiler cannot start. The copy is
    destroyed (which stops tracing without writing) on a short-lived thread, so that if the
    fork caught a profiler lock held by another thread, only that thread waits, never the
    child. The parent's capture folder is left to the parent.
    """
    global _hook_slot
    _hook_slot = None
    session = slot._session
    slot._session, slot._state, slot._logdir = None, "idle", ""
    if session is None:
        return
    holder = [session]
    del session

    def drop() -> None:
        holder.clear()  # the last reference: the C++ destructor stops the tracers

    try:
        threading.Thread(target=drop, name="tfobs-fork-untrace", daemon=True).start()
    except Exception:  # cannot start a thread in this child: keep it, as before
        _after_fork_keep.extend(holder)


_reapers: dict[tuple[int, str], Any] = {}  # (pid, folder) -> Popen of a kill -9 cleaner


def start_kill_cleaner(capture_dir: str) -> bool:
    """Remove this process's capture folders even when it is killed with -9.

    A tiny `sh` waits on a pipe whose only writer is this process: when the process ends in
    any way, the pipe closes and `sh` deletes `capture_dir/tfobs-<pid>-*` (a partial capture
    otherwise stays in RAM-backed /dev/shm until the next tfobs start on the host). One per
    process; True when running."""
    import subprocess

    key = (os.getpid(), os.path.abspath(capture_dir))
    running = _reapers.get(key)
    if running is not None and running.poll() is None:
        return True
    sh = shutil.which("sh")
    if sh is None:
        return False
    try:
        proc = subprocess.Popen(
            [sh, "-c", 'read _ ; rm -rf -- "$0"/' + DIR_PREFIX + '"$1"-*', key[1], str(key[0])],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True, start_new_session=True,
        )
    except OSError:
        return False
    _reapers[key] = proc  # the pipe's write end stays open for the process's lifetime
    return True


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
