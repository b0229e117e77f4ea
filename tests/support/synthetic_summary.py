"""Hand-built WindowSummary objects with every field set, for exporter tests.

Synthetic on purpose: this machine has no GPU, so the GPU, Tensor Core and NVML parts of a
summary cannot come from a local capture. Values are distinct so a figure mapped to the
wrong series shows up.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfobs.sources.gpm import GpmFigures
from tfobs.summary import (
    DeviceActivity,
    Environment,
    InputBound,
    InputPipeline,
    Kernels,
    MemoryStat,
    Ops,
    Step,
    Steps,
    TfDataStage,
    WindowSummary,
)


def synthetic_gpu_summary(n_steps: int = 4, start_ns: int = 1_700_000_000_000_000_000
                          ) -> WindowSummary:
    items = tuple(
        Step(step_num=100 + i, start_ns=start_ns + i * 50_000_000, duration_s=0.040 + 0.001 * i,
             marker="train")
        for i in range(n_steps)
    )
    return WindowSummary(
        start_ns=start_ns,
        duration_s=0.25,
        steps=Steps(count=n_steps, method="markers", mean_s=0.0415, items=items),
        breakdown_s={"input": 0.012, "device_compute": 0.020, "kernel_launch": 0.004,
                     "host_compute": 0.005, "other": 0.0005},
        device_compute_16bit_ratio=0.37,
        input_bound=InputBound(ratio=0.29, verdict="highly", advice="prefetch"),
        input_pipeline=InputPipeline(
            host_input_s={"preprocessing": 0.006, "enqueue": 0.001, "demanded_file_read": 0.002},
            slowest_stage=TfDataStage("Iterator::Root::Prefetch::Map", self_s=0.020, count=8),
        ),
        ops=Ops(host_s=0.3, device_s=0.7, host_ratio=0.3),
        kernels=Kernels(total_s=0.080, tensor_core_s=0.020, eligible_op_s=0.060,
                        eligible_op_tensor_core_s=0.015),
        devices=(
            DeviceActivity(
                device="/device:GPU:0", span_s=0.2, busy_s=0.15,
                idle_s={"kernel_launch": 0.03, "short_gap": 0.01, "other": 0.01},
                kernel_count=400, mean_kernel_s=0.0002, launch_delay_mean_s=0.00003,
                launch_delay_p95_s=0.00009, small_kernel_ratio=0.45,
                copy_s={"h2d": 0.002, "d2h": 0.0005}, copy_bytes={"h2d": 4.0e6, "d2h": 1.0e3},
                collective_s=0.003,
            ),
        ),
        memory=(MemoryStat(allocator="GPU_0_bfc", peak_bytes=3_000_000_000,
                           capacity_bytes=16_000_000_000, fragmentation_ratio=0.12),),
        environment=Environment(hosts=("h",), device_type="GPU", device_count=1,
                                framework_version="2.21.0"),
    )


@dataclass(frozen=True)
class SyntheticGpuSample:
    """Same fields as tfobs.sources.nvml.GpuSample (no GPU here to read a real one)."""

    index: int = 0
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    name: str = "Synthetic GPU"
    device: str = "/device:GPU:0"
    utilization_ratio: float = 0.83
    memory_used_bytes: int = 5_000_000_000
    memory_total_bytes: int = 16_000_000_000
    power_watts: float = 210.5
    temperature_celsius: float = 61.0
    sm_clock_hertz: float = 1.41e9
    memory_clock_hertz: float = 1.215e9
    throttle_reasons: tuple[str, ...] = ("sw_power_cap",)
    gpm: GpmFigures | None = GpmFigures(  # a bf16 matmul on an H200, as GPM read it
        tensor_active_ratio=0.748, tensor_pipe_ratio=(("hmma", 0.748), ("imma", 0.0)),
        sm_active_ratio=0.763, sm_occupancy_ratio=0.113, dram_bandwidth_ratio=0.143,
        math_pipe_ratio=(("fp16", 0.0), ("fp32", 0.0)), interval_s=1.0)


@dataclass(frozen=True)
class SyntheticMemorySample:
    device: str = "/device:GPU:0"
    current_bytes: int = 2_000_000_000
    peak_bytes: int = 2_500_000_000


class SyntheticSource:
    """Stands in for NvmlSampler / TfMemorySampler: `.available` and `.latest()`."""

    def __init__(self, samples: tuple[object, ...], available: bool = True) -> None:
        self.available = available
        self._samples = samples

    def latest(self) -> tuple[object, ...]:
        return self._samples
