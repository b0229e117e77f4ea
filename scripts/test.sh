#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine (run as root), then runs them.
# Debian packages: prometheus (server + promtool), chromium + chromium-driver (page tests),
# gcc and python3-dev where missing (the compiled reader).
# Python: a fresh .venv with tfobs and its test extras (ruff, mypy, pytest, ...). Extra
# arguments go to pytest (e.g. -m "not slow" for the quick tests).
# Also scripts/jax_venv.sh: the JAX live path's tests in a venv without TensorFlow, and
# scripts/compat.sh: a subset of the tests on the oldest supported TensorFlow (below).
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

# The compatibility job's and the JAX job's venvs build in the background (at nice 19, one
# after the other) from here on, beside the main venv's install (pip keeps one core busy;
# TensorFlow 2.16 for the compatibility venv takes the other) and then the main suite.
# Their own editable installs of tfobs wait for the main one (TFOBS_AFTER: one build of
# this tree at a time). CC=false: they skip the compiled reader the main venv builds in
# place (the same interpreter; rebuilding rewrites that file under tests that have it
# loaded) and use it as it is.
side_log=$(mktemp)
side_rc=$(mktemp -u)
main_installed=$(mktemp -u)
side_pid=
trap 'rm -f "$side_log" "$side_rc" "$main_installed"' EXIT
if [ "${TFOBS_LANES:-1}" != 0 ] && { [ "${TFOBS_JAX:-1}" != 0 ] || [ "${TFOBS_COMPAT:-1}" != 0 ]; }; then
  nice -n 19 env CC=false TFOBS_BUILD_ONLY=1 TFOBS_AFTER="$main_installed" TFOBS_AFTER_PID=$$ \
    bash -c '
    rc=0
    [ "${TFOBS_COMPAT:-1}" = 0 ] || bash scripts/compat.sh || rc=$?
    [ "$rc" != 0 ] || [ "${TFOBS_JAX:-1}" = 0 ] || bash scripts/jax_venv.sh || rc=$?
    echo "$rc" > "$1"' side "$side_rc" > "$side_log" 2>&1 &
  side_pid=$!
else
  echo 0 > "$side_rc"
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
touch "$main_installed"
# PYTHONDONTWRITEBYTECODE=1 (this VM, Docker images, many CI machines) leaves a checkout
# without bytecode, so each process a test starts (training jobs, reduce helpers, `tfobs
# analyze`: hundreds) compiled tfobs from source again: 0.3-0.5 s of CPU for the modules a
# job imports. Compiled once here, as pip compiles an installed tfobs (the side venvs use
# the same files with the same interpreter).
.venv/bin/python -m compileall -q tfobs tests benchmarks tools > /dev/null
.venv/bin/ruff check .

# The JAX job (scripts/jax_venv.sh) runs the JAX live path's tests in a venv without
# TensorFlow; the main venv leaves those two files to it rather than run them twice.
own=()
if [ "${TFOBS_JAX:-1}" != 0 ]; then
  own=(--ignore=tests/runtime/test_jax_training.py --ignore=tests/runtime/test_gpu_check_prepared.py)
fi

# By default the suite runs in lanes (below: 18-24 minutes for the whole CI run on 2
# cores, benchmarks/RESULTS.md "CI runs of the fifth session of 2026-11-29" and after). TFOBS_LANES=0
# runs it in one process (28 minutes when last measured, on 2026-11-28, with a smaller
# suite): the plain order, for telling a lane problem from a test's own.
if [ "${TFOBS_LANES:-1}" = 0 ]; then
  .venv/bin/mypy  # settings in pyproject.toml [tool.mypy]: the whole tfobs package
  # -rs: print the reason of every skipped test, so a skip never hides a missing feature.
  .venv/bin/python -m pytest -q -rs -p no:cacheprovider --durations=25 "${own[@]}" "$@"
  # The JAX live path in a venv without TensorFlow (.venv-jax/).
  if [ "${TFOBS_JAX:-1}" != 0 ]; then
    bash scripts/jax_venv.sh
  fi
  # Compatibility job: the oldest supported TensorFlow in its own venv (.venv-compat/).
  # TFOBS_COMPAT=0 leaves it out (a quick local run of a few tests).
  if [ "${TFOBS_COMPAT:-1}" != 0 ]; then
    bash scripts/compat.sh
  fi
  exit 0
fi

side_built() {  # waits for the background builds; prints their log if they failed
  while [ ! -s "$side_rc" ] && kill -0 "$side_pid" 2>/dev/null; do sleep 1; done
  [ "$(cat "$side_rc" 2>/dev/null)" = 0 ] && return 0
  cat "$side_log" >&2
  echo "the JAX or compatibility venv did not build (above)" >&2
  return 1
}

# The suite in lanes (tests/conftest.py). Side by side: "busy" (most tests), at the idle
# scheduling class (SCHED_IDLE: the reduce helpers of the other chains get a share beside
# it); a chain at normal priority: mypy, then the lane "waits" (tests that mostly wait:
# timeouts, servers, sleeping jobs, the network); and a chain at nice 10 that waits for the
# side venvs, then runs the JAX job and the compatibility job (scripts/jax_venv.sh,
# scripts/compat.sh; TFOBS_JAX=0, TFOBS_COMPAT=0 leave them out) in the CPU the waiting
# tests leave (one after the other behind "waits", they made the CI run 5 minutes longer).
# Then "alone": tests that time the job or need idle cores, with nothing beside them.
# The chains' output follows the busy lane's.
# -rs: print the reason of every skipped test, so a skip never hides a missing feature.
lane() {  # lane name, index, then pytest's arguments; "no test in this lane" is no failure
  local name=$1 index=$2 rc=0
  shift 2
  PYTEST_LANE=$name PYTEST_LANE_INDEX=$index .venv/bin/python -m pytest -q -rs \
    -p no:cacheprovider --durations=15 "${own[@]}" "$@" || rc=$?
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}
low=(nice -n 19)
chrt --idle 0 true 2>/dev/null && low=(chrt --idle 0)
chain_failed=$(mktemp)
waits_log=$(mktemp)
(
  note() { echo "$1" >> "$chain_failed"; }
  echo "== mypy"
  .venv/bin/mypy || note mypy  # settings in pyproject.toml [tool.mypy]: the whole package
  echo "== lane waits"
  lane waits 1 "$@" || note waits
) > "$waits_log" 2>&1 &
waits_pid=$!
side_jobs_log=$(mktemp)
(
  note() { echo "$1" >> "$chain_failed"; }
  side_built || { note "venv build"; exit 0; }
  if [ "${TFOBS_JAX:-1}" != 0 ]; then
    echo "== the JAX live path in a venv without TensorFlow (.venv-jax/)"
    nice -n 10 bash scripts/jax_venv.sh || note jax
  fi
  if [ "${TFOBS_COMPAT:-1}" != 0 ]; then
    echo "== the compatibility job: the oldest supported TensorFlow (.venv-compat/)"
    nice -n 10 bash scripts/compat.sh || note compat
  fi
) > "$side_jobs_log" 2>&1 &
side_jobs_pid=$!
failed=()
echo "== lane busy (mypy, the lane waits, the JAX and compatibility jobs run beside it)"
# Two pytest-xdist workers, a test file to a worker (its module fixtures built once): one
# pytest process left a core idle while the other lanes waited.
"${low[@]}" bash -c "$(declare -p own); $(declare -f lane); lane busy 0 -n 2 --dist loadfile \"\$@\"" \
  lane "$@" || failed+=(busy)
wait "$waits_pid" || failed+=(waits-chain)
cat "$waits_log"
wait "$side_jobs_pid" || failed+=(side-chain)
cat "$side_jobs_log"
mapfile -t -O "${#failed[@]}" failed < "$chain_failed"
rm -f "$waits_log" "$side_jobs_log" "$chain_failed"
echo "== lane alone"
lane alone 2 "$@" || failed+=(alone)

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
