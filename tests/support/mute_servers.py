"""Endpoints that misbehave on purpose, for fault tests: a TCP server that accepts every
connection and never sends a byte (an OTLP collector or scrape target that hangs), a
size-limited tmpfs (a full or read-only folder), and an `os.statvfs` that reports little room."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest


class HangingEndpoint:
    """Accepts every connection on 127.0.0.1 and never answers; `close()` ends them all."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@contextmanager
def small_tmpfs(folder: pathlib.Path, size: str, name: str) -> Iterator[pathlib.Path]:
    """A tmpfs of `size` (e.g. "4m") mounted at folder/mnt; skips the test without root."""
    mnt = folder / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CI runs as root)")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", name, str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def statvfs_with_free(free: int) -> Callable[[str], os.statvfs_result]:
    """`os.statvfs` as it is, but with `free` bytes available (for `monkeypatch.setattr`)."""
    real = os.statvfs

    def fake(path: str) -> os.statvfs_result:
        st = real(path)
        return os.statvfs_result((st.f_bsize, 1, st.f_blocks, free, free, *st[5:]))

    return fake
