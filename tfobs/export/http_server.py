"""The HTTP endpoint of a training process: `/metrics`, the overview page `/`, and (only when
remote capture is switched on) `POST /capture`.

Options: bind address, TLS (certificate + key), HTTP basic auth for every GET, and a bearer
token for `POST /capture`. Threads are daemons; `shutdown()` waits only up to its deadline.
"""

from __future__ import annotations

import base64
import errno
import gzip
import hmac
import logging
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted

from tfobs.errors import ConfigError

log = logging.getLogger(__name__)

PageFn = Callable[[], tuple[str, str]]  # () -> (content type, body)
CaptureFn = Callable[[], Any]  # () -> truthy when a window was granted

_MAX_BODY = 4096
_CLIENT_TIMEOUT_S = 10.0  # a client that stalls mid-request frees its thread after this


class MetricsServer:
    """Serves one registry (anything with `collect()`) over HTTP or HTTPS."""

    def __init__(
        self,
        registry: Any,
        *,
        bind: str = "0.0.0.0",
        port: int = 9464,
        tls_cert: str = "",
        tls_key: str = "",
        basic_auth: str = "",
        page: PageFn | None = None,
        remote_capture: bool = False,
        capture_token: str = "",
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        if bool(tls_cert) != bool(tls_key):
            raise ConfigError(
                "metrics_tls_cert and metrics_tls_key go together; set both (PEM files) or neither"
            )
        if basic_auth and ":" not in basic_auth:
            raise ConfigError('metrics_basic_auth must be "user:password"')
        if remote_capture and not capture_token:
            raise ConfigError(
                "remote_capture needs remote_capture_token (TFOBS_REMOTE_CAPTURE_TOKEN) set to a "
                "secret; callers send it as 'Authorization: Bearer <token>'"
            )
        self.registry = registry
        self.bind = bind
        self.requested_port = port
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self._basic = basic_auth.encode() if basic_auth else b""
        self.page = page
        self.api: PageFn | None = None  # serves `/api/windows` when set (same auth, TLS)
        self.remote_capture = remote_capture
        self._token = capture_token.encode()
        self.capture_handler: CaptureFn | None = None
        self.on_error = on_error or (lambda stage: None)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._httpd is not None:
            return
        httpd = _make_server(self.bind, self.requested_port)
        httpd.tfobs = self  # type: ignore[attr-defined]
        if self.tls_cert:
            try:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            except (OSError, ssl.SSLError) as e:
                httpd.server_close()
                raise ConfigError(
                    f"cannot load metrics_tls_cert/metrics_tls_key ({e}); give readable PEM files"
                ) from None
            # The handshake runs in the request's own thread (see _Handler.setup), so a slow
            # client never stalls the accept loop.
            httpd.socket = ctx.wrap_socket(
                httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
            name="tfobs-http", daemon=True,
        )
        self._thread.start()

    def shutdown(self, timeout_s: float = 2.0) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        stopper = threading.Thread(target=httpd.shutdown, name="tfobs-http-stop", daemon=True)
        stopper.start()
        stopper.join(max(timeout_s, 0.0))
        httpd.server_close()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1] if self._httpd is not None else 0

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @property
    def url(self) -> str:
        """`/metrics` URL for people (a wildcard bind is shown as loopback); "" when stopped."""
        if self._httpd is None:
            return ""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.bind, self.bind)
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}/metrics"

    # -- request checks ----------------------------------------------------------------------

    def basic_ok(self, header: str | None) -> bool:
        if not self._basic:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            given = base64.b64decode(header[6:].strip(), validate=True)
        except ValueError:
            return False
        return hmac.compare_digest(given, self._basic)

    def token_ok(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), self._token)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # socketserver's default backlog of 5 drops SYNs when many scrapers connect at once;
    # each dropped SYN costs the scraper a 1 s retransmit.
    request_queue_size = 128

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can hang on DNS; skip it.
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Broken clients (TLS garbage, resets) are the client's problem: no traceback on the
        # training job's stderr.
        log.debug("tfobs: HTTP request from %s failed: %r", client_address, sys.exc_info()[1])


class _Server6(_Server):
    address_family = socket.AF_INET6


def _make_server(bind: str, port: int) -> _Server:
    cls = _Server6 if ":" in bind else _Server
    try:
        return cls((bind, port), _Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {bind} is in use; set metrics_port / TFOBS_METRICS_PORT to a "
                "free port or -1 to disable"
            ) from None
        raise ConfigError(
            f"cannot listen on {bind}:{port} ({e.strerror or e}); set metrics_bind / "
            "TFOBS_METRICS_BIND to an address of this host"
        ) from None


class _Handler(BaseHTTPRequestHandler):
    server_version = "tfobs"
    sys_version = ""
    timeout = _CLIENT_TIMEOUT_S
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    @property
    def app(self) -> MetricsServer:
        return self.server.tfobs  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a training job's stderr is not an access log

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        api = self.app.api if path == "/api/windows" else None
        if path not in ("/metrics", "/") and api is None:
            self._send(404, "text/plain; charset=utf-8", b"not found\n")
            return
        if not self.app.basic_ok(self.headers.get("Authorization")):
            self._send(401, "text/plain; charset=utf-8", b"unauthorized\n",
                       [("WWW-Authenticate", 'Basic realm="tfobs"')])
            return
        if path == "/metrics":
            self._metrics()
        else:
            self._page(api)

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        app = self.app
        length = int(self.headers.get("Content-Length") or 0)
        if 0 < length <= _MAX_BODY:
            self.rfile.read(length)
        elif length > _MAX_BODY:
            self.close_connection = True
        if path != "/capture" or not app.remote_capture:
            # Off by default: the endpoint does not exist unless remote_capture is on.
            self._send(404, "text/plain; charset=utf-8", b"not found\n")
            return
        if not app.token_ok(self.headers.get("Authorization")):
            self._send(401, "application/json", b'{"error": "bearer token required"}\n',
                       [("WWW-Authenticate", 'Bearer realm="tfobs"')])
            return
        handler = app.capture_handler
        if handler is None:
            self._send(503, "application/json", b'{"error": "capture not available"}\n')
            return
        try:
            granted = bool(handler())
        except Exception:
            log.debug("tfobs: capture request handler failed", exc_info=True)
            app.on_error("remote_capture")
            self._send(500, "application/json", b'{"error": "capture request failed"}\n')
            return
        if granted:
            self._send(202, "application/json", b'{"accepted": true}\n')
        else:  # the duty-cycle budget (or a window already open) said no
            self._send(429, "application/json", b'{"accepted": false}\n')

    def _metrics(self) -> None:
        try:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(self.app.registry)
        except Exception:
            log.debug("tfobs: rendering /metrics failed", exc_info=True)
            self.app.on_error("export_prometheus")
            self._send(500, "text/plain; charset=utf-8", b"metrics failed\n")
            return
        extra = []
        if gzip_accepted(self.headers.get("Accept-Encoding", "")):
            body = gzip.compress(body, compresslevel=1)
            extra.append(("Content-Encoding", "gzip"))
        self._send(200, content_type, body, extra)

    def _page(self, api: PageFn | None = None) -> None:
        page = api or self.app.page  # `/api/windows` (JSON) or the overview page
        try:
            if page is None:
                raise LookupError("no page")
            content_type, text = page()
        except Exception:
            log.debug("tfobs: rendering / failed", exc_info=True)
            content_type, text = "text/plain; charset=utf-8", "tfobs: metrics at /metrics\n"
        self._send(200, content_type, text.encode("utf-8"))

    def _send(self, code: int, content_type: str, body: bytes,
              headers: list[tuple[str, str]] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers or ():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
