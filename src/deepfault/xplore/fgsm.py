"""The fast gradient sign method (Goodfellow et al., ICLR 2015), the adversarial baseline of
DeepXplore's Figure 9: ``x' = clip(x + eps * sign(d loss(x, y) / d x), lo, hi)`` with the
cross-entropy loss of the true label.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..core.capture import as_tensor, eval_mode, forward, model_device
from ..errors import DeepFaultError

__all__ = ["fgsm"]


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
