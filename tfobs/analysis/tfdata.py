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

import bisect
import functools
import re

from tfobs.analysis.eventtypes import DATASET
from tfobs.analysis.ops import OpAgg
from tfobs.summary import TfDataStage

_WAITING_SUFFIXES = ("::Prefetch", "::Root", "::ForeverRepeat", "::FiniteRepeat", "::Repeat")
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
_INTERLEAVE_ELEMENT = re.compile(r"::(?:Interleave|ParallelInterleave(?:V\d+)?|"
                                 r"LegacyParallelInterleave(?:V\d+)?)\[(?:\d+|\*)\]::[^:]+$")
# Dataset.rejection_resample's own sequential map: its per-element acceptance check, a map
# over zip(acceptance, initial distribution) that may print (a stateful op, so tf.data keeps
# it sequential), zipped with the data, mapped through class_func and filtered.
_REJECTION_CHECK = re.compile(r"::Filter::(?:ParallelMapV2|Map)::Zip\[0\]::Map$")
_INDEX = re.compile(r"(\[\d+\])")
_LAST_INDEX = re.compile(r"\[(?:\d+|\*)\]$")


def stages(host_ops: dict[str, OpAgg]) -> tuple[TfDataStage, ...]:
    rows = [a for a in host_ops.values() if a.op_type == DATASET]
    rows.sort(key=lambda a: (-a.self_ps, a.name))
    return tuple(TfDataStage(a.name, a.self_ps / 1e12, a.count) for a in rows)


def slowest_stage(all_stages: tuple[TfDataStage, ...]) -> TfDataStage | None:
    by_key = _merge_same_stages(all_stages)
    below = _working_below(by_key)
    working = [st for key, st in by_key.items() if not _waits(key, st, below[key])]
    pool = working or list(by_key.values())
    return max(pool, key=lambda st: st.self_s) if pool else None


@functools.lru_cache(maxsize=8192)  # bounded: the names of a few windows' stages
def same_stage_key(name: str) -> str:
    """The name with the indices of one stage run for several inputs made `[*]` (above):
    stages with one key are one stage; a name below another has its key below the other's."""
    return _SAME_STAGE.sub(r"\1[*]", name)


def ignore_errors_drops(all_stages: tuple[TfDataStage, ...]) -> tuple[str, int, int, str]:
    """(the ignore_errors() stage, its elements, its input's, the input's kind) for the one
    whose input made the most elements it did not pass on (`Dataset.ignore_errors` drops
    each element its input raised an error for); ("", 0, 0, "") where none dropped any.
    Stages of one key (an interleave's elements, a repeat's epochs) are one stage, their
    counts summed."""
    counts: dict[str, int] = {}
    names: dict[str, str] = {}  # the stage's own name where one stage has the key
    for stage in all_stages:
        key = same_stage_key(stage.name)
        counts[key] = counts.get(key, 0) + stage.count
        names[key] = key if key in names else stage.name
    # Each key's input: the busiest stage one `::` below it, found in one pass (a scan of
    # every key per ignore_errors() stage took 42 s on a 2 MB capture of 16,000 of them).
    inputs: dict[str, tuple[int, str]] = {}
    for k, n in counts.items():
        parent, sep, kind = k.rpartition("::")
        if sep and parent.rsplit("::", 1)[-1] == "IgnoreErrors":
            inputs[parent] = max(inputs.get(parent, (0, "")), (n, kind))
    best = ("", 0, 0, "")
    for key, passed in counts.items():
        if key.rsplit("::", 1)[-1] != "IgnoreErrors":
            continue
        made, kind = inputs.get(key, (0, ""))
        if made - passed > best[2] - best[1]:
            best = (names[key], passed, made, _LAST_INDEX.sub("", kind))
    return best


# Work whose output a Dataset.shard() above it mostly drops: source datasets that read
# records from files, and the per-element functions (maps), by their iterators' kind.
RECORD_READERS = frozenset(("TFRecord", "TextLine", "FixedLengthRecord", "CSV", "SSTable",
                            "LMDB", "Sql"))
ELEMENT_WORK = RECORD_READERS | {"Map", "ParallelMap", "ParallelMapV2", "MapAndBatch"}


def shard_after_read(all_stages: tuple[TfDataStage, ...]
                     ) -> tuple[str, tuple[str, ...], float]:
    """(a `Dataset.shard()` stage with a record reader or a map below it, their kinds, the
    window seconds of every stage below it) for the one whose stages below took longest:
    records read and mapped, then most dropped (`Shard` keeps one element in num_shards, so
    each worker does that work for all of them); ("", (), 0.0) where none. Sharding the
    file list puts the readers in the interleave's function above the `Shard`, not below
    it. One pass over the names (a scan per Shard stage is quadratic in crafted captures);
    each `Shard` above a stage is a node of a tree of the names' parts, not its prefix (a name
    16,000 `::Shard` deep made 16,000 copies of it: 1 GB from a 200 KB capture)."""
    nodes: dict[tuple[int, str], int] = {}  # (parent node, part) -> node; the root is -1
    made: list[tuple[int, int]] = []  # per node: (the key that first reached it, its length)
    keys: list[str] = []
    below: dict[int, list[float]] = {}
    readers: dict[int, set[str]] = {}
    for stage in all_stages:
        key = same_stage_key(stage.name)
        parts = key.split("::")
        kind = _LAST_INDEX.sub("", parts[-1])
        node, at = -1, -2
        for part in parts[:-1]:
            at += len(part) + 2
            child = nodes.get((node, part))
            if child is None:
                child = nodes[(node, part)] = len(made)
                if not keys or keys[-1] is not key:
                    keys.append(key)
                made.append((len(keys) - 1, at))
            node = child
            if _LAST_INDEX.sub("", part) == "Shard":
                below.setdefault(node, []).append(stage.self_s)
                if kind in ELEMENT_WORK:
                    readers.setdefault(node, set()).add(kind)
    if not readers:
        return "", (), 0.0
    found = {node: sum(below[node]) for node in readers}
    seconds = max(found.values())
    # Of the nodes tied at the most seconds, the greatest name: of those one key reached
    # first, its longest prefix (a prefix sorts before the longer name).
    longest: dict[int, tuple[int, int]] = {}
    for node, s in found.items():
        if s == seconds:
            k, at = made[node]
            longest[k] = max(longest.get(k, (0, -1)), (at, node))
    key, node = max((keys[k][:at], node) for k, (at, node) in longest.items())
    return key, tuple(sorted(readers[node])), seconds


def in_interleave_element(name: str) -> bool:
    """The stage runs inside an interleave's function, once per cycle element:
    `...::ParallelInterleaveV4[2]::Map` (or `[*]`, its elements together)."""
    return _INTERLEAVE_ELEMENT.search(name) is not None


def in_rejection_resample(name: str, all_stages: tuple[TfDataStage, ...]) -> bool:
    """The stage is the acceptance check `Dataset.rejection_resample` builds (above): a
    `::Map` under a filter's zip, reading a zip of its own."""
    inner = name + "::Zip["
    return (_REJECTION_CHECK.search(name) is not None
            and any(st.name.startswith(inner) for st in all_stages))


def _merge_same_stages(all_stages: tuple[TfDataStage, ...]) -> dict[str, TfDataStage]:
    """Each stage under its key (`same_stage_key`)."""
    groups: dict[str, list[TfDataStage]] = {}
    for stage in all_stages:
        groups.setdefault(same_stage_key(stage.name), []).append(stage)
    merged = {}
    for key, members in groups.items():
        if len(members) == 1:
            merged[key] = members[0]
            continue
        # Same text between the indices; keep an index all members share, else "[*]".
        columns = zip(*(_INDEX.split(m.name) for m in members), strict=True)
        name = "".join(parts[0] if len(set(parts)) == 1 else "[*]" for parts in columns)
        merged[key] = TfDataStage(name, sum(m.self_s for m in members),
                                  sum(m.count for m in members))
    return merged


def _working_below(by_key: dict[str, TfDataStage]) -> dict[str, float]:
    """Per key, the self time of the working stages below it ("A::Map", "A[*]::FlatMap";
    "A::MapAndBatch" is not below "A::Map"): prefix ranges of the sorted keys, so a window
    of thousands of stages costs a sort, not a scan per stage."""
    keys = sorted(by_key)
    sums = [0.0]
    for key in keys:
        sums.append(sums[-1] + (0.0 if _only_waits(key) else by_key[key].self_s))

    def under(prefix: str) -> float:  # keys starting with prefix: [prefix, prefix + 1)
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        return sums[bisect.bisect_left(keys, end)] - sums[bisect.bisect_left(keys, prefix)]

    return {key: under(key + "::") + under(key + "[") for key in keys}


def _only_waits(key: str) -> bool:
    return _stem(key).endswith(_WAITING_SUFFIXES)


def _waits(key: str, stage: TfDataStage, below_s: float) -> bool:
    if _only_waits(key):
        return True
    kind = _stem(key).rsplit("::", 1)[-1]
    return (kind.startswith(_PARALLEL_KINDS) and stage.self_s > 0
            and below_s >= _EXPLAINED_SHARE * stage.self_s)


def _stem(name: str) -> str:
    # "...::Zip[1]::Prefetch::ForeverRepeat[0]" -> drop the last index only ("[*]" too).
    return _LAST_INDEX.sub("", name)
