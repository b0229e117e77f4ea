"""On-demand captures through TensorFlow's profiler server win over tfobs's windows.

TensorFlow runs one profiler session per process. A capture asked for remotely (TensorBoard's
"Capture profile", `tf.profiler.experimental.client.trace`) reaches the C++ profiler server
that `tf.profiler.experimental.server.start(port)` opened; while a tfobs window holds the
session that request fails at once ("No trace event was collected", three attempts in a few
milliseconds), so without this module the user's own profiler would be unusable during
every tfobs window.

`install_server_hook()` wraps `server.start`: TensorFlow's server starts on a free port of
its own, and a gRPC front on the user's port passes every call through unchanged (raw
bytes, any method of `tensorflow.ProfilerService`), except that before a `Profile` call it
pre-empts tfobs's window (counted as skipped_busy, as for a local start). Where the front
cannot start (no grpcio, the port taken), the original `server.start` runs as it would
without tfobs. The front stays up after `disable()`: the user's server keeps working.

The front must never make the job easier to hurt than TensorFlow's server alone. It runs on
gRPC's asyncio server in one thread of its own: a call opened with no message holds no
thread. A request is at most 4 MiB (`MAX_REQUEST_BYTES`, TensorFlow's own limit, also after
gzip), calls in progress are bounded (`MAX_CALLS`, `MAX_PROFILES`) and each source address
has a rate (`ADDRESS_RATE` calls/s): past any of these a call gets RESOURCE_EXHAUSTED after
`REFUSE_DELAY_S` (so a flood slows itself down), and nothing is queued. Only a well-formed
capture request (`ProfileRequest` with a duration and a folder, as TensorFlow's client and
TensorBoard send) pre-empts tfobs's window; anything else is passed on and fails at
TensorFlow's server as it would without tfobs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections import OrderedDict
from concurrent import futures
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tfobs.capture.session import ProfilerSlot

_log = logging.getLogger(__name__)
_lock = threading.Lock()
_slot: ProfilerSlot | None = None
_original: Any = None
_fronts: dict[int, _Front] = {}  # user's port -> its gRPC front (kept for the process's life)
_BACKEND_START_S = 30.0  # how long TensorFlow's server may take to listen (a busy host)
_FRONT_CALL_S = 15.0  # how long the front's own loop may take to bind, start or stop
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # TensorFlow's server's own receive limit
MAX_CALLS = 16  # calls passed on at once, Profile apart
MAX_PROFILES = 2  # Profile calls at once (TensorFlow runs one capture at a time anyway)
MAX_STREAMS = 32  # calls open at once on one connection (HTTP/2 streams)
ADDRESS_RATE = 20.0  # calls per second from one source address, ...
ADDRESS_BURST = 40.0  # ... after a burst of this many
MAX_ADDRESSES = 4096  # rate buckets kept (the least recently seen forgotten first)
REFUSE_DELAY_S = 0.25  # a refused call is answered this late: a flood that waits for its
MAX_DELAYED = 256  # answers slows down (at most this many wait; beyond, refused at once)
MAX_CAPTURE_MS = 3_600_000  # a capture request's duration_ms: at most an hour
_BACKEND_OPTIONS = [("grpc.max_send_message_length", MAX_REQUEST_BYTES),
                    ("grpc.max_receive_message_length", -1)]  # a capture's response is big


def install_server_hook(slot: ProfilerSlot) -> None:
    """Make remote captures pre-empt tfobs's window (idempotent)."""
    global _slot, _original
    with _lock:
        _slot = slot
        if _original is not None:
            return
        import tensorflow as tf
        from tensorflow.python.profiler import profiler_v2

        original = profiler_v2.start_server

        def start_server(port: int) -> None:
            if not _start_front(int(port), original):
                original(port)

        start_server.__doc__ = original.__doc__
        start_server.__wrapped__ = original  # type: ignore[attr-defined]
        _original = original
        profiler_v2.start_server = start_server
        _set_api(tf, start_server)


def uninstall_server_hook() -> None:
    global _slot, _original
    with _lock:
        _slot = None
        if _original is None:
            return
        import tensorflow as tf
        from tensorflow.python.profiler import profiler_v2

        profiler_v2.start_server = _original
        _set_api(tf, _original)
        _original = None


def _set_api(tf: Any, fn: Any) -> None:
    try:
        tf.profiler.experimental.server.start = fn
    except Exception:  # an API module we cannot write: profiler_v2's name is still wrapped
        _log.debug("cannot patch tf.profiler.experimental.server.start", exc_info=True)


def _before_profile() -> None:
    slot = _slot
    if slot is not None:
        slot.preempt("an on-demand capture through the profiler server took the profiler")


def _start_front(port: int, original: Any) -> bool:
    """TensorFlow's server on a free port, a pass-through front on `port`; False where the
    front cannot be had (the caller then starts TensorFlow's server as usual)."""
    if port in _fronts:
        return True  # TensorFlow's own second start on a port does nothing either
    try:
        import grpc
        from grpc import aio
    except ImportError:
        return False
    front = None
    try:
        front = _Front(grpc, aio)
        if not front.bind(port):
            front.close()
            return False  # taken: TensorFlow's own start reports it as it would
        reservation = _reserved_port()
    except Exception:
        _log.debug("profiler server front failed; starting TensorFlow's directly",
                   exc_info=True)
        if front is not None:
            front.close()
        return False
    # From here TensorFlow's server is started (once: a second start would be a second
    # server), so the front must answer on the user's port whatever else goes wrong: falling
    # back to TensorFlow's start on `port` would find it held by the front's socket.
    backend = reservation.port
    try:
        original(backend)  # TensorFlow listens on every interface, as on the user's port
        if not _wait_listening(backend):  # the reservation is held until it listens
            _log.warning("tfobs: TensorFlow's profiler server was not listening after %.0f s; "
                         "the front on port %d passes calls on once it does", _BACKEND_START_S,
                         port)
    finally:
        reservation.close()
    try:
        front.serve(backend)
    except Exception as exc:
        _log.warning("tfobs: the profiler front on port %d did not start (%s); on-demand "
                     "captures go to TensorFlow's server on port %d instead", port, exc, backend)
        return True
    _fronts[port] = front
    _log.info("tfobs: TensorFlow's profiler server answers on port %d (through tfobs, so "
              "an on-demand capture pre-empts tfobs's window)", port)
    return True


class _reserved_port:
    """A free port, bound (not listening) with SO_REUSEPORT until the block ends: gRPC's
    server (TensorFlow's) binds it too, as only a process of this user may, so picking the
    port and TensorFlow binding it is no race another program can win. Bound when made;
    `close()` (or the end of a `with` block) lets it go."""

    def __init__(self) -> None:
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            address: tuple[str, int] = ("::", 0)
        except OSError:  # no IPv6 on this host
            sock, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), ("0.0.0.0", 0)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port = int(sock.getsockname()[1])

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> int:
        return self.port

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait_listening(port: int) -> bool:
    deadline = time.monotonic() + _BACKEND_START_S
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


class _Front:
    """gRPC's asyncio server on the user's port, in a thread of its own, passing every
    unary call (bytes in, bytes out) to TensorFlow's server within the limits above."""

    def __init__(self, grpc: Any, aio: Any) -> None:
        self._grpc, self._aio = grpc, aio
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tfobs-prof", daemon=True)
        self._thread.start()
        self._server: Any = None
        self._channel: Any = None
        self._rates = _AddressRates(ADDRESS_RATE, ADDRESS_BURST, MAX_ADDRESSES)
        # Pre-empting waits on tfobs's window (up to seconds): one thread, off the loop.
        self._preempter = futures.ThreadPoolExecutor(1, thread_name_prefix="tfobs-prof-preempt")
        self._delayed = 0
        self._calls: asyncio.Semaphore | None = None
        self._profiles: asyncio.Semaphore | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _do(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_FRONT_CALL_S)

    def bind(self, port: int) -> bool:
        return bool(self._do(self._bind(port)))

    async def _bind(self, port: int) -> int:
        self._calls, self._profiles = asyncio.Semaphore(MAX_CALLS), asyncio.Semaphore(
            MAX_PROFILES)
        self._server = self._aio.server(options=[
            ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
            ("grpc.max_send_message_length", -1),
            ("grpc.max_concurrent_streams", MAX_STREAMS)])
        return int(self._server.add_insecure_port(f"[::]:{port}"))

    def serve(self, backend: int) -> None:
        self._do(self._serve(backend))

    async def _serve(self, backend: int) -> None:
        self._channel = self._aio.insecure_channel(f"localhost:{backend}",
                                                   options=_BACKEND_OPTIONS)
        self._server.add_generic_rpc_handlers((self,))
        await self._server.start()

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                await self._server.stop(0)
            if self._channel is not None:
                await self._channel.close()
        try:
            self._do(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._preempter.shutdown(wait=False)

    def service(self, details: Any) -> Any:
        """The generic handler: every method is passed on."""
        method: str = details.method
        call = self._channel.unary_unary(method)  # no (de)serializers: raw bytes
        profile = method.endswith("/Profile")

        async def handle(request: bytes, context: Any) -> bytes:  # a coroutine: gRPC awaits it
            return await self._handle(call, profile, request, context)

        return self._grpc.unary_unary_rpc_method_handler(handle)

    async def _handle(self, call: Any, profile: bool, request: bytes, context: Any) -> bytes:
        if not self._rates.admit(_address(context.peer()), time.monotonic()):
            await self._refuse(context, "too many calls from this address")
        slots = self._profiles if profile else self._calls
        assert slots is not None
        if slots.locked():
            await self._refuse(context, "too many calls in progress")
        async with slots:
            if profile and _capture_request(request):
                await self._loop.run_in_executor(self._preempter, _before_profile)
            try:
                return bytes(await call(request, timeout=context.time_remaining()))
            except self._aio.AioRpcError as exc:
                await context.abort(exc.code(), exc.details() or "")
                raise  # not reached: abort raises


    async def _refuse(self, context: Any, why: str) -> None:
        """RESOURCE_EXHAUSTED, answered late: each refused call costs the loop one wake-up,
        and a flood that waits for its answers is slowed to its own count of callers over
        `REFUSE_DELAY_S`, instead of costing the job a refusal per round trip."""
        if self._delayed < MAX_DELAYED:
            self._delayed += 1
            try:
                await asyncio.sleep(REFUSE_DELAY_S)
            finally:
                self._delayed -= 1
        await context.abort(self._grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"{why}; try again shortly")


class _AddressRates:
    """A token bucket per source address (bounded: the least recently seen forgotten)."""

    def __init__(self, rate: float, burst: float, most: int) -> None:
        self._rate, self._burst, self._most = rate, burst, most
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def admit(self, address: str, now: float) -> bool:
        tokens, then = self._buckets.pop(address, (self._burst, now))
        tokens = min(self._burst, tokens + (now - then) * self._rate)
        ok = tokens >= 1.0
        self._buckets[address] = (tokens - 1.0 if ok else tokens, now)
        if len(self._buckets) > self._most:
            self._buckets.popitem(last=False)
        return ok


def _address(peer: str) -> str:
    """`ipv4:127.0.0.1:5432` or `ipv6:[::1]:5432` -> the address without the port."""
    host = peer.partition(":")[2]
    return host.rsplit(":", 1)[0] if host.count(":") >= 1 else host


def _capture_request(data: bytes) -> bool:
    """Whether `data` is a well-formed `ProfileRequest` asking for a capture: a duration
    (field 1, 1 ms to an hour) and a folder to write it to (field 5, `repository_root`), as
    TensorFlow's client and TensorBoard send. Read from the wire format (no generated
    classes: TensorFlow's wheel ships none for the profiler service)."""
    fields = _wire_fields(data)
    if fields is None:
        return False
    duration, root = fields.get(1), fields.get(5)
    return (isinstance(duration, int) and 0 < duration <= MAX_CAPTURE_MS
            and isinstance(root, bytes) and len(root) > 0)


def _wire_fields(data: bytes) -> dict[int, int | bytes] | None:
    """A protobuf message's top-level fields (the last of each number), None when `data` is
    not a well-formed message."""
    out: dict[int, int | bytes] = {}
    pos, end = 0, len(data)
    while pos < end:
        got = _varint(data, pos)
        if got is None:
            return None
        key, pos = got
        number, kind = key >> 3, key & 7
        if number == 0:
            return None
        if kind == 0:
            got = _varint(data, pos)
            if got is None:
                return None
            out[number], pos = got
        elif kind == 1 or kind == 5:
            pos += 8 if kind == 1 else 4
        elif kind == 2:
            got = _varint(data, pos)
            if got is None or got[1] + got[0] > end:
                return None
            out[number] = data[got[1]:got[1] + got[0]]
            pos = got[1] + got[0]
        else:
            return None
    return out if pos == end else None


def _varint(data: bytes, pos: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    while pos < len(data) and shift < 64:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    return None
