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

# The JAX job's and the compatibility job's venvs build in the background (at nice 19, one
# after the other) while the main suite runs. CC=false: their editable installs skip the
# compiled reader the main venv just built in place (the same interpreter; rebuilding
# rewrites that file under tests that have it loaded) and use it as it is.
side_log=$(mktemp)
jax_ready=$(mktemp -u)
side_pid=
trap '[ -z "$side_pid" ] || kill "$side_pid" 2>/dev/null || true; rm -f "$side_log" "$jax_ready"' EXIT
cc=()
compgen -G 'tfobs/xspace/_wire*.so' > /dev/null && cc=(CC=false)
if [ "${TFOBS_JAX:-1}" != 0 ] || [ "${TFOBS_COMPAT:-1}" != 0 ]; then
  nice -n 19 env "${cc[@]}" TFOBS_BUILD_ONLY=1 bash -c '
    set -e
    [ "${TFOBS_JAX:-1}" = 0 ] || { bash scripts/jax_venv.sh && touch "$1"; }
    [ "${TFOBS_COMPAT:-1}" = 0 ] || bash scripts/compat.sh' side "$jax_ready" > "$side_log" 2>&1 &
  side_pid=$!
fi
side_built() {  # waits for the background builds; prints their log if they failed
  [ -n "$side_pid" ] || return 0
  if wait "$side_pid"; then side_pid=; return 0; fi
  side_pid=
  cat "$side_log" >&2
  echo "the JAX or compatibility venv did not build (above)" >&2
  return 1
}

.venv/bin/ruff check .
.venv/bin/mypy  # settings in pyproject.toml [tool.mypy]: the whole tfobs package

# The suite in three lanes (tests/conftest.py): "busy" (at nice 19) and "waits" (tests that
# mostly wait: timeouts, servers, sleeping jobs) side by side, then "alone" (tests that time
# the job or need idle cores). The waits lane's output follows the busy lane's.
# -rs: print the reason of every skipped test, so a skip never hides a missing feature.
lane() {  # lane name, index, then pytest's arguments; "no test in this lane" is no failure
  local name=$1 index=$2 rc=0
  shift 2
  PYTEST_LANE=$name PYTEST_LANE_INDEX=$index .venv/bin/python -m pytest -q -rs \
    -p no:cacheprovider --durations=15 "$@" || rc=$?
  [ "$rc" = 5 ] && rc=0
  return "$rc"
}
jax_tests() {  # once the background build has made the JAX venv
  while [ ! -e "$jax_ready" ] && kill -0 "$side_pid" 2>/dev/null; do sleep 1; done
  if [ ! -e "$jax_ready" ]; then
    echo "the JAX venv did not build (its log follows the suite)"
    return 1
  fi
  echo "== the JAX live path in a venv without TensorFlow (.venv-jax/)"
  bash scripts/jax_venv.sh
}
failed=()
# The waits lane, then the JAX job's tests (mostly waiting too), beside the busy lane.
waits_log=$(mktemp)
waits_rc=$(mktemp)
(
  rc=0
  lane waits 1 "$@" || rc=1
  if [ "${TFOBS_JAX:-1}" != 0 ]; then jax_tests || rc=$((rc + 2)); fi
  echo "$rc" > "$waits_rc"
) > "$waits_log" 2>&1 &
waits_pid=$!
echo "== lane busy (the lane waits runs beside it; its output follows)"
nice -n 19 bash -c "$(declare -f lane); lane busy 0 \"\$@\"" lane "$@" || failed+=(busy)
wait "$waits_pid" || true
echo "== lane waits"
cat "$waits_log"
case "$(cat "$waits_rc")" in
  0) ;;
  1) failed+=(waits) ;;
  2) failed+=(jax) ;;
  *) failed+=(waits jax) ;;
esac
rm -f "$waits_log" "$waits_rc"
echo "== lane alone"
lane alone 2 "$@" || failed+=(alone)

side_built || exit 1

# Compatibility job: the oldest supported TensorFlow in its own venv (.venv-compat/).
# TFOBS_COMPAT=0 leaves it out (a quick local run of a few tests).
if [ "${TFOBS_COMPAT:-1}" != 0 ]; then
  bash scripts/compat.sh || failed+=(compat)
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
