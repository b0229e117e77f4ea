"""CPU the metrics server's serving thread (`tfobs-http`) spends per request, for two source
trees in one run (a change to the server against the code before it).

Each tree is imported in a process of its own (PYTHONPATH) and serves a real
prometheus_client registry on loopback with limits raised out of the way; a client in the same
process sends (1) 20,000 pipelined GETs of a path that does not exist (framing, parsing,
admission, routing and the 404 answer: no rendering), (2) 6,000 connections each sending an
oversized head (refused with 431 and closed) and (3) 6,000 connections closed at once. The
figure is the serving thread's own CPU (/proc/self/task/<tid>/stat) over the requests, best
of 3; the trees run alternately, 3 rounds, and the ratio is second tree / first, best figure
against best figure.

Usage: python benchmarks/http_serving_cost.py BEFORE_TREE AFTER_TREE
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

PIPELINED = 20_000
BIG_HEADS = 6_000


def _thread_cpu_s(name: str) -> float:
    for t in threading.enumerate():
        if t.name == name and t.native_id is not None:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise LookupError(name)


def _pipelined_404s(port: int, n: int) -> None:
    req = b"GET /nothing HTTP/1.1\r\nHost: x\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(n // 50):
            s.sendall(req * 50)
            buf = b""
            while buf.count(b"HTTP/1.1 404") < 50:
                buf += s.recv(65536)


def _oversized_heads(port: int, n: int) -> None:
    head = b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 16384 + b"\r\n"
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as s:
            try:
                s.sendall(head)
                while s.recv(65536):
                    pass
            except OSError:
                pass


def _connect_close(port: int, n: int) -> None:
    for _ in range(n):
        socket.create_connection(("127.0.0.1", port)).close()


def measure() -> dict[str, float]:
    """In this process: microseconds of serving-thread CPU per request, per workload."""
    from prometheus_client import CollectorRegistry, Counter

    from tfobs.export.http_server import MetricsServer
    try:
        from tfobs.export.http_limits import Limits
    except ImportError:  # the tree before the server was split
        from tfobs.export.http_server import Limits  # type: ignore[attr-defined,no-redef]

    reg = CollectorRegistry()
    Counter("demo_total", "a demo counter", registry=reg).inc()
    limits = Limits(requests_per_s=1e6, burst=10**6, strike_limit=10**9,
                    network_strike_limit=10**9, accepts_per_s=1e6, accept_burst=10**6,
                    max_requests_per_connection=10**9)
    srv = MetricsServer(reg, bind="127.0.0.1", port=0, limits=limits)
    srv.start()
    time.sleep(0.2)
    out: dict[str, float] = {}
    try:
        for name, fn, n in (("pipelined_404", _pipelined_404s, PIPELINED),
                            ("oversized_head_431", _oversized_heads, BIG_HEADS),
                            ("connect_close", _connect_close, BIG_HEADS)):
            c0 = _thread_cpu_s("tfobs-http")
            fn(srv.port, n)
            out[name] = (_thread_cpu_s("tfobs-http") - c0) / n * 1e6
    finally:
        srv.shutdown()
    return out


def main() -> None:
    if sys.argv[1:2] == ["--measure"]:
        print(json.dumps(measure()))
        return
    trees = sys.argv[1:3]
    if len(trees) != 2:
        sys.exit(__doc__)
    best: list[dict[str, float]] = [{}, {}]
    for _ in range(3):
        for i, tree in enumerate(trees):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            got: dict[str, Any] = json.loads(subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--measure"], env=env,
                check=True, capture_output=True, text=True).stdout)
            for k, v in got.items():
                best[i][k] = min(best[i].get(k, v), v)
    print("| workload | before (us/request) | after (us/request) | after / before |")
    print("|---|---|---|---|")
    for k in best[0]:
        print(f"| {k} | {best[0][k]:.1f} | {best[1][k]:.1f} | {best[1][k] / best[0][k]:.2f} |")


if __name__ == "__main__":
    main()
