"""`tfobs analyze` as a whole process: what it loads for a small CPU capture.

A command-line answer on a small file is mostly start-up. The command keeps OpenBLAS to one
thread (the reduction does no linear algebra), pauses the cycle collector only while it
reduces, and loads the GPU kernel modules (kernel
names, Tensor Core rules, HLO protos) only for captures with GPU planes. Run in a child
process, as a user runs it; the timings themselves are in benchmarks/reduce_speed.py.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from tests.conftest import CAPTURES

ROOT = pathlib.Path(__file__).resolve().parents[2]
GPU_MODULES = ("tfobs.analysis.kernels", "tfobs.analysis.hlo_ops",
               "tfobs.analysis.tensor_cores", "tfobs.analysis.precision")
# Modules a CPU capture's answer needs none of: the descriptor builder (the XSpace schema
# loads serialized, tfobs/xspace/schema_descriptor.py) and what `tfobs doctor` uses.
UNNEEDED = ("google.protobuf.descriptor_pb2", "socket", "tempfile")
_CHILD = """
import gc, io, json, os, sys
UNNEEDED = %r
from tfobs.cli import main
out, sys.stdout = sys.stdout, io.StringIO()
code = main(["analyze", sys.argv[1], "--format", "json"])
summary, sys.stdout = json.loads(sys.stdout.getvalue()), out
print(json.dumps({"code": code, "blas": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "loaded": [m for m in sys.modules if m.startswith("tfobs.analysis")],
                  "others": [m for m in UNNEEDED if m in sys.modules],
                  "steps": summary["steps"]["count"], "gc": gc.isenabled()}))
"""


def _analyze(capture: pathlib.Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", _CHILD % (UNNEEDED,), str(capture)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cpu_capture_loads_no_gpu_module_and_one_blas_thread() -> None:
    got = _analyze(CAPTURES / "generated__tf2.21cpu__ps_chief.xplane.pb")
    assert got["code"] == 0 and got["steps"] == 58
    assert got["blas"] == "1"
    assert got["gc"]  # paused while reducing only
    assert not set(GPU_MODULES) & set(got["loaded"])
    assert "tfobs.analysis.steps" in got["loaded"]  # it did reduce the capture
    assert got["others"] == []


def test_the_stored_schema_descriptor_is_the_schemas_tables() -> None:
    """schema_descriptor.py is what tools/write_schema_descriptor.py writes from schema.py's
    tables now, and the tables' label and type numbers are protobuf's."""
    from google.protobuf import descriptor_pb2

    from tfobs.xspace import schema, schema_descriptor

    assert schema_descriptor.FILE == schema.file_bytes()
    f = descriptor_pb2.FieldDescriptorProto
    assert (schema._OPTIONAL, schema._REPEATED) == (f.LABEL_OPTIONAL, f.LABEL_REPEATED)
    assert (schema._DOUBLE, schema._INT64, schema._UINT64, schema._STRING, schema._MSG,
            schema._BYTES) == (f.TYPE_DOUBLE, f.TYPE_INT64, f.TYPE_UINT64, f.TYPE_STRING,
                               f.TYPE_MESSAGE, f.TYPE_BYTES)
    parsed = descriptor_pb2.FileDescriptorProto.FromString(schema_descriptor.FILE)
    assert [m.name for m in parsed.message_type][:3] == ["XSpace", "XPlane", "XLine"]


def test_a_gpu_capture_loads_the_kernel_modules() -> None:
    got = _analyze(CAPTURES / "recorded__h100_jax0.11.2__bf16_matmul.xplane.pb")
    assert got["code"] == 0 and got["steps"] > 0
    assert set(GPU_MODULES) <= set(got["loaded"])
