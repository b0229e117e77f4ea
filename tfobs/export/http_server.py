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
  or oversized, a first request cut short by its own address's newer connection) within
  `strike_block_s` is refused for `strike_block_s`: on Linux its SYNs are dropped by a
  kernel filter on the listener (`http_sockfilter`), so a guesser, an unauthenticated flood
  or a stream of oversized heads costs the job nothing; elsewhere, or beyond what the filter
  holds, it is closed unread at accept (counted as `stage="http_refused"`), and a burst of
  those pauses accepting for `refused_pause_s`, so a client that reconnects at once waits in
  the listen queue instead of spinning the loop;
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

This module is the I/O: sockets, TLS, deadlines, fork. The rules it applies live in
socket-free modules that take `now`: `http_wire` (framing and parsing), `http_admission`
(buckets, turns, strikes, trust), `http_routes` (what a request gets) and `http_render`
(shared and late renderings).
"""

from __future__ import annotations

import base64
import errno
import hmac
import logging
import os
import selectors
import socket
import ssl
import stat
import struct
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from tfobs import forks
from tfobs.errors import ConfigError
from tfobs.export.http_admission import Admission
from tfobs.export.http_limits import Limits, fd_bounded_connections
from tfobs.export.http_render import (
    Headers,
    PageFn,
    Rendered,
    Renderer,
    RenderQueue,
    Waiter,
    render_metrics,
    render_page,
)
from tfobs.export.http_routes import (
    Capture,
    Denied,
    RenderPage,
    Reply,
    capture_reply,
    route,
)
from tfobs.export.http_sockfilter import ListenerFilter
from tfobs.export.http_wire import Refusal, Request, RequestReader, response

log = logging.getLogger(__name__)

CaptureFn = Callable[..., Any]  # (keep=False) -> truthy when a window was granted


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
            not_file = _not_a_file(self.tls_cert, self.tls_key)
            if not_file:
                raise ConfigError(
                    f"cannot load metrics_tls_cert/metrics_tls_key ({not_file!r} is not a "
                    "regular file: a FIFO or device is never read to its end); give readable "
                    "PEM files")
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


def _register_fork_hook() -> None:
    forks.after_fork_in_child(_close_in_child)  # registering again keeps one entry


def _close_in_child() -> None:
    for server in list(_live_servers):
        try:
            server._forget_after_fork()
        except Exception:  # never into the child's own code
            log.debug("tfobs: closing the metrics server in a forked child failed",
                      exc_info=True)
    _live_servers.clear()


def _close_unread(sock: socket.socket) -> None:
    """Close a refused connection at once (RST, no TIME_WAIT left on our side)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class PortInUseError(ConfigError):
    """The port to serve on is taken (another job, a notebook's earlier run)."""

    def __init__(self, message: str, port: int, bind: str) -> None:
        super().__init__(message)
        self.port, self.bind = port, bind



def _not_a_file(*paths: str) -> str:
    """The first of `paths` that is there but is no regular file ('' when none): OpenSSL
    opens a FIFO and waits for a writer, and reads a device that never ends (both inside
    `enable()`). A missing or unreadable file is left to the load, which says why."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except (OSError, ValueError):
            continue
        if not stat.S_ISREG(mode):
            return path
    return ""

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


class _Conn:
    __slots__ = ("sock", "fd", "ip", "opened", "deadline", "reader", "ready", "out",
                 "close_after", "served", "handshaken", "wait_until", "events", "in_request",
                 "queued", "eof", "closed", "draining", "rendering", "refused")

    def __init__(self, sock: socket.socket, ip: str, now: float, limits: Limits,
                 tls: bool) -> None:
        self.sock = sock
        self.ip = ip
        self.fd = sock.fileno()
        self.opened = now
        self.deadline = now + limits.first_request_s
        self.reader = RequestReader(limits.max_head_bytes, limits.max_headers)
        self.ready: Request | None = None  # read whole, waiting for a request token
        self.out = b""
        self.close_after = False
        self.served = 0
        self.handshaken = not tls
        self.wait_until = 0.0  # parked (failed auth) until then
        self.events = 0
        self.in_request = False
        self.queued = False  # waiting for a request token
        self.eof = False
        self.closed = False
        self.draining = 0  # bytes still to discard after a final response (lingering close)
        self.rendering = False  # waiting for the next shared rendering of its page
        self.refused = False  # answered with an error: drain little before closing


_WAKE = "wake"  # the selector's data for the render thread's wake socket


class _Loop:
    """The `tfobs-http` thread: sockets, TLS and deadlines; what to admit, parse and render
    is asked of `Admission`, `RequestReader` and `RenderQueue`."""

    def __init__(self, app: MetricsServer, listener: socket.socket,
                 ctx: ssl.SSLContext | None) -> None:
        self.app = app
        self.limits = app.limits
        self.listener = listener
        self.ctx = ctx
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ, None)
        self.accept_paused_until = 0.0
        self.refused_bursts = 0  # rounds in a row that met a burst of refused connections
        # Blocked addresses' SYNs dropped in the kernel (Linux); refused at accept as well.
        self.kfilter = ListenerFilter(listener) if self.limits.kernel_filter else None
        self.filter_seen = 0  # Admission.changes when the filter was last set
        self.filter_until = 0.0  # when its first block ends: set again then
        self.filter_next = 0.0  # not set again before then (a spray's blocks come in bursts)
        self.blocks_counted = 0  # Admission.blocks_begun already counted as http_blocked
        self.conns: dict[int, _Conn] = {}  # by fd, in accept order
        self.max_conns = fd_bounded_connections(self.limits.max_connections)
        self.by_ip: dict[str, dict[int, _Conn]] = {}  # address -> its connections, oldest first
        now = time.monotonic()
        self.admission: Admission[_Conn] = Admission(self.limits, now)
        self.renders: RenderQueue[_Conn] = RenderQueue(self.limits, now)
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, _WAKE)
        self.renderer = Renderer(self._render, self._wake)
        self.left: Renderer | None = None  # a held render thread replaced, until it ends
        self.accepted = 0  # connections taken in to be served (for tests, benchmarks)
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
        for due in (self.admission.next_token_s(), self.renders.wake_in(now)):
            if due is not None:
                timeout = min(timeout, due)
        if self.accept_paused_until:
            timeout = min(timeout, self.accept_paused_until - now)
        if self.filter_until:
            timeout = min(timeout, self.filter_until - now)
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
        while (waiting := self.admission.next_admitted(now)) is not None:
            waiting.queued = False
            self._pump(waiting, now, have_token=True)
        self._serve_render_waiters(now)
        for conn in list(self.conns.values()):
            if conn.closed:
                continue
            if now >= conn.deadline:
                if not conn.served and not conn.in_request:
                    # connected (a handshake perhaps), asked nothing
                    self.admission.strike(conn.ip, now)
                self._push_out(conn, now)  # slow or idle client: its time is up
            elif conn.wait_until and now >= conn.wait_until:
                conn.wait_until = 0.0
                self._pump(conn, now)
        while self.blocks_counted < self.admission.blocks_begun:
            # Counted here: once blocked, an address's SYNs are dropped where tfobs never
            # sees them, so a block's beginning is what the metrics can show.
            self.blocks_counted += 1
            self.app.on_error("http_blocked")
        if self.kfilter is not None and now >= self.filter_next and (
                self.admission.changes != self.filter_seen
                or (self.filter_until and now >= self.filter_until)):
            self._refilter(now)

    def _refilter(self, now: float) -> None:
        """Set the listener's kernel filter to the blocks of now (none: detached)."""
        assert self.kfilter is not None
        self.filter_seen = self.admission.changes
        began = time.perf_counter()
        addresses, networks, exempt, until = self.admission.blocks(now)
        self.filter_until = until or 0.0
        ok = self.kfilter.set(addresses, networks, exempt)
        # Not again for 20 times what this took (at least 50 ms): a spray making new blocks
        # without end costs at most a twentieth of a core here (4,096 blocks: about 3 ms);
        # meanwhile the newest blocks are refused at accept.
        self.filter_next = now + max(0.05, 20.0 * (time.perf_counter() - began))
        if not ok:
            log.debug("tfobs: no kernel filter on the metrics port; blocked addresses are "
                      "refused at accept")
            self.kfilter = None
            self.filter_until = 0.0

    def _wake(self) -> None:
        """Called by the render thread: a rendering ended."""
        try:
            self.wake_w.send(b"\0")
        except OSError:  # full (a byte is waiting already) or closed at shutdown
            pass

    def _accept(self, now: float) -> None:
        accepted = refused = 0
        adm = self.admission
        # At most 32 new connections a round, so a flood cannot starve the clients already
        # here; refused addresses cost only an accept and a close, so the queue is drained
        # of them (up to 1,024) and a client queued behind them is not kept waiting.
        while accepted < 32 and refused < 1024:
            if not adm.may_accept(now):
                # Out of the ration: the rest wait in the listen queue (1,024 deep, so a
                # scraper's SYN still finds room) until a token is due.
                self._pause_accepting(now, 1.0 / max(self.limits.accepts_per_s, 1e-3))
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
            if ip.startswith("::ffff:") and "." in ip:
                ip = ip[7:]  # IPv4 on a dual-stack listener: counted with its own network
            if adm.refused(ip, now):
                self.app.on_error("http_refused")
                _close_unread(sock)
                refused += 1
                continue
            # Refused connections (above) cost an accept and a close: not counted in the ration.
            adm.accepted()
            if self.ctx is not None and not adm.may_handshake(ip, now):
                # Over the handshake ration: a strike too, so a handshake flood from many
                # addresses blocks its network within a hundred connections, not seconds.
                adm.strike(ip, now)
                self.app.on_error("http_refused")
                _close_unread(sock)
                continue
            self.accepted += 1
            accepted += 1
            self._take_in(sock, ip, now)
        if refused >= 16:
            # A burst from refused addresses: leave the listen queue alone a while, so a
            # refused client that reconnects at once waits there instead of costing an
            # accept and a close each time (others get in at the next round). Longer at
            # each burst in a row: a blocked flood cost a tenth of the job's core at 50 ms.
            self.refused_bursts += 1
            lim = self.limits
            self._pause_accepting(now, min(lim.refused_pause_max_s, lim.refused_pause_s
                                           * 2 ** min(self.refused_bursts - 1, 16)))
        else:
            self.refused_bursts = 0

    def _take_in(self, sock: socket.socket, ip: str, now: float) -> None:
        mine = self.by_ip.get(ip)
        if mine is not None and len(mine) >= max(1, self.max_conns // 2):
            self._push_out(next(iter(mine.values())), now)  # an address may hold half the slots
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
            return
        conn = _Conn(sock, ip, now, self.limits, self.ctx is not None)
        self.conns[conn.fd] = conn
        self.by_ip.setdefault(ip, {})[conn.fd] = conn
        self._pump(conn, now)

    def _pause_accepting(self, now: float, seconds: float) -> None:
        if not self.accept_paused_until:
            self.sel.unregister(self.listener)
        self.accept_paused_until = now + seconds

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
            return (self.admission.is_trusted(c.ip, now), c.queued or c.rendering,
                    -len(self.by_ip.get(c.ip, ())), c.opened)

        self._push_out(min(self.conns.values(), key=worth), now)

    def _push_out(self, conn: _Conn, now: float) -> None:
        """Close `conn` to make room or at its deadline; a strike when it was in the middle
        of a request head (a slowloris trickle, from one address or many), so trickling ends
        in a block. No scraper is caught so: its head comes in one packet, and a request
        read whole and waiting for its answer is not a trickle. Connections that sent
        nothing strike at their first deadline instead."""
        if conn.in_request and conn.ready is None and not (
                conn.queued or conn.rendering or conn.out or conn.draining or conn.wait_until):
            self.admission.strike(conn.ip, now)
        self._close(conn)

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
            self.renders.drop(conn)
        if conn.queued:
            conn.queued = False
            self.admission.withdraw(conn.ip, conn)
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
        for sock in (self.wake_r, self.wake_w):
            try:
                sock.close()
            except OSError:
                pass
        try:
            self.sel.close()
        except Exception:  # whatever a selector raises at close, the listener still closes
            log.debug("tfobs: closing the HTTP selector failed", exc_info=True)
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
        if not conn.handshaken and not self._handshake(conn):
            return
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
                    if self.ctx is not None and not conn.served and not conn.in_request:
                        # A TLS handshake and gone, nothing asked: a scraper always asks,
                        # so a strike now (a handshake flood) rather than never.
                        self.admission.strike(conn.ip, now)
                    self._close(conn)  # the client is gone and left no whole request
                elif not conn.queued:
                    full = conn.reader.room == 0
                    self._want(conn, 0 if full or conn.eof else selectors.EVENT_READ)
                return
            have_token = False

    def _handshake(self, conn: _Conn) -> bool:
        """Advance the TLS handshake; True once done."""
        try:
            conn.sock.do_handshake()  # type: ignore[attr-defined]
        except ssl.SSLWantReadError:
            self._want(conn, selectors.EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self._want(conn, selectors.EVENT_WRITE)
            return False
        except ssl.SSLError as e:
            if e.reason == "HTTP_REQUEST":  # OpenSSL saw "GET /..." where a hello belongs
                self._wrong_protocol(conn, "plain HTTP on tfobs's TLS metrics port; "
                                     "scrape it with scheme: https")
            raise
        conn.handshaken = True
        return True

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
        conn.reader.clear()
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
        while conn.reader.room > 0:
            try:
                chunk = conn.sock.recv(min(16384, conn.reader.room))
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError,
                    ssl.SSLWantWriteError):
                return
            if not chunk:
                conn.eof = True
                return
            if not conn.in_request:
                conn.in_request = True
                conn.deadline = now + self.limits.request_timeout_s
            conn.reader.feed(chunk)

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
        """Serve the next complete request `conn` has read; False when there is none yet
        (or it waits for a request token)."""
        if conn.ready is None:
            got = conn.reader.next()
            if got is None:
                return False
            if isinstance(got, Refusal):
                if got.tls_hello and self.ctx is None:
                    self._wrong_protocol(conn, "a TLS handshake on tfobs's plain-HTTP metrics "
                                         "port; scrape it with scheme: http, or give tfobs "
                                         "metrics_tls_cert and metrics_tls_key")
                self._error(conn, got.status, got.message)
                return True
            conn.ready = got
        request = conn.ready
        if not have_token and not self.admission.admit(conn.ip, conn, now):
            conn.queued = True  # served in turn as the request rate allows
            self._want(conn, 0)
            return False
        conn.ready = None
        conn.served += 1
        if conn.served >= self.limits.max_requests_per_connection or not request.keep_alive:
            conn.close_after = True
        self._dispatch(conn, request, now)
        return True

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
        self.admission.strike(conn.ip, time.monotonic())
        conn.close_after = True
        conn.refused = True
        conn.reader.clear()
        conn.ready = None
        self._queue(conn, status, "text/plain; charset=utf-8", (message + "\n").encode())

    def _queue(self, conn: _Conn, status: int, content_type: str, body: bytes,
               headers: Headers = (), head_only: bool = False) -> None:
        conn.out = response(status, content_type, body, headers, close=conn.close_after,
                            head_only=head_only)

    def _dispatch(self, conn: _Conn, req: Request, now: float) -> None:
        got = route(req, self.app)
        if isinstance(got, Reply):
            self._reply(conn, got)
        elif isinstance(got, Denied):
            self._auth_failed(conn, now, got)
        elif isinstance(got, RenderPage):
            self.admission.trust(conn.ip, now)
            # Answered by the next rendering of this page begun after it (this round's
            # `_serve_render_waiters`); requests already waiting go first.
            conn.rendering = True
            self.renders.add(got.key, Waiter(conn, got.path, req, got.head_only))
        else:
            self.admission.trust(conn.ip, now)
            self._reply(conn, self._capture(got))

    def _reply(self, conn: _Conn, reply: Reply) -> None:
        if reply.close:
            conn.close_after = True
        self._queue(conn, reply.status, reply.content_type, reply.body, reply.headers,
                    reply.head_only)

    def _answer(self, waiters: list[Waiter[_Conn]], rendered: Rendered, now: float,
                headers: Headers = ()) -> None:
        status, content_type, body, extra = rendered
        for w in waiters:
            conn = w.conn
            if conn.closed:
                continue
            conn.rendering = False
            self._queue(conn, status, content_type, body, extra + headers, w.head_only)
            self._pump(conn, now)

    def _serve_render_waiters(self, now: float) -> None:
        renders = self.renders
        if renders.job is not None:
            done = renders.finish()
            if done is not None:
                self._answer(*done, now)
            else:  # still rendering: late, then replaced (and on below)
                if renders.is_late(now):
                    for late in renders.late_answers(now):
                        for _ in late.waiters:  # counted first: a client may look at once
                            self.app.on_late()
                        self._answer(late.waiters, late.rendered, now, late.headers)
                if not renders.is_held(now) or not self._replace():
                    return
        job = renders.start_next(now)
        if job is not None:
            self.renderer.submit(job)

    def _replace(self) -> bool:
        """Leave the held render thread to finish alone and start a new one; False while
        an earlier one left so is still held (one at most: threads stay bounded)."""
        if self.left is not None and self.left.thread.is_alive():
            return False
        self.left, self.renderer = self.renderer, Renderer(self._render, self._wake)
        self.left.stop()  # it exits when its rendering ends; its result is not used
        self.renderer.thread.start()
        self.renders.requeue()
        return True

    def _auth_failed(self, conn: _Conn, now: float, denied: Denied) -> None:
        """Counted, answered late and the connection closed: guessing is slow."""
        self.app.on_error("http_auth")
        self.admission.strike(conn.ip, now)
        conn.close_after = True
        self._queue(conn, 401, denied.content_type, denied.body, (denied.challenge,))
        conn.wait_until = now + self.limits.auth_fail_delay_s
        conn.deadline = max(conn.deadline, conn.wait_until + self.limits.request_timeout_s)

    def _capture(self, ask: Capture) -> Reply:
        """Ask the job for a profiling window; its handler's failure is counted, not raised."""
        handler = self.app.capture_handler
        if handler is None:
            return capture_reply(None)
        try:
            granted = bool(handler(keep=True) if ask.keep else handler())
        except Exception:
            log.debug("tfobs: capture request handler failed", exc_info=True)
            self.app.on_error("remote_capture")
            return Reply(500, "application/json", b'{"error": "capture request failed"}\n')
        return capture_reply(granted)

    def _render(self, path: str, req: Request) -> Rendered:
        """The render thread's work; its CPU cost, smoothed by `RenderQueue` (one slow
        rendering, the first after a window is published or a page, must not hold every
        scrape for seconds; a steady cost still sets the rate), bounds how often it runs."""
        app = self.app
        if path == "/metrics":
            return render_metrics(app.registry, req, app.on_error)
        return render_page((app.api if path == "/api/windows" else None) or app.page)
