"""Each advice rule on a real capture where it fires and one where it does not, with the
evidence numbers checked against what the capture's run did (tools/record_advice_captures.py).

Rules that read figures only a GPU job has (kernel launch time, host/device copies, Tensor
Core use, device memory near capacity, collectives) have no NVIDIA capture here: their tests
start from a real capture's summary and change the one figure the rule reads; those tests
are named `..._from_summary`.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
import typing

import numpy as np
import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.raw_capture import host_events, step_spans_ps
from tfobs.analysis.advice import RULE_IDS, RULES, advise
from tfobs.analysis.advice import input_pipeline as input_pipeline_rules
from tfobs.analysis.advice.gaps import GAP_SHARE
from tfobs.analysis.advice.input_pipeline import (
    CACHE_FILL_FIX,
    CACHE_PARTIAL_FIX,
    MAP_IN_INTERLEAVE_FIX,
    MAP_SERIAL,
    PYDATASET_PREFETCH_FIX,
    REJECTION_RESAMPLE_FIX,
    SLOW_HANDOVER_S,
)
from tfobs.analysis.advice.input_pipeline import (
    NO_PREFETCH as NO_PREFETCH_RULE,  # the name NO_PREFETCH is its capture's here
)
from tfobs.analysis.advice.input_pipeline import SLOWEST_STAGE as SLOWEST_STAGE_RULE
from tfobs.analysis.advice.launch import (
    CHECK_NUMERICS_FIX,
    CPU_SORT_SHARE,
    EAGER_BEFORE_FIX,
    EAGER_BETWEEN_FIX,
    EAGER_CONVERSION_FIX,
    EAGER_MATH_BESIDE_FIX,
    EAGER_MATH_BETWEEN_FIX,
    EAGER_STEP_FIX,
    EAGER_TAPE_FIX,
    EAGER_UPDATE_FIX,
    EXPORT_FIX,
    JAX_NUMPY_SHAPES_FIX,
    QUEUE_WAIT_FIX,
    RETRACING,
    SMALL_CPU_LOOP_FIX,
    SMALL_CPU_LOOP_OPS,
    SMALL_CPU_OP_S,
    SMALL_CPU_OPS_PER_STEP,
    XLA_RECOMPILE_FIX,
)
from tfobs.analysis.advice.rule import JAX_DOCS, steps_run, window_steps
from tfobs.analysis.advice.steps import OP_BY_OP_CALLS
from tfobs.analysis.pauses import GAPS_MEASURED_SHARE
from tfobs.analysis.tfdata import slowest_stage
from tfobs.commands.analyze import render
from tfobs.export import page
from tfobs.summary import Advice, DeviceActivity, Environment, TfDataStage, WindowSummary


@functools.cache
def summary(name: str) -> WindowSummary:
    return tfobs.analyze(CAPTURES / f"{name}.xplane.pb")


def fired(s: WindowSummary, rule: str) -> list[Advice]:
    return [a for a in s.advice if a.code == rule]


def one(s: WindowSummary, rule: str) -> Advice:
    found = fired(s, rule)
    assert len(found) == 1, [a.code for a in s.advice]
    return found[0]


PY = "advice__tfdata_py_function"
SERIAL = "advice__tfdata_map_serial"
NO_PREFETCH = "advice__tfdata_no_prefetch"
FILE_READ = "advice__tfdata_file_read"
GENERATOR = "advice__tfdata_from_generator"
CALLBACK = "advice__callback_between_steps"
EAGER = "advice__eager_ops"
HEALTHY = "advice__healthy"
HEAVY = "advice__tfdata_heavy_map"
DEMO_SLOW = "advice__demo_input_bound"
COMPUTE = "generated__tf2.20cpu__custom_loop_compute_bfc"
MIRRORED = "generated__tf2.21cpu__mirrored"  # 2 logical CPUs, experimental_distribute_dataset
DIST_FROM_FN = "generated__tf2.21cpu__dist_from_fn_loop"  # distribute_datasets_from_function
RETRACE = "generated__tf2.21cpu__retrace_loop"  # a tf.function traced again in every step
PYDATASET = "generated__tf2.21cpu__pydataset_fit"  # Keras reads it through from_generator
PY_IN_STEP = "generated__tf2.21cpu__py_function_step"  # tf.py_function in the training step
FOR_LOOP = "generated__tf2.21cpu__for_loop_slow_input"  # `for batch in ds:`, marker inside
GAN_ON_BATCH = "generated__tf2.21cpu__gan_train_on_batch"  # train_on_batch calls as steps
AMD_CONV = "tracelens__mi300_jax08_conv__tw003"
AMD_GEMM = "tracelens__mi300_jax08_gemm__tw003"
AMD_LEGACY = "tracelens__mi300_jax_conv_legacy__chi-mi300x-013"


def test_every_rule_has_id_fix_guide_and_a_unique_id() -> None:
    assert len(set(RULE_IDS)) == len(RULE_IDS) >= 20
    for r in RULES:
        assert r.id.replace("_", "").isalnum() and r.fix and r.fires_when
        assert "tensorflow.org/guide/" in r.guide or "guide" in r.guide.lower()


def test_every_fired_advice_carries_evidence_threshold_fix_and_guide() -> None:
    for name in (PY, SERIAL, NO_PREFETCH, FILE_READ, GENERATOR, CALLBACK, EAGER, AMD_CONV):
        for a in summary(name).advice:
            assert a.code in RULE_IDS and a.severity in ("info", "warning", "critical")
            assert a.evidence and a.threshold and a.fix and a.guide, a


# --- input pipeline -------------------------------------------------------------------------


def test_input_bound_fires_with_the_synthetic_data_check_and_its_saving() -> None:
    s = summary(PY)
    a = one(s, "input_bound")
    assert a.severity == "critical" and a.message == s.input_bound.advice
    assert a.message.startswith("Your program is HIGHLY input-bound because 76.3%")
    assert a.evidence["input_pct"] == pytest.approx(100 * s.input_bound.ratio)
    assert a.evidence["expected_saving_pct"] == pytest.approx(a.evidence["input_pct"])
    assert "synthetic data" in a.fix and f"{a.evidence['input_pct']:.1f} %" in a.fix


def test_input_bound_silent_when_not_input_bound() -> None:
    s = summary(COMPUTE)
    assert s.input_bound.verdict == "not" and not fired(s, "input_bound")


def test_tfdata_py_function_fires_with_the_python_time_per_batch() -> None:
    a = one(summary(PY), "tfdata_py_function")
    # The map's py_function sleeps 20 ms per batch; two calls may overlap a step.
    assert 0.018 <= a.evidence["python_op_s_per_step"] <= 0.045
    assert a.evidence["python_op_share_of_tfdata"] >= 0.10
    assert "TensorFlow ops" in a.fix


def test_tfdata_py_function_silent_without_python_ops() -> None:
    for name in (SERIAL, NO_PREFETCH, HEALTHY):
        assert summary(name).input_pipeline.python_op_s == 0.0
        assert not fired(summary(name), "tfdata_py_function")


def test_tfdata_map_serial_fires_on_the_sequential_map_stage() -> None:
    s = summary(SERIAL)
    a = one(s, "tfdata_map_serial")
    assert s.input_pipeline.slowest_stage.name == "Iterator::Root::Prefetch::Map"
    assert "Iterator::Root::Prefetch::Map" in a.message
    # 6 sorts over a 32x32x32x3 batch per step: milliseconds of map self time.
    assert a.evidence["slowest_stage_s_per_step"] > 0.001
    assert "num_parallel_calls=tf.data.AUTOTUNE" in a.fix


def test_tfdata_map_serial_silent_when_the_map_is_parallel() -> None:
    s = summary(NO_PREFETCH)
    assert s.input_pipeline.slowest_stage.name == "Iterator::Root::ParallelMapV2"
    assert not fired(s, "tfdata_map_serial")

def test_slowest_stage_under_a_parallel_batch_is_its_workers_stage_not_the_wait() -> None:
    # batch(num_parallel_calls): the consumer's ParallelBatch GetNext waits for two workers
    # whose work (filter -> parallel map -> scan) shows as the stages below it. The wait has
    # the largest self time after the prefetches; the slowest stage is the working one.
    s = summary("generated__tf2.21cpu__tfdata_stage_kinds")
    by_self = [st.name.rsplit("::", 1)[-1] for st in s.input_pipeline.stages]
    assert by_self.index("ParallelBatch") < by_self.index("Filter")  # the wait reads larger
    slowest = s.input_pipeline.slowest_stage
    assert slowest.name.endswith("::TakeWhile::ParallelBatch::Filter")
    assert slowest.self_s == max(st.self_s for st in s.input_pipeline.stages
                                 if "::ParallelBatch::" in st.name)
    a = one(s, "tfdata_slowest_stage")
    assert slowest.name in a.message and "ParallelBatch " not in a.message


def _stage(s: WindowSummary, suffix: str) -> TfDataStage:
    (found,) = [st for st in s.input_pipeline.stages if st.name.endswith(suffix)]
    return found


def _merged_parts(s: WindowSummary, pattern: str, n: int) -> tuple[list[TfDataStage],
                                                                     TfDataStage]:
    """The `n` stages whose names match `pattern` (XProf's rows, one per index) and the
    slowest stage, checked to be their sum."""
    parts = [st for st in s.input_pipeline.stages if re.search(pattern, st.name)]
    assert len(parts) == n
    slowest = s.input_pipeline.slowest_stage
    assert slowest.self_s == pytest.approx(sum(st.self_s for st in parts))
    return parts, slowest


@pytest.mark.parametrize("name, parallel, named", [
    # map(sleep 4 ms) then batch, fused into MapAndBatch: its workers wait in the Map below
    ("generated__tf2.20cpu__tfkeras_fit", "::MapAndBatch", "::MapAndBatch::Map"),
    ("generated__tf2.20cpu__keras3_fit", "::MapAndBatch", "::MapAndBatch::Map"),
    # a parallel map whose own function (Keras's batch gather from arrays) is the work
    ("generated__tf2.21cpu__numpy_epochs_fit", "::Prefetch::ParallelMapV2",
     "::Prefetch::ParallelMapV2"),
    # an interleave of quick TFRecord readers: the interleave itself
    ("generated__tf2.21cpu__tfrecord_fit", "::ParallelInterleaveV4", "::ParallelInterleaveV4"),
])
def test_a_parallel_stage_is_named_only_when_the_stages_below_do_not_explain_its_wait(
        name: str, parallel: str, named: str) -> None:
    s = summary(name)
    stage = _stage(s, parallel)
    # the working stages below it: a prefetch or a repeat there only waits in turn
    below = [st for st in s.input_pipeline.stages if st.name.startswith(stage.name + "::")
             and not re.sub(r"\[\d+\]$", "", st.name).endswith(("::Prefetch", "::ForeverRepeat"))]
    assert s.input_pipeline.slowest_stage.name.endswith(named)
    if named == parallel:  # its own function is the work: the stages below hold little
        assert sum(st.self_s for st in below) < 0.75 * stage.self_s
    else:  # its wait is the stage below: 96-99 % of it on these captures
        assert sum(st.self_s for st in below) >= 0.9 * stage.self_s
        assert s.input_pipeline.slowest_stage.self_s < stage.self_s  # the wait reads larger
        # a sequential map below the fused batch: parallelizing that map is the fix
        assert one(s, "tfdata_map_serial").evidence["slowest_stage_s_per_step"] > 0.1
        assert fired(s, "tfdata_py_function")  # the sleep runs in a py_function


def test_interleave_cycle_elements_are_one_stage_and_their_map_gets_its_own_fix() -> None:
    # interleave(lambda f: TextLineDataset(f).map(parse), cycle_length=4): the same per-file
    # Map under four cycle elements; XProf's table (and tfobs's stages) list each apart.
    s = summary("generated__tf2.21cpu__interleave_file_maps")
    branches, slowest = _merged_parts(s, r"::ParallelInterleaveV4\[\d\]::Map$", 4)
    assert slowest.name == re.sub(r"\[\d\]::Map$", "[*]::Map", branches[0].name)
    assert slowest.count == sum(st.count for st in branches)
    # no one branch is the largest stage; together they are (the interleave's wait is theirs)
    assert max(st.self_s for st in branches) < _stage(s, "::ParallelInterleaveV4").self_s
    a = one(s, "tfdata_map_serial")
    assert a.fix == MAP_IN_INTERLEAVE_FIX
    assert a.evidence["slowest_stage_s_per_step"] == pytest.approx(slowest.self_s / s.steps.count)
    # a sequential map outside any interleave keeps the plain fix
    assert one(summary(SERIAL), "tfdata_map_serial").fix == MAP_SERIAL.fix
    # the table and the page say what "[*]" means; a plain name needs no note
    assert f"{slowest.name} " in render(s) and slowest.merged_note in render(s)
    assert slowest.merged_note in page.render_page(s)
    assert summary(SERIAL).input_pipeline.slowest_stage.merged_note == ""


def test_rejection_resamples_own_sequential_map_gets_a_fix_the_user_can_apply() -> None:
    # rejection_resample checks every element it draws in a sequential map of its own
    # (zip(acceptance, initial distribution).map(check), zipped with the data, filtered):
    # "pass num_parallel_calls to Dataset.map" names a map the user never wrote.
    s = summary("generated__tf2.21cpu__rejection_resample_loop")
    slow = s.input_pipeline.slowest_stage
    assert re.search(r"::Filter::ParallelMapV2::Zip\[0\]::Map$", slow.name)
    a = one(s, "tfdata_map_serial")
    assert a.fix == REJECTION_RESAMPLE_FIX and "sample_from_datasets" in a.fix
    # the same shape without the acceptance check's own zip below it is a user's map
    alone = tuple(st for st in s.input_pipeline.stages if not st.name.startswith(slow.name + "::"))
    plain = dataclasses.replace(
        s, input_pipeline=dataclasses.replace(s.input_pipeline, stages=alone), advice=())
    assert one(dataclasses.replace(plain, advice=advise(plain)),
               "tfdata_map_serial").fix == MAP_SERIAL.fix


def test_an_input_wait_held_by_a_few_steps_is_told_from_one_spread_over_all() -> None:
    # tf_keras fit across epochs with validation: most of the wait is in the first steps
    # after each new iterator; the others wait under 5 % (XProf: MODERATELY input-bound).
    s = summary("generated__tf2.21cpu__tfkeras_fit_validation_epochs")
    a = one(s, "input_bound")
    assert a.fix.startswith("the wait is a few steps'")
    waits = sorted((st.breakdown_s.get("input", 0.0) for st in s.steps.items), reverse=True)
    k = int(a.fix.split(" of it in ")[1].split(" of ")[0])
    assert sum(waits[:k]) >= 0.7 * sum(waits) and k <= 0.2 * len(waits)
    # the same wait spread evenly over the steps: no such words
    mean = sum(waits) / len(waits)
    even = tuple(dataclasses.replace(st, breakdown_s={**st.breakdown_s, "input": mean})
                 for st in s.steps.items)
    spread = dataclasses.replace(s, steps=dataclasses.replace(s.steps, items=even), advice=())
    assert not one(dataclasses.replace(spread, advice=advise(spread)),
                   "input_bound").fix.startswith("the wait is a few steps'")


def test_an_input_wait_in_the_windows_last_steps_is_a_buffer_running_dry() -> None:
    # Two generators interleaved (8 ms a batch each) feed a 1 ms step: the interleave's
    # buffer, filled before the window, runs dry in its last steps (the job's own next()
    # timing: 6.1 and 4.4 ms, under 1 ms before). Not "a pipeline filling after a start,
    # judge from a later window": a later window waits more.
    s = summary("generated__tf2.21cpu__interleave_generators_nondet_loop")
    assert s.input_bound.verdict == "highly"
    a = one(s, "input_bound")
    assert a.fix.startswith("the wait is a few steps'")
    assert "running dry" in a.fix and "filling after a start" not in a.fix
    nums = [int(n) for n in a.fix.split(" steps (")[1].split(")")[0].split(", ")]
    last = sorted(st.step_num for st in s.steps.items)[-len(nums) - 1:]
    assert set(nums) <= set(last)
    # waits in the first steps after a new iterator keep the filling words
    first = one(summary("generated__tf2.21cpu__tfkeras_fit_validation_epochs"), "input_bound")
    assert "filling after a start" in first.fix and "running dry" not in first.fix


def test_a_few_waiting_steps_whose_fetches_found_a_batch_ready_are_no_pipeline_filling(
) -> None:
    # A loop over repeat().batch().prefetch(2) made before its warm-up steps: 80 % of the
    # input wait is in steps 5 and 6, whose fetches began with a batch in the prefetch
    # buffer (as all 10 did), no pipeline work during them. No pipeline filled there.
    s = summary("generated__tf2.21cpu__tape_outside_function_loop")
    ip = s.input_pipeline
    assert ip.prefetch_ready == ip.prefetch_fetches == 10
    assert set(ip.prefetch_slow_ready_steps) == {5, 6}
    a = one(s, "input_bound")
    assert a.fix.startswith("the wait is a few steps'") and "(5, 6)" in a.fix
    assert "filling after a start" not in a.fix
    assert "began with a batch in the prefetch buffer" in a.fix
    assert "judge from a longer window" in a.fix
    # the first steps after each new iterator, whose fetches found the buffer empty, keep
    # the filling words
    first = one(summary("generated__tf2.21cpu__tfkeras_fit_validation_epochs"), "input_bound")
    assert "filling after a start" in first.fix


def test_a_py_function_in_the_step_is_timed_over_the_kept_steps() -> None:
    # The window's py_function time held the first and last steps XProf drops, divided by
    # the kept steps: 20-25 % high. Counted inside the kept steps, it is at most their time
    # and matches the calls the job timed itself (about 1.24 ms a step).
    s = summary("generated__tf2.21cpu__custom_train_step_pyfunc_fit")
    st = s.steps
    assert 1.1e-3 < st.python_op_s < 1.7e-3
    window_total = sum(op.self_s for op in s.ops.top if "EagerPyFunc" in op.name)
    assert 0 < st.python_op_s * st.count < window_total  # 12 calls in the window, 10 kept
    a = one(s, "python_in_step")
    assert f"{100 * st.python_op_s / st.mean_s:.1f} % in py_function" in a.message


def test_a_stage_below_a_filling_cache_says_later_epochs_skip_it() -> None:
    # The first epoch of map -> cache(): the map runs below MemoryCacheImpl only while the
    # cache fills; "cache() after expensive steps" told a user who had one already.
    s = summary("generated__tf2.21cpu__cache_fill_loop")
    assert "::MemoryCacheImpl::" in s.input_pipeline.slowest_stage.name
    a = one(s, "tfdata_slowest_stage")
    assert a.fix == CACHE_FILL_FIX + SLOWEST_STAGE_RULE.fix
    # a cache read back (a later epoch) has nothing below it: no such word
    read = summary("generated__tf2.21cpu__cache_shuffle_fit")
    assert not any(a.fix.startswith(CACHE_FILL_FIX) for a in read.advice)


def test_a_filling_cache_under_a_take_is_named_as_discarded_each_epoch() -> None:
    # map -> cache() -> take(4) of 16 batches, a new iterator every 4 steps: the take stops
    # before the cache's end, so TensorFlow drops the partly filled cache and every epoch
    # maps again. Not "profile a later epoch" nor "the dataset is built anew each epoch".
    s = summary("generated__tf2.21cpu__cache_take_partial_loop")
    assert "::FiniteTake::MemoryCacheImpl::Map" in s.input_pipeline.slowest_stage.name
    a = one(s, "tfdata_map_serial")
    assert a.fix.startswith(CACHE_PARTIAL_FIX) and not a.fix.startswith(CACHE_FILL_FIX)
    assert "ds.take(n).cache()" in a.fix
    # a filling cache with no take above it keeps the first-epoch words
    fill = one(summary("generated__tf2.21cpu__cache_fill_loop"), "tfdata_slowest_stage")
    assert fill.fix == CACHE_FILL_FIX + SLOWEST_STAGE_RULE.fix


def test_a_repeats_epochs_are_one_stage() -> None:
    # cache_file_fit: the window crosses an epoch; the file cache's reads under ForeverRepeat[0]
    # and [1] are the same stage.
    s = summary("generated__tf2.21cpu__cache_file_fit")
    _, slowest = _merged_parts(
        s, r"ForeverRepeat\[\d\]::Prefetch::BatchV2::FileCacheImpl$", 2)
    assert "ForeverRepeat[*]::Prefetch::BatchV2::FileCacheImpl" in slowest.name


def test_tfdata_no_prefetch_fires_without_a_prefetch_stage() -> None:
    s = summary(NO_PREFETCH)
    a = one(s, "tfdata_no_prefetch")
    assert not any("Prefetch" in st.name for st in s.input_pipeline.stages)
    assert a.evidence["stages_seen"] == len(s.input_pipeline.stages)
    assert "prefetch(tf.data.AUTOTUNE)" in a.fix


def test_tfdata_no_prefetch_silent_with_prefetch() -> None:
    for name in (SERIAL, PY):
        assert not fired(summary(name), "tfdata_no_prefetch")


def test_tfdata_file_read_fires_when_reads_are_the_slowest_stage() -> None:
    s = summary(FILE_READ)
    a = one(s, "tfdata_file_read")
    assert s.input_pipeline.slowest_stage.name.endswith("::TFRecord")
    reads = sum(s.input_pipeline.host_input_total_s[k]
                for k in ("demanded_file_read", "advanced_file_read"))
    assert a.evidence["file_read_share"] == pytest.approx(
        reads / sum(s.input_pipeline.host_input_total_s.values()))
    assert "interleave" in a.fix and "cache" in a.fix


def test_tfdata_file_read_silent_without_file_sources() -> None:
    for name in (PY, GENERATOR):
        assert not fired(summary(name), "tfdata_file_read")


def test_tfdata_from_generator_fires_and_replaces_the_py_function_rule() -> None:
    s = summary(GENERATOR)
    a = one(s, "tfdata_from_generator")
    assert s.input_pipeline.slowest_stage.name.endswith("::Generator")
    assert a.evidence["slowest_stage_s_per_step"] == pytest.approx(
        s.input_pipeline.slowest_stage.self_s / s.steps.count)
    assert s.input_pipeline.python_op_s > 0  # the generator runs as a PyFunc op ...
    assert not fired(s, "tfdata_py_function")  # ... and is blamed once, as a generator


def test_tfdata_from_generator_finds_the_generator_of_every_epoch_from_summary() -> None:
    # The PyDataset capture's stages as two epochs of a repeat, the FlatMap that
    # from_generator builds (handing the Python elements on) slower than the generator: the
    # slowest stage is that FlatMap over both epochs, and the generator below it is found.
    s = summary(PYDATASET)
    ip = s.input_pipeline
    epochs = tuple(
        TfDataStage(st.name.replace("Iterator::Root::", f"Iterator::Root::ForeverRepeat[{e}]::"),
                    st.self_s * (3 if st.name.endswith("::FlatMap") else 1) / 2, st.count)
        for st in ip.stages if st.name.startswith("Iterator::Root::") for e in (0, 1))
    slow = slowest_stage(epochs)
    assert slow.name == "Iterator::Root::ForeverRepeat[*]::FlatMap"
    s = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        ip, stages=epochs, slowest_stage=slow), advice=())
    a = one(dataclasses.replace(s, advice=advise(s)), "tfdata_from_generator")
    assert slow.name in a.message


def test_tfdata_from_generator_silent_on_tensor_sources() -> None:
    assert not fired(summary(PY), "tfdata_from_generator")


def test_per_replica_input_is_not_blamed_on_from_generator() -> None:
    # MirroredStrategy's per-replica iterators are `::Generator` stages too, but run
    # MultiDeviceIterator ops and no Python: from_generator's fix would not apply.
    s = summary(MIRRORED)
    assert s.input_bound.verdict == "highly"
    assert s.input_pipeline.slowest_stage.name.endswith("::Generator")
    assert s.input_pipeline.per_replica_input and s.input_pipeline.python_op_s == 0
    a = one(s, "tfdata_per_replica_input")
    assert a.evidence["slowest_stage_s_per_step"] == pytest.approx(
        s.input_pipeline.slowest_stage.self_s / s.steps.count)
    # The dataset's own stages (Rebatch, BatchV2, ...) are cheap here: the hand-off is named,
    # and the dataset fixes are said not to help.
    assert 0 < a.evidence["dataset_stages_s_per_step"] < 0.5 * a.evidence[
        "slowest_stage_s_per_step"]
    assert "the hand-off, not the dataset" in a.message
    assert "experimental_per_replica_buffer_size" in a.fix and "will not shorten" in a.fix
    assert not fired(s, "tfdata_from_generator") and not fired(s, "tfdata_slowest_stage")
    g = summary(GENERATOR)  # a real from_generator: no MultiDeviceIterator
    assert not g.input_pipeline.per_replica_input and not fired(g, "tfdata_per_replica_input")


@pytest.mark.parametrize("name", ["generated__tf2.21cpu__copy_to_device_loop",
                                  "generated__tf2.21cpu__prefetch_to_device_loop"])
def test_device_copy_is_not_blamed_on_from_generator(name: str) -> None:
    # copy_to_device / prefetch_to_device copy each element in a `::Generator` stage that
    # runs IteratorFromStringHandleV2 ops and no Python: from_generator's fix would not apply.
    s = summary(name)
    ip = s.input_pipeline
    assert ip.device_copy_input and ip.python_op_s == 0 and not ip.per_replica_input
    assert ip.slowest_stage.name.endswith("::Generator")
    assert not fired(s, "tfdata_from_generator")
    if s.input_bound.verdict in ("highly", "moderately"):
        a = one(s, "tfdata_slowest_stage")
        assert "copy_to_device or prefetch_to_device" in a.message
        own = a.evidence["dataset_stages_s_per_step"]
        assert own > 0
        if own >= 0.5 * a.evidence["slowest_stage_s_per_step"]:
            assert "copy waits for that dataset" in a.message and "before copy_to_device" in a.fix
        else:
            assert "the copy itself" in a.message and "buffer_size" in a.fix
    g = summary(GENERATOR)  # a real from_generator runs Python and copies nothing
    assert not g.input_pipeline.device_copy_input and fired(g, "tfdata_from_generator")


def test_device_copy_names_the_copy_itself_where_the_dataset_keeps_ahead() -> None:
    # The prefetch_to_device summary with its dataset's own stages made cheap.
    s = summary("generated__tf2.21cpu__prefetch_to_device_loop")
    slow = s.input_pipeline.slowest_stage
    stages = tuple(st if st.name == slow.name or slow.name.startswith(st.name + "::")
                   else dataclasses.replace(st, self_s=st.self_s / 100)
                   for st in s.input_pipeline.stages)
    cheap = dataclasses.replace(
        s, input_pipeline=dataclasses.replace(s.input_pipeline, stages=stages), advice=())
    a = one(dataclasses.replace(cheap, advice=advise(cheap)), "tfdata_slowest_stage")
    assert "the copy itself" in a.message and "prefetch_to_device(device, buffer_size" in a.fix


def test_per_replica_input_blames_a_slow_distributed_dataset_from_summary() -> None:
    # The mirrored capture's summary with a heavy map below the per-replica iterators.
    s = summary(MIRRORED)
    ip = s.input_pipeline
    heavy = TfDataStage("Iterator::Root::Prefetch::Rebatch::BatchV2::ParallelMapV2",
                        ip.slowest_stage.self_s * 0.9, 12)
    s = dataclasses.replace(s, input_pipeline=dataclasses.replace(ip, stages=(
        *ip.stages, heavy)), advice=())
    a = one(dataclasses.replace(s, advice=advise(s)), "tfdata_per_replica_input")
    assert a.evidence["dataset_stages_s_per_step"] >= 0.5 * a.evidence[
        "slowest_stage_s_per_step"]
    assert "does not keep ahead" in a.message and "num_parallel_calls" in a.fix


def test_tfdata_slowest_stage_names_the_stage_when_no_specific_cause_fits() -> None:
    s = summary(HEAVY)
    a = one(s, "tfdata_slowest_stage")
    assert s.input_pipeline.slowest_stage.name == "Iterator::Root::Prefetch::ParallelMapV2"
    assert s.input_pipeline.slowest_stage.name in a.message
    assert a.evidence["slowest_stage_s_per_step"] >= 0.25 * a.evidence["input_s_per_step"] > 0
    # its map comes after the batch (`ParallelMapV2::BatchV2`): not "batch before map"
    assert a.fix.startswith("the map already runs on whole batches")
    specific = {"tfdata_py_function", "tfdata_map_serial", "tfdata_no_prefetch",
                "tfdata_file_read", "tfdata_from_generator", "tfdata_per_replica_input",
                "tfdata_map_function"}
    assert not specific & {x.code for x in s.advice}
    # The map's function ops are that stage's own work here: they are counted...
    assert s.input_pipeline.function_ops_s > s.input_pipeline.slowest_stage.self_s
    # ...and the stage that waits for them is the one named, the parallel map itself.


PARSE_MAP = "generated__tf2.21cpu__tfrecord_parse_parallel_map"  # parse_example in parallel


def _ops_on_tfdata_threads(name: str) -> dict[str, float]:
    """Seconds per op type of the TensorFlow op events on tf.data's threads, read from the
    capture's own events."""
    from tfobs.xspace import schema

    space = schema.XSpace().FromString((CAPTURES / f"{name}.xplane.pb").read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: m.name for k, m in host.event_metadata.items()}
    out: dict[str, float] = {}
    for line in host.lines:
        if not line.name.startswith("tf_data"):
            continue
        for e in line.events:
            head, sep, kind = names[e.metadata_id].partition(":")
            if sep and head != "Iterator" and not kind.startswith(":"):
                out[kind] = out.get(kind, 0.0) + e.duration_ps / 1e12
    return out


def test_tfdata_map_function_names_the_parse_a_parallel_map_runs_off_the_stages() -> None:
    """parse_example in a parallel map after batch: its ops run on tf.data's own threads,
    in no stage's self time, so XProf's slowest stage is the file read. The parse is the
    heavier work: tfdata_map_function names it, and file reads are not blamed."""
    s = summary(PARSE_MAP)
    ip = s.input_pipeline
    assert ip.slowest_stage.name.endswith("::TFRecord")  # XProf's (test_fidelity_xprof)
    ops = _ops_on_tfdata_threads(PARSE_MAP)
    assert ip.function_ops_top[0] == "ParseExampleV2" == max(ops, key=ops.__getitem__)
    no_datasets = sum(v for k, v in ops.items() if "Dataset" not in k)
    assert ip.function_ops_s == pytest.approx(no_datasets, rel=1e-6)
    assert ip.function_ops_s > ip.slowest_stage.self_s
    a = one(s, "tfdata_map_function")
    per_step = ip.function_ops_s / s.steps.count
    assert a.evidence["function_ops_s_per_step"] == pytest.approx(per_step)
    assert a.evidence["function_ops_s_per_step"] > a.evidence["slowest_stage_s_per_step"]
    assert "ParseExampleV2" in a.message and "parse_example on a batch" in a.fix
    assert not fired(s, "tfdata_file_read") and not fired(s, "tfdata_slowest_stage")
    # Where the file read is the heavier work, it is still named.
    reads = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        ip, function_ops_s=0.1 * ip.slowest_stage.self_s))
    codes = {x.code for x in advise(reads)}
    assert "tfdata_file_read" in codes and "tfdata_map_function" not in codes


def test_tfdata_slowest_stage_silent_when_a_specific_rule_fires_or_the_stage_is_small() -> None:
    for name in (PY, SERIAL, NO_PREFETCH, FILE_READ, GENERATOR):
        assert not fired(summary(name), "tfdata_slowest_stage"), name
    # Moderately input-bound, but its slowest stage (batching) is a small part of the wait.
    s = summary(EAGER)
    assert s.input_bound.verdict == "moderately" and not fired(s, "tfdata_slowest_stage")


def test_output_bound_from_summary() -> None:
    base = summary(HEALTHY)
    steps = [dataclasses.replace(st, breakdown_s={**st.breakdown_s, "output": 0.3 * st.duration_s})
             for st in base.steps.items]
    s = dataclasses.replace(base, steps=dataclasses.replace(base.steps, items=tuple(steps)))
    a = next(a for a in advise(s) if a.code == "output_bound")
    assert a.evidence["output_pct"] == pytest.approx(30.0)
    assert a.message.startswith("Your program is HIGHLY output-bound because 30.0%")
    assert not [a for a in base.advice if a.code == "output_bound"]


# --- gaps between steps ---------------------------------------------------------------------


def test_step_gap_fires_on_the_callback_between_steps() -> None:
    a = one(summary(CALLBACK), "step_gap")
    # The callback busy-waits 15 ms after each batch, outside the step's marker.
    assert 0.015 <= a.evidence["gap_s"] <= 0.025
    assert a.evidence["gap_share"] >= 0.5
    assert "steps_per_execution" in a.fix


def test_step_gap_names_the_python_between_train_on_batch_calls() -> None:
    """A GAN trained by hand: tfobs's wrapper made each train_on_batch call a step; the
    generator's predict_on_batch and the numpy batch building run between them."""
    s = summary(GAN_ON_BATCH)
    assert s.steps.method == "markers" and s.steps.count >= 8
    a = one(s, "step_gap")
    assert a.evidence["gap_share"] >= 0.10
    assert s.steps.outside_ratio == pytest.approx(a.evidence["gap_share"], abs=0.05)
    assert "train_on_batch" in a.fix and "predict_on_batch" in a.fix


SLEEP = "generated__tf2.21cpu__sleep_between_steps_loop"  # 8 ms time.sleep after each step


def test_step_gap_says_when_the_gaps_hold_no_event_and_fits_its_fix() -> None:
    """A loop pacing itself: an 8 ms time.sleep after each marked step, the Python tracer
    off. No event on any thread of the host lies in the gaps, so the capture cannot say
    what they hold: step_gap says so, and its fix is the Python tracer and the pace the
    job sets, not Keras callbacks or numpy batch building."""
    s = summary(SLEEP)
    assert s.steps.gap_idle_ratio >= 0.99
    a = one(s, "step_gap")
    assert a.severity == "critical" and 0.008 <= a.evidence["gap_s"] <= 0.0095  # sleep_ms=8
    assert a.evidence["gap_idle_ratio"] == s.steps.gap_idle_ratio
    assert "100 % of the gaps' time holds no event on any thread of the host" in a.message
    assert "a time.sleep, a rate limit" in a.message
    assert a.fix.startswith("Profile once with the Python tracer on")
    assert "python_tracer_level=1" in a.fix and "the step time is not the bottleneck" in a.fix
    assert "Keras callbacks" not in a.fix and "predict_on_batch" not in a.fix
    assert WindowSummary.from_dict(s.to_dict()).steps.gap_idle_ratio == s.steps.gap_idle_ratio
    # A JAX window's fix in JAX's terms; with the tracer on and the gaps still empty, the
    # host waits: no tracer to turn on.
    jax = dataclasses.replace(s, environment=dataclasses.replace(s.environment,
                                                                 framework="jax"))
    j = one(dataclasses.replace(s, advice=advise(jax)), "step_gap")
    assert "jax.profiler.trace" in j.fix and "tf.function" not in j.fix
    traced = dataclasses.replace(s, steps=dataclasses.replace(
        s.steps, python_traced_top=("train.py:12 loop",)))
    t = one(dataclasses.replace(s, advice=advise(traced)), "step_gap")
    assert "saw no Python there either" in t.message and "Profile once" not in t.fix
    # Measured only where the gaps could make a finding (below step_gap's share, a window
    # of thousands of steps pays nothing for it): 4,000 tiny TF steps, 1.9 % gaps; 3,000
    # JAX steps, 5.5 %.
    assert GAPS_MEASURED_SHARE < GAP_SHARE
    assert summary("generated__tf2.21cpu__tiny_steps_long").steps.gap_idle_ratio == 0.0
    assert summary("generated__jax0.10cpu__tiny_steps_long").steps.gap_idle_ratio == 0.0


def test_step_gap_keeps_its_wording_where_the_gaps_hold_events() -> None:
    """A Keras fit's callback gap holds few events too: the callbacks' fix stays, with the
    Python tracer to find which. Gaps holding the loop's events (train_on_batch's Python, a
    JAX loop's Python with the tracer on) keep the wording they had."""
    from tfobs.analysis.advice.gaps import STEP_GAP

    k = one(summary(CALLBACK), "step_gap")
    assert k.fix.startswith(STEP_GAP.fix) and "python_tracer_level=1" in k.fix
    assert "per-batch callbacks" in k.message
    for name in (GAN_ON_BATCH, "generated__tf2.21cpu__fit_validation_unmarked",
                 "generated__jax0.10cpu__python_generator_between_steps"):
        s = summary(name)
        assert s.steps.gap_idle_ratio < 0.5, name
        a = one(s, "step_gap")
        assert "holds no event" not in a.message and "python_tracer_level" not in a.fix
        assert "gap_idle_ratio" not in a.evidence


def test_step_gap_silent_on_the_healthy_run() -> None:
    assert not fired(summary(HEALTHY), "step_gap")
    assert not fired(summary(HEALTHY), "step_pause")


def test_one_long_pause_is_a_pause_not_a_gap_in_every_step() -> None:
    # fit with validation_data: the steps run back to back, and the epoch's end (evaluation
    # on the validation set) is one long pause among them.
    s = summary("generated__tf2.21cpu__fit_validation")
    assert not fired(s, "step_gap")
    a = one(s, "step_pause")
    starts = [st.start_ns for st in s.steps.items]
    gaps = [(b - a_) / 1e9 - st.duration_s
            for a_, b, st in zip(starts, starts[1:], s.steps.items, strict=False)]
    assert a.evidence["longest_gap_s"] == pytest.approx(max(gaps))
    assert a.evidence["typical_gap_s"] < 0.1 * a.evidence["period_s"] <= a.evidence["gap_s"]
    assert a.evidence["pauses"] == 1 and "validation" in a.fix
    # Its severity follows its share: a warning from a quarter of the step period.
    small = dataclasses.replace(s, advice=())
    starts = [st.start_ns for st in small.steps.items]
    # the same pause made shorter, under a quarter of the period: an info
    k = max(range(len(gaps)), key=gaps.__getitem__)
    cut = int(0.3 * gaps[k] * 1e9)
    items = tuple(st if i <= k else dataclasses.replace(st, start_ns=st.start_ns - cut)
                  for i, st in enumerate(small.steps.items))
    small = dataclasses.replace(small, steps=dataclasses.replace(small.steps, items=items))
    shrunk = one(dataclasses.replace(small, advice=advise(small)), "step_pause")
    assert 0.1 <= shrunk.evidence["gap_share"] < 0.25 and shrunk.severity == "info"
    assert a.evidence["gap_share"] >= 0.25 and a.severity == "warning"
    # The steady callback gap stays `step_gap`.
    assert not fired(summary(CALLBACK), "step_pause")


def test_all_others_fires_with_xprofs_sentence() -> None:
    a = one(summary(EAGER), "all_others_bound")
    assert a.severity == "warning" and a.evidence["other_pct"] >= 15.0
    assert a.message == (f"{a.evidence['other_pct']:.1f} % of the total step time sampled is "
                         "spent on 'All Others' time. This could be due to Python execution "
                         "overhead.")


def test_potentially_input_bound_names_all_others_not_the_input_pipeline() -> None:
    # XProf's POTENTIALLY verdict rests on 'All Others' alone: the advice names the 'All
    # Others' fix beside it, and the input rule's fix does not send the user to tf.data.
    s = summary(HEALTHY)
    assert s.input_bound.verdict == "potentially"
    others = one(s, "all_others_bound")
    assert others.evidence["other_pct"] >= 3.0 and "Python" in others.fix
    inp = one(s, "input_bound")
    assert inp.severity == "info" and "fix the input pipeline first" not in inp.fix
    assert "all_others_bound" in inp.fix and f"{others.evidence['other_pct']:.1f} %" in inp.fix


@pytest.mark.parametrize("name, others_first", [
    ("generated__tf2.21cpu__csv_dataset_loop", True),  # input 5.7 %, 'All Others' 48.5 %
    ("generated__tf2.21cpu__cache_file_fit", True),  # 6.5 % and 15.0 %
    ("generated__tf2.21cpu__keras3_spe4_callback", False),  # 8.6 % and 2.3 %
    ("generated__tf2.21cpu__pydataset_fit", False),  # 14.3 % and 9.0 %
])
def test_moderately_input_bound_names_the_larger_share_first(name: str,
                                                             others_first: bool) -> None:
    # XProf's MODERATELY verdict says to reduce both input and 'All Others'. Where 'All
    # Others' is twice the input wait or more, "fix the input pipeline first" would send the
    # user to the smaller lever: the fix names all_others_bound first and what the input
    # check should show.
    from tfobs.analysis.advice.input_pipeline import OTHER_FIRST

    s = summary(name)
    assert s.input_bound.verdict == "moderately"
    inp = one(s, "input_bound")
    assert inp.severity == "warning"
    ratio = inp.evidence["other_pct"] / inp.evidence["input_pct"]
    assert (ratio >= OTHER_FIRST) == others_first, ratio
    # Where the prefetch buffer held a batch at every fetch, the input part of the fix says
    # the pipeline keeps up (the wait is the hand-over): no drop to expect from synthetic
    # data; where one stalled fetch holds the wait, the fix says so first.
    keeps_up = "the pipeline keeps up" in inp.fix
    if others_first:
        assert inp.fix.startswith("reduce both, the larger first")
        assert f"{inp.evidence['other_pct']:.1f} %" in inp.fix
        assert inp.fix.index("all_others_bound") < inp.fix.index(
            "pipeline keeps up" if keeps_up else "input pipeline")
        assert one(s, "all_others_bound").evidence["other_pct"] == inp.evidence["other_pct"]
    else:
        assert re.sub(r"^the wait is a few stalls: .*?; then: ", "", inp.fix).startswith(
            "fix the input pipeline first")
    assert keeps_up or f"drops by about {inp.evidence['input_pct']:.1f} %" in inp.fix


def test_eager_ops_fires_and_names_the_eager_ops() -> None:
    s = summary(EAGER)
    a = one(s, "eager_ops")
    # Outside tf.function each step runs, 8 times per trainable variable (the model has 6),
    # Square, Mean, Abs, Max and two AddV2: at least 6 x 8 Mean per kept step.
    assert {o.name for o in s.ops.eager_top} >= {"Mean", "AddV2"}
    mean = next(o for o in s.ops.eager_top if o.name == "Mean")
    assert mean.count >= 6 * 8 * s.steps.count
    assert a.evidence["eager_pct_of_host_op_time"] > 10.0 and "Mean" in a.message
    assert "tf.function" in a.fix


def test_eager_share_counts_the_tf_function_ops_too() -> None:
    # TensorBoard's summary writer runs its ops eagerly beside a tf.function train step:
    # the share is of all host op time (the table's rows plus the eager ops), not 100 %.
    s = summary("generated__tf2.21cpu__summaries_fit")
    assert s.ops.host_s > 0 and s.ops.eager_s > 0
    pct = one(s, "eager_ops").evidence["eager_pct_of_host_op_time"]
    assert pct == pytest.approx(100 * s.ops.eager_s / (s.ops.host_s + s.ops.eager_s))
    assert pct < 100.0
    assert one(summary("generated__tf2.21cpu__eager_loop"),
               "eager_ops").evidence["eager_pct_of_host_op_time"] == 100.0


def test_building_the_next_epochs_iterator_is_not_eager_op_time() -> None:
    # fit on numpy arrays: at the epoch's end Keras builds a new tf.data pipeline and iterator
    # eagerly (MakeIterator alone took tens of ms), which tf.function would not remove.
    s = summary("generated__tf2.21cpu__numpy_epochs_fit")
    assert not any("Dataset" in o.name or "Iterator" in o.name for o in s.ops.eager_top)
    assert not fired(s, "eager_ops")
    assert one(s, "step_pause").evidence["pauses"] == 1


def test_eager_ops_silent_when_the_step_is_a_tf_function() -> None:
    for name in (HEALTHY, CALLBACK):
        assert summary(name).ops.eager_s == 0.0 and not fired(summary(name), "eager_ops")


# --- kernel launch (GPU) --------------------------------------------------------------------


def _gpu(s: WindowSummary) -> WindowSummary:
    return dataclasses.replace(s, environment=Environment(s.environment.hosts, "GPU", 1))


def test_kernel_launch_bound_from_summary_says_xprofs_sentence_with_tfdata() -> None:
    base = summary(HEALTHY)
    steps = [dataclasses.replace(st, breakdown_s={**st.breakdown_s, "host_compute": 0.0,
                                                  "kernel_launch": 0.2 * st.duration_s})
             for st in base.steps.items]
    s = _gpu(dataclasses.replace(base, steps=dataclasses.replace(base.steps, items=tuple(steps))))
    a = next(a for a in advise(s) if a.code == "kernel_launch_bound")
    assert a.severity == "warning" and a.evidence["kernel_launch_pct"] == pytest.approx(20.0)
    assert a.message == ("20.0 % of the total step time sampled is spent on 'Kernel Launch'. "
                         "It could be due to CPU contention with tf.data. In this case, you may "
                         "try to set the environment variable TF_GPU_THREAD_MODE=gpu_private.")
    assert not fired(base, "kernel_launch_bound")


def test_small_kernels_fires_on_a_real_gpu_capture() -> None:
    s = summary(AMD_CONV)
    found = fired(s, "small_kernels")
    assert found
    for a in found:
        dev = next(d for d in s.devices if a.message.startswith(d.device + ":"))
        assert a.evidence["small_kernel_ratio"] == pytest.approx(dev.small_kernel_ratio)
        assert dev.small_kernel_ratio >= 0.5
        assert a.evidence["launch_idle_share"] >= 0.10


def test_small_kernels_silent_on_large_gemm_kernels() -> None:
    assert not fired(summary(AMD_GEMM), "small_kernels")


def test_small_xla_cpu_ops_names_a_program_of_hundreds_of_small_ops() -> None:
    # 36 blocks of small parameters, the loss a Python loop over them unrolled into the
    # jitted step: 572 XLA ops a step of about 2 us each on XLA's CPU threads. The step's
    # cost is that program, not the Python around it: the fix stacks the blocks.
    s = summary("generated__jax0.10cpu__large_pytree_dispatch")
    assert s.steps.xla_cpu_ops == 572  # the same program every step
    a = one(s, "small_xla_cpu_ops")
    assert a.severity == "warning"
    assert a.evidence["xla_cpu_ops_per_step"] == 572
    assert a.evidence["xla_cpu_op_mean_s"] == pytest.approx(
        s.steps.xla_cpu_op_s / s.steps.xla_cpu_ops) and a.evidence["xla_cpu_op_mean_s"] < 5e-6
    assert s.steps.xla_cpu_op_median_s < a.evidence["xla_cpu_op_mean_s"]
    assert 1 / 3 <= a.evidence["xla_cpu_work_share"] <= 1
    assert a.evidence["xla_cpu_work_share"] == pytest.approx(
        s.steps.work_in_steps_s / s.steps.mean_s)
    assert re.match(r"Each step's compiled program runs 572 XLA ops on the CPU averaging "
                    r"[\d.]+ us", a.message), a.message
    assert "jax.vmap" in a.fix and "jax.lax.scan" in a.fix and "stack same-shaped" in a.fix
    assert JAX_DOCS in a.guide
    # The same figures in a TensorFlow window (an XLA program of jit_compile): not this fix.
    tf_env = dataclasses.replace(s.environment, framework="tensorflow")
    assert "small_xla_cpu_ops" not in {
        b.code for b in advise(dataclasses.replace(s, environment=tf_env))}


def test_small_xla_cpu_ops_in_a_compiled_loop_names_the_loop_and_its_fix() -> None:
    # optax's L-BFGS in a jitted lax.while_loop, 15 iterations a step: 5,180 ops a step of
    # 4.7 us (the while and cond ops, whose events span their bodies' ops, left out: counted,
    # they made the mean 13.7 us and the rule stayed silent), most inside the loops, which
    # run more than half the step. No parameters to stack: the loop's fix.
    s = summary("generated__jax0.10cpu__optax_lbfgs_fit_steps")
    st = s.steps
    assert st.xla_cpu_op_s < st.mean_s  # no op counted twice
    assert st.xla_cpu_loop_ops >= SMALL_CPU_LOOP_OPS * st.xla_cpu_ops
    a = one(s, "small_xla_cpu_ops")
    assert a.severity == "warning"
    assert a.evidence["xla_cpu_op_mean_s"] < SMALL_CPU_OP_S
    assert a.evidence["xla_cpu_loop_share"] == pytest.approx(st.xla_cpu_loop_s / st.mean_s)
    assert 1 / 3 <= a.evidence["xla_cpu_loop_share"] <= 1
    assert "inside the program's loops" in a.message and "lax.while_loop" in a.message
    assert a.fix == SMALL_CPU_LOOP_FIX and "stack same-shaped" not in a.fix


def test_small_xla_cpu_ops_silent_on_a_cheap_loop_of_tiny_ops() -> None:
    # A vmapped Newton solve: 928 of its 968 ops a step are the loop's, tiny, and the loop
    # runs 0.4 ms of a 6.3 ms step (the model's few large ops hold the rest): neither the
    # unrolled-parameters fix nor the loop's would save much.
    s = summary("generated__jax0.10cpu__vmap_batched_while_steps")
    st = s.steps
    assert st.xla_cpu_ops >= SMALL_CPU_OPS_PER_STEP
    assert st.xla_cpu_op_s / st.xla_cpu_ops < SMALL_CPU_OP_S
    assert st.xla_cpu_loop_ops >= SMALL_CPU_LOOP_OPS * st.xla_cpu_ops
    assert st.xla_cpu_loop_s < 0.1 * st.mean_s
    assert not fired(s, "small_xla_cpu_ops")


@pytest.mark.parametrize("path", [p for p in sorted(CAPTURES.glob("*jax*.xplane.pb"))
                                  if not p.name.endswith(("large_pytree_dispatch.xplane.pb",
                                                          "optax_lbfgs_fit_steps.xplane.pb"))],
                         ids=lambda p: p.name.removesuffix(".xplane.pb"))
def test_small_xla_cpu_ops_is_silent_on_other_jax_captures(path: pathlib.Path) -> None:
    # Every other JAX capture: fewer ops a step (per-example gradients: 328, their time in
    # large ops), or ops averaging 5.5 us or more (lax.map's per-example loop: 626 a step
    # of 11.3 us), or a loop of tiny ops that runs a sliver of the step (the vmapped Newton
    # solve); GPU captures have no XLA CPU ops (their tiny kernels are small_kernels').
    s = tfobs.analyze(path)
    assert not fired(s, "small_xla_cpu_ops"), (s.steps.xla_cpu_ops, s.steps.xla_cpu_op_s)
    st = s.steps
    assert st.xla_cpu_ops < SMALL_CPU_OPS_PER_STEP or st.xla_cpu_op_s / st.xla_cpu_ops >= (
        1.1 * SMALL_CPU_OP_S) or st.xla_cpu_loop_s < 0.1 * st.mean_s


def test_xla_cpu_sort_names_an_argsort_holding_the_step() -> None:
    # A jitted retrieval step whose rank metric is a full jnp.argsort of 256 rows of 8,192
    # scores: XLA's CPU sort (`sort.1`, its comparator called per comparison) holds 96 % of
    # a 2.4 s step, which XProf calls host compute with no op to show. The fix counts
    # instead of sorting (3 ms for the same ranks) or takes lax.top_k.
    s = summary("generated__jax0.10cpu__topk_argsort_retrieval_steps")
    a = one(s, "xla_cpu_sort")
    assert a.severity == "critical"
    assert a.evidence["sort_share"] >= 0.9
    assert a.evidence["sort_s_per_step"] == pytest.approx(
        sum(e.duration_s for it in s.steps.items for e in it.top_events
            if e.name == "sort.1") / s.steps.count)
    assert "(sort.1)" in a.message and "jnp.argsort" in a.message
    assert "jax.lax.top_k" in a.fix and "jnp.sum(row > value" in a.fix
    # The same figures in a TensorFlow window: not this rule.
    tf_env = dataclasses.replace(s.environment, framework="tensorflow")
    assert "xla_cpu_sort" not in {
        b.code for b in advise(dataclasses.replace(s, environment=tf_env))}


@pytest.mark.parametrize("name", ["linalg_eigh_svd_steps", "memmap_batches_steps",
                                  "lax_switch_branch_steps", "pure_callback_steps",
                                  "attention_transformer_steps"])
def test_xla_cpu_sort_is_silent_where_another_op_holds_the_step(name: str) -> None:
    # One op holds most of these steps (an SVD 81 %, a fusion reading memmapped pages 75 %,
    # a branch's loop, a host callback), none of them a sort.
    s = summary(f"generated__jax0.10cpu__{name}")
    assert not fired(s, "xla_cpu_sort")
    assert CPU_SORT_SHARE * s.steps.mean_s * s.steps.count > sum(
        e.duration_s for it in s.steps.items for e in it.top_events
        if e.name.startswith("sort"))


def test_gpu_thread_contention_from_summary() -> None:
    gpu = summary(AMD_CONV)  # real launch idle figures
    tfdata = summary(HEALTHY).input_pipeline  # real tf.data figures
    tf_job = dataclasses.replace(gpu.environment, framework="tensorflow")
    s = dataclasses.replace(gpu, input_pipeline=tfdata, environment=tf_job)
    found = [a for a in advise(s) if a.code == "gpu_thread_contention"]
    assert found and all(a.evidence["launch_idle_share"] >= 0.03 for a in found)
    assert "TF_GPU_THREAD_MODE=gpu_private" in found[0].fix
    assert not fired(gpu, "gpu_thread_contention")  # JAX capture: no tf.data
    # a JAX job fed by tf.data: the TF variable would not reach JAX's launches
    jax_fed = dataclasses.replace(gpu, input_pipeline=tfdata)
    (first, *_) = [a for a in advise(jax_fed) if a.code == "gpu_thread_contention"]
    assert "private_threadpool_size" in first.fix and "TF_GPU" not in first.fix


# --- op placement and copies (GPU) ----------------------------------------------------------


def test_host_ops_on_gpu_job_from_summary() -> None:
    s = _gpu(summary(EAGER))  # a real TF job's op figures, as if it had a GPU
    a = next(a for a in advise(s) if a.code == "host_ops_on_gpu_job")
    assert a.evidence["host_op_share"] == pytest.approx(1.0)
    assert a.evidence["host_op_s"] > 0 and "top host ops" in a.message
    assert not fired(summary(EAGER), "host_ops_on_gpu_job")  # a CPU job: nothing to move


def test_host_ops_on_gpu_job_silent_on_a_real_gpu_capture() -> None:
    assert not fired(summary(AMD_GEMM), "host_ops_on_gpu_job")


def test_extra_copies_from_summary() -> None:
    base = _gpu(summary(HEALTHY))
    step = base.steps.mean_s
    dev = DeviceActivity("/device:GPU:0", span_s=1.0, busy_s=0.5,
                         copy_s={"h2d": 0.1 * step, "d2h": 0.08 * step, "d2d": 0.0})
    a = next(a for a in advise(dataclasses.replace(base, devices=(dev,)))
             if a.code == "extra_copies")
    assert a.evidence["extra_copy_share"] == pytest.approx(0.08)
    assert a.evidence["h2d_s"] == pytest.approx(0.1 * step)
    only_input = dataclasses.replace(dev, copy_s={"h2d": 0.5 * step})
    assert not [a for a in advise(dataclasses.replace(base, devices=(only_input,)))
                if a.code == "extra_copies"]


# --- Tensor Cores and precision --------------------------------------------------------------


def test_tensor_core_unused_fires_on_a_real_gpu_capture() -> None:
    s = summary(AMD_CONV)
    a = one(s, "tensor_core_unused")
    k = s.kernels
    # off Tensor Cores: eligible op time neither on them nor of unknown use (Im3d2Col)
    assert a.evidence["tensor_core_unknown_s"] > 0
    assert a.evidence["eligible_off_tc_s"] == pytest.approx(
        k.eligible_op_s - k.eligible_op_tensor_core_s - a.evidence["tensor_core_unknown_s"])
    assert a.evidence["share"] >= 0.10 and "multiples of 8" in a.fix


def test_tensor_core_unused_silent_when_eligible_ops_use_matrix_cores() -> None:
    assert not fired(summary(AMD_GEMM), "tensor_core_unused")


def test_layout_transposes_fires_on_transpose_kernels() -> None:
    s = summary(AMD_CONV)
    a = one(s, "layout_transposes")
    assert "transpose" in a.message
    assert a.evidence["share"] == pytest.approx(a.evidence["layout_s"] / s.kernels.total_s)


def test_a_channels_first_model_on_the_cpu_is_named_by_keras_transposes() -> None:
    """A Keras conv net built data_format='channels_first' trained on the CPU: Keras
    transposes around its MaxPooling2D (TensorFlow's CPU pooling takes NHWC only), forward
    and backward, and the job's own timing puts the same net channels_last at 27.9 ms a
    step against 88.4 ms. XProf lists the transposes in its op table and says nothing;
    layout_transposes names the layout and the channels_last fix."""
    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__channels_first_conv_fit.xplane.pb",
                      top_n=50)
    found = [o for o in s.ops.top if "Transpose" in o.op_type and "max_pooling2d" in o.name]
    assert len(found) == 4  # forward in and out, the gradient's two
    assert s.ops.channels_first_transpose_s == pytest.approx(sum(o.self_s for o in found))
    a = one(s, "layout_transposes")
    assert a.severity == "warning" and "channels_first (NCHW) on the CPU" in a.message
    assert "channels_last" in a.fix and "set_image_data_format" in a.fix
    assert a.evidence["share"] == pytest.approx(
        s.ops.channels_first_transpose_s / a.evidence["op_s"]) and a.evidence["share"] > 0.05
    # Transposes of other kinds (an attention block's, a GPU's) are not Keras's layout
    for other in ("generated__tf2.21cpu__transformer_bf16",
                  "generated__tf2.21cpu__resnet_fit"):
        assert not fired(summary(other), "layout_transposes"), other


def test_layout_transposes_silent_without_transposes() -> None:
    assert not fired(summary(AMD_GEMM), "layout_transposes")


def test_low_16bit_compute_from_summary_says_xprofs_sentence() -> None:
    base = summary(AMD_GEMM)
    s = dataclasses.replace(base, breakdown_s={**base.breakdown_s, "device_compute": 0.01},
                            device_compute_16bit_ratio=0.05,
                            kernels=dataclasses.replace(base.kernels, tensor_core_s=0.0))
    a = next(a for a in advise(s) if a.code == "low_16bit_compute")
    assert a.evidence["compute_16bit_pct"] == pytest.approx(5.0)
    assert a.message == ("Only 5.0% of device computation is 16 bit. So you might want to "
                         "replace more 32-bit Ops by 16-bit Ops to improve performance (if the "
                         "reduced accuracy is acceptable).")
    mixed = dataclasses.replace(s, device_compute_16bit_ratio=0.5)
    assert not [a for a in advise(mixed) if a.code == "low_16bit_compute"]
    # Tensor Cores hold most kernel time: XProf's name-based share misreads bf16, be silent
    on_tc = dataclasses.replace(s, kernels=dataclasses.replace(
        s.kernels, tensor_core_s=0.6 * s.kernels.total_s))
    assert not [a for a in advise(on_tc) if a.code == "low_16bit_compute"]


def test_low_16bit_compute_on_real_h100_captures() -> None:
    # bf16 GEMMs on Tensor Cores read 0 % 16-bit by XProf's names, tfobs reads their
    # types: no advice; true FP32 SGEMM (TF32 off) gets it.
    for case in ("bf16_matmul", "transformer_train_bf16", "flash_attention_bf16"):
        s = tfobs.analyze(CAPTURES / f"recorded__h100_jax0.11.2__{case}.xplane.pb")
        assert s.device_compute_16bit_ratio_xprof < 0.1 < s.device_compute_16bit_ratio
        assert not fired(s, "low_16bit_compute")
    s = tfobs.analyze(CAPTURES / "recorded__h100_jax0.11.2__fp32_matmul_no_tf32.xplane.pb")
    assert fired(s, "low_16bit_compute")


FLOAT64_LOOP = "generated__tf2.21cpu__float64_dense_loop"  # Dense layers in float64


def test_float64_compute_fires_where_float64_tensors_hold_the_allocated_bytes() -> None:
    # The job trains in float64 (33 ms a step against 8.8 ms in float32, provenance): 97 %
    # of the window's allocated bytes are `double`, from the Dense MatMuls' gradients.
    s = summary(FLOAT64_LOOP)
    (m,) = s.memory
    assert m.allocated_bytes == sum(m.allocated_bytes_by_type.values()) > 0
    assert m.float64_share == pytest.approx(0.966, abs=0.005)
    assert 0 < len(m.float64_top_ops) <= 3
    assert any("MatMul" in o for o in m.float64_top_ops)
    a = one(s, "float64_compute")
    assert a.severity == "warning"
    assert a.message.startswith("97 % of the bytes allocated in the window")
    assert "dense_4_1/MatMul" in a.message
    assert a.evidence["float64_share"] == pytest.approx(m.float64_share)
    assert "set_floatx('float32')" in a.fix and "tf.cast" in a.fix
    # JSON of summaries made before these figures loads with them empty
    data = s.to_dict()
    assert WindowSummary.from_dict(data) == s
    for mem in data["memory"]:
        for key in ("allocated_bytes", "allocated_bytes_by_type", "float64_top_ops"):
            del mem[key]
    old = WindowSummary.from_dict(data)
    assert old.memory[0].allocated_bytes == 0 and old.memory[0].float64_share == 0.0
    assert not fired(dataclasses.replace(old, advice=advise(old)), "float64_compute")


@pytest.mark.parametrize("name", [HEALTHY, COMPUTE, "generated__tf2.21cpu__mixed_precision_fit",
                                  "generated__tf2.21cpu__summaries_fit"])
def test_float64_compute_silent_on_float32_and_16bit_jobs(name: str) -> None:
    # summaries_fit's only typed allocation in the window is one 4 MiB float64 OneHot:
    # 100 % of the bytes, too few allocations to tell the model's arithmetic.
    s = summary(name)
    assert not fired(s, "float64_compute")
    assert sum(m.allocated_bytes for m in s.memory) > 0


def test_float64_compute_on_gpu_kernels_from_summary() -> None:
    from tfobs.analysis.precision import name_f64

    assert name_f64("volta_dgemm_128x64_nn") and name_f64("cutlass_80_tensorop_d884gemm_64x32")
    assert name_f64("nvjet_sm90_ddd_128x64") and name_f64(
        "void Eigen::internal::EigenMetaKernel<Eigen::TensorEvaluator<Eigen::Tensor<double, 1>>>")
    assert not name_f64("ampere_sgemm_128x64_nn") and not name_f64("nvjet_sm90_tst_64x8")
    assert not name_f64("loop_add_fusion") and not name_f64("DoubleBufferedCopy")
    base = summary(AMD_GEMM)
    items = base.kernels.items
    dgemm = dataclasses.replace(items[0], name="volta_dgemm_128x64_nn")
    s = dataclasses.replace(base, kernels=dataclasses.replace(
        base.kernels, items=(dgemm, *items[1:])))
    share = dgemm.total_s / base.kernels.total_s
    assert share >= 0.5  # the top GEMM kernel, renamed: most of kernel time
    (a,) = [a for a in advise(s) if a.code == "float64_compute"]
    assert a.message.startswith("float64 kernels take") and "volta_dgemm" in a.message
    assert a.evidence["float64_kernel_share"] == pytest.approx(share)
    assert "jax_enable_x64" in a.fix  # a JAX job: the fix in its terms
    assert not fired(base, "float64_compute")


# --- memory ---------------------------------------------------------------------------------


def _memory(s: WindowSummary, **change: float) -> WindowSummary:
    return dataclasses.replace(s, memory=tuple(dataclasses.replace(m, **change)
                                               for m in s.memory[:1]))


def test_memory_near_capacity_from_summary() -> None:
    base = summary(AMD_CONV)
    m = base.memory[0]
    a = next(a for a in advise(_memory(base, peak_bytes=int(0.95 * m.capacity_bytes)))
             if a.code == "memory_near_capacity")
    assert a.evidence["peak_share"] == pytest.approx(0.95, abs=1e-6)
    assert a.evidence["capacity_bytes"] == m.capacity_bytes
    assert not fired(base, "memory_near_capacity")  # real peak: ~1 % of 144 GiB


def test_memory_fragmentation_from_summary() -> None:
    base = summary(AMD_CONV)
    assert 0.3 < base.memory[0].fragmentation_ratio < 0.5  # real figure, below threshold
    assert not fired(base, "memory_fragmentation")
    a = next(a for a in advise(_memory(base, fragmentation_ratio=0.7))
             if a.code == "memory_fragmentation")
    assert a.evidence["fragmentation"] == pytest.approx(0.7)
    assert "TF_GPU_ALLOCATOR" in a.fix  # a GPU's allocator (GPU_0_bfc)


def test_a_small_host_heap_is_never_called_fragmented() -> None:
    """A CPU job's allocator (Keras fit with jit_compile read 12 MB of 25 GB, 56 %
    fragmented at its peak): nothing to run short of. The same share on a heap of 2 GiB
    is named, with a host allocator's fix (a host allocator named for the GPU it serves)."""
    base = summary("generated__tf2.21cpu__xla_fit")
    m = base.memory[0]
    assert m.allocator == "bfc_cpu_allocator_for_gpu" and m.capacity_bytes > 2**33
    small = _memory(base, fragmentation_ratio=0.56, peak_bytes=12 << 20)
    assert not fired(small, "memory_fragmentation")
    a = next(a for a in advise(_memory(base, fragmentation_ratio=0.56, peak_bytes=2 << 30))
             if a.code == "memory_fragmentation")
    assert "TF_GPU_ALLOCATOR" not in a.fix and a.fix.startswith("allocate large")


# --- multi-device ---------------------------------------------------------------------------


def test_device_collectives_bound_from_summary_says_xprofs_sentence() -> None:
    base = summary(HEALTHY)
    steps = [dataclasses.replace(st, breakdown_s={**st.breakdown_s, "host_compute": 0.0,
                                                  "device_collectives": 0.4 * st.duration_s})
             for st in base.steps.items]
    s = dataclasses.replace(base, steps=dataclasses.replace(base.steps, items=tuple(steps)))
    a = next(a for a in advise(s) if a.code == "device_collectives_bound")
    assert a.evidence["device_collectives_pct"] == pytest.approx(40.0)
    assert a.message == ("40.0 % of the total step time sampled is spent on 'Device "
                         "Collective Communication'.")
    assert not fired(base, "device_collectives_bound")


def test_uneven_replicas_fires_on_a_real_two_gpu_capture() -> None:
    s = summary(AMD_LEGACY)
    a = one(s, "uneven_replicas")
    busy = sorted(d.busy_s for d in s.devices if d.span_s > 0)
    assert a.evidence["busy_min_s"] == pytest.approx(busy[0])
    assert a.evidence["busy_max_s"] == pytest.approx(busy[-1])
    assert a.evidence["spread"] >= 0.2


def test_uneven_replicas_silent_on_eight_even_gpus() -> None:
    s = summary(AMD_CONV)
    assert len(s.devices) == 8 and not fired(s, "uneven_replicas")


# --- the healthy run and the demo's input-bound run ------------------------------------------


def test_healthy_demo_run_has_no_warning_or_critical_advice() -> None:
    s = summary(HEALTHY)
    assert s.steps.count >= 5
    assert [a for a in s.advice if a.severity in ("warning", "critical")] == []


def test_demo_input_bound_names_the_slowed_stage_and_its_fix() -> None:
    s = summary(DEMO_SLOW)
    assert s.input_bound.verdict == "highly"
    stage = s.input_pipeline.slowest_stage.name
    assert stage.endswith("::Map")  # the demo's Python map
    serial = one(s, "tfdata_map_serial")
    assert stage in serial.message and "num_parallel_calls" in serial.fix
    py = one(s, "tfdata_py_function")
    # --sleep-ms 30 in the recorded run: 30 ms of Python per batch.
    assert 0.028 <= py.evidence["python_op_s_per_step"] <= 0.06
    # The demo adds no prefetch, but tf.data injects one above the map on its own.
    assert "::Prefetch::" in stage and not fired(s, "tfdata_no_prefetch")


def test_every_recorded_case_has_its_capture_answers_and_provenance() -> None:
    import importlib.util
    import json

    path = CAPTURES.parent.parent.parent / "tools" / "record_advice_captures.py"
    spec = importlib.util.spec_from_file_location("record_advice_captures", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # TensorFlow is imported only when a case runs
    prov = json.loads((CAPTURES / "PROVENANCE-advice.json").read_text())
    answers = CAPTURES.parent / "xprof-2.24.2"
    assert set(prov) == set(mod.CASES)
    for case in mod.CASES:
        capture = CAPTURES / f"advice__{case}.xplane.pb"
        assert capture.stat().st_size == prov[case]["bytes"] < 3 * 2**20
        assert prov[case]["what"] == mod.CASES[case][0]
        for tool in mod.TOOLS:
            assert (answers / f"advice__{case}.{tool}.json").is_file(), (case, tool)


def test_per_replica_input_on_distribute_datasets_from_function() -> None:
    s = summary(DIST_FROM_FN)
    assert s.input_pipeline.per_replica_input and s.input_bound.verdict in ("moderately",
                                                                            "highly")
    assert one(s, "tfdata_per_replica_input") and not fired(s, "tfdata_from_generator")


def test_tf_function_retracing_fires_on_a_function_traced_in_every_step() -> None:
    s = summary(RETRACE)
    a = one(s, "tf_function_retracing")
    # One trace per step, inside each of the steps XProf's rule keeps.
    assert s.ops.graph_builds == s.steps.count == a.evidence["graph_builds"]
    step_s = sum(st.duration_s for st in s.steps.items)
    # each new function (scaled_step_424, _498, ...) also sets itself up for ~22 ms in its
    # first call before its first kernel: part of the trace's cost
    assert s.ops.graph_instantiations == s.steps.count
    assert a.evidence["graph_building_pct"] == pytest.approx(
        100 * (s.ops.graph_building_s + s.ops.graph_instantiation_s) / step_s)
    assert a.evidence["graph_building_pct"] > 50  # tracing, not the ops, is the step
    assert s.ops.graph_building_s + s.ops.graph_instantiation_s < step_s
    assert "instantiating 6 new functions in their first calls" in a.message
    assert "input_signature" in a.fix and "reduce_retracing=True" in a.fix
    assert "drop_remainder" not in a.fix  # traced in every step: not an epoch's last batch


PARTIAL_BATCH = "generated__tf2.21cpu__partial_batch_retrace_loop"  # 40-row last batch


def test_a_retrace_counts_the_new_functions_first_run_set_up() -> None:
    # The epoch's last, smaller batch traces the step again (104.9 ms of graph building);
    # the new concrete function (__inference_step_225) then spends 45.6 ms in its first
    # call before its first kernel, against ~0.03 ms for every other call: the retraced
    # step took 155 ms against 3-4 ms (the job's own timing).
    s = summary(PARTIAL_BATCH)
    assert s.ops.graph_builds == 1 and s.ops.graph_instantiations == 1
    assert s.ops.graph_building_s == pytest.approx(0.1049, abs=1e-3)
    assert s.ops.graph_instantiation_s == pytest.approx(0.0456, abs=1e-3)
    a = one(s, "tf_function_retracing")
    assert a.evidence["graph_instantiation_s_per_step"] == pytest.approx(
        s.ops.graph_instantiation_s / s.steps.count)
    assert "104.9 ms tracing and 45.6 ms instantiating the new function" in a.message
    assert "15.06 ms per step" in a.message
    # the message names an epoch's last batch: the fix gives its remedy
    assert "epoch's last, smaller batch" in a.message
    assert "batch(..., drop_remainder=True)" in a.fix and "input_signature" in a.fix


def test_no_first_run_set_up_without_a_new_function_in_the_steps() -> None:
    # SavedModel exports trace the model's functions, but the step calls only its own,
    # already instantiated: nothing added to the traces' cost.
    s = summary("generated__tf2.21cpu__saved_model_export_loop")
    assert s.ops.graph_builds > 0 and s.ops.graph_instantiations == 0
    assert s.ops.graph_instantiation_s == 0.0


def test_xla_compiles_per_shape_inside_steps_are_named_with_their_own_fix() -> None:
    # jit_compile=True with reduce_retracing=True: tf.function traces once with a relaxed
    # batch dimension, yet XLA compiles each new size inside the steps. Counted before as
    # nothing (no tf.function-graph_building event): a window 78 % compiling read as none.
    s = summary("generated__tf2.21cpu__xla_shape_recompile_loop")
    a = one(s, "tf_function_retracing")
    assert s.ops.xla_compiles >= 2 and s.ops.xla_compiles == s.ops.graph_builds
    assert a.severity == "warning" and a.evidence["graph_building_pct"] > 30
    assert "XLA compiled" in a.message and a.fix == XLA_RECOMPILE_FIX
    assert "drop_remainder=True" in a.fix
    # a tf.function traced again keeps the tracing fix; the JAX compiles stay JAX's
    assert summary(RETRACE).ops.xla_compiles == 0
    assert "input_signature" in one(summary(RETRACE), "tf_function_retracing").fix
    jax = summary("generated__jax0.10cpu__recompile_each_step")
    assert jax.ops.graph_builds > 0 and one(jax, "tf_function_retracing").fix != XLA_RECOMPILE_FIX
    assert WindowSummary.from_dict(s.to_dict()).ops.xla_compiles == s.ops.xla_compiles


def test_a_jax_compile_cites_jax_and_says_nothing_of_tensorflows_xla_compiles() -> None:
    # A JAX window's compiles read "xla_compiles=0" (a TensorFlow figure: JAX did compile)
    # beside the tf.function guide's "Controlling retracing"; an epoch's last, smaller
    # batch, which the message names, had no fix of its own.
    a = one(summary("generated__jax0.10cpu__recompile_each_step"), "tf_function_retracing")
    assert "xla_compiles" not in a.evidence and a.evidence["graph_builds"] >= 2
    assert a.guide.startswith(JAX_DOCS) and "tensorflow.org" not in a.guide
    assert "pad it to the full batch with a mask" in a.fix
    tf = one(summary(RETRACE), "tf_function_retracing")  # TensorFlow's keep theirs
    assert tf.evidence["xla_compiles"] == 0 and "tensorflow.org/guide/function" in tf.guide


def test_jax_compiles_name_the_functions_and_jax_numpys_own_get_the_growing_shape_fix(
) -> None:
    # Running metrics in jax.numpy outside jit over a list that grows a row a step: jnp's
    # stack, mean and std compile for the new length in every step (30 compiles in 10
    # steps, 220-300 ms a step against 2.3 ms without the metrics, the provenance). The
    # message read "a jitted function" and the fix named static arguments and jits made
    # in the loop, none of which the job has.
    s = summary("generated__jax0.10cpu__host_jnp_metrics_history_steps")
    a = one(s, "tf_function_retracing")
    assert set(s.ops.compiled_functions) == {"stack", "_mean", "_std"}
    assert a.evidence["graph_builds"] == 30
    assert "JAX compiled jitted _std, _mean, stack 30 times" in a.message
    assert a.fix.startswith("_std, _mean, stack are jax.numpy's own: " + JAX_NUMPY_SHAPES_FIX)
    assert a.fix.endswith(RETRACING.jax_fix)
    assert WindowSummary.from_dict(s.to_dict()).ops.compiled_functions == (
        s.ops.compiled_functions)
    # the job's own function compiled again is named, with the jit fix alone
    own = summary("generated__jax0.10cpu__recompile_each_step")
    r = one(own, "tf_function_retracing")
    assert own.ops.compiled_functions == ("<lambda>",)
    assert "JAX compiled jitted <lambda>" in r.message and JAX_NUMPY_SHAPES_FIX not in r.fix
    # TensorFlow's traces name none
    assert summary(RETRACE).ops.compiled_functions == ()


def test_a_saved_model_export_in_the_steps_is_named_beside_retracing() -> None:
    # tf.saved_model.save every sixth step: its traces read as "a function traced again",
    # whose fix (input_signature) does nothing for an export.
    s = summary("generated__tf2.21cpu__saved_model_export_loop")
    a = one(s, "tf_function_retracing")
    assert s.ops.checkpoint_writes >= 2 and s.ops.graph_builds >= 4
    assert "SavedModel export traces as it saves" in a.message
    assert a.fix.startswith(EXPORT_FIX) and "input_signature" in a.fix
    retrace = one(summary(RETRACE), "tf_function_retracing")  # no checkpoint written
    assert "SavedModel" not in retrace.message and not retrace.fix.startswith(EXPORT_FIX)


def test_tf_function_retracing_silent_on_traces_outside_steps() -> None:
    # Keras builds its datasets' functions at a fit's or an epoch's start: graph building in
    # the window, none inside a step.
    for name in ("generated__tf2.21cpu__numpy_epochs_fit", "generated__tf2.21cpu__mirrored_fit",
                 COMPUTE, HEALTHY):
        s = summary(name)
        assert s.ops.graph_builds == 0 and not fired(s, "tf_function_retracing"), name


def test_tfdata_from_generator_names_the_keras_pydataset_fix() -> None:
    s = summary(PYDATASET)
    a = one(s, "tfdata_from_generator")
    assert "PyDataset" in a.fix and "use_multiprocessing=True" in a.fix
    assert not fired(s, "tfdata_py_function")  # the generator's PyFunc ops: blamed once


def test_a_pydataset_that_already_has_worker_processes_is_told_to_make_batches_cheaper(
        ) -> None:
    """fit over PyDataset(workers=2, use_multiprocessing=True) on 2 cores, ~20 ms a batch:
    more workers cannot help, and the capture shows neither the workers nor the cores, so
    the fix says what to do where they already match the cores."""
    a = one(summary("generated__tf2.21cpu__pydataset_multiprocessing_fit"),
            "tfdata_from_generator")
    assert "use_multiprocessing=True" in a.fix
    assert "already match the host's free cores" in a.fix
    assert "make __getitem__ cheaper" in a.fix and "into tf.data" in a.fix


def test_tfdata_from_generator_when_its_flat_map_is_the_slowest_stage_from_summary() -> None:
    # from_generator is range(...).flat_map(generator): which of the two stages holds more
    # self time varies from run to run (both were seen on this workload).
    s = summary(PYDATASET)
    ip = s.input_pipeline
    flat = next(st for st in ip.stages if st.name == "Iterator::Root::FlatMap")
    s = dataclasses.replace(s, input_pipeline=dataclasses.replace(ip, slowest_stage=flat),
                            advice=())
    s = dataclasses.replace(s, advice=advise(s))
    assert one(s, "tfdata_from_generator") and not fired(s, "tfdata_py_function")
    # A FlatMap with no Generator below it is no from_generator.
    other = dataclasses.replace(ip, slowest_stage=flat, stages=tuple(
        st for st in ip.stages if not st.name.endswith("::Generator")))
    s = dataclasses.replace(s, input_pipeline=other, advice=())
    assert not fired(dataclasses.replace(s, advice=advise(s)), "tfdata_from_generator")


def test_python_ops_in_the_step_are_not_counted_as_tf_data() -> None:
    # The same op type (EagerPyFunc) runs in tf.data's functions and in a training step: only
    # the ones on tf.data's threads are the input pipeline's.
    s = summary(PY_IN_STEP)
    step_py = [o for o in s.ops.top if o.op_type == "EagerPyFunc"]
    assert step_py and step_py[0].self_s > 0.02  # 3 ms of sleep in each of 10 steps
    assert s.input_pipeline.python_op_s == 0
    assert summary(PY).input_pipeline.python_op_s > 0.1  # tf.data's own, still counted


def test_input_outside_steps_fires_when_the_batch_is_fetched_between_markers() -> None:
    s = summary(FOR_LOOP)
    # The steps hold no input wait, so the breakdown cannot see the job is starved ...
    assert s.input_bound.ratio < 0.01 and s.input_bound.verdict != "highly"
    # ... but the gaps between the markers do.
    a = one(s, "input_outside_steps")
    assert a.evidence["input_between_s"] == pytest.approx(s.steps.input_between_s)
    assert a.evidence["input_between_pct"] == pytest.approx(
        100 * s.steps.input_between_s / s.steps.interval_s)
    assert a.evidence["input_between_pct"] >= 5
    assert "next(it)" in a.fix


def test_input_outside_steps_silent_when_gaps_hold_no_input() -> None:
    # Keras callbacks, an epoch-end pause with validation, a custom loop fetching inside.
    for name in (CALLBACK, "generated__tf2.21cpu__fit_validation", COMPUTE, DEMO_SLOW):
        s = summary(name)
        assert not fired(s, "input_outside_steps"), name
        assert s.steps.input_between_s < 0.05 * max(s.steps.interval_s, 1e-9), name


SPE_VALIDATION = "generated__tf2.21cpu__spe_validation_steps_fit"


def test_a_validation_calls_fetches_between_steps_are_not_the_steps_input() -> None:
    """Keras fit with steps_per_execution=4 and validation_steps=4: after the first epoch
    the validation's multi_step_on_iterator call runs between two training steps, and its
    new iterator's first fetch waits over 4 ms there. That wait is the validation call's
    (step_pause names the call), not a batch the steps fetched outside their markers: no
    input_outside_steps, whose fix (fetch inside the marked step) a fit cannot take."""
    s = summary(SPE_VALIDATION)
    spans = step_spans_ps(s)
    gaps = list(zip([e for _, e in spans[:-1]], [b for b, _ in spans[1:]], strict=True))
    waits = [e.duration_ps for name, _, at, e in host_events(CAPTURES / f"{SPE_VALIDATION}"
                                                             ".xplane.pb", s)
             if name.startswith("IteratorGetNext") and any(a <= at < b for a, b in gaps)]
    assert max(waits) > 4e9  # ps: the validation iterator's first fetch
    assert not fired(s, "input_outside_steps")
    assert s.steps.input_between_s < 0.01 * s.steps.interval_s
    assert "multi_step_on_iterator" in one(s, "step_pause").message


def test_a_jax_jobs_fixes_are_in_jaxs_terms() -> None:
    # The capture says who wrote it (jax_version stat, PjitFunction events); a JAX job's
    # fixes name jax.jit, bfloat16 casts and StepTraceAnnotation, never tf.function,
    # jit_compile=True, TF_GPU_THREAD_MODE or tf.profiler.
    from tests.conftest import CAPTURES
    from tfobs.analysis.advice import RULES

    tf_only = ("tf.function", "jit_compile", "TF_GPU_THREAD_MODE", "tf.profiler",
               "tf.debugging", "mixed_float16", "dataset.take", "TensorFlow op")
    fixed = set()
    for path in sorted(CAPTURES.glob("*jax*.xplane.pb")):
        s = tfobs.analyze(path)
        assert s.environment.framework == "jax", path.name
        # Keras on the JAX backend compiles by Model.compile(jit_compile=...): its word
        words = tuple(w for w in tf_only if not (s.environment.keras and w == "jit_compile"))
        for a in s.advice:
            assert not any(word in a.fix for word in words), (path.name, a.code, a.fix)
            fixed.add(a.code)
    by_id = {r.id: r for r in RULES}
    # the rules that fired on the JAX captures, several of them with JAX wording
    assert {"kernel_launch_bound", "small_kernels", "low_16bit_compute",
            "calls_without_steps", "all_others_bound"} <= fixed
    assert all(by_id[c].jax_fix for c in ("kernel_launch_bound", "low_16bit_compute"))
    # a TensorFlow job keeps TensorFlow's fixes
    tf_job = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__python_between_markers.xplane.pb")
    assert tf_job.environment.framework == "tensorflow"
    others = {a.code: a for a in tf_job.advice}["all_others_bound"]
    assert others.fix == by_id["all_others_bound"].fix and "tf.function" in others.fix


def test_host_collectives_name_the_multi_worker_all_reduce() -> None:
    # Two MWMS workers on loopback: each step waits about 1 ms in CollectiveReduceV2 for the
    # other worker; XProf counts that as host compute, tfobs names it.
    from tests.conftest import CAPTURES

    s = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__mwms_worker.xplane.pb")
    per_step = s.ops.host_collectives_s / s.steps.count
    assert 0.2 * s.steps.mean_s < per_step < s.steps.mean_s
    a = {x.code: x for x in s.advice}["host_collectives_bound"]
    assert a.severity == "warning"
    assert a.evidence["host_collectives_pct"] == pytest.approx(100 * per_step / s.steps.mean_s)
    assert "all-reduce across replicas" in a.message and "tf_task" in a.fix
    # the collective time lies in host compute, as XProf classifies it
    assert s.breakdown_s["host_compute"] > per_step
    # two replicas on one host (MirroredStrategy on 2 logical CPUs): overlapping
    # all-reduces counted once, never more than the steps
    two = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__mirrored.xplane.pb")
    assert 0 < two.ops.host_collectives_s < two.steps.count * two.steps.mean_s
    # a single-process job has none
    solo = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__conv_bn_custom_loop.xplane.pb")
    assert solo.ops.host_collectives_s == 0.0
    assert "host_collectives_bound" not in {x.code for x in solo.advice}


CHECKPOINT_SYNC = "generated__tf2.21cpu__checkpoint_in_steps"  # writes on the training thread
CHECKPOINT_ASYNC = "generated__tf2.21cpu__checkpoint_async"  # writes on a thread of their own


def _save_ops_by_line(name: str) -> dict[int, int]:
    """How many checkpoint save ops each host line (thread) of the capture ran."""
    from tfobs.analysis.eager import PREFIX
    from tfobs.xspace import schema

    space = schema.XSpace().FromString((CAPTURES / f"{name}.xplane.pb").read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: m.name for k, m in host.event_metadata.items()}
    out: dict[int, int] = {}
    for line in host.lines:
        n = sum(names[e.metadata_id] == f"{PREFIX}MergeV2Checkpoints" for e in line.events)
        if n:
            out[line.id] = n
    return out


def test_checkpoint_writes_fire_on_writes_the_training_thread_waits_for() -> None:
    s = summary(CHECKPOINT_SYNC)
    a = one(s, "checkpoint_writes")
    # The run wrote after every other step of 12 profiled: 6 writes, each one merge.
    assert s.ops.checkpoint_writes == 6 == a.evidence["checkpoint_writes"]
    assert list(_save_ops_by_line(CHECKPOINT_SYNC).values()) == [6]
    assert a.evidence["checkpoint_share"] == pytest.approx(s.ops.checkpoint_s / s.duration_s)
    assert a.evidence["checkpoint_share"] >= 0.05 and s.ops.checkpoint_s < s.duration_s
    # The steps that wrote are the long ones: the writes are inside them.
    longest = sorted(s.steps.items, key=lambda st: st.duration_s)[-4:]
    assert all(st.step_num % 2 == 0 for st in longest)
    assert "experimental_enable_async_checkpoint" in a.fix and "save_freq" in a.fix
    # Writes are not eager ops tf.function could remove: the eager advice does not name them.
    assert not {o.op_type for o in s.ops.eager_top} & {"SaveV2", "MergeV2Checkpoints"}


def test_checkpoint_writes_silent_on_an_async_checkpoint() -> None:
    s = summary(CHECKPOINT_ASYNC)
    # The capture holds the same 6 writes, on a thread that runs no step.
    by_line = _save_ops_by_line(CHECKPOINT_ASYNC)
    assert sum(by_line.values()) == 6
    assert s.ops.checkpoint_writes == 0 and s.ops.checkpoint_s == 0.0
    assert not fired(s, "checkpoint_writes")
    assert not {o.op_type for o in s.ops.eager_top} & {"SaveV2", "MergeV2Checkpoints"}


def test_checkpoint_writes_count_everywhere_in_a_window_without_steps() -> None:
    """No step: no training thread to pick, so every thread's writes count."""
    from tfobs.analysis.eager import checkpoint_writes
    from tfobs.analysis.pipeline import HOST_PLANE, parse, time_base_ps
    from tfobs.analysis.timeline import Timeline

    space = parse((CAPTURES / f"{CHECKPOINT_ASYNC}.xplane.pb").read_bytes())
    view = space.plane(HOST_PLANE)
    host = Timeline(view, time_base_ps([view]))
    seconds, writes, _ = checkpoint_writes(host, None)
    assert writes == 6 and seconds > 0
    # The message then names no thread.
    s = summary(CHECKPOINT_SYNC)
    bare = dataclasses.replace(s, steps=dataclasses.replace(s.steps, items=(), count=0))
    (a,) = [a for a in advise(bare) if a.code == "checkpoint_writes"]
    assert a.message.startswith("Checkpoint writes took ")
    assert one(s, "checkpoint_writes").message.startswith(
        "Checkpoint writes on the training thread took ")


EMBEDDING_ADAM = "generated__tf2.21cpu__tfkeras_embedding_adam_loop"  # tf_keras, Adam/...
SPARSE_ADAM = "generated__tf2.21cpu__sparse_adam_fit"  # Keras 3 fit, adam/... densifies


def _op_self_s(name: str, keep: typing.Callable[[str], bool]) -> tuple[float, float]:
    """(self seconds of the host ops whose name `keep` takes, of all host TF ops, tf.data's
    iterators left out), from the op table tfobs shares with XProf's framework_op_stats
    (tests/reduce/test_fidelity_xprof.py holds the two equal)."""
    from tfobs.analysis import ops
    from tfobs.analysis.pipeline import HOST_PLANE, parse, time_base_ps
    from tfobs.analysis.timeline import Timeline

    view = parse((CAPTURES / f"{name}.xplane.pb").read_bytes()).plane(HOST_PLANE)
    table = ops.host_op_metrics(Timeline(view, time_base_ps([view])))
    tf_ops = [a for n, a in table.items() if not n.startswith("Iterator::")]
    return (sum(a.self_ps for a in tf_ops if keep(a.name)) / 1e12,
            sum(a.self_ps for a in tf_ops) / 1e12)


def test_optimizer_update_names_an_update_that_outweighs_the_step() -> None:
    """An Embedding of 40,000 rows under tf_keras's Adam on batches of 16: the update
    (`Adam/...`) is nearly all the op time; Keras 3's fit of the same kind (`adam/...`
    inside fit's function) also makes the sparse gradient dense for it."""
    s = summary(EMBEDDING_ADAM)
    update, total = _op_self_s(EMBEDDING_ADAM, lambda n: n.startswith("Adam/"))
    assert s.ops.optimizer_s == pytest.approx(update) and update > 0.5 * total
    a = one(s, "optimizer_update")
    assert a.evidence["optimizer_share"] == pytest.approx(update / total)
    assert "larger batches" in a.fix and "Adagrad" in a.fix
    sparse = summary(SPARSE_ADAM)
    update, total = _op_self_s(SPARSE_ADAM, lambda n: "/adam/" in n)
    dense, _ = _op_self_s(SPARSE_ADAM, lambda n: "/adam/" in n and "UnsortedSegmentSum" in n)
    b = one(sparse, "optimizer_update")
    assert b.evidence["optimizer_share"] == pytest.approx(update / total)
    assert sparse.ops.optimizer_densify_s == pytest.approx(dense) and dense > 0
    assert "UnsortedSegmentSum" in b.message


def _sgd_step_under_half_of_the_recorded(name: str) -> bool:
    """Whether the capture's recorder timed the same step under SGD (its provenance's
    `sgd_step_ms`) at under half the recorded steps' mean (the first and last left out)."""
    import json
    import statistics

    params = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())[
        "parameters"]
    return (statistics.mean(params["sgd_step_ms"])
            < 0.5 * statistics.mean(params["measured_step_ms"][1:-1]))


def test_optimizer_update_does_not_offer_sampled_softmax_to_a_sampled_softmax() -> None:
    """Embedding(50,000) and a 50,000-row output layer trained through
    tf.nn.sampled_softmax_loss under Keras 3's Adam: the update holds nearly all the op time
    (Adam makes both gradients dense and moves every row), and the same step under SGD took
    a fraction of the time (the provenance). The job samples already: the advice must name
    the sampler and not send it to "sampled softmax"; the sparse segment sums are not only
    an Embedding's."""
    name = "generated__tf2.21cpu__sampled_softmax_loop"
    s = summary(name)
    assert s.ops.candidate_samplers == ("LogUniformCandidateSampler",)
    a = one(s, "optimizer_update")
    assert "LogUniformCandidateSampler" in a.message and "sampled output layer" in a.message
    assert "sampled softmax)" not in a.fix and "SGD on the sparse gradient" in a.fix
    assert _sgd_step_under_half_of_the_recorded(name)
    assert WindowSummary.from_dict(s.to_dict()).ops.candidate_samplers == s.ops.candidate_samplers
    # a job without a sampler keeps the rule's fix and words
    sparse = summary(SPARSE_ADAM)
    b = one(sparse, "optimizer_update")
    assert sparse.ops.candidate_samplers == () and "sampled softmax)" in b.fix
    assert "an Embedding's gradient" in b.message


def test_optimizer_update_says_its_per_step_op_time_is_summed_over_threads() -> None:
    """The sampled-softmax job's Adam update runs its elementwise ops over 50,000-row tables
    on both cores at once: its op time per step (summed over the threads) is more than the
    step's wall time, which the message must say rather than print a per-step figure over
    the step's own."""
    s = summary("generated__tf2.21cpu__sampled_softmax_loop")
    a = one(s, "optimizer_update")
    mean_step = sum(st.duration_s for st in s.steps.items) / s.steps.count
    assert s.ops.optimizer_s / steps_run(s) > mean_step
    assert "summed over the threads" in a.message
    assert f"{1e3 * mean_step:.2f} ms step" in a.message
    sparse = summary(SPARSE_ADAM)  # an update under the step's time keeps the plain words
    assert "summed over the threads" not in one(sparse, "optimizer_update").message


def test_keras3_adagrad_on_sparse_gradients_is_not_offered_as_the_sparse_fix() -> None:
    """A two-tower model's tables (400,000 and 200,000 rows) under Keras 3's Adagrad: its
    step divides by sqrt(accumulator + epsilon) over every row (`adagrad/Add`, `IsNan`,
    `Equal` on the whole table), so the update holds most of the op time, and the same step
    under SGD took a fifth of the time (the provenance). The fix must not send this job to
    "Adagrad on its sparse gradient", the optimizer it runs."""
    name = "generated__tf2.21cpu__two_tower_retrieval_loop"
    s = summary(name)
    assert s.ops.optimizer_scopes == ("adagrad",)
    a = one(s, "optimizer_update")
    assert "Keras 3's Adagrad" in a.message and "every row" in a.message
    assert "SGD or Adagrad" not in a.fix and "tf_keras's Adagrad" in a.fix
    assert _sgd_step_under_half_of_the_recorded(name)
    assert WindowSummary.from_dict(s.to_dict()).ops.optimizer_scopes == ("adagrad",)
    # tf_keras's scope and Keras 3's Adam keep the plain words
    assert summary(EMBEDDING_ADAM).ops.optimizer_scopes == ("Adam",)
    assert "Keras 3's Adagrad" not in one(summary(EMBEDDING_ADAM), "optimizer_update").message
    # Keras 3's AdamW (scope `adam_w/`) is an optimizer's update too
    adamw = summary("generated__tf2.21cpu__clip_norm_adamw_cosine_loop")
    assert adamw.ops.optimizer_scopes == ("adam_w",) and adamw.ops.optimizer_s > 0


def test_a_sparse_gradient_made_dense_before_the_optimizer_is_named() -> None:
    """A NaN guard (tf.where(tf.math.is_finite(g), g, 0)) on a gather's IndexedSlices
    gradient: TensorFlow makes it a dense 200,000 x 64 tensor (`IsFinite/x`, an
    UnsortedSegmentSum) and the guard and SGD run on every row (150 ms a step; 1.7 ms with
    the guard on g.values). Keras's own densifying inside the optimizer is
    optimizer_update's, and a segment sum the model calls itself is no conversion."""
    s = summary("generated__tf2.21cpu__gather_grad_densified_loop")
    assert s.ops.densified_ops == ("IsFinite/x",)
    row = next(o for o in s.ops.top if o.name == "IsFinite/x")
    assert row.op_type == "UnsortedSegmentSum" and s.ops.densified_s == row.self_s
    assert s.ops.densified_count == row.count
    a = one(s, "sparse_gradient_dense")
    assert a.severity == "warning" and "(IsFinite: IsFinite/x)" in a.message
    assert "every row of the table" in a.message
    assert "tf.IndexedSlices(fn(g.values), g.indices, g.dense_shape)" in a.fix
    assert WindowSummary.from_dict(s.to_dict()).ops.densified_ops == ("IsFinite/x",)
    for stem in ("generated__tf2.21cpu__sparse_adam_fit",  # adam/UnsortedSegmentSum
                 "generated__tf2.21cpu__ragged_text_fit",  # RaggedReduceSum's own
                 # a gather from node states (a graph network's messages) whose gradient
                 # the tape adds to the states' dense one (AddN/inputs_1): dense anyway
                 "generated__tf2.21cpu__gnn_segment_sum_loop"):
        other = summary(stem)
        assert other.ops.densified_s == 0 and not fired(other, "sparse_gradient_dense")
    small = dataclasses.replace(s, ops=dataclasses.replace(
        s.ops, densified_s=0.009 * (s.ops.host_s + s.ops.device_s)))
    assert not fired(dataclasses.replace(s, advice=advise(small)), "sparse_gradient_dense")


def test_per_step_op_figures_do_not_count_steps_in_a_windows_set_up() -> None:
    """A capture begun before Keras's fit (225 ms) holds 12 train steps of 5.7 ms and the
    fit's set-up and end around them: the window's length over the step period reads 39
    steps, which made the optimizer's 39.5 ms of update read 1.01 ms a step; its ops ran
    12 times (the kept 10 and the dropped first and last): 3.3 ms a step."""
    s = summary("generated__tf2.21cpu__hash_table_tokenize_fit")
    assert window_steps(s) > 30 and s.steps.count == 10
    assert steps_run(s) == s.steps.count + 2
    a = one(s, "optimizer_update")
    per = float(a.message.split(" ms per step")[0].rsplit(", ", 1)[1])
    assert per == pytest.approx(1e3 * s.ops.optimizer_s / 12, abs=0.01)
    # a window of steps alone: its length over the period, where that is fewer
    full = summary(EMBEDDING_ADAM)
    assert steps_run(full) == pytest.approx(min(window_steps(full), full.steps.count + 2))


def test_all_others_names_numpy_converted_into_tensors_in_the_steps() -> None:
    """A loop assigning each 1024 x 1024 NumPy batch to tf.Variables (`v.assign(array)`)
    before its tf.function step: TensorFlow's conversions (`convert_to_tensor`,
    `tf.constant`) take 2.6 ms of each 9.6 ms step, XProf's 'All Others' (22 %); only
    their `_EagerConst` is op time, too little for eager_ops. all_others_bound names the
    conversion and hands the step tensors from tf.data as its fix."""
    s = summary("generated__tf2.21cpu__variable_assign_numpy_loop")
    assert 0.002 < s.steps.tensor_conversion_s < 0.0035
    assert not fired(s, "eager_ops")
    a = one(s, "all_others_bound")
    assert "converting NumPy arrays or Python values into tensors" in a.message
    assert a.evidence["tensor_conversion_s"] == s.steps.tensor_conversion_s
    assert a.fix.startswith("hand the step tensors") and "v.assign(array)" in a.fix
    # a fit whose 'All Others' is Keras's own Python keeps the rule's fix
    fit = summary("generated__tf2.21cpu__many_small_layers_fit")
    assert fit.steps.tensor_conversion_s == 0
    assert one(fit, "all_others_bound").fix.startswith("move Python work out of the step")


def test_optimizer_update_silent_where_the_update_is_a_usual_share() -> None:
    """A small model under Adam spends up to a third of its op time in the update: no
    advice there, nor without an optimizer."""
    for name in (CHECKPOINT_MANAGER, "generated__tf2.21cpu__two_output_tensorboard_fit",
                 HEAVY, "generated__tf2.21cpu__host_tracer3_loop"):
        s = summary(name)
        assert not fired(s, "optimizer_update"), name
    assert summary(CHECKPOINT_MANAGER).ops.optimizer_s > 0
    # A tiny step's update: half of its op time, a fifth of the step: no advice.
    tiny = summary("generated__tf2.21cpu__host_tracer3_loop")
    op_s = tiny.ops.host_s - sum(st.self_s for st in tiny.input_pipeline.stages)
    assert tiny.ops.optimizer_s >= 0.5 * op_s
    assert tiny.ops.optimizer_s < 0.3 * tiny.steps.mean_s * tiny.steps.count


def test_optimizer_update_leaves_out_the_gradients_all_reduce() -> None:
    """tf.distribute all-reduces the gradients inside the optimizer's scope
    (`sgd_1/CollectiveReduceV2`): communication, host_collectives_bound's, not the update."""
    s = summary(DIST_FROM_FN)
    reduce_s, _ = _op_self_s(DIST_FROM_FN, lambda n: n.startswith("sgd_1/Collective"))
    scoped, _ = _op_self_s(DIST_FROM_FN, lambda n: n.startswith("sgd_1/"))
    assert reduce_s > 0 and s.ops.optimizer_s == pytest.approx(scoped - reduce_s)
    assert not fired(s, "optimizer_update") and fired(s, "host_collectives_bound")


@pytest.mark.parametrize(("name", "update"), [
    ("StatefulPartitionedCall/adam/Sub_2", True), ("adam_1/Mul", True),
    ("Adam/Adam/update/ResourceApplyAdam", True), ("training/SGD/mul", True),
    ("adam_w/mul_5", True), ("adamw/Sub", True),
    ("sequential/dense/adamant/MatMul", False), ("my_sgd_layer/MatMul", False),
    ("gradient_tape/sequential/dense/MatMul", False)])
def test_optimizer_scope_is_a_whole_name_component(name: str, update: bool) -> None:
    from tfobs.analysis.ops import OPTIMIZER_SCOPE

    assert bool(OPTIMIZER_SCOPE.search(name)) is update


CHECKPOINT_MANAGER = "generated__tf2.21cpu__checkpoint_manager_steps"  # a save every 4th step


def _saving_steps(name: str) -> set[int]:
    """The marked steps whose span holds a MergeV2Checkpoints, read from the capture's own
    events (the root `train` markers and the merge ops on the training thread)."""
    from tfobs.analysis.eager import PREFIX
    from tfobs.xspace import schema

    space = schema.XSpace().FromString((CAPTURES / f"{name}.xplane.pb").read_bytes())
    (host,) = [p for p in space.planes if p.name == "/host:CPU"]
    names = {k: m.name for k, m in host.event_metadata.items()}
    step_stat = [k for k, m in host.stat_metadata.items() if m.name == "step_num"]
    out = set()
    for line in host.lines:
        merges = [line.timestamp_ns * 1000 + e.offset_ps for e in line.events
                  if names[e.metadata_id] == f"{PREFIX}MergeV2Checkpoints"]
        for e in line.events:
            if names[e.metadata_id] != "train":
                continue
            begin = line.timestamp_ns * 1000 + e.offset_ps
            num = [st.int64_value or st.uint64_value for st in e.stats
                   if st.metadata_id in step_stat]
            if any(begin <= m < begin + e.duration_ps for m in merges):
                out.add(num[0])
    return out


def test_checkpoint_writes_weigh_the_whole_save_in_the_steps_that_hold_one() -> None:
    """CheckpointManager.save() every 4th step inside the marker: its write ops are a small
    part of what those steps pay (the save's Python, its eager variable reads). The rule
    counts the saving steps' time beyond the typical step, and the 'All Others' and eager
    ops it makes point to the save, not to Python in the step or to tf.function."""
    s = summary(CHECKPOINT_MANAGER)
    kept = {st.step_num for st in s.steps.items}
    saving = _saving_steps(CHECKPOINT_MANAGER) & kept
    assert saving == {n for n in kept if n % 4 == 3} and len(saving) == s.ops.checkpoint_steps
    durations = {st.step_num: st.duration_s for st in s.steps.items}
    typical = float(np.median([d for n, d in durations.items() if n not in saving]))
    excess = sum(durations[n] for n in saving) - len(saving) * typical
    assert s.ops.checkpoint_steps_excess_s == pytest.approx(excess)
    # The write ops are a fraction of it: the save's Python is most of its cost.
    assert s.ops.checkpoint_steps_excess_s > 3 * s.ops.checkpoint_s
    a = one(s, "checkpoint_writes")
    total = sum(durations.values())
    assert a.evidence["checkpoint_steps_share"] == pytest.approx(excess / total)
    assert a.evidence["checkpoint_steps_share"] > 0.5
    assert f"The {len(saving)} step(s) that save one" in a.message
    # 'All Others' is mostly in those steps: all_others_bound says so and gives the
    # checkpoint's fix, and comes after the checkpoint rule.
    other = one(s, "all_others_bound")
    held = sum(st.breakdown_s["other"] for st in s.steps.items if st.step_num in saving)
    rest = [st.breakdown_s["other"] for st in s.steps.items if st.step_num not in saving]
    assert s.ops.checkpoint_steps_other_s == pytest.approx(
        held - len(saving) * float(np.median(rest)))
    assert "save a checkpoint" in other.message and other.fix == a.fix
    codes = [x.code for x in s.advice]
    assert codes.index("checkpoint_writes") < codes.index("all_others_bound")
    # The eager ops are the save's variable reads, in the saving steps (the dropped first
    # step's save too), not set-up before the steps: info, with the save's fix.
    eager = one(s, "eager_ops")
    assert eager.severity == "info" and eager.evidence["checkpoint_steps_share"] >= 0.5
    assert "save a checkpoint" in eager.message and "before the window" not in eager.message
    assert "tf.function would not remove" in eager.fix


def test_checkpoint_steps_need_a_step_free_of_saves_to_measure_against() -> None:
    """Every step saving: no typical step, no excess; writes outside every step: no saving
    step. An async save runs its writes on a thread of its own: none either."""
    from tfobs.analysis.eager import checkpoint_steps

    begin = np.array([0, 100, 200], np.int64)
    end = begin + 50
    other = np.array([0.1, 0.2, 0.3])
    assert checkpoint_steps(None, np.array([10, 110, 210]), (begin, end, other),
                            []) == (3, 0.0, 0.0, 0.0)
    assert checkpoint_steps(None, np.array([60, 160]), (begin, end, other), []) == (
        0, 0.0, 0.0, 0.0)
    # One of three saving: beyond the median of the other two.
    count, excess, other_excess, _ = checkpoint_steps(
        None, np.array([210]), (begin, np.array([50, 150, 400]), other), [])
    assert count == 1 and excess == pytest.approx((200 - 50) / 1e12)
    assert other_excess == pytest.approx(0.3 - 0.15)
    s = summary(CHECKPOINT_ASYNC)
    assert s.ops.checkpoint_steps == 0 and s.ops.checkpoint_steps_excess_s == 0.0
    assert all(a.fix != one(summary(CHECKPOINT_SYNC), "checkpoint_writes").fix
               for a in fired(s, "all_others_bound"))


def test_checkpoint_writes_in_steps_explain_other_on_every_checkpoint_capture() -> None:
    """The two older captures of saves inside steps read the same way."""
    for name in (CHECKPOINT_SYNC, "generated__tf2.21cpu__checkpoint_loop"):
        s = summary(name)
        a = one(s, "checkpoint_writes")
        assert s.ops.checkpoint_steps >= 2 and a.evidence["checkpoint_steps_share"] > 0.3, name
        assert one(s, "all_others_bound").fix == a.fix, name


def test_eager_ops_names_variables_made_at_a_first_call_not_eager_code() -> None:
    """Transfer learning in one window: 6 fit steps with a frozen backbone, then
    `trainable = True`, compile again and 6 more. The second fit's first step traces its new
    train function, and Keras 3 builds the new Adam's variables there (12 of the 16 eager
    VarHandleOps lie in that 1,033 ms step, the others in compile between the fits). Those
    eager ops are variables made once, not code to wrap in tf.function."""
    s = summary("generated__tf2.21cpu__unfreeze_recompile_fit")
    assert s.ops.graph_builds >= 1
    a = one(s, "eager_ops")
    assert a.severity == "info" and "makes variables" in a.message
    assert a.fix.startswith("nothing to move into tf.function")
    assert "wrap the eagerly run code" not in a.fix


def test_eager_ops_names_new_models_between_trials_not_epoch_end_work() -> None:
    """Three trials of a search in one window, each clear_session, a new model, compile and
    fit: the eager ops are the new variables (VarHandleOp, their initial AssignVariableOp,
    VarIsInitializedOp), most of them in the pauses between the trials. They are models
    built, not a checkpoint save or validation at an epoch's end."""
    s = summary("generated__tf2.21cpu__trials_clear_session_fit")
    a = one(s, "eager_ops")
    assert a.severity == "info" and "makes variables" in a.message
    assert "a checkpoint save" not in a.message and "a new model" in a.message
    assert "a new model for each trial" in a.fix


def test_retracing_names_a_new_keras_train_function_after_compile() -> None:
    """The fine-tuning window's one trace is the train function Keras made when compile ran
    again (after `trainable = True`), traced in the next fit's first step: the job passes no
    Python values to it, so the fix says first that one trace per compile needs no change. A
    custom loop's one trace (an epoch's last, smaller batch) keeps the plain fix."""
    a = one(summary("generated__tf2.21cpu__unfreeze_recompile_fit"), "tf_function_retracing")
    assert a.evidence["graph_builds"] == 1
    assert a.fix.startswith("where the trace is Keras fit's first step after compile()")
    assert "drop_remainder=True" in a.fix  # the other single-trace cause stays named
    loop = one(summary("generated__tf2.21cpu__partial_batch_retrace_loop"),
               "tf_function_retracing")
    assert loop.evidence["graph_builds"] == 1 and loop.fix.startswith("pass tensors")


def test_eager_ops_names_a_step_that_runs_eagerly() -> None:
    """The model's own math among the eager ops: a custom loop without tf.function, or
    Keras fit under Model.compile(run_eagerly=True). The fix names those switches; eager
    metrics beside a tf.function step keep the plain fix."""
    for name in ("generated__tf2.21cpu__eager_loop", "generated__tf2.21cpu__fit_run_eagerly"):
        a = one(summary(name), "eager_ops")
        assert "MatMul" in a.message and "the step itself is no tf.function" in a.message, name
        assert a.evidence["model_math_eager"] == 1.0
        assert "run_eagerly=True" in a.fix and "@tf.function" in a.fix
    plain = one(summary(EAGER), "eager_ops")
    assert plain.evidence["model_math_eager"] == 0.0
    assert plain.fix == next(r for r in RULES if r.id == "eager_ops").fix
    assert "the step itself" not in plain.message


def test_eager_ops_names_numpy_inputs_converted_at_each_call() -> None:
    """Keras's predict_on_batch fed NumPy batches: every eager op is `_EagerConst`, the
    conversion of an array into a tensor, which no tf.function around the code removes.
    The fix says to pass tensors; the evidence holds the share XProf's op rows give."""
    s = summary("generated__tf2.21cpu__predict_on_batch_loop")
    a = one(s, "eager_ops")
    const = sum(o.self_s for o in s.ops.eager_top if o.op_type == "_EagerConst")
    assert a.evidence["conversion_share"] == pytest.approx(const / s.ops.eager_s)
    assert a.evidence["conversion_share"] >= 0.5
    assert "_EagerConst: NumPy arrays or Python values" in a.message
    assert a.fix == EAGER_CONVERSION_FIX
    assert "pass tensors" in a.fix and "tf.data" in a.fix and "tf.function" not in a.fix
    # Below half of the eager time, or beside eager model math, the conversion is not named.
    for name in (EAGER, "generated__tf2.21cpu__fit_run_eagerly"):
        other = one(summary(name), "eager_ops")
        assert other.evidence["conversion_share"] < 0.5 or other.evidence["model_math_eager"]
        assert other.fix != EAGER_CONVERSION_FIX and "_EagerConst:" not in other.message


def test_eager_ops_that_are_queue_waits_name_the_producer_not_tf_function() -> None:
    """A custom loop fed through a tf.queue.FIFOQueue a Python thread fills more slowly than
    the step runs: the step waits in QueueDequeueV2, eager host op time to XProf (its verdict
    is no input wait). The advice says the wait is input and names the producer and tf.data,
    not tf.function (which would not remove a wait); other eager windows keep their fixes."""
    s = summary("generated__tf2.21cpu__queue_fed_loop")
    a = one(s, "eager_ops")
    waited = sum(o.self_s for o in s.ops.eager_top if o.op_type.startswith("QueueDequeue"))
    assert a.evidence["queue_wait_share"] == pytest.approx(waited / s.ops.eager_s)
    assert a.evidence["queue_wait_share"] >= 0.5
    assert "queue dequeues" in a.message and "input wait" in a.message
    assert a.fix == QUEUE_WAIT_FIX and "tf.data" in a.fix and "tf.function" not in a.fix
    # The step-time figures stay XProf's: the wait is host compute there, and here.
    assert s.breakdown_ratio.get("input", 0.0) < 0.01
    for name in (EAGER, "generated__tf2.21cpu__predict_on_batch_loop",
                 "generated__tf2.21cpu__checkpoint_callback_fit"):
        other = one(summary(name), "eager_ops")
        assert other.evidence["queue_wait_share"] == 0.0, name
        assert other.fix != QUEUE_WAIT_FIX and "queue" not in other.message, name


def test_one_graph_build_in_the_steps_is_only_info() -> None:
    """A single trace or compile inside the window's steps may be a function's first call
    (an evaluation step compiled mid-window), not a function built again: info, not a
    warning; the figures and the message are the same otherwise."""
    s = summary("generated__tf2.21cpu__retrace_loop")
    assert one(s, "tf_function_retracing").severity == "warning"
    once = dataclasses.replace(s, ops=dataclasses.replace(
        s.ops, graph_builds=1, graph_building_s=s.ops.graph_building_s / 6,
        graph_instantiations=1, graph_instantiation_s=s.ops.graph_instantiation_s / 6),
        advice=())
    a = one(dataclasses.replace(once, advice=tuple(advise(once))), "tf_function_retracing")
    assert a.severity == "info" and "built a graph once in" in a.message
    assert "instantiating the new function in its first call" in a.message
    # It says both readings: a first call, or (window after window) a rebuild.
    assert "first call in this window" in a.message and "again and again" in a.message


def test_eager_ops_between_the_steps_names_the_callbacks() -> None:
    """Keras 3 fit with ModelCheckpoint saving the weights every other batch: the eager ops
    (the variables read for the file) all run between the steps, where tf.function cannot
    reach; the fix names the callbacks. A loop whose eager ops run inside its steps keeps
    the plain fix."""
    s = summary("generated__tf2.21cpu__checkpoint_callback_fit")
    a = one(s, "eager_ops")
    assert 0.9 * s.ops.eager_s <= s.ops.eager_between_steps_s <= s.ops.eager_s
    assert a.evidence["between_steps_share"] == pytest.approx(
        s.ops.eager_between_steps_s / s.ops.eager_s)
    assert "runs between the steps" in a.message and a.fix == EAGER_BETWEEN_FIX
    assert "ModelCheckpoint" in a.fix
    inside = summary("generated__tf2.21cpu__checkpoint_loop")
    b = one(inside, "eager_ops")
    assert inside.ops.eager_between_steps_s < 0.5 * inside.ops.eager_s
    assert b.fix != EAGER_BETWEEN_FIX and "between the steps" not in b.message
    back = WindowSummary.from_dict(s.to_dict())  # the figure survives JSON
    assert back.ops.eager_between_steps_s == s.ops.eager_between_steps_s


def test_eager_model_math_beside_a_compiled_step_is_not_called_an_eager_step() -> None:
    # Each step calls its tf.function once, then the model eagerly for an accuracy check:
    # "the step itself is no tf.function" would send the user to a decorator already there.
    s = summary("generated__tf2.21cpu__eager_metric_beside_step")
    a = one(s, "eager_ops")
    assert a.evidence["model_math_eager"] == 1 and a.fix == EAGER_MATH_BESIDE_FIX
    assert "'train_step', called once per step" in a.message
    assert "the step itself is no tf.function" not in a.message
    # a loop with no compiled step keeps the eager-step fix
    eager = summary("generated__tf2.21cpu__eager_loop")
    assert one(eager, "eager_ops").fix == EAGER_STEP_FIX


def test_an_eager_weight_average_beside_a_compiled_step_is_named_with_its_dispatch_cost(
        ) -> None:
    # Each step calls its tf.function, then tf.train.ExponentialMovingAverage.apply eagerly:
    # 96 small eager ops a step whose op time (3 ms) hides the cost, their dispatch from
    # Python (the step takes 28.8 ms against 5.4 ms with the update inside the function).
    import json
    import statistics

    name = "generated__tf2.21cpu__ema_eager_apply_loop"
    s = summary(name)
    a = one(s, "eager_ops")
    assert a.fix == EAGER_UPDATE_FIX and a.severity == "warning"
    assert "ExponentialMovingAverage.apply" in a.message and "'train_step'" in a.message
    assert "16 AssignSubVariableOp a step" in a.message
    prov = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())
    params = prov["parameters"]
    saved = (statistics.mean(params["measured_step_ms"][1:-1])
             - statistics.mean(params["ema_in_function_step_ms"])) / 1e3
    said = float(re.search(r"steps spend ([\d.]+) ms", a.message).group(1)) / 1e3
    assert said == pytest.approx(saved, rel=0.15)
    assert said > 5 * a.evidence["eager_s_per_step"]
    # an eager metric of the model's math keeps its own words
    other = summary("generated__tf2.21cpu__eager_metric_beside_step")
    assert one(other, "eager_ops").fix == EAGER_MATH_BESIDE_FIX


def test_eager_update_after_a_tape_outside_the_step_function_is_named_as_such() -> None:
    # A loop calling its compiled forward under an eager GradientTape: tape.gradient runs
    # the function's backward as a call of its own each step and apply_gradients (SGD, 6
    # variables) dispatches its ops eagerly. No moving average; the fix is the whole step,
    # tape and update included, in one tf.function (2.4x faster on the recording host).
    name = "generated__tf2.21cpu__tape_outside_function_loop"
    s = summary(name)
    assert s.ops.eager_backward_calls == 12  # one per step traced, the dropped two included
    a = one(s, "eager_ops")
    assert a.fix == EAGER_TAPE_FIX and a.severity == "warning"
    assert "ExponentialMovingAverage" not in a.message
    assert "GradientTape outside" in a.message and "'forward'" in a.message
    assert "6 Mul, 6 AssignSubVariableOp" in a.message
    back = WindowSummary.from_dict(s.to_dict())  # the figure survives JSON
    assert back.ops.eager_backward_calls == 12
    # a moving average applied eagerly beside a whole compiled step keeps its own words
    ema = summary("generated__tf2.21cpu__ema_eager_apply_loop")
    assert ema.ops.eager_backward_calls == 0
    assert one(ema, "eager_ops").fix == EAGER_UPDATE_FIX


def test_all_others_held_by_every_nth_step_is_named_as_periodic_work() -> None:
    # A loop calling model.save_weights (a .weights.h5 written from Python) every 4th step
    # inside its marker: steps 4, 8 and 12 hold most of 'All Others', and moving the step's
    # Python out (the plain fix) would not touch it.
    import json
    import statistics

    name = "generated__tf2.21cpu__save_weights_every_4_loop"
    s = summary(name)
    a = one(s, "all_others_bound")
    assert a.evidence["periodic_every"] == 4
    assert "every 4th step (steps 4, 8, 12)" in a.message
    assert "model.save_weights" in a.fix and "`if step % 4 == 0:`" in a.fix
    params = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())[
        "parameters"]
    job = params["measured_step_ms"]
    saving = [t for t, n in zip(job, range(3, 3 + len(job)), strict=True) if n % 4 == 0]
    cost = (statistics.mean(saving) - statistics.mean(params["steps_without_save_ms"])) / 1e3
    assert a.evidence["periodic_excess_s"] == pytest.approx(cost, rel=0.25)
    # steps with evenly spread Python keep the plain fix
    for stem in ("generated__tf2.21cpu__logging_in_step",
                 "generated__tf2.21cpu__clip_norm_adamw_cosine_loop"):
        plain = one(summary(stem), "all_others_bound")
        assert "periodic_every" not in plain.evidence


def test_check_numerics_left_on_is_named_with_its_switch() -> None:
    # tf.debugging.enable_check_numerics(): the eager time is its CheckNumericsV2 ops, which
    # no tf.function removes; the fix turns the checks off.
    s = summary("generated__tf2.21cpu__check_numerics_loop")
    a = one(s, "eager_ops")
    assert a.fix == CHECK_NUMERICS_FIX and a.evidence["check_numerics_share"] >= 0.5
    assert "enable_check_numerics() is on" in a.message
    wide = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__check_numerics_loop.xplane.pb",
                         top_n=40)
    assert any(o.op_type == "DebugNumericSummaryV2" for o in wide.ops.top)  # in the graph too
    assert one(summary("generated__tf2.21cpu__eager_loop"), "eager_ops").evidence[
        "check_numerics_share"] == 0


def test_summaries_written_every_step_are_measured_and_named() -> None:
    # tf.summary.scalar and a histogram per weight in every step: a quarter of the window,
    # which read only as 'All Others' (POTENTIALLY input-bound).
    s = summary("generated__tf2.21cpu__summary_every_step_loop")
    a = one(s, "summary_writes")
    assert a.evidence["summary_writes_share"] == pytest.approx(
        s.ops.summary_writes_s / s.duration_s)
    assert a.evidence["summary_writes_share"] >= 0.05 and "record_if" in a.fix
    ops = tfobs.analyze(CAPTURES / "generated__tf2.21cpu__summary_every_step_loop.xplane.pb",
                        top_n=10_000).ops.top
    scoped = sum(o.self_s for o in ops if "write_summary/" in o.name
                 or o.op_type.startswith("Write"))
    # the graph's summary ops, and the writer's own ops run eagerly (its flush)
    assert scoped <= s.ops.summary_writes_s <= scoped + s.ops.eager_s + 1e-9
    assert WindowSummary.from_dict(s.to_dict()).ops.summary_writes_s == s.ops.summary_writes_s
    for quiet in (HEALTHY, RETRACE):  # no summaries: nothing measured, nothing said
        assert summary(quiet).ops.summary_writes_s == 0 and not fired(summary(quiet),
                                                                         "summary_writes")


def test_conversions_between_the_steps_name_the_callbacks_not_numpy_inputs() -> None:
    # Keras fit profiled by its TensorBoard callback: the _EagerConst ops run between the
    # steps (the callbacks' per-batch work); "pass tensors to the tf.function" named inputs
    # the job never passes.
    s = summary("generated__tf2.21cpu__two_output_tensorboard_fit")
    a = one(s, "eager_ops")
    assert a.evidence["conversion_share"] >= 0.5 and a.evidence["between_steps_share"] >= 0.5
    assert a.fix.startswith(EAGER_BETWEEN_FIX) and a.fix != EAGER_CONVERSION_FIX
    assert "between the steps" in a.message
    # conversions inside the steps (NumPy batches handed to each call) keep the tensors fix
    inside = one(summary("generated__tf2.21cpu__predict_on_batch_loop"), "eager_ops")
    assert inside.evidence["between_steps_share"] < 0.5 and inside.fix == EAGER_CONVERSION_FIX


def test_eager_set_up_before_the_first_step_is_not_blamed_on_callbacks() -> None:
    # Normalization.adapt in the same trace as fit, before its first step: eager ops outside
    # the steps, yet no callback's; the window caught set-up once, which the steps never pay.
    s = summary("generated__tf2.21cpu__adapt_then_fit")
    a = one(s, "eager_ops")
    assert s.ops.eager_before_steps_s >= 0.9 * s.ops.eager_s
    assert a.severity == "info" and a.fix == EAGER_BEFORE_FIX
    assert "before the window's first measured step" in a.message
    assert "callbacks" not in a.message
    assert a.evidence["before_steps_share"] == pytest.approx(
        s.ops.eager_before_steps_s / s.ops.eager_s)
    # eager work between the steps, or after the last one (an evaluation), is no set-up
    for name in ("generated__tf2.21cpu__checkpoint_callback_fit",
                 "generated__tf2.21cpu__eager_eval_after_steps"):
        other = summary(name)
        assert other.ops.eager_before_steps_s < 0.1 * other.ops.eager_s
        assert one(other, "eager_ops").fix != EAGER_BEFORE_FIX
    back = WindowSummary.from_dict(s.to_dict())  # the figure survives JSON
    assert back.ops.eager_before_steps_s == s.ops.eager_before_steps_s


def test_no_prefetch_on_a_generator_pipeline_names_keras_pydataset_buffer() -> None:
    # Keras fit over a PyDataset builds `from_generator` with no prefetch the user can add:
    # the fix names the PyDataset's own buffer beside `.prefetch`.
    s = summary("generated__tf2.21cpu__pydataset_fit")
    assert fired(s, "tfdata_from_generator")
    a = one(s, "tfdata_no_prefetch")
    assert a.fix == PYDATASET_PREFETCH_FIX and "max_queue_size=" in a.fix
    plain = summary(NO_PREFETCH)  # a tf.data pipeline of the job's own
    assert not fired(plain, "tfdata_from_generator")
    assert one(plain, "tfdata_no_prefetch").fix == NO_PREFETCH_RULE.fix


def test_eager_model_math_between_the_steps_is_not_blamed_on_the_step() -> None:
    # The step is a tf.function; the eager MatMuls are an evaluation pass after the last
    # step. "the step itself is no tf.function" would send the user to the wrong code.
    s = summary("generated__tf2.21cpu__eager_eval_after_steps")
    a = one(s, "eager_ops")
    assert a.evidence["model_math_eager"] == 1 and a.evidence["between_steps_share"] >= 0.5
    assert "runs between the steps" in a.message and "no tf.function" not in a.message
    assert a.fix == EAGER_MATH_BETWEEN_FIX
    # The model's math inside the steps still gets the step's fix.
    assert one(summary("generated__tf2.21cpu__fit_run_eagerly"), "eager_ops").fix == EAGER_STEP_FIX


def test_jax_op_by_op_names_a_step_without_jit() -> None:
    # The least-squares step without jax.jit: every operation dispatched on its own.
    s = summary("generated__jax0.10cpu__op_by_op_steps")
    a = one(s, "jax_op_by_op")
    assert a.evidence["jitted_calls_per_step"] >= OP_BY_OP_CALLS
    assert a.evidence["jitted_functions"] >= 5  # matmul, mul, _mean, convert_element_type..
    assert "matmul" in a.message and "jax.jit" in a.fix
    assert 0 < a.evidence["jitted_call_s_per_step"] < s.steps.interval_s
    # The Python tracer's python_in_step says whose Python that is, and jitting comes first.
    py = one(s, "python_in_step")
    assert "(jax_op_by_op)" in py.message and py.fix.startswith(a.fix)
    # On an H100 a loop of tiny multiply/add ops: 199 dispatches a step, beside the launch
    # advice the GPU figures give.
    gpu = summary("recorded__h100_jax0.11.2__launch_bound_tiny_ops")
    assert one(gpu, "jax_op_by_op").evidence["jitted_calls_per_step"] > 100
    assert fired(gpu, "kernel_launch_bound")


def test_jax_op_by_op_beside_a_jitted_update_names_the_parameter_arithmetic() -> None:
    """A jitted update, then a tree_map average of the weights outside jit: its multiplies
    and adds are the step's other programs; the fix puts them in the jitted step, and says
    the calls' time is their dispatch alone."""
    a = one(summary("generated__jax0.10cpu__ema_outside_jit_steps"), "jax_op_by_op")
    assert a.evidence["jitted_functions"] >= 3 and a.evidence["jitted_calls_per_step"] >= 9
    assert "multiply" in a.message and "add" in a.message and "dispatch" in a.message
    assert "tree_map outside jit" in a.fix and "returned with the update" in a.fix


def test_jax_op_by_op_names_a_python_loop_around_one_jitted_function() -> None:
    """A cart-pole environment in numpy stepped 64 times a step, each action from a jitted
    policy read back with int(): 65 calls a step of 'act', 98 % of the jitted calls. Not
    operations dispatched one by one: a Python loop around a jitted function, whose fix
    moves the loop into the program (the same rollout as one jitted lax.scan took 0.17 ms
    against 3.2 ms steps, the provenance); the loop's reads are the loop's, not metrics to
    read every N steps, and no loader's Python."""
    import json

    from tfobs.analysis.advice.steps import LOOP_FIX, OP_BY_OP

    name = "generated__jax0.10cpu__python_env_rollout_steps"
    s = summary(name)
    a = one(s, "jax_op_by_op")
    assert "jitted 'act' 65 times" in a.message and "Python loop around" in a.message
    assert "operation by operation" not in a.message
    assert a.fix == LOOP_FIX and a.evidence["loop_calls_per_step"] >= 64
    py = one(s, "python_in_step")
    assert "loop around a jitted function is in it (jax_op_by_op)" in py.message
    assert py.fix == LOOP_FIX and py.guide == OP_BY_OP.guide
    assert "batches ahead" not in py.fix and "every N steps" not in py.fix
    prov = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())
    fixed = prov["parameters"]["scanned_rollout_ms_before_trace"]
    assert 1e3 * s.steps.mean_s > 10 * fixed


def test_a_scipy_optimizer_driving_a_jitted_objective_is_named_with_its_device_fix() -> None:
    """Each step runs scipy.optimize.minimize(L-BFGS-B) on the host, its objective a jitted
    value_and_grad called about 30 times: SciPy's own code (`scipy.optimize._lbfgsb
    setulb`) holds most of the step's Python. python_in_step names the host optimizer and
    its on-device counterparts, jax_op_by_op the loop around the jitted objective; neither
    says to load batches ahead."""
    from tfobs.analysis.advice.steps import LOOP_FIX

    s = summary("generated__jax0.10cpu__scipy_lbfgs_host_steps")
    assert s.steps.python_traced_top[0].startswith("scipy.optimize.")
    a = one(s, "jax_op_by_op")
    assert "jitted 'lr_loss'" in a.message and a.fix == LOOP_FIX
    py = one(s, "python_in_step")
    assert "a SciPy optimizer running on the host" in py.message
    assert "optax.lbfgs" in py.fix and "batches ahead" not in py.fix


def test_jax_op_by_op_leaves_a_loader_threads_calls_out_of_the_step() -> None:
    """A loader thread normalises each batch with jax.numpy outside jit (about nine small
    programs a batch) while the step is one jitted call: the window's calls come to 9.7 a
    step, of 8 functions, but one starts inside each step on its thread. The step does not
    run operation by operation; the finding names the other thread's calls (info) and its
    fix the loader's array work, and python_in_step does not call the step op by op."""
    from tfobs.analysis.advice.steps import OP_BY_OP, OTHER_THREAD_CALLS_FIX

    s = summary("generated__jax0.10cpu__loader_thread_jnp_ops_steps")
    assert s.steps.jitted_calls_in_steps == pytest.approx(1.0)
    a = one(s, "jax_op_by_op")
    assert a.severity == "info" and a.fix == OTHER_THREAD_CALLS_FIX and a.fix != OP_BY_OP.fix
    assert "operation by operation" not in a.message and "another thread" in a.message
    assert a.evidence["jitted_calls_per_step"] >= OP_BY_OP_CALLS
    if fired(s, "python_in_step"):
        assert "(jax_op_by_op)" not in one(s, "python_in_step").message
    # the steps' own calls are what the window's rates read on the op-by-op captures
    for name, low in (("generated__jax0.10cpu__op_by_op_steps", 13),
                      ("recorded__h100_jax0.11.2__launch_bound_tiny_ops", 200),
                      ("generated__jax0.10cpu__python_env_rollout_steps", 65)):
        assert summary(name).steps.jitted_calls_in_steps == pytest.approx(low, abs=0.5)


@pytest.mark.parametrize("name", [
    "generated__jax0.10cpu__op_by_op_steps",  # ten functions, no host read
    "generated__jax0.10cpu__ema_outside_jit_steps",  # multiply 6.5 a step, under 8
    "generated__jax0.10cpu__device_permutation_epochs",  # 8 functions, 25 % the most
    "recorded__h100_jax0.11.2__launch_bound_tiny_ops",  # multiply and add, no host read
])
def test_jax_op_by_op_keeps_operation_by_operation_where_no_loop_reads_back(name: str) -> None:
    from tfobs.analysis.advice.steps import LOOP_FIX

    a = one(summary(name), "jax_op_by_op")
    assert "operation by operation" in a.message and a.fix != LOOP_FIX


@pytest.mark.parametrize("name", [
    "generated__jax0.10cpu__step_annotation",  # one jitted call a step
    "generated__jax0.10cpu__async_two_jits_steps",  # two jitted functions a step
    "generated__tf2.21cpu__epoch_and_batch_roots",  # one function 8.5 times an epoch step
    "generated__jax0.10cpu__epoch_step_annotations",  # six jitted steps in each epoch marker
    # one-off calls of 0.1 ms after 15 ms steps (a metric read, tfobs's drain): a "rate" of
    # one over the call's own duration read 760 calls a step here, as on a live Flax job
    "generated__jax0.10cpu__jitted_step_window_end",
])
def test_jax_op_by_op_silent_on_jitted_steps_and_coarse_markers(name: str) -> None:
    s = summary(name)
    assert not fired(s, "jax_op_by_op")
    if "python_in_step" in {a.code for a in s.advice}:
        assert "(jax_op_by_op)" not in one(s, "python_in_step").message


def test_tfobs_window_end_drain_is_none_of_the_jobs_calls() -> None:
    # A live JAX window ends with tfobs's drain (capture/jax_profiler.py): the capture holds
    # its call, the window's calls do not; the job's one-off calls stay listed.
    name = "generated__jax0.10cpu__jitted_step_window_end"
    assert b"PjitFunction(tfobs_window_end)" in (CAPTURES / f"{name}.xplane.pb").read_bytes()
    calls = {c.name: c for c in summary(name).steps.calls}
    assert "PjitFunction(tfobs_window_end)" not in calls
    assert calls["PjitFunction(<lambda>)"].count == 12
    assert calls["PjitFunction(_mean)"].count == 1


def _root_prefetch_fetches(name: str, s: WindowSummary) -> list[int]:
    """`buffered_elements` (0 where the stat is absent: TensorFlow writes it only for a
    buffer that holds some) of each root-prefetch fetch (`buffer_limit` stat) that starts in
    a kept step, read from the capture's own events."""
    spans = step_spans_ps(s)
    out = []
    for event, stats, at, _ in host_events(CAPTURES / f"{name}.xplane.pb", s):
        if (event == "Iterator::Root::Prefetch" and "buffer_limit" in stats
                and any(b <= at < end for b, end in spans)):
            out.append(stats.get("buffered_elements", 0))
    return out


KEEPS_UP = "generated__tf2.21cpu__epoch_and_batch_roots"  # ready at every fetch
STALLS = "generated__tf2.21cpu__keras3_spe4_plain"  # two fetches found the buffer empty


def test_input_bound_says_a_pipeline_that_keeps_up_has_only_its_hand_over_to_wait() -> None:
    """Steps of a millisecond or two: the prefetch buffer held a batch at every fetch, so
    the tenth of a millisecond XProf counts as input per step is IteratorGetNext handing a
    ready batch over. The fix says so (more work per step, several steps per call), and no
    tf.data stage is blamed."""
    s = summary(KEEPS_UP)
    held = _root_prefetch_fetches(KEEPS_UP, s)
    assert held and all(h > 0 for h in held)
    ip = s.input_pipeline
    assert ip.prefetch_fetches == ip.prefetch_ready == len(held)
    assert ip.prefetch_empty_s == 0.0
    a = one(s, "input_bound")
    assert s.input_bound.verdict in ("moderately", "highly")
    assert a.fix.startswith("the pipeline keeps up") or "the pipeline keeps up" in a.fix
    assert f"{len(held)} of {len(held)} fetches" in a.fix and "steps_per_execution" in a.fix
    assert a.evidence["prefetch_ready"] == len(held)
    stage_rules = {r.id for r in input_pipeline_rules.RULES} - {"input_bound", "output_bound"}
    assert not stage_rules & {x.code for x in s.advice}
    # A pipeline that cannot keep up finds its buffer empty: its stages are still named.
    slow = summary(HEAVY)
    assert slow.input_pipeline.prefetch_ready < 0.9 * slow.input_pipeline.prefetch_fetches
    assert "keeps up" not in one(slow, "input_bound").fix and fired(slow, "tfdata_slowest_stage")


def test_a_ten_step_window_of_ready_fetches_keeps_up() -> None:
    """A 10-step window keeps 8 steps (first and last dropped): a tf.function step whose
    tf.map_fn loop over the rows takes most of it, fed by a prefetched from_tensor_slices
    pipeline ready at 8 of 8 fetches. XProf calls it MODERATELY input-bound on IteratorGetNext's
    own 0.15 ms; the fix is the hand-over's, not "fix the input pipeline first", and no stage
    (BatchV2, 0.07 ms a step) is blamed."""
    name = "generated__tf2.21cpu__map_fn_per_example_loop"
    s = summary(name)
    held = _root_prefetch_fetches(name, s)
    ip = s.input_pipeline
    assert s.steps.count == 8 and ip.prefetch_fetches == ip.prefetch_ready == len(held) == 8
    assert s.input_bound.verdict == "moderately"
    a = one(s, "input_bound")
    assert "the pipeline keeps up" in a.fix and "8 of 8 fetches" in a.fix
    assert "fix the input pipeline first" not in a.fix
    stage_rules = {r.id for r in input_pipeline_rules.RULES} - {"input_bound", "output_bound"}
    assert not stage_rules & {x.code for x in s.advice}


@pytest.mark.parametrize("stem", ["gzip_tfrecord_loop", "vectorized_map_grads_loop"])
def test_ready_fetches_of_a_millisecond_waited_for_a_core_not_the_hand_over(stem: str
                                                                            ) -> None:
    """Ready batches each fetch, yet a fetch takes ~1 ms at the median (recorded on 2 loaded
    cores; 0.06-2.9 ms within one window for the same batch): no hand-over costs that, so
    the fix names the wait for a core or a lock and the CPU limit, not a fixed cost per
    step; a loop whose ready fetches take a tenth of that keeps the fixed-cost fix."""
    s = summary(f"generated__tf2.21cpu__{stem}")
    ip = s.input_pipeline
    assert ip.prefetch_ready == ip.prefetch_fetches >= 8
    assert ip.prefetch_median_s >= SLOW_HANDOVER_S
    a = one(s, "input_bound")
    assert a.fix.startswith("the pipeline keeps up") and "yet a fetch took" in a.fix
    assert f"{1e3 * ip.prefetch_median_s:.2f} ms at the median" in a.fix
    assert "waited for a core" in a.fix and "CPU limit" in a.fix
    assert "it is a fixed cost per step" not in a.fix
    quick = summary("generated__tf2.21cpu__interleave_records_loop")
    assert quick.input_pipeline.prefetch_median_s < SLOW_HANDOVER_S / 5
    b = one(quick, "input_bound")
    assert "it is a fixed cost per step" in b.fix and "waited for a core" not in b.fix


def test_input_bound_names_a_few_stalled_fetches() -> None:
    """Keras fit with steps_per_execution: the per-step waits are blurred by the hand-over's
    tenth of a millisecond, but two fetches that found the buffer empty hold most of it."""
    s = summary(STALLS)
    held = _root_prefetch_fetches(STALLS, s)
    empty = sum(h == 0 for h in held)
    ip = s.input_pipeline
    assert ip.prefetch_fetches == len(held) and ip.prefetch_ready == len(held) - empty
    waited = s.breakdown_s["input"] * s.steps.count
    assert 0 < empty <= 0.2 * len(held) and ip.prefetch_empty_s >= 0.7 * waited
    a = one(s, "input_bound")
    assert a.fix.startswith("the wait is a few stalls: ") and f"in {empty} of {len(held)}" in a.fix


SHARD_AFTER_READ = "generated__tf2.21cpu__shard_after_read_loop"  # one 40.8 ms fetch


def test_input_bound_names_one_long_fetch_of_a_ready_batch() -> None:
    """The prefetch buffer held two batches at each of the 10 fetches, but one of them (step
    5) took 40.8 ms while the parallel map's ParseExampleV2 ran 36.7 ms on tf.data's
    threads; the other fetches took ~0.5 ms. No hand-over takes 40 ms and it is no cost
    every step pays: the fix names that fetch and the work during it, not "a fixed cost
    per step"."""
    s = summary(SHARD_AFTER_READ)
    held = _root_prefetch_fetches(SHARD_AFTER_READ, s)
    ip = s.input_pipeline
    assert ip.prefetch_fetches == ip.prefetch_ready == len(held) == 10
    assert ip.prefetch_longest_ready and ip.prefetch_longest_step == 5
    assert ip.prefetch_longest_s == pytest.approx(0.0408, abs=5e-4)
    assert ip.prefetch_median_s == pytest.approx(0.0005, abs=2e-4)
    assert ip.prefetch_longest_stage == "Iterator::Root::Prefetch::ParallelMapV2"
    assert ip.prefetch_longest_op == "ParseExample/ParseExampleV2"
    assert ip.prefetch_longest_op_s == pytest.approx(0.0367, abs=5e-4)
    by_step = {st.step_num: st.breakdown_s["input"] for st in s.steps.items}
    assert by_step[5] == pytest.approx(ip.prefetch_longest_s, abs=1e-4)
    a = one(s, "input_bound")
    assert a.fix.startswith("the wait is one fetch's: 40.8 ms of the 45.4 ms")
    assert "(step 5)" in a.fix and "ParseExample/ParseExampleV2 for 36.7 ms" in a.fix
    assert "the other 9 took 0.51 ms at the median, the hand-over" in a.fix
    assert "the pipeline keeps up" not in a.fix and "fewer threads" in a.fix
    assert "fixed cost per step" not in a.fix.partition("; the hand-over is")[0]
    # no stage rule: the buffer was ready, as for a pipeline that keeps up (the shard after
    # the read is the pipeline's shape, named whether or not it holds the job up)
    stage_rules = {r.id for r in input_pipeline_rules.RULES} - {
        "input_bound", "output_bound", "tfdata_shard_after_read"}
    assert not stage_rules & {x.code for x in s.advice}
    # one long ready fetch with no pipeline work beside it: held up outside tf.data
    other = one(summary("generated__tf2.21cpu__autograph_tensor_range_loop"), "input_bound")
    assert other.fix.startswith("the wait is one fetch's: 4.7 ms")
    assert "No pipeline work held it" in other.fix and "fewer threads" not in other.fix
    # a pipeline whose fetches are even keeps the hand-over's words
    even = summary(KEEPS_UP).input_pipeline
    assert even.prefetch_longest_s < 10 * even.prefetch_median_s
    assert "the pipeline keeps up" in one(summary(KEEPS_UP), "input_bound").fix


LOGGING_IN_STEP = "generated__tf2.21cpu__logging_in_step"  # 5 slow fetches of 12


def _ready_fetch_threads_idle(name: str, s: WindowSummary) -> list[tuple[float, bool]]:
    """Each root-prefetch fetch in a kept step that found a batch buffered: its ms, and
    whether tf.data's producer (`PrefetchProduce`, a batch made) ran under a tenth of it."""
    spans = step_spans_ps(s)
    fetches, produce = [], []
    for event, stats, at, e in host_events(CAPTURES / f"{name}.xplane.pb", s):
        if event == "PrefetchProduce":
            produce.append((at, at + e.duration_ps))
        elif (event == "Iterator::Root::Prefetch" and stats.get("buffered_elements", 0) > 0
              and any(b <= at < end for b, end in spans)):
            fetches.append((at, at + e.duration_ps))
    return [((end - at) / 1e9,
             sum(max(0, min(end, p1) - max(at, p0)) for p0, p1 in produce) < 0.1 * (end - at))
            for at, end in fetches]


def test_input_bound_names_a_few_long_fetches_of_ready_batches() -> None:
    """A custom loop's eager next() on a prefetched pipeline whose buffer held a batch at
    all 12 fetches: 7 took about 0.2 ms, 5 took 2-4.5 ms while tf.data's producer made a
    batch in under a tenth of each (the job's threads off the shared VM's cores). XProf:
    HIGHLY input-bound. The wait is those fetches', not a hand-over every step pays: no one
    fetch holds half of it, so the fix names the five."""
    s = summary(LOGGING_IN_STEP)
    held = _ready_fetch_threads_idle(LOGGING_IN_STEP, s)
    ip = s.input_pipeline
    assert ip.prefetch_fetches == ip.prefetch_ready == len(held) == 12
    slow = [(ms, idle) for ms, idle in held if ms >= 5 * 1e3 * ip.prefetch_median_s]
    assert len(slow) == ip.prefetch_slow_ready == 5 and all(idle for _, idle in slow)
    assert ip.prefetch_slow_ready_s * 1e3 == pytest.approx(sum(ms for ms, _ in slow), rel=1e-6)
    assert ip.prefetch_slow_ready_steps == (5, 6, 9, 10, 13)
    assert ip.prefetch_longest_s < 0.5 * s.breakdown_s["input"] * s.steps.count  # not one
    a = one(s, "input_bound")
    assert a.severity == "critical"  # XProf's HIGHLY verdict stands
    assert a.fix.startswith("the wait is 5 fetches': 15.5 ms of the 17.6 ms")
    assert "(steps 5, 6, 9, 10, 13)" in a.fix and "No pipeline work held them" in a.fix
    assert "the pipeline keeps up" not in a.fix and "fixed cost per step" not in a.fix
    # the one-fetch case keeps its words, and even fetches the hand-over's
    assert one(summary(SHARD_AFTER_READ), "input_bound").fix.startswith(
        "the wait is one fetch's")
    assert summary(KEEPS_UP).input_pipeline.prefetch_slow_ready < 2


def test_step_gap_says_the_pauses_beside_a_per_batch_gap() -> None:
    """tf_keras fit over two epochs with validation: a gap every step (callbacks) and two
    long pauses (the epoch's end, the validation run) that hold most of the time between
    steps. Both are said, the pauses' fix first; over half the period outside the steps
    is critical."""
    s = summary("generated__tf2.21cpu__tfkeras_fit_validation_epochs")
    a = one(s, "step_gap")
    starts = [st.start_ns for st in s.steps.items]
    gaps = [max(0.0, (b - a_) / 1e9 - st.duration_s)
            for a_, b, st in zip(starts, starts[1:], s.steps.items, strict=False)]
    typical = float(np.median(gaps))
    pauses = [g for g in gaps if g >= 10 * typical]
    assert a.evidence["pauses"] == len(pauses) >= 1
    assert a.evidence["pause_share"] == pytest.approx(sum(pauses) / sum(gaps))
    assert f"{len(pauses)} pause(s)" in a.message and a.fix.startswith("find what runs in")
    assert "for the gap every step pays" in a.fix
    assert a.severity == "critical" and a.evidence["gap_share"] >= 0.5
    # Under half the period: a warning; no pauses: the per-batch fix alone.
    b = one(summary("generated__tf2.21cpu__fit_validation_unmarked"), "step_gap")
    assert b.severity == "warning" and b.evidence["gap_share"] < 0.5


def test_no_prefetch_is_judged_per_pipeline() -> None:
    """A step reading two datasets, the slow one without a prefetch: the job's other
    pipeline has one, which hid the missing prefetch; and that pipeline's ready fetches do
    not make the wait a hand-over, since they hold almost none of it."""
    name = "generated__tf2.21cpu__two_pipelines_one_unprefetched"
    s = summary(name)
    ip = s.input_pipeline
    assert any("::Prefetch" in st.name for st in ip.stages)
    assert ip.slowest_stage.name == "Iterator::Root::MapAndBatch"
    a = one(s, "tfdata_no_prefetch")
    assert "another pipeline of the job has one" in a.message
    assert ip.prefetch_ready == ip.prefetch_fetches == len(_root_prefetch_fetches(name, s))
    waited = s.breakdown_s["input"] * s.steps.count
    assert ip.prefetch_s < 0.1 * waited and "keeps up" not in one(s, "input_bound").fix
    # A pipeline with none at all keeps the older sentence.
    bare = one(summary(NO_PREFETCH), "tfdata_no_prefetch")
    assert bare.message.startswith("The input pipeline has no prefetch stage")


def test_tf_print_every_step_is_named() -> None:
    """Two tf.print calls at the end of every step: their ops are a tenth of a short step,
    which XProf counts as host compute and tfobs names, with the every-N-steps fix."""
    name = "generated__tf2.21cpu__tf_print_every_step"
    s = summary(name)
    printed, _ = _op_self_s(name, lambda n: n.split("/")[-1].startswith(
        ("StringFormat", "PrintV2")))
    assert s.ops.print_s == pytest.approx(printed) and printed > 0
    a = one(s, "tf_print")
    step_s = sum(st.duration_s for st in s.steps.items)
    assert a.evidence["print_share"] == pytest.approx(printed / step_s)
    assert printed >= 0.05 * step_s
    assert "step % N == 0" in a.fix
    # A loop that prints nothing: no tf.print ops, no advice.
    quiet = summary(CHECKPOINT_MANAGER)
    assert quiet.ops.print_s == 0.0 and not fired(quiet, "tf_print")


@pytest.mark.parametrize(("name", "said", "fix"), [
    ("generated__tf2.21cpu__scan_running_mean_loop", "a scan, sequential by nature",
     "scan within each batch"),
    ("generated__tf2.21cpu__window_flat_map_series_loop", "the flat_map of Dataset.window",
     "timeseries_dataset_from_array"),
])
def test_a_sequential_stage_gets_its_own_fix(name: str, said: str, fix: str) -> None:
    """A scan and a window's flat_map run one element at a time: batching before a map or
    more parallel calls would not reach them."""
    s = summary(name)
    a = one(s, "tfdata_slowest_stage")
    kind = s.input_pipeline.slowest_stage.name.rsplit("::", 1)[-1]
    assert kind == ("Scan" if "scan" in name else "FlatMap")
    assert said in a.message and fix in a.fix and "batch before map" not in a.fix


def test_sample_from_datasets_selector_points_to_the_dataset_it_waits_for() -> None:
    """The slowest stage is sample_from_datasets' own choice of source (a
    `DirectedInterleave::` stage with no index): the fix names the heaviest dataset drawn
    from (`DirectedInterleave[k]`), not the selector."""
    s = summary("generated__tf2.21cpu__sample_from_datasets_loop")
    slow = s.input_pipeline.slowest_stage.name
    assert "::DirectedInterleave::" in slow
    drawn = [st for st in s.input_pipeline.stages if "::DirectedInterleave[" in st.name]
    heaviest = max(drawn, key=lambda st: st.self_s)
    a = one(s, "tfdata_slowest_stage")
    assert "own choice of source" in a.message and heaviest.name in a.fix
    assert heaviest.name.split("::DirectedInterleave[")[1].startswith("0]")  # the heavy map


def test_a_dataset_loop_inside_the_function_is_input_xprof_does_not_see() -> None:
    """One tf.function call per epoch looping `for xb, yb in dataset:` inside: AutoGraph
    runs the loop as a ReduceDataset op that takes its batches without IteratorGetNext, so
    XProf reads NOT input-bound. tfobs counts the loop's fetches (`ReduceIterator::Root`)
    and the iterator made on each call (`MakeIterator::*`)."""
    name = "generated__tf2.21cpu__epoch_loop_in_function"
    s = summary(name)
    assert s.input_bound.verdict == "not"
    spans = step_spans_ps(s)
    fetched = made = 0.0
    for event, _, at, e in host_events(CAPTURES / f"{name}.xplane.pb", s):
        if not any(b <= at < end for b, end in spans):
            continue
        if event == "ReduceIterator::Root":
            fetched += e.duration_ps / 1e12
        elif event == "MakeIterator::RootDataset":  # the outermost one
            made += e.duration_ps / 1e12
    ip = s.input_pipeline
    assert ip.in_graph_loop_input_s == pytest.approx(fetched) and fetched > 0
    assert ip.in_graph_loop_iterators_s == pytest.approx(made, rel=0.05) and made > 0
    a = one(s, "input_bound")
    step_s = sum(st.duration_s for st in s.steps.items)
    assert a.evidence["in_graph_loop_input_pct"] == pytest.approx(100 * fetched / step_s)
    assert a.severity == ("critical" if fetched >= 0.2 * step_s else "warning")
    assert "a new one on every call" in a.message and "iter(dataset)" in a.fix


def test_an_iterator_made_in_every_step_is_named_before_the_pipelines_stages() -> None:
    """A loop taking each batch with `next(iter(ds))` over shuffle + map + batch + prefetch:
    every step makes a new iterator (`EagerLocalExecute: MakeIterator`) and waits for the
    restarted pipeline (its shuffle buffer first), 35.7 ms a step against 4.6 ms with one
    iterator made before the loop (the job's own timing). XProf calls it HIGHLY input-bound
    and tfobs blamed the MapAndBatch stage; the fix is the iterator, not the stage."""
    name = "generated__tf2.21cpu__iterator_per_step_loop"
    s = summary(name)
    spans = step_spans_ps(s)
    made, steps = 0.0, set()
    for event, _, at, e in host_events(CAPTURES / f"{name}.xplane.pb", s):
        if event != "EagerLocalExecute: MakeIterator":
            continue
        for k, (b, end) in enumerate(spans):
            if b <= at < end:
                made += e.duration_ps / 1e12
                steps.add(k)
    ip = s.input_pipeline
    assert ip.step_iterators == len(steps) == s.steps.count == 8
    assert ip.step_iterators_s == pytest.approx(made) and made > 0
    a = one(s, "tfdata_iterator_per_step")
    assert a.severity == "warning" and "8 of the 8 steps" in a.message
    assert "shuffle buffer" in a.message and "it = iter(dataset)" in a.fix
    assert a.evidence["iterator_make_s_per_step"] == pytest.approx(made / 8)
    bound = one(s, "input_bound")
    assert s.input_bound.verdict == "highly" and "tfdata_iterator_per_step" in bound.fix
    assert not fired(s, "tfdata_slowest_stage")  # the stage's time is the refill
    # 'All Others' is the Python that builds each iterator, not Python to move
    assert "tfdata_iterator_per_step" in one(s, "all_others_bound").fix
    # an evaluation inside every fifth step makes an iterator there: no such loop
    assert not fired(summary("generated__tf2.21cpu__evaluate_inside_steps"),
                     "tfdata_iterator_per_step")


def test_threshold_metrics_compiled_into_a_keras_step_are_named() -> None:
    """Keras 3 fit compiled with two AUCs of 20,000 thresholds: their updates (unscoped
    `StatefulPartitionedCall/Cumsum_3`, `ReverseV2`, `Greater`) hold most of each 4.2 ms
    step; the same fit compiled without them ran 1.5 ms a step (the job's own timing).
    XProf lists the ops and says nothing; keras_metrics_cost names the metrics. The ops of
    tf.data's functions (a py_function, a decode), bare-named, are no metric."""
    name = "generated__tf2.21cpu__auc_metric_fit"
    s = tfobs.analyze(CAPTURES / f"{name}.xplane.pb", top_n=10_000)
    unscoped = [o for o in s.ops.top if o.name.startswith("StatefulPartitionedCall/")
                and "/" not in o.name.removeprefix("StatefulPartitionedCall/")
                and o.op_type != "Dataset"]
    assert s.ops.keras_top_level_s == pytest.approx(sum(o.self_s for o in unscoped))
    assert s.ops.keras_top_level_types == ("ReverseV2", "Cumsum", "Greater")
    a = one(s, "keras_metrics_cost")
    assert a.severity == "warning" and "metrics" in a.message and "num_thresholds" in a.fix
    assert a.evidence["metrics_share_of_step"] > 0.5
    for other in ("generated__tf2.21cpu__parallel_map_slow_fit",  # py_function in tf.data
                  "generated__tf2.21cpu__jpeg_decode_plain_fit",  # DecodeJpeg in tf.data
                  "generated__tf2.21cpu__two_output_tensorboard_fit"):  # cheap metrics
        assert not fired(summary(other), "keras_metrics_cost"), other


def test_long_steps_are_named_apart_from_the_typical_ones() -> None:
    """model.evaluate inside every fifth marked step: those steps take several times the
    others, and the window's averages mix the two kinds. long_steps names them and their
    share; a window whose long steps are a refill, a save or a retrace leaves that to the
    rule that reads it."""
    s = summary("generated__tf2.21cpu__evaluate_inside_steps")
    durations = {st.step_num: st.duration_s for st in s.steps.items}
    typical = float(np.median(list(durations.values())))
    long = sorted(n for n, d in durations.items() if d >= 3 * typical)
    assert long == [n for n in durations if n % 5 == 4]
    excess = sum(durations[n] for n in long) - len(long) * typical
    a = one(s, "long_steps")
    assert a.evidence["long_steps"] == len(long)
    assert a.evidence["long_excess_share"] == pytest.approx(excess / sum(durations.values()))
    assert f"steps {', '.join(map(str, long))})" in a.message and "evaluation" in a.fix
    for other in (CHECKPOINT_MANAGER, "generated__tf2.21cpu__xla_shape_recompile_loop"):
        o = summary(other)
        assert not fired(o, "long_steps"), other
    assert fired(summary(CHECKPOINT_MANAGER), "checkpoint_writes")
    assert fired(summary("generated__tf2.21cpu__xla_shape_recompile_loop"),
                 "tf_function_retracing")


def test_long_steps_name_the_tf_cond_branch_only_they_take() -> None:
    """A tf.function step whose tf.cond on the optimizer's iteration count takes a heavy
    branch (40 matmul rounds) every fifth step: those steps take about 12x the others
    (the job's own timing). long_steps names the branch their longest ops run in
    (`cond/then/_0`), which no typical step's do, and a fix for a branch, not the
    evaluation-or-save guess; evaluate_inside_steps, whose long steps run no branch, keeps
    the general fix."""
    s = summary("generated__tf2.21cpu__cond_every_5_loop")
    durations = {st.step_num: st.duration_s for st in s.steps.items}
    typical = float(np.median(list(durations.values())))
    long = sorted(n for n, d in durations.items() if d >= 3 * typical)
    assert long == [n for n in durations if n % 5 == 4]  # the iterations the cond takes
    a = one(s, "long_steps")
    assert a.evidence["long_steps"] == len(long)
    assert "tf.cond branch (cond/then/_0)" in a.message
    assert a.fix.startswith("those steps take the branch cond/then/_0 of a tf.cond")
    for k, st in enumerate(s.steps.items):  # the branch's ops only in the long steps
        assert any(e.name.startswith("cond/then/_0/") for e in st.top_events) == (
            st.step_num in long), k
    e = one(summary("generated__tf2.21cpu__evaluate_inside_steps"), "long_steps")
    assert "tf.cond" not in e.message and "evaluation" in e.fix
    # where the window kept no top events of its typical steps (a long window keeps its
    # longest only), whether they take the branch is unknown: no branch is named
    bare = tuple(st if st.step_num in long else dataclasses.replace(st, top_events=())
                 for st in s.steps.items)
    cut = dataclasses.replace(s, steps=dataclasses.replace(s.steps, items=bare))
    again = [a for a in advise(cut) if a.code == "long_steps"]
    assert len(again) == 1 and "tf.cond" not in again[0].message


def test_long_steps_leave_a_jax_window_of_dispatched_steps_alone() -> None:
    """A JAX step returns once dispatched; the step that reads a value (float(loss) every N
    steps) waits for those before it. Uneven markers there are the dispatch: the typical
    step is a sliver of the step period, and no long_steps. A JAX window whose typical step
    waits for its work (block_until_ready) and whose few long steps run more (an evaluation
    every N steps) gets it, as a TensorFlow one does."""
    s = summary("generated__tf2.21cpu__evaluate_inside_steps")
    jax = dataclasses.replace(s, environment=dataclasses.replace(s.environment,
                                                                 framework="jax"))
    assert fired(s, "long_steps") and "long_steps" in {a.code for a in advise(jax)}
    st = jax.steps
    typical = float(np.median([it.duration_s for it in st.items]))
    dispatched = dataclasses.replace(jax, steps=dataclasses.replace(st, items=tuple(
        dataclasses.replace(it, duration_s=it.duration_s if it.duration_s >= 3 * typical
                            else 0.01 * st.interval_s) for it in st.items)))
    assert "long_steps" not in {a.code for a in advise(dispatched)}


def test_jax_fixes_name_a_jit_made_inside_the_loop_and_indexing_outside_it() -> None:
    by_id = {r.id: r for r in RULES}
    assert "made inside the loop" in by_id["tf_function_retracing"].jax_fix
    assert "outside the loop" in by_id["tf_function_retracing"].jax_fix
    assert "pass the indices into the jitted step" in by_id["jax_op_by_op"].fix


MICRO = "generated__tf2.21cpu__micro_batches_in_function"  # 3 in-graph fetches per step
SHARED = "generated__tf2.21cpu__interleave_records_loop"  # ready, busy tf.data threads


def test_a_pipeline_read_inside_the_function_keeps_up_by_its_fetches_alone() -> None:
    """The iterator read inside the tf.function (three micro-batches a step): the input
    wait is mostly the fetch ops' own cost, which no tf.data event times, so the root
    prefetch's events hold under half of it although its buffer was ready every time.
    With every pipeline prefetched at its root, that still reads as a pipeline that keeps
    up, with the fetches per step said; a second pipeline without a prefetch
    (two_pipelines_one_unprefetched) still does not."""
    s = summary(MICRO)
    ip = s.input_pipeline
    waited = s.breakdown_s["input"] * s.steps.count
    assert ip.prefetch_ready == ip.prefetch_fetches == 3 * s.steps.count  # the kept steps
    assert ip.prefetch_s < 0.5 * waited  # what the fetches alone hold
    a = one(s, "input_bound")
    assert "the pipeline keeps up" in a.fix and "3 batches each" in a.fix
    assert not fired(s, "tfdata_slowest_stage")
    two = summary("generated__tf2.21cpu__two_pipelines_one_unprefetched")
    assert "keeps up" not in one(two, "input_bound").fix


def test_a_host_only_pipeline_that_keeps_up_still_takes_the_steps_cores() -> None:
    """A ready buffer on a CPU-only job: tf.data's threads still run their work on the cores
    the step computes on, so the fix no longer says a cheaper pipeline cannot help."""
    from tfobs.analysis.advice.rule import window_steps

    s = summary(SHARED)
    ip = s.input_pipeline
    assert ip.prefetch_ready == ip.prefetch_fetches and ip.pool_threads == 2
    # The pool threads' own busy time: the stages' self times add up waits on one another.
    work = ip.pool_busy_s / window_steps(s)
    assert work >= 0.2 * s.steps.mean_s
    fix = one(s, "input_bound").fix
    assert "the pipeline keeps up" in fix
    assert f"{1e3 * work:.2f} ms of pipeline work per step" in fix and "take(1)" in fix
    # Little pipeline work beside the steps: no such caveat; nor for a Python generator's
    # pipeline, whose stages mostly wait on one another and whose pool threads are idle.
    assert "pipeline work per step" not in one(summary(MICRO), "input_bound").fix
    generator = summary("generated__tf2.21cpu__pydataset_fit")
    assert not any("pipeline work per step" in a.fix for a in generator.advice)


FILTER = "generated__tf2.21cpu__filter_after_map_loop"


def test_a_filter_that_drops_most_of_a_maps_work_is_named() -> None:
    """range -> heavy parallel map -> filter keeping one in eight: the filter is the slowest
    stage by self time (it waits for the map's elements it then drops), and the fix is to
    filter before the work, not to make the stage cheaper."""
    from tfobs.analysis.advice.input_pipeline import FILTER_FIX

    s = summary(FILTER)
    stages = {st.name: st for st in s.input_pipeline.stages}
    filt = s.input_pipeline.slowest_stage
    assert filt is not None and filt.name.endswith("::Filter")
    depth = filt.name.count("::") + 1  # the filter's input: one level under it
    made = max(st.count for name, st in stages.items()
               if name.startswith(filt.name + "::") and name.count("::") == depth)
    assert filt.count <= 0.2 * made  # one in eight, and the batches' first elements
    a = one(s, "tfdata_slowest_stage")
    assert f"a filter that keeps {filt.count} of {made} elements" in a.message
    assert a.fix == FILTER_FIX


def test_a_snapshots_own_reader_is_not_taken_for_the_jobs_map() -> None:
    """map -> snapshot, written before the window and read in it: the slowest stage is the
    parallel map over the snapshot's SnapshotReader (the snapshot's own reading), not the
    job's map, which does not run on read; the fix is the snapshot's, not vectorizing."""
    from tfobs.analysis.advice.input_pipeline import SNAPSHOT_FIX

    s = summary("generated__tf2.21cpu__snapshot_read_loop")
    slow = s.input_pipeline.slowest_stage
    assert slow is not None and slow.name.endswith("ParallelMapV2")
    assert any(st.name.startswith(slow.name + "::SnapshotReader")
               for st in s.input_pipeline.stages)
    a = one(s, "tfdata_slowest_stage")
    assert "the snapshot's own reader" in a.message and a.fix == SNAPSHOT_FIX
    # A map of the job's own, with no snapshot under it, keeps the generic fix.
    plain = summary("generated__tf2.21cpu__parallel_map_slow_fit")
    assert all(SNAPSHOT_FIX != x.fix for x in plain.advice)


def test_a_filter_that_keeps_most_of_its_input_is_not_named() -> None:
    from tfobs.analysis.advice.input_pipeline import _filter_keeps
    from tfobs.summary import TfDataStage

    root = "Iterator::Root::Prefetch::MapAndBatch"
    stages = (TfDataStage(f"{root}::Filter", 0.2, 900),
              TfDataStage(f"{root}::Filter::ParallelMapV2", 0.1, 1000),
              TfDataStage(f"{root}::Filter::ParallelMapV2::Range", 0.01, 1000))
    assert _filter_keeps(stages[0], stages) is None  # keeps 90 %
    dropping = (TfDataStage(f"{root}::Filter", 0.2, 100), *stages[1:])
    assert _filter_keeps(dropping[0], dropping) == (dropping[0], 1000)
    # The filter's input, slowest itself, is named through its filter too.
    assert _filter_keeps(dropping[1], dropping) == (dropping[0], 1000)


IGNORE_ERRORS = "generated__tf2.21cpu__ignore_errors_decode_loop"


def test_the_elements_ignore_errors_drops_are_counted_and_named() -> None:
    """A parallel map decoding JPEGs, one in four cut short, then ignore_errors(): the
    IgnoreErrors stage passes on three in four of the elements its map made, the rest
    dropped without a word. The job is not input-bound (POTENTIALLY, on 'All Others'), and
    the note does not wait for the input rules' gate."""
    s = summary(IGNORE_ERRORS)
    ip = s.input_pipeline
    stages = {st.name: st for st in ip.stages}
    stage = ip.ignore_errors_stage
    assert stage == "Iterator::Root::Prefetch::BatchV2::IgnoreErrors"
    assert ip.ignore_errors_passed == stages[stage].count
    assert ip.ignore_errors_input == stages[stage + "::ParallelMapV2"].count
    assert ip.ignore_errors_input_kind == "ParallelMapV2"
    made = ip.ignore_errors_input
    dropped = made - ip.ignore_errors_passed
    assert dropped / made == pytest.approx(1 / 4, abs=0.02)  # corrupt_every=4
    assert s.input_bound.verdict not in ("highly", "moderately")
    a = one(s, "tfdata_ignore_errors")
    assert a.severity == "info" and a.evidence["ignore_errors_dropped"] == dropped
    assert (f"passed on {ip.ignore_errors_passed} of the {made} elements its input "
            f"(ParallelMapV2) made in the window: {dropped} (25 %)") in a.message
    assert "DecodeJpeg" in a.message and "silently" in a.message
    assert "log_warning=True" in a.fix and "filter() on it before the expensive map" in a.fix
    back = WindowSummary.from_dict(s.to_dict())
    assert back.input_pipeline.ignore_errors_input == made
    # A few elements short (one in flight at each edge of the window) is no drop.
    edge = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        ip, ignore_errors_passed=made - 2))
    assert not fired(dataclasses.replace(s, advice=advise(edge)), "tfdata_ignore_errors")


def test_a_shard_after_the_records_are_read_is_named_with_the_work_below_it() -> None:
    """Four TFRecord files read in order, then shard(4, 1): each worker reads every record
    and keeps one in four. The Shard stage (a repeat's epochs are one stage) and the reader
    below it are named, the stages' time below it given; the job is input-bound on a parse
    after the batch, not on the read, so it is a note, not a warning."""
    s = summary(SHARD_AFTER_READ)
    ip = s.input_pipeline
    assert ip.shard_after_read_stage == (
        "Iterator::Root::Prefetch::ParallelMapV2::BatchV2::ForeverRepeat[*]::Shard")
    assert ip.shard_after_read_readers == ("TFRecord",)
    below = sum(st.self_s for st in ip.stages if "::Shard::" in st.name)  # the kept rows
    assert below > 0 and below <= ip.shard_after_read_s <= 1.02 * below
    a = one(s, "tfdata_shard_after_read")
    assert s.input_bound.verdict == "highly" and a.severity == "info"
    assert "(TFRecord below it)" in a.message and "keeps one in num_shards" in a.message
    assert "list_files" in a.fix and "AutoShardPolicy.FILE" in a.fix
    assert a.evidence["shard_input_s"] == ip.shard_after_read_s
    back = WindowSummary.from_dict(s.to_dict())
    assert back.input_pipeline.shard_after_read_readers == ("TFRecord",)
    # Where the work below the shard is most of the pipeline's, an input-bound job is warned.
    heavy = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        ip, shard_after_read_s=sum(st.self_s for st in ip.stages)))
    assert one(dataclasses.replace(s, advice=advise(heavy)),
               "tfdata_shard_after_read").severity == "warning"


def test_a_shard_of_the_file_list_or_before_the_map_is_no_shard_after_read() -> None:
    from tfobs.analysis.tfdata import shard_after_read

    root = "Iterator::Root::Prefetch::BatchV2"
    by_file = (TfDataStage(f"{root}::ParallelInterleaveV4[0]::TFRecord", 0.3, 500),
               TfDataStage(f"{root}::ParallelInterleaveV4[1]::TFRecord", 0.3, 500),
               TfDataStage(f"{root}::ParallelInterleaveV4::Shard::Shuffle::TensorSlice",
                           0.001, 2),
               TfDataStage(f"{root}::ParallelInterleaveV4::Shard", 0.001, 2))
    assert shard_after_read(by_file) == ("", (), 0.0)
    early = (TfDataStage(f"{root}::ParallelMapV2", 0.5, 100),
             TfDataStage(f"{root}::ParallelMapV2::Shard", 0.01, 100),
             TfDataStage(f"{root}::ParallelMapV2::Shard::TensorSlice", 0.02, 400))
    assert shard_after_read(early) == ("", (), 0.0)
    late = (TfDataStage(f"{root}::Shard", 0.01, 100),
            TfDataStage(f"{root}::Shard::ParallelMapV2", 0.5, 400),
            TfDataStage(f"{root}::Shard::ParallelMapV2::TensorSlice", 0.02, 400))
    assert shard_after_read(late) == (f"{root}::Shard", ("ParallelMapV2",), 0.52)


def test_ignore_errors_counts_an_interleaves_elements_as_one_stage() -> None:
    from tfobs.analysis.tfdata import ignore_errors_drops

    root = "Iterator::Root::Prefetch::ParallelInterleaveV4"
    stages = tuple(TfDataStage(name, 0.01, count) for name, count in (
        (f"{root}[0]::IgnoreErrors", 40), (f"{root}[0]::IgnoreErrors::TFRecord", 50),
        (f"{root}[1]::IgnoreErrors", 45), (f"{root}[1]::IgnoreErrors::TFRecord", 45),
        ("Iterator::Root::Prefetch", 10)))
    assert ignore_errors_drops(stages) == (f"{root}[*]::IgnoreErrors", 85, 95, "TFRecord")
    # Without a drop, or without the stage, nothing.
    assert ignore_errors_drops(stages[2:]) == ("", 0, 0, "")
    assert ignore_errors_drops(stages[-1:]) == ("", 0, 0, "")


ONE_THREAD = "generated__tf2.21cpu__one_thread_pool_loop"


def test_parallel_stages_on_a_pool_of_one_thread_are_named() -> None:
    """map(num_parallel_calls=4) under private_threadpool_size=1: one pool thread runs every
    call in turn, busy most of the window; the fix gives tf.data its threads back."""
    s = summary(ONE_THREAD)
    ip = s.input_pipeline
    assert ip.pool_threads == 1 and ip.pool_busy >= 0.6
    a = one(s, "tfdata_one_thread")
    assert "ParallelMapV2" in a.message and "one thread" in a.message
    assert a.evidence["pool_busy"] == ip.pool_busy and "private_threadpool_size" in a.fix


@pytest.mark.parametrize("name", ["parallel_map_slow_fit", "pydataset_fit",
                                  "filter_after_map_loop"])
def test_a_pool_of_the_hosts_cores_or_an_idle_thread_is_not_one_thread(name: str) -> None:
    # The default pool (one thread per core: two here), busy or not; one thread hardly used.
    s = summary(f"generated__tf2.21cpu__{name}")
    assert s.input_pipeline.pool_threads >= 1
    assert not fired(s, "tfdata_one_thread")


def test_a_few_stalled_fetches_behind_bucketing_name_the_buckets() -> None:
    """bucket_by_sequence_length (GroupByWindow) hands a batch over only when its bucket is
    full: where it is the slowest stage, a few stalled fetches are its buckets filling, not
    a pipeline starting, and the fix is the buckets'."""
    from tfobs.analysis.advice.input_pipeline import BUCKET_WAIT

    s = summary(STALLS)
    assert one(s, "input_bound").fix.startswith("the wait is a few stalls: ")
    bucket = TfDataStage("Iterator::Root::Prefetch::GroupByWindow", 0.02, 20)
    grouped = dataclasses.replace(s, input_pipeline=dataclasses.replace(
        s.input_pipeline, slowest_stage=bucket,
        stages=(bucket, *s.input_pipeline.stages)))
    fix = next(a for a in advise(grouped) if a.code == "input_bound").fix
    assert fix.startswith("the wait is a few stalls: ") and BUCKET_WAIT in fix
    assert "a new epoch's iterator" not in fix


def test_a_keras_job_already_running_several_steps_per_call_is_told_so() -> None:
    """Keras 3 fit with steps_per_execution=4: each marked step is one call fetching four
    batches; a fix suggesting steps_per_execution=N says the job already has 4. A fit at
    steps_per_execution=1 (one fetch per call) keeps the plain fix."""
    from tfobs.analysis.advice import keras_steps_per_call

    s = summary("generated__tf2.21cpu__keras3_spe4_plain")
    assert keras_steps_per_call(s) == 4
    a = one(s, "all_others_bound")
    assert "already sets steps_per_execution=4" in a.fix
    plain = summary("generated__tf2.21cpu__slow_callback")
    assert keras_steps_per_call(plain) == 1
    gap = one(plain, "step_gap")
    assert "steps_per_execution=N" in gap.fix and "already sets" not in gap.fix


@pytest.mark.parametrize("name, first", [
    ("generated__tf2.21cpu__fit_validation", "multi_step_on_iterator"),
    ("generated__tf2.21cpu__numpy_epochs_fit", "TFE_DeleteTensorHandle")])
def test_a_pause_between_steps_says_what_runs_in_it(name: str, first: str) -> None:
    """Keras fit with validation: the longest pause holds the validation's function call;
    fit on numpy arrays over epochs: the old iterator's tensors freed at each epoch's end.
    The events that begin in the pause (outermost) name it, each within the pause."""
    s = summary(name)
    st = s.steps
    assert st.pause_top[0] == first
    starts = [x.start_ns for x in st.items]
    longest = max((b - a) / 1e9 - x.duration_s
                  for a, b, x in zip(starts, starts[1:], st.items, strict=False))
    assert 0 < sum(st.pause_top_s) <= longest + 1e-9
    assert list(st.pause_top_s) == sorted(st.pause_top_s, reverse=True)
    a = one(s, "step_pause")
    assert f"The longest pause holds: {first} {1e3 * st.pause_top_s[0]:.2f} ms" in a.message
    back = WindowSummary.from_dict(s.to_dict())  # the figures survive JSON
    assert back.steps.pause_top == st.pause_top and back.steps.pause_top_s == st.pause_top_s


PADDED = "generated__tf2.21cpu__padded_batch_gru_loop"
BUCKETED = "generated__tf2.21cpu__bucketed_gru_loop"


def test_padded_batches_run_through_a_loop_are_named() -> None:
    """padded_batch(32) of sequences 4-64 long (mean 35) into a GRU: the while loop runs
    about 63 times a step, the batches' longest; bucketing by length (the control) cuts it
    to about 38 and the step from 18.9 to 12.9 ms, and there the rule is silent."""
    s = summary(PADDED)
    a = one(s, "padded_batch_loop")
    assert a.severity == "info" and "PaddedBatchV2" in a.message
    assert 55 <= a.evidence["loop_iterations_per_step"] <= 65
    assert a.evidence["loop_op_share"] >= 0.3
    assert "sequential_1/gru_1" in a.message and "gradient_tape" not in a.message
    assert "bucket_by_sequence_length" in a.fix
    control = summary(BUCKETED)
    assert any(st.name.endswith("GroupByWindow") for st in control.input_pipeline.stages)
    assert not fired(control, "padded_batch_loop")
    assert control.steps.mean_s < 0.8 * s.steps.mean_s


@pytest.mark.parametrize("name", ["generated__tf2.21cpu__while_loop_step",
                                  "generated__tf2.21cpu__ragged_text_fit"])
def test_a_loop_without_padded_batches_or_padding_without_a_loop_is_not_named(
        name: str) -> None:
    assert not fired(summary(name), "padded_batch_loop")


MAP_FN = "generated__tf2.21cpu__map_fn_per_example_loop"


def test_a_per_row_map_fn_is_named_with_its_share_of_the_step() -> None:
    """A per-row tf.map_fn (standardizing each of 64 rows) in the tf.function step: about
    1 ms of each 2.4 ms step runs its iterations, its ops too small to write op events, so
    the op table and every other rule miss it. The advice names the loop, its length and
    share, and the batched rewrite, tf.vectorized_map and XLA as fixes."""
    s = summary(MAP_FN)
    a = one(s, "in_graph_loop")
    assert a.severity == "warning"
    assert a.message.startswith("An in-graph loop (map) runs in each step, 64 iterations long")
    assert "(40 %)" in a.message and "the op table does not show the loop" in a.message
    assert 0.35 < a.evidence["in_graph_loop_share"] < 0.45
    assert a.evidence["loop_iterations"] == 64 and a.evidence["in_graph_loop_op_share"] == 0
    assert not any(o.name.startswith("map/while") for o in s.ops.top)  # no op row shows it
    for fix in ("ops on the whole batch", "tf.vectorized_map", "jit_compile=True"):
        assert fix in a.fix
    assert "20 %" in a.threshold and "8 iterations" in a.threshold


CTC_DENSE = "generated__tf2.21cpu__ctc_loss_loop"


def test_functional_while_loops_of_dense_ctc_are_named_with_sparse_labels_as_fix() -> None:
    """tf.nn.ctc_loss on dense labels runs its recursions as two While ops of 100
    iterations (one per frame) that are not lowered: each iteration calls the body function
    in an executor run of its own at iteration 0 (`WhileOp-StartBody`), so no run carries
    an iteration past 0. The loops hold about three quarters of each 287 ms step; the fix
    is labels as a SparseTensor (the fused CTCLoss kernel: 6.6x faster on the recording
    machine for this batch)."""
    s = summary(CTC_DENSE)
    assert s.steps.in_graph_loop_scopes == ("ctc_loss_dense",)
    assert s.steps.in_graph_loop_iterations == 100
    a = one(s, "in_graph_loop")
    assert a.severity == "warning"
    assert a.message.startswith("In-graph loops (ctc_loss_dense) run in each step, 100 "
                                "iterations long")
    assert 0.6 < a.evidence["in_graph_loop_share"] < 0.9
    assert 0.5 < a.evidence["in_graph_loop_op_share"] <= 1.0  # its body's ops write events
    assert "tf.SparseTensor" in a.fix and "CTCLoss" in a.fix


VMAP_GRADS = "generated__tf2.21cpu__vectorized_map_grads_loop"


def test_a_vectorized_map_fallback_loop_is_named_with_the_op_it_could_not_vectorize() -> None:
    """Per-example gradients by tf.vectorized_map, each clipped with tf.linalg.global_norm:
    pfor has no converter for L2Loss (global_norm's op), so it runs each of the four
    gradients' L2Loss in a while loop of 64 iterations, a third of the step. The loop is
    vectorized_map's own: the advice names the op and its rewrite, not vectorized_map."""
    s = summary(VMAP_GRADS)
    a = one(s, "in_graph_loop")
    assert a.severity == "warning"
    assert a.message.startswith("An in-graph loop (tf.vectorized_map's per-example fallback "
                                "for L2Loss: loop_body/global_norm/L2Loss")
    assert "64 iterations long" in a.message
    assert all(x.endswith("/pfor") for x in s.steps.in_graph_loop_scopes)
    assert 0.25 < a.evidence["in_graph_loop_share"] < 0.4
    assert a.fix.startswith("this loop is tf.vectorized_map's own fallback")
    for fix in ("tf.reduce_sum(tf.square(x))", "fallback_to_while_loop=False",
                "jit_compile=True"):
        assert fix in a.fix
    assert "tf.vectorized_map(fn, elems) turns it" not in a.fix
    # A loop of the job's own keeps the rule's fix.
    assert "tf.vectorized_map(fn, elems) turns it" in one(summary(MAP_FN), "in_graph_loop").fix


RNN_FITS = ["generated__tf2.21cpu__" + c for c in (
    "gru_fit", "gru_spe3_fit", "numpy_epochs_fit", "lstm_bfc_varying", "padded_batch_gru_loop",
    "bucketed_gru_loop")]


@pytest.mark.parametrize("name", RNN_FITS)
def test_a_recurrent_layers_loop_is_info_with_the_layers_own_fix(name: str) -> None:
    """A Keras GRU or LSTM on a CPU steps through its sequence in a while loop (53-82 % of
    the step here): the loop is the layer's nature, so the advice is info and its fix is
    the layer's (XLA, unroll, fewer or fuller iterations), not a batched rewrite."""
    s = summary(name)
    a = one(s, "in_graph_loop")
    assert a.severity == "info" and a.message.startswith(("A recurrent layer's loop",
                                                           "Recurrent layers' loops"))
    assert re.search(r"\((sequential_1/(gru|lstm)_1(_2)?(, )?)+\)", a.message)
    assert a.evidence["in_graph_loop_share"] >= 0.5
    assert a.fix.startswith("a recurrent layer runs its cell once per time step")
    assert "On a CPU, compile the step with XLA" in a.fix and "unroll=True" in a.fix
    assert "vectorized_map" not in a.fix and "cuDNN" not in a.fix
    # The same loop in a GPU job: the layer is off cuDNN's kernel.
    (gpu,) = [x for x in advise(_gpu(s)) if x.code == "in_graph_loop"]
    assert gpu.fix.startswith(a.fix.split(" On a CPU")[0])
    assert "cuDNN's fused kernel" in gpu.fix and "use_cudnn='auto'" in gpu.fix


def test_sequences_of_varying_length_give_the_median_and_longest_loop() -> None:
    """Two stacked LSTMs on batches 16-64 long: about 40 iterations a step, up to 64."""
    a = one(summary("generated__tf2.21cpu__lstm_bfc_varying"), "in_graph_loop")
    assert "(sequential_1/lstm_1, sequential_1/lstm_1_2) run in each step" in a.message
    assert "about 40 iterations (up to 64) long" in a.message


def test_a_recurrent_loop_over_bucketed_batches_is_not_told_to_bucket() -> None:
    padded = one(summary(PADDED), "in_graph_loop")
    bucketed = one(summary(BUCKETED), "in_graph_loop")
    assert "bucket them by length" in padded.fix and "bucket them" not in bucketed.fix
    assert "the pipeline already buckets them by length" in bucketed.fix


@pytest.mark.parametrize("name", ["generated__tf2.21cpu__" + c for c in (
    "while_loop_step", "dynamic_while_step", "keras3_spe4_plain", "keras3_spe4_callback",
    "evaluate_spe4", "tfkeras_spe8_tfdata_fit", "scan_running_mean_loop")])
def test_short_inner_loops_and_loops_of_steps_are_no_in_graph_loop_advice(name: str) -> None:
    """A tf.while_loop of 4 (1-8) whole updates is under 20 % of its step and under 8
    iterations; Keras's steps_per_execution loop runs training steps, not work inside one;
    Dataset.scan's loop is tf.data's."""
    s = summary(name)
    assert not fired(s, "in_graph_loop")
    assert s.steps.in_graph_loop_s < 0.2 * s.steps.mean_s


def test_in_graph_loop_from_summary_needs_its_share_and_length() -> None:
    s = summary(MAP_FN)
    st = s.steps
    assert fired(s, "in_graph_loop")
    for change in ({"in_graph_loop_s": 0.19 * st.mean_s}, {"in_graph_loop_iterations": 7}):
        changed = dataclasses.replace(s, steps=dataclasses.replace(st, **change))
        assert not [a for a in advise(changed) if a.code == "in_graph_loop"], change


def test_pauses_every_n_steps_are_named_with_their_stride() -> None:
    """ModelCheckpoint(save_freq=4) in Keras 3 fit: a pause after every fourth batch, the
    .weights.h5 write from Python (no op covers it); the gap's advice says the stride and
    gives the checkpoint's fix first."""
    s = summary("generated__tf2.21cpu__checkpoint_every_4_fit")
    a = one(s, "step_gap")
    assert a.evidence["pause_every_steps"] == 4
    assert "fall every 4 steps" in a.message and "something runs every 4 batches" in a.message
    assert a.fix.startswith("what runs every 4 batches is the pause")
    assert "ModelCheckpoint(save_freq=4)" in a.fix


def test_pauses_of_backup_and_restore_are_named_in_the_stride_fix() -> None:
    """keras.callbacks.BackupAndRestore(save_freq=3) in Keras 3 fit: a pause after every
    third batch (up to 165 ms against 0.09 ms gaps), the model's and the optimizer's state
    written from Python; the stride's fix names that callback beside ModelCheckpoint."""
    s = summary("generated__tf2.21cpu__backup_restore_fit")
    a = one(s, "step_pause")
    assert a.evidence["pause_every_steps"] == 3
    assert "BackupAndRestore(save_freq=3)" in a.fix and "ModelCheckpoint(save_freq=3)" in a.fix


def test_pauses_where_the_step_numbers_skip_count_the_marked_steps_between() -> None:
    """Train steps numbered by a counter an unmarked evaluation also advances: every fourth
    number is an evaluation between the steps (steps 5-7, 9-11, 13-15, ...). The pauses fall
    every 4 step numbers but every 3 marked steps: the advice says the numbers skip there
    and gives the fix for what runs every 3 batches, not every 4."""
    s = summary("generated__jax0.10cpu__step_numbers_skip_eval_between")
    a = one(s, "step_pause")
    assert a.evidence["pause_every_steps"] == 3
    assert a.evidence["pause_every_step_numbers"] == 4
    assert "the step numbers skip 8, 12, 16 there" in a.message
    assert "something runs every 3 batches" in a.message
    assert a.fix.startswith("what runs every 3 batches is the pause")
    # Steps numbered by one, with no number missing at the pauses: the stride as before.
    from tfobs.analysis.advice.gaps import _periodic
    (words, evidence), _ = _periodic([3, 7, 11], 3, list(range(0, 14)))
    assert evidence == {"pause_every_steps": 4.0} and "skip" not in words
    # Step numbers ten apart (strided markers): no skip read.
    (words, evidence), _ = _periodic([30, 70, 110], 3, list(range(0, 140, 10)))
    assert "pause_every_step_numbers" not in evidence and "skip" not in words


def test_a_pool_thread_working_beside_a_waiting_host_step_is_named() -> None:
    """Two ThreadPoolExecutor workers augment batches in NumPy (18.5 ms a batch) on a 2-core
    host while the jitted step (7.6 ms alone) waits in block_until_ready: 15.7 ms a step, NOT
    input-bound (future.result() waits 0.03 ms). The busiest worker runs Python through 41 %
    of the steps' time, short of contention's 50 %. The step's Python advice names that
    thread's work on the step's cores and gives its fix first, not only the wait's."""
    from tfobs.analysis.advice.steps import BESIDE_FIX, WAIT_FIX
    s = summary("generated__jax0.10cpu__threadpool_augment_two_workers")
    assert s.input_bound.verdict == "not" and s.environment.device_count == 0
    a = one(s, "python_in_step")
    assert "another Python thread of the job ran Python through 41 %" in a.message
    assert "augment" in a.message
    assert a.evidence["beside_thread_pct"] == pytest.approx(41, abs=1)
    assert a.fix.startswith(BESIDE_FIX) and WAIT_FIX in a.fix
    assert not fired(s, "python_thread_contention")
    # An input-bound job's pool (grain's threads, 37 %) is its input: no such words.
    grain = one(summary("generated__jax0.10cpu__grain_threads_steps"), "input_bound")
    assert BESIDE_FIX not in grain.fix
    # A loader thread putting batches on the device (16 %): under the share.
    for a in fired(summary("generated__jax0.10cpu__device_prefetch_thread_steps"),
                   "python_in_step"):
        assert "beside_thread_pct" not in a.evidence


def test_a_stride_needs_three_pauses_without_a_miss() -> None:
    from tfobs.analysis.advice.gaps import _every

    assert _every([7, 10, 11, 15, 18, 19, 23]) == (4, [7, 11, 15, 19, 23])  # epoch ends
    assert _every([3, 7, 12]) is None  # 4, then 5: no stride
    assert _every([5, 9]) is None  # two are no pattern
    assert _every([2, 4, 6, 8]) == (2, [2, 4, 6, 8])


def test_an_io_callback_logger_gets_the_loggers_fix_not_a_loaders() -> None:
    """io_callback(log, ...) in the jitted step: the step's Python is JAX's slow dispatch
    path the callback sends each call down, named as such; the fix returns the value and
    logs it on the host, and says nothing of loading batches ahead (no loader here)."""
    from tfobs.analysis.advice.steps import CALLBACK_FIX, TRACED_FIX

    a = one(summary("generated__jax0.10cpu__io_callback_steps"), "python_in_step")
    assert a.evidence["callback_share"] >= 1 / 3
    assert "inside JAX host callbacks" in a.message
    assert "JAX's Python dispatch path" in a.message
    assert a.fix.startswith(CALLBACK_FIX) and TRACED_FIX not in a.fix
    assert "log them on the host every N steps" in a.fix


def test_a_pipeline_that_takes_a_host_only_steps_cores_is_named() -> None:
    """Augmentation in a parallel tf.data map on a CPU job: every batch ready (XProf: NOT
    input-bound), yet tf.data's threads work most of a step's time per step on the cores
    the step computes on. The same layers in the model (the control) leave the pool idle."""
    s = summary("generated__tf2.21cpu__augment_in_pipeline_fit")
    assert s.input_bound.verdict == "not" and s.environment.device_count == 0
    a = one(s, "tfdata_shares_cores")
    assert a.evidence["pool_share_of_step"] >= 0.5 and "NOT input-bound" in a.message
    assert "preprocessing layers in the model" in a.fix
    assert not fired(summary("generated__tf2.21cpu__augment_in_model_fit"),
                     "tfdata_shares_cores")
    # Input-bound jobs hear it in input_bound's fix instead; GPU jobs never.
    assert not fired(summary("generated__tf2.21cpu__interleave_records_loop"),
                     "tfdata_shares_cores")


def test_a_jax_window_whose_steps_wait_for_their_work_gets_long_steps() -> None:
    # An evaluation inside every fourth marked step of a waited-for JAX step: 9.8 and
    # 9.2 ms against 3 ms, a third of the steps' time, and no word of it before (the
    # rule left every JAX window alone). A window of dispatch-only steps still gets none:
    # its long steps are the host syncs that wait for the queued ones.
    s = summary("generated__jax0.10cpu__eval_every_4_steps")
    a = one(s, "long_steps")
    assert "steps 7, 11" in a.message
    assert not fired(summary("generated__jax0.10cpu__device_get_every_5"), "long_steps")
    assert not fired(summary("generated__jax0.10cpu__async_dispatch_steps"), "long_steps")


def test_long_steps_are_not_hidden_by_the_period_they_inflate() -> None:
    """Every fourth step of a waited-for JAX step runs under `jax.disable_jit()`: 156 ms
    against about 6 ms, so the mean step period (39 ms) is the long steps' own. The typical
    steps hold their compiled program's ops inside their markers (they waited for them),
    which tells them from dispatch-only steps: long_steps names steps 7 and 11, and the
    step's op-by-op Python names jit switched off among its causes."""
    s = summary("generated__jax0.10cpu__disable_jit_every_4th")
    typical = float(np.median([it.duration_s for it in s.steps.items]))
    assert typical < 0.25 * s.steps.interval_s  # the old guard's reading: dispatch only
    a = one(s, "long_steps")
    assert "steps 7, 11)" in a.message and a.evidence["long_steps"] == 2
    assert a.evidence["long_excess_share"] > 0.7
    assert "disable_jit" in one(s, "python_in_step").fix
    assert not fired(summary("generated__jax0.10cpu__device_get_every_5"), "long_steps")


LINALG = "generated__jax0.10cpu__linalg_eigh_svd_steps"  # svd and eigh in every step


def test_jax_cpu_steps_top_events_hold_the_xla_cpu_ops() -> None:
    """A host-only JAX step's compiled program runs as XLA's CPU ops (events with a
    `program_id`, on the runtime's threads), named as XProf's trace viewer names them
    (`svd.0`, `eigh.0`): the steps' top events hold them, each step's longest first (they
    held none, and no rule could name an op). TensorFlow's XLA CPU captures keep theirs."""
    s = summary(LINALG)
    for st in s.steps.items:
        tops = st.top_events
        assert 0 < len(tops) <= 5 and {e.kind for e in tops} == {"op"}, st.step_num
        assert {"svd.0", "eigh.0"} <= {e.name for e in tops}, st.step_num
        assert [e.duration_s for e in tops] == sorted((e.duration_s for e in tops),
                                                      reverse=True)
        assert all(st.start_ns <= e.start_ns <= st.start_ns + 1e9 * st.duration_s
                   for e in tops)
    step10 = next(st for st in s.steps.items if st.step_num == 10)
    assert step10.top_events[0].name == "svd.0"
    assert step10.top_events[0].duration_s == pytest.approx(2.468, abs=1e-3)
    assert s.steps.xla_cpu_program_sets == 1  # one jitted step, the same program each time
    assert summary("generated__jax0.10cpu__eval_every_4_steps").steps.xla_cpu_program_sets == 2
    for tf in ("generated__tf2.21cpu__xla_jit", "generated__tf2.21cpu__xla_fit"):
        t = summary(tf)
        assert t.steps.xla_cpu_program_sets == 0, tf
        assert all(":" in e.name for st in t.steps.items for e in st.top_events), tf
    long_window = summary("generated__jax0.10cpu__tiny_steps_long").steps
    assert sum(len(st.top_events) for st in long_window.items) == 512  # the window's bound
    assert long_window.top_events_left_out > 0


def test_long_steps_of_one_compiled_program_name_the_op_that_grew_or_the_host() -> None:
    """Every step ran the same jitted program; the long ones ran nothing the others did
    not, so "find what those steps run that the others do not (an evaluation...)" sends
    the reader after nothing. Where one op holds most of the excess (svd.0: 2.45 s in steps
    6 and 10 against 53 ms in the typical step) long_steps names it; where the excess is
    spread over the ops (optax_clip_adamw_if_finite: steps 8 and 12 on a shared host) it
    says the same program's ops took longer: the host, or data-dependent ops. A window
    whose long steps run a program of their own (an evaluation every fourth step) keeps the
    evaluation fix."""
    from tfobs.analysis.advice.gaps import SAME_PROGRAM_FIX

    s = summary(LINALG)
    a = one(s, "long_steps")
    assert "(steps 6, 10)" in a.message
    assert ("The same compiled program ran in every step; one of its ops holds most of the "
            "excess: svd.0 took 2.45 s on average in these steps against 53.33 ms in the "
            "typical step (16.83 ms to 2.47 s over the steps).") in a.message
    assert a.fix.startswith("svd.0 holds most of the long steps' excess")
    assert "OPENBLAS_NUM_THREADS" in a.fix and "evaluation" not in a.fix
    assert a.evidence["same_programs"] == 1.0
    assert a.evidence["grown_op_long_s"] == pytest.approx(2.452, abs=1e-3)
    o = one(summary("generated__jax0.10cpu__optax_clip_adamw_if_finite_steps"), "long_steps")
    assert "(steps 8, 12)" in o.message
    assert ("its ops took longer in these steps, no one op holding most of the excess: host "
            "contention (other processes or threads on the cores) or data-dependent ops"
            ) in o.message
    assert o.fix == SAME_PROGRAM_FIX and "--xla_cpu_multi_thread_eigen=false" in o.fix
    e = one(summary("generated__jax0.10cpu__eval_every_4_steps"), "long_steps")
    assert "compiled program" not in e.message and "evaluation" in e.fix
    # the typical steps' top events not kept (a long window keeps its longest): no op is
    # named and no spread claimed, the same program still said
    bare = tuple(st if st.step_num in (6, 10) else dataclasses.replace(st, top_events=())
                 for st in s.steps.items)
    cut = dataclasses.replace(s, steps=dataclasses.replace(s.steps, items=bare))
    again = [x for x in advise(cut) if x.code == "long_steps"]
    assert len(again) == 1 and again[0].fix == SAME_PROGRAM_FIX
    assert "its ops took longer in these steps: host contention" in again[0].message


def test_long_steps_whose_ops_took_no_longer_lie_outside_the_program() -> None:
    """gc.collect() every fifth step of a job holding 200,000 small Python dicts: steps 5
    and 10 take about 110 ms against 2.3 ms (the job's own timer: 107-111 ms a collect).
    The same compiled program ran in every step and its ops took no longer in those steps,
    so "its ops took longer ... host contention" is not what happened: long_steps says the
    excess lies outside the program, names the steps' Python, and its fix looks there."""
    import json

    from tfobs.analysis.advice.gaps import OUTSIDE_PROGRAM_FIX

    name = "generated__jax0.10cpu__gc_collect_every_5_steps"
    s = summary(name)
    a = one(s, "long_steps")
    assert "(steps 5, 10)" in a.message and a.evidence["same_programs"] == 1.0
    assert "its ops took no longer in these steps" in a.message
    assert "took longer" not in a.message and "host contention" not in a.message
    assert "most in gc collect" in a.message
    assert a.fix == OUTSIDE_PROGRAM_FIX and "gc.collect()" in a.fix
    assert a.evidence["long_ops_s"] < 2 * a.evidence["typical_ops_s"]
    prov = json.loads((CAPTURES.parent / "provenance" / f"{name}.json").read_text())
    collect_s = 1e-3 * min(prov["parameters"]["gc_collect_ms"])
    assert a.evidence["long_excess_s"] / a.evidence["long_steps"] > 0.9 * collect_s


def test_keras_on_jax_run_op_by_op_is_told_to_let_keras_compile() -> None:
    # Model.compile(jit_compile=False) on the JAX backend: every layer's jax.numpy op is
    # its own dispatch (31 ms a step against 2 ms compiled). The fix is Keras's own switch,
    # not "write one jax.jit around the update", which a Keras user has no place for.
    from tfobs.analysis.advice.steps import KERAS_OP_BY_OP_FIX, OP_BY_OP

    s = summary("generated__jax0.10cpu__keras_jax_nojit_fit")
    assert s.environment.keras and s.environment.framework == "jax"
    a = one(s, "jax_op_by_op")
    assert a.fix == KERAS_OP_BY_OP_FIX and "jit_compile=True" in a.fix
    assert one(s, "python_in_step").fix.startswith(KERAS_OP_BY_OP_FIX)
    # a JAX loop of the user's own keeps the jax.jit fix, and no Keras
    plain = summary("generated__jax0.10cpu__op_by_op_steps")
    assert not plain.environment.keras and one(plain, "jax_op_by_op").fix == OP_BY_OP.fix
    # the 'All Others' fix claims only its own share is computation, beside the Python
    others = one(s, "all_others_bound").fix
    assert "not by Python" not in others and "python_in_step" in others


def test_eager_work_in_a_few_epoch_end_pauses_is_said_to_be_paid_per_pause() -> None:
    # EarlyStopping, ReduceLROnPlateau and ModelCheckpoint(save_best_only) run at the
    # epochs' ends: two pauses (93 and 56 ms) hold the eager time between the steps. Not
    # "move per-batch callback work to on_epoch_end": it is there already.
    from tfobs.analysis.advice.launch import EAGER_BETWEEN_FIX, EAGER_PAUSE_FIX

    s = summary("generated__tf2.21cpu__callbacks_combo_fit")
    a = one(s, "eager_ops")
    assert a.fix == EAGER_PAUSE_FIX and "pause(s) hold" in a.message
    # eager work at every batch keeps the per-batch fix
    assert one(summary("advice__eager_ops"), "eager_ops").fix != EAGER_PAUSE_FIX
    assert EAGER_BETWEEN_FIX != EAGER_PAUSE_FIX


def test_an_eager_strategy_gather_is_named_as_the_retracing_cause() -> None:
    # MirroredStrategy, strategy.gather outside the step's tf.function every step: tf.distribute
    # wraps each gather in a new tf.function (compute_gathered_values), traced at every call
    # (about 100 ms of each 104 ms step). The user's own function traced once: the usual
    # fix (input_signature, reduce_retracing) does nothing here.
    from tfobs.analysis.advice.launch import DISTRIBUTE_GATHER_FIX

    s = summary("generated__tf2.21cpu__mirrored_gather_metrics_loop")
    assert any(c.name == "compute_gathered_values" for c in s.steps.calls)
    a = one(s, "tf_function_retracing")
    assert a.fix == DISTRIBUTE_GATHER_FIX and "compute_gathered_values runs" in a.message
    # a function of the user's own traced again and again keeps the usual fix
    assert one(summary("generated__tf2.21cpu__retrace_loop"), "tf_function_retracing"
               ).fix == RETRACING.fix


def test_a_step_of_several_batches_in_a_graph_loop_is_not_told_to_run_several() -> None:
    # tf_keras fit with steps_per_execution=8: each marked step runs 8 batches in one call.
    # The hand-over fix said "run several steps per call" (it does) and "fetch one larger
    # batch and split it" (8 optimizer updates are no micro-batches).
    s = summary("generated__tf2.21cpu__tfkeras_spe8_tfdata_fit")
    assert s.steps.method == "markers_tf_loop"
    fix = one(s, "input_bound").fix
    assert "already runs 8 batches in one call" in fix
    assert "split it inside the step" not in fix and "run several steps per call" not in fix
    # micro-batches a function takes from the iterator itself keep the split advice
    micro = one(summary("generated__tf2.21cpu__micro_batches_in_function"), "input_bound").fix
    assert "split it inside the step" in micro


def test_a_shuffle_slowest_by_self_time_is_its_buffer_filling() -> None:
    # The dataset and its shuffle(10000) made again every epoch: the Shuffle stage's self
    # time is the buffer filling at each new iterator (each epoch's first step 17-19 ms
    # against 1.3 ms). Not "batch before map, cache()": there is no map; the input_bound
    # advice beside it reads the same few fills.
    from tfobs.analysis.advice.input_pipeline import SHUFFLE_FIX

    s = summary("generated__tf2.21cpu__reshuffle_each_epoch_loop")
    a = one(s, "tfdata_slowest_stage")
    assert a.message.split(" (")[0].endswith("::Shuffle") and a.fix == SHUFFLE_FIX
    assert "batch before map" not in a.fix
    assert "keep one iterator across epochs" in one(s, "input_bound").fix


def test_a_plain_generator_passed_to_fit_gets_a_fix_it_can_take() -> None:
    # fit(x=gen()): Keras wraps the generator in from_generator; a plain generator has no
    # workers= to raise, so the fix names making it a PyDataset.
    a = one(summary("generated__tf2.21cpu__keras3_python_generator_fit"),
            "tfdata_from_generator")
    assert "plain Python generator passed to fit" in a.fix
    assert "make a generator a PyDataset" in a.fix


def test_jax_clear_caches_in_the_loop_is_named_as_the_recompile_cause() -> None:
    # jax.clear_caches() at each epoch's start: each epoch's first step compiles again. Not
    # "static arguments, shapes, a jax.jit made inside the loop" (none of those here).
    from tfobs.analysis.advice.launch import JAX_CLEAR_CACHES_FIX

    s = summary("generated__jax0.10cpu__clear_caches_each_epoch")
    a = one(s, "tf_function_retracing")
    assert a.fix == JAX_CLEAR_CACHES_FIX and "jax.clear_caches() runs between" in a.message
    # a static argument new every call keeps its own fix
    other = one(summary("generated__jax0.10cpu__recompile_each_step"), "tf_function_retracing")
    assert other.fix != JAX_CLEAR_CACHES_FIX


def test_a_callback_behind_lax_cond_is_told_it_still_costs_every_step() -> None:
    # jax.debug.callback under lax.cond every 10th step: the callback runs in 2 of 18 steps,
    # but the program holding it takes JAX's slower dispatch at every call.
    s = summary("generated__jax0.10cpu__debug_callback_cond_every_10")
    fix = one(s, "python_in_step").fix
    assert "behind lax.cond" in fix and "whether the callback runs or not" in fix


def test_a_map_after_batch_is_not_told_to_batch_first_and_a_drained_buffer_is_named() -> None:
    # batch(64, num_parallel_calls=AUTOTUNE) then a slow vectorized map: the map already
    # runs on whole batches, so "batch before map" is done; its cost is its ops on
    # tf.data's threads (4.2 ms a step). The buffer filled while fit started runs dry at
    # step 11 of one epoch (no new iterator), and the steps after it run slower.
    from tfobs.analysis.advice.input_pipeline import SLOWEST_STAGE

    s = summary("generated__tf2.21cpu__batch_nondet_map_after_fit")
    a = one(s, "tfdata_slowest_stage")
    assert a.fix.startswith("the map already runs on whole batches")
    assert "ms per step of TensorFlow ops on tf.data's threads" in a.fix
    assert "batch before map" not in a.fix
    ib = one(s, "input_bound").fix
    assert "from step 11 on, the steps after it slower" in ib and "running dry" in ib
    assert "filling after a start" not in ib
    # a map over single elements (map_and_batch) keeps the generic fix
    single = one(summary("generated__tf2.21cpu__ragged_text_fit"), "tfdata_slowest_stage")
    assert single.fix == SLOWEST_STAGE.fix


def test_long_steps_count_work_run_every_fourth_step_in_a_ten_step_window() -> None:
    """model.predict inside every fourth marked step of a custom loop: XProf's 10 kept steps
    hold 3 of them (steps 4, 8, 12), 190-300 ms against 2.5-5 ms for the others (the job's
    own timing), 95 % of the steps' time. Three in ten is still a few: long_steps names
    them, as it names every fifth step's evaluation. Long steps past a quarter that come
    unevenly (the host's jitter: 4 of 14 steps 3-4 ms against 0.9 ms, the first 3 steps of a
    JAX window, a loader thread's queue waits) are no few."""
    s = summary("generated__tf2.21cpu__predict_every_4_loop")
    durations = {st.step_num: st.duration_s for st in s.steps.items}
    assert len(durations) == 10
    typical = float(np.median(list(durations.values())))
    long = sorted(n for n, d in durations.items() if d >= 3 * typical)
    assert long == [4, 8, 12]
    a = one(s, "long_steps")
    assert a.evidence["long_steps"] == 3 and a.evidence["long_excess_share"] > 0.9
    assert "(steps 4, 8, 12)" in a.message
    for other in ("generated__tf2.21cpu__root_without_step_num",
                  "generated__jax0.10cpu__np_stack_list_batches_steps",
                  "generated__jax0.10cpu__tfdata_wait_loader_thread"):
        assert not fired(summary(other), "long_steps"), other


def test_predict_in_the_loop_is_named_in_long_steps_and_retracing() -> None:
    """model.predict on NumPy rows inside every fourth step: its 3 calls ran Keras's predict
    function 48 times (16 batches each) and traced 9 functions (the tf.data pipeline each
    call builds), 190-300 ms per step against 2.5-5 ms. long_steps names predict and its
    fix (the model in a tf.function on a tensor: 4.4 ms for the same rows against
    predict's 102 ms, timed beside the job); the retracing rule says the traces are
    predict's pipelines, not the step's function, before input_signature. A loop that
    calls predict_on_batch in every step (gan_train_on_batch) has no long steps."""
    s = summary("generated__tf2.21cpu__predict_every_4_loop")
    a = one(s, "long_steps")
    assert "Keras's predict function (one_step_on_data_distributed) ran 48 times" in a.message
    assert a.evidence["predict_calls"] == 48
    assert a.fix.startswith("score data inside the training loop without model.predict")
    r = one(s, "tf_function_retracing")
    assert s.ops.graph_builds == 9 and "model.predict call on NumPy arrays" in r.message
    assert r.fix.startswith("where the window runs model.predict in the loop")
    assert "input_signature" in r.fix  # the general fix stays, after predict's
    e = one(summary("generated__tf2.21cpu__evaluate_inside_steps"), "long_steps")
    assert "predict" not in e.message and "evaluation" in e.fix
    assert not fired(summary("generated__tf2.21cpu__gan_train_on_batch"), "long_steps")


def test_an_input_wait_in_the_predicting_steps_is_predicts_pipeline() -> None:
    """71 % of predict_every_4_loop's input wait lies in steps 4 and 8, two of the steps
    that call model.predict: the trace shows the wait there is predict's own pipeline
    (Iterator::Root::Prefetch::ParallelMapV2::Zip[0]::FlatMap, after a 47 ms
    MakeIterator), not the training input's. input_bound says so instead of "a new epoch's
    iterator: keep one iterator across epochs"; a window whose few waiting steps are an
    epoch's start keeps those words."""
    a = one(summary("generated__tf2.21cpu__predict_every_4_loop"), "input_bound")
    assert "in 2 of 10 steps (4, 8)" in a.fix
    assert "model.predict called in them reads its arrays through a new tf.data" in a.fix
    assert "keep one iterator across epochs" not in a.fix
    e = one(summary("generated__tf2.21cpu__reshuffle_each_epoch_loop"), "input_bound")
    assert "model.predict" not in e.fix


def test_potentially_input_bound_without_any_input_sends_no_one_to_check_the_input() -> None:
    # Greedy decoding, one tf.function call per token fed by the last token: no tf.data, no
    # input op in the window. XProf calls it POTENTIALLY input-bound on 'All Others' alone;
    # the fix must not ask to check the input on `dataset.take(1).cache().repeat()` (there is
    # no dataset): it sends the user to all_others_bound, and checks the feeding by one batch
    # converted once.
    s = summary("generated__tf2.21cpu__greedy_decode_token_loop")
    assert s.input_bound.verdict == "potentially" and not s.input_pipeline.stages
    inp = one(s, "input_bound")
    assert "take(1)" not in inp.fix and "tf.convert_to_tensor" in inp.fix
    assert "no tf.data pipeline and no input op ran" in inp.fix and "all_others_bound" in inp.fix
    # A job with an input pipeline keeps the synthetic-data check.
    with_input = one(summary("generated__tf2.21cpu__contrastive_two_views_loop"), "input_bound")
    assert "dataset.take(1).cache().repeat()" in with_input.fix
