"""Saying a thing once: of many threads racing, exactly one is first; `reset()` arms it again;
keys are remembered up to a bound and said every time past it (memory stays bounded)."""

from __future__ import annotations

import threading

from tfobs.once import Once, OncePer


def test_exactly_one_of_many_racing_threads_is_first() -> None:
    once = Once()
    firsts: list[int] = []
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        for _ in range(1000):
            if once.first():
                firsts.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(firsts) == 1


def test_do_once_calls_once_and_reset_arms_it_again() -> None:
    once, calls = Once(), []
    assert once.do_once(lambda: calls.append(1)) and not once.do_once(lambda: calls.append(2))
    once.reset()
    assert once.do_once(lambda: calls.append(3))
    assert calls == [1, 3]


def test_per_key_once_each_and_bounded() -> None:
    per = OncePer(max_keys=2)
    assert [per.first(k) for k in ("a", "b", "a", "b")] == [True, True, False, False]
    # Past the bound a new key is said each time, never stored.
    assert per.first("c") and per.first("c") and not per.seen("c")
