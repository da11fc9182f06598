"""Mergeable streaming state: ``update`` with a batch, ``compute`` the answer, ``merge``.

torchmetrics' pattern: the arithmetic lives in pure functions, and a thin class declares
its state once with :meth:`Accumulator.add_state`, naming how two partial states combine
(``"sum"``, ``"max"``, ``"min"``, ``"or"`` for bit sets, ``"union"`` for Python sets).
``reset``, ``merge``, ``state_dict`` and ``load_state_dict`` then come for free, so a
spectrum or a coverage criterion computed over a stream of batches, in any batch size
and order, or over shards on different workers merged afterwards, equals the one computed
over the whole set at once.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from ..errors import DeepFaultError

__all__ = ["Accumulator", "REDUCTIONS"]


def _union(a: set, b: set) -> set:
    return a | b


#: How two partial states combine.
REDUCTIONS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda a, b: a + b,
    "max": torch.maximum,
    "min": torch.minimum,
    "or": torch.logical_or,
    "union": _union,
}


class Accumulator(ABC):
    """Base of every streaming statistic (spectra, coverage criteria, profiles).

    Subclasses call :meth:`add_state` in ``__init__`` for each piece of state and
    implement :meth:`update` and :meth:`compute`. State that is ``None`` until the
    first update (its size unknown before) is allowed: merging with ``None`` keeps the
    other side.
    """

    def __init__(self) -> None:
        self._defaults: dict[str, Any] = {}
        self._reductions: dict[str, str] = {}

    def add_state(self, name: str, default: Any, reduce: str) -> None:
        """Declare a state attribute, its initial value and how partial states combine."""
        if reduce not in REDUCTIONS:
            raise ValueError(f"unknown reduction {reduce!r}; known: {', '.join(REDUCTIONS)}")
        self._defaults[name] = default
        self._reductions[name] = reduce
        setattr(self, name, copy.deepcopy(default))

    @abstractmethod
    def update(self, *args, **kwargs) -> None:
        """Fold one batch into the state."""

    @abstractmethod
    def compute(self) -> Any:
        """The answer for everything folded in so far; does not change the state."""

    def reset(self) -> None:
        """Back to the declared initial state."""
        for name, default in self._defaults.items():
            setattr(self, name, copy.deepcopy(default))

    def _check_compatible(self, other: Accumulator) -> None:
        if type(other) is not type(self):
            raise DeepFaultError(
                f"cannot merge a {type(other).__name__} into a {type(self).__name__}"
            )

    def merge(self, other: Accumulator) -> Accumulator:
        """Combine ``other``'s state into this one (in place) and return ``self``."""
        self._check_compatible(other)
        for name, reduce in self._reductions.items():
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is None:
                continue
            if mine is None:
                setattr(self, name, copy.deepcopy(theirs))
                continue
            if isinstance(mine, torch.Tensor) and mine.shape != theirs.shape:
                raise DeepFaultError(
                    f"cannot merge {type(self).__name__} states of different shapes "
                    f"({tuple(mine.shape)} and {tuple(theirs.shape)}): were they made for the "
                    "same model and layers?"
                )
            if isinstance(mine, torch.Tensor):
                theirs = theirs.to(mine.device)
            setattr(self, name, REDUCTIONS[reduce](mine, theirs))
        return self

    def state_dict(self) -> dict[str, Any]:
        """A copy of the state (tensors on the CPU), for checkpoints and other processes."""
        out = {}
        for name in self._defaults:
            value = getattr(self, name)
            if isinstance(value, torch.Tensor):
                value = value.detach().cpu().clone()
            out[name] = copy.deepcopy(value)
        return out

    def load_state_dict(self, state: dict[str, Any]) -> Accumulator:
        """Replace the state with ``state`` (as returned by :meth:`state_dict`)."""
        missing = set(self._defaults) - set(state)
        if missing:
            raise DeepFaultError(f"state is missing {sorted(missing)} for {type(self).__name__}")
        for name in self._defaults:
            setattr(self, name, copy.deepcopy(state[name]))
        return self
