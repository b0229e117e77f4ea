"""HTTP/1.1 framing of the metrics server without sockets: bytes fed to `RequestReader` give
requests, refusals or nothing yet; `response()` gives the bytes sent back."""

from __future__ import annotations

import pytest

from tfobs.export.http_wire import (
    MAX_BODY,
    Refusal,
    Request,
    RequestReader,
    head_end,
    parse_head,
    response,
)


def reader(max_head_bytes: int = 8192, max_headers: int = 64) -> RequestReader:
    return RequestReader(max_head_bytes, max_headers)


def read_one(data: bytes, **kw: int) -> Request | Refusal | None:
    r = reader(**kw)
    r.feed(data)
    return r.next()


def test_a_well_formed_get_is_parsed_with_lower_cased_headers() -> None:
    got = read_one(b"GET /metrics?name[]=a HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
    assert isinstance(got, Request)
    assert (got.method, got.path, got.route, got.version) == (
        "GET", "/metrics?name[]=a", "/metrics", "HTTP/1.1")
    assert got.headers == {"host": "x", "accept-encoding": "gzip"}
    assert got.keep_alive and got.body_len == 0


def test_a_head_ended_by_bare_lf_is_accepted() -> None:
    got = read_one(b"GET / HTTP/1.1\nHost: x\n\n")
    assert isinstance(got, Request) and got.headers == {"host": "x"}
    # "...\r\n\n": the blank line is the bare LF; the head keeps its CR (dropped when parsed)
    assert head_end(b"GET / HTTP/1.1\r\n\nrest") == (15, 2)
    assert head_end(b"GET / HTTP/1.1\r\n\r\n") == (14, 4)
    assert head_end(b"GET / HTTP/1.1\r\n") == (-1, 0)


def test_http_1_0_and_connection_close_do_not_keep_the_connection() -> None:
    old = read_one(b"GET / HTTP/1.0\r\n\r\n")
    close = read_one(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n")
    assert isinstance(old, Request) and not old.keep_alive
    assert isinstance(close, Request) and not close.keep_alive


def test_partial_bytes_give_nothing_until_the_head_and_body_are_whole() -> None:
    r = reader()
    data = b"POST /capture HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
    for byte in data[:-1]:
        r.feed(bytes([byte]))
        assert r.next() is None
    r.feed(data[-1:])
    got = r.next()
    assert isinstance(got, Request) and got.method == "POST" and got.body_len == 5
    assert r.next() is None and not r.buf  # the body was taken with the request


def test_pipelined_requests_come_out_one_at_a_time_in_order() -> None:
    r = reader()
    r.feed(b"GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\n\r\nGET /c HTTP/1.1\r\n")
    first, second = r.next(), r.next()
    assert isinstance(first, Request) and (first.method, first.path) == ("GET", "/a")
    # the empty line before the second request is skipped (RFC 9112)
    assert isinstance(second, Request) and (second.method, second.path) == ("HEAD", "/b")
    assert r.next() is None  # the third is not whole yet
    r.feed(b"\r\n")
    third = r.next()
    assert isinstance(third, Request) and third.path == "/c"


def test_room_bounds_what_is_read_to_one_head_and_one_body() -> None:
    r = reader(max_head_bytes=100)
    assert r.room == 100 + MAX_BODY
    r.feed(b"G" * 60)
    assert r.room == 40 + MAX_BODY


@pytest.mark.parametrize("size", [100, 150])
def test_an_oversized_head_is_refused_with_431_before_its_end(size: int) -> None:
    got = read_one(b"GET / HTTP/1.1\r\nX: " + b"a" * size, max_head_bytes=100)
    assert got == Refusal(431, "request head too large")


def test_a_head_whose_blank_line_ends_past_the_limit_is_refused() -> None:
    head = b"GET / HTTP/1.1\r\nX: " + b"a" * 77 + b"\r\n\r\n"  # 100 bytes, blank line included
    assert isinstance(read_one(head, max_head_bytes=100), Request)
    longer = head.replace(b"a\r", b"aa\r")
    assert read_one(longer, max_head_bytes=100) == Refusal(431, "request head too large")


def test_too_many_header_lines_get_431() -> None:
    head = b"GET / HTTP/1.1\r\n" + b"".join(b"X%d: 1\r\n" % i for i in range(5)) + b"\r\n"
    assert isinstance(read_one(head, max_headers=5), Request)
    assert read_one(head, max_headers=4) == Refusal(431, "too many header lines")


@pytest.mark.parametrize("head, status", [
    (b"GET /\r\n\r\n", 400),  # no version
    (b"GET / HTTP/2.0\r\n\r\n", 400),  # not HTTP/1.x
    (b"GET  / HTTP/1.1\r\n\r\n", 400),  # two spaces: four parts
    (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX : 1\r\n\r\n", 400),  # space before the colon
    (b"GET / HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", 400),  # obsolete line folding
    (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 400),  # a bare CR
    (b"GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400),  # NUL
    (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),  # repeated Host
    (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: \xd9\xa3\r\n\r\n", 400),  # not ASCII digits
    (b"POST / HTTP/1.1\r\nContent-Length: 4097\r\n\r\n", 413),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
])
def test_malformed_or_ambiguous_heads_are_refused(head: bytes, status: int) -> None:
    got = read_one(head)
    assert isinstance(got, Refusal) and got.status == status, got


def test_a_refusal_drops_everything_read_after_it() -> None:
    r = reader()
    r.feed(b"GET / HTTP/1.1\r\nX : 1\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n")
    assert isinstance(r.next(), Refusal)
    assert not r.buf and r.next() is None


def test_bytes_that_start_no_method_are_refused_at_once() -> None:
    assert read_one(b"\x16\x03\x01\x02\x00") == Refusal(400, "not an HTTP request",
                                                          tls_hello=True)
    assert read_one(b"get / HTTP/1.1\r\n\r\n") == Refusal(400, "not an HTTP request")


def test_repeated_headers_other_than_framing_ones_are_joined() -> None:
    got = parse_head(b"GET / HTTP/1.1\r\nAccept: a\r\naccept:\tb ", 64)
    assert isinstance(got, Request) and got.headers["accept"] == "a, b"


def test_methods_are_passed_on_for_the_routes_to_judge() -> None:
    for method in ("GET", "HEAD", "POST", "DELETE", "OPTIONS"):
        got = read_one(method.encode() + b" / HTTP/1.1\r\n\r\n")
        assert isinstance(got, Request) and got.method == method


def test_a_response_carries_its_length_and_head_leaves_the_body_out() -> None:
    full = response(200, "text/plain", b"hello", (("Age", "3"),))
    head = response(200, "text/plain", b"hello", (("Age", "3"),), head_only=True)
    assert full == head + b"hello"
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
    assert b"Content-Length: 5\r\n" in head and b"Age: 3\r\n" in head
    assert b"Connection: close" not in head


def test_a_closing_response_says_so() -> None:
    got = response(431, "text/plain", b"x\n", close=True)
    assert got.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"\r\nConnection: close\r\n\r\n" in got
