"""A tf.data stage name many `::Shard` deep: the shard-after-read finding costs the name's
length, not a copy of it per `Shard` above the stage."""

from __future__ import annotations

import time
import tracemalloc

from tests.conftest import CAPTURES
from tfobs.analysis import tfdata
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.summary import TfDataStage
from tfobs.xspace import schema


def test_a_deep_shard_name_holds_no_copy_per_shard() -> None:
    # Each `Shard` above a stage was keyed by its prefix, made whole: a name 16,000 deep (a
    # 200 KB capture) held 16,000 copies of up to 112 KB (1 GB); 32,000 deep ran out of 3 GB.
    above = "Iterator::Root" + "::Shard" * 8_000
    stages = (
        TfDataStage(above + "::TFRecord", 1.0, 3),
        TfDataStage(above + "::Map", 0.5, 3),
        TfDataStage("Iterator::Other::Shard::Batch", 0.25, 3),
    )
    tracemalloc.start()
    try:
        t0 = time.process_time()
        found = tfdata.shard_after_read(stages)
        took = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found == (above, ("Map", "TFRecord"), 1.5)
    assert peak < 40 << 20, peak  # 217 MB of prefixes before; the names are 56 KB each
    assert took < 2.0, took


def test_the_greatest_name_wins_a_tie() -> None:
    # Shards with the same seconds below them: the greatest name, as max() of the names.
    stages = (
        TfDataStage("Iterator::Root::Shard::Shard::TFRecord", 1.0, 3),
        TfDataStage("Iterator::Root::Zip[0]::Shard::Map", 1.0, 3),
        TfDataStage("Iterator::Root::Zip[1]::Shard::Map", 1.0, 3),
        TfDataStage("Iterator::Root::Zip[1]::Shard[2]::Batch", 0.5, 3),
    )
    assert tfdata.shard_after_read(stages) == ("Iterator::Root::Zip[1]::Shard", ("Map",), 1.0)
    assert tfdata.shard_after_read(stages[:1]) == (
        "Iterator::Root::Shard::Shard", ("TFRecord",), 1.0)


def test_a_capture_of_a_deep_shard_stage_reduces_in_its_size() -> None:
    x = schema.XSpace()
    x.ParseFromString((CAPTURES / "advice__tfdata_heavy_map.xplane.pb").read_bytes())
    plane = x.planes[0]
    mid = max(plane.event_metadata) + 1
    plane.event_metadata[mid].id = mid
    plane.event_metadata[mid].name = "Iterator::Root" + "::Shard" * 12_000 + "::TFRecord"
    line = plane.lines.add(id=999, name="tf_data_extra", timestamp_ns=plane.lines[0].timestamp_ns)
    line.events.add(metadata_id=mid, offset_ps=10, duration_ps=10**9)
    data = x.SerializeToString()
    t0 = time.process_time()
    s = reduce_xspace(data)
    took = time.process_time() - t0
    assert s.input_pipeline.shard_after_read_stage == "Iterator::Root" + "::Shard" * 12_000
    assert s.input_pipeline.shard_after_read_readers == ("TFRecord",)
    assert took < 5.0, took
