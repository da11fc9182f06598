"""DSA and LSA of every input ``xplore`` finds (and of its seed), under each model: equal to
``Surprise.score`` on the same inputs, and nothing else the search finds changes."""

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.core.batches import activations, predict
from deepfault.coverage.surprise import fit_surprise, save_surprise
from deepfault.coverage.surprise_cache import SurpriseScorer
from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.xplore import XploreConfig, load_inputs, xplore
from deepfault.xplore.report import summary_text
from deepfault.xplore.results import add_surprise
from helpers.float_tolerance import assert_close_two_ways, surprise_condition
from helpers.tiny_models import with_every_class
from helpers.xplore_models import mlp


def surprise_reference(model, state, x, kind):
    """``Surprise.score`` on the ATs of ``x`` captured apart, at the state's layers."""
    x = torch.as_tensor(np.asarray(x))
    _, ats = activations(model, x, layers=list(state.layers))
    return state.score(kind, ats, predict(model, x).argmax(1))


@pytest.fixture(scope="module")
def run():
    models = [mlp(0.0).eval(), mlp(0.3).eval()]
    g = torch.Generator().manual_seed(0)
    train, pool = torch.rand(300, 4, generator=g), torch.rand(60, 4, generator=g)
    result = xplore(models, pool, config=XploreConfig(seeds=40, step_size=0.2, iterations=10), bounds=(0.0,
                                                                                                       1.0))
    assert result.num_found > 0
    states = [fit_surprise(m, with_every_class(m, train)) for m in models]  # two traces of every class
    return models, states, result


@pytest.mark.float_sensitive
def test_add_surprise_equals_surprise_score_under_each_model(run):
    """The scorer's batches against the reference's one pass: fc1's traces are float32 sums of
    4 + 1 terms; LSA's whitening stretches their rounding by surprise_condition."""
    models, states, result = run
    scored = add_surprise(result, [SurpriseScorer(m, s) for m, s in zip(models, states, strict=True)])
    sa = scored.surprise
    assert sa.kinds == ("dsa", "lsa")
    for j, (m, s) in enumerate(zip(models, states, strict=True)):
        for kind in sa.kinds:
            condition = 1.0 if kind == "dsa" else surprise_condition(s.ats, s.classes)
            for got, inputs in ((sa.found[kind][:, j], result.found.inputs), (sa.seeds[kind][:, j],
                                                                             result.found.seeds)):
                assert_close_two_ways(got, surprise_reference(m, s, inputs, kind), n=5, dtype=torch.float32,
                                      condition=condition, err_msg=f"{kind} under model {j}")
    doc = scored.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["surprise"]["models"][1]["mean_dsa"] == pytest.approx(float(sa.found["dsa"][:, 1].mean()))
    assert {k: v for k, v in doc.items() if k != "surprise"} == result.to_dict()
    assert "surprise" not in result.to_dict()
    text = summary_text(scored, ["a", "b"], _Data(), "cpu")
    assert "surprise against each model's training data, mean per input (seeds'): DSA a " in text


class _Data:
    name = "pool"
    y_test = np.zeros(60)
    bounds = (0.0, 1.0)


def test_add_surprise_needs_one_scorer_per_model(run):
    models, states, result = run
    with pytest.raises(DeepFaultError, match="one scorer per model"):
        add_surprise(result, [SurpriseScorer(models[0], states[0])])


def test_nothing_found_gives_empty_scores(run):
    models, states, result = run
    empty = result.found.subset(np.zeros(result.num_found, dtype=bool))
    from dataclasses import replace

    scored = add_surprise(replace(result, found=empty), [SurpriseScorer(m, s) for m, s in zip(models, states,
                                                                                               strict=True)])
    assert scored.surprise.found["dsa"].shape == (0, 2)
    assert scored.to_dict()["surprise"]["models"][0]["mean_dsa"] is None


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two digits MLPs, the second the first with a little noise (they agree on most seeds); the
    first trained for two epochs, so that its predictions span the classes."""
    from deepfault.data import load_dataset
    from deepfault.models.train import TrainConfig, train_model

    d = tmp_path_factory.mktemp("xplore-surprise")
    m1 = train_model("digits_mlp", load_dataset("digits"), TrainConfig(epochs=2, lr=1e-2, seed=1))[0].model
    m2 = build_model("digits_mlp")
    m2.load_state_dict(m1.state_dict())
    g = torch.Generator().manual_seed(8)  # a noise that leaves m2 predicting every class (surprise fit)
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    paths = []
    for name, m in (("m1", m1), ("m2", m2)):
        paths.append(str(save_model(d / f"{name}.pt", ModelFile(m, "digits_mlp", {}, dataset="digits",
                                                                bounds=(0.0, 1.0)))))
    return d, paths, [m1.eval(), m2.eval()]


def _xplore(capsys, out, paths, *extra):
    code = main(["xplore", "--no-progress", "--model", ",".join(paths), "--num-seeds", "60", "--step-size",
                 "0.5", "--iterations", "6", "--device", "cpu", "--out", str(out), *extra])
    printed = capsys.readouterr()
    return code, printed


def test_xplore_reports_surprise_equal_to_surprise_score(tmp_path, files, capsys):
    from deepfault.data import load_dataset

    d, paths, models = files
    code, printed = _xplore(capsys, tmp_path / "x.json", paths)
    assert code == 0, printed.err
    assert "surprise against each model's training data" in printed.out
    assert "m1.pt: surprise state " in printed.out
    doc = json.loads((tmp_path / "x.json").read_text())
    saved = load_inputs(tmp_path / "x.npz")
    assert saved["dsa"].shape == (doc["found"], 2)
    assert doc["found"] > 0
    x_train = load_dataset("digits").x_train
    for j, m in enumerate(models):
        state = fit_surprise(m, x_train)
        assert doc["models"][j]["surprise_state"]["model_sha256"] == state.model_hash
        for kind in ("dsa", "lsa"):
            ref = surprise_reference(m, state, saved["inputs"], kind)
            np.testing.assert_allclose(saved[kind][:, j], ref, rtol=1e-5)
            seeds = surprise_reference(m, state, saved["seeds"], kind)
            np.testing.assert_allclose(saved[f"seed_{kind}"][:, j], seeds, rtol=1e-5)
            assert doc["surprise"]["models"][j][f"mean_{kind}"] == pytest.approx(float(ref.mean()), rel=1e-5)


def test_no_surprise_finds_the_same_inputs(tmp_path, files, capsys):
    d, paths, _ = files
    code, printed = _xplore(capsys, tmp_path / "a.json", paths)
    assert code == 0, printed.err
    code, printed = _xplore(capsys, tmp_path / "b.json", paths, "--no-surprise")
    assert code == 0, printed.err
    assert "surprise against" not in printed.out
    assert "surprise state" not in printed.out
    a, b = load_inputs(tmp_path / "a.npz"), load_inputs(tmp_path / "b.npz")
    assert "dsa" not in b
    for key in b:
        np.testing.assert_array_equal(a[key], b[key])
    ja, jb = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert "surprise" not in jb
    for key in ("found", "seeds", "already_differ", "per_target", "coverage", "realism"):
        assert ja[key] == jb[key]


def test_surprise_files_per_model(tmp_path, files, capsys):
    from deepfault.data import load_dataset

    d, paths, models = files
    x_train = load_dataset("digits").x_train
    save_surprise(fit_surprise(models[1], x_train[:300]), tmp_path / "m2.npz")
    code, printed = _xplore(capsys, tmp_path / "x.json", paths, f"--surprise=-,{tmp_path / 'm2.npz'}")
    assert code == 0, printed.err
    assert "m2.pt: surprise state from --surprise (300 training inputs" in printed.out
    doc = json.loads((tmp_path / "x.json").read_text())
    assert [m["surprise_state"]["source"] for m in doc["models"]][1] == "file"
    code, printed = _xplore(capsys, tmp_path / "y.json", paths, "--surprise", str(tmp_path / "m2.npz"))
    assert code == 2
    assert "--surprise names 1 files for 2 models" in printed.err
    code, printed = _xplore(capsys, tmp_path / "z.json", paths, "--surprise", f"{tmp_path / 'm2.npz'},-")
    assert code == 2
    assert "fitted for another model" in printed.err
    assert not (tmp_path / "z.json").exists()
