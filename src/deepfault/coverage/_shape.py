"""What coverage's entries share, below them all: the layers constraint, the transforms, the
configs' ``to_dict``, reading the data and the progress bar (so the fits, the measurement and the
ranking import it, and it imports none of them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ..core.capture import TRANSFORMS
from ..core.constraints import FieldConstraint

if TYPE_CHECKING:
    from ..core.runtime import Runtime

__all__ = ["TRANSFORMS", "LayerNames", "inputs_of", "progress_label"]

#: The neuron value transforms.

_LAYERS = ("comma-separated module names, globs ('layer*.1'), type:CLASS, or a named selection ('blocks': "
           "residual/transformer block outputs; 'linear-conv': every Linear/Conv but the logits; "
           "'deepxplore': activated conv/dense outputs, pooling, logits and softmax) (default: {})")
_DEFAULT_LAYERS = ("'blocks' for a network with residual/transformer blocks, else 'linear-conv': every "
                   "Linear/Conv layer except the logits layer")


@dataclass(frozen=True)
class LayerNames(FieldConstraint):
    """Layers: one name (a selection such as ``deepxplore``, or a module's name), or several
    module names; on the command line a comma-separated text (one name stays a text).
    """

    none: bool = True
    words: tuple[str, ...] = ()

    @staticmethod
    def _name(value) -> bool:
        return isinstance(value, str) and 0 < len(value) <= 4096 and "\x00" not in value

    def accepts(self, value) -> bool:
        if isinstance(value, str):
            return self._name(value)
        return isinstance(value, (list, tuple)) and len(value) > 0 and all(self._name(v) for v in value)

    def convert(self, text: str):
        parts = tuple(p.strip() for p in text.split(",") if p.strip())
        if not parts:
            raise ValueError(text)
        return parts[0] if len(parts) == 1 else parts

    def expected(self) -> str:
        return "a layer selection or module name, or comma-separated module names"

    def hostile(self) -> tuple:
        return ("", ("",), "a\x00b", 7)


def _show(value: Any) -> Any:
    """A field's value as a result file records it (a fitted state by its path, or its kind)."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "model_hash"):  # a fitted state given as an object
        return f"<{type(value).__name__} of {value.model_hash[:12]}...>"
    if isinstance(value, tuple):
        return list(value)
    return value


class Config:
    """What the three configs share: normalising a field in ``__post_init__``, ``to_dict``."""

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _tuple(self, name: str) -> None:
        value = getattr(self, name)
        if isinstance(value, list):
            self._set(name, tuple(value))

    def to_dict(self) -> dict:
        """Every field, as the result files record it (tuples as lists, states by path)."""
        return {f.name: _show(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def inputs_of(data):
    """``(inputs, labels or None, name or None)``: a deepfault data set's test split and name,
    an ``(inputs, labels)`` pair's two parts; any other form as it is (the batch loop reads it).
    """
    from ..core.inputs import _is_deepfault_dataset, check_data, is_torch_data

    check_data(data)
    if _is_deepfault_dataset(data):
        return data.x_test, data.y_test, str(data.name)
    if isinstance(data, tuple) and len(data) == 2 and not is_torch_data(data[1]):
        return data[0], data[1], None
    return data, None, None


def progress_label(runtime: Runtime, label: str):
    """``iterate_batches``' ``progress`` for ``runtime.progress`` (a label names the bar)."""
    progress = runtime.progress
    return progress if isinstance(progress, str) else (label if progress else False)
