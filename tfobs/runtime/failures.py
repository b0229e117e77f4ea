"""Errors inside tfobs: counted in the health ledger by stage, logged once per stage.

Every thread boundary catches broadly and reports here, so nothing raises into training and
a broken exporter cannot flood the job's logs.
"""

from __future__ import annotations

import logging

from tfobs.health import HealthLedger
from tfobs.once import OncePer
from tfobs.summary import ErrorStage

_log = logging.getLogger(__name__)


class Failures:
    def __init__(self, health: HealthLedger) -> None:
        self._health = health
        self._logged = OncePer()

    def report(self, stage: ErrorStage, exc: object) -> None:
        self._health.count_error(stage)
        if self._logged.first(stage):
            # one line: TensorFlow's file system errors carry "\n\t when reading ..."
            _log.warning("tfobs %s error (counted in tfobs_errors_total): %s", stage,
                         " ".join(str(exc).split()))
