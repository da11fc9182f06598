"""Uncertainty of a classifier's outputs, per input: the prioritisers of Weiss and Tonella (ISSTA
2022), computed from the outputs one forward pass already yields.

With ``p`` the softmax of an input's logits (or its probabilities, for a model that outputs
them) over ``C`` classes, sorted so that ``p_(1) >= p_(2) >= ...``:

========== ============================= =====================================
name       score                         looked at first
========== ============================= =====================================
confidence ``p_(1)`` (max-softmax)       lowest
margin     ``p_(1) - p_(2)``             lowest
entropy    ``-sum_c p_c ln p_c``         highest (``0 ln 0 = 0``)
gini       ``1 - sum_c p_c^2`` (DeepGini) highest
========== ============================= =====================================

Each score is kept as defined (a confidence of 0.9 reads 0.9); :attr:`Uncertainty.ascending`
says which end comes first. An order sorts by the score, ties to the lower input index
(a stable sort), so it never depends on the batch size.

Examples:
    >>> import torch
    >>> logits = torch.tensor([[4.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    >>> [round(v, 3) for v in uncertainty_scores(logits, "margin").tolist()]
    [0.947, 0.0]
    >>> priority_order(uncertainty_scores(logits, "gini"), ascending=False).tolist()
    [1, 0]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from ..core.registry import Registry
from ..errors import DeepFaultError

__all__ = ["UNCERTAINTY", "Uncertainty", "list_uncertainty", "priority_order", "probabilities",
           "uncertainty_scores", "uncertainty_table"]


@dataclass(frozen=True)
class Uncertainty:
    """One uncertainty score.

    Attributes:
        name: Registry name (``--by NAME``).
        title: One line for tables and reports.
        score: ``(N, C)`` float64 probabilities -> ``(N,)`` scores.
        ascending: ``True`` when the lowest score is looked at first.
    """

    name: str
    title: str
    score: Callable[[torch.Tensor], torch.Tensor]
    ascending: bool


#: The uncertainty scores, by name.
UNCERTAINTY: Registry[Uncertainty] = Registry("uncertainty score")


def _register(name: str, title: str, ascending: bool):
    def deco(fn: Callable[[torch.Tensor], torch.Tensor]):
        UNCERTAINTY.register(name, Uncertainty(name, title, fn, ascending))
        return fn
    return deco


@_register("confidence", "max-softmax: the top class's probability (lowest first)", ascending=True)
def _confidence(p: torch.Tensor) -> torch.Tensor:
    return p.amax(dim=1)


@_register("margin", "top-1 minus top-2 probability (lowest first)", ascending=True)
def _margin(p: torch.Tensor) -> torch.Tensor:
    if p.shape[1] < 2:
        return torch.ones(len(p), dtype=p.dtype, device=p.device)
    top = p.topk(2, dim=1).values
    return top[:, 0] - top[:, 1]


@_register("entropy", "softmax entropy in nats (highest first)", ascending=False)
def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(p, p).sum(dim=1)


@_register("gini", "DeepGini: 1 - sum of squared probabilities (highest first)", ascending=False)
def _gini(p: torch.Tensor) -> torch.Tensor:
    return 1.0 - (p * p).sum(dim=1)


def list_uncertainty() -> list[str]:
    """The names of the uncertainty scores."""
    return UNCERTAINTY.names()


def probabilities(outputs: torch.Tensor, *, output_kind: str = "logits") -> torch.Tensor:
    """``(N, C)`` float64 class probabilities from a model's outputs.

    Args:
        outputs: ``(N, C)`` logits or probabilities.
        output_kind: ``"logits"`` (softmax is applied) or ``"probabilities"`` (used as they are).

    Raises:
        DeepFaultError: Outputs that are not ``(N, C)``, or not finite.
    """
    out = torch.as_tensor(outputs)
    if out.ndim != 2:
        raise DeepFaultError(f"model outputs must be (N, classes); got shape {tuple(out.shape)}")
    out = out.detach().double()
    if not torch.isfinite(out).all():
        raise DeepFaultError("the model's outputs hold NaN or infinite values; check the model and "
                             "its inputs")
    if output_kind == "probabilities":
        return out
    if output_kind != "logits":
        raise DeepFaultError(f"output_kind must be 'logits' or 'probabilities'; got {output_kind!r}")
    return torch.softmax(out, dim=1)


def uncertainty_scores(outputs: torch.Tensor, name: str, *, output_kind: str = "logits") -> torch.Tensor:
    """``(N,)`` float64 scores of ``name`` (see the module table) for ``(N, C)`` outputs."""
    return UNCERTAINTY.get(name).score(probabilities(outputs, output_kind=output_kind))


def uncertainty_table(outputs: torch.Tensor, names: Iterable[str], *,
                      output_kind: str = "logits") -> dict[str, torch.Tensor]:
    """``{name: (N,) float64 scores}`` for several scores of the same outputs, with one softmax."""
    p = probabilities(outputs, output_kind=output_kind)
    return {name: UNCERTAINTY.get(name).score(p) for name in names}


def priority_order(scores: np.ndarray | torch.Tensor, *, ascending: bool) -> np.ndarray:
    """Input indices, the one to look at first first: by ``scores`` (lowest first when
    ``ascending``), ties to the lower index; ``NaN`` scores last.
    """
    s = torch.as_tensor(scores).detach().cpu().double().numpy()
    order = np.argsort(s if ascending else -s, kind="stable")  # NaN sorts last, but beside +-inf
    nan = np.isnan(s[order])
    return np.concatenate([order[~nan], order[nan]])  # so NaN goes after every number, inf included
