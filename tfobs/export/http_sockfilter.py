"""Blocked addresses dropped by the kernel: a classic BPF program on the metrics server's
listening socket (Linux `SO_ATTACH_FILTER`) that drops the SYNs of blocked addresses and
networks. A blocked client that reconnects without end then costs the job nothing: no accept,
no close, no wake-up of the serving thread (refused at accept, each connection cost about
50 us of Python on the job's core; a flood of them a tenth of that core, issue 41). To the
client it looks like a firewall's drop: its connect times out.

Where the program cannot be attached (not Linux, a seccomp profile that forbids it) or the
lists do not fit, the server still refuses those addresses at accept; this is only the cheap
path in front of it. Established connections keep the program they were accepted with (the
kernel copies it to the child socket), which never drops their own address.
"""

from __future__ import annotations

import ctypes
import functools
import socket
import struct
import sys
from collections.abc import Iterable, Sequence

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses longer classic programs
_NET = -0x100000  # SKF_NET_OFF: loads relative to the IP header, whatever the socket family
_CHUNK = 200  # jeq's jump offsets are 8 bits: a list is matched in chunks, each with its return

# Classic BPF opcodes (linux/filter.h).
_LD_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_LD_B = 0x30  # BPF_LD | BPF_B | BPF_ABS
_RSH = 0x74  # BPF_ALU | BPF_RSH | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JA = 0x05  # BPF_JMP | BPF_JA
_RET = 0x06  # BPF_RET | BPF_K
DROP, ACCEPT = 0, 0xFFFFFFFF

Insn = tuple[int, int, int, int]  # code, jt, jf, k


@functools.lru_cache(maxsize=16384)
def _v4(text: str) -> int | None:
    """An IPv4 address (or an IPv4-mapped IPv6 one) as an int; None otherwise. Cached:
    the same blocks are parsed at every rebuild (inet_pton, not ipaddress: 4,096 entries
    took 24 ms through ipaddress)."""
    try:
        return int.from_bytes(socket.inet_pton(socket.AF_INET, text), "big")
    except OSError:
        pass
    raw = _v6_bytes(text)
    if raw is not None and raw[:12] == _MAPPED:
        return int.from_bytes(raw[12:], "big")
    return None


_MAPPED = b"\0" * 10 + b"\xff\xff"


def _v6_bytes(text: str) -> bytes | None:
    try:
        return socket.inet_pton(socket.AF_INET6, text)
    except (OSError, ValueError):
        return None


@functools.lru_cache(maxsize=16384)
def _v6_words(text: str, words: int) -> tuple[int, ...] | None:
    """The first `words` 32-bit words of an IPv6 address or network (not IPv4-mapped)."""
    raw = _v6_bytes(text.split("/")[0])
    if raw is None or raw[:12] == _MAPPED:
        return None
    return tuple(int.from_bytes(raw[4 * i:4 * i + 4], "big") for i in range(words))


def _any_equal(values: Sequence[int], ret: int) -> list[Insn]:
    """Return `ret` when A equals one of `values`; else fall through with A unchanged."""
    out: list[Insn] = []
    for start in range(0, len(values), _CHUNK):
        chunk = values[start:start + _CHUNK]
        n = len(chunk)
        out += [(_JEQ, n - i, 0, v) for i, v in enumerate(chunk)]  # to the chunk's return
        out += [(_JA, 0, 0, 1), (_RET, 0, 0, ret)]
    return out


def _any_prefix(entries: Iterable[tuple[int, ...]], ret: int) -> list[Insn]:
    """Return `ret` when an IPv6 source starts with one of `entries` (32-bit words)."""
    out: list[Insn] = []
    for words in entries:
        m = len(words)
        for j, w in enumerate(words):
            out.append((_LD_W, 0, 0, _NET + 8 + 4 * j))
            out.append((_JEQ, 0, 2 * (m - 1 - j) + 1, w))  # a mismatch skips the entry
        out.append((_RET, 0, 0, ret))
    return out


def program(addresses: Sequence[str], networks: Sequence[str],
            exempt: Sequence[str]) -> list[Insn]:
    """A filter dropping packets from `addresses` and from `networks` (/24 IPv4, /64 IPv6),
    `exempt` apart (trusted addresses inside a blocked network); [] when nothing is blocked.
    Newest first: what does not fit in MAX_INSNS is left out (refused at accept instead).
    Networks go in only with every exempt address, so a trusted scraper is never dropped."""
    v4_addr = [a for a in map(_v4, addresses) if a is not None]
    v6_addr = [w for w in (_v6_words(a, 4) for a in addresses) if w is not None]
    v4_net = [_v4(n.split("/")[0]) for n in networks if n.endswith("/24")]
    v4_nets = [n & 0xFFFFFF00 for n in v4_net if n is not None]
    v6_nets = [w for w in (_v6_words(n, 2) for n in networks if n.endswith("/64"))
               if w is not None]
    v4_ok = [a for a in map(_v4, exempt) if a is not None]
    v6_ok = [w for w in (_v6_words(a, 4) for a in exempt) if w is not None]
    budget = MAX_INSNS - 16
    nets_cost = len(v4_ok) + len(v4_nets) + 9 * len(v6_ok) + 5 * len(v6_nets) + 12
    if nets_cost > budget // 2:
        v4_ok, v4_nets, v6_ok, v6_nets = [], [], [], []
        nets_cost = 0
    room = budget - nets_cost
    v6_addr = v6_addr[:max(0, room // 2) // 9]
    room -= 9 * len(v6_addr)
    v4_addr = v4_addr[:max(0, room - 2 * (room // _CHUNK) - 2)]
    if not (v4_addr or v4_nets or v6_addr or v6_nets):
        return []

    v4: list[Insn] = [(_LD_W, 0, 0, _NET + 12)]
    v4 += _any_equal(v4_addr, DROP)
    if v4_nets:
        v4 += _any_equal(v4_ok, ACCEPT)
        v4 += [(_AND, 0, 0, 0xFFFFFF00)]
        v4 += _any_equal(v4_nets, DROP)
    v4 += [(_RET, 0, 0, ACCEPT)]
    v6: list[Insn] = []
    if v6_addr or v6_nets:
        v6 += _any_prefix(v6_addr, DROP)
        if v6_nets:
            v6 += _any_prefix(v6_ok, ACCEPT)
            v6 += _any_prefix(v6_nets, DROP)
    v6 += [(_RET, 0, 0, ACCEPT)]
    # A = the IP version; IPv4 falls into its part, anything else jumps over it.
    head: list[Insn] = [(_LD_B, 0, 0, _NET), (_RSH, 0, 0, 4), (_JEQ, 1, 0, 4),
                        (_JA, 0, 0, len(v4))]
    if v6_addr or v6_nets:
        v6 = [(_JEQ, 1, 0, 6), (_RET, 0, 0, ACCEPT)] + v6
    return head + v4 + v6


def encode(prog: Sequence[Insn]) -> bytes:
    """`struct sock_filter[]` as the kernel reads it."""
    return b"".join(struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)
                    for code, jt, jf, k in prog)


class ListenerFilter:
    """The program attached to one listening socket; `works` turns False for good at the
    first refusal (another OS, a seccomp profile), leaving refusal at accept alone."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.works = sys.platform.startswith("linux")
        self.attached = 0  # instructions in the program attached now (0: none)

    def set(self, addresses: Sequence[str], networks: Sequence[str],
            exempt: Sequence[str]) -> bool:
        """Attach the program for these blocks (detach when none); False when it cannot."""
        if not self.works:
            return False
        prog = program(addresses, networks, exempt)
        try:
            if not prog:
                if self.attached:
                    self.sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
                self.attached = 0
                return True
            # struct sock_fprog {unsigned short len; struct sock_filter *filter;}: the kernel
            # copies the program during the call, so the buffer need not outlive it.
            buf = ctypes.create_string_buffer(encode(prog))
            fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
            self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        except (OSError, ValueError, struct.error):
            self.works = False
            return False
        self.attached = len(prog)
        return True
