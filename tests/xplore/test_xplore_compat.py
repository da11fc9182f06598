"""DeepXplore's published-code choices on hand-set models, realism figures, threads, options.

The published code cannot run here; its behaviour on these tiny models follows from its
source (``gen_diff.py``: ``gen_img += grads * step`` without clipping, ``neuron_to_cover``
once per seed, ``-t`` the target of every seed, ``random.choice`` seeds) and is worked out
by hand below.
"""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.errors import DeepFaultError
from deepfault.testing.xplore_reference import search_reference
from deepfault.xplore import XploreConfig, search, select_seeds
from deepfault.xplore.config import PUBLISHED
from deepfault.xplore.results import Realism, measure_realism, saturation_warning
from deepfault.xplore.search import auto_threads
from helpers.xplore_models import conv


def _linear(weight, bias):
    layer = nn.Linear(2, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    return nn.Sequential(layer)


def _pair():
    """Model 0: logits (a, b). Model 1: logits (2a, 3a - 1.2). On the seed (0.9, 0.1) both say 0.

    With target 0 and lambda2 0 the objective is ``2a - a = a``: the gradient is (1, 0), after
    normalisation ``(1 / (sqrt(1/2) + 1e-5), 0)``, so each step adds ``s * 1.41419`` to ``a``.
    Model 1 turns to class 1 once ``a > 1.2`` (outside [0, 1]); model 0 never leaves class 0.
    With target 1 the objective is ``-a``: ``a`` falls and model 0 turns to 1 once ``a < 0.1``.
    """
    return [_linear([[1, 0], [0, 1]], [0, 0]), _linear([[2, 0], [3, 0]], [0, -1.2])]


SEED = np.array([[0.9, 0.1]], dtype=np.float32)
UNIT = 1 / (math.sqrt(0.5) + 1e-5)


def _config(**kw):
    return XploreConfig(**{**PUBLISHED, "lambda2": 0.0, "transform": "none", "step_size": 0.1,
                           "iterations": 10, **kw})


def test_without_clipping_the_input_leaves_the_bounds_as_in_the_published_code():
    result = search(_pair(), SEED, config=_config(clip=False))
    assert result.num_found == 1
    assert result.found.iteration.tolist() == [3]
    np.testing.assert_allclose(result.found.inputs[0], [0.9 + 3 * 0.1 * UNIT, 0.1], atol=1e-5)
    assert result.found.predictions.tolist() == [[0, 1]]
    r = result.realism
    assert r.outside_bounds == 1.0
    assert r.still_differ_clipped == 0.0  # clipped, a = 1: both say 0


def test_with_clipping_the_same_seed_finds_nothing():
    result = search(_pair(), SEED, config=_config(clip=True))
    assert result.num_found == 0
    assert result.realism.found == 0


def test_a_fixed_target_is_every_seeds_target():
    seeds = np.repeat(SEED, 4, axis=0)
    result = search(_pair(), seeds, config=_config(target=1))
    assert result.targets.tolist() == [1, 1, 1, 1]
    # a = 0.9 - t * 0.141419 < 0.1 first at t = 6; inside the bounds, so clipping changes nothing
    assert result.found.iteration.tolist() == [6] * 4
    np.testing.assert_allclose(result.found.inputs[:, 0], 0.9 - 6 * 0.1 * UNIT, atol=1e-5)


def test_per_seed_neurons_are_drawn_once_and_kept():
    models = [conv(0.0), conv(0.02), conv(-0.02)]
    seeds = np.random.default_rng(0).uniform(0, 1, (12, 1, 6, 6)).astype(np.float32)
    config = XploreConfig.published(step_size=0.2, iterations=8, threshold=0.5, transform="none", lambda2=0.5)
    ref = search_reference(models, seeds, config=config)
    by_row: dict = {}
    for (row, _step), picks in ref["neurons"].items():
        by_row.setdefault(row, set()).add(tuple(picks))
    assert by_row
    assert all(len(p) == 1 for p in by_row.values())
    assert max(s for _, s in ref["neurons"]) > 0  # rows did take several steps
    result = search(models, seeds, config=config)
    np.testing.assert_array_equal(result.found.rows, ref["rows"])
    np.testing.assert_allclose(result.found.inputs, ref["inputs"], atol=1e-5)


def test_published_settings_draw_seeds_with_replacement():
    index = select_seeds(5, 40, seed=0, replace=XploreConfig.published().replace)
    assert len(index) == 40
    assert len(set(index.tolist())) <= 5


def test_published_sets_every_choice():
    config = XploreConfig.published(seeds=300)
    assert (config.clip, config.neurons, config.target, config.layers, config.replace) == \
        (False, "per-seed", 0, "deepxplore", True)
    assert (config.step, config.iterations, config.transform, config.lambda1, config.lambda2) == \
        (10.0, 20, "light", 1.0, 0.1)
    assert config.seeds == 300


def test_explicit_seed_indices_are_used_in_order(caplog):
    """A repeated index is dropped with a warning (issue 43: it was searched, and counted, twice)."""
    from deepfault.xplore import xplore

    pool = np.random.default_rng(1).uniform(0, 1, (10, 1, 6, 6)).astype(np.float32)
    models = [conv(0.0), conv(0.02)]
    config = XploreConfig(seed_indices=(7, 2, 7), step_size=0.2, iterations=3)
    assert "seed indices: 1 repeated value(s) dropped (7)" in caplog.text
    assert config.seed_indices == (7, 2)
    assert config.num_seeds == 2
    result = xplore(models, pool, config=config)
    assert result.seed_index.tolist() == [7, 2]
    with pytest.raises(DeepFaultError,
                       match=r"seed index 10 is outside the 10 inputs to draw from \(valid: 0..9\)"):
        xplore(models, pool, config=XploreConfig(seed_indices=(1, 10)))
    with pytest.raises(DeepFaultError, match=r"seed_indices must be one or more .*; got \(\)"):
        XploreConfig(seed_indices=())
    with pytest.raises(DeepFaultError, match=r"seed_indices must be .* from 0 to .*; got \(3, -1\)"):
        XploreConfig(seed_indices=[3, -1])


# --- realism against a naive computation ---------------------------------------------------


def _std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _naive_realism(inputs, seeds, lo, hi):
    l1, linf, sat, out = [], [], [], []
    for x, s in zip(inputs, seeds, strict=True):
        xs, ss = x.ravel().tolist(), s.ravel().tolist()
        d = [abs(a - b) for a, b in zip(xs, ss, strict=True)]
        l1.append(sum(d))
        linf.append(max(d))
        clipped = [min(max(v, lo), hi) for v in xs]
        sat.append(_std(clipped) < 0.5 * _std(ss))
        out.append(any(v < lo - 1e-6 or v > hi + 1e-6 for v in xs))
    n = len(inputs)
    return sum(l1) / n, sum(linf) / n, sum(sat) / n, sum(out) / n


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-1.0, 2.0)])
def test_realism_equals_a_naive_loop(bounds):
    rng = np.random.default_rng(3)
    lo, hi = bounds
    seeds = rng.uniform(lo, hi, (40, 1, 5, 5)).astype(np.float32)
    seeds[:5] = lo  # seeds with no inner element
    seeds[5:10, :, :2] = hi
    inputs = seeds + rng.normal(0, 0.8 * (hi - lo), seeds.shape).astype(np.float32)
    inputs[::3] = np.clip(inputs[::3], lo, hi)
    inputs[1::4] = np.where(rng.random(inputs[1::4].shape) < 0.7, hi, inputs[1::4])
    inputs[2::5] = np.where(rng.random(inputs[2::5].shape) < 0.9, lo, seeds[2::5])  # nearly black squares
    inputs[3::7] = 0.2 * seeds[3::7] + 0.4 * (lo + hi)  # flat grey: a fifth of the contrast
    r = measure_realism(inputs, seeds, bounds)
    l1, linf, sat, out = _naive_realism(inputs.astype(np.float64), seeds.astype(np.float64), lo, hi)
    assert r.found == 40
    assert r.still_differ_clipped is None
    assert r.mean_l1 == pytest.approx(l1, rel=1e-9)
    assert r.mean_linf == pytest.approx(linf, rel=1e-9)
    assert r.saturated == pytest.approx(sat)
    assert r.outside_bounds == pytest.approx(out)
    assert 0 < r.saturated < 1
    assert 0 < r.outside_bounds < 1


def test_realism_of_nothing_found():
    r = measure_realism(np.zeros((0, 3)), np.zeros((0, 3)), (0.0, 1.0))
    assert (r.found, r.mean_l1, r.saturated) == (0, None, None)
    assert saturation_warning(r) is None


def _brightness(w0, b0, w1, b1):
    """(N, 1, 6, 6) -> logits ``(w0 * mean(x) + b0, w1 * mean(x) + b1)``."""
    layer = nn.Linear(36, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[w0 / 36] * 36, [w1 / 36] * 36]))
        layer.bias.copy_(torch.tensor([b0, b1]))
    return nn.Sequential(nn.Flatten(), layer)


def test_saturation_warning_names_the_fixes():
    """Model 0 says 1 once the mean brightness m > 0.5, model 1 never; with target 0 the
    objective is ``0.5 - (1 - m)``, so ``light`` at s 10 brightens every seed to a white square
    in one step: the models disagree on it, and it saturates."""
    models = [_brightness(-1, 1, 0, 0.5), _brightness(0, 0.5, 0.4, 0)]
    seeds = np.random.default_rng(0).uniform(0.1, 0.5, (10, 1, 6, 6)).astype(np.float32)
    # one Linear each, so no layer is left after the logits by default: DeepXplore's layers
    config = XploreConfig(step_size=10.0, transform="light", iterations=5, lambda2=0.0, target=0,
                          layers="deepxplore")
    expected = (r"^100% of the 10 difference-inducing inputs are far from their seeds \(SSIM below 0.7: .*\) "
                r"and 100% of the 10 difference-inducing inputs saturate .*hardly images any more; use fewer "
                r"--iterations or a smaller --step-size \(an element can move by their product, now 5 x 10 = "
                r"50\), or --constraint none instead of light$")
    with pytest.warns(UserWarning, match=expected):
        result = search(models, seeds, config=config)
    assert result.found.iteration.tolist() == [1] * 10
    assert np.all(result.found.inputs == 1.0)
    assert result.realism.saturated == 1.0
    assert result.realism.low_ssim == 1.0
    assert result.to_dict()["realism"]["saturated"] == 1.0
    # Without clipping the same step takes m to 10, where model 1 says 1 too: nothing found.
    assert search(models, seeds, config=replace(config, clip=False, occlusion=(0, 0, 10, 10))).num_found == 0
    text = saturation_warning(Realism(10, 300.0, 1.0, 0.9, 0.25, 1.0), XploreConfig(step_size=0.5))
    assert text.endswith("use fewer --iterations or a smaller --step-size (an element can move by their "
                         "product, now 50 x 0.5 = 25), or --constraint occl (one rectangle changes, the rest "
                         "stays the seed's); without clipping only 25% still differ once clipped")


def test_small_steps_do_not_warn(recwarn):
    models = [conv(0.0), conv(0.02), conv(-0.02)]
    seeds = np.random.default_rng(0).uniform(0, 1, (32, 1, 6, 6)).astype(np.float32)
    result = search(models, seeds, config=XploreConfig(step_size=0.05, iterations=12, lambda1=2, lambda2=0.5))
    assert result.num_found > 0
    assert result.realism.saturated <= 0.5
    assert not [w for w in recwarn if "hardly images" in str(w.message)]


# --- threads ----------------------------------------------------------------------------


def test_small_models_use_the_free_cores_and_the_setting_is_restored(monkeypatch):
    import deepfault.core.threads as threads

    models = [conv(0.0), conv(0.02)]
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_cores", lambda: 0.0)  # a quiet machine: both cores
    assert auto_threads(models, "cpu") == 2
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.2)  # the other core busy: one thread
    assert auto_threads(models, "cpu") == 1
    monkeypatch.setattr(threads, "busy_cores", lambda: 7.0)  # never fewer than one
    assert auto_threads(models, "cpu") == 1
    assert auto_threads([nn.Linear(2000, 2000)], "cpu") is None
    assert auto_threads(models, "cuda") is None
    torch.set_num_threads(2)
    seen = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    seeds = np.random.default_rng(0).uniform(0, 1, (4, 1, 6, 6)).astype(np.float32)
    search(models, seeds, config=XploreConfig(iterations=2))
    assert seen == [1, 2]
    assert torch.get_num_threads() == 2
    seen.clear()
    search(models, seeds, config=XploreConfig(iterations=2), threads=None)
    assert seen == []
