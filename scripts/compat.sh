#!/usr/bin/env bash
# Compatibility job: the OLDEST supported TensorFlow in a venv of its own (.venv-compat/),
# installed the way a user's environment is (TensorFlow with the Keras it ships, tf_keras),
# then tfobs with every extra on top. Checks that installing tfobs changed none of the
# user's TensorFlow, Keras, protobuf or numpy, and runs the reduction, runtime, markers and
# exporter tests there (numpy 1.x, protobuf 4.x, OpenTelemetry 1.27, Keras 3.x of TF 2.16).
# The venv is kept and reused while pyproject.toml and the install steps are unchanged.
# Extra arguments go to pytest. TFOBS_COMPAT_TF picks another TensorFlow release.
set -euo pipefail
cd "$(dirname "$0")/.."

tf_version="${TFOBS_COMPAT_TF:-2.16.2}"
venv=.venv-compat
install_rev=1  # bump when the install steps below change
key="$tf_version-$install_rev-$(sha256sum < pyproject.toml | cut -c1-16)"
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
  "${pip[@]}" -e '.[all]' "tensorflow==$tf_version"
  "$venv/bin/pip" freeze | grep -iE "$watched" | sort > "$venv/after-tfobs.txt"
  if ! diff -u "$venv/user-env.txt" "$venv/after-tfobs.txt"; then
    echo "compat: installing tfobs changed the user's TensorFlow/Keras/protobuf/numpy (above)" >&2
    exit 1
  fi
  "${pip[@]}" pytest pytest-timeout "xprof==2.24.2" PyYAML cryptography "opentelemetry-proto>=1.25" \
    "tensorflow==$tf_version"
  "$venv/bin/pip" freeze | grep -iE "$watched" | sort > "$venv/after-tests.txt"
  if ! diff -u "$venv/user-env.txt" "$venv/after-tests.txt"; then
    echo "compat: the test tools changed TensorFlow/Keras/protobuf/numpy (above)" >&2
    exit 1
  fi
  echo "$key" > "$venv/.tfobs-compat"
fi

echo "compat: $(tr '\n' ' ' < "$venv/user-env.txt")"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -o addopts="" \
  tests/test_compat_env.py \
  "$@"
