"""A real Prometheus server (Debian's `prometheus` binary) for integration tests.

Usage::

    from tests.support.prometheus_server import PrometheusServer, free_port

    with PrometheusServer(targets=["127.0.0.1:9464"], exemplars=True) as prom:
        prom.wait_targets_up(timeout_s=30)
        prom.wait_for('tfobs_window_steps > 0', timeout_s=60)      # poll an expression
        vec = prom.query('tfobs_input_bound_ratio')                 # instant vector
        value = prom.scalar('sum(tfobs_step_duration_seconds_count)')
        series = prom.query_range('tfobs_input_bound_ratio', start, end, step=1.0)
        exemplars = prom.query_exemplars('tfobs_step_duration_seconds_bucket')

`PrometheusServer(targets, *, scrape_interval_s=1.0, exemplars=False, rule_files=(),
evaluation_interval_s=1.0, scheme="http", basic_auth=None, tls_insecure=False,
tls_ca_file=None, metrics_path="/metrics", extra_flags=())`:

- `targets`: "host:port" strings (one scrape job `tfobs`); `add_target()` is not supported:
  start a server per set of targets (start-up takes about a second).
- `exemplars=True` starts Prometheus with `--enable-feature=exemplar-storage`, so OpenMetrics
  exemplars are kept and `query_exemplars()` returns them.
- `rule_files`: alerting/recording rule files loaded as-is (then `query('ALERTS')` and
  `alerts()` work); `evaluation_interval_s` sets how often they run.
- `scheme="https"`, `tls_ca_file` (CA/self-signed PEM that verifies the target) or
  `tls_insecure=True`, `basic_auth=(user, password)`: scraping a TLS or password-protected
  `/metrics`.

The server listens on a free loopback port (`.url`), keeps its config and TSDB in a temporary
folder removed on `stop()`, and is killed by pid (never by name). `start()`/`stop()` are
called by the context manager. Query helpers raise `PrometheusError` on API errors. The
`prometheus_server` pytest fixture in this module yields a factory that stops every server it
started at the end of the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import yaml

PROMETHEUS_BIN = shutil.which("prometheus") or "/usr/bin/prometheus"


class PrometheusError(RuntimeError):
    pass


# Ports handed to another process to bind later come from below Linux's ephemeral range
# (32768-60999): a port the OS picked for bind(0) is also where it picks the source ports of
# outgoing connections (Prometheus's scrapes, gRPC channels), and one of those took a
# worker's port before TensorFlow bound it ("Could not start gRPC server"). Below the range
# only an explicit bind takes a port. Each test process walks its own stretch (by pid and
# lane; the busy lane's second pytest-xdist worker takes the fourth stretch), so two lanes
# or workers running side by side do not pick the same ports.
_PORTS_LOW, _PORTS_HIGH = 20000, 32000
_LANE_SPAN = 3000
_next_port: list[int] = []


def _stretch() -> int:
    """This test process's stretch of ports: its lane's, or past the lanes' for a worker."""
    lane = int(os.environ.get("PYTEST_LANE_INDEX", "0"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # gw0, gw1, ...
    return lane + 3 * int(worker[2:] or 0)


def free_port() -> int:
    """A port nothing listens on (on any address) and no connection picks on its own."""
    if not _next_port:
        lane = _stretch()
        low = _PORTS_LOW + (lane * _LANE_SPAN) % (_PORTS_HIGH - _PORTS_LOW)
        _next_port.append(low + (os.getpid() * 7) % _LANE_SPAN)
    lane_low = _next_port[0] - (_next_port[0] - _PORTS_LOW) % _LANE_SPAN
    for _ in range(_LANE_SPAN):
        port = _next_port[0]
        _next_port[0] = lane_low + (port + 1 - lane_low) % _LANE_SPAN
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


class PrometheusServer:
    def __init__(
        self,
        targets: Sequence[str],
        *,
        scrape_interval_s: float = 1.0,
        exemplars: bool = False,
        rule_files: Sequence[str | os.PathLike[str]] = (),
        evaluation_interval_s: float = 1.0,
        scheme: str = "http",
        basic_auth: tuple[str, str] | None = None,
        tls_insecure: bool = False,
        tls_ca_file: str | None = None,
        metrics_path: str = "/metrics",
        extra_flags: Sequence[str] = (),
    ) -> None:
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.exemplars = exemplars
        self.rule_files = [os.fspath(p) for p in rule_files]
        self.evaluation_interval_s = evaluation_interval_s
        self.scheme = scheme
        self.basic_auth = basic_auth
        self.tls_insecure = tls_insecure
        self.tls_ca_file = tls_ca_file
        self.metrics_path = metrics_path
        self.extra_flags = list(extra_flags)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        job: dict[str, Any] = {
            "job_name": "tfobs",
            "scrape_interval": _dur(self.scrape_interval_s),
            "scrape_timeout": _dur(min(self.scrape_interval_s, 10.0)),
            "metrics_path": self.metrics_path,
            "scheme": self.scheme,
            "static_configs": [{"targets": self.targets}],
        }
        if self.basic_auth:
            job["basic_auth"] = {"username": self.basic_auth[0], "password": self.basic_auth[1]}
        if self.tls_insecure:
            job["tls_config"] = {"insecure_skip_verify": True}
        elif self.tls_ca_file:
            job["tls_config"] = {"ca_file": self.tls_ca_file}
        return {
            "global": {
                "scrape_interval": _dur(self.scrape_interval_s),
                "evaluation_interval": _dur(self.evaluation_interval_s),
            },
            "rule_files": self.rule_files,
            "scrape_configs": [job],
        }

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        if not os.path.exists(PROMETHEUS_BIN):
            raise PrometheusError("the prometheus binary is missing: apt-get install prometheus")
        self._dir = tempfile.mkdtemp(prefix="tfobs-prom-")
        cfg = os.path.join(self._dir, "prometheus.yml")
        with open(cfg, "w") as f:
            yaml.safe_dump(self.config(), f)
        last_err = ""
        for _ in range(3):  # a port picked free can be taken before Prometheus binds it
            self.port = free_port()
            flags = [
                f"--config.file={cfg}",
                f"--storage.tsdb.path={os.path.join(self._dir, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
                *self.extra_flags,
            ]
            if self.exemplars:
                flags.append("--enable-feature=exemplar-storage")
            log = open(os.path.join(self._dir, "prometheus.log"), "wb")
            self.proc = subprocess.Popen([PROMETHEUS_BIN, *flags], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
            log.close()
            if self._wait_ready(timeout_s):
                return self
            last_err = self.log_tail()
            self._kill()
        self.stop()
        raise PrometheusError(f"prometheus did not become ready: {last_err}")

    def _wait_ready(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def stop(self) -> None:
        self._kill()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def log_tail(self, n: int = 2000) -> str:
        if not self._dir:
            return ""
        try:
            with open(os.path.join(self._dir, "prometheus.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- API ---------------------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> Any:
        """GET /api/v1/<path> with params; returns the `data` field."""
        qs = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}/api/v1/{path}" + (f"?{qs}" if qs else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            body = json.loads(e.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('error', body)}")
        return body["data"]

    def targets_health(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])

    def wait_targets_up(self, timeout_s: float = 30.0, n: int | None = None) -> None:
        """Wait until `n` targets (default: all configured) report health "up"."""
        want = len(self.targets) if n is None else n
        deadline = time.monotonic() + timeout_s
        active: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            active = self.targets_health()
            if sum(t.get("health") == "up" for t in active) >= want:
                return
            time.sleep(0.25)
        raise PrometheusError(
            "targets not up: " + "; ".join(
                f"{t.get('scrapeUrl')} {t.get('health')} {t.get('lastError')}" for t in active
            )
        )

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; the result list (vector: [{"metric": {...}, "value": [t, "v"]}])."""
        data = self.api("query", query=expr, time=at)
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return list(result)

    def values(self, expr: str, at: float | None = None) -> list[float]:
        return [float(r["value"][1]) for r in self.query(expr, at)]

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        """The single value of an expression, None when it returns no series."""
        vals = self.values(expr, at)
        if len(vals) > 1:
            raise PrometheusError(f"{expr!r} returned {len(vals)} series, expected one")
        return vals[0] if vals else None

    def query_range(
        self, expr: str, start: float, end: float, step: float = 1.0
    ) -> list[dict[str, Any]]:
        """Range query; [{"metric": {...}, "values": [[t, "v"], ...]}]."""
        return list(self.api("query_range", query=expr, start=start, end=end, step=step)["result"])

    def query_exemplars(
        self, expr: str, start: float | None = None, end: float | None = None
    ) -> list[dict[str, Any]]:
        """Exemplars of the series `expr` selects (needs `exemplars=True`).

        Returns a flat list of {"seriesLabels": {...}, "labels": {"trace_id", ...},
        "value": "..", "timestamp": t}."""
        now = time.time()
        data = self.api("query_exemplars", query=expr, start=start if start is not None
                        else now - 3600, end=end if end is not None else now + 60)
        flat = []
        for series in data or []:
            for ex in series.get("exemplars", []):
                flat.append({"seriesLabels": series.get("seriesLabels", {}), **ex})
        return flat

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def wait_for(self, expr: str, timeout_s: float = 60.0, poll_s: float = 0.5,
                 proc: subprocess.Popen[Any] | None = None) -> list[dict[str, Any]]:
        """Poll `expr` until it returns at least one series; the result. If `proc` is given
        and exits first, fail at once instead of waiting out the timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(expr)
            if result:
                return result
            if proc is not None and proc.poll() is not None:
                result = self.query(expr)
                if result:
                    return result
                raise PrometheusError(f"{expr!r}: no data and the process exited "
                                      f"({proc.returncode})")
            time.sleep(poll_s)
        raise PrometheusError(f"{expr!r} returned no data within {timeout_s} s")

    def flush_scrapes(self, n: int = 2) -> None:
        """Wait for `n` more scrape intervals, so the latest target state is stored."""
        time.sleep(self.scrape_interval_s * n + 0.2)


def _dur(seconds: float) -> str:
    ms = max(int(round(seconds * 1000)), 1)
    return f"{ms}ms"


@pytest.fixture
def prometheus_server() -> Iterator[Any]:
    """Factory fixture: `prometheus_server(targets, **options) -> PrometheusServer` (started)."""
    started: list[PrometheusServer] = []

    def make(targets: Sequence[str], **options: Any) -> PrometheusServer:
        server = PrometheusServer(targets, **options).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()
