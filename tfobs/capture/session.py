"""The only code in tfobs that starts and ends profiler sessions (through the framework's
`Backend`: TensorFlow's or JAX's, `framework.py`).

One `ProfilerSlot` per process owns tfobs's use of the process's single profiler session:

* `start()` (training thread, 0.1-1 ms) opens a session for a fresh folder on tmpfs.
* `end_tracing()` (training thread, at a step boundary) waits for the job's queued device
  work (`Backend.drain`) and then stops tracing and collects the XSpace (`Backend.stop`).
  Ending there is what keeps a window from killing the job: the stop tears down XLA's CUPTI
  tracer (activity disable, flush, `cuptiFinalize`), and done from another thread while the
  job's compiled steps launch kernels it poisoned the CUDA context in 8 of 9 GPU runs
  (RESEARCH.md, round 3); TensorFlow's native export from a side thread also aborted a
  MultiWorkerMirroredStrategy worker in 12 of 55 CPU runs. Its cost (the wait for the
  device, the stop) is timed and charged to the budget.
* `finish()` (capture thread) writes the collected XSpace into the folder in TensorBoard's
  layout (or returns its bytes) and deletes what the reader will not. Only when no step
  boundary comes (the job stopped stepping) does it stop a session itself.
* `wait_window()` (capture thread) waits for the window to fill, but cuts it short when what
  it will cost grows too large: the profiler buffers every event in memory until export (and
  export then copies them several times), so a window is bounded before it is exported by
  (a) a time cap learned from earlier windows' capture bytes per second, so the expected
  capture stays under half of `max_capture_bytes`, and (b) the memory it grows since the
  window opened: the trace's own (malloc's live bytes, where glibc tells them, read between
  steps by `step_ended()`) at most a quarter of `max_capture_bytes` (16 MiB at least: memory
  is noisy), and RSS, which also holds the freed tensors glibc's heap keeps while trace
  buffers pin it, at most all of it (a quarter where live bytes are unknown).
* `preempt()` gives the profiler up at once: the user's own profiling always wins
  (`tf_profiler.install_yield_hook`, `jax_profiler.install_yield_hook`).

Beside it in this package: `folder_cleanup.py` (capture folders of dead processes swept at
start, this process's removed even after kill -9) and `forked_session.py` (a session copied
into a forked child, dropped there).

Every call returns a `CaptureResult`; nothing here raises into the caller.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tfobs.capture import forked_session, framework, markers
from tfobs.capture.folder_cleanup import (
    DIR_PREFIX,
    owner,
    start_kill_cleaner,
    sweep_stale_dirs,
)
from tfobs.capture.framework import Backend
from tfobs.capture.heap import live_bytes, rss_bytes
from tfobs.once import Once
from tfobs.summary import CutCause, Outcome

if TYPE_CHECKING:
    from tfobs.config import Config

_log = logging.getLogger(__name__)

CAPTURED: Outcome = "captured"
SKIPPED_BUSY: Outcome = "skipped_busy"
FAILED: Outcome = "failed"
TOO_LARGE: Outcome = "dropped_too_large"
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


# Where a window's tracing was stopped: at a step boundary or the end of training, on the
# training thread (after the device drained), or on the capture thread because no boundary
# came (the job stopped stepping; the only end that may race the job's device work).
# steps_open: at a step boundary while another thread's step ran (see Windows).
EndAt = Literal["step_boundary", "train_end", "steps_open", "capture_thread"]


@dataclass(frozen=True)
class WindowEnd:
    at: EndAt
    drain_s: float  # waiting for the job's queued device work
    stop_s: float  # the framework's stop: tracers torn down, the XSpace collected
    thread: str  # the thread that stopped it
    active_s: float  # the profiler was on, start to stop


def write_capture(logdir: str, data: bytes) -> str:
    """Write an XSpace where TensorBoard's profile plugin looks for it:
    logdir/plugins/profile/<run>/<host>.xplane.pb (a run named by its UTC time)."""
    run = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime())
    folder = os.path.join(logdir, "plugins", "profile", run)
    os.makedirs(folder, exist_ok=True)
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())
    path = os.path.join(folder, f"{host or 'localhost'}.xplane.pb")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return path


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
        backend: Backend | None = None,
        framework_option: str = "auto",
    ) -> None:
        self.capture_dir = capture_dir
        # Where captures go once `capture_dir` fills up: set only where tfobs chose the
        # folder itself (/dev/shm), never over a folder the user named.
        self._fallback_dir = fallback_dir if fallback_dir != capture_dir else ""
        self._room_warned = Once()
        self.max_capture_bytes = max_capture_bytes
        self._options = (host_tracer_level, device_tracer_level, python_tracer_level)
        # The framework's profiler; None until the runtime knows which (framework.py).
        self.backend: Backend | None = backend
        self._framework_option = framework_option
        # How the backend is chosen at the first start when none was given (the runtime
        # puts its own here: it also places the framework's hooks).
        self.resolve: Callable[[], Backend | None] = self._resolve_alone
        # Entered through its bare lock (`with self._lock`), not the Condition: a Ctrl-C
        # lands as Condition.__enter__'s call to acquire returns, leaving the lock held with
        # no `with` to release it (training and exit then wait forever); the C lock's own
        # `with` gives a signal no such place.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._session: Any = None
        self._state = "idle"  # idle -> active -> stopping -> stopped -> exporting -> idle
        self._logdir = ""
        self._started = 0.0
        self._preempted_reason = ""
        self.preemptions = 0
        self._wake: threading.Event | None = None  # set when an active session is dropped
        self._rss_at_start = 0
        self._live_at_start: int | None = None
        self._live_checked = 0.0
        self._collected: bytes | None = None  # the XSpace `end_tracing()` collected
        self._written = False  # ... or the framework wrote it into the session's folder
        self._end_error = ""
        self._cut_open = False  # the open window was cut (ends at the next step boundary)
        self._cut_lock = threading.Lock()  # both the training and the capture thread cut
        self.last_end: WindowEnd | None = None
        self.bytes_per_s = 0.0  # capture bytes per second of tracing, from earlier windows
        self.windows_cut = 0  # windows closed early because of their expected cost
        self.cut_cause: CutCause = "time"  # the latest cut's

    @classmethod
    def from_config(cls, config: Config) -> ProfilerSlot:
        # Made absolute now: a job that changes its working folder after enable() (into
        # each run's output folder) must not move later windows, and their kill -9
        # cleaner, which watches the folder named at enable(), away from them.
        return cls(os.path.abspath(config.resolved_capture_dir()),
                   host_tracer_level=config.host_tracer_level,
                   device_tracer_level=config.device_tracer_level,
                   python_tracer_level=config.python_tracer_level,
                   max_capture_bytes=config.max_capture_bytes,
                   fallback_dir="" if config.capture_dir else tempfile.gettempdir(),
                   framework_option=config.framework)

    def _resolve_alone(self) -> Backend | None:
        if self.backend is None:
            name = (framework.decided_at_enable(self._framework_option)
                    or framework.choose() or framework.installed_default())
            if name is not None:
                self.backend = framework.backend(name)
                if markers.current_backend() is None:  # steps marked for this slot's sessions
                    markers.set_backend(self.backend)
        return self.backend

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
            backend = self.backend or self.resolve()
        except Exception as exc:  # the framework missing or broken: nothing to profile with
            return CaptureResult(FAILED, f"profiler unavailable: {exc}")
        if backend is None:
            return CaptureResult(FAILED, "no framework to profile: neither TensorFlow nor "
                                 "JAX is imported (set framework / TFOBS_FRAMEWORK)")
        with self._lock:
            if self._state != "idle":
                return CaptureResult(SKIPPED_BUSY, f"tfobs window still {self._state}")
            try:
                if backend.user_session_active():
                    public = ("tf.profiler.experimental" if backend.name == "tensorflow"
                              else "jax.profiler")
                    return CaptureResult(SKIPPED_BUSY, f"{public} session active (the job's "
                                         "own profiling)")
                # A configured folder may not exist yet (fresh pod) or may have been
                # removed by a tmp cleaner: make it, as TF's own profiler does for logdirs.
                os.makedirs(self.capture_dir, exist_ok=True)
                logdir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{owner()}-",
                                          dir=self.capture_dir)
            except Exception as exc:
                return CaptureResult(FAILED, self._no_folder(exc))
            try:
                session = backend.open(logdir, self._options)
            except Exception as exc:
                shutil.rmtree(logdir, ignore_errors=True)
                if backend.is_busy(exc):
                    return CaptureResult(SKIPPED_BUSY, "another profiler session is active "
                                         "(profiler server or another tool)")
                return CaptureResult(FAILED, f"profiler start failed: {exc}")
            self._session, self._logdir, self._state = session, logdir, "active"
            self._collected, self._written, self._end_error = None, False, ""
            self._cut_open = False
            self._wake = wake
            self._started = time.perf_counter()
            self._rss_at_start = rss_bytes()
            self._live_at_start = live_bytes()
            self._live_checked = time.monotonic()
            self._preempted_reason = ""
        return None

    def end_tracing(self, at: EndAt = "step_boundary") -> WindowEnd | None:
        """Stop tracing now, on this thread: wait for the device, stop, collect (training
        thread at a step boundary; see the module doc). None when no session was tracing.
        Never raises: a failed stop is told by `finish()`."""
        with self._lock:
            if self._state != "active":
                return None
            session, self._session = self._session, None
            self._state = "stopping"
        backend = self.backend
        t0 = time.perf_counter()
        try:
            if backend is not None and at != "capture_thread":
                backend.drain()
        except Exception as exc:  # a device that cannot be waited for: stop all the same
            self._end_error = f"device drain failed: {exc}"
        t1 = time.perf_counter()
        data: bytes | None = None
        error = ""
        try:
            if backend is not None:
                data = backend.stop(session)
        except Exception as exc:
            error = str(exc) or type(exc).__name__
            if backend is not None and backend.is_busy(exc):
                error = "busy: " + error
        finally:
            del session
        t2 = time.perf_counter()
        end = WindowEnd(at=at, drain_s=t1 - t0, stop_s=t2 - t1,
                        thread=threading.current_thread().name, active_s=t1 - self._started)
        with self._lock:
            self._collected, self.last_end = data, end
            self._written = data is None and not error
            if error:
                self._end_error = error
            if self._state == "stopping":
                self._state = "stopped"
            self._cond.notify_all()
        return end

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
                if cap < seconds and self._cut("time"):
                    return f"cut at {cap:.2f} s: earlier windows captured " \
                           f"{self.bytes_per_s / 1e6:.1f} MB/s"
                return ""
            if closed.wait(min(left, WATCH_S)):
                return ""
            if self._cut_open:  # the step-end check cut it: it ends at this step boundary
                continue
            base = self._rss_at_start
            grown = rss_bytes() - base if base else 0
            if grown <= rss_limit or not self._cut("rss"):
                continue
            live0, live = self._live_at_start, live_bytes()
            if live0 is None or live is None:  # no mallinfo2: RSS is all there is
                return f"cut: memory grew {grown >> 20} MiB while tracing (limit {limit >> 20})"
            traced = live - live0
            return (f"cut: memory grew {grown >> 20} MiB (RSS) while tracing, malloc's live "
                    f"bytes {max(traced, 0) >> 20} MiB: the heap kept freed tensors (limit "
                    f"{rss_limit >> 20}); {MALLOC_FIX}")

    def over_hard_bound(self) -> bool:
        """Tracing has grown the process's memory past max_capture_bytes (a window whose
        end is overdue must not run the job out of memory)."""
        base = self._rss_at_start
        return bool(base) and rss_bytes() - base > max(self._growth_limit(),
                                                       self.max_capture_bytes)

    def _growth_limit(self) -> int:
        """Export and reduction multiply a capture many times over (RESULTS.md "Capture
        bounds"), so tracing may grow memory by a quarter of max_capture_bytes at most."""
        return max(MIN_GROWTH_BYTES, self.max_capture_bytes // 4)

    def _cut(self, cause: CutCause) -> bool:
        """Count the open window's cut, once: False if it was cut already. The training
        thread's memory check (`step_ended`) and the capture thread's watch (`wait_window`)
        can both see one window outgrow its bound; the first says why."""
        with self._cut_lock:
            if self._cut_open:
                return False
            self.windows_cut += 1
            self.cut_cause = cause
            self._cut_open = True
            return True

    def step_ended(self) -> str:
        """Training thread, at a traced step's end (every LIVE_EVERY_S at most): why the
        window is cut ("" if it is not) because malloc's live bytes, which hold the trace's
        buffers, grew over a quarter of max_capture_bytes. Read between steps, they leave
        out the step's own tensors, which come and go within it."""
        live0 = self._live_at_start
        now = time.monotonic()
        if live0 is None or self._cut_open or now - self._live_checked < LIVE_EVERY_S:
            return ""
        self._live_checked = now
        live = live_bytes()
        limit = self._growth_limit()
        if live is None or live - live0 <= limit or not self._cut("live_bytes"):
            return ""
        return (f"cut: memory grew {(live - live0) >> 20} MiB (malloc's live bytes) while "
                f"tracing (limit {limit >> 20})")

    def finish(self, read: bool = True, end_wait_s: float = 30.0) -> CaptureResult:
        """Hand over the capture `end_tracing()` collected: its bytes (`read`), or the file
        written into the session's folder in TensorBoard's layout (`path`, `folder`, for
        the reduce helper; the caller deletes the folder). A session still tracing (no
        step boundary came) is ended here, off the training thread, and counted so."""
        with self._lock:
            if self._state == "stopping":  # the training thread is ending it right now
                self._cond.wait_for(lambda: self._state != "stopping", end_wait_s)
            if self._state not in ("active", "stopped"):
                reason = self._preempted_reason or "no tfobs session was active"
                return CaptureResult(SKIPPED_BUSY, reason)
            unended = self._state == "active"
        if unended:
            self.end_tracing(at="capture_thread")
        with self._lock:
            if self._state != "stopped":
                reason = self._preempted_reason or "the window was dropped"
                return CaptureResult(SKIPPED_BUSY, reason)
            data, logdir, self._collected = self._collected, self._logdir, None
            end, error, written = self.last_end, self._end_error, self._written
            self._state = "exporting"
        t0 = time.perf_counter()
        active_s = end.active_s if end is not None else t0 - self._started
        handed = False
        try:
            if written:
                result = self._read(logdir, active_s, t0, read)
                handed = bool(result.path)
                return result
            if data is None:
                if "No space left on device" in error:  # TF's own error type, no errno
                    return CaptureResult(FAILED, self._folder_full(logdir), active_s=active_s,
                                         export_s=time.perf_counter() - t0)
                if error.startswith("busy: "):
                    return CaptureResult(SKIPPED_BUSY, "another profiler session is active "
                                         "(profiler server or another tool)",
                                         active_s=active_s)
                return CaptureResult(FAILED, f"profiler stop failed: {error or 'no data'}",
                                     active_s=active_s, export_s=time.perf_counter() - t0)
            result = self._hand_over(data, logdir, active_s, t0, read)
            handed = bool(result.path)
            return result
        except Exception as exc:
            reason = f"capture write failed: {exc}"
            if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
                reason = self._folder_full(logdir)
            return CaptureResult(FAILED, reason, active_s=active_s,
                                 export_s=time.perf_counter() - t0)
        finally:
            del data
            if not handed:
                shutil.rmtree(logdir, ignore_errors=True)
            with self._lock:
                self._state, self._logdir = "idle", ""
                self._cond.notify_all()

    def _read(self, logdir: str, active_s: float, t0: float, read: bool) -> CaptureResult:
        """The capture the framework wrote into `logdir` itself."""
        # The folder is a literal path: a capture_dir named `run[1]` or `exp*` is no pattern.
        files = glob.glob(os.path.join(glob.escape(logdir), "plugins", "profile", "*",
                                       "*.xplane.pb"))
        if not files:
            return CaptureResult(FAILED, "profiler wrote no .xplane.pb", active_s=active_s,
                                 export_s=time.perf_counter() - t0)
        nbytes = sum(os.path.getsize(f) for f in files)
        if read or nbytes > self.max_capture_bytes:
            data = b""
            if nbytes <= self.max_capture_bytes:
                with open(files[0], "rb") as fh:  # one host per process: one file
                    data = fh.read()
            result = self._hand_over(data, logdir, active_s, t0, True, nbytes)
            return result
        self._note_size(nbytes, active_s)
        return CaptureResult(CAPTURED, nbytes=nbytes, active_s=active_s,
                             export_s=time.perf_counter() - t0, path=files[0], folder=logdir)

    def _note_size(self, nbytes: int, active_s: float) -> None:
        if active_s > 0:  # what the next windows may expect (decays so one outlier fades)
            self.bytes_per_s = max(nbytes / active_s, 0.5 * self.bytes_per_s)
        self._check_room(nbytes)

    def _hand_over(self, data: bytes, logdir: str, active_s: float, t0: float,
                   read: bool, nbytes: int = -1) -> CaptureResult:
        nbytes = len(data) if nbytes < 0 else nbytes
        self._note_size(nbytes, active_s)
        if nbytes > self.max_capture_bytes:
            return CaptureResult(TOO_LARGE, f"capture is {nbytes} bytes, over "
                                 f"max_capture_bytes={self.max_capture_bytes}", nbytes=nbytes,
                                 active_s=active_s, export_s=time.perf_counter() - t0)
        if read:
            return CaptureResult(CAPTURED, data=data, nbytes=nbytes, active_s=active_s,
                                 export_s=time.perf_counter() - t0)
        path = write_capture(logdir, data)
        return CaptureResult(CAPTURED, nbytes=nbytes, active_s=active_s,
                             export_s=time.perf_counter() - t0, path=path, folder=logdir)

    def _no_folder(self, exc: BaseException) -> str:
        """Why no window folder could be made in capture_dir, and the fix: the folder
        turned read-only, or was replaced by a file or a link to nothing after enable()
        (said before as "[Errno 17] File exists", naming neither cause nor fix)."""
        from tfobs.scratch import local_folder_problem

        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        try:
            problem = local_folder_problem(self.capture_dir)
        except Exception:  # the reason above still says what failed
            _log.debug("tfobs: checking capture_dir failed", exc_info=True)
            problem = ""
        return (f"cannot create capture folder in {self.capture_dir}: {why}"
                + (f" ({problem})" if problem else "")
                + "; set capture_dir (TFOBS_CAPTURE_DIR) to a folder this process can write")

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
        elif self._room_warned.first():
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
        """Release the profiler now: drop an active session, wait out a stop in progress
        (a collected capture still being written holds no profiler).

        Returns True when the profiler is free afterwards.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if self._state == "active":
                session, self._session = self._session, None
                self._state = "idle"
                self._preempted_reason = reason
                self.preemptions += 1
                shutil.rmtree(self._logdir, ignore_errors=True)
                self._logdir = ""
                if self.backend is not None:
                    self.backend.discard(session)
                del session
                self._cond.notify_all()
                if self._wake is not None:
                    self._wake.set()
            while self._state == "stopping":
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        self.preempt("tfobs is shutting down", timeout_s)

    def forget_after_fork(self) -> None:
        """In a forked child: drop tfobs's hold, and stop the tracing a copied session left
        on (`forked_session.py`). The parent's capture folder is left to the parent."""
        session = self._session
        self._session, self._state, self._logdir = None, "idle", ""
        if session is not None:
            forked_session.drop(session)
