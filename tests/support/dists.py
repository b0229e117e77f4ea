"""tfobs's wheel and sdist, built once per test session, and fresh venvs to install into.

Fresh venvs come from `python -m venv`, so their pip is the one this Python ships (what a
user's new environment has), not the test venv's. Downloads go through pip's own cache.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[2]


@functools.cache
def built_dists() -> tuple[pathlib.Path, pathlib.Path]:
    """(wheel, sdist) that `python -m build` makes from this checkout (the wheel from the
    sdist, so a file missing from the sdist fails here)."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="tfobs-dist-"))
    run([sys.executable, "-m", "build", "--outdir", str(out), str(REPO)], timeout=600)
    wheels, sdists = sorted(out.glob("tfobs-*.whl")), sorted(out.glob("tfobs-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return wheels[0], sdists[0]


def run(cmd: list[str], timeout: float = 600, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run `cmd`; on failure the assertion shows its output."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def base_python() -> str:
    """The interpreter this test venv was made from (a fresh venv must not nest in ours)."""
    return str(pathlib.Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}")


def fresh_venv(where: pathlib.Path) -> pathlib.Path:
    """A new venv at `where`; returns its bin folder."""
    run([base_python(), "-m", "venv", str(where)], timeout=300)
    return where / "bin"


def dry_run(pip: pathlib.Path, requirements: list[str], report: pathlib.Path) -> dict[str, str]:
    """{name: version} pip would install for `requirements` into pip's (fresh) venv."""
    run([str(pip), "install", "--disable-pip-version-check", "--quiet", "--dry-run",
         "--report", str(report), *requirements], timeout=900)
    data = json.loads(report.read_text())
    return {_norm(item["metadata"]["name"]): item["metadata"]["version"]
            for item in data["install"]}


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def each_at_once(keys: Iterable[Any], job: Callable[[Any], Any]) -> dict[Any, Any]:
    """`job(key)` for every key in threads at once (each is a pip process; together they
    keep the cores busy): {key: its result, or the exception it raised, which that key's
    test re-raises}."""
    keys = list(keys)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(keys))) as pool:
        futures = {key: pool.submit(job, key) for key in keys}
        results: dict[Any, Any] = {}
        for key, future in futures.items():
            try:
                results[key] = future.result()
            except BaseException as exc:  # reported by that key's test
                results[key] = exc
    return results
