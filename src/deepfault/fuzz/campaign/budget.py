"""Campaign budgets: wall-clock seconds or iterations (``10m``, ``300s``, ``1h``, ``5000it``).

An *iteration* is one selected input: its rule draw, its mutants, their checks and
executions and the updates (spec section 3). A step of ``B`` inputs is ``B`` iterations,
and the last step is cut to what is left, so an iteration budget means the same work for
every ``B``; with a seed it makes a campaign exactly reproducible. A time budget counts
fuzzing time only (not loading the models or evaluating the seeds), summed over resumes;
since a step cannot be interrupted, the loop sizes each step of a time budget to the time
left (:class:`~.clock.StepCost`), so that the campaign ends within a fraction of a step of it.

Examples:
    >>> parse_budget("10m")
    Budget(kind='seconds', value=600.0)
    >>> parse_budget("5000it").value
    5000
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...checks import MAX_BUDGET_ITERATIONS, MAX_BUDGET_SECONDS
from ...errors import DeepFaultError

__all__ = ["Budget", "parse_budget"]

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(it|s|sec|m|min|h)\s*$")


@dataclass(frozen=True)
class Budget:
    """How long a campaign runs.

    Attributes:
        kind: ``"seconds"`` or ``"iterations"``.
        value: Seconds (float) or iterations (int).
    """

    kind: str
    value: float | int

    def __post_init__(self):
        if self.kind not in ("seconds", "iterations"):
            raise DeepFaultError(f"budget kind must be 'seconds' or 'iterations'; got {self.kind!r}")
        if not self.value > 0:
            raise DeepFaultError(f"a budget must be positive; got {self.value!r}")

    def __str__(self) -> str:
        if self.kind == "iterations":
            return f"{self.value}it"
        # Plain decimals (never '3.6e+08s'), so that the text parses back to the same budget.
        return f"{self.value:.6f}".rstrip("0").rstrip(".") + "s"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "value": self.value, "text": str(self)}

    def remaining_iterations(self, done: int) -> int | None:
        """Iterations left (``None`` for a time budget)."""
        return max(0, int(self.value) - done) if self.kind == "iterations" else None

    def exhausted(self, *, iterations: int, seconds: float) -> bool:
        if self.kind == "iterations":
            return iterations >= self.value
        return seconds >= self.value


def parse_budget(text: str | Budget) -> Budget:
    """``"10m"``, ``"300s"``, ``"1.5h"`` or ``"5000it"`` as a :class:`Budget`.

    Raises:
        DeepFaultError: Not one of those forms.
    """
    if isinstance(text, Budget):
        return text
    match = _PATTERN.match(str(text).lower())
    if not match:
        raise DeepFaultError(
            f"budget must be a number with a unit: seconds ('300s'), minutes ('10m'), hours ('1h') "
            f"or iterations ('5000it'); got {text!r}"
        )
    number, unit = match.groups()
    if unit == "it":
        if "." in number:
            raise DeepFaultError(f"an iteration budget must be a whole number; got {text!r}")
        if int(number) > MAX_BUDGET_ITERATIONS:
            raise DeepFaultError(f"budget must be at most {MAX_BUDGET_ITERATIONS:,} iterations; got {text!r}")
        return Budget("iterations", int(number))
    seconds = float(number) * _UNITS[unit]
    if seconds > MAX_BUDGET_SECONDS:
        raise DeepFaultError(f"budget must be at most {MAX_BUDGET_SECONDS // 86400} days "
                             f"({MAX_BUDGET_SECONDS:,} s); got {text!r}")
    if not seconds > 0:
        raise DeepFaultError(f"budget must be positive; got {text!r}")
    return Budget("seconds", seconds)
