"""Where TensorFlow cannot be imported, `tfobs.enable()` and `tfobs demo` say so in one line
that names the fix, instead of ending in a ModuleNotFoundError traceback. Each runs in a
subprocess whose import system refuses tensorflow (a meta-path finder placed first), as a
Python without TensorFlow installed would."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

BLOCK_TENSORFLOW = """
import sys
class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "tf_keras"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoTensorFlow())
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    return subprocess.run([sys.executable, "-c", BLOCK_TENSORFLOW + code], cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)


def test_enable_without_tensorflow_is_one_line_and_the_script_goes_on() -> None:
    proc = _run("import tfobs\nrt = tfobs.enable(metrics_port=0)\n"
                "print('script goes on, handle', rt)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "script goes on, handle None"
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"tfobs: TensorFlow is not installed for this Python ({sys.executable}); tfobs stays "
        "off and training goes on. To profile, install it in the same environment: pip "
        "install 'tensorflow>=2.16' (or tensorflow-cpu)"], proc.stderr


def test_demo_without_tensorflow_is_one_line_exit_2() -> None:
    proc = _run("from tfobs.cli import main\nsys.exit(main(['demo', '--seconds', '1']))\n")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"tfobs demo: TensorFlow is not installed for this Python ({sys.executable}); install "
        "it in the same environment: pip install 'tensorflow>=2.16' (or, in a clone of tfobs: "
        "pip install -e '.[all,tensorflow]')"], proc.stderr
