"""Numbers written as text in GPU events' stats (`kernel_details`, `memcpy_details`) that
int() refuses: a digit that is no decimal one, or a number thousands of digits long. Each is
a value read as absent or capped, not a capture lost whole."""

from __future__ import annotations

import pytest

from tests.conftest import CAPTURES
from tfobs.analysis.kernels import parse_kernel_details
from tfobs.analysis.pipeline import reduce_xspace
from tfobs.xspace import schema

LONG = "9" * 5_000  # past Python's 4,300 digits for int() of a text


def _with_stat(capture: str, stat: str, value: str) -> bytes:
    x = schema.XSpace()
    x.ParseFromString((CAPTURES / capture).read_bytes())
    changed = 0
    for plane in x.planes:
        ids = {k for k, m in plane.stat_metadata.items() if m.name == stat}
        for line in plane.lines:
            for event in line.events:
                for st in event.stats:
                    if st.metadata_id in ids:
                        st.str_value = value
                        changed += 1
    assert changed
    return x.SerializeToString()


@pytest.mark.parametrize("details", [
    f"regs:{LONG} grid:1,1,1", f"regs:32 grid:{LONG},1,1", "regs:\u00b2 block:\u00b2,1,1",
    f"static_shared:{'0' * 5_000}1 block:{'0' * 5_000}4,1,1",
])
def test_kernel_details_of_odd_numbers_reduce(details: str) -> None:
    data = _with_stat("recorded__h100_jax0.11.2__bf16_matmul.xplane.pb", "kernel_details",
                      details)
    s = reduce_xspace(data)
    assert s.kernels.items and s.devices[0].kernel_count > 0


def test_memcpy_details_of_a_long_size_reduce() -> None:
    data = _with_stat("recorded__h100_jax0.11.2__h2d_d2h_copies.xplane.pb", "memcpy_details",
                      f"kind_src:pinned size:{LONG}")
    s = reduce_xspace(data)
    assert max(s.devices[0].copy_bytes.values()) >= 2**48 / max(s.steps.count, 1)


def test_the_numbers_read_are_the_same() -> None:
    from tfobs.analysis.gpu_idle import _copy_bytes

    launch = parse_kernel_details(
        "regs:0032 grid:0001,2,3 block:4,1,1 static_shared:5 dynamic_shared:7 occ_pct:50")
    assert (launch.registers, launch.grid, launch.block, launch.shared) == (32, "1,2,3",
                                                                           "4,1,1", 12)
    launch = parse_kernel_details(f"regs:{'0' * 5_000}9 grid:1,2 block:\u0661,1,1")
    assert (launch.registers, launch.grid, launch.block) == (9, "1,1,1", "1,1,1")
    assert parse_kernel_details(f"regs:{2**32} static_shared:\u00b2").registers == 0
    assert _copy_bytes("4096") == 4096 and _copy_bytes("0" * 5_000 + "12") == 12
    assert _copy_bytes(str(2**48 + 1)) == 2**48 and _copy_bytes(LONG) == 2**48
