#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (run as root), then runs them.
# Debian packages: prometheus (server + promtool), chromium + chromium-driver (page tests),
# gcc and python3-dev where missing (the compiled reader).
# Python: a fresh .venv with tfobs and its test extras (ruff, mypy, pytest, ...). Extra
# arguments go to pytest (e.g. -m "not slow" for the quick tests).
# Then scripts/jax_venv.sh: the JAX live path's tests in a venv without TensorFlow, and
# scripts/compat.sh: a subset of the tests on the oldest supported TensorFlow. With no
# arguments the tests that wait on pip (packaging, version resolution) and those two venvs'
# builds run in a background lane beside the main suite.
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
pytest=(.venv/bin/python -m pytest -q -rs -p no:cacheprovider)  # -rs: every skip's reason
side_jax=$([ "${TFOBS_JAX:-1}" != 0 ] && echo 1 || echo 0)
side_compat=$([ "${TFOBS_COMPAT:-1}" != 0 ] && echo 1 || echo 0)

if [ $# -gt 0 ]; then  # a chosen run (e.g. -m "not slow"): the suite as asked, in one lane
  "${pytest[@]}" "$@"
else
  # Two lanes. What waits on pip and downloads rather than on the CPU runs in the background
  # while the main suite runs: the packaging tests (fresh venvs from the built wheel), the
  # supported TensorFlow releases' resolution, and the builds of the side venvs below.
  install_tests=(tests/deploy/test_packaging.py
                 tests/deploy/test_versions.py::test_supported_tensorflow_resolves_with_tfobs)
  logs=$(mktemp -d)
  (
    set +e
    [ "$side_jax" = 1 ] && { TFOBS_BUILD_ONLY=1 bash scripts/jax_venv.sh > "$logs/jax-build.log" 2>&1; echo $? > "$logs/jax-build.rc"; }
    [ "$side_compat" = 1 ] && { TFOBS_BUILD_ONLY=1 bash scripts/compat.sh > "$logs/compat-build.log" 2>&1; echo $? > "$logs/compat-build.rc"; }
    "${pytest[@]}" "${install_tests[@]}" > "$logs/install-tests.log" 2>&1; echo $? > "$logs/install-tests.rc"
  ) &
  lane=$!
  deselect=()
  for t in "${install_tests[@]}"; do deselect+=(--deselect "$t"); done
  main_rc=0
  "${pytest[@]}" --durations=25 "${deselect[@]}" || main_rc=$?
  wait "$lane"
  lane_rc=0
  for part in install-tests jax-build compat-build; do
    [ -f "$logs/$part.rc" ] || continue
    rc=$(cat "$logs/$part.rc")
    echo "== $part (background lane): exit $rc"
    if [ "$rc" != 0 ]; then tail -n 60 "$logs/$part.log"; lane_rc=1; else tail -n 3 "$logs/$part.log"; fi
  done
  [ "$main_rc" = 0 ] && [ "$lane_rc" = 0 ] || exit 1
fi

# The JAX live path in a venv without TensorFlow (.venv-jax/).
if [ "$side_jax" = 1 ]; then
  bash scripts/jax_venv.sh
fi

# Compatibility job: the oldest supported TensorFlow in its own venv (.venv-compat/).
# TFOBS_COMPAT=0 leaves it out (a quick local run of a few tests).
if [ "$side_compat" = 1 ]; then
  bash scripts/compat.sh
fi
