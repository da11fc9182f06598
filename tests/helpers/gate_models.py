"""Tiny hand-set classifiers for the gate's tests: three classes read off the first three of
four features, so every prediction can be worked out on paper."""

from __future__ import annotations

import warnings

import numpy as np
import torch


def linear(damage: float = 1.0, damaged_class: int = 2) -> torch.nn.Linear:
    """``logits = x[:3]`` (M1), or with one class's logit scaled by ``damage`` (a damaged M2)."""
    m = torch.nn.Linear(4, 3)
    with torch.no_grad():
        m.weight.zero_()
        m.bias.zero_()
        for c in range(3):
            m.weight[c, c] = 1.0
        m.weight[damaged_class, damaged_class] = damage
    return m.eval()


def split(n: int = 300, seed: int = 0, noise: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """``n`` inputs in [0, 1)^4 labelled by M1's rule, the first ``noise`` labels shifted by one."""
    x = np.random.default_rng(seed).random((n, 4)).astype(np.float32)
    y = x[:, :3].argmax(1).astype(np.int64)
    y[:noise] = (y[:noise] + 1) % 3
    return x, y


def save_pair(folder, n: int = 300) -> None:
    """``m1.ts`` (M1), ``m2.ts`` (class 2 damaged), ``m4.ts`` (four classes) and ``data.npz``."""
    x, y = split(n)
    np.savez(folder / "data.npz", x=x, y=y, x_train=x, y_train=y, class_names=np.array(["a", "b", "c"]))
    four = torch.nn.Linear(4, 4)
    for name, m in (("m1.ts", linear()), ("m2.ts", linear(0.5)), ("m4.ts", four)):
        with warnings.catch_warnings():  # torch.jit.script's deprecation: TorchScript files are still read
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.script(m).save(str(folder / name))  # TorchScript: any module, no architecture to name
