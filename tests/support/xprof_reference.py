"""XProf 2.24.2 run at test time on a copy of a capture, cached per test session.

XProf writes cache files next to a capture and may reuse them, so each conversion runs on
a fresh copy in a new temporary folder.
"""

from __future__ import annotations

import functools
import json
import pathlib
import shutil
import tempfile
from typing import Any

TOOLS = ("overview_page", "input_pipeline_analyzer", "kernel_stats", "memory_profile",
         "framework_op_stats")


def run_tool(capture: pathlib.Path, tool: str) -> Any:
    from xprof.convert import raw_to_tool_data

    with tempfile.TemporaryDirectory(prefix="tfobs-xprof-") as tmp:
        copy = pathlib.Path(tmp) / capture.name
        shutil.copyfile(capture, copy)
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], tool,
                                                       {"use_saved_result": False})
    if isinstance(data, bytes):
        data = data.decode()
    return json.loads(data) if data else None


@functools.cache
def reference(capture: str, tool: str) -> Any:
    return run_tool(pathlib.Path(capture), tool)


def step_names(summary: Any) -> list[str]:
    """A summary's steps as XProf names them on a CPU capture: marker name and number
    ("train 9", "test 9")."""
    return [f"{s.marker} {s.step_num}" for s in summary.steps.items]


def xprof_steps(capture: pathlib.Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(steps, summary properties) of the Input Pipeline Analyzer, times in seconds."""
    table = reference(str(capture), "input_pipeline_analyzer")[1]
    cols = [c["id"] for c in table["cols"]]
    steps = []
    for row in table.get("rows", []):
        v = dict(zip(cols, (c.get("v") for c in row["c"]), strict=False))
        def ms(k: str, v: dict = v) -> float:
            return float(v.get(k) or 0.0) / 1e3

        steps.append({
            "name": v["stepnum"],
            "duration_s": ms("stepTimeMs"),
            "input": ms("infeedTimeMs"),
            "output": ms("outfeedTimeMs"),
            "kernel_launch": ms("kernelLaunchTimeMs"),
            "host_compute": ms("hostComputeTimeMs"),
            "device_compute": ms("deviceComputeTimeMs"),
            "device_to_device": ms("deviceToDeviceTimeMs"),
            "device_collectives": ms("deviceCollectivesTimeMs"),
            "compile": ms("compileTimeMs"),
            "other": ms("otherTimeMs"),
        })
    return steps, table.get("p", {})


def xprof_memory(capture: pathlib.Path) -> dict[str, dict[str, float]]:
    data = reference(str(capture), "memory_profile") or {}
    out = {}
    for name, prof in data.get("memoryProfilePerAllocator", {}).items():
        peak = prof.get("profileSummary", {}).get("peakStats", {})
        out[name] = {
            "peak_bytes": int(peak.get("peakBytesInUse", 0)),
            "fragmentation": float(peak.get("fragmentation", 0.0)),
            "capacity": int(prof.get("profileSummary", {}).get("memoryCapacity", 0)),
        }
    return out
