"""The scratch folder captures are written to before they are read (the capture_dir option).

tfobs picks /dev/shm itself where it can (tmpfs: capture I/O stays in memory); a folder the
user names is checked at enable(), since a file there, or a folder tfobs cannot write, would
fail every window.
"""

from __future__ import annotations

import os
import tempfile

SHM_DIR = "/dev/shm"  # the capture folder tfobs picks itself; tempfile's folder if it fills


def resolve_capture_dir(capture_dir: str = "") -> str:
    """'' -> /dev/shm when it exists and is writable (tmpfs: capture I/O stays in memory)."""
    if capture_dir:
        return capture_dir
    if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK | os.X_OK):
        return SHM_DIR
    return tempfile.gettempdir()


def scratch_folder_problem(value: object) -> str:
    """'' when `value` can be the capture_dir option (a folder tfobs can write captures to, or
    one it can make at the first window; '' is tfobs's own choice), else what is allowed."""
    allowed = "'' (tfobs picks /dev/shm) or a folder this process can write"
    if not isinstance(value, str):
        return allowed
    why = local_folder_problem(value) if value else ""
    return f"{allowed} ({why})" if why else ""


def local_folder_problem(path: str) -> str:
    """'' when this process can write to the folder `path` or make it (every missing part of
    it), else why not, e.g. "this path is a file": checked when the option is set, so a bad
    folder fails enable() instead of every window (capture_dir) or every keep (keep_dir).
    Where the nearest folder that exists looks writable, one folder is made in it and
    removed: permission bits do not tell a root process that /proc or a read-only mount
    takes no folder."""
    if "\0" in path:  # os.path.exists() says False for it; every open() would fail
        return "this path holds a NUL byte"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8: the profilers take UTF-8 paths
        return "this path is not valid UTF-8 (the profilers take UTF-8 paths only)"
    target = os.path.abspath(path)
    nearest = target
    while not os.path.exists(nearest):  # the nearest part that exists: tfobs makes the rest
        if os.path.lexists(nearest):  # a link to nothing: makedirs would fail on it
            return (f"{'this path' if nearest == target else nearest} is a symbolic link to "
                    "nothing (dangling, or a loop)")
        parent = os.path.dirname(nearest)
        if parent == nearest:
            return ""
        nearest = parent
    if not os.path.isdir(nearest):
        return "this path is a file" if nearest == target else f"{nearest} is a file"
    too_long = _too_long(target, nearest)
    if too_long:
        return too_long
    if not os.access(nearest, os.W_OK | os.X_OK):
        return ("this folder is not writable" if nearest == target
                else f"cannot make it: {nearest} is not writable")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".tfobs-check-", dir=nearest))
    except OSError as exc:
        return (f"cannot make a folder in {nearest}: "
                f"{exc.strerror or type(exc).__name__}")
    return ""


# What tfobs writes below a capture or keep folder, at most: its own folder
# (`tfobs-<pid>-<random>`), `plugins/profile/<run>/`, the host's file name and a temporary
# suffix. Host names are 64 bytes at most (HOST_NAME_MAX).
_BELOW_BYTES = 256


def _too_long(target: str, nearest: str) -> str:
    """Why the missing folders between `nearest` (which exists) and `target` cannot be made,
    or the files below it cannot be named, by length; '' when they can. Every window
    failed with "File name too long" where enable() had taken the folder."""
    try:
        name_max = os.pathconf(nearest, "PC_NAME_MAX")
        path_max = os.pathconf(nearest, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    missing = os.path.relpath(target, nearest).split(os.sep) if target != nearest else []
    for part in missing:
        size = len(part.encode("utf-8"))
        if size > name_max:
            return (f"cannot make it: the folder name {part[:24]!r}... is {size} bytes, over "
                    f"this file system's {name_max}; give a shorter name")
    size = len(target.encode("utf-8"))
    if size + _BELOW_BYTES > path_max:
        return (f"this path is {size} bytes: with the capture files tfobs names below it, it "
                f"passes the {path_max}-byte path limit; give a shorter path")
    return ""
