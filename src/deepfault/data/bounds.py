"""One rule for a data set's valid input range (``bounds``), on the command line and in Python.

- **Declared** bounds (an ``.npz`` ``bounds`` array, ``bounds=(lo, hi)``, a built-in data
  set) are the data's own and are kept.
- **None given:** :func:`infer_bounds` takes them from the data
  (:func:`~deepfault.core.inputs.bounds_of_range`: ``(0, 1)`` when every input lies in it,
  else the inputs' own minimum and maximum) and says so in one log line. The data set
  records ``meta["bounds_inferred"] = True`` and its inputs' ``meta["data_range"]``.
- **Against a model:** :func:`check_model_range` refuses inferred bounds that lie outside
  the range the model was trained on (what its model file records), with the likely fix
  ("divide the inputs by 255" for 0-255 pixels and a ``[0, 1]`` model; "multiply" for the
  reverse): such data is never run silently. Data inside the model's range takes the model's bounds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.inputs import bounds_of_range
from ..errors import DeepFaultError

if TYPE_CHECKING:
    from .dataset import Dataset

__all__ = ["check_model_range", "data_range", "in_model_range", "infer_bounds"]

log = logging.getLogger(__name__)

#: Relative slack for the range check (float32 inputs rounded on the way in).
_TOL = 1e-6


def data_range(ranges: Iterable[tuple[float, float]]) -> tuple[float, float] | None:
    """The overall ``(min, max)`` of the parts' ``(min, max)`` ranges (``None`` for none)."""
    seen = list(ranges)
    if not seen:
        return None
    return min(a for a, _ in seen), max(b for _, b in seen)


def infer_bounds(ranges: Iterable[tuple[float, float]], name: str) -> tuple[float, float]:
    """The bounds of data that declare none, from its inputs' ranges, said in one log line.

    Args:
        ranges: ``(min, max)`` of each part of the inputs (each split); empty parts left out.
        name: The data set's name, for the log line.

    Returns:
        :func:`~deepfault.core.inputs.bounds_of_range` of the inputs' overall range
        (``(0, 1)`` for no inputs).
    """
    overall = data_range(ranges)
    if overall is None:
        return (0.0, 1.0)
    bounds = bounds_of_range(*overall)
    log.info("data set %r declares no bounds; inferred [%g, %g] from its inputs (declare them to "
             "change this: a bounds array in the .npz, or bounds=(lo, hi))", name, bounds[0], bounds[1])
    return bounds


def check_model_range(inputs_range: Sequence[float], model_bounds: Sequence[float], *, data_name: str,
                      what: str = "the model") -> None:
    """Refuse data whose range lies outside the range a model was trained on, with the likely fix.

    Inputs in ``[0, 1]`` for a model trained on 0-255 pixels are refused too: they lie inside
    its range but would run at chance accuracy without a word.

    Args:
        inputs_range: ``(lo, hi)``, the smallest and largest input element of the data.
        model_bounds: ``(lo, hi)`` the model was trained on.
        data_name: The data set's name, for the message.
        what: How the message names the model.

    Raises:
        DeepFaultError: ``inputs_range`` is not inside ``model_bounds``.
    """
    lo, hi = (float(v) for v in inputs_range)
    m_lo, m_hi = (float(v) for v in model_bounds)
    slack = _TOL * max(1.0, m_hi - m_lo)
    pixels_as_unit = (m_lo, m_hi) == (0.0, 255.0) and lo >= 0.0 and hi <= 1.0
    if lo >= m_lo - slack and hi <= m_hi + slack and not pixels_as_unit:
        return
    raise DeepFaultError(
        f"{what} was trained on inputs in [{m_lo:g}, {m_hi:g}] but data set {data_name!r} ranges over "
        f"[{lo:g}, {hi:g}]; {_likely_fix(lo, hi, m_lo, m_hi)}")


def in_model_range(data: Dataset, model_bounds: Sequence[float] | None, *,
                   what: str = "the model") -> Dataset:
    """``data`` with a model's bounds when its own were inferred and its inputs lie inside them.

    Args:
        data: The data set.
        model_bounds: ``(lo, hi)`` the model was trained on (``None``: unknown).
        what: How the message names the model.

    Returns:
        ``data`` unchanged when its bounds were declared or the model's range is unknown;
        else ``data`` with ``bounds=model_bounds``.

    Raises:
        DeepFaultError: Inferred bounds outside the model's range (:func:`check_model_range`).
    """
    if model_bounds is None or not data.meta.get("bounds_inferred"):
        return data
    seen = data.meta.get("data_range") or data.bounds
    check_model_range(seen, model_bounds, data_name=data.name, what=what)
    lo, hi = (float(v) for v in model_bounds)
    return replace(data, bounds=(lo, hi))


def _likely_fix(lo: float, hi: float, m_lo: float, m_hi: float) -> str:
    """What most likely brings data in ``[lo, hi]`` into a model's ``[m_lo, m_hi]``."""
    if (m_lo, m_hi) == (0.0, 1.0) and lo >= 0.0 and 1.0 < hi <= 255.0:
        return "divide the inputs by 255 (they look like 0-255 pixels)"
    if (m_lo, m_hi) == (0.0, 255.0) and lo >= 0.0 and hi <= 1.0:
        return "multiply the inputs by 255 (the model takes 0-255 pixels)"
    return (f"scale the inputs as they were scaled for training, into [{m_lo:g}, {m_hi:g}] (or declare the "
            "data's bounds if the model takes them)")
