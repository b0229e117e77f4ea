"""The listener's kernel filter (tfobs/export/http_sockfilter.py): each program is attached
to a real listening socket and real connects from loopback addresses go through the kernel's
TCP path; a dropped SYN shows as a connect that times out."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from tfobs.export.http_sockfilter import MAX_INSNS, ListenerFilter, program

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="SO_ATTACH_FILTER is Linux's")


@pytest.fixture()
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield sock
    sock.close()


def connects(sock: socket.socket, source: str, timeout: float = 0.3) -> bool:
    """Whether a connect from `source` completes (a dropped SYN times out)."""
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    client = socket.socket(family, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        client.bind((source, 0))
        client.connect((host, sock.getsockname()[1]))
    except TimeoutError:
        return False
    finally:
        client.close()
    accepted, _ = sock.accept()
    accepted.close()
    return True


def test_nothing_blocked_is_no_program() -> None:
    assert program([], [], []) == []
    assert program([], [], ["127.0.0.1"]) == []  # exempt alone blocks nothing


def test_a_blocked_address_is_dropped_and_its_neighbours_are_not(listener) -> None:
    f = ListenerFilter(listener)
    assert f.set(["127.0.0.2"], [], []) and f.attached > 0
    assert not connects(listener, "127.0.0.2")
    assert connects(listener, "127.0.0.1") and connects(listener, "127.0.0.3")
    assert f.set([], [], []) and f.attached == 0  # the block ended: detached
    assert connects(listener, "127.0.0.2")


def test_a_blocked_network_is_dropped_save_its_exempt_addresses(listener) -> None:
    f = ListenerFilter(listener)
    assert f.set([], ["127.0.1.0/24"], ["127.0.1.250"])
    assert not connects(listener, "127.0.1.7")
    assert not connects(listener, "127.0.1.251")
    assert connects(listener, "127.0.1.250")  # the trusted scraper of that network
    assert connects(listener, "127.0.2.7")  # another network


def test_a_blocked_address_inside_an_exempt_list_is_still_dropped(listener) -> None:
    """Exempt means "not for its network's block": its own block still holds."""
    f = ListenerFilter(listener)
    assert f.set(["127.0.1.9"], ["127.0.1.0/24"], ["127.0.1.9"])
    assert not connects(listener, "127.0.1.9")


def test_thousands_of_blocks_fit_the_kernel_limit_newest_first(listener) -> None:
    addresses = [f"127.{i // 250 + 10}.{i % 250}.1" for i in range(5000)]  # newest first
    prog = program(addresses, [], [])
    assert len(prog) <= MAX_INSNS
    f = ListenerFilter(listener)
    assert f.set(addresses, [], [])  # the kernel takes it
    assert not connects(listener, addresses[0])  # the newest block is in it
    assert connects(listener, addresses[-1])  # the oldest left out: refused at accept instead
    # Long lists are matched in chunks (8-bit jumps): one deep in the list is dropped too.
    assert not connects(listener, addresses[1234])


def test_networks_go_in_only_with_every_exempt_address() -> None:
    """Too many trusted addresses to exempt: the networks are left out of the program (the
    server refuses them at accept, where trust is asked) rather than drop a trusted one."""
    exempt = [f"10.{i // 250}.{i % 250}.1" for i in range(3000)]
    with_nets = program(["127.0.0.2"], ["10.0.0.0/24"], exempt[:10])
    without = program(["127.0.0.2"], ["10.0.0.0/24"], exempt)
    assert len(with_nets) > len(program(["127.0.0.2"], [], []))
    assert without == program(["127.0.0.2"], [], [])


def test_ipv4_clients_of_a_dual_stack_listener_are_matched() -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0))
    sock.listen(16)
    try:
        f = ListenerFilter(sock)
        # Blocks as the server keeps them: IPv4-mapped addresses are plain IPv4 there.
        assert f.set(["127.0.0.2"], ["127.0.1.0/24"], [])
        assert not connects(sock, "127.0.0.2") and not connects(sock, "127.0.1.5")
        assert connects(sock, "127.0.0.1")
        assert connects(sock, "::1")  # IPv6 goes past the IPv4 part
    finally:
        sock.close()


def test_ipv6_addresses_and_networks_are_matched() -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.bind(("::1", 0))
    except OSError:
        pytest.skip("this host has no IPv6 loopback")
    sock.listen(16)
    try:
        f = ListenerFilter(sock)
        assert f.set(["::1"], [], []) and not connects(sock, "::1")
        assert f.set([], ["::/64"], []) and not connects(sock, "::1")
        assert f.set([], ["::/64"], ["::1"]) and connects(sock, "::1")  # exempt
        assert f.set(["::2"], ["fd00::/64"], []) and connects(sock, "::1")
    finally:
        sock.close()


def test_a_socket_that_refuses_the_program_turns_the_filter_off_for_good() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    f = ListenerFilter(sock)
    sock.close()  # setsockopt on a closed socket raises, as a seccomp refusal would
    assert not f.set(["127.0.0.2"], [], [])
    assert not f.works and not f.set(["127.0.0.2"], [], [])


def test_mapped_and_unreadable_addresses() -> None:
    """An IPv4-mapped address is matched as IPv4; what is not an address is left out."""
    assert program(["::ffff:127.0.0.2"], [], []) == program(["127.0.0.2"], [], [])
    assert program(["not-an-ip", "300.1.1.1"], ["x/24"], []) == []
    assert program([], ["::ffff:10.0.0.0/64"], []) == []  # no IPv6 network of mapped ones
