"""A keep folder shared with other local users: links planted at the names tfobs writes.

Another user of a team disk can predict the keep folder's names (the run folder is the
window's UTC start, the file the host's name). tfobs, often root, must never write or delete
through a link planted there: such a window is counted as not kept (`tfobs_errors_total
{stage="keep"}`), and the link's target stays as it was.
"""

from __future__ import annotations

import os
import pathlib

from tfobs.config import Config
from tfobs.health import HealthLedger
from tfobs.runtime.failures import Failures
from tfobs.runtime.keep import Keeper, run_name
from tfobs.summary import Steps, WindowSummary
from tfobs.window import WindowRecord

CAPTURE = (pathlib.Path(__file__).parents[1] / "data" / "captures"
           / "tracelens__mi300_jax08_gemm__tw003.xplane.pb")  # 110 kB


def keeper_in(keep_dir: pathlib.Path, **options: int) -> tuple[Keeper, HealthLedger]:
    health = HealthLedger()
    keeper = Keeper(Config(keep_dir=str(keep_dir), **options), health, Failures(health),
                    {"tf_job": "worker", "tf_task": "0"})
    return keeper, health


def window() -> WindowSummary:
    return WindowSummary(steps=Steps(count=5, method="markers", mean_s=0.05))


def record(index: int) -> WindowRecord:
    return WindowRecord(index=index, start_ns=1_800_000_000_000_000_000 + index * 10**9,
                        first_step=10 * index, on_demand=True, keep=True)


def victim_file(tmp_path: pathlib.Path) -> pathlib.Path:
    """A file the job's user owns, mode 0600, outside the keep folder."""
    victim = tmp_path / "private" / "secret.txt"
    victim.parent.mkdir()
    victim.write_bytes(b"do not overwrite")
    victim.chmod(0o600)
    return victim


def test_a_link_at_the_capture_name_is_not_written_through(tmp_path: pathlib.Path) -> None:
    keep = tmp_path / "shared"
    victim = victim_file(tmp_path)
    keeper, health = keeper_in(keep)
    rec = record(0)
    run_dir = keep / "plugins" / "profile" / run_name(rec, window())
    run_dir.mkdir(parents=True)
    (run_dir / f"{keeper.store.host}.xplane.pb").symlink_to(victim)
    keeper.keep(window(), rec, CAPTURE.read_bytes())
    assert victim.read_bytes() == b"do not overwrite"
    assert rec.kept_path == "" and health.errors == {"keep": 1}
    assert health.snapshot().kept == 0
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # nothing left over


def test_the_old_temporary_name_planted_as_a_link_is_not_written_through(
        tmp_path: pathlib.Path) -> None:
    # The temporary name was `.<host>.xplane.pb.tmp`: now it is random and made new (O_EXCL).
    keep = tmp_path / "shared"
    victim = victim_file(tmp_path)
    keeper, health = keeper_in(keep)
    rec = record(0)
    run_dir = keep / "plugins" / "profile" / run_name(rec, window())
    run_dir.mkdir(parents=True)
    (run_dir / f".{keeper.store.host}.xplane.pb.tmp").symlink_to(victim)
    keeper.keep(window(), rec, CAPTURE.read_bytes())
    assert victim.read_bytes() == b"do not overwrite"
    kept = run_dir / f"{keeper.store.host}.xplane.pb"
    assert rec.kept_path == str(kept) and not kept.is_symlink()
    assert kept.read_bytes() == CAPTURE.read_bytes() and health.errors == {}


def test_a_link_at_any_folder_is_not_followed(tmp_path: pathlib.Path) -> None:
    victim_dir = tmp_path / "private"
    victim_dir.mkdir()
    for i, planted in enumerate(("plugins", "plugins/profile", "plugins/profile/RUN")):
        keep = tmp_path / f"shared{i}"
        keeper, health = keeper_in(keep)
        rec = record(i)
        link = keep / planted.replace("RUN", run_name(rec, window()))
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(victim_dir, target_is_directory=True)
        keeper.keep(window(), rec, CAPTURE.read_bytes())
        assert list(victim_dir.rglob("*")) == [], planted  # nothing made in the target
        assert rec.kept_path == "" and health.errors == {"keep": 1}, planted
        assert link.is_symlink()


def test_retention_never_deletes_through_a_link(tmp_path: pathlib.Path) -> None:
    """Links named like this worker's older runs: retention neither counts nor deletes
    them (a run folder linked to another folder must not be removed with its contents)."""
    keep = tmp_path / "shared"
    victim = victim_file(tmp_path)
    victim_dir = tmp_path / "other"
    victim_dir.mkdir()
    data = CAPTURE.read_bytes()
    keeper, health = keeper_in(keep, keep_max_bytes=int(1.5 * len(data)))
    host = keeper.store.host
    (victim_dir / f"{host}.xplane.pb").write_bytes(data)  # a folder that looks like a run
    (victim_dir / "notes.txt").write_text("keep me")
    profile = keep / "plugins" / "profile"
    profile.mkdir(parents=True)
    (profile / "2000_01_01_00_00_00_w0000_step0").symlink_to(victim_dir)
    old = profile / "2000_01_01_00_00_01_w0001_step0"
    old.mkdir()
    (old / f"{host}.xplane.pb").symlink_to(victim)
    for i in range(3):
        keeper.keep(window(), record(i), data)
    assert victim.read_bytes() == b"do not overwrite"
    assert sorted(p.name for p in victim_dir.iterdir()) == sorted(
        [f"{host}.xplane.pb", "notes.txt"])
    assert health.errors == {} and health.snapshot().kept == 3
    ours = [p for p in profile.glob(f"*/{host}.xplane.pb") if not os.path.islink(p)
            and not os.path.islink(p.parent)]
    assert len(ours) == 1  # the budget holds one: the newest, the links untouched
