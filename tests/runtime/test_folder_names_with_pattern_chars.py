"""A capture or keep folder whose name holds `[`, `*` or `?` (`runs/exp[1]`, a folder
named by a tool or a date pattern) is a folder, not a pattern: its captures are found, its
stale folders swept, the kept files counted against keep_max_bytes, and nothing outside it
is touched."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tfobs.capture.folder_cleanup import DIR_PREFIX, owner, sweep_stale_dirs
from tfobs.capture.session import CAPTURED, ProfilerSlot
from tfobs.config import Config
from tfobs.runtime.core import Runtime
from tfobs.runtime.keep import GfileStore

NAMES = ["exp[1]", "run[a-z]", "star*", "what?"]
DEAD_PID = 4_194_999  # past Linux's largest pid_max (2**22): no process has it


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _slot(folder: str) -> ProfilerSlot:
    return ProfilerSlot(folder, host_tracer_level=2, device_tracer_level=0,
                        python_tracer_level=0, max_capture_bytes=1 << 20)


@pytest.mark.parametrize("name", NAMES)
def test_a_capture_written_in_such_a_folder_is_found(tmp_path: Any, name: str) -> None:
    logdir = tmp_path / name / f"{DIR_PREFIX}{owner()}-abc"
    run = logdir / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(b"\x0a\x00" * 8)
    slot = _slot(str(tmp_path / name))
    handed = slot._read(str(logdir), 0.1, time.perf_counter(), read=False)
    assert handed.outcome == CAPTURED, handed.reason
    assert handed.path == str(run / "host.xplane.pb")
    read = slot._read(str(logdir), 0.1, time.perf_counter(), read=True)
    assert read.outcome == CAPTURED and read.data == b"\x0a\x00" * 8


@pytest.mark.skipif(not _dead(DEAD_PID), reason="the test's dead PID is alive here")
@pytest.mark.parametrize("name", NAMES)
def test_a_dead_owner_s_folder_in_such_a_folder_is_swept(tmp_path: Any, name: str) -> None:
    folder = tmp_path / name
    stale = folder / f"{DIR_PREFIX}{DEAD_PID}-x"
    stale.mkdir(parents=True)
    assert sweep_stale_dirs(str(folder)) == 1
    assert not stale.exists()


@pytest.mark.skipif(not _dead(DEAD_PID), reason="the test's dead PID is alive here")
def test_the_sweep_touches_no_folder_the_name_would_match(tmp_path: Any) -> None:
    others = [tmp_path / "exp1", tmp_path / "other"]
    for other in others:
        (other / f"{DIR_PREFIX}{DEAD_PID}-x").mkdir(parents=True)
    (tmp_path / "exp[1]").mkdir()
    (tmp_path / "*").mkdir()
    assert sweep_stale_dirs(str(tmp_path / "exp[1]")) == 0
    assert sweep_stale_dirs(str(tmp_path / "*")) == 0
    for other in others:
        assert (other / f"{DIR_PREFIX}{DEAD_PID}-x").is_dir()


def test_the_runtime_removes_its_own_folders_from_such_a_folder(tmp_path: Any) -> None:
    folder = tmp_path / "exp[1]"
    config = Config.load({}, capture_dir=str(folder), metrics_port=-1, reduce_in="thread",
                         nvml=False)
    runtime = Runtime(config)
    own = folder / f"{DIR_PREFIX}{owner()}-left"
    own.mkdir(parents=True)
    (tmp_path / "exp1" / f"{DIR_PREFIX}{owner()}-other").mkdir(parents=True)
    runtime._remove_own_dirs()
    assert not own.exists()
    assert (tmp_path / "exp1" / f"{DIR_PREFIX}{owner()}-other").is_dir()


@pytest.mark.parametrize("name", NAMES)
def test_kept_files_in_such_a_folder_are_counted(tmp_path: Any, name: str) -> None:
    store = GfileStore(str(tmp_path / name), "host_local_0")
    first = store.put("2026_01_01_00_00_00", b"a" * 10)
    second = store.put("2026_01_01_00_00_01", b"b" * 20)
    assert store.held() == [(first, 10), (second, 20)]
    store.remove(first)
    assert store.held() == [(second, 20)]


@pytest.mark.parametrize("name", [*NAMES, "plain"])
def test_kept_files_in_such_a_remote_folder_are_counted_and_no_other(name: str) -> None:
    # A remote keep folder (TensorFlow's in-memory file system, `ram://`, through the same
    # `tf.io.gfile` glob as gs:// or hdfs://): `run[1]` found none of its own files, and
    # `star*` counted a neighbour's against keep_max_bytes (and would delete them).
    tf = pytest.importorskip("tensorflow")
    base = f"ram://keep-{os.getpid()}-{time.monotonic_ns()}"
    store = GfileStore(f"{base}/{name}", "host[1]")
    first = store.put("2026_01_01_00_00_00", b"a" * 10)
    second = store.put("2026_01_01_00_00_01", b"b" * 20)
    for neighbour in ("exp1", "runa", "starX", "whatX", "plain1"):
        GfileStore(f"{base}/{neighbour}", "host[1]").put("2026_01_01_00_00_02", b"c" * 5)
    GfileStore(f"{base}/{name}", "host1").put("2026_01_01_00_00_03", b"d" * 7)
    assert tf.io.gfile.exists(first)
    assert store.held() == [(first, 10), (second, 20)]
    store.remove(first)
    assert store.held() == [(second, 20)]
