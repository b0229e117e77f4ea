"""Config: precedence kwargs > TFOBS_* env > default, validation, resolved values."""

from __future__ import annotations

import pathlib
import warnings

import pytest

from tfobs.config import OPTIONS, SECRET_OPTIONS, SECURITY_OPTIONS, Config
from tfobs.errors import ConfigError
from tfobs.identity import local_rank, worker_identity
from tfobs.scratch import resolve_capture_dir


def test_each_default_passes_its_own_check():
    defaults = Config()
    for opt in OPTIONS:
        assert opt.check(opt.default) == "", opt.name
        assert getattr(defaults, opt.name) == opt.default, opt.name
        assert opt.env == "TFOBS_" + opt.name.upper()


def test_secret_and_security_options_are_read_from_the_fields():
    assert SECRET_OPTIONS == {"metrics_basic_auth", "remote_capture_token"}
    assert SECURITY_OPTIONS == {"metrics_bind", "metrics_tls_cert", "metrics_tls_key",
                                "metrics_basic_auth", "remote_capture", "remote_capture_token"}


def test_precedence_kwargs_over_env_over_default():
    env = {"TFOBS_WINDOW_STEPS": "7", "TFOBS_INTERVAL_STEPS": "70", "TFOBS_VERBOSE": "yes"}
    cfg = Config.load(environ=env, interval_steps=100)
    assert cfg.interval_steps == 100  # kwarg wins
    assert cfg.window_steps == 7  # env
    assert cfg.verbose is True
    assert cfg.first_window_step == 20  # default
    assert Config.load(environ={}).window_steps == 20


def test_env_parsing_of_each_type():
    env = {
        "TFOBS_OVERHEAD_BUDGET": "0.02",
        "TFOBS_MAX_CAPTURE_BYTES": "1_000_000",
        "TFOBS_NVML": "off",
        "TFOBS_METRICS_BIND": "127.0.0.1",
        "TFOBS_OTLP_PROTOCOL": "http/protobuf",
        "TFOBS_WINDOW_MAX_S": "3",
    }
    cfg = Config.load(environ=env)
    assert cfg.overhead_budget == 0.02
    assert cfg.max_capture_bytes == 1_000_000
    assert cfg.nvml is False
    assert cfg.metrics_bind == "127.0.0.1"
    assert cfg.otlp_protocol == "http/protobuf"
    assert cfg.window_max_s == 3.0 and isinstance(cfg.window_max_s, float)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"window_steps": 0}, "window_steps=0 is invalid: use an integer >= 1"),
        ({"interval_steps": "500"}, "interval_steps='500'"),
        ({"overhead_budget": 0.0}, "overhead_budget"),
        ({"host_tracer_level": 4}, "an integer from 0 to 3"),
        ({"metrics_port": 70000}, "-1 (no HTTP server)"),
        ({"otlp_protocol": "udp"}, "'grpc', 'http/protobuf'"),
        ({"metrics_basic_auth": "nopassword"}, "'user:password'"),
        ({"window_steps": 600}, "at most interval_steps (500)"),
        ({"metrics_tls_cert": "/x.pem"}, "set both"),
        ({"enabled": "yes"}, "True or False"),
        ({"window_max_s": float("nan")}, "window_max_s"),
        ({"no_such_option": 1}, "unknown tfobs option 'no_such_option'"),
    ],
)
def test_bad_kwargs_raise_naming_option_and_allowed(kwargs, needle):
    with pytest.raises(ConfigError) as err:
        Config.load(environ={}, **kwargs)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_env_warns_and_falls_back():
    with pytest.warns(RuntimeWarning, match=r"TFOBS_WINDOW_STEPS='lots'.*default 20"):
        cfg = Config.load(environ={"TFOBS_WINDOW_STEPS": "lots"})
    assert cfg.window_steps == 20
    with pytest.warns(RuntimeWarning, match="TFOBS_HOST_TRACER_LEVEL"):
        assert Config.load(environ={"TFOBS_HOST_TRACER_LEVEL": "9"}).host_tracer_level == 2


def test_conflicting_env_values_fall_back_instead_of_raising():
    env = {"TFOBS_WINDOW_STEPS": "50", "TFOBS_INTERVAL_STEPS": "10"}
    with pytest.warns(RuntimeWarning, match="conflict"):
        cfg = Config.load(environ=env)
    assert (cfg.window_steps, cfg.interval_steps) == (20, 500)


def test_otel_variables_are_fallbacks_and_sdk_disabled_wins():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    cfg = Config.load(environ=env)
    assert cfg.otlp_endpoint == "http://collector:4317" and cfg.tracing_enabled
    assert cfg.otlp_protocol == "http/protobuf"
    cfg = Config.load(environ={**env, "TFOBS_OTLP_ENDPOINT": "http://mine:4317"})
    assert cfg.otlp_endpoint == "http://mine:4317"
    cfg = Config.load(environ={**env, "OTEL_SDK_DISABLED": "true"}, otlp_endpoint="http://x:1")
    assert cfg.otlp_endpoint == "" and not cfg.tracing_enabled
    assert not Config.load(environ={}).tracing_enabled


def test_worker_identity_from_tf_config_and_overrides():
    # tf_cluster and local_rank: tests/runtime/test_multiworker_identity.py
    def job_task(ident):
        return {k: ident[k] for k in ("tf_job", "tf_task")}

    assert job_task(worker_identity(environ={})) == {"tf_job": "local", "tf_task": "0"}
    env = {"TF_CONFIG": '{"cluster": {}, "task": {"type": "worker", "index": 3}}'}
    assert job_task(worker_identity(environ=env)) == {"tf_job": "worker", "tf_task": "3"}
    cfg = Config.load(environ={}, tf_job="chief")
    assert job_task(worker_identity(cfg, environ=env)) == {"tf_job": "chief", "tf_task": "3"}
    assert job_task(worker_identity(environ={"TF_CONFIG": "{not json"})) == {
        "tf_job": "local", "tf_task": "0"}


def test_metrics_port_adds_local_rank():
    cfg = Config.load(environ={})
    assert cfg.resolved_metrics_port({}) == 9464
    assert cfg.resolved_metrics_port({"LOCAL_RANK": "3"}) == 9467
    assert cfg.resolved_metrics_port({"OMPI_COMM_WORLD_LOCAL_RANK": "1"}) == 9465
    assert local_rank({"LOCAL_RANK": "x"}) == 0
    assert Config.load(environ={}, metrics_port=-1).resolved_metrics_port({"LOCAL_RANK": "2"}) == -1
    assert Config.load(environ={}, metrics_port=0).resolved_metrics_port({"LOCAL_RANK": "2"}) == 0
    # A rank pushing the port past 65535 turns the server off (one error line), never raises.
    assert Config.load(environ={}, metrics_port=65535).resolved_metrics_port(
        {"LOCAL_RANK": "1"}) == -1


def test_capture_dir_prefers_tmpfs(tmp_path):
    assert resolve_capture_dir(str(tmp_path)) == str(tmp_path)
    resolved = Config.load(environ={}).resolved_capture_dir()
    expected = "/dev/shm" if pathlib.Path("/dev/shm").is_dir() else None
    if expected:
        assert resolved == expected
    else:
        assert pathlib.Path(resolved).is_dir()


def test_secrets_masked_in_to_dict():
    cfg = Config.load(environ={}, metrics_basic_auth="u:secret", remote_capture_token="tok")
    data = cfg.to_dict()
    assert data["metrics_basic_auth"] == "***" and data["remote_capture_token"] == "***"
    assert "secret" not in repr(data)


def test_no_warning_for_clean_environment():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Config.load(environ={"UNRELATED": "1"})
