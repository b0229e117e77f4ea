"""Keep the windows that matter: write their captures to `keep_dir` in TensorBoard's layout.

tfobs deletes each capture once reduced. With `keep_dir` set, the capture of a window that
changed the picture (or that was asked for) is written to
`<keep_dir>/plugins/profile/<run>/<host>.xplane.pb`, where `tensorboard --logdir`,
`xprof --logdir` and `tfobs analyze` open it. The write goes through `tf.io.gfile` (gs://,
s3://, hdfs:// wherever TensorFlow's file systems reach), to a hidden temporary name renamed
into place, so nothing is ever seen half-written. A folder on this host may be shared with
other users: there it is written with calls that never follow a symbolic link (a link planted
at a name tfobs writes is refused and the window counted as not kept).

`Keeper.keep()` is the one call the reduce path makes once a summary exists. It runs on a
tfobs thread, never a training step; the write's CPU time is returned so the caller charges
it to the overhead budget. A slow store is given `WRITE_TIMEOUT_S`: past it the reduce path
goes on (the write finishes on its own thread, the window's span carries no path) and the
next keep is dropped while that write still runs. Every failure (full disk, read-only
folder, missing bucket, unknown file system) is counted in `tfobs_errors_total{stage="keep"}`
and dropped, never raised.

Retention: this worker's kept files (those named for its host, found again after a restart)
stay under `keep_max_bytes`; the oldest run is deleted first, before a new one is written so
a nearly full disk gets the room back first.
"""

from __future__ import annotations

import errno
import glob
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfobs.config import Config
from tfobs.health import HealthLedger, KeptCapture
from tfobs.identity import distinct_suffix
from tfobs.once import Once
from tfobs.runtime.failures import Failures
from tfobs.summary import ErrorStage, WindowSummary
from tfobs.window import WindowRecord

_log = logging.getLogger(__name__)

STAGE: ErrorStage = "keep"  # tfobs_errors_total{stage}
RECENT = 5  # windows a trigger compares against
WRITE_TIMEOUT_S = 30.0  # the reduce path waits this long for a write, then goes on
HOUR_S = 3600.0
# Input-bound verdicts, best to worst; "unknown" is no verdict. "potentially" follows XProf's
# "other" time, not input, so the trigger fires only at moderately or worse.
_VERDICT_RANK = {"not": 0, "potentially": 1, "moderately": 2, "highly": 3}
_MIN_INPUT_RANK = 2
# A worse verdict counts only with an input share this much above every recent window's: a
# job whose share sits on a threshold (4.9 %, 5.1 %, ...) flips its verdict by noise.
INPUT_MARGIN = 0.02
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Triggers:
    """Which triggers a window sets off, against the job's recent windows (pure, no I/O).

    Called once per reduced window, in order; each call also records the window as history.
    """

    def __init__(self, config: Config) -> None:
        self._cfg = config
        self._seen_first = False
        self._verdicts: deque[int] = deque(maxlen=RECENT)
        self._input_ratios: deque[float] = deque(maxlen=RECENT)
        # Step times since the step time last rose: a rise is kept once, then it is the norm.
        self._step_times: deque[float] = deque(maxlen=RECENT)
        self._critical: frozenset[str] = frozenset()

    def reasons(self, summary: WindowSummary) -> list[str]:
        cfg = self._cfg
        out: list[str] = []
        if summary.steps.count <= 0:
            return out  # no step, no figure to compare
        if not self._seen_first:
            self._seen_first = True
            if cfg.keep_first:
                out.append("first")
        rank = _VERDICT_RANK.get(summary.input_bound.verdict)
        if rank is not None:
            ratio = summary.input_bound.ratio
            worse = (rank >= _MIN_INPUT_RANK and bool(self._verdicts)
                     and rank > max(self._verdicts)
                     and ratio >= max(self._input_ratios) + INPUT_MARGIN)
            if cfg.keep_on_input_bound and worse:
                out.append("input_bound")
            self._verdicts.append(rank)
            self._input_ratios.append(ratio)
        mean = summary.steps.mean_s
        if mean > 0:
            rise = cfg.keep_on_step_time_rise
            if rise > 0 and self._step_times and mean > (1.0 + rise) * statistics.median(
                    self._step_times):
                out.append("step_time")
                self._step_times.clear()
            self._step_times.append(mean)
        critical = frozenset(a.code for a in summary.advice if a.severity == "critical")
        if cfg.keep_on_critical_advice and critical - self._critical:
            out.append("critical_advice")
        self._critical = critical
        return out


class GfileStore:
    """Kept captures under one folder or URL, through `tf.io.gfile` (training process only:
    TensorFlow is loaded there already)."""

    def __init__(self, root: str, host: str) -> None:
        # A local folder is made absolute now: a job that changes its working folder
        # after enable() must not scatter its kept windows (and their retention) over
        # each folder it was in.
        self.root = root.rstrip("/") or "/"
        if "://" not in self.root:
            self.root = os.path.abspath(self.root)
        self.host = host

    @staticmethod
    def _gfile() -> Any:
        from tfobs.capture.import_watch import imported

        if not imported("tensorflow"):  # a JAX job: local folders only
            from tfobs.runtime.local_files import LocalFiles

            return LocalFiles()
        import tensorflow as tf

        return tf.io.gfile

    def run_dir(self, run: str) -> str:
        return f"{self.root}/plugins/profile/{run}"

    def path(self, run: str) -> str:
        return f"{self.run_dir(run)}/{self.host}.xplane.pb"

    def put(self, run: str, data: bytes) -> str:
        """Write to a hidden temporary name, then rename into place; on failure remove what
        this call made (the temporary file, a run folder it created)."""
        if self.local:
            return self._put_local(run, data)
        gfile = self._gfile()
        run_dir, final = self.run_dir(run), self.path(run)
        tmp = f"{run_dir}/.{self.host}.xplane.pb.{secrets.token_hex(8)}.tmp"
        created = not gfile.exists(run_dir)
        try:
            gfile.makedirs(run_dir)
            with gfile.GFile(tmp, "wb") as f:
                f.write(data)
            gfile.rename(tmp, final, overwrite=True)
        except Exception:
            _quietly(gfile.remove, tmp)
            if created:
                self._remove_if_empty(run_dir)
            raise
        return final

    @property
    def local(self) -> bool:
        return "://" not in self.root

    def _put_local(self, run: str, data: bytes) -> str:
        """A folder on this host, which other users may share (a keep folder on a team
        disk): every folder below the root is opened without following a link, the
        temporary file is made new (O_EXCL) under a random name, and a link planted at the
        final name is refused, so nothing is ever written through a link another user put
        there. A link raises PlantedLink: the window is counted as not kept."""
        os.makedirs(self.root, exist_ok=True)
        fds: list[int] = []
        tmp, created = "", False
        try:
            fds.append(os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
            for name in ("plugins", "profile", run):
                try:
                    os.mkdir(name, 0o777, dir_fd=fds[-1])
                    created = name == run
                except FileExistsError:
                    pass
                fds.append(_open_dir(name, fds[-1], f"{self.root}/plugins/profile"))
            run_fd, final = fds[-1], f"{self.host}.xplane.pb"
            tmp = f".{self.host}.xplane.pb.{secrets.token_hex(8)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o666, dir_fd=run_fd)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            if _is_link(final, run_fd):
                raise PlantedLink(f"{self.path(run)} is a symbolic link; not written through it")
            os.replace(tmp, final, src_dir_fd=run_fd, dst_dir_fd=run_fd)
            tmp = ""
        except BaseException:
            if tmp and len(fds) == 4:
                _quietly(lambda n: os.unlink(n, dir_fd=fds[3]), tmp)
            if created and len(fds) >= 3:
                _quietly(lambda n: os.rmdir(n, dir_fd=fds[2]), run)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return self.path(run)

    def held(self) -> list[tuple[str, int]]:
        """(path, bytes) of this host's kept captures, oldest run first (runs are named by
        UTC time). On a local folder, a link (another user's) is never counted as ours."""
        gfile = self._gfile()
        if self.local:
            paths = [p for p in self._local_paths() if not _linked(p, self.root)]
        else:  # the folder's and host's names as literals: only the run is a pattern
            # (`gs://b/run[1]` matched none of its own kept files, `gs://b/run*` other
            # folders' too); glob.escape's `[*]` classes are what every tf.io.gfile file
            # system's matcher reads.
            paths = sorted(gfile.glob(f"{glob.escape(self.root)}/plugins/profile/*/"
                                      f"{glob.escape(self.host)}.xplane.pb"))
        return [(p, int(gfile.stat(p).length)) for p in paths]

    def _local_paths(self) -> list[str]:
        """This host's kept files in a local folder, as `glob(path("*"))` finds them, but
        listed: the folder's name is no pattern (a glob of `keep[1]/...` found none of them,
        and keep_max_bytes never deleted one)."""
        profile = f"{self.root}/plugins/profile"
        try:
            runs = os.listdir(profile)
        except OSError:
            return []
        name = f"{self.host}.xplane.pb"
        return sorted(f"{profile}/{run}/{name}" for run in runs
                      if not run.startswith(".") and os.path.lexists(f"{profile}/{run}/{name}"))

    def remove(self, path: str) -> None:
        """Delete a kept capture, and its run folder once no capture is left in it: XProf
        writes its caches there (`.cached_tools.json`, `*.hlo_proto.pb`, ...) when a tool
        opens the run, and they mean nothing without the capture."""
        gfile = self._gfile()
        run_dir = path.rsplit("/", 1)[0]
        if self.local and _linked(path, self.root):
            raise PlantedLink(f"{path} is reached through a symbolic link; not deleted")
        gfile.remove(path)
        try:
            names = gfile.listdir(run_dir)
            if not any(n.endswith(".xplane.pb") for n in names):
                if self.local:
                    shutil.rmtree(run_dir)  # never follows a link (refuses one at the top)
                else:
                    gfile.rmtree(run_dir)
        except Exception:
            _log.debug("tfobs keep: could not remove %s", run_dir, exc_info=True)

    def _remove_if_empty(self, run_dir: str) -> None:
        gfile = self._gfile()
        try:
            if not gfile.listdir(run_dir):
                gfile.rmtree(run_dir)
        except Exception:
            _log.debug("tfobs keep: could not remove %s", run_dir, exc_info=True)


@dataclass
class _Write:
    path: str = ""
    cpu_s: float = 0.0


class Keeper:
    """Decides which windows to keep and writes them (see the module doc)."""

    def __init__(self, config: Config, health: HealthLedger, failures: Failures,
                 identity: dict[str, str], *, store: GfileStore | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._cfg = config
        self._health, self._failures = health, failures
        self.store = store or GfileStore(config.keep_dir, host_name(identity))
        self.triggers = Triggers(config)
        self._clock = clock
        self._auto_times: deque[float] = deque()
        self._held: deque[tuple[str, int]] | None = None  # read from the store on first use
        self._writer: threading.Thread | None = None
        self._warned = Once()

    def keep(self, summary: WindowSummary, record: WindowRecord, data: bytes,
             path: str = "") -> float:
        """Keep this window's capture when asked for or a trigger fired; sets
        `record.kept_path` once written. Returns the CPU seconds spent (for the budget).

        The capture is `data`, or the file at `path` when the reduce helper had it (read
        here only for a window that is kept)."""
        reasons = self.triggers.reasons(summary)
        if not reasons and not record.keep:
            return 0.0
        if not record.keep and not self._within_hourly_cap():
            self._health.count_dropped("keep")
            return 0.0
        if record.keep:
            reasons.insert(0, "on_demand")
        size = len(data)
        if not data and path:
            try:
                size = os.path.getsize(path)
            except OSError as exc:
                self._failures.report(STAGE, exc)
                return 0.0
        if size > self._cfg.keep_max_bytes:
            self._health.count_dropped("keep")
            self._warn_once(f"a capture of {size} bytes is over keep_max_bytes; not kept")
            return 0.0
        if not data and path:  # left on disk for the reduce helper: read only what is kept
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except OSError as exc:
                self._failures.report(STAGE, exc)
                return 0.0
        if self._writer is not None and self._writer.is_alive():
            self._failures.report(STAGE, "the previous kept capture is still being written "
                                  "(slow store); this window is not kept")
            return 0.0
        out = _Write()
        reason = ",".join(reasons)
        writer = threading.Thread(target=self._write, args=(summary, record, data, reason, out),
                                  name="tfobs-keep", daemon=True)
        self._writer = writer
        writer.start()
        writer.join(WRITE_TIMEOUT_S)
        if writer.is_alive():
            self._failures.report(STAGE, f"writing a kept capture took over {WRITE_TIMEOUT_S:g}"
                                  " s (slow store); its span carries no path")
            return out.cpu_s
        record.kept_path = out.path
        return out.cpu_s

    def _within_hourly_cap(self) -> bool:
        now, times = self._clock(), self._auto_times
        while times and now - times[0] >= HOUR_S:
            times.popleft()
        if len(times) >= self._cfg.keep_max_per_hour:
            return False
        times.append(now)
        return True

    def _write(self, summary: WindowSummary, record: WindowRecord, data: bytes, reason: str,
               out: _Write) -> None:
        cpu0 = time.thread_time()
        try:
            held = self._held_now()
            self._trim(held, self._cfg.keep_max_bytes - len(data))
            path = self.store.put(run_name(record, summary), data)
            held.append((path, len(data)))
            self._health.count_kept(KeptCapture(record.index, self._clock(), path, reason),
                                    sum(n for _, n in held))
            out.path = path
            if self._cfg.verbose:
                _log.info("tfobs kept window %d (%s): %s", record.index, reason, path)
        except Exception as exc:  # full disk, read-only, missing bucket, unknown scheme
            self._failures.report(STAGE, exc)
        finally:
            out.cpu_s = time.thread_time() - cpu0

    def _held_now(self) -> deque[tuple[str, int]]:
        if self._held is None:
            self._held = deque(self.store.held())
        return self._held

    def _trim(self, held: deque[tuple[str, int]], room: int) -> None:
        """Delete the oldest kept captures until they fit in `room` bytes."""
        total = sum(n for _, n in held)
        while held and total > room:
            path, n = held.popleft()
            total -= n
            try:
                self.store.remove(path)
            except Exception as exc:
                self._failures.report(STAGE, f"could not delete the old kept capture {path}: "
                                      f"{exc}")
        self._health.set_kept_bytes(total)

    def _warn_once(self, message: str) -> None:
        if self._warned.first():
            _log.warning("tfobs keep: %s", message)


def host_name(identity: dict[str, str]) -> str:
    """`<hostname>_<tf_job>_<tf_task>`: the file name XProf shows as the host; each worker of
    a job, also several on one machine, writes its own."""
    raw = f"{socket.gethostname()}_{identity.get('tf_job', 'local')}_{identity.get('tf_task', '0')}"
    clean = _UNSAFE.sub("-", raw)
    # Changed (a `:` in a label): the original's digits keep `a:b` and `a-b` two files.
    return clean if clean == raw else f"{clean}-{distinct_suffix(raw)}"


def run_name(record: WindowRecord, summary: WindowSummary) -> str:
    """The window's start in UTC (TensorFlow's own run names, so runs sort by time) and its
    index and first step."""
    start_ns = record.start_ns or summary.start_ns or time.time_ns()
    stamp = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(start_ns / 1e9))
    return f"{stamp}_w{record.index:04d}_step{max(record.first_step, 0)}"


class PlantedLink(OSError):
    """A symbolic link where the keep folder's own file or folder belongs."""


def _open_dir(name: str, parent_fd: int, where: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise PlantedLink(f"{where}: {name!r} is a symbolic link or a file, not a folder; "
                              "not written through it") from None
        raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except FileNotFoundError:
        return False


def _linked(path: str, root: str) -> bool:
    """Whether any part of `path` below `root` is a symbolic link."""
    rel = os.path.relpath(path, root)
    here = root
    for part in rel.split(os.sep):
        here = os.path.join(here, part)
        if os.path.islink(here):
            return True
    return False


def _quietly(fn: Callable[[str], object], path: str) -> None:
    try:
        fn(path)
    except Exception:  # mostly: nothing was there; either way the next tidy tries again
        _log.debug("tfobs keep: could not remove %s", path, exc_info=True)


__all__ = ["STAGE", "WRITE_TIMEOUT_S", "GfileStore", "Keeper", "PlantedLink", "Triggers",
           "host_name", "run_name"]
