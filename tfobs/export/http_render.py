"""What the metrics server renders, and when: the exposition, the page and the API as bytes;
which scrapes share one rendering; what a scrape gets while the rendering thread is held.

`RenderQueue` holds the decisions (no sockets, no clock: it takes `now`): scrapes of one page
variant wait for the next rendering begun after them and share it (never older than the
request), at most `renders_per_s` a second and fewer when rendering costs CPU; a rendering
held past `render_late_s` answers its scrapes with the variant's previous rendering (with an
`Age`), and held past `render_replace_s` its thread is left to finish alone. `Renderer` is
that thread: whatever holds it (a garbage collection with the job's finalizers) holds no
socket.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client.exposition import choose_encoder

from tfobs.export.http_admission import TokenBucket
from tfobs.export.http_limits import Limits
from tfobs.export.http_wire import Request

log = logging.getLogger(__name__)

PageFn = Callable[[], tuple[str, str]]  # () -> (content type, body)
Headers = tuple[tuple[str, str], ...]
Rendered = tuple[int, str, bytes, Headers]  # status, type, body, headers
LAST_KEPT = 8  # page variants whose last rendering is kept for late renderings


class _Closable(Protocol):
    @property
    def closed(self) -> bool: ...


C = TypeVar("C", bound=_Closable)


@dataclass(eq=False)
class Waiter(Generic[C]):
    """A request waiting for a rendering of its page: who asked, what, and whether only
    the head is wanted (HEAD)."""

    conn: C
    path: str
    req: Request
    head_only: bool = False


@dataclass(eq=False)
class Job(Generic[C]):
    """One rendering for the render thread, and the requests waiting for it."""

    key: str
    path: str
    req: Request
    waiters: list[Waiter[C]]
    started: float
    result: Rendered | None = None  # set by the render thread, then the loop woken
    cost: float = 0.0  # the render thread's CPU seconds


@dataclass
class LateAnswer(Generic[C]):
    """Scrapes answered with their page's previous rendering, `age_s` old."""

    waiters: list[Waiter[C]]
    rendered: Rendered
    age_s: int

    @property
    def headers(self) -> Headers:
        return (("Age", str(self.age_s)),)


class RenderQueue(Generic[C]):
    """Renderings to run and the scrapes waiting for them, one rendering at a time."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self.waiters: dict[str, list[Waiter[C]]] = {}  # by page variant, in arrival order
        self.job: Job[C] | None = None  # the rendering in the render thread
        self.cost = 0.0  # a rendering's CPU seconds, smoothed
        self.tokens = TokenBucket(limits.renders_per_s, limits.renders_per_s, now)
        # Each variant's last finished rendering with when it was begun: for late renderings.
        self.last: dict[str, tuple[Rendered, float]] = {}

    def add(self, key: str, waiter: Waiter[C]) -> None:
        """`waiter` is answered by the next rendering of `key` begun after now."""
        self.waiters.setdefault(key, []).append(waiter)

    def drop(self, conn: C) -> None:
        """`conn` closed: it waits for no rendering."""
        for key, waiters in list(self.waiters.items()):
            waiters[:] = [w for w in waiters if w.conn is not conn]
            if not waiters:
                del self.waiters[key]

    def rate(self) -> float:
        """Fresh renderings a second: renders_per_s, fewer when one costs much CPU."""
        lim = self.limits
        return max(1e-3, min(lim.renders_per_s, lim.render_cpu_share / max(self.cost, 1e-6)))

    def wake_in(self, now: float) -> float | None:
        """Seconds until this queue has something to do by itself; None when nothing is due
        (a finished rendering wakes the loop on its own)."""
        if self.job is not None:
            # Wake when it turns late; once late, arrivals are answered as they come.
            late_at = self.job.started + self.limits.render_late_s
            return late_at - now if now < late_at else None
        if self.waiters:
            return (1.0 - self.tokens.tokens) / self.rate()
        return None

    def is_late(self, now: float) -> bool:
        return self.job is not None and now - self.job.started >= self.limits.render_late_s

    def is_held(self, now: float) -> bool:
        """Whether the rendering is held so long its thread should be replaced."""
        return self.job is not None and now - self.job.started >= self.limits.render_replace_s

    def finish(self) -> tuple[list[Waiter[C]], Rendered] | None:
        """The rendering ended: kept as its variant's last, its waiters and result given
        back to be answered; None while it runs (or when there is none)."""
        job = self.job
        if job is None or job.result is None:
            return None
        self.job = None
        self.cost = job.cost if not self.cost else 0.8 * self.cost + 0.2 * job.cost
        self.last.pop(job.key, None)
        self.last[job.key] = (job.result, job.started)
        while len(self.last) > LAST_KEPT:
            del self.last[next(iter(self.last))]
        return job.waiters, job.result

    def late_answers(self, now: float) -> Iterator[LateAnswer[C]]:
        """The rendering is held: every request whose page was rendered before gets that
        rendering; the others wait for the held one. Lazily, group by group, so requests
        that answering one group lets in are seen by the next."""
        job = self.job
        groups = ([(job.key, job.waiters)] if job is not None else []) + list(
            self.waiters.items())
        for key, waiters in groups:
            kept = self.last.get(key)
            live = [w for w in waiters if not w.conn.closed]
            if kept is None or not live:
                continue
            rendered, at = kept
            waiters.clear()
            yield LateAnswer(live, rendered, int(now - at))
        for key in [k for k, waiters in self.waiters.items() if not waiters]:
            del self.waiters[key]

    def requeue(self) -> None:
        """The held rendering is given up (its thread left to finish alone): its waiters
        without an earlier rendering are asked again, first in line."""
        job, self.job = self.job, None
        if job is None:
            return
        waiting = [w for w in job.waiters if not w.conn.closed]
        if waiting:
            self.waiters = {job.key: waiting + self.waiters.pop(job.key, []), **self.waiters}

    def start_next(self, now: float) -> Job[C] | None:
        """The next rendering to run, when none runs and the rate allows: plain pages
        first (a name filter makes a rendering of its own per distinct set, so clients
        asking for a new set each time wait among themselves, not before the scrapes every
        Prometheus sends); arrival order otherwise."""
        if self.job is not None:
            return None
        for key in sorted(self.waiters, key=filtered):
            live = [w for w in self.waiters[key] if not w.conn.closed]
            if not live:
                del self.waiters[key]
                continue
            self.tokens.rate = self.rate()
            if not self.tokens.take(now):
                return None
            del self.waiters[key]
            self.job = Job(key, live[0].path, live[0].req, live, now)
            return self.job
        return None


class Renderer:
    """The `tfobs-render` thread: renders one job at a time and calls `wake` when done."""

    def __init__(self, render: Callable[[str, Request], Rendered],
                 wake: Callable[[], None]) -> None:
        self._render = render
        self.wake = wake
        self._cond = threading.Condition()
        self._job: Job[Any] | None = None
        self._stop = False
        self.thread = threading.Thread(target=self._run, name="tfobs-render", daemon=True)

    def submit(self, job: Job[Any]) -> None:
        with self._cond:
            self._job = job
            self._cond.notify()

    def stop(self) -> None:
        """Ends the thread once it is idle, or when its rendering ends (a held one is left
        to finish: what holds it is not tfobs's to cut short)."""
        with self._cond:
            self._stop = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._stop:
                    self._cond.wait()
                job, self._job = self._job, None
                if self._stop or job is None:
                    return
            cpu0 = time.thread_time()
            try:
                result = self._render(job.path, job.req)
            except Exception:  # `render` answers its own failures: this would be a bug
                log.debug("tfobs: rendering failed", exc_info=True)
                result = (500, "text/plain; charset=utf-8", b"rendering failed\n", ())
            job.cost = time.thread_time() - cpu0
            job.result = result
            self.wake()


# -- what is rendered ---------------------------------------------------------------------------


def filtered(key: str) -> bool:
    """Whether a rendering key (`render_key`) carries a `name[]` filter."""
    return key.startswith("m|") and not key.endswith("|")


def wanted_names(path: str) -> list[str]:
    """`/metrics?name[]=a&name[]=b`: the series names asked for, as prometheus_client's own
    server takes them (sorted and distinct: equal asks share one rendering)."""
    query = path.partition("?")[2]
    if "name" not in query:
        return []
    return sorted(set(urllib.parse.parse_qs(query).get("name[]", [])))


_FORMATS = ("application/openmetrics-text", "text/plain", "text/*", "application/*", "*/*")


def _by_preference(accept: str) -> list[str]:
    """The media ranges of an Accept header that tfobs can answer, best first: by q-value
    (RFC 9110, 12.4.2), in the header's order among equal ones; q=0, or a q-value that is no
    number, refuses a range. prometheus_client's `choose_encoder` reads no q-value: it takes
    OpenMetrics wherever the header lists it, refused or ranked below the text format."""
    ranked = []
    for i, part in enumerate(accept.split(",")):
        media, *params = part.split(";")
        if media.strip().lower() not in _FORMATS:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if q > 0:
            ranked.append((-q, i, part))
    return [part for _q, _i, part in sorted(ranked)]


def encoder_for(accept: str) -> tuple[Callable[[Any], bytes], str]:
    """prometheus_client's encoder and content type for the format an Accept header ranks
    first; the plain text format where the header names none tfobs serves or is malformed
    (`version=x.y` makes choose_encoder raise), as for no header: a scraper's odd header is
    no reason to drop the scrape."""
    for part in _by_preference(accept):
        try:
            return choose_encoder(part)
        except Exception:  # a range prometheus_client cannot parse: the next one
            log.debug("tfobs: Accept range %r not understood", part[:200], exc_info=True)
    return choose_encoder("")


def gzip_wanted(accept_encoding: str) -> bool:
    """Whether the client takes gzip: listed with a q-value above 0 (RFC 9110, 12.5.3).
    prometheus_client's `gzip_accepted` reads no q-value, so `gzip;q=0` (gzip refused)
    would get gzip; a q-value that is no number refuses it (identity is always safe)."""
    for part in accept_encoding.split(","):
        coding, *params = part.split(";")
        if coding.strip().lower() != "gzip":
            continue
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    return float(value) > 0
                except ValueError:
                    return False
        return True
    return False


def render_key(req: Request) -> str:
    """The page variant a request asks for: requests with equal keys share a rendering."""
    path = req.route
    if path != "/metrics":
        return "api" if path == "/api/windows" else "page"
    _encoder, content_type = encoder_for(req.headers.get("accept", ""))
    names = ",".join(wanted_names(req.path))
    return f"m|{content_type}|{gzip_wanted(req.headers.get('accept-encoding', ''))}|{names}"


def render_metrics(registry: Any, req: Request, on_error: Callable[[str], None]) -> Rendered:
    """The exposition in the format and encoding the request accepts, filtered by name."""
    try:
        encoder, content_type = encoder_for(req.headers.get("accept", ""))
        names = wanted_names(req.path)
        if names and hasattr(registry, "restricted_registry"):
            registry = registry.restricted_registry(names)
        body = encoder(registry)
    except Exception:
        log.debug("tfobs: rendering /metrics failed", exc_info=True)
        on_error("export_prometheus")
        return 500, "text/plain; charset=utf-8", b"metrics failed\n", ()
    if gzip_wanted(req.headers.get("accept-encoding", "")):
        return 200, content_type, gzip.compress(body, compresslevel=1), (
            ("Content-Encoding", "gzip"),)
    return 200, content_type, body, ()


def render_page(page: PageFn | None) -> Rendered:
    """The overview page or `/api/windows`; a pointer to /metrics when it fails."""
    try:
        if page is None:
            raise LookupError("no page")
        content_type, text = page()
    except Exception:
        log.debug("tfobs: rendering / failed", exc_info=True)
        content_type, text = "text/plain; charset=utf-8", "tfobs: metrics at /metrics\n"
    return 200, content_type, text.encode("utf-8"), ()
