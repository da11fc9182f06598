"""A tiny regression-fuzzing problem whose M1 predicts every class (the surprise checks group the
training activations by M1's predictions, so they need more than one).

``band_model``: a ``digits_mlp`` (Flatten, Linear(64, 6), LeakyReLU, Linear(6, 3)) on 8x8
images with hand-set weights: hidden unit ``k < 3`` is the mean brightness of horizontal band
``k`` (rows 0-2, 3-5, 6-7), units 3-5 are seeded noise, and the logits are ten times the three
band units, so M1 predicts the brightest band. M2 is M1 with seeded weight noise.
"""

from __future__ import annotations

import numpy as np
import torch

from deepfault.models import ModelFile, save_model
from deepfault.models.zoo import digits_mlp

BANDS = ((0, 1, 2), (3, 4, 5), (6, 7))
ARCH_KWARGS = {"hidden": [6], "num_classes": 3}


def band_model(noise: float = 0.0, seed: int = 0) -> torch.nn.Module:
    m = digits_mlp(hidden=(6,), num_classes=3)
    g = torch.Generator().manual_seed(seed)
    w = torch.zeros(6, 64)
    for k, rows in enumerate(BANDS):
        for r in rows:
            w[k, r * 8 : (r + 1) * 8] = 1.0 / (8 * len(rows))
    w[3:] = torch.randn(3, 64, generator=g) * 0.1
    w2 = torch.zeros(3, 6)
    w2[:, :3] = torch.eye(3) * 10
    with torch.no_grad():
        m.fc1.weight.copy_(w)
        m.fc1.bias.zero_()
        m.logits.weight.copy_(w2)
        m.logits.bias.zero_()
        if noise:
            g2 = torch.Generator().manual_seed(seed + 1)
            for p in m.parameters():
                p.add_(torch.randn(p.shape, generator=g2) * noise)
    return m.eval()


def band_problem(n: int = 240, n_train: int = 600, noise: float = 0.005):
    """``(m1, m2, x, y, x_train)``: test images labelled by M1 (a few relabelled, so some seeds
    are wrong), and training images."""
    m1, m2 = band_model(), band_model(noise=noise)
    x = torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    x_train = torch.rand(n_train, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        y = m1(x).argmax(1)
    y[::15] = (y[::15] + 1) % 3
    return m1, m2, x, y, x_train


def save_band_files(folder, *, tabular: bool = False):
    """M1/M2 model files and ``data.npz`` (test and training splits) in ``folder``; with
    ``tabular`` the inputs are 64-feature vectors instead of 1x8x8 images."""
    m1, m2, x, y, x_train = band_problem()
    with torch.no_grad():
        y_train = m1(x_train).argmax(1).numpy()
    shape = [64] if tabular else [1, 8, 8]
    xs, xt = (a.numpy().reshape(len(a), *shape) for a in (x, x_train))
    np.savez(folder / "data.npz", x=xs, y=y.numpy(), x_train=xt, y_train=y_train,
             class_names=np.array(["top", "middle", "bottom"]))
    for name, m in (("m1", m1), ("m2", m2)):
        save_model(folder / f"{name}.pt", ModelFile(m, "digits_mlp", ARCH_KWARGS, None, (0.0, 1.0),
                                                    meta={"input_shape": shape}))
    return folder
