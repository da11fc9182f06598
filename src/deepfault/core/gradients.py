"""The RMS-normalised gradient that DeepFault's synthesis and DeepXplore's ascent both step along.

Both papers' code divides each input's gradient by its root mean square (plus a small
constant, the same in both prototypes), so a step's size does not depend on the gradient's
scale: ``g / (sqrt(mean(g ** 2)) + RMS_EPS)``.
"""

from __future__ import annotations

import torch

__all__ = ["RMS_EPS", "normalize"]

#: Added to the gradient's root mean square before dividing (DeepFault's prototype and
#: DeepXplore's code alike).
RMS_EPS = 1e-5


def normalize(grads: torch.Tensor) -> torch.Tensor:
    """``g / (sqrt(mean(g ** 2)) + 1e-5)`` for each input of a ``(B, *input)`` batch.

    Examples:
        >>> normalize(torch.full((2, 4), 3.0)).tolist()[0]  # doctest: +ELLIPSIS
        [0.99999..., 0.99999..., 0.99999..., 0.99999...]
    """
    rms = grads.flatten(1).pow(2).mean(dim=1).sqrt().add(RMS_EPS)
    return grads / rms.view(-1, *([1] * (grads.ndim - 1)))
