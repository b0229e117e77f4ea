"""Ask the installed XProf wheel which kernel names it counts as using Tensor/matrix cores.

XProf's published source lags its wheel, so its name rules are read off its behaviour: a
copy of a real AMD capture (`tracelens__mi300_jax08_gemm__tw003`) gets one kernel event per
probed name on its first GPU plane (the real kernel event's stats, a new name each), its
`device_vendor` stat set to the vendor whose rules are probed, and XProf's `kernel_stats`
tool says for each name whether the kernel "uses Tensor Core".
"""

from __future__ import annotations

import functools
import pathlib
import tempfile

from tests.support.xprof_reference import run_tool

TEMPLATE = (pathlib.Path(__file__).parents[1] / "data" / "captures"
            / "tracelens__mi300_jax08_gemm__tw003.xplane.pb")
VENDOR_TEXT = {"amd": "AMD", "nvidia": "Nvidia"}


def _probe_capture(names: tuple[str, ...], vendor: str) -> bytes:
    from tfobs.xspace import schema

    space = schema.XSpace.FromString(TEMPLATE.read_bytes())
    plane = next(p for p in space.planes if p.name.startswith("/device:GPU:")
                 and any(len(line.events) for line in p.lines))
    vendor_mid = next(mid for mid, md in plane.stat_metadata.items()
                      if md.name == "device_vendor")
    for stat in plane.stats:
        if stat.metadata_id == vendor_mid:
            stat.ClearField("ref_value")
            stat.str_value = VENDOR_TEXT[vendor]
    line = next(line for line in plane.lines if len(line.events))
    template = schema.XEvent()
    template.CopyFrom(line.events[0])
    for other in plane.lines:
        del other.events[:]
    next_id = max(plane.event_metadata) + 1
    for k, name in enumerate(names):
        mid = next_id + k
        plane.event_metadata[mid].id = mid
        plane.event_metadata[mid].name = name
        ev = line.events.add()
        ev.CopyFrom(template)
        ev.metadata_id = mid
        ev.offset_ps = template.offset_ps + k * 10_000_000
        ev.duration_ps = 1_000_000
    return space.SerializeToString()


@functools.cache
def xprof_uses_tensor_cores(names: tuple[str, ...], vendor: str) -> dict[str, bool]:
    """{kernel name: XProf's "is_kernel_using_tensor_core"} for names on a `vendor` GPU."""
    with tempfile.TemporaryDirectory(prefix="tfobs-probe-") as tmp:
        path = pathlib.Path(tmp) / "probe.xplane.pb"
        path.write_bytes(_probe_capture(names, vendor))
        data = run_tool(path, "kernel_stats")
    table = data[0] if isinstance(data, list) else data
    cols = [c["id"] for c in table["cols"]]
    out: dict[str, bool] = {}
    for row in table.get("rows", []):
        v = dict(zip(cols, (c.get("v") for c in row["c"]), strict=False))
        out[v["kernel_name"]] = bool(v["is_kernel_using_tensor_core"])
    return out
