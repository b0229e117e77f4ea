"""Writes tfobs/xspace/schema_descriptor.py: the XSpace schema that tfobs/xspace/schema.py
describes, as the serialized FileDescriptorProto `schema` loads at import.

    python tools/write_schema_descriptor.py

Run it after changing schema.py's tables; tests/reduce/test_analyze_startup.py
(test_the_stored_schema_descriptor_is_the_schemas_tables) fails until the stored bytes
match them.
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TARGET = ROOT / "tfobs" / "xspace" / "schema_descriptor.py"
HEAD = '''"""The XSpace schema of `tfobs.xspace.schema` as a serialized FileDescriptorProto.

Written by `python tools/write_schema_descriptor.py` from schema.py's tables; do not edit.
Loading these bytes at import, instead of building the descriptor with descriptor_pb2,
spares every `tfobs analyze` process that module's import (3-5 ms of a 0.3 s run).
"""

FILE = (
'''


def render(data: bytes, width: int = 72) -> str:
    """The module's text: `data` as bytes literals of at most `width` characters."""
    lines, chunk = [], b""
    for byte in data:
        if len(repr(chunk + bytes([byte]))) > width:
            lines.append(f"    {chunk!r}\n")
            chunk = b""
        chunk += bytes([byte])
    if chunk:
        lines.append(f"    {chunk!r}\n")
    return HEAD + "".join(lines) + ")\n"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from tfobs.xspace import schema

    TARGET.write_text(render(schema.file_bytes()))
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
