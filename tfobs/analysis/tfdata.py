"""tf.data stages (`Iterator::...` events) and the slowest one on the critical path.

Each stage's self time is its time minus the stages nested inside it on the same thread.
A stage that ends in `Prefetch` or `ParallelBatch` (or the root) mostly waits for its worker
threads, whose work shows as the stages below it (a `ParallelBatch` worker calls its input's
`GetNext` and copies the result; the copy is all the batch itself does), so the bottleneck is
the non-waiting stage with the largest self time: the stage the consumer ultimately waited on.
The parallel `map` and `interleave` stages are not counted as waiting: their workers also run
the stage's own function (the map function, the interleave's dataset per file), which no
stage below them shows. TensorBoard's retired tf.data bottleneck analysis
(`xplane_to_tf_data_stats.cc`, gone from XProf 2.24) walked the slowest `GetNext` call's tree
instead, linking each waiting stage to the one element it waited for; it named the waiting
`Prefetch` itself on most captures, which tells a user nothing to change.
"""

from __future__ import annotations

from tfobs.analysis.eventtypes import DATASET
from tfobs.analysis.ops import OpAgg
from tfobs.summary import TfDataStage

_WAITING_SUFFIXES = ("::Prefetch", "::ParallelBatch", "::Root", "::ForeverRepeat", "::Repeat")


def stages(host_ops: dict[str, OpAgg]) -> tuple[TfDataStage, ...]:
    rows = [a for a in host_ops.values() if a.op_type == DATASET]
    rows.sort(key=lambda a: (-a.self_ps, a.name))
    return tuple(TfDataStage(a.name, a.self_ps / 1e12, a.count) for a in rows)


def slowest_stage(all_stages: tuple[TfDataStage, ...]) -> TfDataStage | None:
    working = [s for s in all_stages if not _stem(s.name).endswith(_WAITING_SUFFIXES)]
    pool = working or list(all_stages)
    return max(pool, key=lambda s: s.self_s) if pool else None


def _stem(name: str) -> str:
    # "Iterator::Root::Prefetch::ForeverRepeat[0]" -> drop the index suffix.
    return name.split("[", 1)[0] if name.endswith("]") else name
