"""tf.data stages (`Iterator::...` events) and the slowest one on the critical path.

Each stage's self time is its time minus the stages nested inside it on the same thread.
A stage that ends in `Prefetch` (or the root) mostly waits for a producer thread, so the
bottleneck is the non-waiting stage with the largest self time: the stage the consumer
ultimately waited on (a simplification of XProf's `xplane_to_tf_data_stats.cc`, which
walks each slow `GetNext` call's iterator tree).
"""

from __future__ import annotations

from tfobs.analysis.eventtypes import DATASET
from tfobs.analysis.ops import OpAgg
from tfobs.summary import TfDataStage

_WAITING_SUFFIXES = ("::Prefetch", "::Root", "::ForeverRepeat", "::Repeat")


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
