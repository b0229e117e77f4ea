"""A stand-in for pynvml's GPM calls on machines without a GPU (tests named `_mock_gpu`).

It uses the real pynvml's ctypes structures and metric ids, so a wrong field or id name
fails here as it would on a GPU."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pynvml

# Per interval, the workload the stand-in GPU runs: GPM percentages by metric id.
BF16 = {5: 74.8, 7: 74.8, 9: 0.0, 8: 0.0, 2: 76.3, 3: 11.3, 10: 14.3, 12: 0.0, 13: 0.0,
        11: 0.0, 4: 2.0}
FP32 = {5: 0.0, 7: 0.0, 9: 0.0, 8: 0.0, 2: 96.0, 3: 12.0, 10: 3.5, 12: 75.2, 13: 0.0,
        11: 0.0, 4: 5.0}
MEMORY = {5: 0.0, 7: 0.0, 9: 0.0, 8: 0.0, 2: 48.2, 3: 39.3, 10: 43.7, 12: 1.6, 13: 0.0,
          11: 0.0, 4: 8.0}


class FakeGpmNvml:
    """pynvml as far as the sampler and GPM use it. Each GPU runs one workload per interval
    (`schedule`); a GPM sample records how many intervals had passed, and the metrics of a
    pair are the workload between them, as the hardware's counters would give. DFMA is not
    reported (per-metric NOT_SUPPORTED), as on a GPU without it."""

    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    class NVMLError_NotSupported(Exception):
        pass

    class NVMLError_FunctionNotFound(Exception):
        pass

    def __init__(self, supported=(True,), schedule=None, mig=False) -> None:
        self.supported = supported
        self.schedule = schedule or {0: [BF16, FP32, MEMORY]}
        self.mig = mig
        self.ticks = {h: 0 for h in range(len(supported))}
        self.samples: dict[int, tuple[int, int]] = {}  # address -> (handle, tick)
        self.allocated: set[int] = set()
        self.freed: set[int] = set()
        self.metric_calls = 0
        self.fail_sample = False
        self.mig_calls: list[tuple[int, int]] = []
        self.shutdown = False

    # ordinary NVML
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: self.shutdown = True
    def nvmlDeviceGetCount(self) -> int: return len(self.supported)
    def nvmlDeviceGetHandleByIndex(self, i): return i
    def nvmlDeviceGetIndex(self, h): return h
    def nvmlDeviceGetUUID(self, h): return f"GPU-{h}"
    def nvmlDeviceGetName(self, h): return b"NVIDIA H200" if self.supported[h] else b"Tesla T4"
    def nvmlDeviceGetUtilizationRates(self, h): return SimpleNamespace(gpu=83)
    def nvmlDeviceGetMemoryInfo(self, h): return SimpleNamespace(used=1 << 30, total=1 << 37)
    def nvmlDeviceGetPowerUsage(self, h): return 500_000
    def nvmlDeviceGetTemperature(self, h, sensor): return 50
    def nvmlDeviceGetClockInfo(self, h, kind): return 1980
    def nvmlDeviceGetCurrentClocksEventReasons(self, h): return 0
    def nvmlDeviceIsMigDeviceHandle(self, h): return ctypes.c_uint(int(self.mig))
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h): return 10 + h
    def nvmlDeviceGetGpuInstanceId(self, h): return 7

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h):
        parent = h - 10 if self.mig else h
        return SimpleNamespace(version=1, isSupportedDevice=int(self.supported[parent]))

    def nvmlGpmSampleAlloc(self):
        sample = pynvml.c_nvmlGpmSample_t(pynvml.struct_c_nvmlGpmSample_t())
        self.allocated.add(ctypes.addressof(sample.contents))
        self._keep = [*getattr(self, "_keep", []), sample]  # the "driver" owns the memory
        return sample

    def nvmlGpmSampleFree(self, sample) -> None:
        self.freed.add(ctypes.addressof(sample.contents))

    def nvmlGpmSampleGet(self, handle, sample):
        if self.fail_sample:
            raise (self.NVMLError_NotSupported("Not Supported") if self.fail_sample == "mig"
                   else RuntimeError("GPU is lost"))
        address = ctypes.addressof(sample.contents)
        assert address in self.allocated and address not in self.freed
        self.samples[address] = (handle, self.ticks[handle])
        self.ticks[handle] += 1  # the next interval's workload starts now
        return sample

    def nvmlGpmMigSampleGet(self, parent, instance, sample):
        self.mig_calls.append((parent, instance))
        return self.nvmlGpmSampleGet(parent - 10, sample)

    def nvmlGpmMetricsGet(self, req):
        self.metric_calls += 1
        assert req.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        h1, t1 = self.samples[ctypes.addressof(req.sample1.contents)]
        h2, t2 = self.samples[ctypes.addressof(req.sample2.contents)]
        assert h1 == h2 and t2 == t1 + 1, "a pair is this tick's sample and the previous one"
        plan = self.schedule[h1]
        workload = plan[min(t1, len(plan) - 1)]
        for i in range(req.numMetrics):
            m = req.metrics[i]
            if m.metricId == pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL:
                m.nvmlReturn, m.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                m.nvmlReturn, m.value = pynvml.NVML_SUCCESS, workload[m.metricId]
        return req
