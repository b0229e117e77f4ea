"""GPU idle breakdown, launch delays, copies and Tensor Core aggregates.

On the real AMD captures the figures are recomputed here from the raw events with plain
interval arithmetic; on a synthetic NVIDIA-style capture they are checked against answers
worked out by hand.
"""

from __future__ import annotations

import math
import pathlib
import random
import re

import numpy as np
import pytest

from tests.conftest import capture_paths
from tests.support import synthetic_gpu
from tests.support.synthetic_gpu import Kernel
from tfobs.analysis.gpu_idle import merge, merge_columns, reduce_devices
from tfobs.analysis.kernels import reduce_kernels
from tfobs.analysis.pipeline import analyze
from tfobs.summary import Steps
from tfobs.xspace import schema
from tfobs.xspace.reader import parse

AMD_CAPTURES = [p for p in capture_paths() if p.name.startswith("tracelens__mi300")]
SHORT_GAP_PS = 30e-6 * 1e12
# XProf's AMD Tensor Core name rules, written out again for the independent check.
AMD_TC = re.compile(r"_MI\d+x\d+x\d+|mfma|wmma|gemm_fusion|attn_fwd|FMHA_FWD|bwd_kernel_|"
                    r"miopenSp3AsmConvRage|moe_mxgemm|Custom_Cijk_|_xdl")


def _raw(capture: pathlib.Path):
    """Per GPU plane: [(start_ps, end_ps, name, stats)]; host: {corr: (start, end, name)}."""
    space = schema.XSpace()
    space.ParseFromString(capture.read_bytes())
    devices, host = {}, {}
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        events = {k: v.name for k, v in plane.event_metadata.items()}
        rows = []
        for line in plane.lines:
            for ev in line.events:
                start = line.timestamp_ns * 1000 + ev.offset_ps
                stats = {names[s.metadata_id]: _value(s, names) for s in ev.stats}
                rows.append((start, start + ev.duration_ps, events[ev.metadata_id], stats))
        if plane.name.startswith("/device:GPU:") and rows:
            devices[plane.name] = rows
        elif plane.name == "/host:CPU":
            for start, end, name, stats in rows:
                if "correlation_id" in stats:
                    host[stats["correlation_id"]] = (start, end, name)
    return devices, host


def _value(stat, names):
    kind = stat.WhichOneof("value")
    return names[stat.ref_value] if kind == "ref_value" else getattr(stat, kind)


@pytest.mark.parametrize("capture", AMD_CAPTURES, ids=lambda p: p.name.split(".")[0])
def test_idle_breakdown_matches_interval_arithmetic(capture: pathlib.Path) -> None:
    devices, host = _raw(capture)
    ours = {d.device: d for d in reduce_devices(parse(capture.read_bytes()), Steps())}
    assert set(ours) == set(devices)
    for device, rows in devices.items():
        d = ours[device]
        rows.sort()
        # busy: union of intervals, by marking each picosecond boundary
        points = sorted({t for s, e, *_ in rows for t in (s, e)})
        busy = sum(b - a for a, b in zip(points, points[1:], strict=False)
                   if any(s <= a and b <= e for s, e, *_ in rows))
        span = max(e for _, e, *_ in rows) - rows[0][0]
        idle = {"kernel_launch": 0, "short_gap": 0, "other": 0}
        covered_until = rows[0][1]
        for s, e, _name, stats in rows[1:]:
            if s > covered_until:
                gap = s - covered_until
                launch = host.get(stats.get("correlation_id"))
                if launch and launch[0] > covered_until:
                    idle["kernel_launch"] += gap
                elif gap < SHORT_GAP_PS:
                    idle["short_gap"] += gap
                else:
                    idle["other"] += gap
            covered_until = max(covered_until, e)
        assert d.busy_s == pytest.approx(busy * 1e-12, rel=1e-9)
        assert d.span_s == pytest.approx(span * 1e-12, rel=1e-9)
        assert busy + sum(idle.values()) == span
        for cause, ps in idle.items():
            assert d.idle_s[cause] == pytest.approx(ps * 1e-12, rel=1e-9, abs=1e-12), cause

        kernels = [(s, e, stats) for s, e, _n, stats in rows if "kernel_details" in stats
                   and "memcpy" not in host.get(stats.get("correlation_id"), (0, 0, ""))[2].lower()]
        assert d.kernel_count == len(kernels)
        delays = [max(s - host[st["correlation_id"]][1], 0) * 1e-12
                  for s, _e, st in kernels if st.get("correlation_id") in host]
        if not delays:  # a copy-only GPU (the legacy capture's GPU:0)
            assert d.launch_delay_mean_s == d.launch_delay_p95_s == 0.0
            continue
        assert d.launch_delay_mean_s == pytest.approx(float(np.mean(delays)), rel=1e-9)
        assert d.launch_delay_p95_s == pytest.approx(
            float(np.percentile(delays, 95, method="inverted_cdf")), rel=1e-9)


def test_amd_captures_show_launch_bound_gaps() -> None:
    # The JAX microbenchmarks dispatch one small program at a time: the GPU mostly waits
    # for the host, which the breakdown must say.
    for capture in AMD_CAPTURES:
        for d in reduce_devices(parse(capture.read_bytes()), Steps()):
            assert d.idle_s["kernel_launch"] > d.idle_s["other"], (capture.name, d.device)


@pytest.mark.parametrize("capture", AMD_CAPTURES, ids=lambda p: p.name.split(".")[0])
def test_tensor_core_aggregates_match_raw_kernel_sums(capture: pathlib.Path) -> None:
    devices, _host = _raw(capture)
    total = tc = 0
    for rows in devices.values():
        for s, e, name, stats in rows:
            ns = (e - s) // 1000
            if stats.get("kernel_details") and ns > 0:
                total += ns
                if AMD_TC.search(name):
                    tc += ns
    k = reduce_kernels(parse(capture.read_bytes()))
    assert k.total_s == pytest.approx(total * 1e-9, rel=1e-12)
    assert k.tensor_core_s == pytest.approx(tc * 1e-9, rel=1e-12)


# Hand-worked timeline (microseconds). Stream 7 unless noted; launch calls last 5 us.
#   K1 100-150 (launch 90)     first activity
#   K2 160-180 (launch 120)    gap 10 after K1, launch began before the gap: short_gap 10
#   K3 300-400 (launch 250)    gap 120, launch began after K2 ended: kernel_launch 120
#   K4 350-450 stream 8 (240)  overlaps K3: merged, no gap
#   K5 500-502 (launch 440)    gap 50 >= 30, launched early: other 50; shorter than its launch
#   H2D copy 600-610 (590)     gap 98, launched late: kernel_launch 98; 4096 bytes
#   K6 700-710 (no host call)  gap 90: other 90
#   NCCL 720-750 (launch 715)  gap 10, launched late: kernel_launch 10
SYNTHETIC = [
    Kernel("K1_h884gemm", 100, 50, 90, tf_op="model/dense/MatMul:MatMul"),
    Kernel("K2_elementwise", 160, 20, 120, tf_op="model/dense/BiasAdd:BiasAdd"),
    Kernel("K3_sgemm", 300, 100, 250, tf_op="model/dense_1/MatMul:MatMul"),
    Kernel("K4_nvjet_tst_128x64", 350, 100, 240, tf_op="model/conv/Conv2D:Conv2D", stream=8),
    Kernel("K5_tiny", 500, 2, 440, tf_op="model/relu/Relu:Relu"),
    Kernel("MemcpyH2D", 600, 10, 590, memcpy="kind_src:pageable kind_dst:device size:4096 "
           "dest:0 async:0", stream=9),
    Kernel("K6_unlinked", 700, 10, None),
    Kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 720, 30, 715),
]


def test_idle_breakdown_synthetic_gpu_known_answers() -> None:
    space = parse(synthetic_gpu.build(SYNTHETIC))
    (d,) = reduce_devices(space, Steps(count=2))
    us = 1e-6
    assert d.device == "/device:GPU:0"
    assert d.span_s == pytest.approx(650 * us)
    assert d.busy_s == pytest.approx(272 * us)
    assert d.idle_s == pytest.approx({"kernel_launch": 228 * us, "input": 0.0,
                                      "short_gap": 10 * us, "other": 140 * us})
    assert d.kernel_count == 7
    assert d.mean_kernel_s == pytest.approx(312 / 7 * us)
    assert d.launch_delay_mean_s == pytest.approx(245 / 6 * us)
    assert d.launch_delay_p95_s == pytest.approx(105 * us)
    assert d.small_kernel_ratio == pytest.approx(1 / 6)
    assert d.copy_s == pytest.approx({"h2d": 5 * us, "d2h": 0.0, "d2d": 0.0})  # per step
    assert d.copy_bytes == pytest.approx({"h2d": 2048, "d2h": 0, "d2d": 0})
    assert d.collective_s == pytest.approx(15 * us)


def test_short_gap_threshold_is_configurable_synthetic_gpu() -> None:
    space = parse(synthetic_gpu.build(SYNTHETIC))
    (d,) = reduce_devices(space, Steps(count=2), short_gap_s=60e-6)
    # K5's 50 us gap is now short; K6's 90 us gap stays "other".
    assert d.idle_s["short_gap"] == pytest.approx(60e-6)
    assert d.idle_s["other"] == pytest.approx(90e-6)


def test_kernel_table_synthetic_gpu_known_answers() -> None:
    k = reduce_kernels(parse(synthetic_gpu.build(SYNTHETIC)))
    rows = {i.name: i for i in k.items}
    us = 1e-6
    assert k.total_s == pytest.approx(312 * us)
    assert rows["K1_h884gemm"].tensor_core_rule == "xprof.nvidia.h884"
    assert rows["K4_nvjet_tst_128x64"].tensor_core_rule == "tfobs.nvidia.nvjet"
    assert k.tensor_core_s == pytest.approx(150 * us)
    # eligible: K1, K3 (MatMul), K4 (Conv2D); K3 is the eligible op without Tensor Cores
    assert k.eligible_op_s == pytest.approx(250 * us)
    assert k.eligible_op_tensor_core_s == pytest.approx(150 * us)
    assert rows["K3_sgemm"].op_name == "model/dense_1/MatMul"
    assert rows["K1_h884gemm"].registers == 32 and rows["K1_h884gemm"].block == "128,1,1"
    assert rows["K1_h884gemm"].occupancy_pct == 50.0
    assert "MemcpyH2D" not in rows


def test_odd_events_never_raise_synthetic_gpu() -> None:
    space = schema.XSpace()
    space.ParseFromString(synthetic_gpu.build(SYNTHETIC))
    gpu = next(p for p in space.planes if p.name.startswith("/device:GPU"))
    events = gpu.lines[0].events
    events[0].duration_ps = -5_000_000  # negative duration
    del events[1].stats[:]  # no stats at all
    events[2].offset_ps = -10**12  # before the line starts
    gpu.lines.add(id=99, name="Stream #99(Compute)", timestamp_ns=0)  # empty line
    del space.planes[0]  # no host plane: nothing links launches
    view = parse(space.SerializeToString())
    (d,) = reduce_devices(view, Steps(count=0))
    assert d.idle_s["kernel_launch"] == 0.0
    assert d.launch_delay_mean_s == 0.0
    assert all(v >= 0 and not math.isnan(v) for v in d.idle_s.values())
    assert d.busy_s + sum(d.idle_s.values()) == pytest.approx(d.span_s)
    k = reduce_kernels(view)
    assert k.total_s > 0


def test_cpu_and_tpu_captures_have_no_gpu_figures() -> None:
    for capture in capture_paths():
        if capture.name.startswith(("generated__", "xprof__tpu")):
            view = parse(capture.read_bytes())
            assert reduce_devices(view, Steps()) == ()
            assert reduce_kernels(view).total_s == 0.0


def test_device_times_past_int64_sum_exactly() -> None:
    # Twenty overlapping kernels and copies of 2^59 ps each (a corrupt clock, yet each time
    # in range): their sums pass int64, and the numpy sums must not wrap.
    huge_us = 2**59 / synthetic_gpu.US
    kernels = [Kernel(f"k{i % 3}", 0.0, huge_us, tf_op="model/dense/MatMul:MatMul")
               for i in range(20)]
    kernels += [Kernel("Memcpy HtoD", 0.0, huge_us, memcpy="kind:HtoD size:1024", stream=9)
                for _ in range(20)]
    data = synthetic_gpu.build(kernels)
    space = schema.XSpace()
    space.ParseFromString(data)
    gpu = next(p for p in space.planes if p.name.startswith("/device:GPU:"))
    durations = {line.name: [e.duration_ps for e in line.events] for line in gpu.lines}
    compute = next(v for k, v in durations.items() if "Compute" in k)
    copies = next(v for k, v in durations.items() if "Memcpy" in k)
    assert sum(compute) > 2**63 and sum(copies) > 2**63
    summary = analyze(data)
    row = next(r for r in summary.ops.top if r.on_device)
    assert row.total_s == sum(compute) / 1e12
    (device,) = summary.devices
    assert device.copy_s["h2d"] == sum(copies) * 1e-12  # no steps: per window
    assert device.mean_kernel_s == sum(compute) / 20 * 1e-12
    assert summary.kernels.total_s == sum(d // 1000 for d in compute) * 1e-9


def test_merge_columns_is_merge_of_the_sorted_pairs() -> None:
    # Random intervals, touching, nested, empty and repeated ones among them.
    rng = random.Random(7)
    for _ in range(2000):
        pairs = [(a, a + rng.randint(0, 20)) for a in
                 (rng.randint(0, 100) for _ in range(rng.randint(0, 30)))]
        begin = np.array([b for b, _ in pairs], np.int64)
        end = np.array([e for _, e in pairs], np.int64)
        assert merge_columns(begin, end) == merge(sorted(pairs)), pairs
