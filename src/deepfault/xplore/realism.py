"""How far DeepXplore's found inputs moved from their seeds, and whether they still look like them
(SSIM to the seed, saturation, distances), and the warning that names the options to change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import DeepFaultError
from .config import XploreConfig

__all__ = ["BOUND_TOL", "VISIBLE_CHANGE_SSIM", "Realism", "input_ssim", "measure_realism",
           "saturation_warning"]


#: An element within this distance of a bound (or past it) is at the bound.
BOUND_TOL = 1e-6


#: SSIM to the seed below which a found input counts as visibly changed: noisy, shifted or
#: washed out at a glance (see docs/decisions.md, "xplore realism: SSIM to the seed"). On MNIST
#: seeds, Gaussian noise of sd 0.2 of the pixel range gives a median SSIM of about 0.71 and a
#: uniform brightening by 0.2 about 0.66; sd 0.1 gives 0.81.
VISIBLE_CHANGE_SSIM = 0.7


@dataclass(frozen=True)
class Realism:
    """How far the found inputs moved from their seeds, and whether they still look like them.

    Attributes:
        found: Inputs measured.
        mean_l1: Mean ``sum |x - seed|`` in the data's units (the paper's "diversity").
        mean_linf: Mean ``max |x - seed|`` in the data's units.
        saturated: Share of the inputs that saturate: clipped to the bounds, less than half
            of the seed's contrast (standard deviation over the elements) is left, because
            most pixels were pushed to a bound or shifted together: a digit turned into a
            black, white or flat grey square. ``None`` when nothing was found. Kept for the
            record; it reads 0 on inputs covered in noise, so :attr:`low_ssim` leads.
        still_differ_clipped: For runs without clipping, the share of inputs on which the
            models still disagree once clipped to the bounds (what a saved image would do);
            ``None`` for clipped runs or when nothing was found.
        outside_bounds: Share of inputs with an element outside the bounds (0 when clipped).
        mean_ssim: Mean SSIM of each input (clipped to the bounds) to its seed
            (:func:`input_ssim`); ``None`` for inputs that are no images or when nothing was found.
        low_ssim: Share of the inputs whose SSIM to their seed is below ``ssim_threshold``:
            visibly noisy, shifted or washed out (``None`` as ``mean_ssim``).
        ssim_threshold: The threshold of ``low_ssim`` (:data:`VISIBLE_CHANGE_SSIM`).
    """

    found: int
    mean_l1: float | None
    mean_linf: float | None
    saturated: float | None
    still_differ_clipped: float | None = None
    outside_bounds: float | None = None
    mean_ssim: float | None = None
    low_ssim: float | None = None
    ssim_threshold: float = VISIBLE_CHANGE_SSIM

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _saturates(inputs: np.ndarray, seeds: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """``(F,)`` bool: clipped to ``bounds`` (what a saved image shows), the input keeps less
    than half of its seed's contrast, the standard deviation over its elements.

    Pixels pushed to a bound (black or white squares) or shifted together towards one (flat
    grey squares) lose the contrast; a noisy but recognisable digit keeps it or gains. The
    share of pixels at a bound cannot tell these apart on MNIST, where most of a digit's
    pixels are at 0 already.
    """
    lo, hi = bounds
    x = np.clip(inputs.reshape(len(inputs), -1), lo, hi)
    s = seeds.reshape(len(seeds), -1)
    flat: np.ndarray = x.std(axis=1) < 0.5 * s.std(axis=1)  # numpy types a reduction as Any
    return flat


def input_ssim(inputs, seeds, bounds: tuple[float, float]) -> np.ndarray | None:
    """``(F,)`` SSIM of each input, clipped to ``bounds`` (what a saved image shows), to its seed.

    The SSIM of :func:`deepfault.core.ssim.ssim` (Gaussian window of 11, or the
    largest odd one that fits, ``L = hi - lo``), batched. ``None`` when the inputs are not
    images ``(F, C, H, W)`` with ``C`` 1 or 3 first or last and ``H, W >= 3``.
    """
    import torch

    from ..core.ssim import ssim

    x = np.asarray(inputs)
    if x.ndim != 4:
        return None
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):  # channels last
        x, s = x.transpose(0, 3, 1, 2), np.asarray(seeds).transpose(0, 3, 1, 2)
    else:
        s = np.asarray(seeds)
    if x.shape[1] not in (1, 3) or min(x.shape[2:]) < 3:
        return None
    lo, hi = float(bounds[0]), float(bounds[1])
    if len(x) == 0:
        return np.zeros(0, np.float64)
    dtype = torch.float64 if x.dtype == np.float64 else torch.float32
    value = ssim(torch.as_tensor(np.clip(x, lo, hi), dtype=dtype), torch.as_tensor(s, dtype=dtype),
                 data_range=hi - lo)
    return value.double().numpy()


def measure_realism(inputs, seeds, bounds: tuple[float, float], *,
                    still_differ_clipped: np.ndarray | None = None,
                    ssim_threshold: float = VISIBLE_CHANGE_SSIM) -> Realism:
    """The :class:`Realism` of found inputs ``(F, *input)`` against their seeds.

    Args:
        inputs: The generated inputs.
        seeds: Their seeds, row for row.
        bounds: ``(lo, hi)`` of the data.
        still_differ_clipped: ``(F,)`` bool, whether the models still disagree on each input
            clipped to ``bounds`` (runs without clipping).
        ssim_threshold: SSIM to the seed below which an input counts in ``low_ssim``.
    """
    x = np.asarray(inputs, dtype=np.float64)
    s = np.asarray(seeds, dtype=np.float64)
    if x.shape != s.shape:
        raise DeepFaultError(f"inputs and seeds must have the same shape; got {x.shape} and {s.shape}")
    if len(x) == 0:
        return Realism(0, None, None, None, None, None, ssim_threshold=ssim_threshold)
    d = np.abs(x - s).reshape(len(x), -1)
    lo, hi = float(bounds[0]), float(bounds[1])
    flat = x.reshape(len(x), -1)
    outside = ((flat < lo - BOUND_TOL) | (flat > hi + BOUND_TOL)).any(axis=1)
    still = None if still_differ_clipped is None else float(np.mean(still_differ_clipped))
    similarity = input_ssim(np.asarray(inputs, np.float32), np.asarray(seeds, np.float32), (lo, hi))
    mean_ssim = None if similarity is None else float(similarity.mean())
    low = None if similarity is None else float((similarity < ssim_threshold).mean())
    return Realism(len(x), float(d.sum(axis=1).mean()), float(d.max(axis=1).mean()),
                   float(_saturates(x, s, (lo, hi)).mean()), still, float(outside.mean()), mean_ssim, low,
                   ssim_threshold)


def saturation_warning(realism: Realism, config: XploreConfig | None = None) -> str | None:
    """A one-line warning when most found inputs are far from their seeds (SSIM below the
    threshold) or saturate (``None`` otherwise).
    """
    far = realism.low_ssim is not None and realism.low_ssim > 0.5
    saturated = realism.saturated is not None and realism.saturated > 0.5
    if not (far or saturated):
        return None
    # an element can move by step size x iterations, and that product does the damage: on MNIST's
    # LeNets 0.03 x 50 left 84% of the inputs below SSIM 0.7, 0.03 x 10 50% (docs/xplore.md)
    now = "" if config is None else (f", now {config.iterations} x {config.step:g} = "
                                     f"{config.iterations * config.step:g}")
    fixes = [f"fewer --iterations or a smaller --step-size (an element can move by their product{now})"]
    if config is None or config.transform == "light":
        fixes.append("--constraint none instead of light")
    if config is None or config.transform == "none":
        fixes.append("--constraint occl (one rectangle changes, the rest stays the seed's)")
    what = []
    if far:
        what.append(f"{realism.low_ssim:.0%} of the {realism.found} difference-inducing inputs are far from "
                    f"their seeds (SSIM below {realism.ssim_threshold:g}: visibly noisy, shifted or washed "
                    "out)")
    if saturated:
        what.append(f"{realism.saturated:.0%} of the {realism.found} difference-inducing inputs saturate "
                    "(pixels pushed to a bound or shifted together: less than half the seed's contrast left)")
    text = f"{' and '.join(what)}: they are hardly images any more; use {', or '.join(fixes)}"
    if realism.still_differ_clipped is not None:
        text += f"; without clipping only {realism.still_differ_clipped:.0%} still differ once clipped"
    return text
