"""The leave-one-out predictions ``validate`` prints beside each calibration point:
:class:`LeaveOneOut`, written by ``calibrate --write`` (docs/validation.md) to
``experiments/reference/leave_one_out.json``."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sn40l_sim.errors import InputError
from sn40l_sim.report.outputs import write_text
from sn40l_sim.study.validation import DEFAULT_REFERENCE_DIR

LEAVE_ONE_OUT = DEFAULT_REFERENCE_DIR / "leave_one_out.json"


@dataclass(frozen=True)
class LeaveOneOut:
    """Each calibration point as predicted by a fit without it (``calibrate`` computes them), with
    the calibrated values of the fit they were computed at."""

    fitted: dict[str, float]
    predictions: dict[str, float]
    method: str = ""

    def current(self, calibrated: dict[str, float], rel_tol: float = 1e-4) -> bool:
        """Whether these predictions belong to the ``calibrated`` values in use."""
        return set(self.fitted) <= set(calibrated) and all(
            abs(calibrated[k] - v) <= rel_tol * max(abs(v), 1e-300) for k, v in self.fitted.items())

    def write(self, path: Path = LEAVE_ONE_OUT) -> Path:
        """Write as JSON (sorted keys, so it diffs as data)."""
        text = json.dumps({"method": self.method, "fitted": self.fitted, "predictions": self.predictions},
                          indent=1, sort_keys=True)
        write_text(path, text + "\n")
        return path

    @classmethod
    def read(cls, path: Path = LEAVE_ONE_OUT) -> LeaveOneOut | None:
        """The file at ``path`` (None when there is none)."""
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(dict(data["fitted"]), dict(data["predictions"]), str(data.get("method", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"cannot read the leave-one-out predictions: {exc}; rerun "
                             "`python -m sn40l_sim calibrate --write`", file=path) from None
