#!/usr/bin/env bash
# Compatibility job: the OLDEST supported TensorFlow in a venv of its own (.venv-compat/),
# installed the way a user's environment is (TensorFlow with the Keras it ships, tf_keras),
# then tfobs with every extra on top. Checks that installing tfobs changed none of the
# user's TensorFlow, Keras, protobuf or numpy, and runs the reduction, runtime, markers and
# exporter tests there (numpy 1.x, protobuf 4.x, OpenTelemetry 1.27, Keras 3.x of TF 2.16).
# The venv is kept and reused while tfobs's dependencies and the install steps are unchanged.
# Extra arguments go to pytest. TFOBS_COMPAT_TF picks another TensorFlow release,
# TFOBS_COMPAT_VENV another venv folder.
set -euo pipefail
cd "$(dirname "$0")/.."

# after_main_install: waits for scripts/test.sh's main install (see that file).
source scripts/after_main_install.sh

tf_version="${TFOBS_COMPAT_TF:-2.16.2}"
venv="${TFOBS_COMPAT_VENV:-.venv-compat}"
install_rev=2  # bump when the install steps below change
deps=$(python3 -c 'import json, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(json.dumps([p["dependencies"], p["optional-dependencies"]], sort_keys=True))')
key="$tf_version-$install_rev-$(sha256sum <<< "$deps" | cut -c1-16)"
pip=("$venv/bin/pip" install -q --disable-pip-version-check)
watched='^(tensorflow|keras|tf-keras|tf_keras|protobuf|numpy|ml-dtypes|ml_dtypes)=='

if [ "$(cat "$venv/.tfobs-compat" 2>/dev/null)" != "$key" ]; then
  echo "compat: building $venv with tensorflow==$tf_version"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # The user's environment: TensorFlow with its Keras 3, and the matching tf_keras.
  "${pip[@]}" "tensorflow==$tf_version" "tf_keras~=${tf_version%.*}.0"
  "$venv/bin/pip" freeze | grep -iE "$watched" | sort > "$venv/user-env.txt"
  # tfobs as README says to install it into an existing TensorFlow environment: every extra,
  # with the installed TensorFlow named so pip keeps to its protobuf and numpy ranges.
  # (README's own line; TensorFlow's version read back from the venv.)
  tf_pin="tensorflow==$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))')"
  after_main_install
  "${pip[@]}" -e '.[all]' "$tf_pin"
  "$venv/bin/pip" freeze | grep -iE "$watched" | sort > "$venv/after-tfobs.txt"
  if ! diff -u "$venv/user-env.txt" "$venv/after-tfobs.txt"; then
    echo "compat: installing tfobs changed the user's TensorFlow/Keras/protobuf/numpy (above)" >&2
    exit 1
  fi
  "${pip[@]}" pytest pytest-timeout "xprof==2.24.2" PyYAML cryptography "opentelemetry-proto>=1.25" \
    "$tf_pin"
  "$venv/bin/pip" freeze | grep -iE "$watched" | sort > "$venv/after-tests.txt"
  if ! diff -u "$venv/user-env.txt" "$venv/after-tests.txt"; then
    echo "compat: the test tools changed TensorFlow/Keras/protobuf/numpy (above)" >&2
    exit 1
  fi
  echo "$key" > "$venv/.tfobs-compat"
fi

# TFOBS_BUILD_ONLY=1: build (or keep) the venv and stop (scripts/test.sh builds it early).
[ "${TFOBS_BUILD_ONLY:-0}" = 1 ] && exit 0
echo "compat: $(tr '\n' ' ' < "$venv/user-env.txt")"
# The reduction (XProf 2.24.2 as reference), the profiler session and runtime, the markers
# (Keras 3 and tf_keras), the exporters, and the demo. Three OTLP tests assert the newer
# exporter's retry timing, which OpenTelemetry 1.27 does not have (docs/install.md).
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/reduce/test_xspace_reader.py tests/reduce/test_steps.py tests/reduce/test_gpu_idle.py \
  tests/reduce/test_kernels_fidelity.py tests/reduce/test_fidelity_xprof.py tests/reduce/test_tensor_core_rules.py \
  tests/runtime/test_tfmemory.py tests/cli/test_analyze_cli.py tests/export/test_replay.py \
  tests/runtime/test_runtime.py tests/runtime/test_enable_first.py tests/runtime/test_session.py tests/runtime/test_schedule.py \
  tests/export/test_step_histogram.py tests/runtime/test_markers.py tests/runtime/test_config.py \
  tests/export/test_otel_exporter.py tests/export/test_prometheus_exporter.py tests/runtime/test_nvml.py \
  "tests/deploy/test_versions.py::test_demo_runs_clean_on_this_tensorflow" \
  --deselect "tests/export/test_otel_exporter.py::test_failing_receiver_counts_dropped_spans[StatusCode.UNAVAILABLE]" \
  --deselect "tests/export/test_otel_exporter.py::test_slow_receiver_does_not_block_and_shutdown_is_bounded" \
  --deselect "tests/export/test_otel_exporter.py::test_an_absent_receiver_is_one_line_in_the_jobs_log_with_its_cause" \
  "$@"
