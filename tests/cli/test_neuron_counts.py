"""One neuron definition for every method (issue 26): the same model gives the same neuron
count, from the same layers, in ``run``, ``coverage`` and ``xplore`` (and in ``regress``'s
DeepHunter coverage), on a LeNet-sized network (the spec's default, every Linear/Conv but the
logits), a ResNet-like one (its ``BasicBlock`` outputs) and a transformer (its
``TransformerEncoderLayer`` outputs, features averaged over tokens); each command prints one
neuron line and records the selection in its result file.
"""

import json
import re
import textwrap

import pytest
import torch
from torch import nn

from deepfault.cli import main
from deepfault.core.capture import capture
from deepfault.models import build_model

NETS = textwrap.dedent('''
    import torch
    from torch import nn


    class LeNet(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3)
            self.conv2 = nn.Conv2d(4, 6, 3)
            self.fc1 = nn.Linear(6, 12)
            self.fc2 = nn.Linear(12, num_classes)

        def forward(self, x):
            h = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
            h = torch.relu(self.conv2(h))
            return self.fc2(torch.relu(self.fc1(h.flatten(1))))


    class BasicBlock(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(h)))


    class ResNet(nn.Module):
        def __init__(self, num_classes=10, width=5):
            super().__init__()
            self.stem = nn.Conv2d(1, width, 3, padding=1)
            self.layer1 = nn.Sequential(BasicBlock(width), BasicBlock(width))
            self.layer2 = nn.Sequential(BasicBlock(width))
            self.fc = nn.Linear(width, num_classes)

        def forward(self, x):
            h = self.layer2(self.layer1(torch.relu(self.stem(x))))
            return self.fc(h.mean(dim=(2, 3)))


    class Transformer(nn.Module):
        """Each of the 8 image rows is a token of 8 pixels."""

        def __init__(self, num_classes=10, width=6):
            super().__init__()
            self.embed = nn.Linear(8, width)
            self.layers = nn.ModuleList(nn.TransformerEncoderLayer(width, 2, dim_feedforward=12, dropout=0.0,
                                                                   batch_first=True) for _ in range(2))
            self.head = nn.Linear(width, num_classes)

        def forward(self, x):
            h = self.embed(x.reshape(x.shape[0], 8, 8))
            for layer in self.layers:
                h = layer(h)
            return self.head(h.mean(dim=1))
''')

#: class -> (neurons, layers, the default's selection)
EXPECTED = {"LeNet": (4 + 6 + 12, 3, "linear-conv"), "ResNet": (3 * 5, 3, "blocks"),
            "Transformer": (2 * 6, 2, "blocks")}
LINE = re.compile(r"neurons(?: of [^:]+)?: ([\d,]+) in (\d+) layers? \(([a-z-]+): the default")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nets")
    (folder / "nets.py").write_text(NETS)
    paths = {}
    for name in EXPECTED:
        for seed in (0, 1):
            torch.manual_seed(seed)
            path = folder / f"{name}{seed}.pt"
            torch.save(build_model(f"{folder / 'nets.py'}:{name}").state_dict(), path)
            paths[name, seed] = path
    return folder, paths


def _lines(text: str) -> list[tuple[int, int, str]]:
    return [(int(m[1].replace(",", "")), int(m[2]), m[3]) for m in LINE.finditer(text)]


def _cli(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("name", list(EXPECTED))
def test_run_coverage_and_xplore_count_the_same_neurons(models, name, tmp_path, capsys):
    folder, paths = models
    own = ["--arch", f"{folder / 'nets.py'}:{name}", "--dataset", "digits", "--threads", "1"]
    expected = EXPECTED[name]
    run_json = tmp_path / "run.json"
    text = _cli(capsys, "run", "--model", paths[name, 0], *own, "--class", "0", "-k", "2", "--no-progress",
                "--out", run_json, "--no-save-inputs")
    assert _lines(text) == [expected]
    assert json.loads(run_json.read_text())["model"]["layer_selection"] == expected[2]
    text = _cli(capsys, "coverage", "profile", "--model", paths[name, 0], *own, "--no-progress", "--out", "-")
    assert _lines(text) == [expected]
    cov_json = tmp_path / "cov.json"
    text = _cli(capsys, "coverage", "measure", "--model", paths[name, 0], *own, "--no-progress",
                "--out", cov_json)
    assert _lines(text) == [expected]
    assert json.loads(cov_json.read_text())["model"]["layer_selection"] == expected[2]
    x_json = tmp_path / "x.json"
    text = _cli(capsys, "xplore", "--model", f"{paths[name, 0]},{paths[name, 1]}", *own, "--num-seeds", "4",
                "--iterations", "1", "--no-progress", "--no-surprise", "--out", x_json)
    assert _lines(text) == [expected, expected]  # one line per model
    doc = json.loads(x_json.read_text())
    assert [m["layer_selection"] for m in doc["models"]] == [expected[2]] * 2
    assert [m["neurons"] for m in doc["models"]] == [expected[0]] * 2


def test_the_default_equals_the_explicit_selection_in_the_same_run(models):
    """The spec's kind keeps every Linear/Conv but the logits; a deep one takes its blocks."""
    folder, paths = models
    x = torch.rand(3, 1, 8, 8)
    for name, explicit in (("LeNet", ["conv1", "conv2", "fc1"]), ("ResNet", "blocks"),
                           ("Transformer", "type:TransformerEncoderLayer")):
        model = build_model(f"{folder / 'nets.py'}:{name}").eval()
        with torch.no_grad(), capture(model) as default:
            model(x)
            values = default.collect()
        with torch.no_grad(), capture(model, explicit) as named:
            model(x)
            again = named.collect()
        assert default.layout == named.layout
        torch.testing.assert_close(values, again)


def test_xplore_can_still_take_deepxplores_layers(models, capsys):
    folder, paths = models
    lenets = f"{paths['LeNet', 0]},{paths['LeNet', 1]}"
    own = ["--model", lenets, "--arch", f"{folder / 'nets.py'}:LeNet", "--dataset", "digits",
           "--threads", "1", "--num-seeds", "4", "--iterations", "1", "--no-progress", "--no-surprise",
           "--out", "-"]
    # its ReLUs are functions, so DeepXplore's set is every Linear/Conv, the logits and their softmax
    text = _cli(capsys, "xplore", *own, "--layers", "deepxplore")
    assert "neurons of LeNet0.pt: 42 in 5 layers (deepxplore: named with --layers)" in text
    compat = _cli(capsys, "xplore", *own, "--compat")
    assert "neurons of LeNet1.pt: 42 in 5 layers (deepxplore: named with --compat)" in compat


def test_layers_named_by_the_user_are_said_so(models, capsys):
    folder, paths = models
    own = ["--arch", f"{folder / 'nets.py'}:ResNet", "--dataset", "digits", "--threads", "1"]
    text = _cli(capsys, "coverage", "profile", "--model", paths["ResNet", 0], *own, "--layers", "type:Conv2d",
                "--no-progress", "--out", "-")
    assert "neurons: 35 in 7 layers (type:Conv2d: named with --layers)" in text  # the stem and 3 blocks x 2


def test_a_deep_network_without_blocks_in_the_name_is_not_counted_as_one():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(72, 3))
    with torch.no_grad(), capture(model) as rec:
        model(torch.rand(1, 1, 8, 8))
        rec.collect()
    assert rec.layout.names == ("0",)
