"""Fine-tuning: a copy of the model trained further on found inputs mixed with training inputs."""

from __future__ import annotations

import copy

import numpy as np
from torch import nn

from ..errors import DeepFaultError

__all__ = ["finetune"]


def finetune(
    model: nn.Module,
    x: np.ndarray | tuple[np.ndarray, ...],
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    seed: int,
    progress: bool = False,
):
    """Train a copy of ``model`` on ``(x, y)`` with Adam at a constant rate (the zoo's loop,
    :func:`deepfault.models.train.fit`, without a validation split).

    The caller's model is not changed. Shuffling and dropout are seeded by ``seed``. ``x`` may
    be a tuple of arrays whose rows are the inputs end to end (found inputs and mixed-in
    training inputs), read without joining them.

    Returns:
        ``(repaired, train_result)``: the trained copy in ``eval()`` mode and the
        :class:`~deepfault.models.train.TrainResult`.

    Raises:
        DeepFaultError: No inputs, or the fine-tuning was interrupted.
    """
    from ..models.train import TrainConfig, fit

    parts = tuple(np.asarray(p, np.float32) for p in (x if isinstance(x, tuple) else (x,)))
    if sum(len(p) for p in parts) == 0:
        raise DeepFaultError("nothing to fine-tune on: no found inputs and no training inputs")
    repaired = copy.deepcopy(model)
    for p in repaired.parameters():
        p.requires_grad_(True)
    config = TrainConfig(
        epochs=epochs, batch_size=batch_size, lr=lr, val_fraction=0.0, seed=seed, schedule="constant"
    )
    # threads=None: the ones the repair entry (or the command line) applied for the models stay
    result = fit(repaired, parts, np.asarray(y, np.int64), config, progress=progress, threads=None)
    if result.interrupted:
        raise KeyboardInterrupt
    return repaired.eval(), result
