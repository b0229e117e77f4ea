"""The metrics endpoint's security options, exercised with real clients: bind address, TLS
(urllib with certificate verification, and a real Prometheus scraping over HTTPS with basic
auth), basic auth, and the remote capture endpoint (off by default, bearer token when on)."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import logging
import pathlib
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.prometheus_server import PrometheusServer
from tfobs.config import Config
from tfobs.errors import ConfigError
from tfobs.export.prometheus import PrometheusExporter
from tfobs.health import HealthLedger

pytestmark = [pytest.mark.slow, pytest.mark.waits]  # starts the metrics HTTP server


def make_exporter(capture_request: Callable[[], bool] | None = None,
                  **options: Any) -> PrometheusExporter:
    options.setdefault("metrics_bind", "127.0.0.1")
    cfg = Config.load(metrics_port=0, **options)
    exp = PrometheusExporter(cfg, cfg.identity(), HealthLedger(),
                             capture_request=capture_request)
    exp.start()
    return exp


@pytest.fixture
def exporters() -> Iterator[Callable[..., PrometheusExporter]]:
    made: list[PrometheusExporter] = []

    def make(**options: Any) -> PrometheusExporter:
        exp = make_exporter(**options)
        made.append(exp)
        return exp

    yield make
    for exp in made:
        exp.shutdown(2.0)


def request(url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
            context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method, headers=headers or {},
                                 data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(cert, key) PEM paths for CN=localhost with SANs localhost and 127.0.0.1."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        _with_cryptography(cert, key)
    except ImportError:
        openssl = shutil.which("openssl")
        assert openssl, "need the cryptography package or the openssl CLI to make a cert"
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout", str(key), "-out",
             str(cert), "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True,
        )
    return str(cert), str(key)


def _with_cryptography(cert_path: pathlib.Path, key_path: pathlib.Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        ), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))


# -- bind address ------------------------------------------------------------------------------


def test_default_bind_is_documented_and_the_option_is_honoured(exporters: Any) -> None:
    assert Config.load().metrics_bind == "0.0.0.0"  # the README's documented default
    only_one = exporters(metrics_bind="127.0.0.1")
    assert only_one._server is not None
    assert only_one._server.listen_address == "127.0.0.1"
    port = only_one.port
    assert request(f"http://127.0.0.1:{port}/metrics")[0] == 200
    # 127.0.0.2 is the same host but another address: a server bound to 127.0.0.1 is not
    # reachable there.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    other = exporters(metrics_bind="127.0.0.2")
    assert request(f"http://127.0.0.2:{other.port}/metrics")[0] == 200
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", other.port), timeout=2).close()
    assert other.url == f"http://127.0.0.2:{other.port}/metrics"


def test_an_unusable_bind_address_is_a_clear_config_error() -> None:
    cfg = Config.load(metrics_port=0, metrics_bind="203.0.113.77")  # not an address of this host
    with pytest.raises(ConfigError, match="metrics_bind"):
        PrometheusExporter(cfg, cfg.identity(), HealthLedger()).start()


# -- TLS ---------------------------------------------------------------------------------------


def test_tls_with_a_verifying_client(exporters: Any, self_signed: tuple[str, str]) -> None:
    cert, key = self_signed
    exp = exporters(metrics_tls_cert=cert, metrics_tls_key=key)
    assert exp.url.startswith("https://127.0.0.1:")
    exp.step_sink.append(0.02)
    ctx = ssl.create_default_context(cafile=cert)  # verifies chain and host name
    status, headers, body = request(exp.url, context=ctx)
    assert status == 200 and b"tfobs_step_duration_seconds_count" in body
    # A client that does not trust the certificate refuses it.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(exp.url, timeout=10, context=ssl.create_default_context())
    # Plain HTTP to the TLS port gets nothing, and does not break the server for the next one.
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(exp.url.replace("https://", "http://"), timeout=5).read()
    assert request(exp.url, context=ctx)[0] == 200


def test_a_scraper_of_the_wrong_protocol_is_told_at_once_in_one_line(
        exporters: Any, self_signed: tuple[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """A scrape set to https on the plain port, or http on the TLS port: refused at once
    (not at the request deadline), one warning naming the fix, counted."""
    cert, key = self_signed
    plain = exporters()
    tls = exporters(metrics_tls_cert=cert, metrics_tls_key=key)
    ctx = ssl.create_default_context(cafile=cert)
    caplog.set_level(logging.WARNING, logger="tfobs")
    t = time.perf_counter()
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain.url.replace("http://", "https://"), timeout=5,
                               context=ctx).read()
    assert time.perf_counter() - t < 2.0  # the deadline for a first request is 5 s
    assert "TLS handshake on tfobs's plain-HTTP metrics port; scrape it with scheme: http" in (
        caplog.text)
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(tls.url.replace("https://", "http://"), timeout=5).read()
    assert "plain HTTP on tfobs's TLS metrics port; scrape it with scheme: https" in caplog.text
    for exp in (plain, tls):
        assert exp.health.errors.get("http_protocol") == 1, exp.health.errors
    # Both still serve their own protocol.
    assert request(plain.url)[0] == 200 and request(tls.url, context=ctx)[0] == 200


def test_tls_needs_cert_and_key_and_readable_files(tmp_path: pathlib.Path,
                                                   self_signed: tuple[str, str]) -> None:
    cert, _ = self_signed
    with pytest.raises(ConfigError, match="metrics_tls_key"):
        make_exporter(metrics_tls_cert=cert)
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match="metrics_tls_cert/metrics_tls_key"):
        make_exporter(metrics_tls_cert=cert, metrics_tls_key=missing)


def test_prometheus_scrapes_over_tls_with_basic_auth(exporters: Any,
                                                     self_signed: tuple[str, str]) -> None:
    cert, key = self_signed
    exp = exporters(metrics_tls_cert=cert, metrics_tls_key=key, metrics_basic_auth="prom:s3cret")
    for _ in range(5):
        exp.step_sink.append(0.02)
    with PrometheusServer([f"127.0.0.1:{exp.port}"], scheme="https", tls_ca_file=cert,
                          basic_auth=("prom", "s3cret")) as prom:
        prom.wait_targets_up(timeout_s=30)
        assert prom.scalar("tfobs_step_duration_seconds_count") == 5


# -- basic auth --------------------------------------------------------------------------------


def test_basic_auth_accepts_the_right_password_only(exporters: Any) -> None:
    exp = exporters(metrics_basic_auth="alice:open sesame")
    root = exp.url.replace("/metrics", "/")
    for url in (exp.url, root):
        status, headers, _ = request(url)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert request(url, headers=basic("alice", "wrong"))[0] == 401
        assert request(url, headers=basic("bob", "open sesame"))[0] == 401
        assert request(url, headers={"Authorization": "Basic !!notbase64"})[0] == 401
        assert request(url, headers={"Authorization": "Bearer open sesame"})[0] == 401
        assert request(url, headers=basic("alice", "open sesame"))[0] == 200
    assert Config.load().metrics_basic_auth == ""  # off by default


# -- remote capture ----------------------------------------------------------------------------


def test_remote_capture_is_off_by_default_even_with_a_token(exporters: Any) -> None:
    assert Config.load().remote_capture is False
    calls: list[int] = []
    exp = exporters(remote_capture_token="t0ken",
                    capture_request=lambda: calls.append(1) or True)
    capture = exp.url.replace("/metrics", "/capture")
    status, _, _ = request(capture, method="POST", headers={"Authorization": "Bearer t0ken"})
    assert status == 404 and calls == []


def test_remote_capture_on_requires_a_token() -> None:
    with pytest.raises(ConfigError, match="remote_capture_token"):
        make_exporter(remote_capture=True)


def test_remote_capture_needs_the_bearer_token_and_reports_the_budget(exporters: Any) -> None:
    granted = [True]
    calls: list[int] = []

    def handler() -> bool:
        calls.append(1)
        return granted[0]

    good = {"Authorization": "Bearer t0ken-with-entropy"}
    bare = exporters(remote_capture=True, remote_capture_token="t0ken-with-entropy")
    assert request(bare.url.replace("/metrics", "/capture"), method="POST",
                   headers=good)[0] == 503  # no handler given
    exp = exporters(remote_capture=True, remote_capture_token="t0ken-with-entropy",
                    capture_request=handler)
    capture = exp.url.replace("/metrics", "/capture")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "t0ken-with-entropy"},
                    basic("x", "t0ken-with-entropy")):
        status, hdrs, _ = request(capture, method="POST", headers=headers)
        assert status == 401 and hdrs["WWW-Authenticate"].startswith("Bearer")
    assert calls == []
    status, _, body = request(capture, method="POST", headers=good)
    assert status == 202 and json.loads(body) == {"accepted": True} and calls == [1]
    granted[0] = False  # the duty-cycle budget says no
    status, _, body = request(capture, method="POST", headers=good)
    assert status == 429 and json.loads(body) == {"accepted": False}
    # GET does not trigger it; the endpoint is POST only.
    assert request(capture, headers=good)[0] == 404
    assert len(calls) == 2


def test_remote_capture_handler_failure_is_counted_not_raised(exporters: Any) -> None:
    def broken() -> bool:
        raise RuntimeError("boom")

    exp = exporters(remote_capture=True, remote_capture_token="tok", capture_request=broken)
    capture = exp.url.replace("/metrics", "/capture")
    assert request(capture, method="POST", headers={"Authorization": "Bearer tok"})[0] == 500
    _, _, body = request(exp.url)
    assert (b'tfobs_errors_total{local_rank="0",stage="remote_capture",tf_cluster="none",'
            b'tf_job="local",tf_task="0"} 1.0') in body
