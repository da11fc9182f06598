"""Adversarial attacks, written once for every method that needs them: FGSM (DeepXplore's
Figure 9 baseline, a repair baseline), BIM (the ``adv-bim`` regression scenario, a repair
baseline) and Carlini-Wagner L2 (the ``adv-cw`` scenario).

- :func:`fgsm`: one signed-gradient step (Goodfellow et al., ICLR 2015):
  ``x' = clip(x + eps * sign(d loss(x, y) / d x), lo, hi)`` with the cross-entropy loss of the
  true label; ``eps`` in the data's units.
- :func:`bim`: the Basic Iterative Method (Kurakin et al., 2017); ``eps`` a share of the range.
- :func:`carlini_wagner_l2`: untargeted C&W L2 (Carlini and Wagner, IEEE S&P 2017).

All are batched and deterministic, use the model in ``eval()`` mode (restored afterwards),
never touch its weights and return float32 CPU tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_int
from ..errors import DeepFaultError
from .capture import as_tensor, eval_mode, forward, model_device

__all__ = ["CarliniWagner", "CarliniWagnerKeywords", "bim", "carlini_wagner_l2", "fgsm"]


def fgsm(model: nn.Module, inputs, labels, *, eps: float, bounds: Sequence[float] = (0.0, 1.0),
         output_kind: str = "logits", batch_size: int = 1024) -> torch.Tensor:
    """One FGSM step on every input.

    Args:
        model: The classifier (used in ``eval()`` mode; its mode is restored).
        inputs: ``(N, *input)`` inputs within ``bounds``.
        labels: ``(N,)`` true labels.
        eps: Size of the step in the data set's units (``L_inf`` distance), ``>= 0``.
        bounds: ``(lo, hi)`` the result is clipped to.
        output_kind: ``"logits"`` or ``"probabilities"`` (the loss is then ``-log p_y``).
        batch_size: Inputs per pass; the result does not depend on it.

    Returns:
        ``(N, *input)`` float32 CPU tensor.

    Raises:
        DeepFaultError: A negative ``eps`` or labels that do not match the inputs.
    """
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise DeepFaultError(f"eps must be a number >= 0; got {eps!r}")
    x_all = as_tensor(inputs).detach().cpu()
    y_all = torch.as_tensor(labels).long().cpu()
    if y_all.shape != (len(x_all),):
        raise DeepFaultError(f"labels must have one label per input ({len(x_all)}); got {tuple(y_all.shape)}")
    lo, hi = float(bounds[0]), float(bounds[1])
    device = model_device(model)
    out = []
    with eval_mode(model), torch.enable_grad():
        for start in range(0, len(x_all), batch_size):
            x = x_all[start : start + batch_size].to(device).requires_grad_(True)
            y = y_all[start : start + batch_size].to(device)
            scores = forward(model, x)
            loss = F.nll_loss(torch.log(scores.clamp_min(1e-12)), y) if output_kind == "probabilities" \
                else F.cross_entropy(scores, y)
            (g,) = torch.autograd.grad(loss, x)
            out.append(torch.clamp(x.detach() + eps * g.sign(), lo, hi).cpu())
    return torch.cat(out) if out else x_all.clone()


def _attack_inputs(x, y) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as float32 and ``y`` as int64 tensors, from arrays or tensors."""
    x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x, dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y, dtype=torch.long)
    return x, y


def _attack_batches(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int):
    """``(inputs, labels)`` batches of ``batch_size`` on the model's device."""
    device = model_device(model)
    for i in range(0, len(x), batch_size):
        yield x[i : i + batch_size].to(device), y[i : i + batch_size].to(device)


def bim(
    model: nn.Module,
    x,
    y,
    *,
    bounds: tuple[float, float],
    eps: float = 0.1,
    steps: int = 10,
    step_size: float | None = None,
    batch_size: int = 512,
) -> torch.Tensor:
    """Basic Iterative Method (Kurakin et al., ICLR 2017 workshop): ``steps`` signed-gradient
    ascent steps on the cross-entropy, each followed by projection onto the L-infinity ball
    of radius ``eps`` around ``x`` and onto ``bounds``.

    ``x_{t+1} = clip_{x, eps}(x_t + a * sign(grad_x CE(model(x_t), y)))``, ``x_0 = x``.
    ``eps`` and ``step_size`` are shares of the pixel range ``hi - lo`` (0.1 on 0..1 data is
    0.1, on 0..255 data 25.5). Deterministic; batched; the model's mode is restored and its
    weights are not touched.

    Args:
        model: A classifier returning logits.
        x: ``(N, ...)`` inputs in ``bounds`` (array or tensor).
        y: ``(N,)`` labels.
        bounds: ``(lo, hi)``.
        eps: Radius of the ball.
        steps: Iterations.
        step_size: Per step; default ``eps / 4``.
        batch_size: Inputs per pass.

    Returns:
        ``(N, ...)`` float32 adversarial inputs on the CPU.
    """
    check_int("steps", steps)
    check_int("batch_size", batch_size)
    if not 0 < eps <= 1:
        raise DeepFaultError(f"eps must be a share of the pixel range in (0, 1]; got {eps!r}")
    step_size = eps / 4 if step_size is None else step_size
    if not step_size > 0:
        raise DeepFaultError(f"step_size must be positive; got {step_size!r}")
    lo, hi = (float(b) for b in bounds)
    radius, alpha = eps * (hi - lo), step_size * (hi - lo)
    x, y = _attack_inputs(x, y)
    out = []
    with eval_mode(model), torch.enable_grad():
        for x0, yb in _attack_batches(model, x, y, batch_size):
            low, high = (x0 - radius).clamp_min(lo), (x0 + radius).clamp_max(hi)
            xa = x0.clone()
            for _ in range(steps):
                xa.requires_grad_(True)
                loss = F.cross_entropy(forward(model, xa), yb, reduction="sum")
                (grad,) = torch.autograd.grad(loss, xa)
                xa = torch.minimum(torch.maximum(xa.detach() + alpha * grad.sign(), low), high)
            out.append(xa.detach().cpu())
    return torch.cat(out) if out else x.clone()


@dataclass(frozen=True)
class CarliniWagner:
    """The hyper-parameters of :func:`carlini_wagner_l2` (Carlini and Wagner, IEEE S&P 2017).

    Attributes:
        confidence: ``kappa``, the logit margin required.
        c_init: The first ``c`` of each input's binary search.
        binary_steps: Rounds of the binary search over ``c``.
        steps: Adam steps per round.
        lr: Adam's learning rate in tanh space.
    """

    confidence: float = 0.0
    c_init: float = 1.0
    binary_steps: int = 4
    steps: int = 50
    lr: float = 0.05

    def check(self) -> CarliniWagner:
        """``self``, after checking the counts and that ``c_init`` and ``lr`` are positive.

        Raises:
            DeepFaultError: A count below 1, or ``c_init`` or ``lr`` not positive.
        """
        check_int("binary_steps", self.binary_steps)
        check_int("steps", self.steps)
        if not self.c_init > 0 or not self.lr > 0:
            raise DeepFaultError(f"c_init and lr must be positive; got {self.c_init!r} and {self.lr!r}")
        return self


class CarliniWagnerKeywords(TypedDict, total=False):
    """:class:`CarliniWagner`'s fields as :func:`carlini_wagner_l2`'s keywords."""

    confidence: float
    c_init: float
    binary_steps: int
    steps: int
    lr: float


def carlini_wagner_l2(
    model: nn.Module,
    x,
    y,
    *,
    bounds: tuple[float, float],
    batch_size: int = 512,
    settings: CarliniWagner | None = None,
    **keywords: Unpack[CarliniWagnerKeywords],
) -> torch.Tensor:
    """Carlini-Wagner L2 attack (Carlini and Wagner, IEEE S&P 2017), untargeted, vectorised
    over the batch.

    Each input is written ``x' = lo + (hi - lo) (tanh(w) + 1) / 2`` and Adam minimises
    ``||(x' - x) / (hi - lo)||_2^2 + c * max(z_y - max_{j != y} z_j + confidence, 0)`` (``z``
    the logits); ``c`` is found per input by a binary search (``binary_steps`` rounds,
    starting at ``c_init``, times 10 while no success bounds it). The smallest successful
    perturbation is kept; inputs never misclassified are returned unchanged. Deterministic;
    the model's mode is restored and its weights are not touched.

    Args:
        model: A classifier returning logits.
        x: ``(N, ...)`` inputs in ``bounds``.
        y: ``(N,)`` labels.
        bounds: ``(lo, hi)``.
        batch_size: Inputs per pass.
        settings: The hyper-parameters (default: :class:`CarliniWagner`'s).
        **keywords: :class:`CarliniWagner`'s fields one by one (``steps=100``); each replaces
            that field of ``settings``.

    Returns:
        ``(N, ...)`` float32 adversarial inputs on the CPU.

    Raises:
        DeepFaultError: A hyper-parameter or ``batch_size`` out of range.
    """
    settings = replace(settings or CarliniWagner(), **keywords).check()
    check_int("batch_size", batch_size)
    lo, hi = (float(b) for b in bounds)
    x, y = _attack_inputs(x, y)
    out = []
    with eval_mode(model), torch.enable_grad():
        for x0, yb in _attack_batches(model, x, y, batch_size):
            out.append(_CarliniWagnerBatch(model, x0, yb, lo, hi - lo, settings).run().detach().cpu())
    return torch.cat(out) if out else x.clone()


class _CarliniWagnerBatch:
    """One batch's attack: the binary search over ``c``, each round ``steps`` Adam steps."""

    def __init__(self, model: nn.Module, x0: torch.Tensor, yb: torch.Tensor, lo: float, span: float,
                 settings: CarliniWagner):
        n, device = len(x0), x0.device
        self.model, self.x0, self.yb, self.lo, self.span, self.settings = model, x0, yb, lo, span, settings
        unit = ((x0 - lo) / span).clamp(0, 1)
        self.w0 = torch.atanh((unit * 2 - 1) * 0.999999)
        self.c = torch.full((n,), float(settings.c_init), device=device)
        self.lower = torch.zeros(n, device=device)
        self.upper = torch.full((n,), 1e10, device=device)
        self.best_l2 = torch.full((n,), float("inf"), device=device)
        self.best = x0.clone()
        self.onehot = F.one_hot(yb, num_classes=forward(model, x0[:1]).shape[1]).bool()

    def run(self) -> torch.Tensor:
        """The smallest successful perturbation of each input (the input where none succeeded)."""
        for _ in range(self.settings.binary_steps):
            found = self._round()
            with torch.no_grad():
                self.upper = torch.where(found, torch.minimum(self.upper, self.c), self.upper)
                self.lower = torch.where(found, self.lower, torch.maximum(self.lower, self.c))
                self.c = torch.where(self.upper < 1e9, (self.lower + self.upper) / 2, self.c * 10)
        return self.best

    def _round(self) -> torch.Tensor:
        """``steps`` Adam steps at the current ``c``; which inputs succeeded at least once."""
        lo, span, x0, yb, onehot = self.lo, self.span, self.x0, self.yb, self.onehot
        confidence = self.settings.confidence
        w = self.w0.clone().requires_grad_(True)
        opt = torch.optim.Adam([w], lr=self.settings.lr)
        found = torch.zeros(len(x0), dtype=torch.bool, device=x0.device)
        for _ in range(self.settings.steps):
            xa = lo + span * (torch.tanh(w) + 1) / 2
            z = forward(self.model, xa)
            real = z[onehot]
            other = z.masked_fill(onehot, float("-inf")).amax(dim=1)
            l2 = (((xa - x0) / span) ** 2).flatten(1).sum(1)
            loss = (l2 + self.c * (real - other + confidence).clamp_min(0)).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                success = (real - other + confidence) < 0 if confidence else z.argmax(1) != yb
                better = success & (l2 < self.best_l2)
                self.best_l2 = torch.where(better, l2, self.best_l2)
                self.best[better] = xa.detach()[better]
                found |= success
        return found
