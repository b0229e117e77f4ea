"""Framework op names of XLA instructions, from the HLO protos a capture carries.

XLA kernels on a GPU plane name their HLO instruction (`hlo_op`) and program (`program_id`);
the framework op behind them (`jit(f)/dot_general`, `model/dense/MatMul`) is in that
instruction's metadata, stored in the `/host:metadata` plane as one serialized `HloProto`
per program (stat "Hlo Proto"). XProf's Kernel Stats names ops this way. Only the fields
needed are declared here (numbers from `xla/service/hlo.proto`, `xla/xla_data.proto`);
protobuf skips the rest without decoding it.
"""

from __future__ import annotations

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
    "HloInstructionProto": [("name", 1, ""), ("metadata", 7, "OpMetadata")],
    "OpMetadata": [("op_type", 1, ""), ("op_name", 2, "")],
}
_REPEATED = {("HloModuleProto", "computations"), ("HloComputationProto", "instructions")}


def _build() -> type:
    fp = descriptor_pb2.FileDescriptorProto(
        name="tfobs/analysis/hlo_subset.proto", package=_PACKAGE, syntax="proto3"
    )
    for msg_name, fields in _MESSAGES.items():
        msg = fp.message_type.add(name=msg_name)
        for name, number, type_name in fields:
            label = _F.LABEL_REPEATED if (msg_name, name) in _REPEATED else _F.LABEL_OPTIONAL
            f = msg.field.add(name=name, number=number, label=label)
            if type_name:
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{_PACKAGE}.{type_name}"
            else:
                f.type = _F.TYPE_STRING
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fp)
    return message_class(pool.FindMessageTypeByName(f"{_PACKAGE}.HloProto"))


_HloProto = _build()


def op_names_by_instruction(space: SpaceView) -> dict[tuple[int, str], str]:
    """{(program_id, instruction name): framework op name} for every HLO program stored.

    Ops without a name map to "" (XProf leaves such kernels without an op). Unreadable
    protos are skipped: the kernels then keep the op their `tf_op` stat names.
    """
    out: dict[tuple[int, str], str] = {}
    plane = space.plane(METADATA_PLANE)
    if plane is None or HLO_PROTO_STAT not in plane.stat_ids:
        return out
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
                for ins in comp.instructions:
                    meta = ins.metadata
                    name = meta.op_name
                    if meta.op_type and name:
                        name = f"{name}:{meta.op_type}"
                    out[(program_id, ins.name)] = name
    return out
