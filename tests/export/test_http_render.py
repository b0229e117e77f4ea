"""Which scrapes share a rendering and what they get while the rendering thread is held:
`RenderQueue` without sockets or threads, called with an explicit `now`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tfobs.export.http_limits import Limits
from tfobs.export.http_render import RenderQueue, Waiter, render_key
from tfobs.export.http_wire import Request

T0 = 1000.0
OK = (200, "text/plain", b"fresh", ())
OLD = (200, "text/plain", b"old", ())


@dataclass(eq=False)
class Client:
    name: str
    closed: bool = False


def get(path: str, accept: str = "") -> Request:
    return Request("GET", path, "HTTP/1.1", {"accept": accept} if accept else {})


def waiter(name: str, path: str = "/metrics") -> Waiter[Client]:
    return Waiter(Client(name), path.split("?")[0], get(path))


def queue(**kw: float) -> RenderQueue[Client]:
    return RenderQueue(replace(Limits(), **kw), T0)


def names(waiters: list[Waiter[Client]]) -> list[str]:
    return [w.conn.name for w in waiters]


def test_scrapes_of_one_page_variant_share_one_rendering() -> None:
    q = queue()
    for n in ("a", "b"):
        q.add("page", waiter(n, "/"))
    job = q.start_next(T0)
    assert job is not None and names(job.waiters) == ["a", "b"]
    assert q.start_next(T0) is None  # one rendering at a time


def test_a_scrape_arriving_during_a_rendering_waits_for_the_next_one() -> None:
    q = queue()
    q.add("page", waiter("a", "/"))
    job = q.start_next(T0)
    assert job is not None
    q.add("page", waiter("late-comer", "/"))
    job.result, job.cost = OK, 0.001
    waiters, result = q.finish() or ([], OK)
    assert names(waiters) == ["a"] and result == OK
    nxt = q.start_next(T0 + 1.0)
    assert nxt is not None and names(nxt.waiters) == ["late-comer"]


def test_renderings_are_rationed_and_slowed_by_their_cpu_cost() -> None:
    q = queue(renders_per_s=4.0, render_cpu_share=0.05)
    assert q.rate() == 4.0
    q.cost = 0.05  # 50 ms of CPU a rendering: at most one a second for a 5 % share
    assert q.rate() == 1.0
    for i in range(4):  # the bucket starts with 4 tokens
        q.add("page", waiter(str(i), "/"))
        job = q.start_next(T0)
        assert job is not None
        job.result, job.cost = OK, 0.05
        q.finish()
    assert abs(q.rate() - 1.0) < 1e-9  # the smoothed cost stayed 50 ms
    q.add("page", waiter("x", "/"))
    assert q.start_next(T0) is None
    wait = q.wake_in(T0)
    assert wait is not None and abs(wait - 1.0) < 1e-6  # a token a second
    assert q.start_next(T0 + 1.01) is not None


def test_plain_scrapes_go_before_name_filtered_ones() -> None:
    q = queue()
    filtered = waiter("filtered", "/metrics?name[]=up")
    plain = waiter("plain")
    q.add(render_key(filtered.req), filtered)
    q.add(render_key(plain.req), plain)
    job = q.start_next(T0)
    assert job is not None and names(job.waiters) == ["plain"]


def test_render_keys_tell_variants_apart_and_equal_asks_share() -> None:
    assert render_key(get("/")) == "page"
    assert render_key(get("/api/windows?x=1")) == "api"
    assert render_key(get("/metrics?name[]=b&name[]=a")) == render_key(
        get("/metrics?name[]=a&name[]=b&name[]=a"))
    assert render_key(get("/metrics")) != render_key(
        get("/metrics", accept="application/openmetrics-text"))


def test_a_held_rendering_answers_its_scrapes_with_the_last_one_and_its_age() -> None:
    q = queue(render_late_s=2.0)
    q.add("page", waiter("first", "/"))
    job = q.start_next(T0)
    assert job is not None
    job.result = OLD
    q.finish()
    q.add("page", waiter("held", "/"))
    job = q.start_next(T0 + 10.0)
    assert job is not None
    q.add("page", waiter("next", "/"))
    assert not q.is_late(T0 + 11.0) and q.wake_in(T0 + 11.0) == 1.0
    assert q.is_late(T0 + 12.0)
    late = list(q.late_answers(T0 + 12.0))
    assert [names(a.waiters) for a in late] == [["held"], ["next"]]
    assert late[0].rendered == OLD and late[0].headers == (("Age", "12"),)
    assert not q.waiters and not job.waiters  # answered: the held rendering owes nobody


def test_a_held_first_rendering_keeps_its_scrapes_waiting() -> None:
    q = queue()
    q.add("page", waiter("first", "/"))
    assert q.start_next(T0) is not None
    assert list(q.late_answers(T0 + 5.0)) == []  # nothing older to give


def test_a_replaced_rendering_asks_again_for_its_scrapes_first() -> None:
    q = queue(render_replace_s=6.0)
    q.add("page", waiter("held", "/"))
    gone = waiter("gone", "/")
    q.add("page", gone)
    assert q.start_next(T0) is not None
    q.add("page", waiter("later", "/"))
    q.add("api", waiter("api", "/api/windows"))
    gone.conn.closed = True
    assert not q.is_held(T0 + 5.9) and q.is_held(T0 + 6.0)
    q.requeue()
    assert q.job is None
    job = q.start_next(T0 + 6.0)
    assert job is not None and names(job.waiters) == ["held", "later"]


def test_a_closed_connection_is_dropped_from_every_wait() -> None:
    q = queue()
    w = waiter("a", "/")
    q.add("page", w)
    q.add("page", waiter("b", "/"))
    q.drop(w.conn)
    q.drop(Client("never-added"))
    assert names(q.waiters["page"]) == ["b"]
    q.drop(q.waiters["page"][0].conn)
    assert not q.waiters


def test_the_last_renderings_kept_are_bounded() -> None:
    q = queue(renders_per_s=100.0)
    for i in range(20):
        q.add(f"m|t|False|n{i}", waiter(str(i)))
        job = q.start_next(T0 + i)
        assert job is not None
        job.result = OK
        q.finish()
    assert len(q.last) == 8 and "m|t|False|n19" in q.last
