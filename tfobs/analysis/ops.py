"""Op time on host and device (TF Stats): count, total and self time per op.

Host ops are TF op events (`scope/name:Type`) and tf.data iterator events
(`Iterator::...`) on the host plane; an op's self time is its duration minus the ops
nested directly inside it on the same thread, as XProf's host op metrics. Device ops are
the events of accelerator planes (GPU stream kernels, TPU `XLA Ops`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfobs.analysis.eventtypes import op_type
from tfobs.analysis.timeline import Timeline, id_array
from tfobs.summary import Ops, OpStat


@dataclass
class OpAgg:
    name: str
    op_type: str
    on_device: bool
    count: int = 0
    self_ps: int = 0
    total_ps: int = 0

    def stat(self) -> OpStat:
        return OpStat(self.name, self.op_type, self.on_device, self.count,
                      self.self_ps / 1e12, self.total_ps / 1e12)


def is_host_op(name: str) -> bool:
    return name.startswith("Iterator::") or bool(op_type(name))


def host_op_metrics(host: Timeline | None) -> dict[str, OpAgg]:
    """{op name: aggregate} for the host plane."""
    out: dict[str, OpAgg] = {}
    if host is None:
        return out
    names = host.names
    op_mids = id_array([mid for mid, n in names.items() if is_host_op(n)])
    for ld in host.lines:
        starts, ends = ld.starts, ld.ends
        stack: list[list[int]] = []  # [end, index, children ps]
        idx = ld.where(op_mids)
        done: list[tuple[int, int]] = []  # (index, children ps)
        for i in idx:
            s = starts[i]
            while stack and stack[-1][0] < s:
                top = stack.pop()
                done.append((top[1], top[2]))
            e = ends[i]
            if stack and e <= stack[-1][0]:
                stack[-1][2] += e - s
            elif stack:  # overlaps its would-be parent without nesting: treat as a sibling
                top = stack.pop()
                done.append((top[1], top[2]))
            stack.append([e, i, 0])
        done.extend((top[1], top[2]) for top in stack)
        mids = ld.mids
        for i, child_ps in done:
            name = names[mids[i]]
            agg = out.get(name)
            if agg is None:
                t = "Iterator" if name.startswith("Iterator::") else op_type(name)
                label = name.rpartition(":")[0] if t != "Iterator" else name
                agg = out[name] = OpAgg(label, t, False)
            dur = ends[i] - starts[i]
            agg.count += 1
            agg.total_ps += dur
            agg.self_ps += max(0, dur - child_ps)
    return out


def device_op_metrics(devices: list[Timeline]) -> dict[str, OpAgg]:
    out: dict[str, OpAgg] = {}
    for tl in devices:
        names = tl.names
        for ld in tl.lines:
            if not (ld.name.startswith("Stream") or ld.name == "XLA Ops"):
                continue
            starts, ends, mids = ld.starts, ld.ends, ld.mids
            for i in range(len(mids)):
                name = names.get(mids[i], "")
                agg = out.get(name)
                if agg is None:
                    agg = out[name] = OpAgg(name, "", True)
                dur = ends[i] - starts[i]
                agg.count += 1
                agg.total_ps += dur
                agg.self_ps += dur
    return out


def reduce_ops(host_ops: dict[str, OpAgg], device_ops: dict[str, OpAgg], top_n: int) -> Ops:
    host_ps = sum(a.self_ps for a in host_ops.values())
    device_ps = sum(a.self_ps for a in device_ops.values())
    every = list(host_ops.values()) + list(device_ops.values())
    every.sort(key=lambda a: (-a.self_ps, a.name))
    total = host_ps + device_ps
    return Ops(
        host_s=host_ps / 1e12,
        device_s=device_ps / 1e12,
        host_ratio=host_ps / total if total > 0 else 0.0,
        top=tuple(a.stat() for a in every[:top_n]),
    )
