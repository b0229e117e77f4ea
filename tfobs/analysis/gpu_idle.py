"""Per-GPU idle breakdown, launch delays, copies. Placeholder: the GPU analysis replaces it."""

from __future__ import annotations

from tfobs.summary import DeviceActivity, Steps
from tfobs.xspace.reader import SpaceView


def reduce_devices(
    space: SpaceView, steps: Steps, *, short_gap_s: float = 30e-6
) -> tuple[DeviceActivity, ...]:
    return ()
