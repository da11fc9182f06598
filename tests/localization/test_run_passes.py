"""``run`` makes one forward pass per test input for every spectrum and the predictions, one per
synthesis step and one per synthesized input, and finds what the old protocol found (a spectrum
pass, a prediction pass per class, a pass over every input, synthesis, four evaluation passes),
computed here in the same test; its time left is shown after the first batch.
"""

import logging

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.core.batches import activations, predict
from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.localization.evaluation import cross_entropy
from deepfault.localization.protocol import RunConfig, group_seed, k_primes_for, run_deepfault
from deepfault.localization.selection import get_approach, select
from deepfault.localization.spectrum import compute_spectrum
from deepfault.localization.synthesis import synthesize
from deepfault.models import ModelFile, build_model, save_model
from helpers.tiny_models import chain_model, small_conv_net

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(model, shape, per_class=20, seed=0) -> Dataset:
    """Up to ``per_class`` inputs the model predicts as each class (a class it never predicts gets
    three inputs it fails on), every sixth label then changed: failing inputs in every class.
    """
    x = torch.rand(2000, *shape, generator=torch.Generator().manual_seed(seed))
    predicted = predict(model, x).argmax(1).numpy()
    rows, labels = [], []
    for c in range(3):
        mine = np.flatnonzero(predicted == c)[:per_class]
        if not len(mine):
            mine = np.flatnonzero(predicted != c)[-3:]
        rows.extend(mine)
        labels.extend([c] * len(mine))
    x_test, y_test = x[rows].numpy(), np.array(labels)
    y_test[::6] = (y_test[::6] + 1) % 3
    return Dataset("tiny", x_test[:2], y_test[:2], x_test, y_test, (0.0, 1.0), ("a", "b", "c"))


class _Count:
    """A forward hook on the model: how many inputs went through its forward, and with autograd."""

    def __init__(self, model):
        self.inputs = self.grad = 0
        self.handle = model.register_forward_hook(self)

    def __call__(self, module, args, out):
        self.inputs += len(args[0])
        self.grad += len(args[0]) if torch.is_grad_enabled() else 0


def _old_run(model, data, config):
    """The protocol as it was: every step from the public functions, each with its own passes."""
    x, y = data.x_test, data.y_test
    accuracy = float((predict(model, x).argmax(1).numpy() == y).mean())
    out = {}
    for c in config.classes:
        in_class = np.flatnonzero(y == c)
        spectrum = compute_spectrum(model, x[in_class], y[in_class], target_class=c, layers=config.layers,
                                    batch_size=config.batch_size)
        predicted = predict(model, x[in_class], batch_size=config.batch_size).argmax(1).numpy()
        correct = np.flatnonzero(predicted == c)
        chosen = correct
        if config.num_inputs is not None and config.num_inputs < len(correct):
            rng = np.random.default_rng(group_seed(config.seed, c))
            chosen = np.sort(rng.choice(correct, size=config.num_inputs, replace=False))
        x0 = torch.as_tensor(x[in_class][chosen])
        y0 = torch.as_tensor(y[in_class][chosen]).long()
        reps = []
        for r in range(config.repeat):
            seed = group_seed(config.seed, c, config.k, r)
            sel = select(spectrum, config.measure, config.k, seed=seed)
            x1 = synthesize(model, x0, sel, step_size=config.step_size, distance=config.distance,
                            bounds=(0.0, 1.0), iterations=config.iterations, batch_size=config.batch_size)
            pairs = [(n.layer, n.unit) for n in sel.neurons]
            kps = [] if get_approach(config.measure).baseline else k_primes_for(
                config.k, spectrum.layout.num_neurons)
            top = [spectrum.layout.neuron(int(i)) for i in sel.ranking[: max(kps)]] if kps else []
            if not len(x0):  # no correctly classified input: nothing synthesized, nothing measured
                empty = np.zeros(0)
                reps.append({"neurons": pairs, "synthesized": x1.numpy(), "input_indices": in_class[chosen],
                             "loss": empty, "pred_original": empty, "pred_synthesized": empty,
                             "increased": empty, "increased_at": {kp: empty for kp in kps}})
                continue
            layout, v0 = activations(model, x0, batch_size=config.batch_size)
            _, v1 = activations(model, x1, batch_size=config.batch_size)
            cols = [layout.index(layer, unit) for layer, unit in pairs + top]
            inc = (v1[:, cols] > v0[:, cols]).numpy()
            out1 = predict(model, x1, batch_size=config.batch_size)
            reps.append({
                "neurons": pairs, "synthesized": x1.numpy(), "input_indices": in_class[chosen],
                "loss": cross_entropy(out1, y0, "logits").numpy(),
                "pred_original": predict(model, x0).argmax(1).numpy(),
                "pred_synthesized": out1.argmax(1).numpy(),
                "increased": inc[:, : len(pairs)].mean(1),
                "increased_at": {kp: inc[:, len(pairs):][:, :kp].mean(1) for kp in kps},
            })
        out[c] = (spectrum, len(correct), reps)
    return accuracy, out


CONFIGS = [
    (chain_model, (4,), RunConfig(measure="ochiai", k=3, classes=(0, 1, 2), batch_size=7, repeat=2)),
    (chain_model, (4,), RunConfig(measure="random", k=2, classes=(2, 0), num_inputs=5, iterations=2)),
    (small_conv_net, (1, 8, 8), RunConfig(measure="tarantula", k=4, classes=(0, 1, 2), batch_size=16)),
]


@pytest.mark.parametrize(("make", "shape", "config"), CONFIGS)
def test_run_finds_what_the_old_protocol_found(make, shape, config):
    model = make(seed=3 if make is chain_model else 1).eval()
    data = _data(model, shape)
    accuracy, old = _old_run(model, data, config)
    new = run_deepfault(model, data, config)
    assert new.test_accuracy == pytest.approx(accuracy)
    assert [c.target_class for c in new.classes] == list(config.classes)
    for cr in new.classes:
        spectrum, num_correct, reps = old[cr.target_class]
        assert cr.num_correct == num_correct
        for name in ("a_s", "a_f", "n_s", "n_f"):
            np.testing.assert_array_equal(getattr(cr.spectrum, name), getattr(spectrum, name))
        assert len(cr.repetitions) == len(reps)
        for rep, ref in zip(cr.repetitions, reps, strict=True):
            ev = rep.evaluation
            assert [(n.layer, n.unit) for n in rep.selection.neurons] == ref["neurons"]
            np.testing.assert_array_equal(rep.input_indices, ref["input_indices"])
            np.testing.assert_allclose(rep.synthesized, ref["synthesized"], atol=1e-6)
            np.testing.assert_allclose(ev.loss, ref["loss"], rtol=1e-5, atol=1e-6)
            for name in ("pred_original", "pred_synthesized", "increased"):
                np.testing.assert_array_equal(getattr(ev, name), ref[name])
            assert set(ev.increased_at) == set(ref["increased_at"])
            for kp, values in ref["increased_at"].items():
                np.testing.assert_array_equal(ev.increased_at[kp], values)


def _expected_forwards(result, config, n_test):
    """One pass per test input, per synthesis step of each seed, per synthesized input, the
    untimed warm-up synthesis of one input, with ``batch_size="auto"`` the one-input probe
    that sizes the batch (core/memory.py; cached per model), and the one-input pass that checks
    k against the selected neurons before any work.
    """
    seeds = sum(len(r.input_indices) for c in result.classes for r in c.repetitions)
    probe = 1 if config.batch_size == "auto" else 0
    layout = 1
    return n_test + seeds * (config.iterations + 1) + (config.iterations if seeds else 0) + probe + layout


@pytest.mark.parametrize("config", [RunConfig(measure="ochiai", k=3, classes=(0, 1, 2), batch_size=9),
                                    RunConfig(measure="dstar", k=2, classes=(1,), iterations=3, repeat=2)])
def test_forward_passes_per_input(config):
    model = chain_model(seed=3).eval()
    data = _data(model, (4,))
    count = _Count(model)
    result = run_deepfault(model, data, config)
    count.handle.remove()
    # the old protocol made 3 passes per test input and 5 more per seed (8 per seed in all)
    assert count.inputs == _expected_forwards(result, config, len(data.y_test))
    seeds = sum(len(r.input_indices) for c in result.classes for r in c.repetitions)
    assert seeds
    assert count.grad == (seeds + 1) * config.iterations  # synthesis only


def test_cli_run_forward_passes_per_input(tmp_path, monkeypatch, capsys):
    import deepfault.cli.run as cli_run

    model = build_model("digits_mlp")
    path = tmp_path / "m.pt"
    save_model(path, ModelFile(model, "digits_mlp", {}, dataset="digits"))
    seen = {}

    def counted(model, data, config, **kwargs):
        count = _Count(model.module)  # the command passes the prepared model
        try:
            result = run_deepfault(model, data, config, **kwargs)
        finally:
            count.handle.remove()
        seen.update(count=count.inputs, result=result, config=config, n=len(data.y_test))
        return result

    monkeypatch.setattr(cli_run, "run_deepfault", counted)
    code = main(["run", "--model", str(path), "--class", "0,1", "-k", "2", "--inputs", "4", "--no-surprise",
                 "--no-save-inputs", "--no-progress", "--out", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr().err
    assert seen["count"] == _expected_forwards(seen["result"], seen["config"], seen["n"])


def test_reused_spectra_give_the_baseline_a_fresh_run_gives():
    model = chain_model(seed=3).eval()
    data = _data(model, (4,))
    config = RunConfig(measure="ochiai", k=2, classes=(0, 2), num_inputs=6, seed=3)
    run = run_deepfault(model, data, config)
    baseline = RunConfig(measure="random", k=2, classes=(0, 2), num_inputs=6, seed=3, repeat=2)
    fresh = run_deepfault(model, data, baseline)
    count = _Count(model)
    reused = run_deepfault(model, data, baseline, reuse=run)
    count.handle.remove()
    seeds = sum(len(r.input_indices) for c in reused.classes for r in c.repetitions)
    assert count.inputs == seeds * 2 + 1  # no spectrum pass
    assert reused.test_accuracy == fresh.test_accuracy
    for a, b in zip(reused.classes, fresh.classes, strict=True):
        assert a.num_correct == b.num_correct
        for ra, rb in zip(a.repetitions, b.repetitions, strict=True):
            assert ra.selection.neurons == rb.selection.neurons
            np.testing.assert_array_equal(ra.input_indices, rb.input_indices)
            np.testing.assert_allclose(ra.evaluation.loss, rb.evaluation.loss, rtol=1e-6)
    with pytest.raises(DeepFaultError, match=r"reuse: the earlier run has seed=3, this one 4; only a run "):
        run_deepfault(model, data, RunConfig(measure="random", k=2, classes=(0, 2), num_inputs=6, seed=4),
                      reuse=run)


def test_time_left_is_logged_after_the_first_batch(caplog):
    model = chain_model(seed=3).eval()
    data = _data(model, (4,))
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        run_deepfault(model, data, RunConfig(k=2, classes=(0, 1), batch_size=8), progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "deepfault.progress"]
    # the first line of each phase comes after its first batch and estimates the time left
    assert lines[0].startswith(f"spectrum: 8/{len(data.y_test)} input, ")
    assert "s left" in lines[0]
    synthesis = [line for line in lines if line.startswith("synthesis: ")]
    assert synthesis[0].startswith("synthesis: 8/")
    assert "s left" in synthesis[0]


def test_cli_prints_the_time_left_when_piped(tmp_path, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        code = main(["run", "--class", "3", "-k", "2", "--inputs", "20", "--batch-size", "10",
                     "--no-surprise", "--no-save-inputs", "--out", str(tmp_path / "r.json")])
    assert code == 0, capsys.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == "deepfault.progress"]
    assert any(line.startswith("spectrum: 10/") and "s left" in line for line in lines), lines
    assert any(line.startswith("synthesis: 10/20 input") and "s left" in line for line in lines), lines
