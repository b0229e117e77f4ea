"""Kernel statistics and Tensor Core use on GPU captures: XProf's Kernel Stats table.

One row per (kernel name, launch shape, registers, shared memory, Tensor Core use, op
eligibility, op name), as `xprof/convert/xplane_to_kernel_stats_db.cc` groups them: a
device event is a kernel when it carries a `kernel_details` stat and lasts at least 1 ns.
The aggregates are sums over every kernel; the table keeps the `MAX_ROWS` rows with the
most time, as XProf does.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tfobs.analysis import hlo_ops, precision, tensor_cores
from tfobs.analysis.device_events import PlaneTable, is_gpu_plane
from tfobs.analysis.timeline import summable, time_base_ps
from tfobs.summary import Kernels, KernelStat
from tfobs.xspace.reader import PlaneView, SpaceView

MAX_ROWS = 1000  # XProf's kMaxNumOfKernels
_UINT32_MAX = 2**32 - 1
_TF_OP_TYPE = re.compile(r"[A-Z_][a-zA-Z0-9_]*")
_JAX_OP_TYPE = re.compile(r"[a-z_][a-z0-9_]*(\[.*\])?")
# A kernel row: (name, grid, block, registers, shared memory, op, uses Tensor Cores, eligible op)
_RowKey = tuple[str, str, str, int, int, str, bool, bool]

_log = logging.getLogger(__name__)


@dataclass
class _Row:
    count: int = 0
    total_ns: int = 0
    min_ns: int = 0
    max_ns: int = 0
    rule: str = ""
    occupancy: float = 0.0
    unknown: bool = False  # Tensor Core use no name rule can judge
    width: int = 32  # arithmetic width in bits (16 or 32)

    def add(self, count: int, total_ns: int, min_ns: int, max_ns: int) -> None:
        if self.count == 0:
            self.min_ns, self.max_ns = min_ns, max_ns
        else:
            self.min_ns = min(self.min_ns, min_ns)
            self.max_ns = max(self.max_ns, max_ns)
        self.count += count
        self.total_ns += total_ns


@dataclass
class _Launch:
    """Kernel launch parameters parsed from `kernel_details` (XProf's ParseKernelLaunchParams)."""

    registers: int = 0
    shared: int = 0
    grid: str = "1,1,1"
    block: str = "1,1,1"
    occupancy: float = 0.0


def parse_kernel_details(details: str) -> _Launch:
    out = _Launch()
    static = dynamic = 0
    for token in details.replace("\n", " ").split(" "):
        key, sep, value = token.partition(":")
        if not sep or ":" in value:
            continue
        if key == "regs":
            out.registers = _uint32(value, out.registers)
        elif key == "static_shared":
            static = _uint32(value, static)
        elif key == "dynamic_shared":
            dynamic = _uint32(value, dynamic)
        elif key in ("grid", "block"):
            dims = [_uint32(d, -1) for d in value.split(",", 3)]
            if len(dims) == 3 and all(d >= 0 for d in dims):
                setattr(out, key, ",".join(str(d) for d in dims))
        elif key == "occ_pct":
            try:
                out.occupancy = float(value)
            except ValueError:
                pass
    out.shared = static + dynamic
    return out


def _uint32(text: str, default: int) -> int:
    # isdecimal: the digits int() reads ("²" is a digit to isdigit(), not to int()); no int()
    # of a huge text (past Python's 4,300 digits it raises, and the capture was lost).
    significant = text.lstrip("0")
    if not text.isdecimal() or len(significant) > 10:
        return default
    value = int(significant or "0")
    return value if value <= _UINT32_MAX else default


def tf_op_name(tf_op: str) -> str:
    """The op name in a `tf_op` stat ("model/dense/MatMul:MatMul" -> "model/dense/MatMul")."""
    name, sep, op_type = tf_op.partition(":")
    if not sep:
        return tf_op
    if not op_type or _TF_OP_TYPE.fullmatch(op_type) or _JAX_OP_TYPE.fullmatch(op_type):
        return name
    return tf_op


def plane_vendor(plane: PlaneView) -> str:
    try:
        return tensor_cores.vendor_of(plane.plane_stats().get("device_vendor", ""))
    except Exception:  # odd plane stats must not stop the reduction
        _log.debug("a plane's stats could not be read: its vendor is unknown", exc_info=True)
        return ""


_WANTED = ("kernel_details", "tf_op", "hlo_op", "program_id", "equation")


def hlo_op_names(space: SpaceView) -> dict[tuple[int, str], str]:
    """`hlo_ops.op_names_by_instruction`, read only when GPU events name HLO ops."""
    return hlo_programs(space)[0]


def hlo_programs(space: SpaceView) -> tuple[dict[tuple[int, str], str],
                                             dict[tuple[int, str], int]]:
    """`hlo_ops.programs` (op names, float widths), read only when GPU events name HLO ops."""
    if any("hlo_op" in p.stat_ids for p in space.planes if is_gpu_plane(p)):
        return hlo_ops.programs(space)
    return {}, {}


def reduce_kernels(space: SpaceView, hlo: dict[tuple[int, str], str] | None = None,
                   table: Callable[[PlaneView], PlaneTable] | None = None,
                   hlo_bits: dict[tuple[int, str], int] | None = None) -> Kernels:
    """Kernel table and Tensor Core aggregates over every GPU plane; empty on CPU/TPU.

    `hlo`, `hlo_bits`: `hlo_programs(space)` when the caller has it already; `table`: the
    plane's `PlaneTable` when the caller has one (`GpuEvents.table`).
    """
    rows: dict[_RowKey, _Row] = {}
    launches: dict[str, _Launch] = {}
    # all, tensor core, eligible op, eligible op on tensor cores, 16-bit, Tensor Core use
    # unknown
    totals = [0, 0, 0, 0, 0, 0]
    gpu_planes = [p for p in space.planes if is_gpu_plane(p)]
    if hlo is None or hlo_bits is None:
        hlo, hlo_bits = hlo_programs(space)
    for plane in gpu_planes:
        if any(n in plane.stat_ids for n in _WANTED):
            _scan_plane(plane, table(plane) if table else PlaneTable(plane, time_base_ps([plane])),
                        (hlo, hlo_bits), rows, launches, totals)
    items = sorted(rows.items(), key=lambda kv: (-kv[1].total_ns, kv[0]))[:MAX_ROWS]
    return Kernels(
        total_s=totals[0] * 1e-9,
        tensor_core_s=totals[1] * 1e-9,
        eligible_op_s=totals[2] * 1e-9,
        eligible_op_tensor_core_s=totals[3] * 1e-9,
        items=tuple(_stat(key, row) for key, row in items),
        compute_16bit_s=totals[4] * 1e-9,
        tensor_core_unknown_s=totals[5] * 1e-9,
    )


def _scan_plane(
    plane: PlaneView,
    table: PlaneTable,
    programs: tuple[dict[tuple[int, str], str], dict[tuple[int, str], int]],
    rows: dict[_RowKey, _Row],
    launches: dict[str, _Launch],
    totals: list[int],
) -> None:
    """Adds the plane's kernels (events that last at least a nanosecond) to `rows`.

    Each signature of events is one (kernel, op) row key: rows are keyed once per
    signature, in the order their first kernel comes (a row keeps its first occupancy).
    """
    vendor = plane_vendor(plane)
    hlo, hlo_bits = programs
    ns = table.duration // 1000
    timed = np.flatnonzero(ns > 0)
    if not timed.size:
        return
    sig, ns = table.sig[timed], summable(ns[timed])
    order = np.argsort(sig, kind="stable")
    sig, ns = sig[order], ns[order]
    first = np.flatnonzero(np.r_[True, sig[1:] != sig[:-1]])
    count = np.diff(np.r_[first, sig.size])
    total = np.add.reduceat(ns, first)
    low, high = np.minimum.reduceat(ns, first), np.maximum.reduceat(ns, first)
    seen = np.argsort(order[first], kind="stable")  # signatures by first kernel
    md_cache: dict[int, dict[str, str]] = {}
    ops_cache: dict[tuple[str | None, str | None, str | None, str | None, bool],
                    tuple[str, bool]] = {}  # the same few ops repeat per kernel
    for s, c, t, lo, hi in zip(sig[first][seen].tolist(), count[seen].tolist(),
                               total[seen].tolist(), low[seen].tolist(), high[seen].tolist(),
                               strict=True):
        signature = table.signatures[s]
        mid = signature.mid
        md = md_cache.get(mid)
        if md is None:
            md = md_cache[mid] = _metadata_stats(plane, mid, _WANTED)
        stats = {**md, **{k: _as_text(v) for k, v in signature.stats.items() if k in _WANTED}}
        details = stats.get("kernel_details", "")
        if not details:
            continue
        name = plane.event_names.get(mid, "")
        rule = tensor_cores.tensor_core_rule(name, vendor)
        # XProf marks an op eligible when its kernel uses Tensor Cores by XProf's rules;
        # tfobs's extended rules add to that, never take away.
        xprof_tc = bool(rule) if rule.startswith("xprof.") else tensor_cores.uses_tensor_cores(
            name, vendor, extended=False)
        op_key = (stats.get("tf_op"), stats.get("hlo_op"), stats.get("program_id"),
                  stats.get("equation"), bool(rule) or xprof_tc)
        found = ops_cache.get(op_key)
        if found is None:
            found = ops_cache[op_key] = _op_and_eligibility(stats, op_key[-1], hlo)
        op, eligible = found
        launch = launches.get(details)
        if launch is None:
            launch = launches[details] = parse_kernel_details(details)
        key = (name, launch.grid, launch.block, launch.registers, launch.shared, op,
               bool(rule), eligible)
        row = rows.get(key)
        if row is None:
            row = rows[key] = _Row(rule=rule, occupancy=launch.occupancy)
            row.unknown = precision.tensor_core_unknown(name, bool(rule), eligible)
            row.width = precision.kernel_width(name, hlo_bits.get(_instruction(stats), 0))
        row.add(c, t, lo, hi)
        totals[0] += t
        if row.width == 16:
            totals[4] += t
        if row.unknown:
            totals[5] += t
        if rule:
            totals[1] += t
        if eligible:
            totals[2] += t
            if rule:
                totals[3] += t


def _instruction(stats: dict[str, str]) -> tuple[int, str]:
    """(program id, HLO instruction) a kernel names, as `hlo_ops.programs` keys them."""
    try:
        program_id = int(stats.get("program_id", ""))
    except ValueError:
        program_id = -1
    return program_id, stats.get("hlo_op", "").split("::")[-1]


def _as_text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _metadata_stats(plane: PlaneView, mid: int, wanted: tuple[str, ...]) -> dict[str, str]:
    meta = plane.lite.event_metadata.get(mid)
    out: dict[str, str] = {}
    if meta is not None:
        ids = {plane.stat_ids[n]: n for n in wanted if n in plane.stat_ids}
        for s in meta.stats:
            if s.metadata_id in ids:
                out[ids[s.metadata_id]] = _as_text(plane.value(s))
    return out


def _op_and_eligibility(
    stats: dict[str, str], uses_tc: bool, hlo: dict[tuple[int, str], str]
) -> tuple[str, bool]:
    """Op name and Tensor Core eligibility, in XProf's two passes (framework op, then HLO)."""
    op, eligible = "", False
    tf_op = stats.get("tf_op", "")
    if tf_op:
        op = tf_op_name(tf_op)
        # XProf: a kernel that uses Tensor Cores makes its op eligible.
        eligible = tensor_cores.op_tensor_core_eligible(op, stats.get("equation", "")) or uses_tc
    hlo_op = stats.get("hlo_op", "")
    if hlo_op:
        # XLA kernels take the framework op of their HLO instruction (the last of a
        # "::"-separated list), when the capture stores the program.
        try:
            program_id = int(stats.get("program_id", ""))
        except ValueError:
            program_id = -1
        found = hlo.get((program_id, hlo_op.split("::")[-1]))
        if found is not None:
            op = tf_op_name(found) if found else ""
            eligible = tensor_cores.op_tensor_core_eligible(op) or eligible
    return op, eligible


def _stat(key: _RowKey, row: _Row) -> KernelStat:
    name, grid, block, registers, shared, op, uses_tc, eligible = key
    return KernelStat(
        name=name,
        op_name=op,
        count=row.count,
        total_s=row.total_ns * 1e-9,
        min_s=row.min_ns * 1e-9,
        max_s=row.max_ns * 1e-9,
        registers=registers,
        shared_mem_bytes=shared,
        grid=grid,
        block=block,
        occupancy_pct=row.occupancy,
        uses_tensor_cores=uses_tc,
        op_tensor_core_eligible=eligible,
        tensor_core_rule=row.rule,
        tensor_core_unknown=row.unknown,
        width_bits=row.width,
    )
