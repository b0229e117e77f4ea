"""Host input time split as the Input Pipeline Analyzer does (Section 3).

XProf (`GenerateHostResult`) sums the self time of input ops: enqueue (infeed / host-to-
device copies), file reads (tf.data sources such as `::TFRecord`, read in advance when a
`Prefetch`, `Interleave`, `ParallelMap` or cache stage sits above them, else on demand),
and preprocessing (every other tf.data stage). Without enqueue ops the reads and
preprocessing are reported as they are. tfobs gives XProf's window totals and the same
figures per step.
"""

from __future__ import annotations

from tfobs.analysis.eventtypes import DATASET
from tfobs.analysis.ops import OpAgg
from tfobs.summary import INPUT_KINDS, OpStat

_FILE_SOURCES = ("::TFRecord", "::TextLine", "::FixedLengthRecord", "::SSTable",
                 "::RecordIO", "::ArrayRecord")
_ADVANCED = ("::MemoryReader", "::MemoryWriter", "::Interleave", "::Prefetch",
             "::ParallelMap")
KINDS = INPUT_KINDS  # the kinds are defined in summary.py


def kind_of(op: OpAgg) -> str | None:
    if op.op_type.startswith("InfeedEnqueue") or op.op_type.upper() == "MEMCPYHTOD":
        return "enqueue"
    if op.op_type != DATASET:
        return None
    if op.name.endswith(_FILE_SOURCES):
        return "advanced_file_read" if any(a in op.name for a in _ADVANCED) else (
            "demanded_file_read")
    return "preprocessing"


def host_input_totals(host_ops: dict[str, OpAgg], h2d_ratio: float = 0.0) -> dict[str, float]:
    """Seconds per kind over the whole window (XProf's `input_time_breakdown`).

    `h2d_ratio` is the host-to-device share of the step time: when copies to the device
    are seen, XProf scales reads and preprocessing so that they and the enqueue time keep
    that proportion.
    """
    raw = dict.fromkeys(KINDS, 0.0)
    for op in host_ops.values():
        kind = kind_of(op)
        if kind is not None:
            raw[kind] += op.self_ps / 1e12
    work = raw["demanded_file_read"] + raw["advanced_file_read"] + raw["preprocessing"]
    ratio = min(1.0, max(0.0, h2d_ratio))
    non_enqueue = raw["enqueue"] * (1.0 - ratio) / ratio if ratio > 0 else work
    out = {"enqueue": raw["enqueue"]}
    for kind in ("demanded_file_read", "advanced_file_read", "preprocessing"):
        out[kind] = non_enqueue * raw[kind] / work if work > 0 else 0.0
    out["unclassified"] = max(0.0, non_enqueue - sum(out[k] for k in KINDS[:3]))
    return {k: out[k] for k in KINDS}


def top_input_ops(host_ops: dict[str, OpAgg], top_n: int) -> tuple[OpStat, ...]:
    rows = [op for op in host_ops.values() if kind_of(op) is not None]
    rows.sort(key=lambda a: (-a.self_ps, a.name))
    return tuple(op.stat() for op in rows[:top_n])


PYTHON_OPS = ("EagerPyFunc", "PyFunc", "PyFuncStateless")


# tf.distribute's per-replica iterators (`experimental_distribute_dataset`,
# `distribute_datasets_from_function`) are GeneratorDatasets whose functions read a
# MultiDeviceIterator; each element runs one of these ops.
PER_REPLICA_OPS = ("MultiDeviceIteratorFromStringHandle", "MultiDeviceIteratorGetNextFromShard")


def per_replica_input(host_ops: dict[str, OpAgg]) -> bool:
    """Whether tf.distribute's per-replica input iterators ran in the window."""
    return any(op.op_type in PER_REPLICA_OPS for op in host_ops.values())


def python_op_seconds(host_ops: dict[str, OpAgg]) -> float:
    """Self time of the ops that call back into Python (py_function, numpy_function)."""
    return sum(op.self_ps for op in host_ops.values() if op.op_type in PYTHON_OPS) / 1e12
