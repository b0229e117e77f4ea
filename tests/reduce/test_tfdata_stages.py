"""The slowest tf.data stage's rules on stage tables written out by hand (the names as
TensorFlow writes them): the edges the test captures do not reach. The captures' own cases
are in tests/reduce/test_advice_rules.py."""

from __future__ import annotations

from tfobs.analysis.tfdata import slowest_stage
from tfobs.summary import TfDataStage

ROOT = "Iterator::Root::Prefetch"


def test_a_repeat_under_an_indexed_stage_still_only_waits() -> None:
    # zip(a, b.prefetch().repeat()): the repeat's name ends in an index after an earlier one
    stages = (TfDataStage(f"{ROOT}::Zip[1]::Prefetch::ForeverRepeat[0]", 0.9, 10),
              TfDataStage(f"{ROOT}::Zip[1]::Prefetch::ForeverRepeat[0]::TensorSlice", 0.2, 10),
              TfDataStage(f"{ROOT}::Zip[0]::Map", 0.3, 10))
    assert slowest_stage(stages).name == f"{ROOT}::Zip[0]::Map"


def test_a_zips_inputs_stay_apart_and_an_interleaves_cycle_elements_add_up() -> None:
    zip_inputs = (TfDataStage(f"{ROOT}::Zip[0]::Map", 0.3, 10),
                  TfDataStage(f"{ROOT}::Zip[1]::Map", 0.4, 10))
    assert slowest_stage(zip_inputs) == zip_inputs[1]
    cycle = tuple(TfDataStage(f"{ROOT}::ParallelInterleaveV4[{k}]::FlatMap[0]::TFRecord",
                              0.1 * (k + 1), 5) for k in range(3))
    wait = TfDataStage(f"{ROOT}::ParallelInterleaveV4", 0.5, 15)
    got = slowest_stage((wait, *cycle))
    # the interleave's wait is theirs (0.6 s of work below its 0.5 s): their sum is named
    assert got == TfDataStage(f"{ROOT}::ParallelInterleaveV4[*]::FlatMap[0]::TFRecord",
                              0.1 + 0.2 + 0.3, 15)


def test_a_parallel_map_whose_input_is_cheap_is_the_work() -> None:
    stages = (TfDataStage(f"{ROOT}::ParallelMapV2", 2.0, 10),
              TfDataStage(f"{ROOT}::ParallelMapV2::TensorSlice", 0.1, 10),
              TfDataStage(f"{ROOT}::ParallelMapV2::TensorSlice::Other", 0.1, 10))
    assert slowest_stage(stages) == stages[0]
    # ...and where the stages below hold 3/4 of its wait, the largest of them
    heavy_input = (stages[0], TfDataStage(f"{ROOT}::ParallelMapV2::Map", 1.6, 10))
    assert slowest_stage(heavy_input) == heavy_input[1]


def test_only_waiting_stages_name_the_largest_wait_and_none_names_nothing() -> None:
    waits = (TfDataStage(ROOT, 0.2, 3), TfDataStage("Iterator::Root", 0.1, 3))
    assert slowest_stage(waits) == waits[0]
    assert slowest_stage(()) is None


def test_a_stage_below_only_one_cycle_element_still_explains_the_merged_wait() -> None:
    # both cycle elements' parallel maps wait (1.0 s each); only element [1] shows the map
    # below it. The merged wait (2.0 s) is explained by that 1.8 s: the map is named.
    pi = f"{ROOT}::ParallelInterleaveV4"
    stages = (TfDataStage(f"{pi}[0]::ParallelMapV2", 1.0, 5),
              TfDataStage(f"{pi}[1]::ParallelMapV2", 1.0, 5),
              TfDataStage(f"{pi}[1]::ParallelMapV2::Map", 1.8, 5))
    assert slowest_stage(stages) == stages[2]


def test_a_repeat_with_a_count_only_waits_like_a_forever_repeat() -> None:
    # ds.repeat(3): TensorFlow names it FiniteRepeat; its epochs' stages add up below it
    stages = (TfDataStage(f"{ROOT}::FiniteRepeat", 0.5, 10),
              TfDataStage(f"{ROOT}::FiniteRepeat[0]::BatchV2", 0.2, 5),
              TfDataStage(f"{ROOT}::FiniteRepeat[1]::BatchV2", 0.2, 5))
    assert slowest_stage(stages) == TfDataStage(f"{ROOT}::FiniteRepeat[*]::BatchV2", 0.4, 10)
