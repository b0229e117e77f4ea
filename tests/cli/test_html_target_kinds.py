"""`tfobs analyze --html TARGET` where TARGET is no plain file: a link is written through,
and a FIFO or a device (/dev/stdout, /dev/null) is written to as it is. The page was written
beside the target and moved over it, which replaced the link, the FIFO or, run as root, the
device node itself with a file of the page."""

from __future__ import annotations

import os
import pathlib
import select
import stat
import threading
import time

import pytest

from tests.conftest import CAPTURES
from tfobs.cli import main

CAPTURE = CAPTURES / "advice__healthy.xplane.pb"


def test_a_link_is_written_through(tmp_path: pathlib.Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    real = tmp_path / "pages" / "report.html"
    real.parent.mkdir()
    real.write_text("old", encoding="utf-8")
    link = tmp_path / "latest.html"
    link.symlink_to(real)
    assert main(["analyze", str(CAPTURE), "--html", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert real.read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    assert sorted(p.name for p in real.parent.iterdir()) == ["report.html"]  # no .part left


def test_a_fifo_is_written_to_not_replaced(tmp_path: pathlib.Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # so the writer's open() returns
    codes: list[int] = []
    writer = threading.Thread(target=lambda: codes.append(
        main(["analyze", str(CAPTURE), "--html", str(fifo)])), daemon=True)
    got = bytearray()
    try:
        writer.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([reader], [], [], 0.1)
            chunk = os.read(reader, 1 << 16) if ready else b""
            got += chunk
            if not chunk and not writer.is_alive():
                break
        writer.join(5)
    finally:
        os.close(reader)
    assert codes == [0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the FIFO, not a file of the page
    assert got.lstrip().lower().startswith(b"<!doctype html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.fifo"]


def _full_device(tmp_path: pathlib.Path) -> pathlib.Path:
    """A device that refuses every write: a node of its own (the kernel's "full" device,
    1:7) where this user may make one (root), so a tfobs that moved a file over it would
    replace only that node; else the system's /dev/full, which this user cannot replace."""
    own = tmp_path / "full"
    try:
        os.mknod(own, stat.S_IFCHR | 0o666, os.makedev(1, 7))
        return own
    except (PermissionError, AttributeError):
        assert not os.access("/dev", os.W_OK)
        return pathlib.Path("/dev/full")


def test_a_device_that_refuses_the_write_is_one_line(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    device = _full_device(tmp_path)
    assert stat.S_ISCHR(os.stat(device).st_mode)
    assert main(["analyze", str(CAPTURE), "--html", str(device)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(device) in err and "space" in err
    assert stat.S_ISCHR(os.lstat(device).st_mode)  # still the device, not a file
