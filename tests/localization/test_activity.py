"""Activity that carries information (issue 44): the neurons' own levels on block outputs, the
paper's rule kept on dense neurons, and degenerate results named.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from deepfault import RunConfig, Runtime, compute_spectrum, run_deepfault
from deepfault.core.capture import NeuronLayout
from deepfault.data import Dataset
from deepfault.localization import activity
from deepfault.localization.activity import activity_levels, neuron_levels, profile_sample
from deepfault.localization.diagnosis import decided, degenerate_lines, flatness, tied_selection
from deepfault.localization.measures import suspiciousness
from deepfault.localization.report import recurring_neurons
from deepfault.localization.selection import localize
from deepfault.localization.spectrum import Spectrum
from helpers.tiny_models import chain_model


class TinyBlock(nn.Module):
    """relu(conv1x1(x) + x) with the identity as weight and bias 1: on inputs in [0, 1] every
    channel is 2x + 1 > 0, so every channel mean is above 0 on every input.
    """

    def __init__(self, channels: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 1)
        self.act = nn.ReLU()
        with torch.no_grad():
            self.conv.weight.copy_(torch.eye(channels).reshape(channels, channels, 1, 1))
            self.conv.bias.fill_(1.0)

    def forward(self, x):
        return self.act(self.conv(x) + x)


class TinyResNet(nn.Module):
    """One residual block, the spatial mean, and a Linear logits layer with hand-set weights."""

    def __init__(self):
        super().__init__()
        self.block = TinyBlock()
        self.fc = nn.Linear(3, 3)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor([[2.0, -1.0, -1.0], [-1.0, 2.0, -1.0], [-1.0, -1.0, 2.0]]))
            self.fc.bias.zero_()

    def forward(self, x):
        return self.fc(self.block(x).mean(dim=(2, 3)))


def _tiny_data(n: int = 60, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    model = TinyResNet().eval()
    x_train, x_test = torch.rand(n, 3, 2, 2, generator=g), torch.rand(n, 3, 2, 2, generator=g)
    with torch.no_grad():
        y_train, y_test = (model(x).argmax(1).numpy() for x in (x_train, x_test))
    y_test[::4] = (y_test[::4] + 1) % 3  # failing inputs in every class
    return Dataset("tiny-res", x_train.numpy(), y_train, x_test.numpy(), y_test, (0.0, 1.0), ("a", "b", "c"))


def test_block_means_above_zero_tie_under_the_paper_rule_and_differ_under_the_level():
    torch.set_num_threads(1)
    model, data = TinyResNet().eval(), _tiny_data()
    old = compute_spectrum(model, data.x_test, data.y_test, RunConfig(activity="zero"), target_class=0)
    assert old.layout.names == ("block",)
    assert (old.n_s + old.n_f == 0).all()  # every neuron active on every input: the old all-tie
    assert len(set(suspiciousness(old, "tarantula").tolist())) == 1
    levels = activity_levels(model, data.x_train, layers=None)
    assert levels is not None
    assert levels.rules == {"block": "quantile"}
    new = compute_spectrum(model, data.x_test, data.y_test, RunConfig(), target_class=0, levels=levels)
    assert new.activity is levels
    assert new.to_dict()["activity"]["rules"] == {"block": "quantile"}
    assert (new.n_s + new.n_f > 0).all()
    assert (new.a_s + new.a_f > 0).all()
    assert len(set(suspiciousness(new, "tarantula").tolist())) > 1  # spectra differ across neurons


def test_levels_equal_a_naive_median_and_the_sample_is_bounded(monkeypatch):
    torch.set_num_threads(1)
    model = TinyResNet().eval()
    for n in (7, 10):
        x = torch.rand(n, 3, 2, 2, generator=torch.Generator().manual_seed(n))
        levels = activity_levels(model, x, batch_size=3)
        assert levels is not None
        naive = []
        for unit in range(3):  # a loop straight from the definition: the middle of the sorted values
            with torch.no_grad():
                values = sorted(float(model.block(x[i : i + 1])[0, unit].mean()) for i in range(n))
            mid = n // 2
            naive.append(values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2)
        np.testing.assert_allclose(levels.thresholds, np.array(naive), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(neuron_levels(np.array([[3.0], [1.0], [2.0]])), [2.0])
    monkeypatch.setattr(activity, "PROFILE_SAMPLE", 4)  # memory holds the sample only, whatever N
    big = torch.rand(50, 3, 2, 2, generator=torch.Generator().manual_seed(1))
    assert activity_levels(model, big).sample == 4
    assert len(profile_sample(np.arange(50), 4)) == 4
    assert profile_sample(np.arange(3), 4).tolist() == [0, 1, 2]


def test_the_papers_mlp_spectrum_is_unchanged_by_auto():
    torch.set_num_threads(1)
    model = chain_model(seed=3).eval()
    x = torch.rand(40, 4, generator=torch.Generator().manual_seed(2))
    y = model(x).argmax(1).numpy()
    y[::3] = (y[::3] + 1) % 3
    assert activity_levels(model, x) is None  # Linear outputs: the paper's threshold, no profiling pass
    auto = compute_spectrum(model, x, y, RunConfig(), target_class=0)
    zero = compute_spectrum(model, x, y, RunConfig(activity="zero"), target_class=0)
    assert auto.activity is None
    for a, b in zip(auto.counts, zero.counts, strict=True):
        assert np.array_equal(a, b)


def _spectrum(a_s, a_f, n_pass, n_fail) -> Spectrum:
    a_s, a_f = np.array(a_s), np.array(a_f)
    layout = NeuronLayout.from_sizes(["a"], [len(a_s)])
    return Spectrum(layout, a_s, a_f, n_pass - a_s, n_fail - a_f)


def _result(spectra, k: int, activity_rule: str = "zero"):
    classes = []
    for c, sp in enumerate(spectra):
        sel = localize(sp, measure="tarantula", k=k)
        classes.append(SimpleNamespace(target_class=c, spectrum=sp, no_failures=sp.num_failed == 0,
                                       repetitions=[SimpleNamespace(selection=sel)]))
    return SimpleNamespace(classes=classes, config=SimpleNamespace(activity=activity_rule))


def test_a_planted_tie_is_named_and_never_counted_as_recurrence():
    flat = _spectrum([5, 5, 5, 5], [2, 2, 2, 2], 5, 2)  # every neuron active on every input
    assert flatness(flat).degenerate
    assert flatness(flat).always == 4
    result = _result([flat, flat, flat], k=2)
    assert all(tied_selection(c.repetitions[0].selection) for c in result.classes)
    assert recurring_neurons(result) == []  # the old count: a[0], a[1] "recur in 3 classes"
    lines = degenerate_lines(result)
    assert len(lines) == 2
    assert lines[0].startswith("degenerate spectra: in 3 of 3 classes")
    assert "--activity quantile" in lines[0]
    assert lines[1].startswith("tied scores: in 3 of 3 classes")
    assert "0.5" in lines[1]


def test_recurrence_counts_neurons_that_beat_every_neuron_left_out():
    # neuron 0 ranks first alone in both classes; neurons 1 and 2 tie for second place
    spectra = [_spectrum([0, 3, 3, 5], [4, 2, 2, 0], 5, 4), _spectrum([1, 3, 3, 5], [4, 2, 2, 0], 5, 4)]
    result = _result(spectra, k=2)
    for c in result.classes:
        sel = c.repetitions[0].selection
        assert [decided(n, sel) for n in sel.neurons] == [True, False]
    assert recurring_neurons(result) == [("a", 0, (0, 1))]
    assert degenerate_lines(result) == []


def test_a_run_names_its_degenerate_spectra_in_the_summary_and_atop_the_report(tmp_path):
    torch.set_num_threads(1)
    model, data = TinyResNet().eval(), _tiny_data()
    runtime = Runtime(threads=1, progress=False)
    old = run_deepfault(model, data, RunConfig(k=2, num_inputs=3, activity="zero"), runtime=runtime)
    lines = old.summary().splitlines()
    assert lines[1].startswith("warning: degenerate spectra: in 3 of 3 classes")
    assert lines[2].startswith("warning: tied scores")
    html = old.page(tmp_path)["html"]
    assert html.index("Degenerate spectra: in 3 of 3 classes") < html.index("Tied scores") < html.index(
        "The 2 most suspicious neurons")
    new = run_deepfault(model, data, RunConfig(k=2, num_inputs=3), runtime=runtime)
    assert new.config.to_dict()["activity"] == "auto"
    assert new.classes[0].spectrum.to_dict()["activity"]["rules"] == {"block": "quantile"}
    assert "degenerate spectra" not in new.summary()
    assert len({tuple(c.spectrum.a_s) + tuple(c.spectrum.a_f) for c in new.classes}) == 3  # differ by class


def test_activity_is_a_declared_option():
    with pytest.raises(Exception, match="activity"):
        RunConfig(activity="median")


def test_a_flat_majority_whose_top_k_varies_is_no_degenerate_result():
    """Most neurons of a ReLU MLP's class spectrum may never vary (the paper's own models): the
    warning is for a top-k that holds such neurons, not for a flat majority the top-k skips."""
    from types import SimpleNamespace

    import numpy as np

    from deepfault.localization.diagnosis import degenerate_lines
    from deepfault.localization.selection import Neuron

    a_s, a_f = np.array([0, 3, 5, 5, 0, 0]), np.array([1, 1, 1, 1, 0, 0])  # 4 of 6 never vary:
    n_s, n_f = np.array([5, 2, 0, 0, 5, 5]), np.array([0, 0, 0, 0, 1, 1])  # 2, 3 always; 4, 5 never
    spectrum = SimpleNamespace(num_inputs=6, a_s=a_s, a_f=a_f, n_s=n_s, n_f=n_f,
                               layout=SimpleNamespace(num_neurons=6))

    def result(picked):
        neurons = [Neuron("fc", i, i, 1.0 - 0.1 * i, int(a_s[i]), int(a_f[i]), int(n_s[i]), int(n_f[i]))
                   for i in picked]
        selection = SimpleNamespace(neurons=neurons, runner_up=0.0)
        cls = SimpleNamespace(no_failures=False, target_class=0, spectrum=spectrum,
                              repetitions=[SimpleNamespace(selection=selection)])
        return SimpleNamespace(classes=[cls], config=SimpleNamespace(activity="auto"))

    assert degenerate_lines(result([0, 1])) == []  # the top-2 vary: ranked by information
    lines = degenerate_lines(result([1, 2]))  # neuron 2 is active on every input
    assert len(lines) == 1
    assert lines[0].startswith("degenerate spectra: in 1 of 1 classes")
