"""XProf's step event types (`xprof/utils/event_span.h`) and how names map to them.

The integer values are XProf's: where events overlap, the higher value wins the time.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

UNKNOWN_TIME = 0
HOST_COMPUTE = 10
HOST_COMPILE = 60
HOST_TO_HOST = 70
HOST_TO_DEVICE = 80
HOST_PREPARE = 90
DEVICE_COLLECTIVES = 100
HOST_WAIT_INPUT = 110
DEVICE_TO_DEVICE = 120
DEVICE_TO_HOST = 130
DEVICE_COMPUTE_32 = 140
DEVICE_COMPUTE_16 = 150
DEVICE_WAIT_DEVICE = 160
DEVICE_WAIT_HOST = 170

# Event type -> tfobs category (the Input Pipeline Analyzer's columns).
CATEGORY_OF_TYPE: dict[int, str] = {
    UNKNOWN_TIME: "other",
    HOST_WAIT_INPUT: "input",
    HOST_TO_DEVICE: "input",
    DEVICE_WAIT_HOST: "input",
    DEVICE_TO_HOST: "output",
    HOST_PREPARE: "kernel_launch",
    HOST_COMPUTE: "host_compute",
    DEVICE_COMPUTE_16: "device_compute",
    DEVICE_COMPUTE_32: "device_compute",
    DEVICE_TO_DEVICE: "device_to_device",
    DEVICE_WAIT_DEVICE: "device_to_device",
    DEVICE_COLLECTIVES: "device_collectives",
    HOST_COMPILE: "compile",
    # XProf keeps host-to-host copies out of every column; tfobs counts them as "other"
    # so a step's categories add up to its duration.
    HOST_TO_HOST: "other",
}


def is_explicit_step_marker(name: str) -> bool:
    return name.startswith(("train", "test", "TraceContext")) and "/" not in name


def is_real_cpu_compute(name: str) -> bool:
    return not (
        name.startswith(("EagerExecute", "EagerLocalExecute", "EagerKernelExecute", "FunctionRun"))
        or is_explicit_step_marker(name)
    )


# XProf's op name rules (tsl/profiler/utils/tf_op_utils.cc, `ParseTfOpFullname`).
_TF_OP_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_./>-]*")
_TF_OP_TYPE = re.compile(r"[A-Z_][a-zA-Z0-9_]*")  # `_MklNativeConv2D` is a TF op type
JAX_OP_TYPE = re.compile(r"[a-z_][a-z0-9_]*(\[.*\])?", re.S)
_MEMCPY_TYPES = ("MemcpyHToD", "MemcpyDToH", "MemcpyDToD", "MemcpyHToH")
DATASET = "Dataset"  # XProf's op type of every tf.data (`Iterator::...`) event


class TfOp(NamedTuple):
    category: str  # "tf", "tfdata", "jax", "memcpy" or "" (not an op)
    name: str
    type: str


_NOT_AN_OP = TfOp("", "", "")


def _derive_op_type(full: str) -> str:
    """The last name scope without a numeric `_N` suffix (model/layer/MatMul_1 -> MatMul)."""
    op = full.rpartition("/")[2]
    head, sep, suffix = op.rpartition("_")
    return head if sep and _is_integer(suffix) else op


def derive_op_type(full: str) -> str:
    """`_derive_op_type` for other modules (device op rows)."""
    return _derive_op_type(full)


def _is_integer(text: str) -> bool:
    body = text[1:] if text[:1] in "+-" else text
    return body.isdigit() and body.isascii()


@functools.lru_cache(maxsize=65536)  # names repeat across analyses and windows
def parse_tf_op(full: str) -> TfOp:
    """XProf's `ParseTfOpFullname`: what kind of op an event name is, its name and type."""
    head, sep, tail = full.partition(":")
    if not sep:
        for t in _MEMCPY_TYPES:
            if full[: len(t)].upper() == t.upper():
                return TfOp("memcpy", full, t)
        return _NOT_AN_OP
    if head == "Iterator":
        return TfOp("tfdata", full, DATASET)
    if _TF_OP_NAME.fullmatch(head) and _TF_OP_TYPE.fullmatch(tail):
        return TfOp("tf", head, tail)
    kind = tail or _derive_op_type(head)
    if JAX_OP_TYPE.fullmatch(kind):
        return TfOp("jax", head, kind.partition("[")[0])
    if not tail:
        return TfOp("tf", head, kind)
    return _NOT_AN_OP


def _op_type(name: str) -> str:
    """The op type of a TF or JAX op event name `scope/name:Type` ("" for other events)."""
    op = parse_tf_op(name)
    return op.type if op.category in ("tf", "jax") else ""


def _memcpy_kind(name: str) -> str:
    upper = name.upper()
    for kind in ("HTOD", "DTOH", "DTOD", "HTOH"):
        if upper.startswith("MEMCPY" + kind) or _op_type(name).upper() == "MEMCPY" + kind:
            return kind
    return ""


@functools.lru_cache(maxsize=65536)
def classify_cpu(name: str, has_device: bool) -> int | None:
    """XProf's ClassifyCpuEvent; None for events that are not real CPU compute."""
    if not is_real_cpu_compute(name):
        return None
    kind = _memcpy_kind(name)
    if _op_type(name).startswith("InfeedEnqueue") or kind == "HTOD":
        return HOST_TO_DEVICE
    if kind == "HTOH":
        return HOST_TO_HOST
    if has_device and (
        name.lower().startswith("executorstate::process") or is_launch_api(name)
    ):
        return HOST_PREPARE
    if name.lower().startswith("iteratorgetnext"):
        return HOST_WAIT_INPUT
    return HOST_COMPUTE


def is_launch_api(name: str) -> bool:
    """Runtime API calls that carry a correlation id to a device event."""
    return ("Launch" in name or "Memcpy" in name or "memcpy" in name) and (
        name.startswith(("cu", "hip")) or name.startswith("Memcpy")
    )


def classify_gpu(name: str) -> int:
    """XProf's ClassifyGpuEvent, by name (tensor shapes are rarely recorded)."""
    kind = _memcpy_kind(name)
    if kind == "HTOD":
        return HOST_TO_DEVICE
    if kind == "DTOH":
        return DEVICE_TO_HOST
    if kind == "DTOD":
        return DEVICE_TO_DEVICE
    if name.lower().startswith("nccl"):
        return DEVICE_COLLECTIVES
    if "half" in name or "fp16" in name:
        return DEVICE_COMPUTE_16
    return DEVICE_COMPUTE_32


def op_type(name: str) -> str:
    return _op_type(name)
