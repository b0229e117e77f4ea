"""Capture folders left behind: those of dead tfobs processes are swept when tfobs starts,
and this process's own are removed when it ends in any way, kill -9 included.

Each window's folder is `<capture_dir>/tfobs-<pid>-<random>`, often on RAM-backed /dev/shm,
so a folder left by a killed job holds memory until someone deletes it.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

DIR_PREFIX = "tfobs-"

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
