"""What the fresh TF 2.21 CPU captures (tools/record_tf_captures.py) must show in tfobs."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess
import sys

import pytest

import tfobs
import tfobs.analysis.pipeline
from tests.conftest import CAPTURES
from tfobs.xspace import schema

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _capture(case: str) -> pathlib.Path:
    return CAPTURES / f"generated__tf2.21cpu__{case}.xplane.pb"


def test_onednn_ops_lead_the_op_table() -> None:
    s = tfobs.analyze(_capture("conv_bn_custom_loop"))
    assert s.ops.top[0].op_type.startswith("_MklNative")
    assert any(e.name.endswith(":_MklNativeConv2DBackpropInput")
               for step in s.steps.items for e in step.top_events)


def test_xla_step_is_one_host_op() -> None:
    s = tfobs.analyze(_capture("xla_jit"))
    assert s.ops.top and s.ops.top[0].op_type.startswith("__inference_train_step_")
    assert s.ops.host_s > 0


def test_tf_data_rows_have_xprof_type() -> None:
    s = tfobs.analyze(_capture("slow_callback"), top_n=50)
    stages = [o for o in s.ops.top if o.name.startswith("Iterator::")]
    assert stages and all(o.op_type == "Dataset" for o in stages)


def test_steps_per_execution_markers_count_optimizer_iterations() -> None:
    s = tfobs.analyze(_capture("keras3_spe4_callback"))
    nums = [st.step_num for st in s.steps.items]
    assert len(nums) >= 3 and {b - a for a, b in zip(nums, nums[1:], strict=False)} == {4}
    assert s.steps.method == "markers_tf_loop"  # the execution is an in-graph loop


def test_time_between_steps_is_measured() -> None:
    slow = tfobs.analyze(_capture("slow_callback")).steps
    plain = tfobs.analyze(_capture("mixed_precision_fit")).steps
    # a 5 ms callback after each ~2.5 ms step: most of the interval is in no step
    assert slow.interval_s > slow.mean_s + 0.004 and slow.outside_ratio > 0.4
    assert plain.outside_ratio < 0.1 and plain.interval_s >= plain.mean_s * 0.9


def test_allocations_have_names_and_shapes() -> None:
    s = tfobs.analyze(_capture("mixed_precision_fit"))
    rows = [a for m in s.memory for a in m.top_allocations]
    real = [a for a in rows if a.op_name != "unused preallocated device memory"]
    assert real and all(a.shape.startswith("[") for a in real)
    assert {a.data_type for a in real} <= {"float", "bfloat16", "int64", "int32", "bool"}
    assert rows == sorted(rows, key=lambda a: (-a.bytes, -a.requested_bytes, a.op_name))


def _with_nan_fragmentation(path: pathlib.Path) -> bytes:
    space = schema.XSpace.FromString(path.read_bytes())
    for plane in space.planes:
        frag = [mid for mid, md in plane.stat_metadata.items() if md.name == "fragmentation"]
        for line in plane.lines:
            for ev in line.events:
                for st in ev.stats:
                    if st.metadata_id in frag:
                        st.double_value = math.nan
    return space.SerializeToString()


def test_nan_fragmentation_is_unknown(tmp_path: pathlib.Path) -> None:
    data = _with_nan_fragmentation(_capture("xla_jit"))
    s = tfobs.analysis.pipeline.reduce_xspace(data)
    assert s.memory and all(not m.fragmentation_known for m in s.memory)
    assert all(math.isnan(m.fragmentation_ratio) for m in s.memory)
    path = tmp_path / "nan.xplane.pb"
    path.write_bytes(data)
    run = [sys.executable, "-m", "tfobs.cli", "analyze", str(path)]
    table = subprocess.run(run, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "fragmentation unknown" in table
    doc = json.loads(subprocess.run(run + ["--format", "json"], capture_output=True,
                                    text=True, check=True, cwd=ROOT).stdout)
    assert all(m["fragmentation_ratio"] is None for m in doc["memory"])


@pytest.mark.parametrize("case", ["lstm_bfc_varying", "mirrored", "numpy_preprocess"])
def test_recorded_captures_reduce_with_steps(case: str) -> None:
    s = tfobs.analyze(_capture(case))
    assert s.steps.count >= 5 and s.input_bound.verdict != "unknown"


def test_functional_while_loop_is_a_tf_loop() -> None:
    # tf.nn.ctc_loss on dense labels runs two While ops as such (WhileOp-StartBody, each
    # iteration its own executor run at iter_num 0): XProf groups nothing and reports no
    # step, so tfobs keeps the markers and says why, as for lowered while loops.
    s = tfobs.analyze(_capture("ctc_loss_loop"))
    assert s.steps.method == "markers_tf_loop" and s.steps.count == 8
    assert "functional while loops" in s.steps.note and "WhileOp-StartBody" in s.steps.note
