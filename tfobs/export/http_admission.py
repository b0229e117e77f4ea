"""Who the metrics server lets in, and in what order: token buckets, per-address fairness,
strikes, trust. No sockets and no clock: every call takes `now` (time.monotonic() in the
loop), so the rules are tested by calling them (tests/export/test_http_admission.py).

* requests: a global token bucket, shared round-robin between client addresses and in
  arrival order within one; an address whose request passed auth (`trust`) that begins to
  wait takes its first turn before the round, behind the trusted addresses that began to
  wait before it (first come: a spray of new trusted addresses, as every asking address is
  with auth off, cannot push in ahead of a waiting scraper);
* strikes: an address with `strike_limit` strikes within `strike_block_s` is refused for
  `strike_block_s`; its network (/24, /64) after `network_strike_limit` strikes from
  addresses not trusted (a spray over many addresses of one network), trusted ones apart;
* accepts and TLS handshakes: buckets of their own (a connection or handshake flood costs
  a bounded share of a core).
"""

from __future__ import annotations

import ipaddress
import logging
from collections import deque
from typing import Generic, TypeVar

from tfobs.export.http_limits import Limits

log = logging.getLogger(__name__)

T = TypeVar("T")


class TokenBucket:
    """`rate` tokens a second, at most `burst` held; starts full."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.at = now

    def refill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def has(self, now: float) -> bool:
        """Whether a token is there (none taken)."""
        self.refill(now)
        return self.tokens >= 1.0

    def take(self, now: float) -> bool:
        """Take a token if one is there (once per request: refilled inline)."""
        tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return True
        self.tokens = tokens
        return False

    def spend(self) -> None:
        """Take a token after the fact (what was let in without asking); never below 0."""
        self.tokens = max(0.0, self.tokens - 1.0)

    def wait_s(self) -> float:
        """Seconds until the next token, at the rate now (0 when one is there)."""
        return max(0.0, (1.0 - self.tokens) / max(self.rate, 1e-3))


def network(ip: str) -> str:
    """The network an address is counted with for strikes: its /24 (IPv4), /64 (IPv6)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    prefix = 24 if addr.version == 4 else 64
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


def _remember(table: dict[str, float], key: str, value: float, bound: int) -> None:
    """Set `key` as the newest entry (dict order is recency), forgetting the oldest beyond
    `bound`, so a spray of addresses cannot grow the table without end."""
    table.pop(key, None)
    table[key] = value
    while len(table) > bound:
        del table[next(iter(table))]


class Admission(Generic[T]):
    """The server's admission rules and its queue of requests waiting for a token. `T` is
    what waits (the loop's connection); this class never looks inside it."""

    def __init__(self, limits: Limits, now: float) -> None:
        self.limits = limits
        self.requests = TokenBucket(limits.requests_per_s, limits.burst, now)
        self.accepts = TokenBucket(limits.accepts_per_s, limits.accept_burst, now)
        self.handshakes = TokenBucket(limits.handshakes_per_s, limits.handshake_burst, now)
        # Strikes per address or network (times, oldest first) and those refused until a
        # time; addresses whose request passed auth, with when. All three bounded.
        self.strikes: dict[str, deque[float]] = {}
        self.blocked: dict[str, float] = {}
        self.trusted: dict[str, float] = {}
        self.changes = 0  # bumped when the blocks change (the loop's kernel filter follows)
        self.blocks_begun = 0  # blocks begun, ever (tfobs_errors_total{stage="http_blocked"})
        # Requests ready and waiting for a token: a FIFO per client address, and the
        # addresses in turn (round-robin), so one address cannot starve another. A trusted
        # address that begins to wait goes to `trusted_turns` (served first, in arrival
        # order), then joins the round with the others.
        self.waiting: dict[str, deque[T]] = {}
        self.trusted_turns: deque[str] = deque()
        self.turns: deque[str] = deque()

    # -- addresses ---------------------------------------------------------------------------

    def refused(self, ip: str, now: float) -> bool:
        """Whether a connection from `ip` is refused at accept: the address is blocked, or
        its network is and the address is not trusted."""
        return self._blocked(ip, now) or (self._blocked(network(ip), now)
                                          and not self.is_trusted(ip, now))

    def _blocked(self, key: str, now: float) -> bool:
        until = self.blocked.get(key)
        if until is None:
            return False
        if now < until:
            return True
        del self.blocked[key]
        return False

    def strike(self, ip: str, now: float) -> bool:
        """A failed auth check, a refused request or a connection that asked nothing; True
        when `ip` is blocked from now on. Strikes of addresses not trusted also count for
        their network: a spray over a network (127.0.0.0/8, a pod range) is blocked as one."""
        if not self.is_trusted(ip, now):
            self._count(network(ip), now, self.limits.network_strike_limit)
        return self._count(ip, now, self.limits.strike_limit)

    def _count(self, key: str, now: float, limit: int) -> bool:
        lim = self.limits
        times = self.strikes.pop(key, None) or deque()
        times.append(now)
        while times and times[0] <= now - lim.strike_block_s:
            times.popleft()
        if len(times) >= limit:
            if key not in self.blocked:
                self.changes += 1  # a new block (one extended changes no filter)
                self.blocks_begun += 1
            _remember(self.blocked, key, now + lim.strike_block_s, lim.blocked_addresses)
            log.warning("tfobs: %s sent %d failed-auth or malformed requests in %.0f s; "
                        "refusing its connections for %.0f s", key, len(times),
                        lim.strike_block_s, lim.strike_block_s)
            return True
        self.strikes[key] = times  # re-inserted last: dict order is recency
        while len(self.strikes) > lim.blocked_addresses:
            del self.strikes[next(iter(self.strikes))]
        return False

    def blocks(self, now: float) -> tuple[list[str], list[str], list[str], float | None]:
        """What is refused now: addresses and networks (newest first), the trusted
        addresses inside those networks (exempt), and when the first of these blocks ends."""
        for key in list(self.blocked):
            self._blocked(key, now)  # forgets the blocks that have ended
        addresses = [k for k in reversed(self.blocked) if "/" not in k]
        networks = [k for k in reversed(self.blocked) if "/" in k]
        exempt = [ip for ip in reversed(self.trusted)
                  if self.is_trusted(ip, now) and network(ip) in self.blocked] if networks else []
        return addresses, networks, exempt, min(self.blocked.values(), default=None)

    def trust(self, ip: str, now: float) -> None:
        """`ip` sent a request that passed auth (any request, with auth off)."""
        if self.blocked and not self.is_trusted(ip, now) and network(ip) in self.blocked:
            self.changes += 1  # newly trusted inside a blocked network: exempt it
        _remember(self.trusted, ip, now, self.limits.blocked_addresses)

    def is_trusted(self, ip: str, now: float) -> bool:
        at = self.trusted.get(ip)
        return at is not None and now - at < self.limits.trusted_s

    # -- connections -------------------------------------------------------------------------

    def may_accept(self, now: float) -> bool:
        """Whether the accept ration allows another connection (refilled once spent)."""
        return self.accepts.tokens >= 1.0 or self.accepts.has(now)

    def accepted(self) -> None:
        """A connection was taken in (refused addresses are not counted)."""
        self.accepts.spend()

    def may_handshake(self, ip: str, now: float) -> bool:
        """Whether a TLS handshake may begin for `ip`: trusted, or within the ration (a
        handshake is about 1 ms of CPU)."""
        return self.is_trusted(ip, now) or self.handshakes.take(now)

    # -- requests ----------------------------------------------------------------------------

    def admit(self, ip: str, item: T, now: float) -> bool:
        """True: a token was taken, serve `item` now. False: it waits in its address's
        turn (`next_admitted`); a trusted address skips the round of the others and waits
        only behind the trusted addresses that began to wait before it."""
        trusted = self.is_trusted(ip, now)
        if not (self.trusted_turns if trusted else self._all_turns()) and self.requests.take(now):
            return True
        queue = self.waiting.get(ip)
        if queue is None:
            queue = self.waiting[ip] = deque()
            (self.trusted_turns if trusted else self.turns).append(ip)
        queue.append(item)
        return False

    def _all_turns(self) -> bool:
        return bool(self.trusted_turns or self.turns)

    def next_admitted(self, now: float) -> T | None:
        """The next waiting item whose token is there, taken; None when none."""
        while self._all_turns() and self.requests.take(now):
            turns = self.trusted_turns or self.turns
            ip = turns.popleft()
            queue = self.waiting.get(ip)
            if not queue:
                self.waiting.pop(ip, None)
                continue
            item = queue.popleft()
            if queue:
                self.turns.append(ip)  # its next request in the round
            else:
                del self.waiting[ip]
            return item
        return None

    def withdraw(self, ip: str, item: T) -> None:
        """`item` waits no more (its connection closed)."""
        queue = self.waiting.get(ip)
        if queue is None:
            return
        try:
            queue.remove(item)
        except ValueError:
            return
        if not queue:
            del self.waiting[ip]
            for turns in (self.trusted_turns, self.turns):
                if ip in turns:
                    turns.remove(ip)

    def next_token_s(self) -> float | None:
        """Seconds until a waiting request's token is due; None when none waits."""
        return self.requests.wait_s() if self._all_turns() else None
