# Sourced by scripts/compat.sh and scripts/jax_venv.sh. scripts/test.sh starts their builds
# beside the main venv's install: tfobs's own editable install there waits for that one to
# end (TFOBS_AFTER appears; or test.sh, TFOBS_AFTER_PID, is gone), so one build of this
# tree runs at a time. Without TFOBS_AFTER (a script run alone) it returns at once.
after_main_install() {
  [ -n "${TFOBS_AFTER:-}" ] || return 0
  while [ ! -e "$TFOBS_AFTER" ] && kill -0 "${TFOBS_AFTER_PID:-$$}" 2>/dev/null; do sleep 1; done
  [ -e "$TFOBS_AFTER" ] || { echo "the main venv's install did not end" >&2; exit 1; }
}
