"""Layer entries beyond exact names (issue 26): globs, ``type:CLASS``, ``blocks`` (residual and
transformer block outputs, a transformer's neurons being its features), and modules that
never run, each checked against a naive computation with plain forward hooks."""

from __future__ import annotations

import fnmatch

import pytest
import torch
from torch import nn

from deepfault.core.capture import capture
from deepfault.errors import DeepFaultError


class ResBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(x + self.conv(x))


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 3, 3, padding=1)
        self.layer1 = nn.Sequential(ResBlock(3), ResBlock(3))
        self.unused = nn.Linear(3, 3)  # registered, never called
        self.fc = nn.Linear(3 * 6 * 6, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.layer1(self.stem(x)), 1))


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(2, 8)
        self.encoder = nn.ModuleList(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0,
                                                                batch_first=True) for _ in range(2))
        self.head = nn.Linear(8, 3)

    def forward(self, x):  # x: (N, tokens, 2)
        h = self.embed(x)
        for layer in self.encoder:
            h = layer(h)
        return self.head(h.mean(dim=1))


def _captured(model, layers, x):
    with capture(model, layers) as rec:
        model(x)
        return rec.collect(), [layer.name for layer in rec.layout.layers]


def _naive(model, names, x, reduce):
    """Each named module's output, reduced per input by ``reduce``, concatenated in order."""
    modules = dict(model.named_modules())
    seen = {}
    handles = [modules[n].register_forward_hook(lambda m, a, out, n=n: seen.__setitem__(n, out))
               for n in names]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return torch.cat([reduce(seen[n]) for n in names], dim=1)


@pytest.fixture
def resnet():
    torch.manual_seed(0)
    return TinyResNet().eval()


def test_a_glob_selects_the_names_it_matches(resnet):
    x = torch.rand(5, 1, 6, 6)
    values, names = _captured(resnet, ["layer1.*.conv"], x)
    expected = [n for n, _ in resnet.named_modules() if n and fnmatch.fnmatchcase(n, "layer1.*.conv")]
    assert names == expected == ["layer1.0.conv", "layer1.1.conv"]
    torch.testing.assert_close(values, _naive(resnet, expected, x, lambda o: o.flatten(2).mean(2)))


def test_type_selects_every_module_of_the_class(resnet):
    _, names = _captured(resnet, "type:Conv2d", torch.rand(2, 1, 6, 6))
    assert names == [n for n, m in resnet.named_modules() if isinstance(m, nn.Conv2d)]


def test_blocks_are_the_residual_block_outputs_as_channels(resnet):
    x = torch.rand(4, 1, 6, 6)
    values, names = _captured(resnet, "blocks", x)
    assert names == ["layer1.0", "layer1.1"]
    torch.testing.assert_close(values, _naive(resnet, names, x, lambda o: o.flatten(2).mean(2)))
    assert values.shape == (4, 6)  # 3 channels per block, not 36 positions


def test_a_transformer_blocks_neurons_are_its_features():
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    x = torch.rand(3, 5, 2)  # 5 tokens
    values, names = _captured(model, ["blocks"], x)
    assert names == ["encoder.0", "encoder.1"]
    assert values.shape == (3, 16)  # 8 features per block, not 5 tokens
    torch.testing.assert_close(values, _naive(model, names, x, lambda o: o.mean(dim=1)))


def test_a_module_that_never_runs_is_skipped_with_a_warning(resnet):
    with pytest.warns(UserWarning, match=r"'unused'.* did not run .*skipped"):
        _, names = _captured(resnet, ["stem", "unused"], torch.rand(2, 1, 6, 6))
    assert names == ["stem"]
    with pytest.raises(DeepFaultError, match="did not run"):
        _captured(resnet, ["unused"], torch.rand(2, 1, 6, 6))


@pytest.mark.parametrize(("layers", "match"), [
    ("layer9.*", "matches no module name"),
    ("type:Conv3d", r"no module of class 'Conv3d' \(did you mean 'Conv2d'\?\)"),
    ("laye1.0", "unknown layer name"),
])
def test_entries_that_select_nothing_are_one_line_errors(resnet, layers, match):
    with pytest.raises(DeepFaultError, match=match) as info:
        _captured(resnet, layers, torch.rand(1, 1, 6, 6))
    assert "\n" not in str(info.value)


def test_blocks_on_a_network_without_blocks_is_refused():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    with pytest.raises(DeepFaultError, match="found no residual or transformer block"):
        _captured(model, "blocks", torch.rand(1, 4))
