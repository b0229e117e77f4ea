"""The profiler session (real TF profiler) and coexistence with the user's own profiling."""

from __future__ import annotations

import glob
import os
import pathlib

import pytest

tf = pytest.importorskip("tensorflow")

from tensorflow.python.profiler import profiler_v2  # noqa: E402
from tensorflow.python.profiler.internal import _pywrap_profiler  # noqa: E402

import tfobs  # noqa: E402
from tests.support.memory_exporter import MemoryExporter  # noqa: E402
from tests.support.mute_servers import statvfs_with_free  # noqa: E402
from tfobs.capture.folder_cleanup import owner, sweep_stale_dirs  # noqa: E402
from tfobs.capture.session import ProfilerSlot  # noqa: E402
from tfobs.config import Config  # noqa: E402
from tfobs.runtime import Runtime  # noqa: E402
from tfobs.xspace.reader import parse  # noqa: E402


@tf.function
def _train_step(x):
    return tf.reduce_sum(tf.matmul(x, x))


def _steps(n: int, start: int = 0) -> None:
    x = tf.ones((64, 64))
    ds = iter(tf.data.Dataset.range(10**6).map(lambda i: tf.cast(i, tf.float32)))
    for i in range(start, start + n):
        with tfobs.step(i):
            next(ds)
            _train_step(x)


def _own_dirs(capture_dir: str) -> list[str]:
    return glob.glob(os.path.join(capture_dir, f"tfobs-{owner()}-*"))


@pytest.fixture
def slot(tmp_path):
    s = ProfilerSlot.from_config(Config(capture_dir=str(tmp_path)))
    yield s
    s.close()


def _events_named(data: bytes, prefix: str) -> int:
    space = parse(data)
    count = 0
    for plane in space:
        for line in plane.lines:
            for ev in line.events:
                if plane.event_name(ev).startswith(prefix):
                    count += 1
    return count


def test_capture_returns_xspace_bytes_and_deletes_its_folder(slot, tmp_path):
    _steps(2)  # trace functions before the window
    assert slot.start() is None
    assert slot.state == "active" and len(_own_dirs(str(tmp_path))) == 1
    _steps(5)
    result = slot.finish()
    assert result.outcome == "captured", result.reason
    assert result.nbytes == len(result.data) > 1000
    assert result.active_s > 0 and result.export_s > 0
    assert _events_named(result.data, "train") >= 4  # step markers with _r=1
    assert _own_dirs(str(tmp_path)) == []
    assert slot.state == "idle"


def test_tracer_levels_take_effect(tmp_path):
    """TF drops plain int options; the capture must differ between host levels 1 and 2."""
    counts = {}
    for level in (1, 2):
        s = ProfilerSlot.from_config(Config(capture_dir=str(tmp_path), host_tracer_level=level))
        assert s.start() is None
        _steps(5)
        result = s.finish()
        assert result.ok, result.reason
        counts[level] = _events_named(result.data, "Iterator::")
    assert counts[1] == 0 and counts[2] > 0


def test_capture_over_byte_limit_is_dropped(tmp_path):
    s = ProfilerSlot.from_config(Config(capture_dir=str(tmp_path), max_capture_bytes=100))
    assert s.start() is None
    _steps(3)
    result = s.finish()
    assert result.outcome == "dropped_too_large"
    assert result.nbytes > 100 and result.data == b""
    assert "max_capture_bytes=100" in result.reason
    assert _own_dirs(str(tmp_path)) == []


def test_busy_profiler_is_skipped_and_public_api_keeps_working(slot, tmp_path):
    other = _pywrap_profiler.ProfilerSession()  # another tool holding the profiler
    other.start(str(tmp_path / "other"), {})
    try:
        refused = slot.start()
        assert refused is not None and refused.outcome == "skipped_busy"
        assert _own_dirs(str(tmp_path)) == []
    finally:
        other.export_to_tb()
        del other
    assert profiler_v2._profiler is None  # tfobs never touches the public session state
    tf.profiler.experimental.start(str(tmp_path / "user"))
    _steps(2)
    tf.profiler.experimental.stop()
    assert glob.glob(str(tmp_path / "user/plugins/profile/*/*.xplane.pb"))


def test_preempt_drops_active_window(slot):
    assert slot.start() is None
    assert slot.preempt("test")
    result = slot.finish()
    assert result.outcome == "skipped_busy" and result.reason == "test"
    assert slot.start() is None  # usable again
    assert slot.finish().ok


@pytest.mark.parametrize("replaced_by", ["file", "link loop", "dangling link"])
def test_a_capture_folder_replaced_after_start_is_named_with_the_fix(tmp_path, replaced_by):
    # Replaced by a file or a link to nothing between windows, every later window failed
    # with "cannot create capture folder: [Errno 17] File exists: ...", naming neither
    # what was there nor the option to change.
    folder = tmp_path / "captures"
    s = ProfilerSlot.from_config(Config(capture_dir=str(folder)))
    try:
        assert s.start() is None and s.finish().ok
        os.rmdir(folder)
        if replaced_by == "file":
            folder.write_text("x")
        else:
            folder.symlink_to(folder if replaced_by == "link loop" else tmp_path / "gone")
        result = s.start()
        assert result is not None and result.outcome == "failed"
        assert result.reason.startswith(f"cannot create capture folder in {folder}: ")
        assert ("this path is a file" if replaced_by == "file" else "symbolic link to nothing") \
            in result.reason
        assert result.reason.endswith("set capture_dir (TFOBS_CAPTURE_DIR) to a folder this "
                                      "process can write")
        assert s.state == "idle"
    finally:
        s.close()


def test_sweep_removes_folders_of_dead_processes(tmp_path):
    dead = tmp_path / "tfobs-999999999-abc"  # named by PID alone, as an earlier tfobs did
    mine = tmp_path / f"tfobs-{owner()}-abc"
    here = owner().split("p", 1)[1]
    dead_here = tmp_path / f"tfobs-999999998p{here}-abc"
    # Another container's folder (another PID namespace) on a shared /dev/shm: a PID there
    # says nothing here, alive or not, so it is left alone.
    theirs = tmp_path / f"tfobs-999999997p{int(here) + 1}-abc"
    for folder in (dead, mine, dead_here, theirs):
        folder.mkdir()
    assert sweep_stale_dirs(str(tmp_path)) == 2
    assert not dead.exists() and not dead_here.exists()
    assert mine.exists() and theirs.exists()


def test_capture_folders_carry_the_pid_namespace(slot):
    # Two containers' jobs, each PID 1, once shared one folder name: one's exit cleaner
    # removed the other's live capture.
    assert slot.start() is None
    (folder,) = pathlib.Path(slot.capture_dir).glob("tfobs-*")
    assert folder.name.startswith(f"tfobs-{owner()}-")
    assert owner() == f"{os.getpid()}p{os.stat('/proc/self/ns/pid').st_ino}"
    slot.finish()


def test_short_room_after_a_window_moves_on_only_from_a_folder_tfobs_chose(
        tmp_path, monkeypatch, caplog):
    # After each window the folder must hold about twice that capture again, so the next
    # window is not traced only to fail at its export.
    import tfobs.capture.session as session

    shm, tmp = tmp_path / "shm", tmp_path / "tmp"
    shm.mkdir()
    tmp.mkdir()
    monkeypatch.setattr(session.os, "statvfs", statvfs_with_free(5 << 20))
    chosen = ProfilerSlot(str(shm), host_tracer_level=2, device_tracer_level=1,
                          python_tracer_level=0, max_capture_bytes=1 << 30,
                          fallback_dir=str(tmp))
    chosen._check_room(2 << 20)  # 5 MiB free holds two 2 MiB captures: stays
    assert chosen.capture_dir == str(shm) and not caplog.records
    chosen._check_room(3 << 20)
    assert chosen.capture_dir == str(tmp)
    assert "--shm-size" in caplog.text and str(tmp) in caplog.text
    # A folder the user named is never left: one warning that names the setting.
    caplog.clear()
    named = ProfilerSlot(str(shm), host_tracer_level=2, device_tracer_level=1,
                         python_tracer_level=0, max_capture_bytes=1 << 30)
    named._check_room(3 << 20)
    named._check_room(3 << 20)
    assert named.capture_dir == str(shm)
    assert len(caplog.records) == 1 and "TFOBS_CAPTURE_DIR" in caplog.text
    # tfobs's own choice (/dev/shm) has the temporary folder to fall back to; a named
    # folder has none.
    import tempfile

    auto = ProfilerSlot.from_config(Config())
    assert auto._fallback_dir == ("" if auto.capture_dir == tempfile.gettempdir()
                                  else tempfile.gettempdir())
    assert ProfilerSlot.from_config(Config(capture_dir=str(shm)))._fallback_dir == ""


# -- coexistence with the user's own profiling (tfobs running as in a real job) ------------


@pytest.fixture
def runtime(tmp_path):
    config = Config.load(environ={}, metrics_port=-1, interval_steps=1000, window_steps=10,
                         first_window_step=10**6, overhead_budget=0.5,
                         capture_dir=str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    exporter = MemoryExporter()
    rt = Runtime(config, sinks=[exporter], step_sink=exporter).start()
    yield rt
    rt.stop(5.0)
    assert _own_dirs(str(tmp_path / "scratch")) == []


def _windows(rt) -> dict[str, int]:
    return dict(rt.health.windows)


def test_manual_profiler_start_stop_during_tfobs_window(runtime, tmp_path):
    _steps(2)
    assert runtime.capture_now()
    _steps(3, start=100)  # tfobs window open (steps 100..)
    assert not runtime.idle
    user_dir = tmp_path / "user"
    tf.profiler.experimental.start(str(user_dir))  # must win over tfobs's window
    assert runtime.capture_now() or True
    _steps(4, start=103)  # an on-demand tfobs window would be due: skipped, user busy
    tf.profiler.experimental.stop()
    # The steps after the user took the profiler carry no exemplar: that window is gone.
    steps = runtime.sinks[0].all_steps()
    assert [ex is not None for _, ex in steps[-7:]] == [True] * 3 + [False] * 4
    files = glob.glob(str(user_dir / "plugins/profile/*/*.xplane.pb"))
    assert files, "the user's profile was not written"
    with open(files[0], "rb") as fh:
        assert _events_named(fh.read(), "train") >= 3  # tfobs markers help the user too
    assert runtime.wait_idle(20)
    assert _windows(runtime).get("skipped_busy", 0) >= 1
    # after the user's session tfobs captures again, and the user can profile again
    assert runtime.capture_now()
    _steps(12, start=200)
    assert runtime.wait_idle(30)
    assert _windows(runtime).get("captured", 0) >= 1, runtime.health
    tf.profiler.experimental.start(str(tmp_path / "user2"))
    tf.profiler.experimental.stop()
    assert glob.glob(str(tmp_path / "user2/plugins/profile/*/*.xplane.pb"))


def test_user_session_first_then_tfobs_window_is_skipped(runtime, tmp_path):
    tf.profiler.experimental.start(str(tmp_path / "user"))
    try:
        assert runtime.capture_now()
        _steps(3, start=300)
    finally:
        tf.profiler.experimental.stop()
    assert _windows(runtime).get("skipped_busy", 0) == 1
    assert glob.glob(str(tmp_path / "user/plugins/profile/*/*.xplane.pb"))


def test_tensorboard_profile_batch_during_tfobs_window(runtime, tmp_path):
    keras = tf.keras
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    ds = tf.data.Dataset.from_tensors((tf.ones((8, 8)), tf.ones((8, 4)))).repeat()
    model.fit(ds, steps_per_epoch=3, epochs=1, verbose=0)  # build and trace first
    logdir = tmp_path / "tb"
    tb = keras.callbacks.TensorBoard(log_dir=str(logdir), profile_batch=(3, 5))
    assert runtime.capture_now()  # tfobs window opens at the first step of this fit
    model.fit(ds, steps_per_epoch=12, epochs=1, verbose=0, callbacks=[tb])
    assert runtime.wait_idle(30)
    profiles = glob.glob(str(logdir / "**/plugins/profile/*/*.xplane.pb"), recursive=True)
    assert profiles, "the TensorBoard callback wrote no profile"
    assert _windows(runtime).get("skipped_busy", 0) >= 1, runtime.health
    # tfobs keeps working after the callback's profile
    assert runtime.capture_now()
    model.fit(ds, steps_per_epoch=15, epochs=1, verbose=0)
    assert runtime.wait_idle(30)
    assert _windows(runtime).get("captured", 0) >= 1, runtime.health
