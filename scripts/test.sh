#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (run as root), then runs them.
# Debian packages: prometheus (server + promtool), chromium + chromium-driver (page tests),
# gcc and python3-dev where missing (the compiled reader).
# Python: a fresh .venv with tfobs and its test extras (ruff, mypy, pytest, ...). Extra
# arguments go to pytest (e.g. -m "not slow" for the quick tests).
# Then scripts/jax_venv.sh: the JAX live path's tests in a venv without TensorFlow, and
# scripts/compat.sh: a subset of the tests on the oldest supported TensorFlow.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
# A C compiler and Python's headers build tfobs's compiled reader (tfobs/xspace/_wire.c);
# the suite holds it equal to the numpy reader that installs without them.
command -v gcc >/dev/null || need+=(gcc)
python3 -c 'import os, sysconfig; os.stat(sysconfig.get_paths()["include"] + "/Python.h")' \
  2>/dev/null || need+=(python3-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'

.venv/bin/ruff check .
.venv/bin/mypy  # settings in pyproject.toml [tool.mypy]: the whole tfobs package
# -rs: print the reason of every skipped test, so a skip never hides a missing feature.
.venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=25 "$@"

# The JAX live path in a venv without TensorFlow (.venv-jax/).
if [ "${TFOBS_JAX:-1}" != 0 ]; then
  bash scripts/jax_venv.sh
fi

# Compatibility job: the oldest supported TensorFlow in its own venv (.venv-compat/).
# TFOBS_COMPAT=0 leaves it out (a quick local run of a few tests).
if [ "${TFOBS_COMPAT:-1}" != 0 ]; then
  bash scripts/compat.sh
fi
