"""Training speed under attack on the metrics server (issue 13), auth off and on.

A TensorFlow training loop (a small MLP, thousands of steps/s) runs with tfobs enabled on
127.0.0.1 and a 1,024-fd soft limit. For each attack, a separate attacker process (niced, so
that its own client-side CPU is not what is measured) alternates PHASE_S seconds of attack
and PHASE_S seconds of quiet (closing everything it holds) for ATTACK_S seconds in all, while
a legitimate scraper in that process scrapes every 0.5 s with a 5 s timeout. The ratio of
training steps/s in the attack phases to the quiet phases, interleaved in one run, holds on a
machine whose other load drifts; the "none" row (no attack in either phase) is its noise
floor. Also printed: steps/s in the BEFORE_S seconds before the attacker started, the training
process's threads, open fds and RSS (before, peak during, after), whether the user's own
open() hit EMFILE, the legitimate scrapes answered, and the share of a core tfobs's serving
thread used in quiet and attack phases (what the server itself costs, apart from the kernel's
and the attacker's own work on the same cores).

The grpc_* attacks go to the profiler port instead (TensorFlow's profiler server, started in
the training process, which tfobs fronts): requests of 256 MiB and gzip-compressed 512 MiB of
zeros, 64 calls opened with no message, a 16-thread call flood, 20 malformed Profile calls a
second. A legitimate gRPC client (another source address, [::1]) calls every 0.5 s there as
well; "preempted" is how many of tfobs's windows gave way to a Profile call. `--grpc-control`
runs the same attacks against TensorFlow's server alone (started before tfobs, so not
fronted): the job's figures without tfobs's front.

`--pin`: the training process (and tfobs in it) on the first CPU, the attacker and the
legitimate scraper on the second, as a red team with its own machine would be: the ratio then
shows what the attack costs the job through tfobs, not the attacker's own client-side CPU
taking the job's core (on 2 shared cores a niced attacker still takes a share).

Usage: python benchmarks/attacks.py [--attack-s 8] [--only NAME,...] [--grpc-control] [--pin]
       python benchmarks/attacks.py --attacker NAME --port P --seconds S [--auth user:pw]
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from typing import Any

# "none" starts the attacker process with only the legitimate scraper: its ratio is the noise
# floor of this machine (two quiet periods compared the same way).
ATTACKS = ("none", "pipeline_noread", "pipeline_read", "one_conn_flood", "idle_conns", "slowloris",
           "big_headers", "conn_churn", "wrong_auth")
# From 249 loopback addresses of one /24 (spray_networks: of 16): what the per-address
# share does not bind.
SPRAY_ATTACKS = ("spray_noread", "spray_churn", "spray_big_headers", "spray_slowloris",
                 "spray_networks")
TLS_ATTACKS = ("tls_none", "tls_handshakes")  # a third pass: auth on, over TLS
GRPC_ATTACKS = ("grpc_none", "grpc_big", "grpc_half_open", "grpc_flood", "grpc_bogus_profile")
PROFILER = "/tensorflow.ProfilerService/"
PASSWORD = "bench:correct-horse"
BEFORE_S = 4.0
REST_S = 2.0
PHASE_S = 2.0
# The attacker connects from other loopback addresses, as another host would: each attack
# from a /24 of its own (127.0.N.2, or 127.0.N.1-249 for a spray; N from --net), so one
# attack's blocks do not carry over to the next. The legitimate scraper (its own process,
# not niced) connects from 127.0.0.1.
ATTACKER_ADDR = ("127.0.0.2", 0)
SETTLE_S = 0.3  # skipped at the start of each phase (sockets opening or closing)


def _spray_addresses(net: int, networks: int = 1) -> list[str]:
    """249 addresses of 127.0.NET.0/24; with `networks`, 249 of each of that many /24s
    (127.NET.0.0/24, 127.NET.1.0/24, ...), the addresses interleaved across them."""
    if networks == 1:
        return [f"127.0.{net}.{i + 1}" for i in range(249)]
    return [f"127.{net}.{j}.{i + 1}" for i in range(249) for j in range(networks)]


# -- attacker process ------------------------------------------------------------------------


def _connect(port: int) -> socket.socket | None:
    """A connection, or None; a blocked address's SYN is dropped (a firewall's drop), so
    a short timeout keeps the phases on time."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=0.25,
                                     source_address=ATTACKER_ADDR)
        s.setblocking(False)
        return s
    except OSError:
        return None


def _send_some(s: socket.socket, data: bytes) -> bool:
    try:
        s.send(data)
        return True
    except (BlockingIOError, InterruptedError):
        return True
    except OSError:
        return False


def attacker(name: str, port: int, seconds: float, auth: str, prof_port: int = 0,
             tls: bool = False, net: int = 0) -> None:
    global ATTACKER_ADDR
    if name == "legit":
        legit_scraper(port, seconds, auth, prof_port, tls)
        return
    ATTACKER_ADDR = (f"127.0.{net}.2", 0)
    os.nice(19)
    try:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError):
        pass
    stop = time.monotonic() + seconds
    active = threading.Event()  # an attack phase (not a quiet one)
    stats: dict[str, Any] = {"attack": name, "sent": 0, "answers": 0, "phases": []}
    bad = "Basic " + base64.b64encode(b"bench:guess").decode()

    req = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + (
        b"Authorization: " + bad.encode() + b"\r\n" if auth else b"") + b"\r\n"
    socks: list[socket.socket] = []
    lock = threading.Lock()

    def bump(key: str, n: int = 1) -> None:
        with lock:
            stats[key] = stats.get(key, 0) + n

    def client_loop(request: bytes, depth: int) -> None:
        """Connect, send `depth` requests, read their answers back, close; again."""
        while time.monotonic() < stop:
            if not active.wait(0.05):
                continue
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=ATTACKER_ADDR)
                s.sendall(request * depth)
                bump("sent", depth)
                got = 0
                while got < depth and time.monotonic() < stop:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    got += chunk.count(b"HTTP/1.1 ")
                bump("answers", got)
                s.close()
            except OSError:
                time.sleep(0.01)

    def churn_loop() -> None:
        while time.monotonic() < stop:
            if not active.wait(0.05):
                continue
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2,
                                         source_address=ATTACKER_ADDR).close()
                bump("sent")
            except OSError:
                time.sleep(0.01)

    workers: list[threading.Thread] = []
    guess = b"GET /metrics HTTP/1.1\r\nAuthorization: " + bad.encode() + b"\r\n\r\n"
    if name == "pipeline_read":
        workers += [threading.Thread(target=client_loop, args=(req, 50), daemon=True)
                    for _ in range(4)]
    elif name == "one_conn_flood":
        workers.append(threading.Thread(target=client_loop, args=(req, 1), daemon=True))
    elif name == "wrong_auth":
        workers += [threading.Thread(target=client_loop, args=(guess, 1), daemon=True)
                    for _ in range(64)]
    elif name == "conn_churn":
        workers += [threading.Thread(target=churn_loop, daemon=True) for _ in range(4)]
    elif name.startswith("grpc_"):
        workers += _grpc_workers(name, prof_port, stop, active, bump)
    elif name in SPRAY_ATTACKS or name == "tls_handshakes":
        workers += [threading.Thread(target=_spray_loop, args=(
            name, port, _spray_addresses(net, 16 if name == "spray_networks" else 1)[k::3],
            stop, active, bump, req), daemon=True)
            for k in range(3)]
    print("started", flush=True)
    for w in workers:
        w.start()
    big = b"GET / HTTP/1.1\r\n" + (b"X-Big: " + b"a" * 65536 + b"\r\n") * 99
    trickle_at = 0.0
    phase_end = 0.0
    on = False
    while time.monotonic() < stop:
        now = time.monotonic()
        if now >= phase_end:
            if stats["phases"]:
                stats["phases"][-1][1] = now
            on = not on
            phase_end = min(now + PHASE_S, stop)
            stats["phases"].append([now, phase_end, on])
            if on:
                active.set()
            else:
                active.clear()
                for s in socks:
                    s.close()
                socks.clear()
        if not on:
            time.sleep(0.05)
            continue
        if name == "pipeline_noread" and len(socks) < 100:
            for _ in range(100 - len(socks)):
                s = _connect(port)
                if s is None:
                    break
                _send_some(s, req * 200)
                stats["sent"] += 200
                socks.append(s)
        elif name == "idle_conns" and len(socks) < 1100:
            for _ in range(1100 - len(socks)):
                s = _connect(port)
                if s is None:
                    break
                socks.append(s)
        elif name == "slowloris" and time.monotonic() >= trickle_at:
            trickle_at = time.monotonic() + 1.0
            while len(socks) < 1300:
                s = _connect(port)
                if s is None:
                    break
                socks.append(s)
            alive = []
            for s in socks:
                if _send_some(s, b"G"):
                    alive.append(s)
                    stats["sent"] += 1
                else:
                    s.close()
            socks[:] = alive
        elif name == "big_headers":
            while len(socks) < 100:
                s = _connect(port)
                if s is None:
                    break
                _send_some(s, big)
                stats["sent"] += 1
                socks.append(s)
        time.sleep(0.05)
        if name in ("idle_conns", "big_headers", "pipeline_noread"):
            # The server closes what it evicts: notice and reconnect, as an attacker would.
            alive = []
            for s in socks:
                try:
                    if s.recv(65536) == b"":
                        s.close()
                        continue
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    s.close()
                    continue
                alive.append(s)
            socks[:] = alive
    stats["held_at_end"] = len(socks)
    for w in workers:
        w.join(6)
    print("RESULT " + json.dumps(stats), flush=True)


def _spray_loop(name: str, port: int, addresses: list[str], stop: float,
                active: threading.Event, bump: Any, req: bytes) -> None:
    """One third of the spray: from each address in turn, a connection that holds 200
    pipelined requests unread (spray_noread), connects and closes (spray_churn), sends a
    64 KiB head (spray_big_headers; spray_networks from 3,984 addresses of 16 /24s),
    trickles a head a byte per pass (spray_slowloris) or completes a TLS handshake and asks
    nothing."""
    import ssl

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
    payload = {"spray_noread": req * 200,
               "spray_big_headers": b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 65536 + b"\r\n",
               "spray_slowloris": b"GET /metrics HTTP/1.1\r\nX-Slow: a"}
    payload["spray_networks"] = payload["spray_big_headers"]  # 16 /24s: 16 network blocks
    held: dict[str, socket.socket] = {}
    while time.monotonic() < stop:
        if not active.wait(0.05):
            for s in held.values():
                s.close()
            held.clear()
            continue
        for ip in addresses:
            if not active.is_set():
                break
            s = held.get(ip)
            if s is not None:
                try:
                    if s.recv(65536) != b"":
                        continue  # still open: an answer it does not read
                except (BlockingIOError, InterruptedError):
                    if name == "spray_slowloris":
                        _send_some(s, b"a")  # one more byte of the head
                    continue
                except OSError:
                    pass
                s.close()
                del held[ip]
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2,
                                             source_address=(ip, 0))
            except OSError:
                time.sleep(0.01)
                continue
            bump("sent")
            if name == "spray_churn":
                s.close()
            elif name == "tls_handshakes":
                try:
                    tls.wrap_socket(s).close()  # the handshake done, nothing asked
                    bump("answers")
                except (OSError, ssl.SSLError):
                    s.close()
            else:
                s.setblocking(False)
                _send_some(s, payload[name])
                held[ip] = s
        time.sleep(0.01)
    for s in held.values():
        s.close()


def _grpc_channel(host: str, port: int) -> Any:
    import grpc

    return grpc.insecure_channel(f"{host}:{port}", options=[
        ("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1),
        ("grpc.use_local_subchannel_pool", 1)])  # a connection per channel, as per client


def _grpc_workers(name: str, port: int, stop: float, active: threading.Event,
                  bump: Any) -> list[threading.Thread]:
    """The gRPC attacks on the profiler port, each worker acting only in attack phases."""
    import grpc

    def calls(method: str, body: bytes, compression: Any = None, pause: float = 0.0) -> None:
        ch = _grpc_channel("127.0.0.1", port)
        call = ch.unary_unary(PROFILER + method)
        while time.monotonic() < stop:
            if not active.wait(0.05):
                continue
            try:
                call(body, timeout=10, compression=compression)
                bump("answers")
            except grpc.RpcError as exc:
                bump(exc.code().name)
            bump("sent")
            time.sleep(pause)
        ch.close()

    def half_open() -> None:
        """64 calls opened with headers and no message, held through each attack phase."""
        while time.monotonic() < stop:
            if not active.wait(0.05):
                continue
            channels = [_grpc_channel("127.0.0.1", port) for _ in range(4)]
            futures = [ch.stream_unary(PROFILER + "Terminate").future(
                _until_quiet(active), timeout=30) for ch in channels for _ in range(16)]
            bump("sent", len(futures))
            while active.is_set() and time.monotonic() < stop:
                time.sleep(0.05)
            for f in futures:
                f.cancel()
            for ch in channels:
                ch.close()

    if name == "grpc_big":
        plain, zipped = b"\0" * (256 << 20), b"\0" * (512 << 20)
        return [threading.Thread(target=calls, args=("Monitor", body, comp), daemon=True)
                for body, comp in ((plain, None), (plain, None),
                                   (zipped, grpc.Compression.Gzip),
                                   (zipped, grpc.Compression.Gzip))]
    if name == "grpc_half_open":
        return [threading.Thread(target=half_open, daemon=True)]
    if name == "grpc_flood":
        return [threading.Thread(target=calls, args=("Terminate", b""), daemon=True)
                for _ in range(16)]
    if name == "grpc_bogus_profile":  # 20 a second: garbage, no duration, no folder
        bogus = b"\xff" * 40 + b"\x08\x90\x03"
        return [threading.Thread(target=calls, args=("Profile", bogus, None, 0.05),
                                 daemon=True)]
    return []  # grpc_none: the legitimate clients only


def _until_quiet(active: threading.Event) -> Any:
    """A request stream that sends nothing until the attack phase ends."""
    while active.is_set():
        time.sleep(0.05)
    return
    yield b""


def _legit_grpc(port: int, stop: float, out: list[float | None]) -> None:
    """A legitimate gRPC client from another address ([::1]): a call every 0.5 s."""
    import grpc

    ch = _grpc_channel("[::1]", port)
    call = ch.unary_unary(PROFILER + "Terminate")
    while time.monotonic() < stop:
        t0 = time.monotonic()
        try:
            call(b"\x0a\x01x", timeout=5)
            out.append(time.monotonic() - t0)
        except grpc.RpcError:
            out.append(None)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
    ch.close()


def legit_scraper(port: int, seconds: float, auth: str, prof_port: int = 0,
                  tls: bool = False) -> None:
    """A Prometheus-like client: one scrape every 0.5 s, 5 s timeout, the right password
    (and with `prof_port`, a gRPC client calling the profiler port as often)."""
    stop = time.monotonic() + seconds
    grpc_calls: list[float | None] = []
    caller = None
    if prof_port:
        caller = threading.Thread(target=_legit_grpc, args=(prof_port, stop, grpc_calls),
                                  daemon=True)
        caller.start()
    good = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()} if auth else {}
    legit: list[float | None] = []
    print("started", flush=True)
    while time.monotonic() < stop:
        t0 = time.monotonic()
        try:
            conn = http.client.HTTPSConnection(
                "127.0.0.1", port, timeout=5, context=_unverified()) if tls else \
                http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/metrics", headers=good)
            ok = conn.getresponse().status == 200
            conn.close()
            legit.append(time.monotonic() - t0 if ok else None)
        except OSError:
            legit.append(None)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - t0)))
    answered = [x for x in legit if x is not None]
    doc: dict[str, Any] = {"tried": len(legit), "answered": len(answered),
                           "max_s": round(max(answered), 3) if answered else None}
    if caller is not None:
        caller.join(10)
        ok = [x for x in grpc_calls if x is not None]
        doc["grpc"] = {"tried": len(grpc_calls), "answered": len(ok),
                       "max_s": round(max(ok), 3) if ok else None}
    print("RESULT " + json.dumps(doc), flush=True)


def _unverified() -> Any:
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def _self_signed(folder: str) -> tuple[str, str]:
    """A throwaway certificate and key for the TLS pass (the cryptography package)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


# -- training process ------------------------------------------------------------------------


def _proc_state() -> tuple[int, int, float]:
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return threading.active_count(), fds, rss


def _server_cpu_s(prefix: str = "tfobs-http") -> float:
    """CPU seconds of tfobs's serving threads named `prefix...` (0 when none runs)."""
    total = 0.0
    for t in threading.enumerate():
        if t.name.startswith(prefix) and t.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
            except (OSError, ProcessLookupError):
                pass  # the thread ended between enumerate() and the clock read
    return total


def _phase_share(samples: list[tuple[float, float]], phases: list[Any], on: bool) -> float:
    """Share of a core the serving thread used in the attack (or quiet) phases."""
    used = span = 0.0
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        for p0, p1, is_on in phases:
            if is_on == on and p0 + SETTLE_S <= t0 and t1 <= p1:
                used += c1 - c0
                span += t1 - t0
    return used / span if span else 0.0


def _pinned_to(cpu: int) -> Any:
    """A preexec_fn that moves the child to `cpu` (after fork, before exec)."""
    return lambda: os.sched_setaffinity(0, {cpu})


def run_all(attack_s: float, only: list[str], grpc_control: bool = False,
            pin: bool = False) -> None:
    if pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            sys.exit("--pin needs two CPUs: one for the job, one for the attacker")
        os.sched_setaffinity(0, {cpus[0]})  # before TensorFlow sizes its thread pools
        child_cpu: Any = _pinned_to(cpus[1])
    else:
        child_cpu = None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    import tensorflow as tf

    import tfobs

    model = tf.keras.Sequential([tf.keras.Input((32,)), tf.keras.layers.Dense(64, "relu"),
                                 tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.01)
    x, y = tf.random.normal((64, 32)), tf.random.normal((64, 1))

    @tf.function
    def train_step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables, strict=True))
        return loss

    prof_port = 0
    if any(a.startswith("grpc_") for a in only or GRPC_ATTACKS):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            prof_port = s.getsockname()[1]
        if grpc_control:  # before tfobs: TensorFlow's own server, no front
            tf.profiler.experimental.server.start(prof_port)
    import tempfile

    cert, key = _self_signed(tempfile.mkdtemp(prefix="tfobs-bench-"))
    all_results: list[dict[str, Any]] = []
    for pass_no, (auth, tls) in enumerate((("", False), (PASSWORD, False), (PASSWORD, True))):
        tls_files = {"metrics_tls_cert": cert, "metrics_tls_key": key} if tls else {}
        rt = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", nvml=False,
                          metrics_basic_auth=auth, **tls_files)
        assert rt is not None and rt.metrics_port > 0
        port = rt.metrics_port
        if prof_port and not grpc_control and not auth:
            tf.profiler.experimental.server.start(prof_port)  # fronted by tfobs
        # The profiler port's attacks once, with auth on (they do not touch the metrics port).
        attacks = [a for a in (TLS_ATTACKS if tls else ATTACKS + SPRAY_ATTACKS + (
                   GRPC_ATTACKS if auth else ()))
                   if (not only or a in only) and not (grpc_control and a[:5] != "grpc_")]
        stamps: list[float] = []
        done = threading.Event()
        results: list[dict[str, Any]] = []

        def controller(port: int = port, auth: str = auth, stamps: list[float] = stamps,
                       done: threading.Event = done,
                       results: list[dict[str, Any]] = results, rt: Any = rt,
                       attacks: list[str] = attacks, tls: bool = tls,
                       pass_no: int = pass_no) -> None:
            time.sleep(3.0)  # warm-up: first window, tracing compiled
            for index, name in enumerate(attacks):
                net = 100 + 50 * pass_no + index  # this attack's own /24
                if name == "wrong_auth" and not auth:
                    continue
                on_grpc = name.startswith("grpc_")
                server_cpu = (lambda: _server_cpu_s("tfobs-prof")) if on_grpc else _server_cpu_s
                slot0 = (rt.slot.preemptions, rt.health.windows.get("captured", 0))
                time.sleep(BEFORE_S)
                threads0, fds0, rss0 = _proc_state()
                scraper = subprocess.Popen(
                    [sys.executable, __file__, "--attacker", "legit", "--port", str(port),
                     "--seconds", str(attack_s), "--auth", auth,
                     "--prof-port", str(prof_port if on_grpc else 0)] + (["--tls"] if tls else []),
                    stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(__file__),
                    preexec_fn=child_cpu)
                proc = subprocess.Popen(
                    [sys.executable, __file__, "--attacker", name, "--port", str(port),
                     "--seconds", str(attack_s), "--auth", auth, "--prof-port", str(prof_port),
                     "--net", str(net)] + (["--tls"] if tls else []),
                    stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(__file__),
                    preexec_fn=child_cpu)
                assert proc.stdout is not None and scraper.stdout is not None
                proc.stdout.readline()  # "started"
                scraper.stdout.readline()
                t_start = time.monotonic()
                peak = [threads0, fds0, rss0]
                emfile = False
                out: list[str] = []

                def read_rest(p: subprocess.Popen = proc, out: list[str] = out) -> None:
                    out.extend(p.stdout.read().splitlines())  # type: ignore[union-attr]

                reader = threading.Thread(target=read_rest, daemon=True)
                reader.start()
                cpu_samples: list[tuple[float, float]] = []
                while reader.is_alive():
                    cpu_samples.append((time.monotonic(), server_cpu()))
                    state = _proc_state()
                    peak = [max(a, b) for a, b in zip(peak, state, strict=True)]
                    try:  # the user's own files must still open
                        files = [open(os.devnull) for _ in range(20)]
                        for f in files:
                            f.close()
                    except OSError:
                        emfile = True
                    reader.join(0.25)
                proc.wait(10)
                result_line = next((x for x in out if x.startswith("RESULT ")), "RESULT {}")
                legit_out = scraper.communicate(timeout=15)[0].strip().splitlines()
                legit_line = legit_out[-1] if legit_out else ""  # "": the scraper died
                legit_result = json.loads(legit_line[7:]) if legit_line.startswith(
                    "RESULT ") else {}
                time.sleep(REST_S)
                after = _proc_state()
                before_n = sum(1 for t in stamps if t_start - BEFORE_S <= t < t_start)
                before_rate = before_n / BEFORE_S
                attack = json.loads(result_line[7:])
                rates: dict[bool, list[float]] = {True: [0.0, 0.0], False: [0.0, 0.0]}
                for p0, p1, on in attack.get("phases", []):
                    if p1 - p0 - SETTLE_S < 0.5:
                        continue
                    rates[on][0] += sum(1 for t in stamps if p0 + SETTLE_S <= t < p1)
                    rates[on][1] += p1 - p0 - SETTLE_S
                on_rate = rates[True][0] / max(rates[True][1], 1e-3)
                off_rate = rates[False][0] / max(rates[False][1], 1e-3)
                results.append({
                    "attack": name, "auth": ("on+TLS" if tls else "on") if auth else "off",
                    "steps_s_before": round(before_rate, 1),
                    "steps_s_quiet": round(off_rate, 1),
                    "steps_s_attack": round(on_rate, 1),
                    "ratio": round(on_rate / off_rate, 3) if off_rate else None,
                    "threads": [threads0, peak[0], after[0]],
                    "fds": [fds0, peak[1], after[1]],
                    "rss_mb": [round(rss0), round(peak[2]), round(after[2])],
                    "user_open_emfile": emfile,
                    "server_cpu_pct": [
                        round(100 * _phase_share(cpu_samples, attack.get("phases", []), on), 1)
                        for on in (False, True)],
                    "attacker": {k: v for k, v in attack.items() if k != "phases"},
                    "legit": legit_result,
                    "windows_preempted_captured": [rt.slot.preemptions - slot0[0],
                                                   rt.health.windows.get("captured", 0)
                                                   - slot0[1]],
                    "grpc_front": not grpc_control,
                })
                print(json.dumps(results[-1]), flush=True)
            done.set()

        ctl = threading.Thread(target=controller, daemon=True)
        ctl.start()
        i = 0
        while not done.is_set():
            with tfobs.step(i):
                train_step()
            stamps.append(time.monotonic())
            i += 1
        tfobs.disable()
        _summary(results)
        all_results += results
    if prof_port:
        _grpc_summary(all_results)


def _summary(results: list[dict[str, Any]]) -> None:
    print("| attack | auth | steps/s quiet phases | attack phases | ratio | serving thread "
          "CPU % quiet/attack | threads b/peak/after | fds b/peak/after | RSS MB b/peak/after "
          "| legit scrapes answered (max s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        legit = r["legit"]
        print(f"| {r['attack']} | {r['auth']} | {r['steps_s_quiet']} | "
              f"{r['steps_s_attack']} | {r['ratio']} | "
              f"{'/'.join(map(str, r['server_cpu_pct']))} | {'/'.join(map(str, r['threads']))} | "
              f"{'/'.join(map(str, r['fds']))} | {'/'.join(map(str, r['rss_mb']))} | "
              f"{legit.get('answered')}/{legit.get('tried')} ({legit.get('max_s')}) |",
              flush=True)


def _grpc_summary(results: list[dict[str, Any]]) -> None:
    print("| attack (profiler port) | tfobs front | steps/s quiet | attack | ratio | front CPU %"
          " quiet/attack | RSS MB b/peak/after | legit gRPC calls answered (max s) | legit "
          "scrapes | windows pre-empted/captured |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if not r["attack"].startswith("grpc_"):
            continue
        g, legit = r["legit"].get("grpc", {}), r["legit"]
        print(f"| {r['attack']} | {'yes' if r['grpc_front'] else 'no'} | {r['steps_s_quiet']} "
              f"| {r['steps_s_attack']} | {r['ratio']} | "
              f"{'/'.join(map(str, r['server_cpu_pct']))} | {'/'.join(map(str, r['rss_mb']))} | "
              f"{g.get('answered')}/{g.get('tried')} ({g.get('max_s')}) | "
              f"{legit.get('answered')}/{legit.get('tried')} | "
              f"{'/'.join(map(str, r['windows_preempted_captured']))} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attack-s", type=float, default=16.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--attacker", default="")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--auth", default="")
    ap.add_argument("--prof-port", type=int, default=0)
    ap.add_argument("--net", type=int, default=0, help="(attacker) from 127.0.NET.0/24")
    ap.add_argument("--tls", action="store_true", help="(attacker) the server speaks HTTPS")
    ap.add_argument("--grpc-control", action="store_true",
                    help="the grpc_* attacks against TensorFlow's server alone (no front)")
    ap.add_argument("--pin", action="store_true",
                    help="the job on the first CPU, the attacker and scraper on the second")
    args = ap.parse_args()
    if args.attacker:
        attacker(args.attacker, args.port, args.seconds, args.auth, args.prof_port, args.tls,
                 args.net)
    else:
        run_all(args.attack_s, [x for x in args.only.split(",") if x], args.grpc_control,
                args.pin)


if __name__ == "__main__":
    main()
