"""Copies of host arrays into device buffers on a host-only JAX capture (PjRt's `H2D
Dispatch`): XProf counts them as host compute; tfobs times them inside the steps
(`steps.host_to_device_s`) and names them (`host_to_device_copies`)."""

from __future__ import annotations

import pytest

import tfobs
from tests.conftest import CAPTURES
from tfobs.analysis.advice.placement import H2D_SHARE
from tfobs.analysis.timeline import Timeline
from tfobs.xspace.reader import parse

PUT = CAPTURES / "generated__jax0.10cpu__device_put_each_step.xplane.pb"


def _copies_s(path) -> float:
    """Every H2D Dispatch event's seconds in the capture (they do not overlap here)."""
    host = Timeline(parse(path.read_bytes()).plane("/host:CPU"))
    ids = host.mids_named("H2D Dispatch")
    return sum(int((ld.end_arr - ld.start_arr)[[m in ids for m in ld.mid_arr.tolist()]].sum())
               for ld in host.lines) / 1e12


def test_a_batch_copied_to_the_device_every_step_is_timed_and_named() -> None:
    s = tfobs.analyze(PUT)
    st = s.steps
    # Each kept step holds one 16 MiB copy: the per-step figure is a share of all copies
    # (the dropped first and last steps hold theirs too), well above the threshold.
    assert st.count >= 8
    assert st.host_to_device_s * st.count <= _copies_s(PUT) + 1e-9
    assert st.host_to_device_s >= 0.5 * _copies_s(PUT) / (st.count + 2)
    assert st.host_to_device_s >= H2D_SHARE * st.mean_s
    a = {x.code: x for x in s.advice}["host_to_device_copies"]
    assert a.evidence["host_to_device_s"] == st.host_to_device_s
    assert "jax.device_put" in a.message and "prefetch" in a.fix
    assert s.breakdown_ratio["input"] == 0.0  # XProf sees no input in them


@pytest.mark.parametrize("name", ["step_annotation", "python_loader_thread",
                                  "tiny_steps_long"])
def test_steps_that_copy_nothing_in_them_read_none(name: str) -> None:
    s = tfobs.analyze(CAPTURES / f"generated__jax0.10cpu__{name}.xplane.pb")
    assert s.steps.host_to_device_s < H2D_SHARE * s.steps.mean_s
    assert "host_to_device_copies" not in {a.code for a in s.advice}
