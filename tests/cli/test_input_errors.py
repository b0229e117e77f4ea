"""Bad input is one line naming the fix (exit 2), and a misspelled TFOBS_*
variable warns with the closest option name, at the user's enable() call."""

from __future__ import annotations

import os
import pathlib
import re
import socket
import subprocess
import sys
import warnings

import pytest

from tests.support.mute_servers import statvfs_with_free
from tfobs.config import OPTIONS, Config
from tfobs.config_hints import unknown_env

ROOT = pathlib.Path(__file__).parents[2]
KNOWN = [o.env for o in OPTIONS]


def test_misspelled_variables_get_the_closest_option() -> None:
    env = {"TFOBS_INTERVALSTEPS": "5", "TFOBS_METRIC_PORT": "1", "TFOBS_windowsteps": "3",
           "TFOBS_ENABLED": "1", "TFOBS_NOTHING_LIKE_IT": "1", "PATH": "/bin"}
    assert unknown_env(env, KNOWN) == [
        ("TFOBS_INTERVALSTEPS", "TFOBS_INTERVAL_STEPS"),
        ("TFOBS_METRIC_PORT", "TFOBS_METRICS_PORT"),
        ("TFOBS_NOTHING_LIKE_IT", ""),
        ("TFOBS_windowsteps", "TFOBS_WINDOW_STEPS"),
    ]


def test_config_warning_names_the_option_and_points_at_the_callers_line() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Config.load(environ={"TFOBS_INTERVALSTEPS": "5", "TFOBS_WINDOW_STEPS": "x"})
    messages = [str(w.message) for w in caught]
    assert "ignoring unknown TFOBS_INTERVALSTEPS: did you mean TFOBS_INTERVAL_STEPS?" in messages
    assert any("TFOBS_WINDOW_STEPS='x'" in m for m in messages)
    # Both point here, not at tfobs's own line.
    assert {w.filename for w in caught} == {__file__}


@pytest.mark.slow  # starts a Python process that imports TensorFlow
def test_enable_warning_points_at_the_users_enable_call(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import warnings\nwarnings.simplefilter('always')\nimport tfobs\n"
        "tfobs.enable(metrics_port=-1)  # line 4\ntfobs.disable()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFOBS_INTERVALSTEPS": "5",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (f"{script}:4: RuntimeWarning: ignoring unknown TFOBS_INTERVALSTEPS: did you mean "
            "TFOBS_INTERVAL_STEPS?") in proc.stderr, proc.stderr[-2000:]


def test_doctor_reports_the_misspelled_variable() -> None:
    from tfobs.commands.doctor import check_config

    os.environ["TFOBS_INTERVALSTEPS"] = "5"
    try:
        verdict, detail = check_config({"overrides": {}})
    finally:
        del os.environ["TFOBS_INTERVALSTEPS"]
    assert verdict == "warn" and "did you mean TFOBS_INTERVAL_STEPS?" in detail


def test_doctor_names_the_fix_for_a_small_capture_folder(tmp_path, monkeypatch) -> None:
    # Docker's /dev/shm is 64 MiB, under the 256 MiB a capture may take.
    import tfobs.scratch
    from tfobs.commands import doctor

    monkeypatch.setattr(doctor.os, "statvfs", statvfs_with_free(64 << 20))
    monkeypatch.setattr(tfobs.scratch, "SHM_DIR", str(tmp_path))  # tfobs's own choice
    verdict, detail = doctor.check_capture_dir({"config": Config()})
    assert verdict == "warn" and "64 MiB free" in detail and "--shm-size" in detail
    verdict, detail = doctor.check_capture_dir({"config": Config(capture_dir=str(tmp_path))})
    assert verdict == "warn" and "TFOBS_CAPTURE_DIR" in detail and "--shm-size" not in detail


@pytest.mark.slow  # imports TensorFlow in a subprocess
def test_demo_on_a_taken_port_says_so_and_trains_on_another() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "tfobs.cli", "demo", "--port", str(port), "--bind",
             "127.0.0.1", "--seconds", "1"],
            env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
            capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [line for line in proc.stderr.splitlines() if f"port {port} " in line]
    assert len(said) == 1 and " is in use " in said[0], proc.stderr[-2000:]
    other = re.search(r"serving on port (\d+) instead", said[0])
    assert other and int(other.group(1)) != port, said
    # The banner names the page and the metrics where they are served now.
    assert f"page http://127.0.0.1:{other.group(1)}/ , metrics" in proc.stdout, proc.stdout
    assert "tfobs demo done: steps=" in proc.stdout and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["demo", "--batch-size", "0"], "tfobs demo: --batch-size must be >= 1, got 0"),
    (["demo", "--seconds", "-1"], "tfobs demo: --seconds must be >= 0, got -1.0"),
    (["demo", "--windows", "-2"], "tfobs demo: --windows must be >= 0, got -2"),
    # Typos that crashed the demo after TensorFlow loaded (a 196 GB dataset; time.sleep(nan)
    # in the input-bound map, time.sleep(inf) after training) or trained without end
    # (--seconds nan): refused before it loads, in one line.
    (["demo", "--batch-size", "1000000"], "tfobs demo: --batch-size must be <= 4096, got 1000000"),
    (["demo", "--sleep-ms", "nan"], "tfobs demo: --sleep-ms must be a number, got nan"),
    (["demo", "--linger", "inf"], "tfobs demo: --linger must be <= 86400, got inf"),
    (["demo", "--seconds", "nan"], "tfobs demo: --seconds must be a number, got nan"),
    (["doctor", "--port", "70000"],
     "tfobs doctor: --port must be -1 (no server), 0 (any free port) or 1-65535, got 70000"),
])
def test_bad_command_input_is_one_line_exit_2(argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from tfobs.cli import main

    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == message and captured.out == ""


def test_analyze_serve_errors_name_its_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # `tfobs analyze --serve/--bind` is not configured by metrics_port / metrics_bind: the
    # fix names the flags the user typed.
    from tfobs.cli import main

    capture = str(ROOT / "tests" / "data" / "captures" / "advice__demo_input_bound.xplane.pb")
    assert main(["analyze", capture, "--serve", "0", "--bind", "no such host",
                 "--seconds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfobs analyze: cannot listen on 'no such host':0")
    assert err[0].endswith("set --bind to an address of this host"), err
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["analyze", capture, "--serve", str(port), "--seconds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tfobs analyze: port {port} on 127.0.0.1 is in use; set --serve to a free "
                   "port"], err
