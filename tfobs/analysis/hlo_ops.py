"""Framework op names of XLA instructions, from the HLO protos a capture carries.

XLA kernels on a GPU plane name their HLO instruction (`hlo_op`) and program (`program_id`);
the framework op behind them (`jit(f)/dot_general`, `model/dense/MatMul`) is in that
instruction's metadata, stored in the `/host:metadata` plane as one serialized `HloProto`
per program (stat "Hlo Proto"). XProf's Kernel Stats names ops this way. Only the fields
needed are declared here (numbers from `xla/service/hlo.proto`, `xla/xla_data.proto`);
protobuf skips the rest without decoding it.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message import DecodeError

from tfobs.xspace.reader import SpaceView
from tfobs.xspace.schema import message_class

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"
PROGRAM_ID_STAT = "program_id"

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "tfobs.hlo"
_MESSAGES = {
    "HloProto": [("hlo_module", 1, "HloModuleProto")],
    "HloModuleProto": [("computations", 3, "HloComputationProto")],
    "HloComputationProto": [("instructions", 2, "HloInstructionProto")],
    "HloInstructionProto": [("name", 1, ""), ("opcode", 2, ""), ("shape", 3, "ShapeProto"),
                            ("metadata", 7, "OpMetadata"), ("id", 35, "int64"),
                            ("operand_ids", 36, "int64")],
    "ShapeProto": [("element_type", 2, "int32"), ("tuple_shapes", 4, "ShapeProto")],
    "OpMetadata": [("op_type", 1, ""), ("op_name", 2, "")],
}
_REPEATED = {("HloModuleProto", "computations"), ("HloComputationProto", "instructions"),
             ("HloInstructionProto", "operand_ids"), ("ShapeProto", "tuple_shapes")}
_SCALARS = {"int64": _F.TYPE_INT64, "int32": _F.TYPE_INT32}
# XLA's PrimitiveType numbers (xla/xla_data.proto): floats of 16 bits or fewer (F16, BF16,
# the F8 and F4 kinds) and the wide ones (F32, F64, C64, C128).
LOW_FLOATS = frozenset((10, 16, 19, 20, 23, 24, 25, 28, 29, 32, 33))
WIDE_FLOATS = frozenset((11, 12, 15, 18))


def _build() -> type:
    fp = descriptor_pb2.FileDescriptorProto(
        name="tfobs/analysis/hlo_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    for msg_name, fields in _MESSAGES.items():
        msg = fp.message_type.add(name=msg_name)
        for name, number, type_name in fields:
            label = _F.LABEL_REPEATED if (msg_name, name) in _REPEATED else _F.LABEL_OPTIONAL
            f = msg.field.add(name=name, number=number, label=label)
            if type_name in _SCALARS:
                f.type = _SCALARS[type_name]
            elif type_name:
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{_PACKAGE}.{type_name}"
            else:
                f.type = _F.TYPE_STRING
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    cls: type = message_class(pool.FindMessageTypeByName(f"{_PACKAGE}.HloProto"))
    return cls


_HloProto = _build()


def op_names_by_instruction(space: SpaceView) -> dict[tuple[int, str], str]:
    """{(program_id, instruction name): framework op name} for every HLO program stored.

    Ops without a name map to "" (XProf leaves such kernels without an op). Unreadable
    protos are skipped: the kernels then keep the op their `tf_op` stat names.
    """
    return programs(space)[0]


def programs(space: SpaceView) -> tuple[dict[tuple[int, str], str], dict[tuple[int, str], int]]:
    """`op_names_by_instruction`, and each instruction's float width in bits as its types
    say (16: its floating-point operands, or without any its result, are all 16-bit or
    narrower: F16, BF16, F8, F4; 32: one is F32 or wider; 0: no float type)."""
    names: dict[tuple[int, str], str] = {}
    bits: dict[tuple[int, str], int] = {}
    plane = space.plane(METADATA_PLANE)
    if plane is None or HLO_PROTO_STAT not in plane.stat_ids:
        return names, bits
    stat_id = plane.stat_ids[HLO_PROTO_STAT]
    program_stat = plane.stat_ids.get(PROGRAM_ID_STAT)
    for key, md in plane.proto.event_metadata.items():
        # Newer JAX keys the metadata 1, 2, ... and names the program in a stat of its own.
        program_id = key
        for stat in md.stats:
            if stat.metadata_id == program_stat and stat.WhichOneof("value") in (
                    "int64_value", "uint64_value"):
                program_id = getattr(stat, stat.WhichOneof("value"))
        for stat in md.stats:
            if stat.metadata_id != stat_id or stat.WhichOneof("value") != "bytes_value":
                continue
            proto = _HloProto()
            try:
                proto.ParseFromString(stat.bytes_value)
            except (DecodeError, RuntimeError, ValueError):
                continue
            for comp in proto.hlo_module.computations:
                types = {ins.id: _element_type(ins.shape) for ins in comp.instructions}
                for ins in comp.instructions:
                    meta = ins.metadata
                    name = meta.op_name
                    if meta.op_type and name:
                        name = f"{name}:{meta.op_type}"
                    names[(program_id, ins.name)] = name
                    bits[(program_id, ins.name)] = _width(
                        [types.get(i, 0) for i in ins.operand_ids], types.get(ins.id, 0))
    return names, bits


def _element_type(shape: object) -> int:
    """A shape's element type; a tuple's first element's (a custom call's main result)."""
    element = int(getattr(shape, "element_type", 0))
    tuples: Any = getattr(shape, "tuple_shapes", [])
    if element in (0, 13) and len(tuples):  # 13: TUPLE
        return _element_type(tuples[0])
    return element


def _width(operands: list[int], result: int) -> int:
    floats = [t for t in operands if t in LOW_FLOATS or t in WIDE_FLOATS]
    if not floats:
        floats = [result] if result in LOW_FLOATS or result in WIDE_FLOATS else []
    if not floats:
        return 0
    return 32 if any(t in WIDE_FLOATS for t in floats) else 16
