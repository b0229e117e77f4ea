"""Where TensorFlow cannot be imported, `tfobs.enable()` and `tfobs demo` say so in one line
that names the fix, instead of ending in a ModuleNotFoundError traceback. Each runs in a
subprocess whose import system refuses tensorflow (a meta-path finder placed first), as a
Python without TensorFlow installed would."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

BLOCK = """
import sys
class NoFramework:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, NoFramework())
"""
NO_TENSORFLOW = ("tensorflow", "keras", "tf_keras")
NO_FRAMEWORK = (*NO_TENSORFLOW, "jax", "jaxlib")  # neither TensorFlow nor JAX


def _run(code: str, blocked: tuple[str, ...] = NO_TENSORFLOW) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFOBS_")}
    return subprocess.run([sys.executable, "-c", BLOCK.format(blocked=blocked) + code],
                          cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_enable_without_any_framework_is_one_line_and_the_script_goes_on() -> None:
    proc = _run("import tfobs\nrt = tfobs.enable(metrics_port=0)\n"
                "print('script goes on, handle', rt)\n", NO_FRAMEWORK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "script goes on, handle None"
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"tfobs: TensorFlow is not installed for this Python ({sys.executable}); tfobs stays "
        "off and training goes on. To profile, install it in the same environment: pip "
        "install 'tensorflow>=2.16' (or tensorflow-cpu; a JAX job: pip install "
        "'tfobs[jax]')"], proc.stderr


def test_enable_for_jax_without_jax_names_the_jax_install() -> None:
    proc = _run("import tfobs\nrt = tfobs.enable(metrics_port=0, framework='jax')\n"
                "print('script goes on, handle', rt)\n", NO_FRAMEWORK)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "script goes on, handle None"
    assert proc.stderr.strip().splitlines() == [
        f"tfobs: JAX is not installed for this Python ({sys.executable}); tfobs stays off "
        "and training goes on. To profile, install it in the same environment: pip install "
        "'tfobs[jax]'"], proc.stderr


def test_enable_without_tensorflow_profiles_a_jax_job() -> None:
    """No TensorFlow but JAX: a JAX job, profiled with JAX's profiler."""
    if importlib.util.find_spec("jax") is None:  # not imported here: the job's own process
        pytest.skip("needs JAX")
    proc = _run("import tfobs\nrt = tfobs.enable(metrics_port=-1, quiet=True)\n"
                "print(rt.framework, 'tensorflow' in sys.modules)\ntfobs.disable()\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "jax False", proc.stderr


def test_demo_without_tensorflow_is_one_line_exit_2() -> None:
    proc = _run("from tfobs.cli import main\nsys.exit(main(['demo', '--seconds', '1']))\n")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"tfobs demo: TensorFlow is not installed for this Python ({sys.executable}); install "
        "it in the same environment: pip install 'tensorflow>=2.16' (or, in a clone of tfobs: "
        "pip install -e '.[all,tensorflow]'), or run the JAX demo: tfobs demo --framework "
        "jax"], proc.stderr
