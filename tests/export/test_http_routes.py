"""What the metrics server answers to each request, decided without sockets: `route()` asked
with a real `MetricsServer` that is configured but never started."""

from __future__ import annotations

import base64
from typing import Any

from prometheus_client import CollectorRegistry

from tfobs.export.http_routes import (
    Capture,
    Denied,
    RenderPage,
    Reply,
    capture_reply,
    route,
)
from tfobs.export.http_server import MetricsServer
from tfobs.export.http_wire import Request


def server(**kw: Any) -> MetricsServer:
    return MetricsServer(CollectorRegistry(), bind="127.0.0.1", port=0, **kw)


def req(method: str, path: str, **headers: str) -> Request:
    return Request(method, path, "HTTP/1.1", {k.lower(): v for k, v in headers.items()})


def basic(user_pw: str) -> str:
    return "Basic " + base64.b64encode(user_pw.encode()).decode()


def test_get_and_head_of_a_page_wait_for_its_rendering() -> None:
    srv = server()
    got = route(req("GET", "/metrics?name[]=up"), srv)
    assert isinstance(got, RenderPage) and got.path == "/metrics" and not got.head_only
    assert got.key.startswith("m|") and got.key.endswith("|up")
    head = route(req("HEAD", "/"), srv)
    assert head == RenderPage("/", "page", True)


def test_other_methods_get_405_with_allow_and_close() -> None:
    got = route(req("DELETE", "/metrics"), server())
    assert isinstance(got, Reply) and got.status == 405 and got.close
    assert ("Allow", "GET, HEAD, POST") in got.headers


def test_unknown_paths_get_404_and_head_gets_only_the_head() -> None:
    assert route(req("GET", "/nothing"), server()) == Reply(
        404, "text/plain; charset=utf-8", b"not found\n")
    got = route(req("HEAD", "/nothing"), server())
    assert isinstance(got, Reply) and got.status == 404 and got.head_only


def test_the_api_exists_only_when_the_server_serves_it() -> None:
    srv = server()
    got = route(req("GET", "/api/windows"), srv)
    assert isinstance(got, Reply) and got.status == 404
    srv.api = lambda: ("application/json", "[]")
    assert route(req("GET", "/api/windows"), srv) == RenderPage("/api/windows", "api", False)


def test_basic_auth_guards_every_page_and_a_wrong_one_is_denied() -> None:
    srv = server(basic_auth="bench:correct-horse")
    for path in ("/metrics", "/"):
        for given in ("", basic("bench:wrong"), "Basic !!notbase64", "Bearer x"):
            got = route(req("GET", path, Authorization=given) if given else req("GET", path),
                        srv)
            assert isinstance(got, Denied), (path, given)
            assert got.challenge == ("WWW-Authenticate", 'Basic realm="tfobs"')
        ok = route(req("GET", path, Authorization=basic("bench:correct-horse")), srv)
        assert isinstance(ok, RenderPage)
    # a path that does not exist is not an auth check (nothing to guess there)
    assert isinstance(route(req("GET", "/x"), srv), Reply)


def test_capture_exists_only_when_remote_capture_is_on() -> None:
    got = route(req("POST", "/capture", Authorization="Bearer s3cret"), server())
    assert isinstance(got, Reply) and got.status == 404
    on = server(remote_capture=True, capture_token="s3cret")
    assert route(req("POST", "/capture", Authorization="Bearer s3cret"), on) == Capture(False)
    assert route(req("POST", "/capture?keep=1", Authorization="Bearer s3cret"), on) == Capture(
        True)
    denied = route(req("POST", "/capture", Authorization="Bearer wrong"), on)
    assert isinstance(denied, Denied) and denied.challenge[1] == 'Bearer realm="tfobs"'
    assert isinstance(route(req("POST", "/metrics"), on), Reply)


def test_capture_answers_say_granted_refused_or_unavailable() -> None:
    assert capture_reply(True).status == 202
    refused = capture_reply(False)
    assert refused.status == 429 and ("Retry-After", "10") in refused.headers
    assert capture_reply(None).status == 503
