#!/usr/bin/env bash
# The JAX job without TensorFlow: a venv of its own (.venv-jax/) with tfobs's JAX extra and
# what the JAX tests need, and no TensorFlow; checks that none got in, then runs the tests
# of the JAX live path there (real Prometheus, OTLP receiver, page, kept captures, analyze,
# the prepared GPU check on CPU). Reused while the install steps are unchanged.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# after_main_install: waits for scripts/test.sh's main install (see that file).
source scripts/after_main_install.sh

venv="${TFOBS_JAX_VENV:-.venv-jax}"
install_rev=2  # bump when the install steps below change
key="$install_rev-$(sha256sum pyproject.toml | cut -c1-16)"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
if [ "$(cat "$venv/.tfobs-jax" 2>/dev/null)" != "$key" ]; then
  echo "jax venv: building $venv (JAX, no TensorFlow)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # keras: the Keras 3 on JAX tests (KERAS_BACKEND=jax; Keras needs no TensorFlow then)
  after_main_install
  "${pip[@]}" -e '.[jax,otlp]' pytest pytest-timeout "opentelemetry-proto>=1.25" PyYAML keras
  echo "$key" > "$venv/.tfobs-jax"
fi
if "$venv/bin/python" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("tensorflow") is None)'; then
  echo "jax venv: TensorFlow is installed in $venv; the JAX path must run without it" >&2
  exit 1
fi
# TFOBS_BUILD_ONLY=1: build (or keep) the venv and stop (scripts/test.sh builds it early).
[ "${TFOBS_BUILD_ONLY:-0}" = 1 ] && exit 0
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider \
  tests/runtime/test_jax_training.py tests/runtime/test_gpu_check_prepared.py "$@"
