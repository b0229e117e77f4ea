"""Names from the capture as long as the job makes them stay bounded in the spans' attributes:
a window's export request must stay far below a collector's message limit (gRPC's 4 MiB)."""

from __future__ import annotations

import dataclasses

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.export.test_otel_exporter import built_summary, record_for
from tfobs.config import Config
from tfobs.export.otel import OtelExporter
from tfobs.summary import MemoryStat, TfDataStage


def test_long_capture_names_are_cut_in_attributes() -> None:
    summary = built_summary(n_steps=50)
    long = "m" * 100_000
    steps = tuple(dataclasses.replace(s, marker=long) for s in summary.steps.items)
    summary = dataclasses.replace(
        summary,
        steps=dataclasses.replace(summary.steps, items=steps),
        memory=(MemoryStat("a" * 100_000 + "_bfc", peak_bytes=1, capacity_bytes=2,
                           fragmentation_ratio=0.0),),
        input_pipeline=dataclasses.replace(
            summary.input_pipeline, slowest_stage=TfDataStage("Map::" * 30_000 + "Shard", 0.1)),
    )
    memory = InMemorySpanExporter()
    exporter = OtelExporter(Config.load(otlp_endpoint="http://127.0.0.1:1"),
                            span_exporter=memory, environ={})
    try:
        exporter.publish(summary, record_for(summary))
        assert exporter.force_flush(5.0)
        spans = memory.get_finished_spans()
    finally:
        exporter.shutdown(1.0)
    assert len(spans) > 50
    texts = [v for s in spans for v in s.attributes.values() if isinstance(v, str)]
    assert max(map(len, texts)) <= 4096
    root = next(s for s in spans if s.name == "tfobs.window")
    # The stage's own kind (its end) is still there.
    assert root.attributes["tfobs.tfdata.slowest_stage"].endswith("Shard")
    assert sum(map(len, texts)) < 1 << 20
