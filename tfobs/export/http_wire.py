"""HTTP/1.1 framing without sockets: a connection's bytes in, its requests or a refusal out,
and a response's bytes back.

The seam where a well-kept parser (h11) could take over: the loop only feeds bytes, asks
`RequestReader.next()` and writes what `response()` returns. What this reader refuses, and
why (request smuggling, oversized heads), is what tests/export/test_http_wire.py and the
hardening tests hold any replacement to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus

MAX_BODY = 4096  # request bodies here are tiny (POST /capture carries none)
# Control characters a request head may not carry (HTAB aside): a bare CR, NUL, ... are where
# parsers disagree (request smuggling), so such a head is refused, not read leniently.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Headers that may appear once: two of them are where a proxy and this server could disagree.
_SINGLE = ("content-length", "authorization", "host", "transfer-encoding")


@dataclass(slots=True)  # not frozen: a frozen dataclass costs more to make, per request
class Request:
    """One request whose head and body have arrived; the body itself is not kept."""

    method: str
    path: str  # the request target as sent, query included
    version: str
    headers: dict[str, str]  # names lower-cased; repeated ones joined with ", "
    body_len: int = 0

    @property
    def route(self) -> str:
        """The target without its query: what the server routes on."""
        return self.path.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this one."""
        return self.version == "HTTP/1.1" and (
            self.headers.get("connection", "").lower() != "close")


@dataclass(frozen=True)
class Refusal:
    """A request that will not be served: answered with `status` and closed, since what
    follows it on the connection cannot be trusted."""

    status: int
    message: str
    tls_hello: bool = False  # the bytes began a TLS handshake (a client set up for https)


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.refusal = Refusal(status, message)


def head_end(buf: bytes | bytearray) -> tuple[int, int]:
    """(where the request head ends, the blank line's length), or (-1, 0): the first empty
    line, ended by CRLF or by a bare LF (RFC 9112 lets a server accept both)."""
    crlf, lf = buf.find(b"\r\n\r\n"), buf.find(b"\n\n")
    if lf >= 0 and (crlf < 0 or lf < crlf):
        # "\n\n" may close a "...\r\n\n" head: the head is everything before the first LF
        return lf, 2
    return crlf, 4 if crlf >= 0 else 0


def parse_head(head: bytes, max_headers: int) -> Request | Refusal:
    """A request head (without its blank line) as a `Request`, or why it is refused."""
    try:
        return _parse(head, max_headers)
    except _Refused as e:
        return e.refusal


def _parse(head: bytes, max_headers: int) -> Request:
    text = head.decode("latin-1")  # every byte decodes: odd ones are refused below
    # CRLF or bare LF; empty lines before a request were dropped from the buffer already
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if not lines[0]:
        raise _Refused(400, "empty request")
    if any(_CONTROL.search(line) for line in lines):
        raise _Refused(400, "a control character (bare CR, NUL, ...) in the request head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, "bad request line")
    method, target, version = parts
    if len(lines) - 1 > max_headers:
        raise _Refused(431, "too many header lines")
    headers = _headers(lines[1:])
    if "transfer-encoding" in headers:
        # Request bodies here are tiny: a chunked one is refused, not parsed as a request.
        raise _Refused(411, "send a Content-Length, not Transfer-Encoding")
    raw_len = headers.get("content-length", "0")
    if not raw_len.isascii() or not raw_len.isdigit() or len(raw_len) > 12:
        raise _Refused(400, "bad Content-Length")
    body_len = int(raw_len)
    if body_len > MAX_BODY:
        raise _Refused(413, "request body too large")
    return Request(method, target, version, headers, body_len)


def _headers(lines: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or line[0] in " \t":
            raise _Refused(400, "bad header line")  # obsolete folding included
        key = name.lower()
        value = value.strip(" \t")  # RFC 9110's optional whitespace: SP and HTAB only
        if key in headers:
            if key in _SINGLE:
                raise _Refused(400, f"repeated {name} header")
            headers[key] += ", " + value
        else:
            headers[key] = value
    return headers


class RequestReader:
    """One connection's incoming bytes, framed into requests one at a time.

    Holds at most one head and one body (`room` says how much more to read), so a client
    that pipelines without reading its answers is held by TCP, not by this buffer."""

    def __init__(self, max_head_bytes: int, max_headers: int) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_headers = max_headers
        self.buf = bytearray()
        self._head: Request | None = None  # head parsed, body still arriving

    @property
    def room(self) -> int:
        """Bytes that may still be read before the next request is taken."""
        return max(0, self.max_head_bytes + MAX_BODY - len(self.buf))

    def feed(self, data: bytes) -> None:
        self.buf += data

    def clear(self) -> None:
        """Forget what was read (a refused request, a connection being closed)."""
        self.buf.clear()
        self._head = None

    def next(self) -> Request | Refusal | None:
        """The next whole request (taken from the buffer), a refusal (the buffer dropped),
        or None until more bytes arrive."""
        if self._head is None:
            got = self._next_head()
            if got is None:
                return None
            if isinstance(got, Refusal):
                self.clear()
                return got
            self._head = got
        request = self._head
        if len(self.buf) < request.body_len:
            return None
        del self.buf[:request.body_len]
        self._head = None
        return request

    def _next_head(self) -> Request | Refusal | None:
        buf = self.buf
        if bytes(buf[:1]) in (b"\r", b"\n"):  # RFC 9112: empty lines before a request
            del buf[:len(buf) - len(buf.lstrip(b"\r\n"))]
        first = bytes(buf[:1])
        if first and not first.isupper():  # no method: answered now, not at the deadline
            return Refusal(400, "not an HTTP request", tls_hello=first == b"\x16")
        end, sep = head_end(buf)
        if end < 0:
            if len(buf) >= self.max_head_bytes:
                return Refusal(431, "request head too large")
            return None
        if end + sep > self.max_head_bytes:
            return Refusal(431, "request head too large")
        head = bytes(buf[:end])
        del buf[:end + sep]
        try:
            return _parse(head, self.max_headers)
        except _Refused as e:
            return e.refusal


def response(status: int, content_type: str, body: bytes,
             headers: tuple[tuple[str, str], ...] = (), *, close: bool = False,
             head_only: bool = False) -> bytes:
    """A whole response; `head_only` (HEAD) keeps the Content-Length of the body left out."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Server: tfobs",
             f"Content-Type: {content_type}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if close:
        lines.append("Connection: close")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return data if head_only else data + body
