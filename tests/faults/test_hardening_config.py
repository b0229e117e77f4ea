"""Hostile or sloppy configuration (issue 13, items 2, 5, 7, 8 and the tf_job label).

A bad TFOBS_* variable drops only itself and names itself; a security setting that cannot be
honoured turns the server off (one error line) instead of serving openly; nothing from the
environment makes `enable()` raise; secrets never appear in a message.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import pytest

from tfobs.config import MAX_CAPTURE_BYTES, MAX_TOP_N, Config
from tfobs.errors import ConfigError
from tfobs.identity import MAX_IDENTITY_VALUE, local_rank, worker_identity


def load_quietly(env: dict[str, str], **kwargs: Any) -> tuple[Config, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = Config.load(environ=env, **kwargs)
    return cfg, [str(w.message) for w in caught]


def test_one_conflicting_variable_drops_only_itself() -> None:
    env = {"TFOBS_METRICS_BASIC_AUTH": "user:pw", "TFOBS_METRICS_BIND": "127.0.0.1",
           "TFOBS_METRICS_PORT": "19495", "TFOBS_WINDOW_STEPS": "600"}
    cfg, said = load_quietly(env)
    assert (cfg.metrics_basic_auth, cfg.metrics_bind, cfg.metrics_port) == (
        "user:pw", "127.0.0.1", 19495)
    assert cfg.window_steps == 20
    assert len(said) == 1 and "TFOBS_WINDOW_STEPS=600" in said[0]
    # The other side of the same conflict: the interval is dropped when it is the env value.
    cfg, said = load_quietly({"TFOBS_INTERVAL_STEPS": "5"}, window_steps=10)
    assert (cfg.window_steps, cfg.interval_steps) == (10, 500) and "TFOBS_INTERVAL_STEPS" in said[0]


@pytest.mark.parametrize("env", [
    {"TFOBS_METRICS_BASIC_AUTH": "Sup3rS3cret"},
    {"TFOBS_METRICS_BASIC_AUTH": ":Sup3rS3cret"},
    {"TFOBS_METRICS_TLS_CERT": "/etc/hostname"},
    {"TFOBS_METRICS_TLS_CERT": "/nonexistent/cert.pem", "TFOBS_METRICS_TLS_KEY": "/nonexistent/k"},
    {"TFOBS_REMOTE_CAPTURE": "true"},
    {"TFOBS_METRICS_BIND": "\u202e"},
    {"TFOBS_METRICS_BIND": "not an address"},
    {"TFOBS_METRICS_BIND": "locahost"},
    {"TFOBS_METRICS_BIND": "192.0.2.1"},
], ids=["auth-no-colon", "auth-no-user", "cert-no-key", "unreadable-tls", "capture-no-token",
        "bind-rtl-mark", "bind-spaces", "bind-typo", "bind-not-this-host"])
def test_a_security_setting_that_cannot_be_honoured_turns_the_server_off(
        env: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    env = {**env, "TFOBS_METRICS_PORT": "19496", "TFOBS_WINDOW_STEPS": "7"}
    with caplog.at_level(logging.ERROR, logger="tfobs"):
        cfg, said = load_quietly(env)
    assert cfg.metrics_port == -1 and cfg.remote_capture is False
    assert cfg.window_steps == 7  # the rest of the environment still applies
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "metrics server OFF" in errors[0]
    assert any(name in errors[0] for name in env if name.startswith("TFOBS_METRICS")
               or name.startswith("TFOBS_REMOTE"))
    assert "Sup3rS3cret" not in " ".join(errors + said + [caplog.text])


@pytest.mark.parametrize("bind", ["locahost", "192.0.2.1", "no-such-host.invalid"])
def test_a_bind_address_typo_names_the_fix_in_one_line(
        bind: str, caplog: pytest.LogCaptureFixture) -> None:
    # Such names pass the address syntax and failed only at bind, where enable() raised.
    with caplog.at_level(logging.WARNING, logger="tfobs"):
        cfg, said = load_quietly({"TFOBS_METRICS_BIND": bind})
    assert cfg.metrics_port == -1 and not said
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert f"TFOBS_METRICS_BIND={bind!r} cannot be bound" in lines[0]
    assert "use an address of this host, e.g. 127.0.0.1" in lines[0]
    # The same names as explicit arguments are the caller's code: not refused here (the
    # server's bind names them), and an address of this host is never refused.
    assert Config.load(environ={}, metrics_bind=bind).metrics_bind == bind
    assert Config.load(environ={"TFOBS_METRICS_BIND": "localhost"}).metrics_port == 9464
    # A server switched off anyway does not look the name up.
    assert Config.load(environ={"TFOBS_METRICS_BIND": bind,
                                "TFOBS_METRICS_PORT": "-1"}).metrics_bind == bind


def test_a_capture_dir_that_is_a_file_or_not_writable_is_refused_at_enable(tmp_path) -> None:
    # Every window would fail at its first step ("File exists"); said once, at the start.
    afile = tmp_path / "captures"
    afile.write_text("not a folder")
    with pytest.raises(ConfigError, match=r"capture_dir=.*a folder this process can write "
                                          r"\(this path is a file\)"):
        Config.load(environ={}, capture_dir=str(afile))
    cfg, said = load_quietly({"TFOBS_CAPTURE_DIR": str(afile)})
    assert cfg.capture_dir == "" and "ignoring TFOBS_CAPTURE_DIR" in said[0]
    # A folder that does not exist yet is fine: tfobs makes it at the first window...
    assert Config.load(environ={}, capture_dir=str(tmp_path / "new" / "deeper")).capture_dir
    # ...unless a file stands where one of its parents would be: no window could make it.
    with pytest.raises(ConfigError, match=rf"capture_dir=.*\({afile} is a file\)"):
        Config.load(environ={}, capture_dir=str(afile / "run1"))
    if os.geteuid() != 0:  # root writes anywhere: the mode check holds for other users
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="not writable"):
            Config.load(environ={}, capture_dir=str(locked))


@pytest.mark.parametrize("option", ["capture_dir", "keep_dir"])
def test_a_folder_name_too_long_to_make_is_refused_at_enable(tmp_path, option: str) -> None:
    # A part over the file system's 255 bytes passed enable() (the check made a folder in
    # the nearest parent), then every window failed with "File name too long".
    long_part = tmp_path / ("n" * 300) / "runs"
    with pytest.raises(ConfigError, match=rf"{option}=.*the folder name 'n+'\.\.\. is 300 "
                                          r"bytes, over this file system's 255; give a shorter"):
        Config.load(environ={}, **{option: str(long_part)})
    var = f"TFOBS_{option.upper()}"
    cfg, said = load_quietly({var: str(long_part)})
    assert getattr(cfg, option) == "" and f"ignoring {var}" in said[0] and len(said) == 1
    # A path so long that the files tfobs names below it pass PATH_MAX (4,096 bytes).
    deep = tmp_path.joinpath(*["d" * 200] * 19)
    with pytest.raises(ConfigError, match=r"passes the 4096-byte path limit; give a shorter"):
        Config.load(environ={}, **{option: str(deep)})
    # Names at the limit are taken (and made by the first window).
    assert getattr(Config.load(environ={}, **{option: str(tmp_path / ("n" * 255))}), option)


@pytest.mark.parametrize("endpoint", ["http://", "http://[::1", "https://collector:99999"])
def test_an_unusable_otlp_endpoint_is_named_at_the_start(endpoint: str) -> None:
    # Before, a malformed one turned tracing off with "Invalid IPv6 URL" (no setting named)
    # and a port past 65535 failed every export later.
    with pytest.raises(ConfigError, match="otlp_endpoint=.*use '' \\(no tracing\\), a URL"):
        Config.load(environ={}, otlp_endpoint=endpoint)
    for var in ("TFOBS_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        cfg, said = load_quietly({var: endpoint})
        assert cfg.otlp_endpoint == "" and f"ignoring {var}=" in said[0], said
    # The forms people write stay accepted.
    for ok in ("localhost:4317", "http://otel-collector.monitoring:4317",
               "http://127.0.0.1:4318/v1/traces", "https://[::1]:4317"):
        assert Config.load(environ={}, otlp_endpoint=ok).otlp_endpoint == ok


def test_explicit_bad_arguments_still_raise_without_the_secret() -> None:
    with pytest.raises(ConfigError) as err:
        Config.load(environ={}, metrics_basic_auth=":pw-secret")
    assert "pw-secret" not in str(err.value) and "metrics_basic_auth" in str(err.value)
    with pytest.raises(ConfigError, match="remote_capture_token"):
        Config.load(environ={}, remote_capture=True)
    with pytest.raises(ConfigError, match="metrics_bind"):
        Config.load(environ={}, metrics_bind="\u202e")


@pytest.mark.parametrize("name", ["TFOBS_WINDOW_MAX_S", "TFOBS_NVML_INTERVAL_S"])
@pytest.mark.parametrize("raw", ["inf", "1e10", "nan", "-1"])
def test_infinite_or_huge_seconds_are_rejected_with_a_clear_line(name: str, raw: str) -> None:
    cfg, said = load_quietly({name: raw})
    option = name.removeprefix("TFOBS_").lower()
    assert getattr(cfg, option) == Config().__getattribute__(option)
    assert len(said) == 1 and name in said[0] and "<= 3600" in said[0]
    with pytest.raises(ConfigError, match=option):
        Config.load(environ={}, **{option: float(raw)})


@pytest.mark.parametrize("rank", ["\u00b2", "9" * 5000, "-3", "\u0663", " 1 2 "])
def test_weird_local_ranks_are_not_ranks(rank: str) -> None:
    assert local_rank({"LOCAL_RANK": rank}) == 0
    assert Config.load(environ={}).resolved_metrics_port({"LOCAL_RANK": rank}) == 9464


def test_port_plus_rank_over_65535_turns_the_server_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="tfobs"):
        port = Config.load(environ={}, metrics_port=65530).resolved_metrics_port(
            {"LOCAL_RANK": "9"})
    assert port == -1 and "exceeds 65535" in caplog.text


def test_deep_or_huge_tf_config_gives_bounded_labels() -> None:
    assert worker_identity(environ={"TF_CONFIG": "[" * 100_000}) == {
        "tf_job": "local", "tf_task": "0", "tf_cluster": "none", "local_rank": "0"}
    deep = '{"task": {"type": "w", "index": ' + "[" * 50_000 + "]" * 50_000 + "}}"
    assert worker_identity(environ={"TF_CONFIG": deep})["tf_job"] == "local"
    big = json.dumps({"task": {"type": "t" * 120_000, "index": 1}})
    ident = worker_identity(environ={"TF_CONFIG": big})
    assert len(ident["tf_job"]) == MAX_IDENTITY_VALUE and ident["tf_task"] == "1"


@pytest.mark.parametrize("name", ["tf_job", "tf_task"])
@pytest.mark.parametrize("value", ["x" * (MAX_IDENTITY_VALUE + 1), "my worker", "wörker"])
def test_identity_option_that_is_no_label_value_is_refused_naming_the_limit(
        name: str, value: str) -> None:
    # One rule for the label, from the option as from TF_CONFIG: an explicit value is used as
    # given or refused, never cut or rewritten silently.
    with pytest.raises(ConfigError) as err:
        Config.load(environ={}, **{name: value})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"tfobs option {name}=")
    assert f"use at most {MAX_IDENTITY_VALUE} characters of A-Z a-z 0-9 _ . : -" in message
    cfg, warned = load_quietly({f"TFOBS_{name.upper()}": value})
    assert getattr(cfg, name) == "" and any(f"TFOBS_{name.upper()}" in w for w in warned)
    fitting = "w-1.a:b_" + "x" * (MAX_IDENTITY_VALUE - 8)  # the most the rule lets through
    assert Config.load(environ={}, **{name: fitting}).identity({})[name] == fitting


def test_python_warnings_error_does_not_turn_a_bad_variable_into_an_exception(
        caplog: pytest.LogCaptureFixture) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level(logging.WARNING, logger="tfobs"):
            cfg = Config.load(environ={"TFOBS_WINDOW_STEPS": "lots",
                                       "TFOBS_INTERVAL_STEPS": "3"})
    assert (cfg.window_steps, cfg.interval_steps) == (20, 500)
    assert "TFOBS_WINDOW_STEPS" in caplog.text


_ENABLE_CASES = textwrap.dedent("""
    import json, os, sys, urllib.request, urllib.error
    import tfobs
    cases = json.loads(sys.argv[1])
    base = dict(os.environ)
    for env in cases:
        os.environ.clear(); os.environ.update(base); os.environ.update(env)
        try:
            rt = tfobs.enable()
        except BaseException as exc:
            print(json.dumps({"raised": f"{type(exc).__name__}: {exc}"}), flush=True)
            continue
        url = rt.metrics_url if rt is not None else ""
        status = 0
        if url:
            try:
                status = urllib.request.urlopen(url, timeout=5).status
            except urllib.error.HTTPError as e:
                status = e.code
        print(json.dumps({"url": url, "status": status}), flush=True)
        tfobs.disable()
""")


@pytest.mark.slow
def test_no_hostile_environment_makes_enable_raise(tmp_path: Any) -> None:
    """One process, many environments in turn (each: enable, one scrape, disable)."""
    cert = tmp_path / "cert.pem"
    cert.write_text("not a pem")
    cert.chmod(0o000)
    base = {"TFOBS_METRICS_BIND": "127.0.0.1", "TFOBS_METRICS_PORT": "0", "TFOBS_NVML": "0"}
    cases = [
        {"TFOBS_METRICS_BASIC_AUTH": "user:pw", "TFOBS_WINDOW_STEPS": "600"},
        {"TFOBS_METRICS_BIND": "\u202e"},
        {"TFOBS_METRICS_BIND": "[::1]:80"},
        {"TFOBS_REMOTE_CAPTURE": "true"},
        {"TFOBS_METRICS_TLS_CERT": str(cert), "TFOBS_METRICS_TLS_KEY": str(cert)},
        {"TFOBS_METRICS_TLS_CERT": str(cert)},
        {"TFOBS_METRICS_PORT": "65535", "LOCAL_RANK": "3"},
        {"LOCAL_RANK": "\u00b2"},
        {"LOCAL_RANK": "9" * 5000},
        {"TF_CONFIG": "[" * 100_000},
        {"TFOBS_WINDOW_MAX_S": "inf", "TFOBS_NVML_INTERVAL_S": "1e10"},
        {"TFOBS_METRICS_BASIC_AUTH": "Sup3rS3cret"},
        {"TFOBS_METRICS_BIND": "locahost"},
        {"TFOBS_METRICS_BIND": "192.0.2.1"},
    ]
    cases = [{**base, **c} for c in cases]
    env = {**os.environ, "PYTHONWARNINGS": "error", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", _ENABLE_CASES, json.dumps(cases)], env=env,
                          capture_output=True, text=True, timeout=240, cwd=os.getcwd())
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), proc.stdout + proc.stderr[-2000:]
    assert not [r for r in results if "raised" in r], results
    auth, *_rest = results
    assert auth["url"].startswith("http://127.0.0.1:") and auth["status"] == 401  # auth kept
    for i in (1, 2, 3, 4, 5, 6, 11, 12, 13):  # security setting not honourable: no server at all
        assert results[i]["url"] == "", (i, results[i])
    for i in (7, 8, 9, 10):  # harmless: served on the loopback as configured
        assert results[i]["status"] == 200, (i, results[i])
    assert "Sup3rS3cret" not in proc.stderr + proc.stdout


def test_a_keep_dir_that_is_a_file_or_under_one_is_refused_at_enable(tmp_path) -> None:
    # Before, it was accepted and the first window kept failed with a message that named no
    # setting; now it is checked at enable(), as capture_dir is.
    import tfobs
    from tfobs.runtime import lifecycle

    afile = tmp_path / "kept"
    afile.write_text("not a folder")
    for path, why in ((afile, r"\(this path is a file\)"),
                      (afile / "run1", rf"\({afile} is a file\)")):
        with pytest.raises(ConfigError, match=r"keep_dir=.*use '' \(keep nothing\), a folder "
                                              r"this process can write, or a URL .* " + why):
            tfobs.enable(keep_dir=str(path), metrics_port=-1)
        assert lifecycle.current() is None  # nothing started
        cfg, said = load_quietly({"TFOBS_KEEP_DIR": str(path)})
        assert cfg.keep_dir == "" and "ignoring TFOBS_KEEP_DIR" in said[0], said
    # A folder to be made, and a remote store (checked by its own file system), are fine.
    assert Config.load(environ={}, keep_dir=str(tmp_path / "new" / "deeper")).keep_dir
    assert Config.load(environ={}, keep_dir="gs://bucket/job/tfobs").keep_dir
    if os.geteuid() != 0:  # root writes anywhere: the mode check holds for other users
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match="keep_dir=.*not writable"):
            Config.load(environ={}, keep_dir=str(locked / "sub"))


def test_identities_that_clean_alike_stay_distinct() -> None:
    """`a}b` and `a_b` (or two long names with one start) were one label value and one
    kept-file name: two workers' series and captures mixed."""
    from tfobs.identity import label_value
    from tfobs.runtime.keep import host_name

    pairs = [("a}b", "a_b"), ("a b", "a_b"), ("x" * 40 + "1", "x" * 40 + "2"), ("α", "_")]
    for one, other in pairs:
        assert label_value(one, "d") != label_value(other, "d"), (one, other)
        for value in (label_value(one, "d"), label_value(other, "d")):
            assert len(value) <= MAX_IDENTITY_VALUE and all(
                c.isascii() and (c.isalnum() or c in "_.:-") for c in value)
    assert label_value("worker", "d") == "worker"  # a plain value is kept as it is
    assert host_name({"tf_job": "a:b", "tf_task": "0"}) != host_name(
        {"tf_job": "a-b", "tf_task": "0"})
    assert host_name({"tf_job": "worker", "tf_task": "1"}).endswith("_worker_1")


CAPTURE = (os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
           + "/data/captures/generated__tf2.21cpu__keras3_spe4_plain.xplane.pb")


@pytest.mark.parametrize(("name", "raw", "limit"), [
    ("TFOBS_TRACE_TOP_N", "9" * 40, "an integer from 0 to 10000"),
    ("TFOBS_MAX_CAPTURE_BYTES", "1" + "0" * 40, "an integer from 1 to 1099511627776"),
])
def test_counts_past_what_numpy_or_the_os_takes_are_refused_with_a_clear_line(
        name: str, raw: str, limit: str) -> None:
    # Before, both passed the checks and failed every window: the reduction's OverflowError
    # (a C long) for trace_top_n, the reduce helper's memory limit for max_capture_bytes.
    cfg, said = load_quietly({name: raw})
    option = name.removeprefix("TFOBS_").lower()
    assert getattr(cfg, option) == getattr(Config(), option)
    assert len(said) == 1 and name in said[0] and limit in said[0], said
    with pytest.raises(ConfigError, match=option):
        Config.load(environ={}, **{option: int(raw)})


# Counts with a bound of their own; every other count takes up to 2**63 - 1.
_BOUNDED = {"max_capture_bytes": MAX_CAPTURE_BYTES, "trace_top_n": MAX_TOP_N,
            "host_tracer_level": 3, "device_tracer_level": 1, "python_tracer_level": 1}
_COUNT_OPTIONS = [f.name for f in dataclasses.fields(Config)
                  if type(f.default) is int and f.name != "metrics_port"]


@pytest.mark.parametrize("option", _COUNT_OPTIONS)
def test_no_count_option_takes_a_number_past_64_bits(option: str) -> None:
    # 10**40 passed every unbounded count (interval_steps, window_steps, keep_max_bytes...)
    # and meant "never" or "no limit" without a word: step numbers, sizes and numpy's counts
    # are 64-bit, so such a value can only be a typo.
    name = "TFOBS_" + option.upper()
    cfg, said = load_quietly({name: "1" + "0" * 40})
    assert getattr(cfg, option) == getattr(Config(), option)
    assert len(said) == 1 and name in said[0] and ("2**63" in said[0] or " to " in said[0])
    with pytest.raises(ConfigError, match=option):
        Config.load(environ={}, **{option: 10**40})
    top = _BOUNDED.get(option, 2**63 - 1)
    roomy = {"interval_steps": top} if option == "window_steps" else {}  # one within the other
    assert getattr(Config.load(environ={}, **{option: top}, **roomy), option) == top


@pytest.mark.parametrize(("name", "raw"), [("TFOBS_WINDOW_STEPS", "\uff11\uff12"),
                                         ("TFOBS_WINDOW_MAX_S", "\u0663"),
                                         ("TFOBS_INTERVAL_STEPS", "\u0968\u0966\u0966")])
def test_a_number_in_another_scripts_digits_is_refused(name: str, raw: str) -> None:
    # int("１２") is 12: full-width (or Arabic-Indic, Devanagari) digits passed as a count.
    cfg, said = load_quietly({name: raw})
    option = name.removeprefix("TFOBS_").lower()
    assert getattr(cfg, option) == getattr(Config(), option)
    assert len(said) == 1 and name in said[0]


@pytest.mark.parametrize("option", ["capture_dir", "keep_dir"])
def test_a_folder_path_holding_a_nul_byte_is_refused_at_enable(option: str, tmp_path) -> None:
    # os.path.exists() answers False for it, so it passed as "a folder tfobs will make"; every
    # capture (or keep) then failed on the byte. Passed in code: an environment cannot hold one.
    with pytest.raises(ConfigError, match=f"{option}.*NUL byte"):
        Config.load(environ={}, **{option: f"{tmp_path}/a\0b"})


@pytest.mark.parametrize("option", ["capture_dir", "keep_dir"])
@pytest.mark.parametrize("kind", ["dangling_link", "link_loop", "not_utf8", "proc"])
def test_a_folder_no_window_could_write_is_refused_at_enable(option: str, kind: str,
                                                             tmp_path) -> None:
    # Each passed the check and then failed every window (or keep) with a line that named
    # no option: makedirs's "File exists" on a link to nothing, pybind's four-line dump for
    # a non-UTF-8 path, "No such file" where root may write /proc's bits but make nothing.
    if kind == "dangling_link":
        path = tmp_path / "scratch"
        path.symlink_to(tmp_path / "gone")
        want = "symbolic link to nothing"
    elif kind == "link_loop":
        path = tmp_path / "loop"
        path.symlink_to(tmp_path / "loop")
        want = "symbolic link to nothing"
    elif kind == "not_utf8":
        path = os.fsdecode(bytes(tmp_path) + b"/cap\xff")
        want = "not valid UTF-8"
    else:
        path, want = "/proc", "/proc"
    with pytest.raises(ConfigError, match=rf"{option}=.*") as info:
        Config.load(environ={}, **{option: str(path)})
    assert want in str(info.value) and "\n" not in str(info.value)
    assert not list(tmp_path.glob(".tfobs-check-*"))  # the probe leaves nothing


def test_a_huge_row_count_reduces_as_every_row_and_a_huge_memory_limit_is_no_limit() -> None:
    """The layers under the options, reached without them: `tfobs.analyze(top_n=...)` and a
    reduce helper whose limit no OS takes (before: CaptureError, and a helper that exited at
    start, every window failed)."""
    from tfobs.analysis.pipeline import analyze
    from tfobs.reduce.helper import ReduceHelper, data_limit_bytes

    huge = analyze(CAPTURE, top_n=10**40)
    assert huge == analyze(CAPTURE, top_n=2**31 - 1)
    assert len(huge.ops.top) > len(analyze(CAPTURE, top_n=5).ops.top)
    helper = ReduceHelper(data_limit=data_limit_bytes(10**40))
    try:
        reply = helper.reduce(CAPTURE, top_n=5, short_gap_s=30e-6, max_events=5_000_000)
        assert reply["steps"]["count"] == analyze(CAPTURE, top_n=5).steps.count
    finally:
        helper.stop(1.0)


def test_a_path_or_a_numpy_number_is_taken_as_its_plain_value(tmp_path) -> None:
    # Both were refused with a line that did not say why ("use an integer >= 1" for
    # numpy.int64(100), "a folder this process can write" for a writable pathlib.Path).
    import pathlib

    import numpy as np

    cfg = Config.load(environ={}, capture_dir=pathlib.Path(tmp_path),
                      interval_steps=np.int64(100), window_max_s=np.float32(5))
    assert cfg.capture_dir == str(tmp_path) and type(cfg.capture_dir) is str
    assert cfg.interval_steps == 100 and type(cfg.interval_steps) is int
    assert cfg.window_max_s == 5.0 and type(cfg.window_max_s) is float
    with pytest.raises(ConfigError, match="interval_steps=2.5"):  # a fraction is no count
        Config.load(environ={}, interval_steps=2.5)
    # an int past any float is refused by the option's range, or infinite where none bounds
    # it; an OverflowError escaped enable() before
    with pytest.raises(ConfigError, match="window_max_s=inf is invalid"):
        Config.load(environ={}, window_max_s=10**400)
    assert Config.load(environ={}, keep_on_step_time_rise=10**400).keep_on_step_time_rise \
        == float("inf")


def test_text_options_from_the_environment_are_stripped_as_numbers_are() -> None:
    # "0.0.0.0 " or a lone space (a manifest's quoting) turned the metrics server off.
    cfg = Config.load(environ={"TFOBS_METRICS_BIND": " 127.0.0.1 ",
                               "TFOBS_METRICS_TLS_CERT": " ", "TFOBS_METRICS_TLS_KEY": " ",
                               "TFOBS_METRICS_BASIC_AUTH": " "})
    assert cfg.metrics_bind == "127.0.0.1"
    assert cfg.metrics_tls_cert == cfg.metrics_tls_key == cfg.metrics_basic_auth == ""

