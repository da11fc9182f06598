"""Layer entries beyond exact names (issue 26): globs, ``type:CLASS``, ``blocks`` (residual and
transformer block outputs, a transformer's neurons being its features), and modules that
never run, each checked against a naive computation with plain forward hooks; the default
(blocks for deep networks, every Linear/Conv but the logits for the spec's kind) and the
neuron line every command prints."""

from __future__ import annotations

import fnmatch

import pytest
import torch
from torch import nn

from deepfault.core.capture import capture, default_layers, layer_selection, neurons_line, selection_source
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


# --------------------------------------------------------------------------- the default (issue 26)


def _linear_conv_naive(model, x):
    """Every Linear/Conv output but the last to run, as the spec defines them: written out."""
    order = []
    handles = [m.register_forward_hook(lambda m, a, out, n=n: order.append((n, out)))
               for n, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    kept = order[:-1]  # the logits layer runs last
    return [n for n, _ in kept], torch.cat([o if o.ndim == 2 else o.flatten(2).mean(2) for _, o in kept], 1)


class LeNetish(nn.Module):
    """The spec's kind of network: convolutions and dense layers, no blocks."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 6, 3)
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = torch.relu(self.conv2(h))
        return self.fc2(torch.relu(self.fc1(h.flatten(1))))


def test_spec_kind_networks_keep_every_linear_conv_but_the_logits():
    torch.manual_seed(0)
    model = LeNetish().eval()
    x = torch.rand(4, 1, 8, 8)
    names, expected = _linear_conv_naive(model, x)
    values, got = _captured(model, None, x)
    assert got == names == ["conv1", "conv2", "fc1"]
    torch.testing.assert_close(values, expected)
    for explicit in ("linear-conv", ["linear-conv"], ["conv1", "conv2", "fc1"]):
        again, again_names = _captured(model, explicit, x)
        assert again_names == names
        torch.testing.assert_close(again, values)
    assert default_layers(model) == "linear-conv"
    assert layer_selection(model, None) == "linear-conv"


def test_deep_networks_default_to_their_blocks(resnet):
    x = torch.rand(3, 1, 6, 6)
    values, names = _captured(resnet, None, x)
    assert names == ["layer1.0", "layer1.1"]  # after the block's ReLU, not each convolution
    torch.testing.assert_close(values, _captured(resnet, "blocks", x)[0])
    assert default_layers(resnet) == layer_selection(resnet, None) == "blocks"
    torch.manual_seed(0)
    model = TinyTransformer().eval()
    x = torch.rand(2, 5, 2)
    values, names = _captured(model, None, x)
    assert names == ["encoder.0", "encoder.1"]
    torch.testing.assert_close(values, _naive(model, names, x, lambda o: o.mean(dim=1)))


class Block(nn.Module):
    """timm's name for a transformer block."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Linear(8, 8)

    def forward(self, x):
        return x + self.mlp(x)


class TinyVit(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(2, 8)
        self.blocks = nn.Sequential(Block(), Block())  # as timm names them
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)).mean(dim=1))


def test_a_module_called_blocks_does_not_hide_the_default():
    """timm's ViT holds its blocks in ``self.blocks``: the default and ``blocks`` take each block."""
    torch.manual_seed(0)
    model = TinyVit().eval()
    x = torch.rand(2, 5, 2)
    values, names = _captured(model, None, x)
    assert names == ["blocks.0", "blocks.1"]
    torch.testing.assert_close(values, _naive(model, names, x, lambda o: o.mean(dim=1)))
    for named in ("blocks", ["blocks"]):  # the selection's name, as result files record it
        assert _captured(model, named, x)[1] == names
    assert _captured(model, "[b]locks", x)[1] == ["blocks"]  # the module itself, by a glob


def test_linear_conv_stands_alone(resnet):
    with pytest.raises(DeepFaultError, match="linear-conv stands alone"):
        _captured(resnet, ["linear-conv", "stem"], torch.rand(1, 1, 6, 6))


def test_the_neuron_line_says_where_the_neurons_came_from(resnet):
    assert selection_source(resnet, None) == ("blocks: the default for networks with residual/transformer "
                                              "blocks")
    assert selection_source(LeNetish(), None).startswith("linear-conv: the default for networks without")
    assert selection_source(resnet, ["stem", "layer1.*"]) == "stem,layer1.*: named with --layers"
    assert selection_source(resnet, "deepxplore", named_by="--compat") == "deepxplore: named with --compat"
    assert layer_selection(resnet, ("stem",)) == ["stem"]
    assert neurons_line(1920, 8, "x") == "neurons: 1,920 in 8 layers (x)"
    assert neurons_line(3, 1, "x", of="m.pt") == "neurons of m.pt: 3 in 1 layer (x)"
