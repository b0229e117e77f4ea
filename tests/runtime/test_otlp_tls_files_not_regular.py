"""OpenTelemetry's OTLP TLS variables name files its exporter reads whole: one that names a
FIFO or a device turns tracing off with one line naming the variable, instead of holding
`enable()` forever (a FIFO: the read waits for a writer) or filling the job's memory (a
device that never ends)."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")

from tfobs.config import Config
from tfobs.export.otel import OtelExporter, otlp_exporter

VARIABLES = ["OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
             "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"]


def _within(fn: Any, seconds: float) -> BaseException | None:
    """Run `fn` on a thread: what it raised, None, or AssertionError when still running."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            made = fn()
            shutdown = getattr(made, "shutdown", None)
            if shutdown is not None:
                shutdown(1.0)
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return AssertionError(f"still running after {seconds} s")
    return raised[0] if raised else None


def _release(fifo: str) -> None:
    """End a reader blocked on `fifo` (it reads end of file)."""
    for _ in range(3):
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("variable", VARIABLES)
def test_a_fifo_as_an_otlp_tls_file_turns_tracing_off_in_one_line(
        tmp_path: Any, monkeypatch: Any, variable: str) -> None:
    fifo = str(tmp_path / "ca.fifo")
    os.mkfifo(fifo)
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, fifo)
    if "CLIENT" in variable:  # the SDK reads the client files beside its CA file
        ca = tmp_path / "ca.pem"
        ca.write_text("not a certificate\n")
        ca_variable = variable.replace("CLIENT_KEY", "CERTIFICATE").replace(
            "CLIENT_CERTIFICATE", "CERTIFICATE")
        monkeypatch.setenv(ca_variable, str(ca))
    config = Config.load({}, otlp_endpoint="https://127.0.0.1:4317", metrics_port=-1)
    try:
        raised = _within(lambda: OtelExporter(config), 10.0)
    finally:
        _release(fifo)
    assert isinstance(raised, ValueError), raised
    line = str(raised)
    assert "\n" not in line and variable in line and fifo in line
    assert "not a regular file" in line


def test_a_folder_is_one_line_and_a_plain_file_is_left_to_the_sdk(
        tmp_path: Any, monkeypatch: Any) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path))
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_CERTIFICATE"):
        otlp_exporter("https://127.0.0.1:4317", "grpc")
    pem = tmp_path / "ca.pem"
    pem.write_text("not a certificate\n")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(pem))
    assert otlp_exporter("https://127.0.0.1:4317", "grpc") is not None
