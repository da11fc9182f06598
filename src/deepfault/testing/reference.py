"""Literal, loop-by-loop versions of the spectrum and of Algorithm 2.

They follow the formulas one input and one neuron at a time, as the published prototype
did, and exist only as test oracles and as the baseline of the speed benchmarks. Never
use them for real work: they are orders of magnitude slower.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..core.capture import capture, eval_mode, model_device
from ..core.gradients import RMS_EPS
from ..localization.synthesis import check_synthesis_args, neuron_pairs

__all__ = ["spectrum_reference", "synthesize_reference"]


def spectrum_reference(model: nn.Module, inputs, labels, *, layers=None, threshold: float = 0.0):
    """``(as, af, ns, nf)`` counted with Python loops over inputs and neurons."""
    device = model_device(model)
    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
    y = np.asarray(labels)
    counts: dict[str, list[int]] | None = None
    with eval_mode(model), capture(model, layers) as rec, torch.no_grad():
        for i in range(len(x)):
            logits = model(x[i : i + 1].to(device))
            values = rec.collect()[0].tolist()
            passed = int(logits[0].argmax()) == int(y[i])
            if counts is None:
                counts = {key: [0] * len(values) for key in ("as", "af", "ns", "nf")}
            for j, v in enumerate(values):
                key = ("a" if v > threshold else "n") + ("s" if passed else "f")
                counts[key][j] += 1
    assert counts is not None, "no inputs"
    return tuple(np.array(counts[key]) for key in ("as", "af", "ns", "nf"))


def synthesize_reference(
    model: nn.Module,
    inputs,
    neurons,
    *,
    step: float = 1.0,
    distance: float = 0.1,
    bounds=(0.0, 1.0),
    normalize: bool = True,
    iterations: int = 1,
) -> torch.Tensor:
    """Algorithm 2 one input at a time, one gradient graph per neuron."""
    step, distance, lo, hi, iterations = check_synthesis_args(step, distance, bounds, iterations)
    pairs = neuron_pairs(neurons)
    device = model_device(model)
    layer_names = list(dict.fromkeys(layer for layer, _ in pairs))
    out = []
    with eval_mode(model), capture(model, layer_names) as rec, torch.enable_grad():
        for t in torch.as_tensor(np.asarray(inputs), dtype=torch.float32):
            t0 = t[None].to(device)
            cur = t0
            for _ in range(iterations):
                total = torch.zeros_like(cur)
                for layer, unit in pairs:
                    x = cur.detach().clone().requires_grad_(True)
                    model(x)
                    values = rec.collect()
                    assert rec.layout is not None  # collect() sets it
                    phi = values[0, rec.layout.index(layer, unit)]
                    (g,) = torch.autograd.grad(phi, x)
                    if normalize:
                        g = g / (g.pow(2).mean().sqrt() + RMS_EPS)
                    total = total + g
                g = total / len(pairs)
                cur = cur.detach() + torch.clamp(step * g, -distance, distance)
                cur = torch.clamp(torch.min(torch.max(cur, t0 - distance), t0 + distance), lo, hi)
            out.append(cur[0].cpu())
    return torch.stack(out)
