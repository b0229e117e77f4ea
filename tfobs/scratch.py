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
    folder fails enable() instead of every window (capture_dir) or every keep (keep_dir)."""
    if "\0" in path:  # os.path.exists() says False for it; every open() would fail
        return "this path holds a NUL byte"
    target = os.path.abspath(path)
    nearest = target
    while not os.path.exists(nearest):  # the nearest part that exists: tfobs makes the rest
        parent = os.path.dirname(nearest)
        if parent == nearest:
            return ""
        nearest = parent
    if not os.path.isdir(nearest):
        return "this path is a file" if nearest == target else f"{nearest} is a file"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return ("this folder is not writable" if nearest == target
                else f"cannot make it: {nearest} is not writable")
    return ""
