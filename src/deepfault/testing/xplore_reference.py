"""DeepXplore one seed at a time, written straight from the spec (a test oracle).

:func:`search_reference` runs the joint gradient ascent of DeepXplore spec section 2 with
Python loops over seeds, models and neurons, one forward and backward pass per seed, and
the domain constraints written out with slices. It draws the same random numbers as
:func:`deepfault.xplore.search.search` (:func:`~deepfault.xplore.search.draw_randomness`)
and follows the same order of coverage updates (all inputs found at one step update
coverage before the next step's neurons are drawn), so on the same seeds the two return
the same inputs. It is also the per-seed baseline of ``benchmarks/bench_xplore.py``.
Never use it for real work.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
from torch import nn

from ..core.capture import capture, eval_mode, model_device
from ..core.gradients import RMS_EPS
from ..xplore.config import XploreConfig
from ..xplore.search import draw_randomness

__all__ = ["search_reference", "constrain_reference"]


def constrain_reference(name: str, params: dict, g: torch.Tensor, u) -> torch.Tensor:
    """The domain constraint on one input's gradient ``g`` ``(*input)``, from the table of
    spec section 3, with the uniforms ``u`` of this seed and step.
    """
    out = torch.zeros_like(g)
    if name == "none":
        return g.clone()
    if name == "light":
        return out + g.mean()
    h, w = g.shape[-2:]
    if name == "occl":
        x, y, rh, rw = params["x"], params["y"], params["h"], params["w"]
        out[..., y : y + rh, x : x + rw] = g[..., y : y + rh, x : x + rw]
        return out
    if name == "blackout":
        m = params["size"]
        top = min(int(u[0] * (h - m + 1)), h - m)
        left = min(int(u[1] * (w - m + 1)), w - m)
        patch = g[..., top : top + m, left : left + m]
        if float(patch.mean()) < 0:
            out[..., top : top + m, left : left + m] = -1.0
        return out
    raise ValueError(f"unknown constraint {name!r}")


def _values(model, layers, transform, x):
    """``(scores (classes,), neuron values (M,))`` of one input ``x`` ``(1, *input)``."""
    with capture(model, layers, transform=transform) as rec:
        out = model(x)
        values = rec.collect()
    return out[0], values[0]


def search_reference(
    models: list[nn.Module],
    seeds,
    *,
    config: XploreConfig,
    bounds=(0.0, 1.0),
    output_kinds=None,
    fixed=None,
) -> dict:
    """The search of :func:`deepfault.xplore.search.search`, one seed at a time.

    ``bounds`` are numbers or per-feature arrays (each step clipped element by element);
    ``fixed`` is ``None`` or a bool mask of one input's shape whose elements get no step and are
    written back from the seed after each one.

    Returns:
        A dict: ``rows``, ``inputs``, ``iteration``, ``predictions`` (each found input, by
        seed row), ``already_differ`` (rows), ``covered`` (per model, list of bools) and
        ``neurons`` (``{(row, step): [neuron per model]}``, the neurons each step used).
    """
    lo: float | torch.Tensor
    hi: float | torch.Tensor
    if np.ndim(bounds[0]) == 0 and np.ndim(bounds[1]) == 0:
        lo, hi = float(bounds[0]), float(bounds[1])
    else:
        lo, hi = (torch.as_tensor(np.broadcast_to(np.asarray(b, np.float64), np.shape(seeds)[1:]).copy())
                  for b in bounds)
    n = len(models)
    kinds = output_kinds or ["logits"] * n
    constraint = config.constraint()
    cname, cparams = constraint.name, constraint.params()
    layers = config.layer_selection()
    device = model_device(models[0])
    x_all = torch.as_tensor(np.asarray(seeds), dtype=torch.float32)
    draws = draw_randomness(len(x_all), n, config, constraint)
    with contextlib.ExitStack() as stack:
        for m in models:
            stack.enter_context(eval_mode(m))
        return _search(models, x_all, draws, config, cname, cparams, layers, device, kinds, lo, hi,
                       None if fixed is None else torch.as_tensor(np.asarray(fixed, dtype=bool)))


def _cover(covered: list[list[bool]], models, layers, x: torch.Tensor, threshold: float) -> None:
    """Mark each model's neurons whose scaled value at ``x`` exceeds ``threshold`` as covered."""
    for k, m in enumerate(models):
        with torch.no_grad():
            _, v = _values(m, layers, "layer-minmax", x)
        if covered[k] is None:
            covered[k] = [False] * len(v)
        for i in range(len(v)):
            if float(v[i]) > threshold:
                covered[k][i] = True


def _pick_neurons(covered: list[list[bool]], u: np.ndarray) -> list[int]:
    """One neuron per model, drawn by ``u[k]`` among its uncovered ones (all when none is left)."""
    picks = []
    for k in range(len(covered)):
        free = [i for i in range(len(covered[k])) if not covered[k][i]]
        if not free:
            free = list(range(len(covered[k])))
        picks.append(free[min(int(float(u[k]) * len(free)), len(free) - 1)])
    return picks


def _objective(models, layers, kinds, config, x: torch.Tensor, c: int, j: int, neurons: list[int]):
    """The joint objective at ``x``: every model's score of the common class ``c`` (model ``j``'s
    weighted ``-lambda1``) plus ``lambda2`` times each model's chosen neuron.
    """
    obj = 0.0
    for k, m in enumerate(models):
        scores, values = _values(m, layers, "raw", x)
        if config.objective == "probabilities" and kinds[k] == "logits":
            scores = torch.softmax(scores, dim=0)
        weight = -config.lambda1 if k == j else 1.0
        obj = obj + weight * scores[c] + config.lambda2 * values[neurons[k]]
    return obj


def _move(x: torch.Tensor, g: torch.Tensor, config, lo, hi, fixed, seed: torch.Tensor) -> torch.Tensor:
    """One step of ``x`` ``(1, *input)`` along ``g`` ``(*input)``: fixed elements get none and are
    written back from ``seed``; clipped (per element with per-feature bounds, in float64).
    """
    if fixed is not None:
        g = g.clone()
        g[fixed] = 0.0
    moved = x + config.step * g
    if config.clip and isinstance(lo, torch.Tensor):
        moved = torch.maximum(torch.minimum(moved.double(), hi), lo).float()
    elif config.clip:
        moved = torch.clamp(moved, lo, hi)
    if fixed is not None:
        moved[0][fixed] = seed[fixed].to(moved.device)
    return moved


def _search(models, x_all, draws, config, cname, cparams, layers, device, kinds, lo, hi, fixed) -> dict:
    n = len(models)

    def predictions(x):
        with torch.no_grad():
            return [int(m(x.to(device))[0].argmax()) for m in models]

    def cover(x):
        _cover(covered, models, layers, x.to(device), config.threshold)

    with torch.no_grad():
        sizes = [len(_values(m, layers, "raw", x_all[:1].to(device))[1]) for m in models]
    covered = [[False] * s for s in sizes]
    found: dict[str, list] = {"rows": [], "inputs": [], "iteration": [], "predictions": []}
    chosen: dict = {}
    common, differ = [0] * len(x_all), []
    size = config.batch_size or len(x_all)
    with torch.enable_grad():
        for start in range(0, len(x_all), size):
            group = []
            for r in range(start, min(start + size, len(x_all))):  # step 0: the seeds themselves
                p = predictions(x_all[r : r + 1])
                common[r] = p[0]
                if len(set(p)) > 1:
                    differ.append(r)
                    cover(x_all[r : r + 1])
                else:
                    group.append(r)
            current = {r: x_all[r : r + 1].clone() for r in group}
            per_seed = {}
            for it in range(config.iterations + 1):
                if it > 0:  # check every seed that moved, then update coverage with the found
                    newly = []
                    for r in list(current):
                        p = predictions(current[r])
                        if len(set(p)) > 1:
                            newly.append(r)
                            found["rows"].append(r)
                            found["inputs"].append(current[r][0].clone())
                            found["iteration"].append(it)
                            found["predictions"].append(p)
                    for r in newly:
                        cover(current.pop(r))
                if it == config.iterations or not current:
                    break
                for r in list(current):
                    if config.neurons == "per-iteration" or it == 0:
                        step = it if config.neurons == "per-iteration" else 0
                        per_seed[r] = _pick_neurons(covered, draws.neuron_u[r, step])
                    chosen[(r, it)] = list(per_seed[r])
                    c, j = common[r], int(draws.targets[r])
                    x = current[r].to(device).requires_grad_(True)
                    obj = _objective(models, layers, kinds, config, x, c, j, per_seed[r])
                    (g,) = torch.autograd.grad(obj, x)
                    g = g[0]
                    g = g / (math.sqrt(float((g * g).mean())) + RMS_EPS)
                    g = constrain_reference(cname, cparams, g, draws.constraint_u[r, it])
                    current[r] = _move(x.detach(), g, config, lo, hi, fixed, x_all[r]).cpu()
    order = np.argsort(found["rows"], kind="stable")
    return {
        "rows": np.asarray(found["rows"], dtype=np.int64)[order],
        "inputs": (torch.stack(found["inputs"]).numpy()[order] if found["inputs"]
                   else np.zeros((0, *x_all.shape[1:]), np.float32)),
        "iteration": np.asarray(found["iteration"], dtype=np.int64)[order],
        "predictions": np.asarray(found["predictions"], dtype=np.int64).reshape(-1, n)[order],
        "already_differ": np.asarray(differ, dtype=np.int64),
        "covered": covered,
        "neurons": chosen,
        "targets": draws.targets,
    }
