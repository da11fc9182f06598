"""DSA and LSA of every input ``run`` synthesizes, beside L1/L_inf: equal to ``Surprise.score`` on
the same inputs, and nothing else the run finds changes (tiny models, no data files)."""

import json

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.core.batches import activations, predict
from deepfault.coverage.surprise import fit_surprise, save_surprise
from deepfault.data import Dataset
from deepfault.localization.protocol import RunConfig, add_surprise, run_deepfault
from deepfault.models import ModelFile, save_model
from helpers.float_tolerance import assert_close_two_ways, surprise_condition
from helpers.hardening import lenet
from helpers.tiny_models import chain_model, with_every_class

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def surprise_reference(model, state, x, kind):
    """``Surprise.score`` on the ATs of ``x`` captured apart, at the state's layers."""
    _, ats = activations(model, torch.as_tensor(np.asarray(x)), layers=list(state.layers))
    return state.score(kind, ats, predict(model, np.asarray(x)).argmax(1))


def _data(model, n_train=120, n_test=60, seed=0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    x_train, x_test = torch.rand(n_train, 4, generator=g), torch.rand(n_test, 4, generator=g)
    y_train, y_test = (predict(model, x).argmax(1).numpy() for x in (x_train, x_test))
    y_test[::7] = (y_test[::7] + 1) % 3  # a few failing inputs in every class
    return Dataset("tiny", x_train.numpy(), y_train, x_test.numpy(), y_test, (0.0, 1.0), ("a", "b", "c"))


@pytest.mark.float_sensitive
def test_add_surprise_equals_surprise_score_and_changes_nothing_else():
    """The run's batches against the reference's one pass: fc3's traces are float32 sums through
    fc1 (4 + 1 terms), fc2 (6 + 1) and fc3 (5 + 1); LSA's whitening stretches their rounding by
    surprise_condition."""
    model = chain_model(seed=4).eval()
    data = _data(model)
    result = run_deepfault(model, data, RunConfig(measure="ochiai", k=2, classes=(0, 1, 2), seed=0))
    state = fit_surprise(model, data.x_train, layers=["fc3"])
    calls = []

    def score(x):
        calls.append(len(x))
        _, ats = activations(model, x, layers=["fc3"])
        pred = predict(model, x).argmax(1)
        return {k: state.score(k, ats, pred) for k in ("dsa", "lsa")}

    scored = add_surprise(result, data.x_test, score)
    assert len(calls) == 2  # one pass over the synthesized inputs, one over their originals
    for before, after in zip(result.classes, scored.classes, strict=True):
        for r0, r1 in zip(before.repetitions, after.repetitions, strict=True):
            np.testing.assert_array_equal(r0.synthesized, r1.synthesized)
            assert r0.selection == r1.selection
            e0, e1 = r0.evaluation, r1.evaluation
            assert not e0.surprise
            for kind in ("dsa", "lsa"):
                condition = 1.0 if kind == "dsa" else surprise_condition(state.ats, state.classes)
                ref = surprise_reference(model, state, r1.synthesized, kind)
                assert_close_two_ways(e1.surprise[kind], ref, n=18, dtype=torch.float32, condition=condition,
                                      err_msg=kind)
                ref0 = surprise_reference(model, state, data.x_test[r1.input_indices], kind)
                assert_close_two_ways(e1.surprise_original[kind], ref0, n=18, dtype=torch.float32,
                                      condition=condition, err_msg=kind)
            s0, s1 = e0.summary(), e1.summary()
            assert {k: v for k, v in s1.items() if not k.startswith("surprise")} == s0
            assert s1["surprise"]["dsa"] == pytest.approx(float(np.mean(e1.surprise["dsa"])))


def test_evaluation_json_writes_infinite_scores_as_text():
    model = chain_model(seed=3).eval()
    data = _data(model)
    result = run_deepfault(model, data, RunConfig(measure="ochiai", k=2, classes=(0,), seed=0))
    scored = add_surprise(result, data.x_test, lambda x: {"dsa": np.full(len(x), np.inf)})
    doc = scored.classes[0].repetitions[0].evaluation.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["summary"]["surprise"] == {"dsa": "inf"}
    assert set(doc["per_input"]["surprise"]["dsa"]) == {"inf"}


# --------------------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A LeNet-1 file and a 28x28 data set (with a training split) labelled by it, a few labels
    changed so that every class has failing inputs."""
    d = tmp_path_factory.mktemp("run-surprise")
    m = lenet(0)
    g = torch.Generator().manual_seed(1)
    x_train, x_test = torch.rand(200, 1, 28, 28, generator=g), torch.rand(80, 1, 28, 28, generator=g)
    x_train = with_every_class(m, x_train)  # the surprise fit needs two traces of every class
    with torch.no_grad():
        y_train, y_test = m(x_train).argmax(1).numpy(), m(x_test).argmax(1).numpy()
    y_test[::5] = (y_test[::5] + 1) % 10
    np.savez(d / "data.npz", x=x_test.numpy(), y=y_test, x_train=x_train.numpy(), y_train=y_train,
             class_names=np.array([str(i) for i in range(10)]))
    save_model(d / "m.pt", ModelFile(m, "lenet1", {"num_classes": 10}, None, (0.0, 1.0),
                                     meta={"input_shape": [1, 28, 28]}))
    other = lenet(5)
    save_surprise(fit_surprise(other, with_every_class(other, x_train)), d / "other.npz")
    return d, m, x_train


def _run(tmp_path, files, capsys, *extra):
    d = files[0]
    classes = sorted(set(np.load(d / "data.npz")["y"].tolist()))[:2]
    out = tmp_path / "r.json"
    argv = ["run", "--model", str(d / "m.pt"), "--dataset", str(d / "data.npz"), "--class",
            ",".join(map(str, classes)), "-k", "2", "--no-progress", "--device", "cpu", "--out", str(out),
            *extra]
    code = main(argv)
    printed = capsys.readouterr()
    return code, printed, out


def _strip(doc: dict) -> dict:
    """The run's findings: everything but times, provenance and the surprise."""
    drop = {"provenance", "surprise", "surprise_original", "seconds", "synthesis_seconds",
            "synthesis_seconds_per_input", "time"}

    def walk(v):
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items() if k not in drop}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return walk(doc)


def test_run_reports_surprise_equal_to_surprise_score(tmp_path, files, capsys):
    code, printed, out = _run(tmp_path, files, capsys)
    assert code == 0, printed.err
    assert "DSA" in printed.out
    assert "LSA" in printed.out
    assert "surprise against the training data, mean per input: DSA" in printed.out
    fitted = f"surprise state fitted and cached ({len(files[2])} training inputs, layer"
    assert fitted in printed.out  # fitted now
    doc = json.loads(out.read_text())
    assert doc["surprise"]["count"] == len(files[2])
    assert doc["surprise"]["source"] in ("fitted", "cache")
    _, m, x_train = files
    state = fit_surprise(m, x_train)
    assert doc["surprise"]["layers"] == [{"name": n, "size": s} for n, s in zip(state.layers, state.sizes,
                                                                               strict=True)]
    saved = np.load(out.with_suffix(".npz"))
    per = [rep["evaluation"]["per_input"] for c in doc["classes"] for rep in c["repetitions"]]
    for kind in ("dsa", "lsa"):
        got = np.concatenate([np.asarray(p["surprise"][kind], dtype=float) for p in per])
        np.testing.assert_allclose(got, surprise_reference(m, state, saved["synthesized"], kind), rtol=1e-6)
        orig = np.concatenate([np.asarray(p["surprise_original"][kind], dtype=float) for p in per])
        np.testing.assert_allclose(orig, surprise_reference(m, state, saved["originals"], kind), rtol=1e-6)


def test_no_surprise_finds_the_same_and_the_cache_gives_the_same_scores(tmp_path, files, capsys):
    code, printed, out = _run(tmp_path, files, capsys)
    assert code == 0, printed.err
    with_sa = json.loads(out.read_text())
    synth = np.load(out.with_suffix(".npz"))["synthesized"]
    code, printed, out2 = _run(tmp_path / "b", files, capsys, "--no-surprise")
    assert code == 0, printed.err
    assert "DSA" not in printed.out
    without = json.loads(out2.read_text())
    assert without["surprise"] is None
    assert _strip(with_sa) == _strip(without)
    np.testing.assert_array_equal(synth, np.load(out2.with_suffix(".npz"))["synthesized"])
    code, printed, out3 = _run(tmp_path / "c", files, capsys)  # the state now comes from the cache
    assert code == 0, printed.err
    assert "surprise state loaded from the cache" in printed.out
    again = json.loads(out3.read_text())
    assert again["surprise"]["source"] == "cache"
    first = with_sa["classes"][0]["repetitions"][0]["evaluation"]["per_input"]["surprise"]
    assert again["classes"][0]["repetitions"][0]["evaluation"]["per_input"]["surprise"] == first


def test_surprise_file_of_another_model_is_refused(tmp_path, files, capsys):
    code, printed, out = _run(tmp_path, files, capsys, "--surprise", str(files[0] / "other.npz"))
    assert code == 2
    assert "fitted for another model" in printed.err
    assert not out.exists()
    other = str(files[0] / "other.npz")
    code, printed, _ = _run(tmp_path, files, capsys, "--surprise", other, "--no-surprise")
    assert code == 2
    assert "not allowed with argument" in printed.err


def test_surprise_file_of_this_model_is_used(tmp_path, files, capsys):
    d, m, x_train = files
    save_surprise(fit_surprise(m, x_train[-112:]), tmp_path / "mine.npz")
    code, printed, out = _run(tmp_path, files, capsys, "--surprise", str(tmp_path / "mine.npz"))
    assert code == 0, printed.err
    assert "surprise state from --surprise (112 training inputs" in printed.out
    assert json.loads(out.read_text())["surprise"]["source"] == "file"
