"""Many plain event names (no ':') on one thread, none a function call: the second look at
a name's first events reads them from one sort of the line, not a scan of it per name."""

from __future__ import annotations

import time

from tfobs.analysis.calls import _call_mids
from tfobs.analysis.timeline import Timeline
from tfobs.xspace import schema
from tfobs.xspace.reader import parse
from tfobs.xspace.schema import HOST_PLANE


def _host(events: list[tuple[str, int, int, bool]], extra_names: int = 0) -> Timeline:
    """A host plane of one line of (name, offset, duration, carries tf_function_call)."""
    x = schema.XSpace()
    host = x.planes.add(id=1, name=HOST_PLANE)
    host.stat_metadata[1].id = 1
    host.stat_metadata[1].name = "tf_function_call"
    mids: dict[str, int] = {}
    line = host.lines.add(id=1, name="python3", timestamp_ns=1000)
    for name, at, dur, call in events:
        mid = mids.setdefault(name, len(mids) + 1)
        host.event_metadata[mid].id = mid
        host.event_metadata[mid].name = name
        e = line.events.add(metadata_id=mid, offset_ps=at, duration_ps=dur)
        if call:
            e.stats.add(metadata_id=1, str_value="notTraced-nonXla")
    return Timeline(parse(x.SerializeToString()).plane(HOST_PLANE), 0)


def test_many_plain_names_cost_a_sort_not_a_scan_each() -> None:
    # Each name whose first event is no call scanned the whole line for its next events:
    # 160,000 names of one event each (a 5 MB capture) cost 32 s in tfobs analyze.
    n = 150_000
    host = _host([(f"f{k}", 10 * k, 5, False) for k in range(n)])
    t0 = time.process_time()
    mids, mixed = _call_mids(host)
    took = time.process_time() - t0
    assert mids.size == 0 and not mixed
    assert took < 2.5, took  # 5 s before


def test_a_marker_named_as_its_call_is_mixed() -> None:
    host = _host([
        ("train_step", 0, 100, False),  # a step marker around its call of the same name
        ("train_step", 10, 80, True),
        ("helper", 200, 10, False),  # no call
        ("helper", 205, 2, False),
        ("fn", 300, 10, True),  # a call
        ("late", 400, 10, False),  # its next event is not inside it: not looked at again
        ("late", 420, 10, True),
    ])
    mids, mixed = _call_mids(host)
    names = {host.names[m] for m in mids.tolist()}
    assert names == {"train_step", "fn"}
    assert {host.names[m] for m in mixed} == {"train_step"}
