"""Metadata ids are names, not positions: a capture whose event ids are renumbered far
apart (past the tables indexed by id, `timeline.DENSE_IDS`) reduces to the same summary.
The analyses that look ids up by a table built per line take their sorted-search path
there (JAX's compile path per step among them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfobs.analysis.pipeline import reduce_xspace
from tfobs.analysis.timeline import DENSE_IDS
from tfobs.xspace import schema

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "captures"


def _renumbered(data: bytes, offset: int) -> bytes:
    """`data` with every plane's event metadata ids moved up by `offset`."""
    space = schema.XSpace.FromString(data)
    for plane in space.planes:
        table = {mid: schema.XEventMetadata.FromString(md.SerializeToString())
                 for mid, md in plane.event_metadata.items()}
        plane.event_metadata.clear()
        for mid, md in table.items():
            md.id = mid + offset
            plane.event_metadata[mid + offset].CopyFrom(md)
        for line in plane.lines:
            for event in line.events:
                event.metadata_id += offset
    return space.SerializeToString()


def _comparable(data: bytes) -> dict:
    d = reduce_xspace(data).to_dict()
    d.pop("reduced_at", None)
    return d


@pytest.mark.parametrize("name", [
    "generated__jax0.10cpu__metric_read_each_step",  # a step that lowers and compiles
    "generated__tf2.21cpu__ps_chief_async",
])
def test_ids_renumbered_far_apart_give_the_same_summary(name: str) -> None:
    data = (CAPTURES / f"{name}.xplane.pb").read_bytes()
    far = _renumbered(data, 4 * DENSE_IDS)
    assert _comparable(far) == _comparable(data)
