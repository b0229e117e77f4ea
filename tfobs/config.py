"""One `Config` for tfobs: explicit argument > `TFOBS_<NAME>` environment variable > default.

A bad argument raises `ConfigError` naming the option and what is allowed (the caller can fix
the code); a bad environment variable warns, naming itself, and only it falls back to its
default (a typo in a pod spec must not kill a training job). A security setting from the
environment that cannot be honoured (malformed basic auth, a TLS certificate without its key or
unreadable, a bad bind address, remote capture without a token) never falls back to an open
server: the metrics server stays off with one error line and training goes on. Secrets never
appear in a message. All `TFOBS_*` names live here, with one line of help each: the README's
options table is generated from `OPTIONS`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfobs.errors import ConfigError

_log = logging.getLogger("tfobs")

MIB = 1024 * 1024
ENV_PREFIX = "TFOBS_"
# Environment variables that carry a process's rank on its host (torchrun/Horovod/MPI/Slurm).
LOCAL_RANK_VARS: tuple[str, ...] = (
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "SLURM_LOCALID",
)
MAX_LOCAL_RANK_DIGITS = 5
MAX_LABEL_CHARS = 128  # tf_job / tf_task: a label value is sent with every series
MAX_SECONDS = 3600.0  # window_max_s / nvml_interval_s: finite, and at most an hour
SECRET_OPTIONS = frozenset({"metrics_basic_auth", "remote_capture_token"})
# Options whose bad value must not widen what the server exposes: no server instead.
SECURITY_OPTIONS = frozenset({"metrics_bind", "metrics_tls_cert", "metrics_tls_key",
                              "metrics_basic_auth", "remote_capture", "remote_capture_token"})
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    check: Callable[[Any], str]  # returns "" when fine, else what is allowed

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _int_range(lo: int, hi: int | None = None) -> Callable[[Any], str]:
    allowed = f"an integer >= {lo}" if hi is None else f"an integer from {lo} to {hi}"

    def check(v: Any) -> str:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= lo and (hi is None or v <= hi)
        return "" if ok else allowed

    return check


def _float_range(lo: float, hi: float | None = None, *, lo_open: bool = False) -> Callable:
    op = ">" if lo_open else ">="
    allowed = f"a number {op} {lo}" + ("" if hi is None else f" and <= {hi}")

    def check(v: Any) -> str:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:  # NaN
            return allowed
        ok = (v > lo if lo_open else v >= lo) and (hi is None or v <= hi)
        return "" if ok else allowed

    return check


def _is_bool(v: Any) -> str:
    return "" if isinstance(v, bool) else "True or False"


def _is_str(v: Any) -> str:
    return "" if isinstance(v, str) else "a string"


def _port(v: Any) -> str:
    ok = isinstance(v, int) and not isinstance(v, bool) and (v == -1 or 0 <= v <= 65535)
    return "" if ok else "-1 (no HTTP server), 0 (any free port) or a port from 1 to 65535"


def _one_of(*values: str) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        return "" if v in values else "one of " + ", ".join(repr(x) for x in values)

    return check


def _basic_auth(v: Any) -> str:
    ok = isinstance(v, str) and (v == "" or (":" in v and not v.startswith(":")))
    return "" if ok else "'' (off) or 'user:password'"


_HOST_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def _bind(v: Any) -> str:
    """An IP address literal or a host name (resolved when the server binds)."""
    allowed = "an IP address of this host (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name"
    if not isinstance(v, str) or not v.isascii() or len(v) > 253:
        return allowed
    if v == "":
        return ""
    try:
        ipaddress.ip_address(v)
        return ""
    except ValueError:
        pass
    labels = v.rstrip(".").split(".")
    return "" if all(_HOST_LABEL.match(x) for x in labels) else allowed


def _label(v: Any) -> str:
    ok = isinstance(v, str) and len(v) <= MAX_LABEL_CHARS
    return "" if ok else f"a string of at most {MAX_LABEL_CHARS} characters"


OPTIONS: tuple[Option, ...] = (
    Option("enabled", True, "Master switch; False makes `enable()` a no-op.", _is_bool),
    Option("interval_steps", 500, "A window opens every this many steps (aligned to step "
           "numbers, so all workers profile the same steps).", _int_range(1)),
    Option("window_steps", 20, "Steps captured per window.", _int_range(1)),
    Option("first_window_step", 20, "Step at which the first window opens (after warm-up), so "
           "a new job shows figures early.", _int_range(0)),
    Option("window_max_s", 10.0, "Time cap of one window, seconds.",
           _float_range(0.0, MAX_SECONDS, lo_open=True)),
    Option("overhead_budget", 0.01, "Most of training time tfobs may cost (step markers, "
           "profiling, export, reduction); windows are planned at 80 % of it and skipped to "
           "stay under it.",
           _float_range(0.0, 0.5, lo_open=True)),
    Option("host_tracer_level", 2, "TF profiler host tracer level (2 is needed for tf.data "
           "and op events).", _int_range(0, 3)),
    Option("device_tracer_level", 1, "TF profiler device tracer level (0 disables GPU "
           "tracing).", _int_range(0, 1)),
    Option("python_tracer_level", 0, "TF profiler Python tracer level (1 is costly).",
           _int_range(0, 1)),
    Option("capture_dir", "", "Scratch folder for captures; '' means /dev/shm when present, "
           "else the system temp folder. Each capture is deleted once read.", _is_str),
    Option("max_capture_bytes", 256 * MIB, "Larger captures are dropped, not reduced.",
           _int_range(1)),
    Option("max_capture_events", 5_000_000, "Captures with more events are dropped, not "
           "reduced.", _int_range(1)),
    Option("metrics_port", 9464, "Prometheus HTTP port; the local rank (LOCAL_RANK, "
           "OMPI_COMM_WORLD_LOCAL_RANK, ...) is added. -1 disables the server, 0 picks a free "
           "port.", _port),
    Option("metrics_bind", "0.0.0.0", "Address the metrics server binds.", _bind),
    Option("metrics_tls_cert", "", "PEM certificate file; with metrics_tls_key serves HTTPS.",
           _is_str),
    Option("metrics_tls_key", "", "PEM private key file for metrics_tls_cert.", _is_str),
    Option("metrics_basic_auth", "", "'user:password' required by the metrics server.",
           _basic_auth),
    Option("remote_capture", False, "Accept on-demand capture requests over HTTP.", _is_bool),
    Option("remote_capture_token", "", "Bearer token required by remote capture requests.",
           _is_str),
    Option("otlp_endpoint", "", "OTLP endpoint for window traces; '' falls back to "
           "OTEL_EXPORTER_OTLP_ENDPOINT; empty means tracing off; OTEL_SDK_DISABLED=true turns "
           "it off.", _is_str),
    Option("otlp_protocol", "grpc", "'grpc' or 'http/protobuf' (else "
           "OTEL_EXPORTER_OTLP_PROTOCOL).", _one_of("grpc", "http/protobuf")),
    Option("trace_top_n", 5, "Longest ops per step sent as spans.", _int_range(0)),
    Option("trace_max_spans", 512, "Span cap per window trace.", _int_range(1)),
    Option("nvml", True, "Sample GPUs through NVML between windows.", _is_bool),
    Option("nvml_interval_s", 1.0, "NVML and TF memory sampling period, seconds.",
           _float_range(0.0, MAX_SECONDS, lo_open=True)),
    Option("short_gap_s", 30e-6, "GPU idle gaps shorter than this count as short_gap "
           "(seconds).", _float_range(0.0, 1.0)),
    Option("tf_job", "", "Worker identity label tf_job; '' reads TF_CONFIG (default 'local').",
           _label),
    Option("tf_task", "", "Worker identity label tf_task; '' reads TF_CONFIG (default '0').",
           _label),
    Option("verbose", False, "Log each window at INFO on the 'tfobs' logger.", _is_bool),
)
_BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def _parse_env(opt: Option, raw: str) -> Any:
    """Text from the environment -> the option's type; ValueError when it does not parse."""
    default = opt.default
    text = raw.strip()
    if isinstance(default, bool):
        low = text.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(raw)
    if isinstance(default, int):
        return int(text.replace("_", ""))
    if isinstance(default, float):
        return float(text)
    return raw


@dataclass(frozen=True)
class Config:
    enabled: bool = True
    interval_steps: int = 500
    window_steps: int = 20
    first_window_step: int = 20
    window_max_s: float = 10.0
    overhead_budget: float = 0.01
    host_tracer_level: int = 2
    device_tracer_level: int = 1
    python_tracer_level: int = 0
    capture_dir: str = ""
    max_capture_bytes: int = 256 * MIB
    max_capture_events: int = 5_000_000
    metrics_port: int = 9464
    metrics_bind: str = "0.0.0.0"
    metrics_tls_cert: str = ""
    metrics_tls_key: str = ""
    metrics_basic_auth: str = ""
    remote_capture: bool = False
    remote_capture_token: str = ""
    otlp_endpoint: str = ""
    otlp_protocol: str = "grpc"
    trace_top_n: int = 5
    trace_max_spans: int = 512
    nvml: bool = True
    nvml_interval_s: float = 1.0
    short_gap_s: float = 30e-6
    tf_job: str = ""
    tf_task: str = ""
    verbose: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            opt = _BY_NAME[f.name]
            if isinstance(opt.default, float) and isinstance(value, int) and not isinstance(
                value, bool
            ):
                object.__setattr__(self, f.name, float(value))  # 10 is a fine 10.0
                value = float(value)
            allowed = opt.check(value)
            if allowed:
                raise _conflict(f"tfobs option {f.name}={_shown(f.name, value)} is invalid: "
                                f"use {allowed}", f.name)
        if self.window_steps > self.interval_steps:
            raise _conflict(
                f"tfobs option window_steps={self.window_steps} is invalid: use at most "
                f"interval_steps ({self.interval_steps})", "window_steps", "interval_steps"
            )
        if bool(self.metrics_tls_cert) != bool(self.metrics_tls_key):
            raise _conflict(
                "tfobs options metrics_tls_cert and metrics_tls_key go together: set both "
                "(HTTPS) or neither (HTTP)", "metrics_tls_cert", "metrics_tls_key"
            )
        if self.remote_capture and not self.remote_capture_token:
            raise _conflict(
                "tfobs option remote_capture=True needs remote_capture_token "
                "(TFOBS_REMOTE_CAPTURE_TOKEN) set to a secret", "remote_capture",
                "remote_capture_token"
            )

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> Config:
        """Build the config: kwargs > TFOBS_* environment > defaults (see module doc)."""
        env = os.environ if environ is None else environ
        unknown = sorted(set(kwargs) - set(_BY_NAME))
        if unknown:
            raise ConfigError(
                f"unknown tfobs option {unknown[0]!r}: use one of " + ", ".join(_BY_NAME)
            )
        values: dict[str, Any] = {}
        refused: list[str] = []  # security settings from the environment we cannot honour
        for opt in OPTIONS:
            if opt.name in kwargs:
                values[opt.name] = kwargs[opt.name]
                continue
            raw = env.get(opt.env)
            if raw is None:
                continue
            try:
                value = _parse_env(opt, raw)
                if isinstance(opt.default, float) and isinstance(value, int):
                    value = float(value)
                problem = opt.check(value)
            except (ValueError, OverflowError):
                problem = opt.check(object())  # the "allowed" sentence
            if problem:
                if opt.name in SECURITY_OPTIONS:
                    refused.append(f"{opt.env} is invalid (use {problem})")
                    continue
                _say(f"ignoring {opt.env}={_shown(opt.name, raw)}: use {problem}; using the "
                     f"default {opt.default!r}")
                continue
            values[opt.name] = value
        _otel_fallbacks(values, kwargs, env)
        tls = ("metrics_tls_cert", "metrics_tls_key")
        if any(values.get(n) and n not in kwargs for n in tls) and all(values.get(n) for n in tls):
            problem = _tls_problem(values["metrics_tls_cert"], values["metrics_tls_key"])
            if problem:  # from the environment: checked now, so the server never starts open
                refused.append(f"TFOBS_METRICS_TLS_CERT/KEY cannot be loaded ({problem})")
                for n in tls:
                    values.pop(n)
        for _ in range(len(OPTIONS)):  # each round drops at least one environment value
            try:
                config = cls(**values)
                break
            except ConfigError as err:
                names = getattr(err, "options", ())
                from_env = [n for n in names if n in values and n not in kwargs]
                if not from_env:
                    raise  # explicit arguments conflict: the caller's code can be fixed
                if any(n in SECURITY_OPTIONS for n in names):
                    refused.append(f"{', '.join(_BY_NAME[n].env for n in from_env)}: "
                                   + str(err).removeprefix("tfobs "))
                    for n in names:
                        if n in SECURITY_OPTIONS and n not in kwargs:
                            values.pop(n, None)
                    continue
                drop = from_env[0]  # the option named first is the one that is off
                _say(f"ignoring {_BY_NAME[drop].env}={_shown(drop, values[drop])}: it "
                     f"conflicts ({str(err).removeprefix('tfobs ')}); using the default "
                     f"{_BY_NAME[drop].default!r}")
                values.pop(drop)
        else:  # pragma: no cover - every round removes a value
            config = cls(**{k: v for k, v in values.items() if k in kwargs})
        if refused:
            _log.error("tfobs: metrics server OFF, a security setting cannot be honoured: %s "
                       "(fix it to serve metrics; training goes on)", "; ".join(refused))
            config = dataclasses.replace(config, metrics_port=-1, remote_capture=False)
        return config

    def to_dict(self) -> dict[str, Any]:
        """The options, with secrets masked (for logs and the info metric)."""
        data = dataclasses.asdict(self)
        for secret in ("metrics_basic_auth", "remote_capture_token"):
            if data[secret]:
                data[secret] = "***"
        return data

    # -- resolved values -----------------------------------------------------------------

    def resolved_capture_dir(self) -> str:
        return resolve_capture_dir(self.capture_dir)

    def resolved_metrics_port(self, environ: Mapping[str, str] | None = None) -> int:
        """The port this process serves on: metrics_port + local rank (-1 and 0 unchanged);
        -1 (no server, one error line) when the sum exceeds 65535."""
        if self.metrics_port <= 0:
            return self.metrics_port
        port = self.metrics_port + local_rank(environ)
        if port > 65535:
            _log.error("tfobs: metrics server OFF: metrics_port %d + local rank %d exceeds 65535; "
                       "set metrics_port / TFOBS_METRICS_PORT lower", self.metrics_port,
                       port - self.metrics_port)
            return -1
        return port

    def identity(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        return worker_identity(self, environ)

    @property
    def tracing_enabled(self) -> bool:
        return bool(self.otlp_endpoint)


def _otel_fallbacks(values: dict[str, Any], kwargs: Mapping[str, Any], env: Mapping[str, str]):
    """OTel's own variables stand in for the tfobs ones; OTEL_SDK_DISABLED wins over both."""
    if "otlp_endpoint" not in values and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        values["otlp_endpoint"] = env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip()
    if "otlp_protocol" not in values:
        proto = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        if proto in ("grpc", "http/protobuf"):
            values["otlp_protocol"] = proto
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        values["otlp_endpoint"] = ""


def option(name: str) -> Option:
    return _BY_NAME[name]


def _conflict(message: str, *names: str) -> ConfigError:
    err = ConfigError(message)
    err.options = names  # type: ignore[attr-defined]  # which options Config.load may drop
    return err


def _shown(name: str, value: Any) -> str:
    """A value for a message: secrets are never shown."""
    if name in SECRET_OPTIONS and value:
        return "'***'"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _say(message: str) -> None:
    """Warn once per call; under PYTHONWARNINGS=error the warning is logged, not raised."""
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=4)
    except Exception:
        _log.warning(message)


def _tls_problem(cert: str, key: str) -> str:
    """'' when the PEM pair loads, else why not (no file contents in the text)."""
    import ssl

    try:
        for path in (cert, key):
            if not os.path.isfile(path):
                return f"{path!r} is not a file"
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except (OSError, ValueError, ssl.SSLError) as exc:
        return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(
            exc).__name__
    return ""


def local_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's rank among the training processes on its host (0 when unknown)."""
    env = os.environ if environ is None else environ
    for var in LOCAL_RANK_VARS:
        raw = env.get(var, "").strip()
        # ASCII digits only ("²".isdigit() is True) and a sane length (int() of 5,000 digits
        # raises): anything else is not a rank.
        if raw.isascii() and raw.isdigit() and len(raw) <= MAX_LOCAL_RANK_DIGITS:
            return int(raw)
    return 0


def worker_identity(
    config: Config | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """{"tf_job", "tf_task"} from the config overrides, else TF_CONFIG, else local/0."""
    env = os.environ if environ is None else environ
    job, task = "local", "0"
    raw = env.get("TF_CONFIG", "")
    if raw:
        try:
            spec = json.loads(raw).get("task") or {}
            job = str(spec.get("type") or job)
            task = str(spec.get("index", task))
        except (ValueError, AttributeError, TypeError, RecursionError):
            _log.warning("TF_CONFIG is not valid JSON with a 'task' entry; using tf_job=local")
    if config is not None:
        job = config.tf_job or job
        task = config.tf_task or task
    if len(job) > MAX_LABEL_CHARS or len(task) > MAX_LABEL_CHARS:
        # Every series carries these labels: an unbounded value would bloat each scrape.
        _log.warning("tfobs: TF_CONFIG task type/index over %d characters; truncated",
                     MAX_LABEL_CHARS)
        job, task = job[:MAX_LABEL_CHARS], task[:MAX_LABEL_CHARS]
    return {"tf_job": job, "tf_task": task}


def resolve_capture_dir(capture_dir: str = "") -> str:
    """'' -> /dev/shm when it exists and is writable (tmpfs: capture I/O stays in memory)."""
    if capture_dir:
        return capture_dir
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()
