"""What the metrics server answers to a request, decided without sockets: an answer now, a
failed auth check, a rendering to wait for, or a capture to ask for. The loop carries it out
(`http_server._Loop._dispatch`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tfobs.export.http_render import PageFn, render_key
from tfobs.export.http_wire import Request

Headers = tuple[tuple[str, str], ...]
TEXT = "text/plain; charset=utf-8"
JSON = "application/json"


class Site(Protocol):
    """What routing asks of the server (`MetricsServer`)."""

    @property
    def api(self) -> PageFn | None: ...
    @property
    def remote_capture(self) -> bool: ...
    def basic_ok(self, header: str | None) -> bool: ...
    def token_ok(self, header: str | None) -> bool: ...


@dataclass(frozen=True)
class Reply:
    """Answer at once."""

    status: int
    content_type: str
    body: bytes
    headers: Headers = ()
    close: bool = False
    head_only: bool = False


@dataclass(frozen=True)
class Denied:
    """A failed auth check: counted, a strike, answered late with `challenge`, closed."""

    challenge: tuple[str, str]
    content_type: str
    body: bytes


@dataclass(slots=True)  # made per request: a frozen dataclass costs more to make
class RenderPage:
    """Auth passed: wait for the next rendering of `key` begun after now."""

    path: str
    key: str
    head_only: bool


@dataclass(slots=True)
class Capture:
    """Auth passed: ask for a profiling window (`keep`: also keep its capture)."""

    keep: bool


Route = Reply | Denied | RenderPage | Capture

# The fixed answers, made once (routing runs for every request).
NOT_FOUND = Reply(404, TEXT, b"not found\n")
NOT_FOUND_HEAD = Reply(404, TEXT, b"not found\n", head_only=True)
NOT_ALLOWED = Reply(405, TEXT, b"method not allowed\n", (("Allow", "GET, HEAD, POST"),),
                    close=True)
BASIC_DENIED = Denied(("WWW-Authenticate", 'Basic realm="tfobs"'), TEXT, b"unauthorized\n")
BEARER_DENIED = Denied(("WWW-Authenticate", 'Bearer realm="tfobs"'), JSON,
                       b'{"error": "bearer token required"}\n')
CAPTURE_GRANTED = Reply(202, JSON, b'{"accepted": true}\n')
CAPTURE_REFUSED = Reply(429, JSON, b'{"accepted": false}\n', (("Retry-After", "10"),))
CAPTURE_UNAVAILABLE = Reply(503, JSON, b'{"error": "capture not available"}\n')


def route(req: Request, site: Site) -> Route:
    path = req.route
    if req.method == "POST":
        return _post(req, path, site)
    if req.method not in ("GET", "HEAD"):
        return NOT_ALLOWED
    head_only = req.method == "HEAD"
    if path not in ("/metrics", "/") and not (path == "/api/windows" and site.api is not None):
        return NOT_FOUND_HEAD if head_only else NOT_FOUND
    if not site.basic_ok(req.headers.get("authorization")):
        return BASIC_DENIED
    return RenderPage(path, render_key(req), head_only)


def _post(req: Request, path: str, site: Site) -> Route:
    if path != "/capture" or not site.remote_capture:
        # Off by default: the endpoint does not exist unless remote_capture is on.
        return NOT_FOUND
    if not site.token_ok(req.headers.get("authorization")):
        return BEARER_DENIED
    # ?keep=1: also keep the window's capture in keep_dir (tfobs/runtime/keep.py).
    return Capture(keep="keep=1" in req.path.partition("?")[2].split("&"))


def capture_reply(granted: bool | None) -> Reply:
    """The answer to a capture request: granted, refused (budget, an open window, a request
    pending), or None when no handler is there."""
    if granted is None:
        return CAPTURE_UNAVAILABLE
    return CAPTURE_GRANTED if granted else CAPTURE_REFUSED
