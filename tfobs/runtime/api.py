"""`tfobs.enable()`: every option a typed keyword, so a type checker and an IDE see them.

A keyword left at None is not given: the `TFOBS_<NAME>` variable, else the default in
`tfobs.config.OPTIONS` (the one place defaults are written; a test keeps these keywords and
`OPTIONS` equal).
"""

from __future__ import annotations

from typing import Literal

from tfobs.config import Config
from tfobs.runtime.core import Runtime
from tfobs.runtime.lifecycle import enable_config


def enable(
    *,
    enabled: bool | None = None,
    interval_steps: int | None = None,
    window_steps: int | None = None,
    first_window_step: int | None = None,
    window_max_s: float | None = None,
    export_step_stretch: float | None = None,
    overhead_budget: float | None = None,
    host_tracer_level: int | None = None,
    device_tracer_level: int | None = None,
    python_tracer_level: int | None = None,
    capture_dir: str | None = None,
    max_capture_bytes: int | None = None,
    max_capture_events: int | None = None,
    reduce_in: Literal["process", "thread"] | None = None,
    metrics_port: int | None = None,
    metrics_bind: str | None = None,
    metrics_tls_cert: str | None = None,
    metrics_tls_key: str | None = None,
    metrics_basic_auth: str | None = None,
    remote_capture: bool | None = None,
    remote_capture_token: str | None = None,
    otlp_endpoint: str | None = None,
    otlp_protocol: Literal["grpc", "http/protobuf"] | None = None,
    trace_top_n: int | None = None,
    trace_max_spans: int | None = None,
    nvml: bool | None = None,
    nvml_interval_s: float | None = None,
    short_gap_s: float | None = None,
    tf_job: str | None = None,
    tf_task: str | None = None,
    verbose: bool | None = None,
    quiet: bool | None = None,
    keep_dir: str | None = None,
    keep_max_bytes: int | None = None,
    keep_max_per_hour: int | None = None,
    keep_first: bool | None = None,
    keep_on_input_bound: bool | None = None,
    keep_on_step_time_rise: float | None = None,
    keep_on_critical_advice: bool | None = None,
) -> Runtime | None:
    """Start tfobs in this training process and return its handle (see `Runtime`).

    Call it once, before training starts; a second call returns the running handle (new
    options are ignored until `tfobs.disable()`, with a warning). Each keyword is one option
    of the options table (docs/options.md) (meaning, unit, default): an explicit keyword wins over
    its `TFOBS_<NAME>` variable, which wins over the default. Returns None when
    `enabled=False` (or `TFOBS_ENABLED=false`).

    Raises `tfobs.ConfigError` naming the option and what is allowed for a bad keyword; a
    bad variable only warns, and a metrics port already in use is said in one line and
    another port served. Without TensorFlow it says how to install it and returns None.
    """
    given = {name: value for name, value in locals().items() if value is not None}
    return enable_config(Config.load(**given), explicit=bool(given))
