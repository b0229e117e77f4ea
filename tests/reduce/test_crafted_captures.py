"""Captures made to hurt the reduction (the red team's): small files whose work must stay
in proportion to their size, and damage that leaves the rest of a capture readable."""

from __future__ import annotations

import numpy as np
import pytest

from tfobs.analysis import pipeline
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.xspace import schema


def _steps_and_gpu_planes(steps: int, planes: int) -> bytes:
    """`steps` step markers on the host and `planes` GPU planes of one kernel each (in step
    j % steps): the file grows as steps + planes."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name="/host:CPU")
    host.event_metadata[1].id = 1
    host.event_metadata[1].name = "train"
    for sid, name in ((1, "_r"), (2, "step_num")):
        host.stat_metadata[sid].id = sid
        host.stat_metadata[sid].name = name
    line = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for i in range(steps):
        e = line.events.add(metadata_id=1, offset_ps=i * 1000, duration_ps=900)
        e.stats.add(metadata_id=1, int64_value=1)
        e.stats.add(metadata_id=2, int64_value=i)
    for j in range(planes):
        gpu = x.planes.add(id=10 + j, name=f"/device:GPU:{j}")
        gpu.event_metadata[1].id = 1
        gpu.event_metadata[1].name = "gemm_kernel"
        stream = gpu.lines.add(id=1, name="Stream #1", timestamp_ns=1000)
        stream.events.add(metadata_id=1, offset_ps=(j % steps) * 1000 + 10, duration_ps=100)
    return x.SerializeToString()


def test_steps_times_gpu_streams_is_no_work_of_the_reduction(monkeypatch) -> None:
    # 300 steps x 300 one-kernel GPU planes (a 28 KB file) looked up every step in every
    # stream: 90,000 lookups and as many empty arrays kept per step (2,000 x 2,000: 140 s
    # and 2.2 GB). Only the steps a stream's events reach are looked at.
    looked = []
    real, real_by_event = pipeline._overlapping, pipeline._overlapping_by_event

    def counted(ld, near, lo, hi, *rest):
        looked.append(int((hi - lo).sum()))  # the (step, event) candidates searched
        return real(ld, near, lo, hi, *rest)

    def counted_by_event(ld, lo, hi, *rest):
        looked.append(int(np.maximum(hi - lo, 0).sum()))  # the same, from the events' side
        return real_by_event(ld, lo, hi, *rest)

    monkeypatch.setattr(pipeline, "_overlapping", counted)
    monkeypatch.setattr(pipeline, "_overlapping_by_event", counted_by_event)
    s = reduce_xspace(_steps_and_gpu_planes(300, 300))
    assert s.steps.count == 298  # first and last dropped, as XProf does
    assert 0 < sum(looked) <= 3 * 300, sum(looked)


def test_a_capture_of_more_planes_than_any_host_has_is_one_line_before_any_work(
        monkeypatch) -> None:
    # 20,000 one-event GPU planes (a 1 MB file) took 15 s and 340 MB: each plane costs its
    # own fixed work. The reader names the count at once; a host's real capture reduces.
    from tfobs.errors import CaptureError
    from tfobs.xspace import reader

    with pytest.raises(CaptureError, match=r"holds 4,097 planes.*at most 4,096") as info:
        reduce_xspace(_steps_and_gpu_planes(4, reader.MAX_PLANES))  # + the host
    assert "\n" not in str(info.value)
    at_most = reduce_xspace(_steps_and_gpu_planes(4, reader.MAX_PLANES - 1))
    # at the bound (with the host) the capture reduces, as a small one does
    assert at_most.steps.count == reduce_xspace(_steps_and_gpu_planes(4, 4)).steps.count == 4
    monkeypatch.setattr(reader, "MAX_PLANES", 3)  # the bound is the reader's, read per parse
    with pytest.raises(CaptureError, match="holds 4 planes"):
        reduce_xspace(_steps_and_gpu_planes(4, 3))


def test_a_marker_whose_metadata_is_missing_is_a_nameless_event() -> None:
    # A step marker pointing at no metadata entry: XProf shows a nameless event; the
    # capture used to fail whole ("KeyError: 18"), a lost window in a job.
    x = schema.XSpace()
    x.ParseFromString(_steps_and_gpu_planes(8, 0))
    host = x.planes[0]
    host.lines[0].events[3].metadata_id = 18
    s = reduce_xspace(x.SerializeToString())
    assert s.steps.count >= 5
    assert "" in {st.marker for st in s.steps.items} or s.steps.count == 6


@pytest.mark.parametrize(("steps", "planes", "count"), [(1, 40, 1), (40, 1, 1), (40, 40, 38)])
def test_the_lopsided_shapes_reduce(steps: int, planes: int, count: int) -> None:
    # On a GPU a step is kept where the device ran some of it (one plane: one step)
    s = reduce_xspace(_steps_and_gpu_planes(steps, planes))
    assert s.steps.count == count


def _overlapping(ld, begin: int, end: int) -> np.ndarray:
    """The plain reference: positions of the line's events overlapping [begin, end]."""
    base = ld.start_ps
    return np.flatnonzero((ld.start_arr < end - base) & (ld.end_arr > begin - base))


@pytest.mark.parametrize("stem", [
    "recorded__h100_jax0.11.2__transformer_train_bf16",
    "recorded__h100_jax0.11.2__input_bound_host_wait",
    "recorded__h100_jax0.11.2__launch_bound_tiny_ops"])
def test_device_events_per_step_are_the_plain_overlap_test(stem: str) -> None:
    from tests.conftest import CAPTURES
    from tfobs.analysis.environment import accelerator_planes
    from tfobs.analysis.steps import find_steps
    from tfobs.analysis.timeline import Timeline, time_base_ps
    from tfobs.xspace.reader import parse

    space = parse((CAPTURES / f"{stem}.xplane.pb").read_bytes())
    _, accel = accelerator_planes(space)
    host_view = space.plane("/host:CPU")
    base = time_base_ps([host_view, *accel])
    host = Timeline(host_view, base)
    devices = [Timeline(p, base) for p in accel]
    groups = find_steps(host, has_device=True).groups
    assert groups and devices
    got = pipeline._stream_hits(groups, devices).overlaps()
    want = {}
    for tl in devices:
        for ld in tl.lines:
            if ld.name.startswith("Stream"):
                for gi, g in enumerate(groups):
                    at = _overlapping(ld, g.begin_ps, g.end_ps)
                    if at.size:
                        want[(gi, id(ld))] = at.tolist()
    assert got == want and want


def test_many_ignore_errors_stages_cost_one_pass() -> None:
    # 16,000 ignore_errors() stages (a 2 MB capture) took 42 s: each one scanned every
    # stage name for its input. The stages' inputs are found in one pass.
    import time

    from tfobs.analysis.tfdata import ignore_errors_drops
    from tfobs.summary import TfDataStage

    stages = []
    for k in range(20_000):
        stages.append(TfDataStage(f"Iterator::Zip[{k}]::IgnoreErrors", 1e-6, 3))
        stages.append(TfDataStage(f"Iterator::Zip[{k}]::IgnoreErrors::Map", 1e-6,
                                  5 if k == 777 else 3))
    began = time.perf_counter()
    got = ignore_errors_drops(tuple(stages))
    assert time.perf_counter() - began < 2.0
    assert got == ("Iterator::Zip[777]::IgnoreErrors", 3, 5, "Map")


def test_a_capture_of_more_lines_than_any_host_has_is_one_line_before_any_work(
        monkeypatch) -> None:
    # 4,095 GPU planes of 1,000 one-event lines (130 MB) ran past 400 s and 9 GB: each line
    # costs its own fixed work, whatever plane holds it. The reader names the count at once.
    from tfobs.errors import CaptureError
    from tfobs.xspace import reader

    def lines_over_planes(planes: int, lines: int) -> bytes:
        x = schema.XSpace()
        x.ParseFromString(_steps_and_gpu_planes(4, 0))
        for j in range(planes):
            gpu = x.planes.add(id=10 + j, name=f"/device:GPU:{j}")
            gpu.event_metadata[1].id = 1
            gpu.event_metadata[1].name = "gemm_kernel"
            for k in range(lines):
                stream = gpu.lines.add(id=k, name=f"Stream #{k}", timestamp_ns=1000)
                stream.events.add(metadata_id=1, offset_ps=(k % 4) * 1000 + 10,
                                  duration_ps=100)
        return x.SerializeToString()

    monkeypatch.setattr(reader, "MAX_LINES", 40)  # the bound is the reader's, read per parse
    with pytest.raises(CaptureError, match=r"holds 41 lines.*at most 40") as info:
        reduce_xspace(lines_over_planes(4, 10))  # + the host's line
    assert "\n" not in str(info.value)
    assert reduce_xspace(lines_over_planes(3, 13)).steps.count == 4  # 40: at the bound


def test_a_negative_loop_iteration_is_no_loop_of_2_62_iterations() -> None:
    # iter_num -1 on the executor runs of a map_fn's loop: read as 2**64 - 1, the advice
    # said "4611686018427387904 iterations long". A negative iteration is a damaged stat.
    from tests.conftest import CAPTURES

    x = schema.XSpace()
    x.ParseFromString((CAPTURES / "generated__tf2.21cpu__map_fn_per_example_loop.xplane.pb")
                      .read_bytes())
    assert reduce_xspace(x.SerializeToString()).steps.in_graph_loop_iterations == 64
    host = next(p for p in x.planes if p.name == "/host:CPU")
    it = next(k for k, m in host.stat_metadata.items() if m.name == "iter_num")
    for line in host.lines:
        for e in line.events:
            for st in e.stats:
                if st.metadata_id == it and st.int64_value > 0:
                    st.int64_value = -1
    s = reduce_xspace(x.SerializeToString())
    assert s.steps.in_graph_loop_iterations_max < 2**31
    assert "in_graph_loop" not in {a.code for a in s.advice}


@pytest.mark.parametrize("stem", ["advice__tfdata_heavy_map",
                                  "generated__jax0.10cpu__keras_jax_fit"])
def test_event_names_no_event_uses_are_no_evidence_and_no_scan(stem: str) -> None:
    """A table of names no event uses (a crafted capture: a million of them took 15 s, a
    scan by name per analysis) says nothing of the window: the same summary as without
    them, and the scans read the events' own names only."""
    from tests.conftest import CAPTURES
    from tfobs.analysis.timeline import Timeline
    from tfobs.xspace import reader

    data = (CAPTURES / f"{stem}.xplane.pb").read_bytes()
    x = schema.XSpace()
    x.ParseFromString(data)
    host = next(p for p in x.planes if p.name == "/host:CPU")
    first = max(host.event_metadata) + 1
    # Names each analysis looks for: Keras's fit frames, a JAX call, tf.data stages, steps,
    # compiles, eager ops, host callbacks, sleeps.
    baits = ["$trainer.py:100 fit", "$epoch_iterator.py:50 next", "PjitFunction(train)",
             "Iterator::Prefetch::Map", "train", "XlaCompile", "EagerKernelExecute",
             "PyFunc:Op", "$time.py:0 sleep", "MemcpyH2D", "__inference_step_9"]
    for k in range(20_000):
        md = host.event_metadata[first + k]
        md.id, md.name = first + k, f"{baits[k % len(baits)]}{k // len(baits) or ''}"
    crafted = x.SerializeToString()
    want, got = reduce_xspace(data).to_dict(), reduce_xspace(crafted).to_dict()
    assert got == want
    plane = next(p for p in reader.parse(crafted).planes if p.name == "/host:CPU")
    used = set(plane.events.mid.tolist())
    assert set(Timeline(plane).names) == used
    assert len(plane.event_names) >= len(used) + 20_000  # lookups by id still see all


def test_functional_loops_read_a_kernel_type_written_as_a_string_too() -> None:
    """The async op marks' `kernel_type` is filtered in bulk where it is a reference to a
    stat name (as TensorFlow writes it); written as a plain string, each mark is read in
    full, to the same loops."""
    from tests.conftest import CAPTURES

    data = (CAPTURES / "generated__tf2.21cpu__ctc_loss_loop.xplane.pb").read_bytes()
    x = schema.XSpace()
    x.ParseFromString(data)
    host = next(p for p in x.planes if p.name == "/host:CPU")
    kt = next(k for k, m in host.stat_metadata.items() if m.name == "kernel_type")
    marks = {k for k, m in host.event_metadata.items() if m.name.startswith(
        "ExecutorState::ProcessAsync::")}
    changed = 0
    for line in host.lines:
        for e in line.events:
            if e.metadata_id in marks:
                for st in e.stats:
                    if st.metadata_id == kt and st.HasField("ref_value"):
                        st.str_value = host.stat_metadata[st.ref_value].name
                        changed += 1
    assert changed > 1000
    want = reduce_xspace(data).steps
    got = reduce_xspace(x.SerializeToString()).steps
    assert want.in_graph_loop_s > 0 and want.in_graph_loop_iterations == 100
    assert (got.in_graph_loop_s, got.in_graph_loop_iterations, got.in_graph_loop_scopes) == (
        want.in_graph_loop_s, want.in_graph_loop_iterations, want.in_graph_loop_scopes)
