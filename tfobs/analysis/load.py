"""Capture sources: an `.xplane.pb` file, a TensorBoard log folder, or bytes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tfobs.errors import CaptureError

MAX_FILE_BYTES = 2**31 - 1


def find_capture(folder: Path, run: str | None = None) -> Path:
    """The newest run's capture under `plugins/profile/` (or the run named `run`)."""
    profile = folder / "plugins" / "profile"
    if not profile.is_dir():
        profile = folder if folder.name == "profile" else folder
    runs = sorted((p for p in profile.iterdir() if p.is_dir()), key=lambda p: p.name)
    if run is not None:
        runs = [p for p in runs if p.name == run]
        if not runs:
            raise CaptureError(f"no run named {run!r} under {profile}; omit --run for the newest")
    # A folder holding captures itself (no runs below it) counts as one run.
    candidates = [profile] if not runs else runs[::-1]
    for rdir in candidates:
        files = sorted(rdir.glob("*.xplane.pb"))
        if files:
            return max(files, key=lambda p: p.stat().st_size)
    raise CaptureError(
        f"no *.xplane.pb capture under {folder}; point at a file or a TensorBoard log folder"
    )


def read_source(source: Any, run: str | None = None) -> tuple[bytes, str]:
    """(bytes, label) of a capture; raises CaptureError with a one-line reason."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    if not isinstance(source, (str, os.PathLike)):
        raise CaptureError(
            f"expected a path or XSpace bytes, got {type(source).__name__}"
        )
    path = Path(source)
    if not path.exists():
        raise CaptureError(f"{path}: no such file or folder")
    if path.is_dir():
        path = find_capture(path, run)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise CaptureError(f"{path}: {size} bytes is over the 2 GiB protobuf limit")
        data = path.read_bytes()
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not data:
        raise CaptureError(f"{path}: capture is empty (0 bytes)")
    return data, str(path)
