"""What one metrics server may cost (`Limits`), shared by its parser, admission, rendering
and loop; the defaults are documented in SECURITY.md "Limits of the HTTP server"."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one metrics server may cost; the defaults are documented in SECURITY.md."""

    max_connections: int = 64
    max_head_bytes: int = 8192
    max_headers: int = 64
    request_timeout_s: float = 10.0  # first byte of a request -> last byte of its response
    idle_timeout_s: float = 30.0  # a keep-alive connection waiting for its next request
    first_request_s: float = 5.0  # a new connection (TLS handshake included) -> first byte
    max_requests_per_connection: int = 100
    requests_per_s: float = 100.0  # global, token bucket
    burst: int = 20
    renders_per_s: float = 4.0  # renderings; beyond this, waiting scrapes share the next one
    render_cpu_share: float = 0.05  # ... and rendering takes at most this share of a CPU
    render_late_s: float = 2.0  # a rendering held this long: its scrapes get the previous one
    render_replace_s: float = 6.0  # ... and held this long: a new thread renders from then on
    auth_fail_delay_s: float = 1.0
    strike_limit: int = 30  # failed auth or malformed requests of one address within ...
    strike_block_s: float = 30.0  # ... this long: refuse the address at accept this long
    network_strike_limit: int = 100  # the same for a network (/24, /64), trusted addresses apart
    blocked_addresses: int = 4096  # addresses remembered (oldest forgotten first)
    accept_pause_s: float = 0.5  # after EMFILE/ENFILE on accept
    refused_pause_s: float = 0.05  # after a burst of connections from refused addresses,
    refused_pause_max_s: float = 0.4  # ... doubled at each burst in a row, up to this
    kernel_filter: bool = True  # Linux: blocked addresses' SYNs dropped by a socket filter
    trusted_s: float = 600.0  # an address whose request passed auth is preferred this long
    accepts_per_s: float = 500.0  # new connections taken from the listen queue (bucket)
    accept_burst: int = 100
    handshakes_per_s: float = 20.0  # TLS handshakes begun for addresses not trusted (bucket)
    handshake_burst: int = 10
    error_drain_bytes: int = 8192  # read and dropped after a refused request, before closing


def fd_bounded_connections(limit: int) -> int:
    """`limit`, lowered so tfobs holds at most 1/16 of the process's fd soft limit."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return limit
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return limit
    return max(2, min(limit, soft // 16))
