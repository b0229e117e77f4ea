"""Capture folders left behind: those of dead tfobs processes are swept when tfobs starts,
and this process's own are removed when it ends in any way, kill -9 included.

Each window's folder is `<capture_dir>/tfobs-<pid>p<pid namespace>-<random>`, often on
RAM-backed /dev/shm, so a folder left by a killed job holds memory until someone deletes it.
The PID namespace (its /proc inode) is part of the owner: containers sharing one folder
(`--ipc=host`, a shared /dev/shm) run jobs with the same PIDs, and a folder is judged only
by a process that sees its owner's PIDs. Folders named by PID alone (`tfobs-<pid>-...`, an
earlier tfobs) are judged by PID, as they always were.
"""

from __future__ import annotations

import glob
import os
import shutil
from typing import Any

DIR_PREFIX = "tfobs-"

_reapers: dict[tuple[str, str], Any] = {}  # (owner, folder) -> Popen of a kill -9 cleaner


def _pid_namespace() -> str:
    """This process's PID namespace, as the inode of /proc/self/ns/pid ("0" where there is
    none to read: not Linux)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def owner() -> str:
    """This process's part of its capture folders' names: `<pid>p<pid namespace>` (read
    each time: a forked child has its own PID)."""
    return f"{os.getpid()}p{_pid_namespace()}"


def start_kill_cleaner(capture_dir: str) -> bool:
    """Remove this process's capture folders even when it is killed with -9.

    A tiny `sh` waits on a pipe whose only writer is this process: when the process ends in
    any way, the pipe closes and `sh` deletes `capture_dir/tfobs-<pid>-*` (a partial capture
    otherwise stays in RAM-backed /dev/shm until the next tfobs start on the host). One per
    process; True when running."""
    import subprocess

    key = (owner(), os.path.abspath(capture_dir))
    running = _reapers.get(key)
    if running is not None and running.poll() is None:
        return True
    sh = shutil.which("sh")
    if sh is None:
        return False
    try:
        proc = subprocess.Popen(
            [sh, "-c", 'read _ ; rm -rf -- "$0"/' + DIR_PREFIX + '"$1"-*', key[1], key[0]],
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
    here = _pid_namespace()
    # The folder is a literal path: one named `run[1]` or `exp*` is no pattern, which found
    # none of its own folders, or swept the folders of others that it matched.
    for path in glob.glob(os.path.join(glob.escape(capture_dir), DIR_PREFIX + "*-*")):
        owner_text = os.path.basename(path)[len(DIR_PREFIX):].split("-", 1)[0]
        pid_text, _, namespace = owner_text.partition("p")
        if not _is_pid(pid_text) or int(pid_text) == os.getpid():
            continue
        if namespace and namespace != here:  # another container's: its PIDs are not ours
            continue
        if not _pid_alive(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


# The largest process id a kill() takes (pid_t); Linux hands out at most 2**22.
_PID_MAX = 2**31 - 1


def _is_pid(text: str) -> bool:
    """Whether a folder's owner part is a process id this system could hand out: ASCII digits
    of a pid_t. The capture folder is often /dev/shm, which any user writes: a folder named
    `tfobs-²-x` (a digit int() refuses) or `tfobs-99999999999999999999-x` (past what kill()
    takes) raised out of enable() into the job."""
    return text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= _PID_MAX


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
