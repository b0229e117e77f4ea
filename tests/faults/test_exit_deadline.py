"""A job exits promptly after its last step whatever tfobs is doing then.

The job (tests/support/exit_job.py) ends as a user's script does, without `disable()`, with
traces going to a collector that never answers (a socket that accepts and stays silent, the
worst case for gRPC) or refuses, and with a profile window open or being reduced. tfobs's
atexit hook stops within its 2 s deadline (the test allows 3 s from the last step to the end
of tfobs's hook), and the whole exit, TensorFlow's own teardown included (about 3 s on this
shared 2-core machine for a plain TF script), stays under 15 s.
"""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.support.mute_servers import HangingEndpoint

# Trains in a subprocess and bounds its exit: at normal priority in the lanes (waits).
pytestmark = [pytest.mark.slow, pytest.mark.waits]

ROOT = pathlib.Path(__file__).parents[2]
JOB = ROOT / "tests" / "support" / "exit_job.py"
TFOBS_EXIT_S = 3.0
EXIT_BOUND_S = 15.0


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connecting is refused


def run_job(tmp: pathlib.Path, endpoint: str, *extra: str) -> tuple[float, float, str]:
    """(seconds from the last step to the end of tfobs's exit hook, to the exit; output)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFOBS_CAPTURE_DIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, str(JOB), "--otlp", endpoint, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    out: list[str] = []
    last = None
    for line in proc.stdout:  # type: ignore[union-attr]
        out.append(line)
        if line.startswith("last step"):
            last = time.monotonic()
            break
    try:
        proc.wait(60)  # after the last step
    finally:
        if proc.poll() is None:
            proc.kill()
    out.append(proc.stdout.read())  # type: ignore[union-attr]
    text = "".join(out)
    assert last is not None and proc.returncode == 0, text[-3000:]
    stamps = [float(re.search(rf"{what} at ([\d.]+)", text).group(1))
              for what in ("last step", "tfobs stopped")]
    return stamps[1] - stamps[0], time.monotonic() - last, text


@pytest.mark.parametrize("state", ["window_open", "window_reducing"])
def test_exit_is_bounded_with_tracing_to_a_silent_collector(tmp_path: pathlib.Path,
                                                            state: str) -> None:
    collector = HangingEndpoint()
    try:
        extra = ["--reduce-open"] if state == "window_reducing" else []
        tfobs_s, exit_s, out = run_job(tmp_path, f"http://127.0.0.1:{collector.port}", *extra)
    finally:
        collector.close()
    assert tfobs_s < TFOBS_EXIT_S and exit_s < EXIT_BOUND_S, (tfobs_s, exit_s, out[-2000:])


def test_exit_is_bounded_with_tracing_to_a_refusing_collector(tmp_path: pathlib.Path) -> None:
    tfobs_s, exit_s, out = run_job(tmp_path, f"http://127.0.0.1:{refused_port()}")
    assert tfobs_s < TFOBS_EXIT_S and exit_s < EXIT_BOUND_S, (tfobs_s, exit_s, out[-2000:])
