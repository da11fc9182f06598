"""A plain, seeded training loop (Adam, cross-entropy) for zoo models."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..activations import model_device

__all__ = ["TrainResult", "fit", "accuracy"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    epochs: int
    train_loss: float
    val_accuracy: float | None


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray, *, batch_size: int = 1024) -> float:
    """Share of inputs whose arg-max prediction equals the label."""
    from ..evaluation import predict

    if len(x) == 0:
        return float("nan")
    return float((predict(model, x, batch_size=batch_size).argmax(1).numpy() == y).mean())


def fit(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int = 10,
    batch_size: int = 32,
    lr: float = 1e-3,
    val_fraction: float = 0.0,
    seed: int = 0,
) -> TrainResult:
    """Train ``model`` in place with Adam on shuffled mini-batches.

    Shuffling and the validation split use generators seeded from ``seed``; the global
    RNG is not touched (dropout draws inside a forked RNG state).
    """
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    n_val = int(round(len(x) * val_fraction))
    val_idx, train_idx = order[:n_val], order[n_val:]
    device = model_device(model)
    xt = torch.as_tensor(x[train_idx], dtype=torch.float32)
    yt = torch.as_tensor(y[train_idx], dtype=torch.long)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_value = float("nan")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for epoch in range(epochs):
            model.train()
            perm = torch.as_tensor(rng.permutation(len(xt)))
            total = 0.0
            for i in range(0, len(xt), batch_size):
                idx = perm[i : i + batch_size]
                opt.zero_grad()
                loss = F.cross_entropy(model(xt[idx].to(device)), yt[idx].to(device))
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            loss_value = total / max(len(xt), 1)
            log.debug("epoch %d: loss %.4f", epoch + 1, loss_value)
    model.eval()
    val_acc = accuracy(model, x[val_idx], y[val_idx]) if n_val else None
    return TrainResult(epochs, loss_value, val_acc)
