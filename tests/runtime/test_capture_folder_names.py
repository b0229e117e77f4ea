"""Folders in the capture folder named by someone else: the sweep of dead processes' folders
at enable() reads each name's process id, and a name that holds none is left alone rather
than raised out of enable() (the capture folder is often /dev/shm, which any user writes)."""

from __future__ import annotations

import os

import pytest

from tfobs.capture.folder_cleanup import owner, sweep_stale_dirs

ODD_OWNERS = (
    "²",  # a digit to str.isdigit(), not to int()
    "١٢",  # Arabic-Indic digits: int() reads them, no process has that name
    "99999999999999999999",  # past what kill() takes (OverflowError)
    "4294967296",  # 2**32: past pid_t
    "2147483648p1",  # 2**31, with a PID namespace
    "0x10",
    "",
)


@pytest.mark.parametrize("odd", ODD_OWNERS)
def test_a_folder_named_by_no_process_id_is_left_alone(tmp_path, odd: str) -> None:
    folder = tmp_path / f"tfobs-{odd}-abc"
    folder.mkdir()
    assert sweep_stale_dirs(str(tmp_path)) == 0
    assert folder.exists()


def test_odd_names_do_not_stop_the_sweep_of_dead_processes(tmp_path) -> None:
    for odd in ODD_OWNERS:
        (tmp_path / f"tfobs-{odd}-x").mkdir()
    dead = tmp_path / "tfobs-999999999-abc"  # a PID no process has (past Linux's 2**22)
    mine = tmp_path / f"tfobs-{owner()}-abc"
    dead.mkdir()
    mine.mkdir()
    assert sweep_stale_dirs(str(tmp_path)) == 1
    assert not dead.exists() and mine.exists()
    assert len(os.listdir(tmp_path)) == len(ODD_OWNERS) + 1
