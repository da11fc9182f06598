"""DeepXplore on vectors (N, 20) and sequences (N, 1, 32) (issue 26, "Beyond images"): per-feature
bounds hold for every found input, fixed features stay the seed's bit for bit, a planted
disagreement is still found, bad indices and image constraints are one-line errors (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.errors import DeepFaultError
from deepfault.xplore import XploreConfig, search, xplore
from deepfault.xplore.features import InputBounds, fixed_mask, observed_bounds, parse_indices

F, L = 20, 32

#: The user's own model code: a tabular MLP and a 1-D conv net, each with a twin that carries a
#: planted disagreement (a class-0 term on feature 5; class 1 lowered by time steps 16 to 23).
NETS = '''
import torch
from torch import nn


def _seeded(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)


class Tabular(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 3)
        _seeded(self, 0)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TabularPlanted(Tabular):
    def forward(self, x):
        out = super().forward(x)
        return out + torch.nn.functional.pad(3.0 * x[:, 5:6], (0, 2))


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, padding=2)
        self.act = nn.ReLU()
        self.fc = nn.Linear(4, 3)
        _seeded(self, 1)

    def forward(self, x):
        return self.fc(self.act(self.conv(x)).mean(dim=2))


class SeqPlanted(Seq):
    def forward(self, x):
        out = super().forward(x)
        return out - torch.nn.functional.pad(1.5 * (x[:, 0, 16:24].mean(dim=1, keepdim=True) - 0.45), (1, 1))
'''


def _module(tmp_path_factory):
    folder = tmp_path_factory.mktemp("code")
    (folder / "nets.py").write_text(NETS)
    namespace: dict = {}
    exec(compile(NETS, str(folder / "nets.py"), "exec"), namespace)  # the same classes, in this process
    return folder, namespace


#: Per-feature ranges of the tabular data: each feature its own.
LO = -1.0 + 0.1 * np.arange(F)
HI = LO + 1.0 + 0.05 * np.arange(F)


def _tabular_inputs(n, seed):
    rng = np.random.default_rng(seed)
    return (LO + rng.random((n, F)) * (HI - LO)).astype(np.float32)


def _sequence_inputs(n, seed):
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 2 * np.pi, L)
    phase = rng.random((n, 1, 1)) * 2 * np.pi
    x = 0.5 + 0.4 * np.sin(t + phase) + 0.05 * rng.standard_normal((n, 1, L))
    return x.clip(0, 1).astype(np.float32)


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """Model files (state_dicts of the user's classes) and .npz data sets for both kinds."""
    code, nets = _module(tmp_path_factory)
    folder = tmp_path_factory.mktemp("problems")
    out = {"code": code, "nets": nets}
    for kind, (base, planted, inputs) in {"tabular": ("Tabular", "TabularPlanted", _tabular_inputs),
                                          "sequence": ("Seq", "SeqPlanted", _sequence_inputs)}.items():
        m1, m2 = nets[base](), nets[planted]()
        x, x_train = inputs(120, 0), inputs(120, 1)
        with torch.no_grad():
            y, y_train = (m1(torch.from_numpy(a)).argmax(1).numpy() for a in (x, x_train))
        extra = {"bounds": np.stack([LO, HI])} if kind == "tabular" else {"bounds": [0.0, 1.0]}
        np.savez(folder / f"{kind}.npz", x=x, y=y, x_train=x_train, y_train=y_train, **extra)
        for name, m in (("m1", m1), ("m2", m2)):
            torch.save(m.state_dict(), folder / f"{kind}-{name}.pt")
        out[kind] = {"m1": m1, "m2": m2, "x": x, "x_train": x_train, "arch": f"{code}/nets.py:{base},"
                     f"{code}/nets.py:{planted}", "data": folder / f"{kind}.npz",
                     "models": f"{folder}/{kind}-m1.pt,{folder}/{kind}-m2.pt"}
    return out


#: DeepXplore's neuron set: on these two-layer nets its logit neurons are what steer the
#: search to the planted feature (the shared default, fc1 alone, finds none in 30 steps).
CONFIG = XploreConfig(seeds=80, step_size=0.1, iterations=30, layers="deepxplore")


# --------------------------------------------------------------------------- the API


def test_tabular_fixed_features_and_per_feature_bounds(problems):
    p = problems["tabular"]
    free = xplore([p["m1"], p["m2"]], p["x"], config=CONFIG, bounds=(LO, HI), threads=1)
    fixed = xplore([p["m1"], p["m2"]], p["x"], config=CONFIG, bounds=(LO, HI), fixed=[0, 3, 7], threads=1)
    for result in (free, fixed):
        assert result.num_found >= 5  # the planted disagreement (feature 5) is still found
        f = result.found
        assert (f.inputs >= LO).all()  # exactly, in float64
        assert (f.inputs <= HI).all()
        np.testing.assert_array_equal(result.feature_bounds[0], LO)
        assert result.bounds == (LO.min(), HI.max())
    f = fixed.found
    assert np.array_equal(f.inputs[:, [0, 3, 7]], f.seeds[:, [0, 3, 7]])  # bit for bit
    assert np.array_equal(f.seeds, p["x"][f.seed_index])
    moved = np.abs(f.inputs - f.seeds).max(axis=0)
    assert moved[5] > 0  # the planted feature moves
    assert fixed.fixed.tolist() == [i in (0, 3, 7) for i in range(F)]
    record = fixed.to_dict()
    assert record["fixed"] == {"elements": 3, "indices": [0, 3, 7]}
    assert record["feature_bounds"]["shape"] == [F]


def test_fixing_the_planted_feature_changes_what_is_found(problems):
    """Feature 5 fixed: every found input keeps it, so the difference comes from elsewhere."""
    p = problems["tabular"]
    result = xplore([p["m1"], p["m2"]], p["x"], config=CONFIG, bounds=(LO, HI), fixed=np.arange(F) == 5,
                    threads=1)
    assert np.array_equal(result.found.inputs[:, 5], result.found.seeds[:, 5])


def test_a_pinned_feature_and_per_feature_bounds_tighter_than_the_data(problems):
    """lo == hi pins a feature; bounds tighter than a seed are refused, naming seed and feature."""
    p = problems["tabular"]
    lo, hi = observed_bounds(p["x"])
    np.testing.assert_array_equal(lo, p["x"].min(axis=0))
    seeds = p["x"][:30].copy()
    seeds[:, 2] = 0.25
    lo2, hi2 = lo.copy(), hi.copy()
    lo2[2] = hi2[2] = 0.25
    result = search([p["m1"], p["m2"]], seeds, config=CONFIG, bounds=(np.minimum(lo2, seeds.min(0)), hi2),
                    threads=1)
    assert (result.found.inputs[:, 2] == np.float32(0.25)).all()
    with pytest.raises(DeepFaultError, match=r"^seed \d+ has .* at feature \d+, outside its bounds"):
        search([p["m1"], p["m2"]], p["x"][:10], config=CONFIG, bounds=(lo + 0.1, hi), threads=1)


def test_sequence_fixed_steps_and_per_channel_bounds(problems):
    p = problems["sequence"]
    lo, hi = observed_bounds(p["x"], p["x_train"])
    assert lo.shape == (1, 1)  # per channel, over every step
    mask = fixed_mask((1, L), steps=range(10))
    result = xplore([p["m1"], p["m2"]], p["x"], config=CONFIG, bounds=(lo, hi), fixed=mask, threads=1)
    assert result.num_found >= 5
    f = result.found
    assert np.array_equal(f.inputs[:, :, :10], f.seeds[:, :, :10])
    assert (f.inputs >= lo).all()
    assert (f.inputs <= hi).all()
    assert np.abs(f.inputs[:, :, 16:24] - f.seeds[:, :, 16:24]).max() > 0


def test_fixed_features_do_not_change_the_free_arithmetic(problems):
    """Fixing a feature whose gradient is zero anyway (a feature no model reads) changes nothing."""
    p = problems["tabular"]
    m1, m2 = p["m1"], p["m2"]
    blind1, blind2 = (type(m)() for m in (m1, m2))
    for m in (blind1, blind2):
        with torch.no_grad():
            m.fc1.weight[:, 19] = 0.0
    a = xplore([blind1, blind2], p["x"], config=CONFIG, bounds=(LO, HI), threads=1)
    b = xplore([blind1, blind2], p["x"], config=CONFIG, bounds=(LO, HI), fixed=[19], threads=1)
    np.testing.assert_array_equal(a.found.inputs, b.found.inputs)


@pytest.mark.parametrize("transform", ["light", "occl", "blackout"])
@pytest.mark.parametrize("kind", ["tabular", "sequence"])
def test_image_constraints_are_refused_for_vectors_and_sequences(problems, transform, kind):
    p = problems[kind]
    config = XploreConfig(seeds=5, transform=transform)
    with pytest.raises(DeepFaultError, match=fr"the '{transform}' constraint changes images \(C, H, W\); "
                       r"these inputs are (vectors|sequences) of shape .*: use --constraint none"):
        xplore([p["m1"], p["m2"]], p["x"], config=config, threads=1)


@pytest.mark.parametrize(("fixed", "message"), [
    ([20], r"fixed features index 20 is outside the 20 features of the inputs \(valid: 0\.\.19\)"),
    ([-1], r"fixed features index -1 is outside"),
    (["a"], r"fixed features must be integer indices; got 'a'"),
    ([1.5], r"fixed features must be integer indices; got 1.5"),
    (np.ones(7, bool), r"the fixed mask has shape \(7,\), which does not fit inputs of shape \(20,\)"),
])
def test_bad_fixed_features_in_the_api(problems, fixed, message):
    p = problems["tabular"]
    with pytest.raises(DeepFaultError, match=message):
        xplore([p["m1"], p["m2"]], p["x"], config=XploreConfig(seeds=5), bounds=(LO, HI), fixed=fixed,
               threads=1)


@pytest.mark.parametrize(("bounds", "message"), [
    ((np.zeros(7), np.ones(7)),
     r"per-feature bounds of shapes \(7,\) and \(7,\) do not fit inputs of shape \(20,\)"),
    ((HI, LO), r"per-feature bounds have lo > hi at feature 0"),
    ((np.full(F, np.nan), HI), r"per-feature bounds hold NaN"),
])
def test_bad_per_feature_bounds(bounds, message):
    with pytest.raises(DeepFaultError, match=message):
        InputBounds.of(bounds, (F,))


def test_parse_indices():
    assert parse_indices("0,3,7") == (0, 3, 7)
    assert parse_indices("7, 2-4,3") == (2, 3, 4, 7)
    for text, message in (("-1", "is negative"), ("a", "is not an index"), ("5-2", "ends before it starts"),
                          ("", "no feature index"), ("1.5", "is not an index")):
        with pytest.raises(DeepFaultError, match=message):
            parse_indices(text)


def test_images_keep_scalar_bounds_and_their_constraints():
    """Images: a scalar range still works, and light/occl/blackout still fit."""
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    m2 = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    x = torch.rand(20, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    for transform in ("light", "occl", "blackout"):
        cfg = XploreConfig(seeds=10, iterations=3, transform=transform, occlusion=(0, 0, 4, 4),
                           blackout_size=3, layers="deepxplore")  # one Linear: no default neurons
        result = xplore([m1, m2], x, config=cfg, bounds=(0.0, 1.0), threads=1)
        assert result.feature_bounds is None
        assert result.bounds == (0.0, 1.0)


@pytest.mark.parametrize(("bounds", "fixed"), [
    ((np.array([0.0, 0.1, 0.2, 0.0]), np.array([1.0, 0.9, 0.8, 0.7])), None),
    ((0.0, 1.0), np.array([True, False, False, True])),
    ((np.array([0.0, 0.1, 0.2, 0.0]), np.array([1.0, 0.9, 0.8, 0.7])), np.array([False, True, False, False])),
])
@pytest.mark.parametrize("batch_size", [None, 5])
def test_per_feature_bounds_and_fixed_features_equal_the_per_seed_oracle(bounds, fixed, batch_size):
    """The batched search against the per-seed loop (written with slices), on the 4-feature MLPs."""
    from deepfault.testing.xplore_reference import search_reference
    from helpers.xplore_models import mlp

    models = [mlp(0.0), mlp(0.05), mlp(-0.05)]
    lo, hi = (np.broadcast_to(b, (4,)) for b in bounds)
    seeds = (lo + np.random.default_rng(0).random((32, 4)) * (hi - lo)).astype(np.float32)
    config = XploreConfig(step_size=0.2, iterations=12, lambda1=2.0, lambda2=0.5, inputs_per_step=batch_size)
    result = search(models, seeds, config=config, bounds=bounds, fixed=fixed, threads=1)
    ref = search_reference(models, seeds, config=config, bounds=bounds, fixed=fixed)
    assert result.num_found > 0
    np.testing.assert_array_equal(result.found.rows, ref["rows"])
    np.testing.assert_array_equal(result.found.iteration, ref["iteration"])
    np.testing.assert_allclose(result.found.inputs, ref["inputs"], atol=1e-5)
    if fixed is not None:
        assert np.array_equal(result.found.inputs[:, fixed], seeds[result.found.rows][:, fixed])


def test_an_npz_data_set_declares_per_feature_bounds(tmp_path):
    from deepfault.data.npz import load_npz

    x = _tabular_inputs(10, 0)
    np.savez(tmp_path / "ok.npz", x=x, y=np.zeros(10, int), bounds=np.stack([LO, HI]))
    data = load_npz(tmp_path / "ok.npz")
    np.testing.assert_array_equal(data.feature_bounds[1], HI)
    assert data.bounds == (LO.min(), HI.max())
    assert data.for_input_shape((F,)) is data
    np.savez(tmp_path / "channel.npz", x=_sequence_inputs(4, 0), y=np.zeros(4, int),
             bounds=[[[0.0]], [[1.0]]])
    assert load_npz(tmp_path / "channel.npz").feature_bounds[0].shape == (1, L)  # (2, 1, 1): per channel
    np.savez(tmp_path / "shape.npz", x=x, y=np.zeros(10, int), bounds=np.zeros((2, 7)))
    with pytest.raises(DeepFaultError, match=r"bounds of shape \(2, 7\) do not fit inputs of shape \(20,\)"):
        load_npz(tmp_path / "shape.npz")
    x[3, 4] = HI[4] + 1
    np.savez(tmp_path / "outside.npz", x=x, y=np.zeros(10, int), bounds=np.stack([LO, HI]))
    with pytest.raises(DeepFaultError, match=r"array 'x' input 3 has .* at feature 4, outside its bounds"):
        load_npz(tmp_path / "outside.npz")


# --------------------------------------------------------------------------- the CLI


def _cli(capsys, p, tmp_path, *extra):
    code = main(["xplore", "--no-progress", "--model", p["models"], "--arch", p["arch"], "--dataset",
                 str(p["data"]), "--num-seeds", "60", "--step-size", "0.1", "--iterations", "30",
                 "--no-surprise", "--device", "cpu", "--threads", "1", "--out", str(tmp_path / "x.json"),
                 *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_tabular_with_the_data_sets_per_feature_bounds_and_fixed_features(problems, tmp_path, capsys):
    p = problems["tabular"]
    code, out, err = _cli(capsys, p, tmp_path, "--fix-features", "0,3,7")
    assert code == 0, err
    assert "feature bounds: per feature, shape (20,)" in out
    assert "from the data set's per-feature bounds" in out
    assert "fixed: 3 of 20 elements keep the seed's value" in out
    with np.load(tmp_path / "x.npz") as z:
        inputs, seeds = z["inputs"], z["seeds"]
        np.testing.assert_array_equal(z["feature_lo"], LO)
        np.testing.assert_array_equal(z["fixed"], np.isin(np.arange(F), [0, 3, 7]))
    assert len(inputs) >= 5
    assert np.array_equal(inputs[:, [0, 3, 7]], seeds[:, [0, 3, 7]])
    assert (inputs >= LO).all()
    assert (inputs <= HI).all()
    doc = json.loads((tmp_path / "x.json").read_text())
    assert doc["fixed"]["indices"] == [0, 3, 7]
    assert doc["feature_bounds"]["lo"] == pytest.approx(LO.tolist())


def test_cli_sequence_observed_bounds_and_a_bounds_file(problems, tmp_path, capsys):
    p = problems["sequence"]
    code, out, err = _cli(capsys, p, tmp_path, "--fix-steps", "0-9")
    assert code == 0, err
    assert "from the data's minimum and maximum per channel (train and test splits)" in out
    lo, hi = observed_bounds(p["x"], p["x_train"])
    with np.load(tmp_path / "x.npz") as z:
        inputs, seeds = z["inputs"], z["seeds"]
    assert len(inputs) >= 5
    assert np.array_equal(inputs[:, :, :10], seeds[:, :, :10])
    assert (inputs >= lo).all()
    assert (inputs <= hi).all()
    (tmp_path / "b.json").write_text(json.dumps({"lo": [[0.0]], "hi": [[1.0]]}))
    code, out, err = _cli(capsys, p, tmp_path, "--feature-bounds", str(tmp_path / "b.json"))
    assert code == 0, err
    assert "feature bounds: per feature, shape (1, 32), within 0..1, from" in out


@pytest.mark.parametrize(("kind", "args", "message"), [
    ("tabular", ["--fix-features", "20"], "fixed features index 20 is outside the 20 features of the inputs"),
    ("tabular", ["--fix-features=-1"], "argument --fix-features: feature indices must be integers >= 0"),
    ("tabular", ["--fix-features", "a,b"], "argument --fix-features: feature indices must be integers >= 0 "
                                           "or ranges such as 2-5; 'a' is not an index"),
    ("tabular", ["--fix-features", "5-2"], "feature range '5-2' ends before it starts"),
    ("tabular", ["--fix-steps", "1"], "fixed time steps need sequences (C, L); the inputs have shape (20,)"),
    ("sequence", ["--fix-steps", "32"], "fixed steps index 32 is outside the 32 time steps"),
    ("sequence", ["--fix-features", "1"], "fixed features index 1 is outside the 1 channels"),
    ("tabular", ["--constraint", "light"],
     "the 'light' constraint changes images (C, H, W); these inputs are vectors of shape (20,): "
     "use --constraint none"),
    ("sequence", ["--constraint", "occl"],
     "these inputs are sequences of shape (1, 32): use --constraint none"),
    ("tabular", ["--feature-bounds", "nowhere.npz"],
     "'nowhere.npz' is neither a file nor one of auto, observed"),
])
def test_cli_bad_indices_and_image_constraints_are_one_line_errors(problems, tmp_path, capsys, kind, args,
                                                                      message):
    code, out, err = _cli(capsys, problems[kind], tmp_path, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert message in lines[0]
    assert not (tmp_path / "x.json").exists()
