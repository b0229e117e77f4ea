"""Faults after the capture: the reducer or an exporter raising, an OTLP endpoint that
hangs, NVML failing mid-run, Prometheus scraping while the job shuts down, and the metrics
port already taken at start. Each run is a real Keras training subprocess
(tests/support/fault_job.py) compared with the same job without tfobs.

An OTLP endpoint that is *unreachable* (nothing listens) is covered by
tests/export/test_otel_training.py; here the endpoint accepts TCP connections and never answers,
which is the harder case (every export waits for its timeout).
"""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.fault_job import (
    assert_unharmed,
    baseline,
    finish_job,
    run_job,
    start_job,
    wait_line,
)
from tests.support.mute_servers import HangingEndpoint

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # runs a training job


class Scrapers:
    """Threads scraping /metrics every `pause_s` until the server goes away."""

    def __init__(self, url: str, n: int = 2, pause_s: float = 0.05) -> None:
        self.pause_s = pause_s
        self.url = url
        self.ok = 0
        self.refused = 0
        self.bad: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self._threads:
            t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=10) as resp:
                    body = resp.read().decode()
                names = {f.name for f in text_string_to_metric_families(body)}
                if resp.status != 200 or "tfobs_step_duration_seconds" not in names:
                    self.bad.append(f"status {resp.status}, families {sorted(names)[:3]}")
                else:
                    self.ok += 1
                time.sleep(self.pause_s)
            except urllib.error.HTTPError as exc:  # a 5xx while shutting down is a failure
                self.bad.append(f"HTTP {exc.code}")
            except (ConnectionError, urllib.error.URLError) as exc:
                # Refused or reset once the server has closed: the clean end of a target.
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, (ConnectionRefusedError, ConnectionResetError)):
                    self.refused += 1
                    time.sleep(0.01)
                else:  # a timeout or anything else: the scrape failed
                    self.bad.append(repr(exc))
            except Exception as exc:  # a truncated or unparsable body
                self.bad.append(repr(exc))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)


def test_reducer_exporters_otlp_and_nvml_faults_in_one_run():
    base = baseline()
    hanging = HangingEndpoint()
    proc = start_job(
        {"otlp_endpoint": f"http://127.0.0.1:{hanging.port}", "nvml": True,
         "nvml_interval_s": 0.05},
        # Window 2's reduction raises; windows 3 and 4 reach an exporter that raises.
        extra=("--raise", "reduce:2,publish_prometheus:3,publish_otel:4",
               "--synthetic-nvml", "10"),
        env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1", "OTEL_BSP_SCHEDULE_DELAY": "200"},
    )
    scrapers = None
    try:
        line, _ = wait_line(proc, "fault job: metrics at ")
        scrapers = Scrapers(line.rsplit(" ", 1)[1])
        run = finish_job(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
        if scrapers is not None:
            scrapers.stop()
        hanging.close()

    assert_unharmed(run, base)
    # The failing reduction is a failed window; the failing exporters cost only themselves.
    failed = [r for r in run.report["records"] if r["outcome"] == "failed"]
    assert len(failed) == 1 and "reduce broke on purpose" in failed[0]["reason"], failed
    assert run.errors["reduce"] == 1
    assert run.errors["export_prometheus"] >= 1
    assert run.errors["export_otel"] >= 1
    assert run.windows["captured"] >= 4, run.windows
    # The OTLP endpoint never answered: the spans tfobs sent are counted as dropped ...
    assert hanging.accepted, "the exporter never tried to connect"
    assert run.dropped.get("spans", 0) > 0, run.dropped
    # ... NVML failed after its first queries and kept failing: counted, never raised ...
    assert run.errors["nvml"] >= 5, run.errors
    assert run.report["metrics"]["other"]["tfobs_nvml_available"] == 1.0
    # ... and scrapes during training and through shutdown were whole or cleanly refused.
    assert scrapers.ok > 0 and not scrapers.bad, scrapers.bad[:5]
    assert scrapers.refused > 0  # they were still scraping when the server went away


def test_nvml_missing_is_reported_not_raised():
    """No NVIDIA driver on this machine: the real pynvml cannot initialise."""
    run = run_job({"nvml": True})
    assert_unharmed(run, baseline())
    assert run.report["metrics"]["other"]["tfobs_nvml_available"] == 0.0
    assert run.windows["captured"] >= 4
    assert "nvml" not in run.errors  # missing is a state, not a stream of errors


def test_taken_metrics_port_is_one_clear_line_at_start():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        t0 = time.monotonic()
        run = run_job({"metrics_port": port}, steps=20, timeout_s=90)
        elapsed = time.monotonic() - t0
        env_run = run_job({"metrics_port": None}, steps=20, timeout_s=90,
                          env={"TFOBS_METRICS_PORT": str(port)})
    for r in (run, env_run):
        # enable() refuses before the first step, with the port and the option to change.
        assert r.returncode != 0 and not r.report
        last = r.stderr.strip().splitlines()[-1]
        assert last == (f"tfobs.errors.ConfigError: port {port} on 127.0.0.1 is in use; set "
                        "metrics_port / TFOBS_METRICS_PORT to a free port or -1 to disable")
        assert r.exit_after_end_s == float("inf")  # it never reached the end of training
    assert elapsed < 60
