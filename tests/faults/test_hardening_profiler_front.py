"""The gRPC front on the user's profiler port (tfobs/capture/profiler_server.py) under attack.

The front exists so that the user's own capture works during tfobs's windows; it must never
make the job easier to hurt than TensorFlow's server alone. A training job (a subprocess:
TensorFlow's profiler server cannot be stopped once started) runs tfobs's windows and the
hooked server; this test process attacks the port over loopback: messages over 4 MiB (also
gzip-compressed), calls opened with no message, a call flood, malformed Profile calls.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.prometheus_server import free_port
from tfobs.capture import profiler_server as front

grpc = pytest.importorskip("grpc")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVICE = "/tensorflow.ProfilerService/"

JOB = textwrap.dedent("""
    import json, os, socket, sys, time
    import tensorflow as tf
    import tfobs

    status_path = sys.argv[1]
    rt = tfobs.enable(metrics_port=-1, interval_steps=40, window_steps=20,
                      first_window_step=5, overhead_budget=0.5, window_max_s=5.0)
    import logging
    logging.basicConfig()
    logging.getLogger("tfobs").setLevel(logging.DEBUG)  # the front's reasons land in job.log
    # Ports from the test (below the ephemeral range: a port the OS picks for bind(0) can be
    # held on another loopback address, by a connection or its TIME_WAIT, as the HTTP
    # tests' many-address sprays leave them). Should one be taken anyway, the job tries the
    # next, and job.log says so.
    for attempt, port in enumerate(int(p) for p in sys.argv[2].split(",")):
        tf.profiler.experimental.server.start(port)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            break
        except OSError as exc:
            print("port", port, "does not answer:", exc, file=sys.stderr, flush=True)
    v = tf.Variable(tf.zeros((32, 32)))

    @tf.function
    def step():
        v.assign(tf.tanh(tf.matmul(v + 0.1, v + 0.2)))

    def rss_kb():
        with open("/proc/self/status") as f:
            return {k: int(x.split()[0]) for k, x in (l.split(":", 1) for l in f)
                    if k in ("VmRSS", "VmHWM")}

    i, last = 0, 0.0
    while not os.path.exists(status_path + ".stop"):
        with tfobs.step(i):
            step()
            time.sleep(0.002)
        i += 1
        if time.monotonic() - last > 0.2:
            last = time.monotonic()
            doc = {"port": port, "port_attempts": attempt + 1, "steps": i,
                   "preemptions": rt.slot.preemptions,
                   "windows": dict(rt.health.windows), **rss_kb()}
            with open(status_path + ".tmp", "w") as f:
                json.dump(doc, f)
            os.replace(status_path + ".tmp", status_path)
    tfobs.disable()
""")


class Job:
    def __init__(self, folder: pathlib.Path) -> None:
        self.status_path = folder / "status.json"
        # Run in `folder`: TensorFlow writes a Profile call without a folder to the working
        # directory. This checkout's tfobs is found through PYTHONPATH.
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1",
               "PYTHONPATH": path}
        self.log = folder / "job.log"  # a file, not a pipe: a full pipe would stop the job
        with open(self.log, "w") as log:
            ports = ",".join(str(free_port()) for _ in range(3))
            self.proc = subprocess.Popen([sys.executable, "-c", JOB, str(self.status_path),
                                          ports], env=env, cwd=folder, stderr=log)
        deadline = time.monotonic() + 120
        while not self.status_path.exists():
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the job did not start"
            time.sleep(0.1)
        self.port = self.status()["port"]
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
        except OSError as exc:
            raise AssertionError(f"the job's profiler port does not answer ({exc}):\n"
                                 + self.log.read_text()[-3000:]) from None

    def status(self) -> dict[str, Any]:
        return json.loads(self.status_path.read_text())

    def fresh_status(self) -> dict[str, Any]:
        """A status written after this call (the job writes one every 0.2 s)."""
        steps = self.status()["steps"]
        deadline = time.monotonic() + 30
        while (now := self.status())["steps"] == steps:
            assert self.proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        return now

    def stop(self) -> None:
        (self.status_path.parent / "status.json.stop").touch()
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    j = Job(tmp_path_factory.mktemp("front"))
    yield j
    j.stop()
    assert j.proc.returncode == 0, j.log.read_text()[-3000:]


def channel(job: Job, host: str = "127.0.0.1") -> Any:
    return grpc.insecure_channel(f"{host}:{job.port}", options=[
        ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
        ("grpc.use_local_subchannel_pool", 1)])  # a connection of its own, as another client


def field(number: int, value: int | bytes) -> bytes:
    """One protobuf field on the wire (varint or length-delimited)."""
    def varint(n: int) -> bytes:
        out = b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                return out
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def answered(ch: Any, timeout: float = 10.0) -> bool:
    """A legitimate call through the front (Terminate: TensorFlow answers it at once)."""
    try:
        ch.unary_unary(SERVICE + "Terminate")(field(1, b"no-such-session"), timeout=timeout)
        return True
    except grpc.RpcError:
        return False


@pytest.mark.slow
@pytest.mark.waits
def test_requests_over_4_mib_are_refused_without_the_job_holding_them(job: Job) -> None:
    ch = channel(job)
    assert answered(ch)
    rss0 = job.fresh_status()["VmRSS"]
    codes = []
    for size, compression in ((5 << 20, None), (64 << 20, None), (256 << 20, grpc.Compression.Gzip),
                              (256 << 20, grpc.Compression.Gzip)):
        try:
            ch.unary_unary(SERVICE + "Monitor")(b"\0" * size, timeout=30,
                                                compression=compression)
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as exc:
            codes.append(exc.code())
    # As TensorFlow's own server: "Received message larger than max (... vs. 4194304)".
    assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 4
    after = job.fresh_status()
    assert after["VmRSS"] - rss0 < 50 * 1024, (rss0, after)  # was +750 MB held after
    assert after["VmHWM"] - rss0 < 100 * 1024, (rss0, after)  # peak: was +1,589 MB
    assert answered(ch)
    ch.close()


@pytest.mark.slow
@pytest.mark.waits
def test_calls_opened_with_no_message_hold_no_slot(job: Job) -> None:
    release = threading.Event()

    def never() -> Iterator[bytes]:  # headers sent, then no message until released
        release.wait(60)
        return
        yield b""

    held = []
    channels = [channel(job) for _ in range(4)]
    try:
        for ch in channels:
            for _ in range(16):  # 64 in all, past any slot count
                held.append(ch.stream_unary(SERVICE + "Terminate").future(never(), timeout=60))
        time.sleep(1.0)
        assert not [f for f in held if f.done()]  # still open
        other = channel(job)
        assert [answered(other, timeout=5) for _ in range(10)] == [True] * 10
        other.close()
    finally:
        release.set()
        for ch in channels:
            ch.close()


@pytest.mark.slow
@pytest.mark.waits
def test_a_call_flood_from_one_address_leaves_others_answered(job: Job) -> None:
    stop = threading.Event()
    outcomes: list[str] = []

    def flood() -> None:
        ch = channel(job, "127.0.0.1")
        call = ch.unary_unary(SERVICE + "Terminate")
        while not stop.is_set():
            try:
                call(b"", timeout=5)
                outcomes.append("ok")
            except grpc.RpcError as exc:
                outcomes.append(exc.code().name)
        ch.close()

    threads = [threading.Thread(target=flood) for _ in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        legit = channel(job, "[::1]")  # another source address
        results = []
        for _ in range(10):
            results.append(answered(legit, timeout=5))
            time.sleep(0.1)
        legit.close()
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    elapsed = time.monotonic() - t0
    assert results == [True] * 10
    # The flood was cut at its address's rate (the rest refused, each answered late).
    passed = outcomes.count("ok")
    assert passed <= front.ADDRESS_BURST + front.ADDRESS_RATE * elapsed + 5, (passed, elapsed)
    assert outcomes.count("RESOURCE_EXHAUSTED") > 0


@pytest.mark.slow
@pytest.mark.waits
def test_malformed_profile_calls_do_not_pre_empt_windows(job: Job) -> None:
    ch = channel(job, "[::1]")
    profile = ch.unary_unary(SERVICE + "Profile")
    bogus = [b"", b"\xff" * 40, field(1, 300),  # no folder
             field(1, 0) + field(5, b"/tmp/x"), field(1, 10**12) + field(5, b"/tmp/x"),
             field(5, b"/tmp/x") + b"\x07"]  # wire type 7: not a message
    before = job.fresh_status()
    deadline = time.monotonic() + 3.0
    sent = 0
    while time.monotonic() < deadline:  # 20 a second, as the red team's
        try:
            profile(bogus[sent % len(bogus)], timeout=5)
        except grpc.RpcError:
            pass
        sent += 1
        time.sleep(0.05)
    after = job.fresh_status()
    assert after["steps"] > before["steps"]
    assert after["preemptions"] == before["preemptions"], (before, after)
    ch.close()


def test_only_a_well_formed_capture_request_counts() -> None:
    good = field(1, 2000) + field(2, 1000000) + field(3, b"trace_viewer") + field(
        5, b"/tmp/logs") + field(6, b"2026_11_27")
    assert front._capture_request(good)
    assert front._capture_request(field(5, b"gs://b/l") + field(1, 1))  # order is free
    for bad in (b"", b"\x80", good[:-3], field(1, 2000), field(5, b"/tmp/x"),
                field(1, 0) + field(5, b"/x"), field(1, front.MAX_CAPTURE_MS + 1) + field(5, b"/x"),
                field(1, 2000) + field(5, b""), b"\x00\x01" + good, good + b"\x0f"):
        assert not front._capture_request(bad), bad


def test_address_rates_cut_one_address_not_another() -> None:
    rates = front._AddressRates(rate=10.0, burst=5.0, most=3)
    assert [rates.admit("a", 0.0) for _ in range(7)] == [True] * 5 + [False] * 2
    assert rates.admit("b", 0.0)  # another address has its own bucket
    assert rates.admit("a", 0.1) and not rates.admit("a", 0.1)  # refilled at the rate
    for name in ("c", "d", "e"):
        rates.admit(name, 0.2)
    assert len(rates._buckets) == 3  # bounded: the least recently seen forgotten


def test_addresses_are_read_without_the_port() -> None:
    assert front._address("ipv4:127.0.0.2:5123") == "127.0.0.2"
    assert front._address("ipv6:[::1]:5123") == "[::1]"
    assert front._address("ipv6:%5B::1%5D:5123") == "%5B::1%5D"


def test_the_backend_port_stays_reserved_until_tensorflow_binds_it() -> None:
    import socket

    with front._reserved_port() as port:
        # Any other program (no SO_REUSEPORT, or another user) is refused the port ...
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            with socket.socket(family, socket.SOCK_STREAM) as other:
                with pytest.raises(OSError):
                    other.bind((host, port))
        # ... while gRPC's server in this process (SO_REUSEPORT, as TensorFlow's sets it)
        # binds and listens on it.
        server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(1))
        assert server.add_insecure_port(f"[::]:{port}") == port
        server.start()
        server.stop(0)
