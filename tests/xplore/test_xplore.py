"""DeepXplore: the batched search against the per-seed oracle, the constraints, the results."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.testing.xplore_reference import constrain_reference, search_reference
from deepfault.xplore import (
    CONSTRAINTS,
    XploreConfig,
    load_inputs,
    make_constraint,
    replay,
    save_inputs,
    search,
    select_seeds,
    xplore,
)
from deepfault.xplore.search import choose_neurons, normalize
from helpers.tiny_models import has_hooks
from helpers.xplore_models import conv, mlp

pytestmark = pytest.mark.filterwarnings("ignore:.*hardly images:UserWarning")


def _mlps():
    return [mlp(0.0), mlp(0.05), mlp(-0.05)]


def _convs():
    return [conv(0.0), conv(0.02), conv(-0.02)]


def _seeds(kind, n=32, seed=0):
    rng = np.random.default_rng(seed)
    shape = (4,) if kind == "mlp" else (1, 6, 6)
    return rng.uniform(0, 1, (n, *shape)).astype(np.float32)


BASE = dict(step_size=0.2, iterations=12, lambda1=2.0, lambda2=0.5, occlusion=(1, 2, 3, 2), blackout_size=2)


def _check_equal(result, ref):
    np.testing.assert_array_equal(result.found.rows, ref["rows"])
    np.testing.assert_array_equal(result.found.iteration, ref["iteration"])
    np.testing.assert_array_equal(result.found.predictions, ref["predictions"])
    np.testing.assert_allclose(result.found.inputs, ref["inputs"], atol=1e-5)
    np.testing.assert_array_equal(np.flatnonzero(result.already_differ), ref["already_differ"])
    np.testing.assert_array_equal(result.targets, ref["targets"])
    for cov, covered in zip(result.coverage, ref["covered"], strict=True):
        assert cov.covered == sum(covered)


@pytest.mark.parametrize(
    ("kind", "transform", "extra"),
    [
        ("mlp", "none", {"layers": "default"}),
        ("mlp", "none", {"neurons": "per-seed"}),
        ("mlp", "none", {"objective": "probabilities", "step_size": 0.5}),
        ("mlp", "none", {"layers": "deepxplore", "threshold": 0.6}),
        ("conv", "none", {"layers": "deepxplore", "threshold": 0.5}),
        ("conv", "light", {"threshold": 0.3, "layers": "default"}),
        ("conv", "occl", {"layers": "deepxplore", "threshold": 0.5, "neurons": "per-seed"}),
        ("conv", "blackout", {"layers": "deepxplore", "threshold": 0.5}),
        ("conv", "none", {"target": 1, "threshold": 0.5}),
        ("conv", "light", {"layers": "default", "clip": False, "neurons": "per-seed", "target": 0}),
        ("mlp", "none", {"layers": "default", "clip": False, "step_size": 0.5}),
    ],
)
@pytest.mark.parametrize("batch_size", [None, 5])
def test_batched_search_equals_per_seed_oracle(kind, transform, extra, batch_size):
    models = _mlps() if kind == "mlp" else _convs()
    seeds = _seeds(kind)
    config = XploreConfig(**{**BASE, "transform": transform, "inputs_per_step": batch_size, **extra})
    result = search(models, seeds, config=config)
    ref = search_reference(models, seeds, config=config)
    assert result.num_found > 0 or kind == "conv" and transform == "light"
    _check_equal(result, ref)


def test_oracle_agreement_is_not_vacuous():
    """The compared runs find inputs at several steps and cover new neurons on the way."""
    config = XploreConfig(**{**BASE, "transform": "none", "layers": "deepxplore", "threshold": 0.5})
    result = search(_convs(), _seeds("conv"), config=config)
    assert result.num_found >= 10
    assert len(set(result.found.iteration.tolist())) >= 3
    assert result.trace[-1].covered != result.trace[0].covered


def test_per_seed_groups_change_nothing_when_coverage_is_full():
    """With t far below every value, coverage is full from the start, so the neurons drawn do
    not depend on the order of updates and any grouping gives the same inputs."""
    config = XploreConfig(**{**BASE, "transform": "none", "threshold": -1.0})
    one = search(_mlps(), _seeds("mlp"), config=config)
    for size in (1, 3, 100):
        other = search(_mlps(), _seeds("mlp"), config=replace(config, inputs_per_step=size))
        np.testing.assert_array_equal(one.found.rows, other.found.rows)
        np.testing.assert_allclose(one.found.inputs, other.found.inputs, atol=1e-6)


# --- the domain constraints on hand-made gradients ---------------------------------------


def _grad():
    """(2, 1, 6, 6): input 0 ramps 0..35 minus 20 (negative top-left, positive bottom-right),
    input 1 is its negation."""
    g = torch.arange(36, dtype=torch.float32).reshape(1, 6, 6) - 20.0
    return torch.stack([g, -g])


def test_light_is_uniform_and_keeps_the_mean():
    g = _grad()
    out = make_constraint("light").apply(g, torch.zeros(2, 0))
    for i in range(2):
        assert torch.all(out[i] == out[i].flatten()[0])
        assert out[i].flatten()[0] == pytest.approx(float(g[i].mean()))


def test_occlusion_is_zero_outside_the_rectangle():
    g = _grad()
    out = make_constraint("occl", x=1, y=2, h=3, w=2).apply(g, torch.zeros(2, 0))
    inside = torch.zeros(6, 6, dtype=torch.bool)
    inside[2:5, 1:3] = True
    assert torch.all(out[:, 0][:, ~inside] == 0)
    assert torch.equal(out[:, 0][:, inside], g[:, 0][:, inside])


def test_blackout_only_darkens_one_patch():
    g = _grad()
    c = make_constraint("blackout", size=2)
    draws = torch.tensor([[0.0, 0.0], [0.0, 0.0]], dtype=torch.float64)  # top-left patch
    out = c.apply(g, draws)
    # input 0: negative mean on the top-left patch -> -1 there, 0 elsewhere
    assert torch.all(out[0, 0, :2, :2] == -1)
    assert out[0].sum() == -4
    # input 1: positive mean there -> nothing at all
    assert torch.all(out[1] == 0)
    # the patch moves with the draws: u = (0.99, 0.5) -> rows 4..5, columns 2..3 of 6x6
    out = c.apply(-torch.ones(1, 1, 6, 6), torch.tensor([[0.99, 0.5]], dtype=torch.float64))
    assert torch.all(out[0, 0, 4:6, 2:4] == -1)
    assert out.sum() == -4
    assert torch.all(out <= 0)


@pytest.mark.parametrize("name", CONSTRAINTS.names())
def test_every_constraint_matches_the_literal_version(name):
    params = {"occl": {"x": 1, "y": 2, "h": 3, "w": 2}, "blackout": {"size": 3}}.get(name, {})
    c = make_constraint(name, **params)
    g = torch.randn(5, 2, 6, 7, generator=torch.Generator().manual_seed(1))
    u = torch.rand(5, c.num_draws, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = c.apply(g, u)
    for i in range(5):
        torch.testing.assert_close(out[i], constrain_reference(name, c.params(), g[i], u[i].tolist()))
    assert out.shape == g.shape
    assert out.data_ptr() != g.data_ptr()


def test_constraints_refuse_inputs_they_do_not_fit():
    with pytest.raises(DeepFaultError, match="needs image inputs"):
        make_constraint("occl").check((784,))
    with pytest.raises(DeepFaultError, match="does not fit"):
        make_constraint("occl", x=20, y=0, h=10, w=10).check((1, 28, 28))
    with pytest.raises(DeepFaultError, match="larger than"):
        make_constraint("blackout", size=30).check((1, 28, 28))
    with pytest.raises(DeepFaultError, match="unknown domain constraint 'fog'; known: blackout, light"):
        make_constraint("fog")


# --- pieces of the search ----------------------------------------------------------------


def test_choose_neurons_takes_the_uncovered_in_order():
    covered = torch.tensor([True, False, True, False, False])
    u = np.array([0.0, 0.34, 0.67, 0.999999])
    assert choose_neurons(covered, u).tolist() == [1, 3, 4, 4]
    assert choose_neurons(torch.ones(3, dtype=torch.bool), np.array([0.5])).tolist() == [1]


def test_normalize_divides_each_input_by_its_rms():
    g = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    out = normalize(g)
    rms = (12.5) ** 0.5
    torch.testing.assert_close(out[0], g[0] / (rms + 1e-5))
    assert torch.all(out[1] == 0)


def test_seeds_are_drawn_without_replacement_and_reproducibly():
    a = select_seeds(100, 100, seed=3)
    assert sorted(a.tolist()) == list(range(100))
    assert np.array_equal(a, select_seeds(100, 100, seed=3))
    assert not np.array_equal(a, select_seeds(100, 100, seed=4))
    assert len(select_seeds(10, 50, seed=0, replace=True)) == 50
    with pytest.raises(DeepFaultError, match="more than the 10 inputs"):
        select_seeds(10, 11)


# --- results -----------------------------------------------------------------------------


def test_found_inputs_stay_in_bounds_and_really_differ_after_reloading(tmp_path):
    models = _convs()
    config = XploreConfig(**{**BASE, "transform": "none", "step_size": 0.6})
    result = xplore(models, _seeds("conv", 64), config=replace(config, seeds=40, occlusion=(1, 2, 3, 2)))
    assert result.num_found > 5
    assert result.found.inputs.min() >= 0.0
    assert result.found.inputs.max() <= 1.0
    path = save_inputs(tmp_path / "found.npz", result)
    saved = load_inputs(path)
    preds = replay(models, saved["inputs"])
    assert np.array_equal(preds, saved["predictions"])
    assert np.all((preds != preds[:, :1]).any(axis=1))
    # the seeds are the pool inputs with the recorded indices
    pool = _seeds("conv", 64)
    assert np.array_equal(saved["seeds"], pool[saved["seed_index"]])
    l1 = np.abs(saved["inputs"].astype(np.float64) - saved["seeds"]).reshape(len(preds), -1).sum(1)
    np.testing.assert_allclose(saved["l1"], l1, rtol=1e-6)


def test_identical_models_never_disagree():
    result = xplore([mlp(0.0), mlp(0.0), mlp(0.0)], _seeds("mlp", 50),
                    config=XploreConfig(seeds=50, step_size=0.5, iterations=5))
    assert result.num_found == 0
    assert result.num_already_differ == 0
    assert result.first_found_seconds is None
    assert result.seconds_per_found is None
    assert result.found.inputs.shape == (0, 4)
    pooled = result.summaries()[-1]
    assert pooled.found == 0
    assert pooled.searched == 50


def test_summaries_and_to_dict_add_up():
    result = search(_convs(), _seeds("conv"), config=XploreConfig(**{**BASE, "transform": "none"}))
    rows = result.summaries()
    pooled = rows[-1]
    assert pooled.target is None
    assert sum(r.found for r in rows[:-1]) == pooled.found == result.num_found
    assert sum(r.seeds for r in rows[:-1]) == pooled.seeds == 32
    d = result.to_dict()
    assert d["found"] == result.num_found
    assert d["already_differ"] == result.num_already_differ
    assert 0 <= d["pooled_coverage"] <= 1
    assert len(d["coverage"]) == 3
    assert d["trace"][-1]["found"] == result.num_found
    import json

    json.dumps(d, allow_nan=False)


# --- errors and hygiene ------------------------------------------------------------------


def test_fewer_than_two_models_is_an_error():
    with pytest.raises(DeepFaultError, match="two or more models; got 1"):
        search([mlp()], _seeds("mlp"))
    with pytest.raises(DeepFaultError, match="two or more models; got 0"):
        search([], _seeds("mlp"))


def test_models_with_different_class_counts_are_refused():
    with pytest.raises(DeepFaultError, match=r"different numbers of classes \(model0: 3, model1: 4\)"):
        search([mlp(0.0), mlp(0.0, classes=4)], _seeds("mlp"))


def test_models_with_different_input_shapes_are_refused():
    with pytest.raises(DeepFaultError, match="model 'model1': the model cannot take inputs of shape"):
        search([conv(0.0), mlp(0.0)], _seeds("conv"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lambda1": float("nan")}, "lambda1 must be a finite number"),
        ({"step_size": -1.0}, r"step_size must be a number >= 0; got -1.0"),
        ({"iterations": 0}, "iterations must be an integer from 1 to 100,000; got 0"),
        ({"neurons": "sometimes"}, "neurons must be one of per-iteration, per-seed; got 'sometimes'"),
        ({"objective": "loss"}, "objective must be one of logits, probabilities; got 'loss'"),
        ({"layers": "all"}, "layers must be one of default, deepxplore, blocks, linear-conv; got 'all'"),
        ({"target": 3}, r"target must be a model index in 0..2"),
        ({"transform": "fog"}, "transform must be one of blackout, light, none, occl; got 'fog'"),
        ({"blackout_size": 0, "transform": "blackout"},
         "blackout_size must be an integer from 1 to 65,536; got 0"),
    ],
)
def test_bad_parameters_are_named(kwargs, match):
    with pytest.raises(DeepFaultError, match=match):
        search(_mlps(), _seeds("mlp"), config=XploreConfig(**kwargs))


def test_seeds_outside_the_bounds_are_refused():
    with pytest.raises(DeepFaultError, match=r"outside the bounds \[0, 1\]"):
        search(_mlps(), _seeds("mlp") * 255, config=XploreConfig(bounds=(0, 1)))


def test_probability_models_need_the_probability_objective():
    with pytest.raises(DeepFaultError, match="use --objective probabilities"):
        search(_mlps(), _seeds("mlp"), output_kinds=["logits", "probabilities", "logits"])


def test_models_are_left_as_they_were():
    models = _convs()
    models[0].train()
    models[1].eval()
    models[1].logits.weight.requires_grad_(False)
    before = [{k: v.clone() for k, v in m.state_dict().items()} for m in models]
    search(models, _seeds("conv"), config=XploreConfig(**{**BASE, "transform": "blackout"}))
    assert models[0].training
    assert not models[1].training
    assert not models[1].logits.weight.requires_grad
    assert models[1].conv.weight.requires_grad
    assert not any(has_hooks(m) for m in models)
    for m, b in zip(models, before, strict=True):
        assert all(torch.equal(v, b[k]) for k, v in m.state_dict().items())
    with pytest.raises(DeepFaultError):
        search(models, _seeds("conv"), config=XploreConfig(**{**BASE, "transform": "occl",
                                                               "occlusion": (5, 5, 4, 4)}))
    assert not any(has_hooks(m) for m in models)


def test_chunk_size_changes_nothing():
    """Forward/backward passes over any number of rows give the same search."""
    config = XploreConfig(**{**BASE, "transform": "blackout", "layers": "deepxplore", "threshold": 0.5})
    whole = search(_convs(), _seeds("conv"), config=config)
    for chunk in (1, 7):
        part = search(_convs(), _seeds("conv"), config=config, chunk_size=chunk)
        np.testing.assert_array_equal(whole.found.rows, part.found.rows)
        np.testing.assert_array_equal(whole.found.iteration, part.found.iteration)
        np.testing.assert_allclose(whole.found.inputs, part.found.inputs, atol=1e-5)
        assert [c.covered for c in whole.coverage] == [c.covered for c in part.coverage]


def test_image_grid_writes_its_png_for_inputs_that_are_no_images(tmp_path):
    """difference_grid writes nothing for inputs that are not images; image_grid, which the CLI
    lists as written, once returned None there and left no PNG. It now draws a note."""
    pytest.importorskip("matplotlib")
    from deepfault.xplore.figures import image_grid
    from deepfault.xplore.results import FoundInputs

    n = 2
    found = FoundInputs(rows=np.arange(n), seed_index=np.arange(n), inputs=np.full((n, 10), 0.5, np.float32),
                        seeds=np.zeros((n, 10), np.float32), iteration=np.ones(n, int),
                        predictions=np.array([[0, 1], [1, 0]]), common_class=np.zeros(n, int),
                        target=np.zeros(n, int), l1=np.full(n, 5.0))
    path = image_grid(found, ["a", "b"], tmp_path / "grid.png")
    assert path == tmp_path / "grid.png"
    assert path.is_file()
