"""`tfobs analyze` / `tfobs.analyze()` on hostile input (issue 13, item 10): a `*.xplane.pb`
that is a symlink to /dev/zero, a FIFO, a folder holding only such names, and a pathological
capture (one event with a million repeated stats) are refused with CaptureError or analysed
quickly in bounded memory; never MemoryError, never a hang."""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import tfobs
from tfobs.errors import CaptureError
from tfobs.xspace import schema


def analyze_within(source: Any, seconds: float) -> BaseException | None:
    """Run tfobs.analyze(source) in a thread; the exception it raised (None when it
    returned); fails the test when it is still running after `seconds`."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            tfobs.analyze(source)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"tfobs.analyze({source!r}) still running after {seconds} s"
    return outcome[0]


def test_symlink_to_dev_zero_is_refused(tmp_path: pathlib.Path) -> None:
    link = tmp_path / "evil.xplane.pb"
    link.symlink_to("/dev/zero")
    exc = analyze_within(str(link), 10)
    assert isinstance(exc, CaptureError) and "not a regular file" in str(exc)
    # A folder whose only capture is that link has no capture.
    exc = analyze_within(str(tmp_path), 10)
    assert isinstance(exc, CaptureError) and "no *.xplane.pb" in str(exc)


def test_fifo_is_refused_without_waiting_for_a_writer(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "pipe.xplane.pb"
    os.mkfifo(fifo)
    exc = analyze_within(str(fifo), 5)
    assert isinstance(exc, CaptureError) and "not a regular file" in str(exc)


def test_cli_refuses_a_device_with_one_line_and_exit_2(tmp_path: pathlib.Path) -> None:
    link = tmp_path / "evil.xplane.pb"
    link.symlink_to("/dev/zero")
    proc = subprocess.run([sys.executable, "-c", "import sys; from tfobs.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "analyze", str(link)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "not a regular file" in lines[0]
    assert "MemoryError" not in proc.stderr and "Traceback" not in proc.stderr


def _one_event_with_a_million_stats(plane: str, line: str, empty: bool) -> bytes:
    space = schema.XSpace()
    pl = space.planes.add(id=1, name=plane)
    pl.event_metadata[1].id = 1
    pl.event_metadata[1].name = "op"
    pl.stat_metadata[1].id = 1
    pl.stat_metadata[1].name = "correlation_id"
    event = pl.lines.add(id=1, name=line).events.add(metadata_id=1, offset_ps=1, duration_ps=10)
    for _ in range(1_000_000):
        stat = event.stats.add()
        if not empty:
            stat.metadata_id, stat.uint64_value = 1, 1
    return space.SerializeToString()


@pytest.mark.parametrize(("plane", "line", "empty"), [
    ("/host:CPU", "TensorFlow Ops", True),  # 2 MB: the case
    ("/device:GPU:0", "Stream #1", False),  # stats the GPU analyses do read
])
def test_a_pathological_capture_is_bounded(plane: str, line: str, empty: bool) -> None:
    data = _one_event_with_a_million_stats(plane, line, empty)
    assert len(data) >= 2_000_000
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    exc = analyze_within(data, 30)
    elapsed = time.monotonic() - t0
    assert exc is None or isinstance(exc, CaptureError), repr(exc)
    assert elapsed < 10, elapsed  # was 39 s
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert grown_mib < 400, grown_mib  # was 909 MB


# Retitle the window, clear the screen, ring the bell, CSI in its one-byte C1 form, a
# right-to-left override: what a crafted capture's names could carry to a terminal.
_ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[31m\x9b1m\u202e\r\x00\x7f"


def _capture_with_escape_codes(path: pathlib.Path) -> None:
    space = schema.XSpace()
    space.ParseFromString(SMALL_CAPTURE.read_bytes())
    for plane in space.planes:
        for meta in plane.event_metadata.values():
            meta.name = _ESCAPES + meta.name
            meta.display_name = _ESCAPES + meta.display_name
    path.write_bytes(space.SerializeToString())


SMALL_CAPTURE = (pathlib.Path(__file__).parents[1] / "data" / "captures"
                 / "tracelens__mi300_jax08_gemm__tw003.xplane.pb")


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_no_control_byte_from_a_capture_reaches_the_terminal(tmp_path: pathlib.Path,
                                                             fmt: str) -> None:
    capture = tmp_path / "host\x1b]0;x\x07.xplane.pb"  # the file's name is printed too
    _capture_with_escape_codes(capture)
    proc = subprocess.run([sys.executable, "-c", "import sys; from tfobs.cli import main; "
                           "sys.exit(main(sys.argv[1:]))", "analyze", "--format", fmt,
                           str(capture)], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.decode("utf-8")
    assert "owned" in out  # the names are shown ...
    unsafe = [c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) < 0xa0
              or 0x202a <= ord(c) <= 0x202e]
    assert unsafe == []  # ... with no control character left
    if fmt == "table":
        assert "\\x1b]0;owned\\x07" in out  # escaped where it was, visibly
