"""run_deepfault's one call shape (issue 40): ``run_deepfault(model, data, config, runtime=...)``,
a result that shows and writes itself, the old keyword form still working with a warning and
giving the same findings, and the steps' settings as a RunConfig and a Runtime."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.core.batches import predict
from deepfault.core.constraints import constraints, undeclared
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.localization.protocol import RunConfig, RunResult, run_deepfault
from helpers.tiny_models import chain_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(model, n_train=120, n_test=60) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x_train, x_test = torch.rand(n_train, 4, generator=g), torch.rand(n_test, 4, generator=g)
    y_train, y_test = (predict(model, x).argmax(1).numpy() for x in (x_train, x_test))
    y_test[::7] = (y_test[::7] + 1) % 3
    return Dataset("tiny", x_train.numpy(), y_train, x_test.numpy(), y_test, (0.0, 1.0), ("a", "b", "c"))


def _findings(result: RunResult) -> dict:
    """``to_dict()`` without the times."""
    def walk(v):
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items() if "seconds" not in k}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v
    return walk(result.to_dict())


@pytest.fixture(scope="module")
def setup():
    model = chain_model(seed=4).eval()  # predicts every class: the surprise fit needs two traces of each
    return model, _data(model)


def test_every_field_is_declared():
    assert undeclared(RunConfig) == []
    for name, c in constraints(RunConfig).items():
        for bad in c.invalid():
            if name in ("classes", "surprise") and bad in ("all", "auto"):
                continue
            with pytest.raises(DeepFaultError, match=rf"^{name} must be "):
                RunConfig(**{name: bad})


def test_the_one_shape_shows_and_writes_itself(setup, tmp_path):
    model, data = setup
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run_deepfault(model, data, RunConfig(measure="ochiai", k=2, classes=(0, 1)),
                               runtime=df.Runtime(batch_size=8))
    assert isinstance(result, df.RunResult)
    text = result.summary()
    assert text.startswith("DeepFault run: ochiai k=2 on 2 classes")
    assert "evaluation of synthesized inputs" in text
    assert "batch: 8 inputs (--batch-size)" not in text  # a number given: no auto line
    body = result.payload()
    assert "config" not in body
    assert body["surprise"] is None
    json.dumps(body, allow_nan=False)
    names = [a.name for a in result.outputs()]
    assert names == ["inputs", "grid"]
    written = result.outputs()[0].write(tmp_path / "x.npz")
    with np.load(written) as z:
        made = sum(len(r.input_indices) for c in result.classes for r in c.repetitions)
        assert len(z["synthesized"]) == made
    grid = result.outputs()[1].write(tmp_path / "x.png")
    assert grid is None or grid.is_file()
    assert dataclasses.replace(result, quiet=True).summary().count("\n") < text.count("\n")


def test_the_terminal_leads_with_the_answer_and_the_recurrence(setup):
    model, data = setup
    config = RunConfig(measure="ochiai", k=2, classes=(0, 2), num_inputs=5, seed=1)
    result = run_deepfault(model, data, config)
    text = result.summary()
    assert "\n  across classes: " in text  # computed for the page, printed in the terminal too
    assert text.index("across classes: ") < text.index("evaluation of synthesized inputs")
    assert "\nmeasure ochiai, k=2, step size " in text
    assert "approach" not in text
    one = run_deepfault(model, data, RunConfig(measure="ochiai", k=2, classes=(0,), num_inputs=5, seed=1))
    assert "across classes" not in one.summary()  # nothing can recur in one class


def test_the_old_keyword_form_warns_and_finds_the_same(setup):
    model, data = setup
    config = RunConfig(measure="ochiai", k=2, classes=(0, 2), num_inputs=5, seed=1)
    new = run_deepfault(model, (data.x_test, data.y_test), config, runtime=df.Runtime(threads=1))
    with pytest.warns(FutureWarning, match=r"labels=, bounds=.*deprecated: give labels and bounds with"):
        old = run_deepfault(model, data.x_test, config, labels=data.y_test, bounds=(0.0, 1.0))
    assert _findings(old) == _findings(new)
    with pytest.warns(FutureWarning, match=r"runtime=Runtime\(threads=\.\.\.\)"):
        threads = run_deepfault(model, data, config, threads=1)
    assert _findings(threads) == _findings(run_deepfault(model, data, config))


def test_the_baseline_is_the_reused_random_run(setup):
    model, data = setup
    config = RunConfig(measure="ochiai", k=2, classes=(0, 2), num_inputs=5, seed=1)
    run = run_deepfault(model, data, dataclasses.replace(config, baseline=True))
    assert run.baseline is not None
    assert "--report: the random baseline (the same run from random neurons) took" in run.summary()
    with pytest.warns(FutureWarning, match="reuse="):
        reused = run_deepfault(model, data, dataclasses.replace(config, measure="random"), reuse=run)
    assert _findings(run.baseline) == _findings(reused)
    random = dataclasses.replace(config, measure="random", baseline=True)
    assert run_deepfault(model, data, random).baseline is None  # a baseline measure has none


def test_surprise_is_scored_when_the_config_asks(setup):
    model, data = setup
    config = RunConfig(measure="ochiai", k=2, classes=(0,), num_inputs=4, surprise="auto")
    result = run_deepfault(model, data, config)
    assert result.payload()["surprise"]["count"] == len(data.x_train)
    assert "surprise state " in result.summary()
    ev = result.classes[0].repetitions[0].evaluation
    assert set(ev.surprise) == {"dsa", "lsa"}
    plain = run_deepfault(model, data, dataclasses.replace(config, surprise=None))
    assert _findings(plain)["classes"][0]["spectrum"] == _findings(result)["classes"][0]["spectrum"]
    assert "surprise" not in config.to_dict()  # result files keep their keys
    assert "baseline" not in config.to_dict()


def test_the_steps_take_a_config_and_warn_on_old_keywords(setup):
    model, data = setup
    x = torch.as_tensor(data.x_test[:6])
    sel = df.localize(df.compute_spectrum(model, data.x_test, data.y_test, RunConfig(threshold=0.1)), k=2)
    with pytest.warns(FutureWarning, match=r"compute_spectrum\(\.\.\., threshold=\.\.\.\) is deprecated"):
        old = df.compute_spectrum(model, data.x_test, data.y_test, threshold=0.1)
    np.testing.assert_array_equal(old.a_f, df.compute_spectrum(model, data.x_test, data.y_test,
                                                                RunConfig(threshold=0.1)).a_f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = df.synthesize(model, x, sel, RunConfig(distance=0.05, iterations=2))
    with pytest.warns(FutureWarning, match=r"config=RunConfig\(distance=\.\.\., iterations=\.\.\.\)"):
        old_x = df.synthesize(model, x, sel, distance=0.05, iterations=2)
    torch.testing.assert_close(new, old_x)
    with pytest.warns(FutureWarning, match=r"runtime=Runtime\(batch_size=\.\.\.\)"):
        ev_old = df.evaluate(model, x, new, data.y_test[:6], sel, batch_size=2)
    ev = df.evaluate(model, x, new, data.y_test[:6], sel, runtime=df.Runtime(batch_size=2))
    np.testing.assert_allclose(ev.loss, ev_old.loss)
    with pytest.raises(TypeError, match="unexpected keyword arguments: nosuch"):
        df.synthesize(model, x, sel, nosuch=1)


def test_k_larger_than_the_neurons_is_refused_before_any_pass(setup, monkeypatch):
    """`-k 5000` is refused from one input's layout, before the spectrum pass or a surprise fit."""
    import deepfault.localization.protocol as protocol

    model, data = setup

    def no_work(*args, **kwargs):
        raise AssertionError("work started before k was checked")

    monkeypatch.setattr(protocol, "_spectrum_pass", no_work)
    monkeypatch.setattr(protocol, "_surprise_state", no_work)
    monkeypatch.setattr(protocol, "_batch", no_work)
    with pytest.raises(DeepFaultError, match=r"k=5000 is larger than the \d+ analysed neurons"):
        run_deepfault(model, data, RunConfig(k=5000, classes=(0,)))
    with pytest.raises(DeepFaultError, match=r"k'=5000 \(--k-prime\) is more than the \d+ analysed neurons"):
        run_deepfault(model, data, RunConfig(k=1, k_primes=(5000,), classes=(0,)))
