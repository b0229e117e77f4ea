"""Release-ready packaging: `python -m build` makes a wheel and an sdist that `twine check`
accepts, with the metadata users look for; the wheel installs with each extra into a fresh
venv (real dependency resolution, no `--no-deps`), where `tfobs --help` and `tfobs analyze`
run, and the optional parts work exactly when their extra is installed."""

from __future__ import annotations

import email
import json
import pathlib
import sys
import tarfile
import zipfile
from typing import Any

import pytest

import tfobs
from tests.conftest import CAPTURES
from tests.support.dists import built_dists, each_at_once, fresh_venv, run

CAPTURE = CAPTURES / "generated__tf2.20cpu__tfkeras_fit.xplane.pb"
EXTRAS = ["", "otlp", "nvml", "all"]

# Run in the fresh venv: what the optional parts say there. OtelExporter is what enable()
# builds when an OTLP endpoint is set; its ImportError is the one line the runtime logs.
PROBE = """
import json
from tfobs.config import Config
from tfobs.export.otel import OtelExporter, otlp_exporter
from tfobs.sources.nvml import NvmlSampler
out = {}
try:
    otlp_exporter("127.0.0.1:4317", "grpc")
    otlp_exporter("127.0.0.1:4318", "http/protobuf")
    OtelExporter(Config(otlp_endpoint="127.0.0.1:4317")).shutdown(1.0)
    out["otlp"] = "ok"
except ImportError as exc:
    out["otlp"] = str(exc)
sampler = NvmlSampler(1.0)
sampler.start()
sampler.stop(1.0)
out["nvml"] = sampler.unavailable_reason
print(json.dumps(out))
"""


def _metadata(wheel: pathlib.Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = f"tfobs-{tfobs.__version__}.dist-info/METADATA"
        return email.message_from_bytes(zf.read(name))


def _req_name(req: str) -> str:
    for sep in "<>=!~;[ ":
        req = req.split(sep, 1)[0]
    return req.lower()


@pytest.mark.slow
def test_wheel_and_sdist_pass_twine_check_with_metadata() -> None:
    wheel, sdist = built_dists()
    out = run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    assert out.stdout.count("PASSED") == 2, out.stdout

    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "tfobs/py.typed" in names and "tfobs/cli.py" in names
    assert not any(n.startswith("tests/") for n in names)
    meta = _metadata(wheel)
    assert meta["Name"] == "tfobs" and meta["Version"] == tfobs.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta["Requires-Python"] == ">=3.10"
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert {"otlp", "nvml", "all", "tensorflow"} <= set(meta.get_all("Provides-Extra"))

    requires = meta.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    # Optional parts are extras; TensorFlow is the user's; no upper cap blocks a newer TF.
    assert {_req_name(r) for r in base} == {"numpy", "protobuf", "prometheus-client"}
    assert not any("<" in r for r in base), base
    otlp = {_req_name(r) for r in requires if 'extra == "otlp"' in r}
    assert {"opentelemetry-exporter-otlp-proto-grpc", "grpcio"} <= otlp
    assert any(_req_name(r) == "nvidia-ml-py" and 'extra == "nvml"' in r for r in requires)

    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml", "tfobs/py.typed"} <= members


# The lowest versions pyproject.toml allows for the core (TensorFlow 2.16's own floors).
FLOORS = ["numpy==1.23.5", "protobuf==3.20.3", "prometheus-client==0.20.0"]


def _install(extra: str, where: pathlib.Path, wheel: pathlib.Path) -> pathlib.Path:
    bin_dir = fresh_venv(where)
    if extra == "floors":
        specs = [str(wheel), *FLOORS]
    else:
        specs = [f"{wheel}[{extra}]" if extra else str(wheel)]
    run([str(bin_dir / "pip"), "install", "--disable-pip-version-check", "--quiet", *specs])
    return bin_dir


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh venv per extra with the wheel installed, all installs at once (they wait on
    downloads and unpacking more than on each other); pip's cache is shared."""
    wheel, _ = built_dists()
    root = tmp_path_factory.mktemp("extras")
    return each_at_once([*EXTRAS, "floors"],
                        lambda e: _install(e, root / (e or "base"), wheel))


@pytest.mark.slow
@pytest.mark.parametrize("extra", EXTRAS, ids=lambda e: e or "base")
def test_wheel_installs_with_each_extra_and_runs(extra: str, venvs: dict[str, Any],
                                                 tmp_path: pathlib.Path) -> None:
    if isinstance(venvs[extra], BaseException):
        raise venvs[extra]
    bin_dir = venvs[extra]
    run([str(bin_dir / "pip"), "check"])
    listed = run([str(bin_dir / "pip"), "list", "--format", "json"]).stdout
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed)}
    with_otlp, with_nvml = extra in ("otlp", "all"), extra in ("nvml", "all")
    assert "tensorflow" not in installed  # the training job brings its own
    assert ("opentelemetry-exporter-otlp-proto-grpc" in installed) == with_otlp
    assert ("grpcio" in installed) == with_otlp
    assert ("nvidia-ml-py" in installed) == with_nvml

    help_text = run([str(bin_dir / "tfobs"), "--help"]).stdout
    assert "analyze" in help_text and "demo" in help_text
    out = run([str(bin_dir / "tfobs"), "analyze", str(CAPTURE), "--format", "json"]).stdout
    report = json.loads(out)
    assert report["steps"]["method"] == "markers" and report["steps"]["count"] == 18

    probe = json.loads(run([str(bin_dir / "python"), "-c", PROBE], cwd=tmp_path).stdout)
    if with_otlp:
        assert probe["otlp"] == "ok"
    else:
        assert "pip install 'tfobs[otlp]'" in probe["otlp"]
    if with_nvml:  # pynvml imports; this machine has no NVIDIA driver
        assert "not installed" not in probe["nvml"] and probe["nvml"]
    else:
        assert "pip install 'tfobs[nvml]'" in probe["nvml"]


@pytest.mark.slow
def test_lowest_allowed_numpy_and_protobuf_reduce_every_capture_the_same(
        venvs: dict[str, Any]) -> None:
    """numpy 1.23.5 and protobuf 3.20.3 (no `GetMessageClass`, pure-Python parsing): the
    same `tfobs analyze` report as this venv's newest numpy and protobuf, capture by capture."""
    if isinstance(venvs["floors"], BaseException):
        raise venvs["floors"]
    bin_dir = venvs["floors"]
    listed = run([str(bin_dir / "pip"), "list", "--format", "json"]).stdout
    versions = {p["name"].lower(): p["version"] for p in json.loads(listed)}
    assert (versions["numpy"], versions["protobuf"]) == ("1.23.5", "3.20.3")
    captures = sorted(CAPTURES.glob("*.xplane.pb"))
    assert len(captures) >= 3
    # One command per venv for every capture (`tfobs analyze A B ...` reports each as it
    # would alone, in a list): a process per capture and venv took 100 s of CI's CPU.
    cmd = ["analyze", *map(str, captures), "--format", "json"]
    old = json.loads(run([str(bin_dir / "tfobs"), *cmd]).stdout)
    new = json.loads(run([sys.executable, "-m", "tfobs.cli", *cmd]).stdout)
    assert len(old) == len(new) == len(captures)
    for capture, a, b in zip(captures, old, new, strict=True):
        assert a == b, capture.name
