"""The part of the XSpace protobuf schema tfobs reads, loaded at import time.

Field names and numbers follow `tsl/profiler/protobuf/xplane.proto` (package
`tensorflow.profiler`). Describing the schema here, instead of importing TensorFlow's
generated module, keeps `tfobs analyze` free of TensorFlow and of generated-code version
checks; the `protobuf` runtime (upb) still does the parsing in C. The tables below are the
schema; `schema_descriptor.py` holds them serialized (tools/write_schema_descriptor.py),
which is what import loads.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.message import EncodeError

from tfobs.xspace import schema_descriptor

_PACKAGE = "tensorflow.profiler"

# (message, [(field, number, type, label, type_name or "", oneof index or None)]);
# labels and types as FieldDescriptorProto numbers them (LABEL_*, TYPE_*).
_OPTIONAL, _REPEATED = 1, 3
_DOUBLE, _INT64, _UINT64, _STRING, _MSG, _BYTES = 1, 3, 4, 9, 11, 12

_MESSAGES: dict[str, list[tuple[Any, ...]]] = {
    "XSpace": [
        ("planes", 1, _MSG, _REPEATED, "XPlane", None),
        ("errors", 2, _STRING, _REPEATED, "", None),
        ("warnings", 3, _STRING, _REPEATED, "", None),
        ("hostnames", 4, _STRING, _REPEATED, "", None),
    ],
    "XPlane": [
        ("id", 1, _INT64, _OPTIONAL, "", None),
        ("name", 2, _STRING, _OPTIONAL, "", None),
        ("lines", 3, _MSG, _REPEATED, "XLine", None),
        ("event_metadata", 4, _MSG, _REPEATED, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REPEATED, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REPEATED, "XStat", None),
    ],
    "XLine": [
        ("id", 1, _INT64, _OPTIONAL, "", None),
        ("display_id", 10, _INT64, _OPTIONAL, "", None),
        ("name", 2, _STRING, _OPTIONAL, "", None),
        ("display_name", 11, _STRING, _OPTIONAL, "", None),
        ("timestamp_ns", 3, _INT64, _OPTIONAL, "", None),
        ("duration_ps", 9, _INT64, _OPTIONAL, "", None),
        ("events", 4, _MSG, _REPEATED, "XEvent", None),
    ],
    "XEvent": [
        ("metadata_id", 1, _INT64, _OPTIONAL, "", None),
        ("offset_ps", 2, _INT64, _OPTIONAL, "", 0),
        ("num_occurrences", 5, _INT64, _OPTIONAL, "", 0),
        ("duration_ps", 3, _INT64, _OPTIONAL, "", None),
        ("stats", 4, _MSG, _REPEATED, "XStat", None),
    ],
    "XStat": [
        ("metadata_id", 1, _INT64, _OPTIONAL, "", None),
        ("double_value", 2, _DOUBLE, _OPTIONAL, "", 0),
        ("uint64_value", 3, _UINT64, _OPTIONAL, "", 0),
        ("int64_value", 4, _INT64, _OPTIONAL, "", 0),
        ("str_value", 5, _STRING, _OPTIONAL, "", 0),
        ("bytes_value", 6, _BYTES, _OPTIONAL, "", 0),
        ("ref_value", 7, _UINT64, _OPTIONAL, "", 0),
    ],
    "XEventMetadata": [
        ("id", 1, _INT64, _OPTIONAL, "", None),
        ("name", 2, _STRING, _OPTIONAL, "", None),
        ("display_name", 4, _STRING, _OPTIONAL, "", None),
        ("metadata", 3, _BYTES, _OPTIONAL, "", None),
        ("stats", 5, _MSG, _REPEATED, "XStat", None),
        ("child_id", 6, _INT64, _REPEATED, "", None),
    ],
    "XStatMetadata": [
        ("id", 1, _INT64, _OPTIONAL, "", None),
        ("name", 2, _STRING, _OPTIONAL, "", None),
        ("description", 3, _STRING, _OPTIONAL, "", None),
    ],
}
# The light variant reduction parses: identical but for its lines (`XLineLite`), whose
# events protobuf leaves unread, so no Python object is built per event or stat;
# `tfobs.xspace.columns` decodes them in bulk. The same bytes parse as both.
_MESSAGES["XSpaceLite"] = [
    ("planes", 1, _MSG, _REPEATED, "XPlaneLite", None), *_MESSAGES["XSpace"][1:]
]
_MESSAGES["XPlaneLite"] = [
    ("lines", 3, _MSG, _REPEATED, "XLineLite", None) if f[0] == "lines" else f
    for f in _MESSAGES["XPlane"]
]
# A line without its events field: protobuf keeps the events as the line's unknown fields,
# one copy of their bytes, and writes them back with the line (`columns.LineBytes` walks
# them), instead of a Python bytes object per event (a long window has 100,000 and more).
_MESSAGES["XLineLite"] = [f for f in _MESSAGES["XLine"] if f[0] != "events"]
# A line with its events as bytes each: how lines are read where the compiled walk is not
# built (and how tests write events of their own).
_MESSAGES["XLineEvents"] = [
    ("events", 4, _BYTES, _REPEATED, "", None) if f[0] == "events" else f
    for f in _MESSAGES["XLine"]
]
_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}
_MAP_ENTRIES = {
    plane: [("EventMetadataEntry", "XEventMetadata"), ("StatMetadataEntry", "XStatMetadata")]
    for plane in ("XPlane", "XPlaneLite")
}


def _add_field(msg: Any, spec: tuple[Any, ...]) -> None:
    name, number, ftype, label, type_name, oneof = spec
    f = msg.field.add(name=name, number=number, type=ftype, label=label)
    if type_name:
        f.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        f.oneof_index = oneof


def file_bytes() -> bytes:
    """The tables above as a serialized FileDescriptorProto (what schema_descriptor.py
    stores): built with descriptor_pb2, which only this needs."""
    from google.protobuf import descriptor_pb2

    fp = descriptor_pb2.FileDescriptorProto(
        name="tfobs/xspace/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        msg = fp.message_type.add(name=name)
        for oneof in _ONEOFS.get(name, []):
            msg.oneof_decl.add(name=oneof)
        for spec in fields:
            _add_field(msg, spec)
        for entry_name, value_type in _MAP_ENTRIES.get(name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_field(entry, ("key", 1, _INT64, _OPTIONAL, "", None))
            _add_field(entry, ("value", 2, _MSG, _OPTIONAL, value_type, None))
    data: bytes = fp.SerializeToString(deterministic=True)
    return data


# A private pool: never clashes with TensorFlow's own registration of the same names.
_POOL = descriptor_pool.DescriptorPool()
_POOL.AddSerializedFile(schema_descriptor.FILE)


def message_class(descriptor: Any) -> Any:
    """The message class of `descriptor`. protobuf < 4.22 (allowed by TensorFlow 2.16-2.17)
    has no `GetMessageClass`; its `MessageFactory.GetPrototype` does the same."""
    get = getattr(message_factory, "GetMessageClass", None)
    if get is not None:
        return get(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def _cls(name: str) -> Any:  # a generated message class (FromString, ...)
    return message_class(_POOL.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


def out_of_memory(exc: BaseException) -> bool:
    """Whether protobuf's error means it ran out of memory, not that the bytes are bad:
    upb's parse fails with "Arena alloc failed", and serializing a message protobuf itself
    parsed fails (EncodeError) for no other reason. Under the reduce helper's memory limit
    these must read as MemoryError (a fresh helper next), never as a broken capture."""
    return isinstance(exc, EncodeError) or "alloc failed" in str(exc)


# The host plane's name in every TensorFlow/JAX capture (its threads, ops, tf.data).
HOST_PLANE = "/host:CPU"

XSpace = _cls("XSpace")
XPlane = _cls("XPlane")
XLine = _cls("XLine")
XEvent = _cls("XEvent")
XStat = _cls("XStat")
XEventMetadata = _cls("XEventMetadata")
XStatMetadata = _cls("XStatMetadata")
XSpaceLite = _cls("XSpaceLite")
XPlaneLite = _cls("XPlaneLite")
XLineLite = _cls("XLineLite")
XLineEvents = _cls("XLineEvents")
