"""Small NVIDIA-style XSpace captures built in the test, for GPU analysis with known answers.

Layout as TensorFlow's CUPTI tracer writes it: a `/host:CPU` plane whose launch calls
(cudaLaunchKernel, cudaMemcpyAsync) carry `correlation_id`, and a `/device:GPU:N` plane with
the `device_vendor` stat whose stream lines hold kernels (`kernel_details`) and copies
(`memcpy_details`) with the same `correlation_id`. Times are given in microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfobs.xspace import schema

US = 1_000_000  # picoseconds per microsecond


@dataclass
class Kernel:
    name: str
    start_us: float
    dur_us: float
    launch_start_us: float | None = None  # host launch call; None = no host event
    launch_dur_us: float = 5.0
    tf_op: str = ""
    details: str = "regs:32 static_shared:0 dynamic_shared:0 grid:1,1,1 block:128,1,1 occ_pct:50"
    memcpy: str = ""  # memcpy_details; makes this a copy instead of a kernel
    stream: int = 7


class _Plane:
    def __init__(self, plane) -> None:
        self.plane = plane
        self.stat_ids: dict[str, int] = {}
        self.event_ids: dict[str, int] = {}

    def stat(self, name: str) -> int:
        if name not in self.stat_ids:
            sid = len(self.stat_ids) + 1
            self.stat_ids[name] = sid
            self.plane.stat_metadata[sid].id = sid
            self.plane.stat_metadata[sid].name = name
        return self.stat_ids[name]

    def event(self, name: str) -> int:
        if name not in self.event_ids:
            mid = len(self.event_ids) + 1
            self.event_ids[name] = mid
            self.plane.event_metadata[mid].id = mid
            self.plane.event_metadata[mid].name = name
        return self.event_ids[name]

    def add_stat(self, target, name: str, value) -> None:
        s = target.stats.add(metadata_id=self.stat(name))
        if isinstance(value, str):
            s.str_value = value
        else:
            s.int64_value = int(value)


def build(kernels: list[Kernel], *, vendor: str = "Nvidia", device: int = 0,
          line_ts_ns: int = 1_000_000) -> bytes:
    """Serialized XSpace with one GPU plane (and a host plane when any kernel has a launch)."""
    space = schema.XSpace()
    host = _Plane(space.planes.add(id=1, name="/host:CPU"))
    host_line = host.plane.lines.add(id=100, name="tf_Compute", timestamp_ns=line_ts_ns)
    gpu = _Plane(space.planes.add(id=2, name=f"/device:GPU:{device}"))
    gpu.add_stat(gpu.plane, "device_vendor", vendor)
    lines: dict[int, object] = {}
    for corr, k in enumerate(kernels, start=1):
        line = lines.get(k.stream)
        if line is None:
            kind = "Memcpy" if k.memcpy else "Compute"
            line = lines[k.stream] = gpu.plane.lines.add(
                id=k.stream, name=f"Stream #{k.stream}({kind})", timestamp_ns=line_ts_ns)
        ev = line.events.add(metadata_id=gpu.event(k.name), offset_ps=int(k.start_us * US),
                             duration_ps=int(k.dur_us * US))
        gpu.add_stat(ev, "correlation_id", corr)
        if k.memcpy:
            gpu.add_stat(ev, "memcpy_details", k.memcpy)
        else:
            gpu.add_stat(ev, "kernel_details", k.details)
        if k.tf_op:
            gpu.add_stat(ev, "tf_op", k.tf_op)
        if k.launch_start_us is not None:
            call = "cudaMemcpyAsync" if k.memcpy else "cudaLaunchKernel"
            hev = host_line.events.add(metadata_id=host.event(call),
                                       offset_ps=int(k.launch_start_us * US),
                                       duration_ps=int(k.launch_dur_us * US))
            host.add_stat(hev, "correlation_id", corr)
    return space.SerializeToString()
