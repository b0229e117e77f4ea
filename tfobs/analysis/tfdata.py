"""tf.data stages (`Iterator::...` events) and the slowest one on the critical path.

Each stage's self time is its time minus the stages nested inside it on the same thread.
The bottleneck is the stage with the largest self time among those that do work rather than
wait for it:
- a `Prefetch`, a repeat or the root only waits (for its producer thread);
- a parallel stage (`ParallelBatch`, `ParallelMap`, `MapAndBatch`, `ParallelInterleave`,
  `ParseExample`, ...) waits on the consumer's thread for its workers, which call its
  input's `GetNext` (the stages below it) and run the stage's own function (which no stage
  shows). Where the working stages below it hold three quarters of its self time or more,
  its wait is theirs and it counts as waiting (a batch of a slow map, a map after a slow
  filter); else its own function is the work (a heavy map over a cheap source, an
  interleave whose per-file readers are quick, Keras's batch gather from arrays).
TensorBoard's retired tf.data bottleneck analysis (`xplane_to_tf_data_stats.cc`, gone from
XProf 2.24) walked the slowest `GetNext` call's tree instead, linking each waiting stage to
the one element it waited for; it named the waiting `Prefetch` itself on most captures,
which tells a user nothing to change (docs/analyze.md).

The same stage run for several inputs is one stage here: an interleave's cycle elements
(`ParallelInterleaveV4[0]::Map`, `[1]::Map`, ...: the same per-file pipeline on other files),
a repeat's epochs and a flat_map's elements. Their self times add up under one name with
`[*]` where the indices differ; a zip's or a concatenation's inputs (`Zip[0]`, `Zip[1]`) are
different pipelines and stay apart. `stages` keeps XProf's rows, one per name.
"""

from __future__ import annotations

import re

from tfobs.analysis.eventtypes import DATASET
from tfobs.analysis.ops import OpAgg
from tfobs.summary import TfDataStage

_WAITING_SUFFIXES = ("::Prefetch", "::Root", "::ForeverRepeat", "::Repeat")
# XProf's asynchronous iterators (`IsAsyncIterator`), by the start of the kind's name
# (`ParallelMapV2`, `ParallelInterleaveV4`, `LegacyParallelInterleaveV2`, ...); `Prefetch`
# is above, `DataService` waits for another host, so nothing below it here explains it.
_PARALLEL_KINDS = ("ParallelBatch", "ParallelMap", "MapAndBatch", "ParallelInterleave",
                   "LegacyParallelInterleave", "ParseExample")
# The share of a parallel stage's self time that the working stages below it must hold for
# its wait to count as theirs. On the test captures the stages below hold 0.84-1.9 of the
# wait where they are the work, 0.56-0.60 where the stage's own function is
# (tests/reduce/test_advice_rules.py).
_EXPLAINED_SHARE = 0.75
# Kinds whose numbered children are one pipeline run for several inputs (see above).
_SAME_STAGE = re.compile(r"(::(?:ForeverRepeat|FiniteRepeat|Repeat|FlatMap|Interleave|"
                         r"ParallelInterleave(?:V\d+)?|LegacyParallelInterleave(?:V\d+)?))"
                         r"\[\d+\]")
_INDEX = re.compile(r"(\[\d+\])")
_LAST_INDEX = re.compile(r"\[(?:\d+|\*)\]$")


def stages(host_ops: dict[str, OpAgg]) -> tuple[TfDataStage, ...]:
    rows = [a for a in host_ops.values() if a.op_type == DATASET]
    rows.sort(key=lambda a: (-a.self_ps, a.name))
    return tuple(TfDataStage(a.name, a.self_ps / 1e12, a.count) for a in rows)


def slowest_stage(all_stages: tuple[TfDataStage, ...]) -> TfDataStage | None:
    merged = _merge_same_stages(all_stages)
    working = [s for s in merged if not _waits(s, merged)]
    pool = working or merged
    return max(pool, key=lambda s: s.self_s) if pool else None


def _merge_same_stages(all_stages: tuple[TfDataStage, ...]) -> list[TfDataStage]:
    groups: dict[str, list[TfDataStage]] = {}
    for stage in all_stages:
        groups.setdefault(_SAME_STAGE.sub(r"\1[*]", stage.name), []).append(stage)
    merged = []
    for members in groups.values():
        if len(members) == 1:
            merged.append(members[0])
            continue
        # Same text between the indices; keep an index all members share, else "[*]".
        columns = zip(*(_INDEX.split(m.name) for m in members), strict=True)
        name = "".join(parts[0] if len(set(parts)) == 1 else "[*]" for parts in columns)
        merged.append(TfDataStage(name, sum(m.self_s for m in members),
                                  sum(m.count for m in members)))
    return merged


def _waits(stage: TfDataStage, all_stages: list[TfDataStage]) -> bool:
    stem = _stem(stage.name)
    if stem.endswith(_WAITING_SUFFIXES):
        return True
    if not stem.rsplit("::", 1)[-1].startswith(_PARALLEL_KINDS) or stage.self_s <= 0:
        return False
    # "A::Map" and "A[0]::FlatMap" are below A; "A::MapAndBatch" is not below "A::Map".
    below = sum(s.self_s for s in all_stages
                if s.name.startswith((stage.name + "::", stage.name + "["))
                and not _stem(s.name).endswith(_WAITING_SUFFIXES))
    return below >= _EXPLAINED_SHARE * stage.self_s


def _stem(name: str) -> str:
    # "...::Zip[1]::Prefetch::ForeverRepeat[0]" -> drop the last index only ("[*]" too).
    return _LAST_INDEX.sub("", name)
