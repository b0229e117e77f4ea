"""The HTTP endpoint of a training process: `/metrics`, the overview page `/`, and (only when
remote capture is switched on) `POST /capture`.

Options: bind address, TLS (certificate + key), HTTP basic auth for every GET, and a bearer
token for `POST /capture`.

The server is one daemon thread running a selector loop (no thread per connection), so
whatever clients do, serving costs the training process a bounded share (see `Limits` and
SECURITY.md "Limits of the HTTP server"):

* at most `max_connections` sockets (further capped by the fd soft limit), half of them per
  client address; to make room, the oldest connection of the address holding the most is
  closed, so a flood of idle or trickling clients cannot lock out a scraper from another
  address nor take the training job's own file descriptors;
* one deadline per request, from its first byte to its last response byte (trickling one byte
  at a time does not extend it), and an idle deadline between keep-alive requests;
* a request head is at most `max_head_bytes` and `max_headers` lines, refused with 431 before
  more is read, and before any auth check; bodies over 4 KiB are refused with 413;
* a global request rate (token bucket), shared round-robin between client addresses and in
  arrival order within one: clients that pipeline without reading simply wait; a connection
  serves at most `max_requests_per_connection` requests;
* the exposition is rendered at most `renders_per_s` times a second (fewer when rendering is
  slow); scrapes beyond that wait for the next rendering and share it (never older than the
  request);
* renderings run in a thread of their own (`tfobs-render`): a rendering held past
  `render_late_s` answers its scrapes with the page's previous rendering (an `Age` header
  says how old; counted as `tfobs_dropped_total{what="late_rendering"}`), so a scrape is not
  held by what holds the rendering thread: Python's cyclic garbage collector runs in
  whichever thread allocates when it is due, with the finalizers of the job's collected
  objects, and a tf.data iterator's finalizer waits for the iterator's threads (seconds to a
  minute, benchmarks/RESULTS.md "A scrape held for seconds by the job's garbage
  collection"). Held past `render_replace_s`, the thread is left to finish alone and a new
  one renders, so the metrics do not stand still for the whole wait (at most one thread is
  left so at a time);
* a failed auth is counted (`tfobs_errors_total{stage="http_auth"}`), answered only after
  `auth_fail_delay_s`, and closes its connection;
* an address with `strike_limit` strikes (failed auth checks, requests refused as malformed
  or oversized) within `strike_block_s` is refused at accept for `strike_block_s` (closed
  unread, counted as `stage="http_refused"`), so a guesser, an unauthenticated flood or a
  stream of oversized heads costs one accept and one close per connection, not a parse;
  a burst of them pauses accepting for `refused_pause_s`, so a client that reconnects at
  once waits in the listen queue instead of spinning the loop;
* an address whose request passed auth (any request, with auth off) is trusted for
  `trusted_s`: making room evicts connections of addresses not trusted first, and its
  requests go before theirs for a request token, so connections from many addresses (a
  spray over 127.0.0.0/8, a pod network) cannot crowd out a scraper that proved itself;
* new connections are taken in at most `accepts_per_s` a second (the rest wait in the
  listen queue, 1,024 deep so a scraper's SYN still finds room), and TLS handshakes for
  addresses not trusted at most `handshakes_per_s` a second (beyond, closed unread): a
  connection or handshake flood costs a bounded share of a core;
* a connection that sends no request before its first deadline counts as a strike, and a
  network (/24, /64) with `network_strike_limit` strikes from addresses not trusted within
  `strike_block_s` is refused at accept as one address would be (its trusted addresses
  apart), so a spray over many addresses is blocked too;
* EMFILE on accept pauses accepting instead of spinning.
"""

from __future__ import annotations

import base64
import errno
import gzip
import hmac
import ipaddress
import logging
import os
import re
import selectors
import socket
import ssl
import struct
import threading
import time
import urllib.parse
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted

from tfobs.errors import ConfigError

log = logging.getLogger(__name__)

PageFn = Callable[[], tuple[str, str]]  # () -> (content type, body)
Rendered = tuple[int, str, bytes, tuple[tuple[str, str], ...]]  # status, type, body, headers
CaptureFn = Callable[..., Any]  # (keep=False) -> truthy when a window was granted

_MAX_BODY = 4096
# Control characters a request head may not carry (HTAB aside): a bare CR, NUL, ... are where
# parsers disagree (request smuggling), so such a head is refused, not read leniently.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Limits:
    """What one metrics server may cost; the defaults are documented in SECURITY.md."""

    max_connections: int = 64
    max_head_bytes: int = 8192
    max_headers: int = 64
    request_timeout_s: float = 10.0  # first byte of a request -> last byte of its response
    idle_timeout_s: float = 30.0  # a keep-alive connection waiting for its next request
    first_request_s: float = 5.0  # a new connection (TLS handshake included) -> first byte
    max_requests_per_connection: int = 100
    requests_per_s: float = 100.0  # global, token bucket
    burst: int = 20
    renders_per_s: float = 4.0  # renderings; beyond this, waiting scrapes share the next one
    render_cpu_share: float = 0.05  # ... and rendering takes at most this share of a CPU
    render_late_s: float = 2.0  # a rendering held this long: its scrapes get the previous one
    render_replace_s: float = 6.0  # ... and held this long: a new thread renders from then on
    auth_fail_delay_s: float = 1.0
    strike_limit: int = 30  # failed auth or malformed requests of one address within ...
    strike_block_s: float = 30.0  # ... this long: refuse the address at accept this long
    network_strike_limit: int = 100  # the same for a network (/24, /64), trusted addresses apart
    blocked_addresses: int = 4096  # addresses remembered (oldest forgotten first)
    accept_pause_s: float = 0.5  # after EMFILE/ENFILE on accept
    refused_pause_s: float = 0.05  # after a burst of connections from refused addresses
    trusted_s: float = 600.0  # an address whose request passed auth is preferred this long
    accepts_per_s: float = 500.0  # new connections taken from the listen queue (bucket)
    accept_burst: int = 100
    handshakes_per_s: float = 20.0  # TLS handshakes begun for addresses not trusted (bucket)
    handshake_burst: int = 10
    error_drain_bytes: int = 8192  # read and dropped after a refused request, before closing


def fd_bounded_connections(limit: int) -> int:
    """`limit`, lowered so tfobs holds at most 1/16 of the process's fd soft limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return limit
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return limit
    return max(2, min(limit, soft // 16))


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
        on_late: Callable[[], None] | None = None,
        limits: Limits | None = None,
        fixes: tuple[str, str] = (
            "set metrics_port / TFOBS_METRICS_PORT to a free port or -1 to disable",
            "set metrics_bind / TFOBS_METRICS_BIND to an address of this host"),
    ) -> None:
        if bool(tls_cert) != bool(tls_key):
            raise ConfigError(
                "metrics_tls_cert and metrics_tls_key go together; set both (PEM files) or neither"
            )
        if basic_auth and (":" not in basic_auth or basic_auth.startswith(":")):
            raise ConfigError('metrics_basic_auth must be "user:password"')
        if remote_capture and not capture_token:
            raise ConfigError(
                "remote_capture needs remote_capture_token (TFOBS_REMOTE_CAPTURE_TOKEN) set to a "
                "secret; callers send it as 'Authorization: Bearer <token>'"
            )
        self.registry = registry
        self.bind = bind
        self.requested_port = port
        # What a taken port and a bad address tell the user to do, in the words they set them
        # with: the job's settings, or a command's flags (`tfobs analyze --serve/--bind`).
        self.fixes = fixes
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self._basic = basic_auth.encode() if basic_auth else b""
        self.page = page
        self.api: PageFn | None = None  # serves `/api/windows` when set (same auth, TLS)
        self.remote_capture = remote_capture
        self._token = capture_token.encode()
        self.capture_handler: CaptureFn | None = None
        self.on_error = on_error or (lambda stage: None)
        self.on_late = on_late or (lambda: None)  # a scrape answered by an older rendering
        self.limits = limits or Limits()
        self._loop: _Loop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._loop is not None:
            return
        ctx = None
        if self.tls_cert:
            try:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                ctx.minimum_version = ssl.TLSVersion.TLSv1_2
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            except (OSError, ssl.SSLError) as e:
                reason = getattr(e, "strerror", None) or type(e).__name__
                raise ConfigError(
                    f"cannot load metrics_tls_cert/metrics_tls_key ({reason}); give readable "
                    "PEM files"
                ) from None
        listener = _listen(self.bind, self.requested_port, self.fixes)
        self._loop = _Loop(self, listener, ctx)
        self._thread = threading.Thread(target=self._loop.run, name="tfobs-http", daemon=True)
        self._thread.start()
        _live_servers.add(self)
        _register_fork_hook()

    def shutdown(self, timeout_s: float = 2.0) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        loop.stop = True
        deadline = time.monotonic() + max(timeout_s, 0.0)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(timeout_s, 0.0))
        loop.close_all()
        # An idle render thread ends at once; a held one (a finalizer of the job's) is
        # waited for until the deadline, then left: it ends when what holds it does.
        render = loop.renderer.thread
        if render.is_alive() and render is not threading.current_thread():
            render.join(max(0.0, deadline - time.monotonic()))

    def _forget_after_fork(self) -> None:
        """In a forked child: close the inherited sockets; the loop thread does not exist."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop = True
            loop.close_all(in_child=True)

    @property
    def port(self) -> int:
        return self._loop.listener.getsockname()[1] if self._loop is not None else 0

    @property
    def listen_address(self) -> str:
        return str(self._loop.listener.getsockname()[0]) if self._loop is not None else ""

    @property
    def connections(self) -> int:
        """Client connections open now (for tests and the benchmark)."""
        return len(self._loop.conns) if self._loop is not None else 0

    @property
    def scheme(self) -> str:
        return "https" if self.tls_cert else "http"

    @property
    def url(self) -> str:
        """`/metrics` URL for people (a wildcard bind is shown as loopback); "" when stopped."""
        if self._loop is None:
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
        return hmac.compare_digest(header[7:].strip().encode("utf-8", "replace"), self._token)


# -- fork: a child must not keep the parent's port open ----------------------------------------

_live_servers: weakref.WeakSet[MetricsServer] = weakref.WeakSet()
_fork_hook_registered = False


def _register_fork_hook() -> None:
    global _fork_hook_registered
    if not _fork_hook_registered and hasattr(os, "register_at_fork"):
        _fork_hook_registered = True
        os.register_at_fork(after_in_child=_close_in_child)


def _close_in_child() -> None:
    for server in list(_live_servers):
        try:
            server._forget_after_fork()
        except Exception:  # never into the child's own code
            pass
    _live_servers.clear()


def _head_end(buf: bytearray) -> tuple[int, int]:
    """(where the request head ends, the blank line's length), or (-1, 0): the first empty
    line, ended by CRLF or by a bare LF (RFC 9112 lets a server accept both)."""
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    if lf >= 0 and (crlf < 0 or lf < crlf):
        # "\n\n" may close a "...\r\n\n" head: the head is everything before the first LF
        return lf, 2
    return crlf, 4 if crlf >= 0 else 0


def _network(ip: str) -> str:
    """The network an address is counted with for strikes: its /24 (IPv4), /64 (IPv6)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    prefix = 24 if addr.version == 4 else 64
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _close_unread(sock: socket.socket) -> None:
    """Close a refused connection at once (RST, no TIME_WAIT left on our side)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _filtered(render_key: str) -> bool:
    """Whether a rendering key (`_Loop._render_key`) carries a `name[]` filter."""
    return render_key.startswith("m|") and not render_key.endswith("|")


def _wanted_names(path: str) -> list[str]:
    """`/metrics?name[]=a&name[]=b`: the series names asked for, as prometheus_client's own
    server takes them (sorted and distinct: equal asks share one rendering)."""
    query = path.partition("?")[2]
    if "name" not in query:
        return []
    return sorted(set(urllib.parse.parse_qs(query).get("name[]", [])))


class PortInUseError(ConfigError):
    """The port to serve on is taken (another job, a notebook's earlier run)."""

    def __init__(self, message: str, port: int, bind: str) -> None:
        super().__init__(message)
        self.port, self.bind = port, bind


def _listen(bind: str, port: int, fixes: tuple[str, str]) -> socket.socket:
    port_fix, bind_fix = fixes
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind, port))
        # A backlog of 1,024: a spray of connections (closed unread past the accept ration)
        # must not fill it and drop a scraper's SYN (1 s retries); many scrapers at once neither.
        sock.listen(1024)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise PortInUseError(f"port {port} on {bind} is in use; {port_fix}", port,
                                 bind) from None
        raise ConfigError(
            f"cannot listen on {bind!r}:{port} ({e.strerror or e}); {bind_fix}"
        ) from None
    except (TypeError, ValueError, UnicodeError) as e:  # not an address at all
        sock.close()
        raise ConfigError(
            f"cannot listen on {bind!r}:{port} ({type(e).__name__}); {bind_fix}"
        ) from None
    return sock


# -- the serving loop ---------------------------------------------------------------------------


class _Request:
    __slots__ = ("method", "path", "version", "headers", "body_len")

    def __init__(self, method: str, path: str, version: str, headers: dict[str, str],
                 body_len: int) -> None:
        self.method, self.path, self.version = method, path, version
        self.headers, self.body_len = headers, body_len


class _Conn:
    __slots__ = ("sock", "fd", "ip", "opened", "deadline", "inbuf", "out", "close_after", "served",
                 "handshaken", "request", "wait_until", "events", "in_request", "queued",
                 "eof", "closed", "draining", "rendering", "refused")

    def __init__(self, sock: socket.socket, ip: str, now: float, first_s: float,
                 tls: bool) -> None:
        self.sock = sock
        self.ip = ip
        self.fd = sock.fileno()
        self.opened = now
        self.deadline = now + first_s
        self.inbuf = bytearray()
        self.out = b""
        self.close_after = False
        self.served = 0
        self.handshaken = not tls
        self.request: _Request | None = None  # head parsed, body still arriving
        self.wait_until = 0.0  # parked (failed auth) until then
        self.events = 0
        self.in_request = False
        self.queued = False  # waiting for a request token
        self.eof = False
        self.closed = False
        self.draining = 0  # bytes still to discard after a final response (lingering close)
        self.rendering = False  # waiting for the next shared rendering of its page
        self.refused = False  # answered with an error: drain little before closing


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Job:
    """One rendering for the render thread, and the requests waiting for it."""

    __slots__ = ("key", "path", "req", "waiters", "started", "result", "cost")

    def __init__(self, key: str, path: str, req: _Request,
                 waiters: list[tuple[_Conn, str, _Request, bool]], started: float) -> None:
        self.key, self.path, self.req, self.waiters = key, path, req, waiters
        self.started = started
        self.result: Rendered | None = None  # set by the render thread, then the loop woken
        self.cost = 0.0  # the render thread's CPU seconds


class _Renderer:
    """The `tfobs-render` thread: renders one job at a time and wakes the loop with a byte.

    Whatever holds it (a garbage collection it triggered, with the job's finalizers) holds
    no socket: the loop goes on serving, and answers late renderings' scrapes itself."""

    def __init__(self, render: Callable[[str, _Request], Rendered], wake: socket.socket) -> None:
        self._render = render
        self.wake = wake
        self._cond = threading.Condition()
        self._job: _Job | None = None
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="tfobs-render", daemon=True)

    def submit(self, job: _Job) -> None:
        with self._cond:
            self._job = job
            self._cond.notify()

    def stop(self) -> None:
        """Ends the thread once it is idle, or when its rendering ends (a held one is left
        to finish: what holds it is not tfobs's to cut short)."""
        with self._cond:
            self._stop = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._stop:
                    self._cond.wait()
                job, self._job = self._job, None
                if self._stop or job is None:
                    return
            cpu0 = time.thread_time()
            try:
                result = self._render(job.path, job.req)
            except Exception:  # `_render` answers its own failures: this would be a bug
                log.debug("tfobs: rendering failed", exc_info=True)
                result = (500, "text/plain; charset=utf-8", b"rendering failed\n", ())
            job.cost = time.thread_time() - cpu0
            job.result = result
            try:
                self.wake.send(b"\0")
            except OSError:  # full (a byte is waiting already) or closed at shutdown
                pass


_WAKE = "wake"  # the selector's data for the render thread's wake socket
_LAST_KEPT = 8  # page variants whose last rendering is kept for late renderings


class _Loop:
    def __init__(self, app: MetricsServer, listener: socket.socket,
                 ctx: ssl.SSLContext | None) -> None:
        self.app = app
        self.limits = app.limits
        self.listener = listener
        self.ctx = ctx
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, None)
        self.accept_paused_until = 0.0
        self.conns: dict[int, _Conn] = {}  # by fd, in accept order
        self.max_conns = fd_bounded_connections(self.limits.max_connections)
        self.tokens = float(self.limits.burst)
        self.tokens_at = time.monotonic()
        self.by_ip: dict[str, dict[int, _Conn]] = {}  # address -> its connections, oldest first
        # Requests ready and waiting for a token: a FIFO per client address, and the
        # addresses in turn (round-robin), so one address cannot starve another.
        self.waiting: dict[str, deque[_Conn]] = {}
        self.turns: deque[str] = deque()
        # Requests waiting for the next rendering of their page, by page variant: one
        # rendering answers all of them, and is never older than the request.
        self.render_waiters: dict[str, list[tuple[_Conn, str, _Request, bool]]] = {}
        self.render_tokens = self.limits.renders_per_s
        self.render_tokens_at = time.monotonic()
        self.render_cost = 0.0
        # The rendering in the render thread (one at a time), and each page variant's last
        # finished rendering with the time it was begun: what a late rendering's scrapes get.
        self.job: _Job | None = None
        self.last: dict[str, tuple[Rendered, float]] = {}
        self.wake_r, wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        wake_w.setblocking(False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, _WAKE)
        self.renderer = _Renderer(self._render, wake_w)
        self.left: _Renderer | None = None  # a held render thread replaced, until it ends
        # Strikes per address (times, oldest first) and addresses refused until a time;
        # both bounded so a spray of addresses cannot grow them without end.
        self.strikes: dict[str, deque[float]] = {}
        self.blocked: dict[str, float] = {}
        # Addresses whose request passed auth, with when (oldest first, bounded the same way).
        self.trusted: dict[str, float] = {}
        self.accepted = 0  # connections taken in to be served (for tests, benchmarks)
        lim = self.limits
        self.buckets = {"accept": [float(lim.accept_burst), time.monotonic()],
                        "handshake": [float(lim.handshake_burst), time.monotonic()]}
        self.stop = False
        self._closed = False
        self.mismatch_logged_at = -1e9  # one warning a minute about clients of the wrong protocol

    # -- main loop -----------------------------------------------------------------------------

    def run(self) -> None:
        # Not niced: a niced thread preempted while it holds the GIL (rendering, a garbage
        # collection it triggered) would stall the training thread until it runs again.
        # Its cost is bounded by the limits instead.
        self.renderer.thread.start()
        while not self.stop:
            try:
                self._once()
            except Exception:  # a bug here must not end serving, nor spin
                log.debug("tfobs: HTTP loop error", exc_info=True)
                self.app.on_error("http_server")
                time.sleep(0.05)
        self.close_all()

    def _once(self) -> None:
        now = time.monotonic()
        timeout = 0.25
        for conn in self.conns.values():
            timeout = min(timeout, conn.deadline - now)
            if conn.wait_until:
                timeout = min(timeout, conn.wait_until - now)
        if self.turns:
            timeout = min(timeout, (1.0 - self.tokens) / max(self.limits.requests_per_s, 1e-3))
        if self.job is not None:
            # Wake when it turns late (its end wakes the loop by itself); once late, arrivals
            # are answered as they come, so the loop sleeps as usual.
            late_at = self.job.started + self.limits.render_late_s
            if now < late_at:
                timeout = min(timeout, late_at - now)
        elif self.render_waiters:
            timeout = min(timeout, (1.0 - self.render_tokens) / self._render_rate())
        if self.accept_paused_until:
            timeout = min(timeout, self.accept_paused_until - now)
        events = self.sel.select(max(0.0, timeout))
        now = time.monotonic()
        if self.accept_paused_until and now >= self.accept_paused_until:
            self.accept_paused_until = 0.0
            self.sel.register(self.listener, selectors.EVENT_READ, None)
        for key, _mask in events:
            if key.data is None:
                self._accept(now)
            elif key.data is _WAKE:
                try:
                    self.wake_r.recv(64)
                except OSError:
                    pass
            elif not key.data.closed:
                self._pump(key.data, now)
        while self.turns and self._take_token(now):
            waiting = self._next_waiting()
            if waiting is not None:
                self._pump(waiting, now, have_token=True)
        self._serve_render_waiters(now)
        for conn in list(self.conns.values()):
            if conn.closed:
                continue
            if now >= conn.deadline:
                if not conn.served and not conn.in_request:
                    self._strike(conn.ip, now)  # connected (a handshake perhaps), asked nothing
                self._close(conn)  # slow or idle client: its time is up
            elif conn.wait_until and now >= conn.wait_until:
                conn.wait_until = 0.0
                self._pump(conn, now)

    def _accept(self, now: float) -> None:
        accepted = refused = 0
        # At most 32 new connections a round, so a flood cannot starve the clients already
        # here; refused addresses cost only an accept and a close, so the queue is drained
        # of them (up to 1,024) and a client queued behind them is not kept waiting.
        lim = self.limits
        while accepted < 32 and refused < 1024:
            if self.buckets["accept"][0] < 1.0 and not self._bucket(
                    "accept", now, lim.accepts_per_s, lim.accept_burst, take=False):
                # Out of the ration: the rest wait in the listen queue (1,024 deep, so a
                # scraper's SYN still finds room) until a token is due.
                self._pause_accepting(now, 1.0 / max(lim.accepts_per_s, 1e-3))
                break
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: stop accepting for a while instead of spinning.
                    self.app.on_error("http_accept")
                    self._pause_accepting(now, self.limits.accept_pause_s)
                    self._evict_oldest()
                return
            ip = str(addr[0]) if isinstance(addr, tuple) else ""
            if self._refused(ip, now) or (self._refused(_network(ip), now)
                                          and not self._is_trusted(ip, now)):
                self.app.on_error("http_refused")
                _close_unread(sock)
                refused += 1
                continue
            # Refused connections (above) cost an accept and a close: not counted in the ration.
            self.buckets["accept"][0] = max(0.0, self.buckets["accept"][0] - 1.0)
            if self.ctx is not None and not self._is_trusted(ip, now) and not self._bucket(
                    "handshake", now, lim.handshakes_per_s, lim.handshake_burst):
                self.app.on_error("http_refused")  # a handshake is about 1 ms of CPU: rationed
                _close_unread(sock)
                continue
            self.accepted += 1
            accepted += 1
            mine = self.by_ip.get(ip)
            if mine is not None and len(mine) >= max(1, self.max_conns // 2):
                self._close(next(iter(mine.values())))  # an address may hold half the slots
            elif len(self.conns) >= self.max_conns:
                self._evict_oldest()
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.ctx is not None:
                    sock = self.ctx.wrap_socket(sock, server_side=True,
                                                do_handshake_on_connect=False)
            except (OSError, ValueError):
                sock.close()
                continue
            conn = _Conn(sock, ip, now, self.limits.first_request_s, self.ctx is not None)
            self.conns[conn.fd] = conn
            self.by_ip.setdefault(ip, {})[conn.fd] = conn
            self._pump(conn, now)
        if refused >= 16:
            # A burst from refused addresses: leave the listen queue alone a while, so a
            # refused client that reconnects at once waits there instead of costing an
            # accept and a close each time (others get in at the next round).
            self._pause_accepting(now, self.limits.refused_pause_s)

    def _pause_accepting(self, now: float, seconds: float) -> None:
        if not self.accept_paused_until:
            self.sel.unregister(self.listener)
        self.accept_paused_until = now + seconds

    def _refused(self, ip: str, now: float) -> bool:
        until = self.blocked.get(ip)
        if until is None:
            return False
        if now < until:
            return True
        del self.blocked[ip]
        return False

    def _strike(self, ip: str, now: float) -> None:
        """A failed auth check or a refused request; block the address after too many, and
        its network (every address of it not trusted) after many more: a spray over many
        addresses of one network (127.0.0.0/8, a node's pod range) is blocked as one."""
        if not self._is_trusted(ip, now):
            self._count_strike(_network(ip), now, self.limits.network_strike_limit)
        self._count_strike(ip, now, self.limits.strike_limit)

    def _count_strike(self, ip: str, now: float, limit: int) -> None:
        lim = self.limits
        times = self.strikes.pop(ip, None) or deque()
        times.append(now)
        while times and times[0] <= now - lim.strike_block_s:
            times.popleft()
        if len(times) >= limit:
            self.blocked.pop(ip, None)
            self.blocked[ip] = now + lim.strike_block_s
            while len(self.blocked) > lim.blocked_addresses:
                del self.blocked[next(iter(self.blocked))]
            log.warning("tfobs: %s sent %d failed-auth or malformed requests in %.0f s; "
                        "refusing its connections for %.0f s", ip, len(times),
                        lim.strike_block_s, lim.strike_block_s)
            return
        self.strikes[ip] = times  # re-inserted last: dict order is recency
        while len(self.strikes) > lim.blocked_addresses:
            del self.strikes[next(iter(self.strikes))]

    def _evict_oldest(self) -> None:
        """Make room. Goes first: a connection of an address not trusted, then one with no
        request being answered (idle, trickling, or not reading its answers), then one of
        the address holding the most, then the oldest. So a flood from one address evicts
        its own connections, and a flood from many addresses evicts its own too, not a
        scraper that proved itself nor a request waiting for its turn."""
        if not self.conns:
            return
        now = time.monotonic()

        def worth(c: _Conn) -> tuple[bool, bool, int, float]:
            return (self._is_trusted(c.ip, now), c.queued or c.rendering,
                    -len(self.by_ip.get(c.ip, ())), c.opened)

        self._close(min(self.conns.values(), key=worth))

    def _trust(self, ip: str, now: float) -> None:
        self.trusted.pop(ip, None)
        self.trusted[ip] = now  # re-inserted last: dict order is recency
        while len(self.trusted) > self.limits.blocked_addresses:
            del self.trusted[next(iter(self.trusted))]

    def _is_trusted(self, ip: str, now: float) -> bool:
        at = self.trusted.get(ip)
        return at is not None and now - at < self.limits.trusted_s

    def _bucket(self, name: str, now: float, rate: float, burst: int,
                take: bool = True) -> bool:
        """Whether the bucket `name` (refilled at `rate` a second up to `burst`) has a
        token; taken unless `take` is False."""
        bucket = self.buckets[name]
        bucket[0] = min(float(burst), bucket[0] + (now - bucket[1]) * rate)
        bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0 if take else 0.0
            return True
        return False

    def _next_waiting(self) -> _Conn | None:
        ip = self.turns.popleft()
        queue = self.waiting.get(ip)
        if not queue:
            self.waiting.pop(ip, None)
            return None
        conn = queue.popleft()
        if queue:
            self.turns.append(ip)
        else:
            del self.waiting[ip]
        conn.queued = False
        return conn

    def _want(self, conn: _Conn, events: int) -> None:
        if events == conn.events:
            return
        try:
            if conn.events and events:
                self.sel.modify(conn.sock, events, conn)
            elif events:
                self.sel.register(conn.sock, events, conn)
            else:
                self.sel.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._want(conn, 0)
        self.conns.pop(conn.fd, None)
        mine = self.by_ip.get(conn.ip)
        if mine is not None:
            mine.pop(conn.fd, None)
            if not mine:
                del self.by_ip[conn.ip]
        if conn.rendering:
            conn.rendering = False
            for key, waiters in list(self.render_waiters.items()):
                waiters[:] = [w for w in waiters if w[0] is not conn]
                if not waiters:
                    del self.render_waiters[key]
        if conn.queued:
            conn.queued = False
            queue = self.waiting.get(conn.ip)
            if queue is not None:
                queue.remove(conn)
                if not queue:
                    del self.waiting[conn.ip]
                    self.turns.remove(conn.ip)
        try:
            conn.sock.close()
        except OSError:
            pass

    def close_all(self, in_child: bool = False) -> None:
        if self._closed:
            return
        self._closed = True
        if not in_child:  # a forked child has no render thread, and its lock may be held
            self.renderer.stop()
        for conn in list(self.conns.values()):
            self._close(conn)
        for sock in (self.wake_r, self.renderer.wake):
            try:
                sock.close()
            except OSError:
                pass
        try:
            self.sel.close()
        except Exception:
            pass
        try:
            self.listener.close()
        except OSError:
            pass

    # -- one connection ------------------------------------------------------------------------

    def _pump(self, conn: _Conn, now: float, have_token: bool = False) -> None:
        """Move `conn` as far as it can go without blocking."""
        try:
            self._advance(conn, now, have_token)
        except (OSError, ssl.SSLError, ValueError):
            self._close(conn)

    def _advance(self, conn: _Conn, now: float, have_token: bool) -> None:
        if conn.draining:
            self._drain(conn)
            return
        if not conn.handshaken:
            try:
                conn.sock.do_handshake()  # type: ignore[attr-defined]
            except ssl.SSLWantReadError:
                self._want(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(conn, selectors.EVENT_WRITE)
                return
            except ssl.SSLError as e:
                if e.reason == "HTTP_REQUEST":  # OpenSSL saw "GET /..." where a hello belongs
                    self._wrong_protocol(conn, "plain HTTP on tfobs's TLS metrics port; "
                                         "scrape it with scheme: https")
                raise
            conn.handshaken = True
        while not conn.closed:
            if conn.wait_until or conn.queued or conn.rendering:
                self._want(conn, 0)
                return
            if conn.out:
                if not self._flush(conn):
                    self._want(conn, selectors.EVENT_WRITE)
                    return
                if conn.close_after:
                    self._linger(conn, now)
                    return
                conn.in_request = False
                conn.deadline = now + self.limits.idle_timeout_s
            if not conn.eof:
                self._read(conn, now)
            if not self._respond_if_ready(conn, now, have_token):
                if conn.eof and not conn.queued:
                    self._close(conn)  # the client is gone and left no whole request
                elif not conn.queued:
                    full = len(conn.inbuf) >= self.limits.max_head_bytes + _MAX_BODY
                    self._want(conn, 0 if full or conn.eof else selectors.EVENT_READ)
                return
            have_token = False

    def _linger(self, conn: _Conn, now: float) -> None:
        """Close after a final response without losing it: closing with unread input would
        send a reset that can destroy the response in flight, so half-close and discard
        what the client still sends, for at most a second and 64 KiB."""
        if isinstance(conn.sock, ssl.SSLSocket):
            self._close(conn)
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.inbuf.clear()
        conn.draining = self.limits.error_drain_bytes if conn.refused else 65536
        conn.deadline = min(conn.deadline, now + 1.0)
        self._drain(conn)

    def _drain(self, conn: _Conn) -> None:
        while conn.draining > 0:
            try:
                chunk = conn.sock.recv(min(16384, conn.draining))
            except (BlockingIOError, InterruptedError):
                self._want(conn, selectors.EVENT_READ)
                return
            if not chunk:
                break
            conn.draining -= len(chunk)
        self._close(conn)

    def _read(self, conn: _Conn, now: float) -> None:
        """Read what is there, up to one head (+ body) and no more."""
        limit = self.limits.max_head_bytes + _MAX_BODY
        while len(conn.inbuf) < limit:
            try:
                chunk = conn.sock.recv(min(16384, limit - len(conn.inbuf)))
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError,
                    ssl.SSLWantWriteError):
                return
            if not chunk:
                conn.eof = True
                return
            if not conn.in_request:
                conn.in_request = True
                conn.deadline = now + self.limits.request_timeout_s
            conn.inbuf += chunk

    def _flush(self, conn: _Conn) -> bool:
        while conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError,
                    ssl.SSLWantReadError):
                return False
            conn.out = conn.out[sent:]
        return True

    def _respond_if_ready(self, conn: _Conn, now: float, have_token: bool) -> bool:
        """Serve the next complete request in `conn.inbuf`; False when there is none yet."""
        if conn.request is None:
            if conn.inbuf[:1] in (b"\r", b"\n"):  # RFC 9112: empty lines before a request
                del conn.inbuf[:len(conn.inbuf) - len(conn.inbuf.lstrip(b"\r\n"))]
            first = bytes(conn.inbuf[:1])
            if first and not first.isupper():  # no method: answer now, not at the deadline
                if first == b"\x16" and self.ctx is None:
                    self._wrong_protocol(conn, "a TLS handshake on tfobs's plain-HTTP metrics "
                                         "port; scrape it with scheme: http, or give tfobs "
                                         "metrics_tls_cert and metrics_tls_key")
                self._error(conn, 400, "not an HTTP request")
                return True
            end, sep = _head_end(conn.inbuf)
            if end < 0:
                if len(conn.inbuf) >= self.limits.max_head_bytes:
                    self._error(conn, 431, "request head too large")
                    return True
                return False
            if end + sep > self.limits.max_head_bytes:
                self._error(conn, 431, "request head too large")
                return True
            head = bytes(conn.inbuf[:end])
            del conn.inbuf[:end + sep]
            try:
                conn.request = self._parse(head)
            except _BadRequest as e:
                self._error(conn, e.status, str(e))
                return True
        request = conn.request
        if len(conn.inbuf) < request.body_len:
            return False
        trusted = self._is_trusted(conn.ip, now)
        if not have_token and ((self.turns and not trusted) or not self._take_token(now)):
            conn.queued = True  # served in turn as the request rate allows
            queue = self.waiting.get(conn.ip)
            if queue is None:
                queue = self.waiting[conn.ip] = deque()
                if trusted:
                    self.turns.appendleft(conn.ip)  # a proven client before the others
                else:
                    self.turns.append(conn.ip)
            queue.append(conn)
            self._want(conn, 0)
            return False
        del conn.inbuf[:request.body_len]
        conn.request = None
        conn.served += 1
        if conn.served >= self.limits.max_requests_per_connection:
            conn.close_after = True
        if request.version != "HTTP/1.1" or request.headers.get("connection", "").lower() == (
                "close"):
            conn.close_after = True
        self._dispatch(conn, request, now)
        return True

    def _take_token(self, now: float) -> bool:
        lim = self.limits
        self.tokens = min(float(lim.burst),
                          self.tokens + (now - self.tokens_at) * lim.requests_per_s)
        self.tokens_at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def _parse(self, head: bytes) -> _Request:
        try:
            text = head.decode("latin-1")
        except UnicodeError:  # latin-1 decodes every byte; kept for clarity
            raise _BadRequest(400, "bad request") from None
        # CRLF or bare LF; empty lines before a request were dropped from the buffer already
        lines = [line.removesuffix("\r") for line in text.split("\n")]
        if not lines or not lines[0]:
            raise _BadRequest(400, "empty request")
        if any(_CONTROL.search(line) for line in lines):
            raise _BadRequest(400, "a control character (bare CR, NUL, ...) in the request head")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(400, "bad request line")
        method, target, version = parts
        if len(lines) - 1 > self.limits.max_headers:
            raise _BadRequest(431, "too many header lines")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or line[0] in " \t":
                raise _BadRequest(400, "bad header line")
            key = name.lower()
            value = value.strip(" \t")  # RFC 9110's optional whitespace: SP and HTAB only
            if key in headers:
                if key in ("content-length", "authorization", "host", "transfer-encoding"):
                    raise _BadRequest(400, f"repeated {name} header")
                headers[key] += ", " + value
            else:
                headers[key] = value
        if "transfer-encoding" in headers:
            # Request bodies here are tiny: a chunked one is refused, not parsed as a request.
            raise _BadRequest(411, "send a Content-Length, not Transfer-Encoding")
        raw_len = headers.get("content-length", "0")
        if not raw_len.isascii() or not raw_len.isdigit() or len(raw_len) > 12:
            raise _BadRequest(400, "bad Content-Length")
        body_len = int(raw_len)
        if body_len > _MAX_BODY:
            raise _BadRequest(413, "request body too large")
        return _Request(method, target, version, headers, body_len)

    # -- responses -----------------------------------------------------------------------------

    def _wrong_protocol(self, conn: _Conn, what: str) -> None:
        """A scraper set up for the other protocol: say so in the log (once a minute)."""
        self.app.on_error("http_protocol")
        now = time.monotonic()
        if now - self.mismatch_logged_at >= 60.0:
            self.mismatch_logged_at = now
            log.warning("tfobs: %s sent %s", conn.ip, what)

    def _error(self, conn: _Conn, status: int, message: str) -> None:
        """Answer a malformed request and close: what follows it cannot be trusted."""
        self._strike(conn.ip, time.monotonic())
        conn.close_after = True
        conn.refused = True
        conn.inbuf.clear()
        conn.request = None
        self._queue(conn, status, "text/plain; charset=utf-8", (message + "\n").encode())

    def _queue(self, conn: _Conn, status: int, content_type: str, body: bytes,
               headers: tuple[tuple[str, str], ...] = (), head_only: bool = False) -> None:
        reason = HTTPStatus(status).phrase
        lines = [f"HTTP/1.1 {status} {reason}", "Server: tfobs",
                 f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if conn.close_after:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn.out = data if head_only else data + body

    def _dispatch(self, conn: _Conn, req: _Request, now: float) -> None:
        app = self.app
        path = req.path.split("?", 1)[0]
        if req.method == "POST":
            self._post(conn, req, path, now)
            return
        if req.method not in ("GET", "HEAD"):
            conn.close_after = True
            self._queue(conn, 405, "text/plain; charset=utf-8", b"method not allowed\n",
                        (("Allow", "GET, HEAD, POST"),))
            return
        head_only = req.method == "HEAD"
        api = app.api if path == "/api/windows" else None
        if path not in ("/metrics", "/") and api is None:
            self._queue(conn, 404, "text/plain; charset=utf-8", b"not found\n",
                        head_only=head_only)
            return
        if not app.basic_ok(req.headers.get("authorization")):
            self._auth_failed(conn, now, ("WWW-Authenticate", 'Basic realm="tfobs"'),
                              "text/plain; charset=utf-8", b"unauthorized\n")
            return
        self._trust(conn.ip, now)
        # Answered by the next rendering of this page begun after it (this round's
        # `_serve_render_waiters`); requests already waiting go first.
        conn.rendering = True
        self.render_waiters.setdefault(self._render_key(path, req), []).append(
            (conn, path, req, head_only))

    def _answer(self, waiters: list[tuple[_Conn, str, _Request, bool]], rendered: Rendered,
                now: float, headers: tuple[tuple[str, str], ...] = ()) -> None:
        status, content_type, body, extra = rendered
        for conn, _path, _req, head_only in waiters:
            if conn.closed:
                continue
            conn.rendering = False
            self._queue(conn, status, content_type, body, extra + headers, head_only)
            self._pump(conn, now)

    def _serve_render_waiters(self, now: float) -> None:
        job = self.job
        if job is not None:
            result = job.result
            if result is None:  # still rendering: late, then replaced (and on below)
                if now - job.started >= self.limits.render_late_s:
                    self._answer_late(now)
                if now - job.started < self.limits.render_replace_s or not self._replace():
                    return
            else:
                self.job = None
                self.render_cost = job.cost if not self.render_cost else \
                    0.8 * self.render_cost + 0.2 * job.cost
                self.last.pop(job.key, None)
                self.last[job.key] = (result, job.started)
                while len(self.last) > _LAST_KEPT:
                    del self.last[next(iter(self.last))]
                self._answer(job.waiters, result, now)
        # Plain pages first: a name filter makes a rendering of its own per distinct set, so
        # clients asking for a new set each time must wait among themselves, not before the
        # scrapes every Prometheus sends (stable sort: arrival order otherwise).
        for key in sorted(self.render_waiters, key=_filtered):
            live = [w for w in self.render_waiters[key] if not w[0].closed]
            if not live:
                del self.render_waiters[key]
                continue
            if not self._render_token(now):
                return
            del self.render_waiters[key]
            _conn, path, req, _head = live[0]
            self.job = _Job(key, path, req, live, now)
            self.renderer.submit(self.job)
            return

    def _replace(self) -> bool:
        """Leave the held render thread to finish alone and start a new one; False while
        an earlier one left so is still held (one at most: threads stay bounded)."""
        if self.left is not None and self.left.thread.is_alive():
            return False
        job = self.job
        assert job is not None
        self.left, self.renderer = self.renderer, _Renderer(self._render, self.renderer.wake)
        self.left.stop()  # it exits when its rendering ends; its result is not used
        self.renderer.thread.start()
        self.job = None
        # Its waiters without an earlier rendering are asked again, first in line.
        waiting = [w for w in job.waiters if not w[0].closed]
        if waiting:
            self.render_waiters = {job.key: waiting + self.render_waiters.pop(job.key, []),
                                   **self.render_waiters}
        return True

    def _answer_late(self, now: float) -> None:
        """The rendering thread is held: every request whose page was rendered before gets
        that rendering (`Age` says how old), counted; the others wait for the held one."""
        job = self.job
        assert job is not None
        groups = [(job.key, job.waiters)] + list(self.render_waiters.items())
        for key, waiters in groups:
            kept = self.last.get(key)
            live = [w for w in waiters if not w[0].closed]
            if kept is None or not live:
                continue
            rendered, at = kept
            waiters.clear()
            for _ in live:  # counted first: a client may look as soon as it is answered
                self.app.on_late()
            self._answer(live, rendered, now, (("Age", str(int(now - at))),))
        for key in [k for k, waiters in self.render_waiters.items() if not waiters]:
            del self.render_waiters[key]

    def _auth_failed(self, conn: _Conn, now: float, challenge: tuple[str, str],
                     content_type: str, body: bytes) -> None:
        """Counted, answered late and the connection closed: guessing is slow."""
        self.app.on_error("http_auth")
        self._strike(conn.ip, now)
        conn.close_after = True
        self._queue(conn, 401, content_type, body, (challenge,))
        conn.wait_until = now + self.limits.auth_fail_delay_s
        conn.deadline = max(conn.deadline, conn.wait_until + self.limits.request_timeout_s)

    def _post(self, conn: _Conn, req: _Request, path: str, now: float) -> None:
        app = self.app
        if path != "/capture" or not app.remote_capture:
            # Off by default: the endpoint does not exist unless remote_capture is on.
            self._queue(conn, 404, "text/plain; charset=utf-8", b"not found\n")
            return
        if not app.token_ok(req.headers.get("authorization")):
            self._auth_failed(conn, now, ("WWW-Authenticate", 'Bearer realm="tfobs"'),
                              "application/json", b'{"error": "bearer token required"}\n')
            return
        self._trust(conn.ip, now)
        handler = app.capture_handler
        if handler is None:
            self._queue(conn, 503, "application/json", b'{"error": "capture not available"}\n')
            return
        try:
            # ?keep=1: also keep the window's capture in keep_dir (tfobs/runtime/keep.py).
            keep = "keep=1" in req.path.partition("?")[2].split("&")
            granted = bool(handler(keep=True) if keep else handler())
        except Exception:
            log.debug("tfobs: capture request handler failed", exc_info=True)
            app.on_error("remote_capture")
            self._queue(conn, 500, "application/json", b'{"error": "capture request failed"}\n')
            return
        if granted:
            self._queue(conn, 202, "application/json", b'{"accepted": true}\n')
        else:  # the duty-cycle budget, an open window or a pending request said no
            self._queue(conn, 429, "application/json", b'{"accepted": false}\n',
                        (("Retry-After", "10"),))

    def _render_rate(self) -> float:
        """Fresh renderings a second: renders_per_s, fewer when one costs much CPU."""
        lim = self.limits
        return max(1e-3, min(lim.renders_per_s,
                             lim.render_cpu_share / max(self.render_cost, 1e-6)))

    def _render_token(self, now: float) -> bool:
        lim = self.limits
        self.render_tokens = min(lim.renders_per_s, self.render_tokens
                                 + (now - self.render_tokens_at) * self._render_rate())
        self.render_tokens_at = now
        if self.render_tokens >= 1.0:
            self.render_tokens -= 1.0
            return True
        return False

    @staticmethod
    def _render_key(path: str, req: _Request) -> str:
        if path != "/metrics":
            return "api" if path == "/api/windows" else "page"
        _encoder, content_type = choose_encoder(req.headers.get("accept", ""))
        names = ",".join(_wanted_names(req.path))
        return f"m|{content_type}|{gzip_accepted(req.headers.get('accept-encoding', ''))}|{names}"

    def _render(self, path: str, req: _Request) -> Rendered:
        """The render thread's work; its CPU cost, smoothed by the loop (one slow rendering,
        the first after a window is published or a page, must not hold every scrape for
        seconds; a steady cost still sets the rate), bounds how often it runs."""
        if path == "/metrics":
            return self._metrics(req)
        return self._page(self.app.api if path == "/api/windows" else None)

    def _metrics(self, req: _Request) -> Rendered:
        try:
            encoder, content_type = choose_encoder(req.headers.get("accept", ""))
            registry = self.app.registry
            names = _wanted_names(req.path)
            if names and hasattr(registry, "restricted_registry"):
                registry = registry.restricted_registry(names)
            body = encoder(registry)
        except Exception:
            log.debug("tfobs: rendering /metrics failed", exc_info=True)
            self.app.on_error("export_prometheus")
            return 500, "text/plain; charset=utf-8", b"metrics failed\n", ()
        if gzip_accepted(req.headers.get("accept-encoding", "")):
            return 200, content_type, gzip.compress(body, compresslevel=1), (
                ("Content-Encoding", "gzip"),)
        return 200, content_type, body, ()

    def _page(self, api: PageFn | None = None) -> Rendered:
        page = api or self.app.page  # `/api/windows` (JSON) or the overview page
        try:
            if page is None:
                raise LookupError("no page")
            content_type, text = page()
        except Exception:
            log.debug("tfobs: rendering / failed", exc_info=True)
            content_type, text = "text/plain; charset=utf-8", "tfobs: metrics at /metrics\n"
        return 200, content_type, text.encode("utf-8"), ()
