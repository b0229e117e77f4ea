"""One `Config` for tfobs: explicit argument > `TFOBS_<NAME>` environment variable > default.

A bad argument raises `ConfigError` naming the option and what is allowed (the caller can fix
the code); a bad environment variable warns, naming itself, and only it falls back to its
default (a typo in a pod spec must not kill a training job). A security setting from the
environment that cannot be honoured (malformed basic auth, a TLS certificate without its key or
unreadable, a bad bind address, remote capture without a token) never falls back to an open
server: the metrics server stays off with one error line and training goes on. Secrets never
appear in a message. All `TFOBS_*` names live here, with one line of help and the default each
(`OPTIONS`, the only place defaults are written); `tests/runtime/test_config.py` checks that
the options table in docs/options.md lists exactly them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import logging
import os
import re
import socket
import tempfile
import urllib.parse
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tfobs.config_hints import user_stacklevel, warn_unknown_env
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


def _scratch_folder(v: Any) -> str:
    """A folder tfobs can write captures to, or one it can make at the first window ('' is
    tfobs's own choice). A file there, or a folder it cannot write, would fail every window."""
    allowed = "'' (tfobs picks /dev/shm) or a folder this process can write"
    if not isinstance(v, str):
        return allowed
    if v and os.path.exists(v) and not (os.path.isdir(v) and os.access(v, os.W_OK | os.X_OK)):
        return allowed + (" (this path is a file)" if not os.path.isdir(v) else
                          " (this folder is not writable)")
    return ""


def _keep_folder(v: Any) -> str:
    """'' (keep nothing), a URL of a TensorFlow file system, or a local folder this process
    can write or make: a file in the way, or a folder it cannot write, would fail every keep
    (checked at enable(), as capture_dir is, instead of at the first window kept)."""
    allowed = ("'' (keep nothing), a folder this process can write, or a URL "
               "(gs://, s3://, hdfs://)")
    if not isinstance(v, str):
        return allowed
    if not v or "://" in v:
        return ""  # a remote store is checked by its own file system at the first keep
    path = os.path.abspath(v)
    while not os.path.exists(path):  # the nearest part that exists: tfobs makes the rest
        parent = os.path.dirname(path)
        if parent == path:
            return ""
        path = parent
    if not os.path.isdir(path):
        return allowed + (" (this path is a file)" if path == os.path.abspath(v) else
                          f" ({path} is a file)")
    if not os.access(path, os.W_OK | os.X_OK):
        return allowed + (" (this folder is not writable)" if path == os.path.abspath(v)
                          else f" (cannot make it: {path} is not writable)")
    return ""


def _endpoint(v: Any) -> str:
    """'' or a URL with a host and a valid port (scheme optional: `collector:4317` is how
    many write a gRPC endpoint, and OpenTelemetry's exporter takes it)."""
    allowed = "'' (no tracing) or a URL with a host, e.g. http://otel-collector:4317"
    if not isinstance(v, str):
        return allowed
    if not v:
        return ""
    try:
        url = urllib.parse.urlsplit(v if "://" in v else "http://" + v)
        url.port  # noqa: B018 - raises ValueError for a port outside 0-65535
    except ValueError:
        return allowed
    return "" if url.hostname else allowed


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


def _stretch(v: Any) -> str:
    ok = isinstance(v, float) and (v == 0.0 or 1.05 <= v <= 100.0)
    return "" if ok else "0 (off) or a number from 1.05 to 100"


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
    Option("export_step_stretch", 1.5, "Most a window's export may slow the step it overlaps, "
           "as a multiple of the median step; where it did more (training keeps every core "
           "busy), later windows trace fewer steps (window_steps halved, 5 at least). 0 keeps "
           "every window at window_steps.", _stretch),
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
    Option("framework", "auto", "Whose profiler captures windows: 'tensorflow', 'jax', or "
           "'auto' (the framework the job has imported; JAX where it has both, as a JAX job "
           "fed by tf.data does).", _one_of("auto", "tensorflow", "jax")),
    Option("capture_dir", "", "Scratch folder for captures; '' means /dev/shm when present "
           "(the system temp folder once /dev/shm is full), else the system temp folder. Each "
           "capture is deleted once read.", _scratch_folder),
    Option("max_capture_bytes", 256 * MIB, "Larger captures are dropped, not reduced.",
           _int_range(1)),
    Option("max_capture_events", 5_000_000, "Captures with more events are dropped, not "
           "reduced.", _int_range(1)),
    Option("reduce_in", "process", "Where captures are reduced: 'process' (a low-priority "
           "helper process, so the job's GIL and memory carry none of it; falls back to "
           "'thread' where no child process can start) or 'thread' (in the training "
           "process).", _one_of("process", "thread")),
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
           "it off.", _endpoint),
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
    Option("quiet", False, "No tfobs lines in the job's log at enable() and per window "
           "(warnings still show).", _is_bool),
    Option("keep_dir", "", "Folder or URL (gs://, s3://, hdfs://: any TensorFlow file system) "
           "where windows that matter are kept in TensorBoard's layout "
           "(DIR/plugins/profile/RUN/HOST.xplane.pb); '' keeps none.", _keep_folder),
    Option("keep_max_bytes", 1024 * MIB, "Bytes of kept captures this worker holds in "
           "keep_dir; the oldest are deleted first.", _int_range(1)),
    Option("keep_max_per_hour", 6, "Most windows kept per hour by the triggers (on-demand "
           "keeps are not counted).", _int_range(0)),
    Option("keep_first", True, "Keep the job's first captured window.", _is_bool),
    Option("keep_on_input_bound", True, "Keep a window whose input-bound verdict is worse "
           "than in the recent windows.", _is_bool),
    Option("keep_on_step_time_rise", 0.25, "Keep a window whose mean step time rose by more "
           "than this share over the median of the recent windows (0 turns it off).",
           _float_range(0.0)),
    Option("keep_on_critical_advice", True, "Keep a window where advice of severity "
           "critical fired that the previous window did not have.", _is_bool),
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


def _default(name: str) -> Any:
    """An option's default, written once in OPTIONS."""
    return _BY_NAME[name].default


@dataclass(frozen=True)
class Config:
    """The options (see OPTIONS for each one's meaning); defaults are OPTIONS'."""

    enabled: bool = _default("enabled")
    interval_steps: int = _default("interval_steps")
    window_steps: int = _default("window_steps")
    first_window_step: int = _default("first_window_step")
    window_max_s: float = _default("window_max_s")
    export_step_stretch: float = _default("export_step_stretch")
    overhead_budget: float = _default("overhead_budget")
    host_tracer_level: int = _default("host_tracer_level")
    device_tracer_level: int = _default("device_tracer_level")
    python_tracer_level: int = _default("python_tracer_level")
    framework: str = _default("framework")
    capture_dir: str = _default("capture_dir")
    max_capture_bytes: int = _default("max_capture_bytes")
    max_capture_events: int = _default("max_capture_events")
    reduce_in: str = _default("reduce_in")
    metrics_port: int = _default("metrics_port")
    metrics_bind: str = _default("metrics_bind")
    metrics_tls_cert: str = _default("metrics_tls_cert")
    metrics_tls_key: str = _default("metrics_tls_key")
    metrics_basic_auth: str = _default("metrics_basic_auth")
    remote_capture: bool = _default("remote_capture")
    remote_capture_token: str = _default("remote_capture_token")
    otlp_endpoint: str = _default("otlp_endpoint")
    otlp_protocol: str = _default("otlp_protocol")
    trace_top_n: int = _default("trace_top_n")
    trace_max_spans: int = _default("trace_max_spans")
    nvml: bool = _default("nvml")
    nvml_interval_s: float = _default("nvml_interval_s")
    short_gap_s: float = _default("short_gap_s")
    tf_job: str = _default("tf_job")
    tf_task: str = _default("tf_task")
    verbose: bool = _default("verbose")
    quiet: bool = _default("quiet")
    keep_dir: str = _default("keep_dir")
    keep_max_bytes: int = _default("keep_max_bytes")
    keep_max_per_hour: int = _default("keep_max_per_hour")
    keep_first: bool = _default("keep_first")
    keep_on_input_bound: bool = _default("keep_on_input_bound")
    keep_on_step_time_rise: float = _default("keep_on_step_time_rise")
    keep_on_critical_advice: bool = _default("keep_on_critical_advice")

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
        warn_unknown_env(env, (opt.env for opt in OPTIONS))  # TFOBS_INTERVALSTEPS: did you mean
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
        _otel_fallbacks(values, env)
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
        bind = values.get("metrics_bind")
        if bind and "metrics_bind" not in kwargs and values.get("metrics_port", 0) != -1:
            problem = _bind_problem(bind)
            if problem:  # a typo (`locahost`) fails only at bind: checked now, so enable() goes on
                refused.append(f"TFOBS_METRICS_BIND={bind!r} cannot be bound ({problem}); use "
                               "an address of this host, e.g. 127.0.0.1 or 0.0.0.0")
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


def _otel_fallbacks(values: dict[str, Any], env: Mapping[str, str]) -> None:
    """OTel's own variables stand in for the tfobs ones; OTEL_SDK_DISABLED wins over both."""
    if "otlp_endpoint" not in values and env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = env["OTEL_EXPORTER_OTLP_ENDPOINT"].strip()
        problem = _endpoint(endpoint)
        if problem:
            _say(f"ignoring OTEL_EXPORTER_OTLP_ENDPOINT={endpoint!r}: use {problem}; "
                 "tracing stays off")
        else:
            values["otlp_endpoint"] = endpoint
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
        warnings.warn(message, RuntimeWarning, stacklevel=user_stacklevel())
    except Exception:
        _log.warning(message)


def _bind_problem(bind: str) -> str:
    """Why a server could not listen on `bind` ("" when it can): a name that does not resolve
    or an address that is not this host's. Binds port 0, so no port is held."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((bind, 0))
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    except (TypeError, ValueError, UnicodeError) as exc:
        return type(exc).__name__
    return ""


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


# Identity label values stay short and plain, whatever TF_CONFIG holds: a long or odd task
# type would otherwise become a long, odd label value on every series.
MAX_IDENTITY_VALUE = 32
_NOT_LABEL_TEXT = re.compile(r"[^A-Za-z0-9_.:-]+")
# Task types that run no training steps of their own: tfobs schedules no windows there.
STEPLESS_TASK_TYPES: frozenset[str] = frozenset({"ps", "evaluator"})


def label_value(raw: object, default: str) -> str:
    """`raw` as a bounded label value: odd characters become `_`, at most 32 characters. A
    value changed so ends in `-` and 8 hex digits of the original, so two identities that
    clean alike (`a}b`, `a_b`; two long names with one start) stay two label values."""
    text = str(raw).strip()
    clean = _NOT_LABEL_TEXT.sub("_", text)
    if clean != text or len(clean) > MAX_IDENTITY_VALUE:
        clean = f"{clean[:MAX_IDENTITY_VALUE - 9]}-{distinct_suffix(text)}"
    return clean or default


def distinct_suffix(text: str) -> str:
    """8 hex digits of `text`: what keeps a cleaned name apart from another's."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def worker_identity(
    config: Config | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The labels naming this process in a job (every metric, every span carries them):

    * `tf_job`, `tf_task`: TF_CONFIG's task type and index (the tf_job/tf_task options win),
      else `local`/`0`;
    * `tf_cluster`: 8 hex digits of TF_CONFIG's cluster spec, the same on every task of one
      job and different between jobs, so job-wide rules group by it (`none` without one);
    * `local_rank`: the process's rank on its host (LOCAL_RANK and the like), else `0`.
    """
    env = os.environ if environ is None else environ
    job, task, cluster = "local", "0", "none"
    raw = env.get("TF_CONFIG", "")
    if raw:
        try:
            tf_config = json.loads(raw)
            spec = tf_config.get("task") or {}
            raw_job, raw_task = str(spec.get("type") or job), str(spec.get("index", task))
            if len(raw_job) > MAX_IDENTITY_VALUE or len(raw_task) > MAX_IDENTITY_VALUE:
                # Every series carries these labels: an unbounded value would bloat each scrape.
                _log.warning("tfobs: TF_CONFIG task type/index over %d characters; truncated",
                             MAX_IDENTITY_VALUE)
            job = label_value(raw_job, "local")
            task = label_value(raw_task, "0")
            if tf_config.get("cluster"):
                digest = hashlib.sha256(
                    json.dumps(tf_config["cluster"], sort_keys=True).encode()
                ).hexdigest()
                cluster = digest[:8]
        except (ValueError, AttributeError, TypeError, RecursionError):
            _log.warning("TF_CONFIG is not valid JSON with a 'task' entry; using tf_job=local")
    if config is not None:
        job = label_value(config.tf_job, job) if config.tf_job else job
        task = label_value(config.tf_task, task) if config.tf_task else task
    return {"tf_job": job, "tf_task": task, "tf_cluster": cluster,
            "local_rank": str(local_rank(env))}


def runs_steps(identity: Mapping[str, str]) -> bool:
    """False for parameter servers and evaluators: no scheduled windows there."""
    return identity.get("tf_job", "") not in STEPLESS_TASK_TYPES


SHM_DIR = "/dev/shm"  # the capture folder tfobs picks itself; tempfile's folder if it fills


def resolve_capture_dir(capture_dir: str = "") -> str:
    """'' -> /dev/shm when it exists and is writable (tmpfs: capture I/O stays in memory)."""
    if capture_dir:
        return capture_dir
    if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK | os.X_OK):
        return SHM_DIR
    return tempfile.gettempdir()
