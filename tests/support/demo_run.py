"""One healthy `tfobs demo` run shared by the tests that read it (trains until 3 windows).

Several tests ask different things of the same default workload: that it reads healthy,
that its advice lines hold no warning, that it runs clean on the installed TensorFlow. They
read one run (`tests/conftest.py`'s `healthy_demo` fixture) instead of training three times.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).parents[2]

# Short windows often, the overhead budget loosened so the run shows several windows on a
# shared 2-core machine, a metrics server on a free port as a user's run has. The run ends
# after 3 windows, not on a clock: beside two TensorFlow lanes a CI run took 1 s a step and
# 20 s of training held one window. `--seconds` only caps a run that never gets there.
ARGS = ("--windows", "3", "--seconds", "180", "--port", "0", "--interval-steps", "20",
        "--steps-per-window", "8", "--overhead-budget", "0.3")


@dataclasses.dataclass(frozen=True)
class DemoRun:
    returncode: int
    stdout: str
    stderr: str

    def window_lines(self, outcome: str = "captured") -> list[str]:
        return [ln for ln in self.stdout.splitlines()
                if ln.startswith("window ") and f"[{outcome}]" in ln]

    def done_fields(self) -> dict[str, str]:
        """`key=value` fields of the closing `tfobs demo done` line ({} if it is missing)."""
        for line in self.stdout.splitlines():
            if line.startswith("tfobs demo done"):
                return dict(kv.split("=", 1) for kv in line.split()[3:] if "=" in kv)
        return {}


def run_demo(folder: pathlib.Path, *extra: str, args: tuple[str, ...] = ARGS) -> DemoRun:
    """`tfobs demo` in a subprocess with `args` and `extra`, its captures under `folder`."""
    proc = subprocess.run(
        [sys.executable, "-m", "tfobs.cli", "demo", *args, *extra],
        env={**os.environ, "PYTHONPATH": str(ROOT), "TFOBS_CAPTURE_DIR": str(folder),
             "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True, text=True, timeout=300, cwd=folder)
    return DemoRun(proc.returncode, proc.stdout, proc.stderr)
