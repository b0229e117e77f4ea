"""Where the capture recorders (`tools/record_*_captures.py`) put what they record beside a
capture: XProf's answers (`<folder>/<stem>.<tool>.json`) and the provenance file."""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

from tests.support.xprof_reference import TOOLS, run_tool


def stem_of(capture: pathlib.Path) -> str:
    return capture.name.removesuffix(".xplane.pb")


def save_answers(capture: pathlib.Path, folder: pathlib.Path,
                 tools: tuple[str, ...] = TOOLS) -> None:
    """XProf 2.24.2's `tools` (its five main ones) on a fresh copy of `capture`, one JSON
    file each."""
    folder.mkdir(parents=True, exist_ok=True)
    for tool in tools:
        (folder / f"{stem_of(capture)}.{tool}.json").write_text(
            json.dumps(run_tool(capture, tool)) + "\n")


def save_provenance(folder: pathlib.Path, capture: pathlib.Path, fields: dict[str, Any]
                    ) -> pathlib.Path:
    """`<folder>/<stem>.json`: the capture's name and size, `fields`, the time written."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem_of(capture)}.json"
    path.write_text(json.dumps({
        "capture": capture.name, **fields, "bytes": capture.stat().st_size,
        "recorded_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
    }, indent=1) + "\n")
    return path
