"""A relative capture_dir or keep_dir names the folder it named when `enable()` ran: a job
that changes its working folder afterwards (into a run's output folder) keeps its windows,
their kill -9 cleaner and its kept captures in that one folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from tfobs.capture.session import ProfilerSlot
from tfobs.config import Config
from tfobs.runtime.keep import GfileStore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_capture_folder_stays_where_it_was_named(tmp_path: Any, monkeypatch: Any) -> None:
    (tmp_path / "later").mkdir()
    monkeypatch.chdir(tmp_path)
    slot = ProfilerSlot.from_config(Config.load({}, capture_dir="captures"))
    monkeypatch.chdir(tmp_path / "later")
    assert slot.capture_dir == str(tmp_path / "captures")


def test_kept_captures_stay_in_one_folder(tmp_path: Any, monkeypatch: Any) -> None:
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "first")
    store = GfileStore("kept", "host_local_0")
    monkeypatch.chdir(tmp_path / "second")
    one = store.put("2026_01_01_00_00_00", b"a" * 10)
    monkeypatch.chdir(tmp_path)
    two = store.put("2026_01_01_00_00_01", b"b" * 10)
    folder = tmp_path / "first" / "kept" / "plugins" / "profile"
    assert one == str(folder / "2026_01_01_00_00_00" / "host_local_0.xplane.pb")
    assert two == str(folder / "2026_01_01_00_00_01" / "host_local_0.xplane.pb")
    assert store.held() == [(one, 10), (two, 10)]
    assert not (tmp_path / "second" / "kept").exists() and not (tmp_path / "kept").exists()


def test_a_window_folder_made_after_a_chdir_is_removed_at_kill_9(tmp_path: Any) -> None:
    (tmp_path / "later").mkdir()
    script = textwrap.dedent("""
        import os, signal, sys, tempfile
        sys.path.insert(0, sys.argv[1])
        from tfobs.capture.folder_cleanup import DIR_PREFIX, owner, start_kill_cleaner
        from tfobs.capture.session import ProfilerSlot
        from tfobs.config import Config
        slot = ProfilerSlot.from_config(Config.load({}, capture_dir="captures"))
        assert start_kill_cleaner(slot.capture_dir)
        os.chdir("later")  # the job moves into its run's folder
        os.makedirs(slot.capture_dir, exist_ok=True)
        made = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{owner()}-", dir=slot.capture_dir)
        print(os.path.abspath(made), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", script, ROOT], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    made = done.stdout.strip()
    assert made, done.stderr
    deadline = time.monotonic() + 10
    while os.path.exists(made) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(made)
    assert os.path.dirname(made) == str(tmp_path / "captures")
