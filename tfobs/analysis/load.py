"""Capture sources: an `.xplane.pb` file (or one gzip-compressed, as archives keep them), a
TensorBoard log folder, or bytes."""

from __future__ import annotations

import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tfobs.errors import CaptureError

MAX_FILE_BYTES = 2**31 - 1
_GZIP_MAGIC = b"\x1f\x8b"  # no XSpace starts so: its first byte is a field tag (0x0a, 0x12...)


def find_capture(folder: Path, run: str | None = None) -> Path:
    """The newest run's capture under `plugins/profile/` (or the run named `run`); where the
    run holds several hosts' captures (a multi-worker job), the largest."""
    return max(run_captures(folder, run), key=lambda p: p.stat().st_size)


def run_captures(folder: Path, run: str | None = None) -> list[Path]:
    """Every host's capture of the newest run under `plugins/profile/` (or of `run`), by
    name: one `<host>.xplane.pb` per profiled host."""
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
    skipped: list[Path] = []
    for rdir in candidates:
        named = sorted(rdir.glob("*.xplane.pb"))
        files = [p for p in named if p.is_file()]
        if files:
            return files
        skipped += named
    if skipped:  # a FIFO, a device, a folder so named: never opened (a FIFO would wait)
        raise CaptureError(
            f"no *.xplane.pb capture under {folder}: {skipped[0]} is not a regular file "
            "(skipped); point at a capture file or a TensorBoard log folder")
    raise CaptureError(
        f"no *.xplane.pb capture under {folder}; point at a file or a TensorBoard log folder"
    )


def read_source(source: Any, run: str | None = None) -> tuple[bytes, str]:
    """(bytes, label) of a capture; raises CaptureError with a one-line reason."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _plain(bytes(source), "<bytes>"), "<bytes>"
    if not isinstance(source, (str, os.PathLike)):
        raise CaptureError(
            f"expected a path or XSpace bytes, got {type(source).__name__}"
        )
    path = Path(source)
    if not path.exists():
        if path.is_symlink():  # exists() follows the link: a loop or a missing target
            raise CaptureError(f"{path}: a symbolic link that leads to no file (a loop, or "
                               "its target is gone); give the capture's own path")
        raise CaptureError(f"{path}: no such file or folder")
    if path.is_dir():
        path = find_capture(path, run)
    data = _read_regular_file(path)
    if not data:
        raise CaptureError(f"{path}: capture is empty (0 bytes)")
    return _plain(data, str(path)), str(path)


def _plain(data: bytes, label: str) -> bytes:
    """The capture's protobuf bytes: gzip-compressed ones (`gzip host.xplane.pb`) are
    decompressed, every member, up to the protobuf limit (a small file may expand far)."""
    if not data.startswith(_GZIP_MAGIC):
        return data
    # Sized first, in pieces kept no longer than counted: a small file may expand past the
    # limit (a gzip bomb), which is refused without holding gigabytes.
    total = sum(len(piece) for piece in _gunzip(data, label))
    if not total:
        raise CaptureError(f"{label}: capture is empty once decompressed (0 bytes)")
    return b"".join(_gunzip(data, label))


_PIECE = 16 << 20  # bytes decompressed at a time


def _gunzip(data: bytes, label: str) -> Iterator[bytes]:
    """The decompressed bytes of every gzip member of `data`, piece by piece; CaptureError
    past MAX_FILE_BYTES in all, or where the data is cut short or unreadable."""
    total = 0
    rest = data
    while rest:
        unzip = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        tail = rest
        while True:
            try:
                piece = unzip.decompress(tail, _PIECE)
            except zlib.error as exc:
                raise CaptureError(f"{label}: gzip-compressed but unreadable ({exc}); "
                                   "check the file with `gzip -t`") from None
            total += len(piece)
            if total > MAX_FILE_BYTES:
                raise CaptureError(f"{label}: over the 2 GiB protobuf limit once "
                                   "decompressed")
            yield piece
            tail = unzip.unconsumed_tail
            if unzip.eof or not (tail or piece):
                break
        if not unzip.eof:
            raise CaptureError(f"{label}: gzip-compressed and cut short (truncated); "
                               "copy the whole file again")
        rest = unzip.unused_data
        if not rest.startswith(_GZIP_MAGIC):  # no member follows: padding (zeros a tape or
            break  # a copy left), ignored as gzip itself ignores it


def _read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_FILE_BYTES, else CaptureError.

    Opened without blocking (a FIFO would wait for a writer forever) and checked on the open
    descriptor, so a symlink to /dev/zero, a device or a FIFO is refused rather than read to
    MemoryError or a hang; a file that grows while read is cut at the limit and refused.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CaptureError(f"{path}: not a regular file (a device, FIFO or socket); "
                               "point at an .xplane.pb file")
        if info.st_size > MAX_FILE_BYTES:
            raise CaptureError(f"{path}: {info.st_size} bytes is over the 2 GiB protobuf limit")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 24, MAX_FILE_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise CaptureError(f"{path}: over the 2 GiB protobuf limit (file grew while "
                                   "read)")
        return b"".join(chunks)
    except OSError as exc:
        raise CaptureError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
