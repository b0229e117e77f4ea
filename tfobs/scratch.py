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
    if "\0" in value:  # os.path.exists() says False; every window's capture would fail
        return allowed + " (this path holds a NUL byte)"
    if value and os.path.exists(value) and not (
        os.path.isdir(value) and os.access(value, os.W_OK | os.X_OK)
    ):
        return allowed + (" (this path is a file)" if not os.path.isdir(value) else
                          " (this folder is not writable)")
    return ""
