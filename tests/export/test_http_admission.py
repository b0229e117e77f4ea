"""The metrics server's admission rules without sockets or a clock: token buckets, fairness
between addresses, strikes and trust, each called with an explicit `now`."""

from __future__ import annotations

from dataclasses import replace

from tfobs.export.http_admission import Admission, TokenBucket, network
from tfobs.export.http_limits import Limits

T0 = 1000.0


def admission(**kw: float) -> Admission[str]:
    return Admission(replace(Limits(), **kw), T0)


def test_a_bucket_starts_full_and_refills_at_its_rate_up_to_its_burst() -> None:
    b = TokenBucket(rate=2.0, burst=3, now=T0)
    assert [b.take(T0) for _ in range(4)] == [True, True, True, False]
    assert not b.take(T0 + 0.4)  # 0.8 of a token
    assert b.take(T0 + 0.5) and not b.take(T0 + 0.5)
    assert abs(b.wait_s() - 0.5) < 1e-9  # the next token in half a second at 2/s
    b.refill(T0 + 100.0)
    assert b.tokens == 3.0  # never above the burst


def test_spending_after_the_fact_never_goes_below_zero() -> None:
    b = TokenBucket(rate=1.0, burst=1, now=T0)
    b.spend()
    b.spend()
    assert b.tokens == 0.0 and b.wait_s() == 1.0


def test_requests_beyond_the_burst_wait_and_are_let_in_at_the_rate() -> None:
    adm = admission(requests_per_s=10.0, burst=2)
    assert adm.admit("10.0.0.1", "a", T0) and adm.admit("10.0.0.1", "b", T0)
    assert not adm.admit("10.0.0.1", "c", T0)
    assert adm.next_admitted(T0) is None and adm.next_token_s() is not None
    assert adm.next_admitted(T0 + 0.1) == "c"
    assert adm.next_token_s() is None  # nothing waits


def test_waiting_requests_are_served_round_robin_between_addresses() -> None:
    adm = admission(requests_per_s=1.0, burst=1)
    assert adm.admit("10.0.0.1", "flood-0", T0)
    for i in range(1, 4):
        assert not adm.admit("10.0.0.1", f"flood-{i}", T0)
    assert not adm.admit("10.0.0.9", "scrape", T0)
    served = [adm.next_admitted(T0 + s) for s in (1.0, 2.0, 3.0, 4.0)]
    # the scraper's one request goes second, not after the flood's three
    assert served == ["flood-1", "scrape", "flood-2", "flood-3"]


def test_with_others_waiting_a_new_request_queues_even_when_a_token_is_there() -> None:
    adm = admission(requests_per_s=1.0, burst=1)
    assert adm.admit("10.0.0.1", "a", T0)
    assert not adm.admit("10.0.0.1", "b", T0)
    # a token is due, but "b" came first: "c" waits its turn
    assert not adm.admit("10.0.0.2", "c", T0 + 1.0)
    assert adm.next_admitted(T0 + 1.0) == "b"


def test_a_trusted_address_goes_before_the_others_and_does_not_queue_behind_them() -> None:
    adm = admission(requests_per_s=1.0, burst=1)
    adm.trust("10.0.0.9", T0)
    assert adm.admit("10.0.0.1", "flood-0", T0)
    assert not adm.admit("10.0.0.1", "flood-1", T0)
    assert not adm.admit("10.0.0.9", "scrape", T0)  # no token left: it waits, but first
    assert adm.next_admitted(T0 + 1.0) == "scrape"
    assert adm.admit("10.0.0.9", "scrape-2", T0 + 2.0)  # a token, others waiting or not


def test_trusted_addresses_wait_in_arrival_order_so_new_ones_cannot_push_in() -> None:
    """With auth off every address that asks is trusted, a spray's included: the scraper's
    waiting request goes before the trusted addresses that came after it (it was last,
    behind them all, when each newcomer went first)."""
    adm = admission(requests_per_s=1.0, burst=1)
    assert adm.admit("10.0.0.1", "first", T0)
    adm.trust("10.0.0.9", T0)
    assert not adm.admit("10.0.0.9", "scrape", T0)
    for i in range(2, 50):  # a spray of addresses, each trusted before its request
        adm.trust(f"10.0.1.{i}", T0)
        assert not adm.admit(f"10.0.1.{i}", f"spray-{i}", T0 + 0.01 * i)
    assert adm.next_admitted(T0 + 1.0) == "scrape"
    assert adm.next_admitted(T0 + 2.0) == "spray-2"
    # A trusted address with a token due still waits behind the trusted ones waiting.
    adm.trust("10.0.0.8", T0)
    assert not adm.admit("10.0.0.8", "late", T0 + 3.0)
    assert adm.next_admitted(T0 + 3.0) == "spray-3"


def test_a_trusted_address_gets_one_turn_first_then_joins_the_round() -> None:
    """A trusted flood (auth off: the flood asked, so it is trusted) cannot starve an address
    not trusted yet: after its first turn it takes turns with the others."""
    adm = admission(requests_per_s=1.0, burst=1)
    adm.trust("10.0.0.2", T0)
    assert adm.admit("10.0.0.2", "flood-0", T0)
    for i in range(1, 4):
        assert not adm.admit("10.0.0.2", f"flood-{i}", T0)
    assert not adm.admit("10.0.0.9", "first-scrape", T0)  # not trusted yet
    served = [adm.next_admitted(T0 + s) for s in (1.0, 2.0, 3.0, 4.0)]
    assert served == ["flood-1", "first-scrape", "flood-2", "flood-3"]
    assert not adm.waiting and not adm.turns and not adm.trusted_turns
    adm.withdraw("10.0.0.2", "gone")  # nothing waits: no error
    assert adm.next_token_s() is None


def test_a_withdrawn_request_leaves_the_queue_and_its_turn() -> None:
    adm = admission(requests_per_s=1.0, burst=1)
    adm.admit("10.0.0.1", "a", T0)
    adm.admit("10.0.0.1", "b", T0)
    adm.admit("10.0.0.2", "c", T0)
    adm.withdraw("10.0.0.1", "b")
    adm.withdraw("10.0.0.1", "never-queued")
    assert list(adm.turns) == ["10.0.0.2"]
    assert adm.next_admitted(T0 + 1.0) == "c"


def test_strikes_block_an_address_for_the_block_time() -> None:
    adm = admission(strike_limit=3, strike_block_s=30.0)
    ip = "10.0.0.5"
    assert not adm.strike(ip, T0) and not adm.strike(ip, T0 + 1)
    assert not adm.refused(ip, T0 + 1)
    assert adm.strike(ip, T0 + 2)
    assert adm.refused(ip, T0 + 2) and adm.refused(ip, T0 + 31.9)
    assert not adm.refused(ip, T0 + 32.1)
    assert not adm.refused("10.0.0.6", T0 + 3)  # its neighbour is not blocked


def test_strikes_spread_over_more_than_the_block_time_do_not_block() -> None:
    adm = admission(strike_limit=3, strike_block_s=10.0)
    for i in range(10):
        assert not adm.strike("10.0.0.5", T0 + 6.0 * i)
    assert not adm.refused("10.0.0.5", T0 + 60.0)


def test_a_network_spraying_strikes_is_blocked_apart_from_its_trusted_addresses() -> None:
    adm = admission(strike_limit=30, network_strike_limit=5)
    adm.trust("192.168.7.200", T0)
    for i in range(5):  # one strike each from five addresses of 192.168.7.0/24
        adm.strike(f"192.168.7.{i}", T0 + i * 0.1)
    assert adm.refused("192.168.7.99", T0 + 1)  # an address that never struck
    assert not adm.refused("192.168.7.200", T0 + 1)  # the scraper that proved itself
    assert not adm.refused("192.168.8.1", T0 + 1)  # another network
    assert network("192.168.7.3") == "192.168.7.0/24"
    assert network("2001:db8::1") == "2001:db8::/64"
    assert network("not-an-ip") == "not-an-ip"


def test_blocks_list_what_the_kernel_filter_drops_and_when_it_changes() -> None:
    adm = admission(strike_limit=2, network_strike_limit=4, strike_block_s=30.0)
    adm.trust("10.0.0.200", T0)
    assert adm.blocks(T0) == ([], [], [], None) and adm.changes == 0
    for ip in ("10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"):
        adm.strike(ip, T0 + 1)
    addresses, networks, exempt, until = adm.blocks(T0 + 1)
    assert addresses == ["10.0.0.2", "10.0.0.1"]  # newest first: the first kept when cut
    assert networks == ["10.0.0.0/24"] and exempt == ["10.0.0.200"]
    assert until == T0 + 31 and adm.changes == 3  # two addresses and their network
    assert adm.blocks_begun == 3
    adm.strike("10.0.0.1", T0 + 2)  # a block extended: the filter's lists are the same
    assert adm.changes == 3 and adm.blocks_begun == 3
    adm.trust("10.0.0.7", T0 + 3)  # newly trusted inside a blocked network: to exempt
    assert adm.changes == 4 and "10.0.0.7" in adm.blocks(T0 + 3)[2]
    assert adm.blocks(T0 + 40) == ([], [], [], None)  # every block ended


def test_strikes_of_a_trusted_address_do_not_count_for_its_network() -> None:
    adm = admission(strike_limit=30, network_strike_limit=3)
    adm.trust("10.1.1.1", T0)
    for i in range(5):
        adm.strike("10.1.1.1", T0 + i)
    assert not adm.refused("10.1.1.2", T0 + 5)


def test_trust_lasts_trusted_s() -> None:
    adm = admission(trusted_s=600.0)
    adm.trust("10.0.0.1", T0)
    assert adm.is_trusted("10.0.0.1", T0 + 599)
    assert not adm.is_trusted("10.0.0.1", T0 + 601)
    assert not adm.is_trusted("10.0.0.2", T0)


def test_address_tables_are_bounded_oldest_forgotten_first() -> None:
    adm = admission(blocked_addresses=4, strike_limit=1)
    for i in range(10):
        adm.trust(f"10.0.{i}.1", T0 + i)
        adm.strike(f"10.9.{i}.1", T0 + i)  # one strike blocks
    assert len(adm.trusted) == 4 and len(adm.blocked) <= 4 and len(adm.strikes) <= 4
    assert adm.is_trusted("10.0.9.1", T0 + 10) and not adm.is_trusted("10.0.0.1", T0 + 10)
    assert adm.refused("10.9.9.1", T0 + 10) and not adm.refused("10.9.0.1", T0 + 10)


def test_accepts_are_rationed_and_refill_only_once_spent() -> None:
    adm = admission(accepts_per_s=10.0, accept_burst=3)
    for _ in range(3):
        assert adm.may_accept(T0)
        adm.accepted()
    assert not adm.may_accept(T0) and not adm.may_accept(T0 + 0.05)
    assert adm.may_accept(T0 + 0.1)


def test_tls_handshakes_are_rationed_for_addresses_not_trusted() -> None:
    adm = admission(handshakes_per_s=1.0, handshake_burst=2)
    adm.trust("10.0.0.9", T0)
    assert adm.may_handshake("10.0.0.1", T0) and adm.may_handshake("10.0.0.2", T0)
    assert not adm.may_handshake("10.0.0.3", T0)
    assert all(adm.may_handshake("10.0.0.9", T0) for _ in range(10))  # trusted: no ration
    assert adm.may_handshake("10.0.0.3", T0 + 1.0)
