"""The metrics server's TLS files are read when `enable()` starts it: a FIFO or a device
given as one is refused in one line, instead of holding `enable()` (and the job) forever
while OpenSSL waits for a writer."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.blocking_calls import call_within, release_fifo
from tfobs.errors import ConfigError
from tfobs.export.http_server import MetricsServer


class _Registry:
    def collect(self) -> list[Any]:
        return []


def _start_within(server: MetricsServer, seconds: float) -> BaseException | None:
    """Start `server` on a thread; the exception it raised, or AssertionError when it was
    still starting after `seconds`."""
    done, raised = call_within(server.start, seconds)
    if not done:
        return AssertionError(f"start() still running after {seconds} s")
    server.shutdown(1.0)
    return raised


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("which", ["cert", "key", "both"])
def test_a_fifo_as_a_tls_file_is_one_line_not_a_hang(tmp_path: Any, which: str) -> None:
    fifo = str(tmp_path / "pem.fifo")
    os.mkfifo(fifo)
    plain = tmp_path / "plain.pem"
    plain.write_text("not a certificate\n")
    cert = fifo if which in ("cert", "both") else str(plain)
    key = fifo if which in ("key", "both") else str(plain)
    server = MetricsServer(_Registry(), bind="127.0.0.1", port=0, tls_cert=cert, tls_key=key)
    try:
        raised = _start_within(server, 10.0)
    finally:
        release_fifo(fifo)
    assert isinstance(raised, ConfigError), raised
    line = str(raised)
    assert "\n" not in line
    assert fifo in line and "not a regular file" in line and "PEM files" in line


def test_a_folder_as_a_tls_file_is_one_line(tmp_path: Any) -> None:
    server = MetricsServer(_Registry(), bind="127.0.0.1", port=0, tls_cert=str(tmp_path),
                           tls_key=str(tmp_path))
    raised = _start_within(server, 10.0)
    assert isinstance(raised, ConfigError) and "PEM files" in str(raised)


def test_a_missing_tls_file_still_says_why(tmp_path: Any) -> None:
    missing = str(tmp_path / "absent.pem")
    server = MetricsServer(_Registry(), bind="127.0.0.1", port=0, tls_cert=missing,
                           tls_key=missing)
    raised = _start_within(server, 10.0)
    assert isinstance(raised, ConfigError)
    assert "No such file" in str(raised)
