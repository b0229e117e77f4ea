"""OpenTelemetry's OTLP TLS variables name files its exporter reads whole: one that names a
FIFO or a device turns tracing off with one line naming the variable, instead of holding
`enable()` forever (a FIFO: the read waits for a writer) or filling the job's memory (a
device that never ends)."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")

from tests.support.blocking_calls import call_within, release_fifo
from tfobs.config import Config
from tfobs.export.otel import OtelExporter, otlp_exporter

VARIABLES = ["OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
             "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"]


def _within(fn: Any, seconds: float) -> BaseException | None:
    """Make the exporter `fn` makes and shut it down, on a thread: what that raised, None, or
    AssertionError when still running after `seconds`."""
    def made_and_shut() -> None:
        shutdown = getattr(fn(), "shutdown", None)
        if shutdown is not None:
            shutdown(1.0)

    done, raised = call_within(made_and_shut, seconds)
    return raised if done else AssertionError(f"still running after {seconds} s")


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
        release_fifo(fifo, tries=3)
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
