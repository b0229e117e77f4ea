"""The public entry point: `tfobs.enable()` takes every option as a typed keyword, and the
keywords and the options table (docs/options.md) are what `Config`'s fields generate."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import pathlib
import re
import subprocess
import sys
import typing

import pytest

import tfobs
from tfobs.commands.options import enable_keywords_module, markdown_table
from tfobs.config import OPTIONS, Config
from tfobs.runtime import enable_options

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPTIONS_PAGE = ROOT / "docs" / "options.md"
FIX = "run `python tools/write_options.py`"


def test_enable_keywords_are_the_config_fields_typed_as_they_are() -> None:
    params = inspect.signature(tfobs.enable).parameters
    assert [p.kind for p in params.values()] == [inspect.Parameter.VAR_KEYWORD]
    keywords = typing.get_type_hints(enable_options.EnableOptions)
    fields = typing.get_type_hints(Config)
    assert list(keywords) == [f.name for f in dataclasses.fields(Config)]
    for name, hint in keywords.items():
        assert hint == fields[name] | None, name  # None: not given
    assert not enable_options.EnableOptions.__required_keys__


def test_enable_keywords_module_is_generated_from_config() -> None:
    text = pathlib.Path(enable_options.__file__).read_text()
    assert text == enable_keywords_module(), f"enable_options.py is stale: {FIX}"


def test_options_page_table_is_generated_from_config() -> None:
    text = OPTIONS_PAGE.read_text()
    section = re.search(r"<!-- section: options.*?-->(.*?)<!-- /section: options -->", text,
                        re.S)
    assert section is not None, "docs/options.md has no options section"
    table = section.group(1)[section.group(1).index("| Option |"):]
    assert table == markdown_table(), f"docs/options.md's table is stale: {FIX}"
    rows = [r for r in table.splitlines() if r.startswith("| `")]
    assert [r.split(" | ")[1] for r in rows] == [f"`{o.env}`" for o in OPTIONS]


def test_options_command_prints_the_table() -> None:
    out = subprocess.run([sys.executable, "-m", "tfobs.cli", "options"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out == markdown_table()
    assert "| `tf_job` | `TFOBS_TF_JOB` | `\"\"` |" in out
    assert "| `max_capture_bytes` | `TFOBS_MAX_CAPTURE_BYTES` | `268435456` (256 MiB) |" in out


def test_write_options_check_passes_on_this_checkout() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "write_options.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


@pytest.mark.slow
def test_a_type_checker_sees_each_keyword_and_its_type(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("import tfobs\n"
                      "tfobs.enable(interval_steps=5, framework='jax', metrics_port=None)\n"
                      "tfobs.enable(interval_steps='5')\n"
                      "tfobs.enable(framework='pytorch')\n"
                      "tfobs.enable(intervl_steps=5)\n")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir",
                           str(tmp_path / "cache"), "--follow-imports=silent", script.name],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    errors = [line for line in done.stdout.splitlines()
              if line.startswith(f"{script.name}:") and ": error:" in line]
    assert [int(line.split(":")[1]) for line in errors] == [3, 4, 5], done.stdout
    assert 'did you mean "interval_steps"' in errors[2]


def test_enable_false_starts_nothing() -> None:
    assert tfobs.enable(enabled=False) is None


def test_unknown_keyword_is_refused_naming_it() -> None:
    with pytest.raises(tfobs.ConfigError, match="unknown tfobs option 'intervl_steps'"):
        tfobs.enable(intervl_steps=5)  # type: ignore[call-arg]


def test_write_options_replaces_only_the_table() -> None:
    spec = importlib.util.spec_from_file_location("write_options",
                                                  ROOT / "tools" / "write_options.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    stale = ("# Options\n\n<!-- section: options (runtime) -->\nProse kept.\n\n"
             "| Option | Environment variable | Default | Meaning |\n|---|---|---|---|\n"
             "| `gone` | `TFOBS_GONE` | `1` | An option no longer there. |\n"
             "<!-- /section: options -->\nAfter.\n")
    fresh = tool.page_with_table(stale, markdown_table())
    assert "TFOBS_GONE" not in fresh and "Prose kept.\n\n| Option |" in fresh
    assert fresh.endswith(markdown_table() + "<!-- /section: options -->\nAfter.\n")
    with pytest.raises(ValueError, match="section"):
        tool.page_with_table("# Options\nno section\n", markdown_table())


def test_enable_called_inside_a_tf_function_starts_the_one_runtime(tmp_path) -> None:
    # AutoGraph converted enable(): the converted copy lost its `global` assignment, so the
    # runtime it started was nobody's and a second enable() started another (two servers).
    code = (
        "import threading, tensorflow as tf, tfobs\n"
        "from tfobs.runtime.lifecycle import current\n"
        "@tf.function\n"
        "def g(x):\n"
        f"    tfobs.enable(metrics_port=-1, quiet=True, capture_dir={str(tmp_path)!r})\n"
        "    return tf.reduce_sum(x)\n"
        "g(tf.ones(3))\n"
        "first = current()\n"
        f"again = tfobs.enable(metrics_port=-1, quiet=True, capture_dir={str(tmp_path)!r})\n"
        "names = [t.name for t in threading.enumerate() if t.name.startswith('tfobs-')]\n"
        "print(first is not None and again is first, names.count('tfobs-capture'))\n"
        "tfobs.disable()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=pathlib.Path(__file__).resolve().parents[2], timeout=180,
                         check=True).stdout.split()
    assert out == ["True", "1"]


def test_a_script_named_like_a_standard_module_is_named_not_hung(tmp_path) -> None:
    """A training script saved as http.py: enable() imports Python's http (the metrics
    server), which runs the script again as module `http`, whose enable() waited for the
    lock its own thread held: the job hung at its first line. Now the second call returns
    None with one line naming the file and the fix, and the first goes on without metrics."""
    script = tmp_path / "http.py"
    script.write_text(
        "import tfobs\n"
        f"rt = tfobs.enable(quiet=True, metrics_port=0, capture_dir={str(tmp_path)!r})\n"
        "print('started', __name__, rt is not None, flush=True)\n"
        "if __name__ == '__main__':\n"
        "    tfobs.disable()\n")
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["started http False", "started __main__ True"]
    hint = f"{script} is imported as Python's 'http' module (rename it"
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("tfobs:")]
    assert len(lines) == 2 and all(hint in ln for ln in lines), lines
    assert "called again while it was starting" in lines[0]
    assert "metrics are not served" in lines[1]


def test_shadowing_hint_is_empty_for_python_own_modules() -> None:
    from tfobs.runtime.lifecycle import shadowing_hint

    assert shadowing_hint() == ""


SPAWNED = '''
import multiprocessing as mp, sys, threading
import tfobs
from tfobs.runtime.lifecycle import current

RUNTIME = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", framework="tensorflow",
                       nvml=False, reduce_in="thread")


def at_import(_):
    """What the worker's import of this script started."""
    return current() is not None, sorted(t.name for t in threading.enumerate())


def enabled_in_target(queue):
    """A child that profiles itself: enable() in the function it runs."""
    runtime = tfobs.enable(metrics_port=0, metrics_bind="127.0.0.1", framework="tensorflow",
                           nvml=False, reduce_in="thread")
    queue.put(runtime is not None)
    tfobs.disable()


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    with ctx.Pool(2) as pool:
        print("workers", pool.map(at_import, range(2)))
    queue = ctx.Queue()
    child = ctx.Process(target=enabled_in_target, args=(queue,))
    child.start()
    print("target", queue.get(timeout=60))
    child.join(60)
    print("parent", RUNTIME is not None)
    tfobs.disable()
'''


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_top_level_enable_starts_nothing_in_spawned_workers(tmp_path, method: str) -> None:
    # Each spawn / forkserver worker imports the main script again: its enable() started a
    # whole tfobs per worker (threads, a metrics server on another port, a line saying the
    # parent's port was "in use (another job or notebook serving there?)").
    script = tmp_path / "job.py"
    script.write_text(SPAWNED)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TFOBS_QUIET": "1"}
    out = subprocess.run([sys.executable, str(script), method], capture_output=True,
                         text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "workers [(False, ['MainThread']), (False, ['MainThread'])]" in lines, out.stdout
    assert "target True" in lines and "parent True" in lines, out.stdout
    assert "is in use" not in out.stderr, out.stderr
