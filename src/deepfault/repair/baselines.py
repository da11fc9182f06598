"""Baseline augmentations: as many inputs as were found, but not found by testing.

- ``random-train``: random training inputs with their labels;
- ``random-test``: random test inputs with their labels (DeepXplore Figure 10's "random");
- ``fgsm``: one FGSM step (:func:`deepfault.core.attacks.fgsm`) from those random test
  inputs against the model under repair, labelled with the originals' labels
  (Figure 10's "adversarial");
- ``bim``: the Basic Iterative Method (:func:`deepfault.core.attacks.bim`, batched) from
  the same random test inputs.

Random test inputs are never drawn from a held-out seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from torch import nn

if TYPE_CHECKING:
    from .config import RepairConfig

__all__ = ["BaselineInputs", "baseline_inputs"]


@dataclass(frozen=True, eq=False)
class BaselineInputs:
    """Inputs of one baseline: ``x`` ``(n, *input)``, ``y`` ``(n,)`` and the test indices
    they came from (``None`` for training inputs).
    """

    name: str
    x: np.ndarray
    y: np.ndarray
    test_index: np.ndarray | None


def _draw(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if len(pool) == 0:
        return pool[:0]
    return np.sort(rng.choice(pool, size=n, replace=n > len(pool)))


def baseline_inputs(
    model: nn.Module,
    data,
    n: int,
    config: RepairConfig,
    *,
    test_pool: np.ndarray,
    output_kind: str = "logits",
) -> list[BaselineInputs]:
    """The inputs of every baseline in ``config.baselines``, ``n`` each.

    Args:
        model: The model under repair (the adversarial inputs attack it).
        data: The data set.
        n: Inputs per baseline.
        config: The repair's settings: ``baselines`` (:data:`~.config.BASELINES`), ``seed`` (of the
            draws), ``eps`` (radius of FGSM/BIM as a share of the pixel range), ``bim_steps`` (BIM
            iterations) and ``batch_size`` (inputs per attack pass; the inputs do not depend on it).
        test_pool: Test indices the random test inputs may come from.
        output_kind: ``logits`` or ``probabilities``.
    """
    from ..core.attacks import bim, fgsm

    names, seed, eps, bim_steps, batch_size = (config.baselines, config.seed, config.eps, config.bim_steps,
                                               config.batch_size)

    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(22,)))
    train_idx = _draw(np.arange(len(data.x_train)), n, rng)
    test_idx = _draw(np.asarray(test_pool, np.int64), n, rng)
    x_test, y_test = data.x_test[test_idx], data.y_test[test_idx]
    lo, hi = (float(b) for b in data.bounds)
    batch = {} if batch_size is None else {"batch_size": int(batch_size)}
    out = []
    for name in names:
        if name == "random-train":
            out.append(BaselineInputs(name, data.x_train[train_idx], data.y_train[train_idx], None))
        elif name == "random-test":
            out.append(BaselineInputs(name, x_test, y_test, test_idx))
        elif name == "fgsm":
            x = fgsm(model, x_test, y_test, eps=eps * (hi - lo), bounds=data.bounds, output_kind=output_kind,
                     **batch)
            out.append(BaselineInputs(name, x.numpy(), y_test, test_idx))
        elif name == "bim":
            x = bim(model, x_test, y_test, bounds=data.bounds, eps=eps, steps=bim_steps, **batch)
            out.append(BaselineInputs(name, x.numpy(), y_test, test_idx))
    return out
