"""Capturing neuron values with forward hooks: the one definition of a neuron.

A *neuron* is ``(layer, unit)``. For a layer whose output is ``(N, U)`` the units are
the columns; for ``(N, C, *spatial)`` a unit is a channel and its value is the mean over
the spatial positions (spec section 1). ``nn.Linear`` outputs with extra middle
dimensions, and the ``(N, tokens, features)`` outputs of transformer blocks and layer
norms, are averaged over the tokens: a neuron is a feature. Every value is copied inside
the hook, so an in-place activation (``nn.ReLU(inplace=True)``) that runs after a captured
layer cannot change what was recorded.

Which layers, when none are named (:func:`default_layers`), is decided here for every
method: ``"blocks"`` (each residual or transformer block's output) for a network that has
such blocks, else ``"linear-conv"`` (every Linear/Conv but the logits layer, the spec's
default for the papers' models). :func:`selection_source` and :func:`neurons_line` say so
in the words every command prints.

All hooks are registered and removed by :func:`capture`, in a ``finally`` block.
"""

from __future__ import annotations

import contextlib
import fnmatch
import itertools
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import DeepFaultError, UserCodeError
from .inputs import check_data, unpack
from .mapped import release
from .registry import suggestion, unknown_name

__all__ = [
    "Layer",
    "NeuronLayout",
    "NEURON_MODULE_TYPES",
    "capture",
    "resolve_layers",
    "forward_hooks",
    "check_model",
    "check_transform",
    "eval_mode",
    "forward",
    "model_outputs",
    "LAYER_SELECTIONS",
    "LINEAR_CONV",
    "default_layers",
    "layer_selection",
    "selection_source",
    "neurons_line",
    "SOFTMAX_LAYER",
    "TRANSFORMS",
    "model_device",
    "as_tensor",
    "user_code_error",
]

#: Module types analysed by default (all except the one producing the logits).
NEURON_MODULE_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


@dataclass(frozen=True)
class Layer:
    """One analysed layer.

    Attributes:
        name: The module's qualified name in ``model.named_modules()``.
        size: Number of units (columns, or channels).
        offset: Index of its first unit in the flat neuron vector.
        depth: Position in execution order among the analysed layers (0 runs first).
    """

    name: str
    size: int
    offset: int
    depth: int


@dataclass(frozen=True)
class NeuronLayout:
    """The analysed layers in execution order, and the flat numbering of their neurons."""

    layers: tuple[Layer, ...]

    @classmethod
    def from_sizes(cls, names: Sequence[str], sizes: Sequence[int]) -> NeuronLayout:
        offsets = list(itertools.accumulate(sizes, initial=0))[:-1]  # each layer's first column
        return cls(
            tuple(
                Layer(n, int(s), int(o), d)
                for d, (n, s, o) in enumerate(zip(names, sizes, offsets, strict=True))
            )
        )

    @property
    def num_neurons(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(layer.name for layer in self.layers)

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise DeepFaultError(f"unknown layer {name!r}; analysed layers: {', '.join(self.names)}")

    def depth_of_each(self) -> np.ndarray:
        """``(M,)`` int array: the depth of each neuron's layer."""
        return np.repeat([la.depth for la in self.layers], [la.size for la in self.layers])

    def unit_of_each(self) -> np.ndarray:
        """``(M,)`` int array: each neuron's unit index within its layer."""
        return np.concatenate([np.arange(la.size) for la in self.layers]) if self.layers else (
            np.zeros(0, dtype=int)
        )

    def neuron(self, index: int) -> tuple[str, int]:
        """``(layer_name, unit)`` of flat neuron ``index``."""
        for layer in self.layers:
            if index < layer.offset + layer.size:
                return layer.name, int(index - layer.offset)
        raise IndexError(f"neuron index {index} out of range 0..{self.num_neurons - 1}")

    def index(self, layer_name: str, unit: int) -> int:
        """Flat index of ``(layer_name, unit)``."""
        layer = self.layer(layer_name)
        if not 0 <= unit < layer.size:
            raise DeepFaultError(
                f"unit {unit} is out of range for layer {layer_name!r} with {layer.size} units"
            )
        return layer.offset + unit

    def to_dict(self) -> list[dict]:
        return [{"name": la.name, "size": la.size, "depth": la.depth} for la in self.layers]


def check_model(model) -> nn.Module:
    """``model`` when it is a ``torch.nn.Module``; a clear error otherwise."""
    if not isinstance(model, nn.Module):
        raise DeepFaultError(
            f"model must be a torch.nn.Module; got {type(model).__name__} (open model files with "
            "deepfault.models.open_model(path).model)"
        )
    return model


def is_compiled(model: nn.Module) -> bool:
    """Whether ``model`` holds TorchScript code, where forward hooks cannot run."""
    return any(isinstance(m, torch.jit.ScriptModule) for m in model.modules())


def no_hooks_error(what: str = "this method") -> DeepFaultError:
    """The one error for a method that reads neurons of a compiled model: the routes that work."""
    return DeepFaultError(
        f"the model is TorchScript with compiled code, where forward hooks cannot run, and {what} reads "
        "neuron values through them; routes that work: save model.state_dict() from your code and use "
        "--arch path/to/file.py:ClassName (every method), export it to ONNX (--runtime torch), or keep "
        "this file for the methods that need outputs and gradients only (regress --strategy drfuzz "
        "without a surprise check, repair, inspect)"
    )


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a parameter-less model)."""
    check_model(model)
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def all_finite(x: torch.Tensor) -> bool:
    """Whether every element of ``x`` is finite, without a mask or a copy of ``x``.

    ``torch.isfinite`` allocates an absolute-value copy and masks, about 7 bytes per element
    (of every input, for a whole test set); the minimum and maximum propagate NaN and are
    infinite exactly when some element is, and reduce in place.
    """
    if x.numel() == 0:
        return True
    if x.ndim == 0 or x.nbytes <= _FINITE_CHUNK:
        low, high = torch.aminmax(x)
        return bool(torch.isfinite(low) & torch.isfinite(high))
    rows = max(1, _FINITE_CHUNK // max(1, x[0].nbytes))
    for i in range(0, len(x), rows):  # in chunks: a memory-mapped set's pages go back as read
        low, high = torch.aminmax(x[i : i + rows])
        release()
        if not bool(torch.isfinite(low) & torch.isfinite(high)):
            return False
    return True


#: Bytes of inputs :func:`all_finite` reduces at a time.
_FINITE_CHUNK = 16 << 20


def as_tensor(inputs, *, name: str = "inputs", start: int = 0) -> torch.Tensor:
    """``inputs`` as a float32 tensor (not copied when it already is one), checked finite
    (a bad input's position counted from ``start``, for a slice of a larger set).

    A ``torch.utils.data`` data set or loader, an ``(inputs, labels)`` pair or a deepfault
    ``Dataset`` gives its inputs (:func:`~deepfault.core.inputs.unpack`); another type is a
    :class:`~deepfault.errors.DeepFaultError` (:func:`~deepfault.core.inputs.check_data`).
    """
    inputs = unpack(check_data(inputs, name), None)[0]
    x = torch.as_tensor(np.asarray(inputs) if not isinstance(inputs, torch.Tensor) else inputs)
    if not torch.is_floating_point(x):
        x = x.float()
    elif x.dtype != torch.float32:
        x = x.to(torch.float32)
    if x.ndim < 2:
        raise DeepFaultError(
            f"{name} must have a batch dimension, shape (N, ...); got shape {tuple(x.shape)}"
        )
    if not all_finite(x):  # no mask: it would hold 7 bytes per element of every input
        block = next(i for i in range(0, len(x), 1024) if not all_finite(x[i : i + 1024]))
        bad = next(i for i in range(block, len(x)) if not all_finite(x[i]))
        raise DeepFaultError(f"{name} contain NaN or infinite values (first at input {start + bad})")
    return x


#: Value transforms of a layer's output before a conv channel is averaged (coverage spec 1).
TRANSFORMS = ("raw", "layer-minmax")

#: Activation modules that a "deepxplore" selection reads in place of the layer they follow
#: (Keras fuses them into Dense/Conv2D, so DeepXplore's layer outputs are activated values).
_ACTIVATIONS = (nn.ReLU, nn.LeakyReLU, nn.ELU, nn.Tanh, nn.Sigmoid, nn.ReLU6, nn.GELU, nn.SiLU)
_POOLING = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
            nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)

#: The pseudo-layer holding ``softmax`` of the model's output (DeepXplore counts it).
SOFTMAX_LAYER = "softmax(output)"


def check_transform(transform: str) -> str:
    """``transform`` unchanged if it is one of :data:`TRANSFORMS`, else raise."""
    if transform not in TRANSFORMS:
        raise DeepFaultError(unknown_name("transform", transform, TRANSFORMS))
    return transform


def _units(module: nn.Module, output: torch.Tensor, transform: str = "raw", *,
           features_last: bool = False) -> torch.Tensor:
    """The ``(N, U)`` unit values of one module output, always a fresh tensor.

    ``layer-minmax`` scales each input's whole output to [0, 1] before a channel's spatial
    mean; the mean being linear, that equals scaling the channel means by the output's
    minimum and range, which is what is computed (no scaled copy of the whole output).
    """
    if (features_last and output.ndim == 3) or (isinstance(module, nn.Linear) and output.ndim > 2):
        output = output.movedim(-1, 1)  # (N, tokens, features): a neuron is a feature
    units = output.clone() if output.ndim == 2 else output.flatten(2).mean(dim=2)
    if transform == "layer-minmax":
        flat = output.flatten(1)
        low = flat.amin(dim=1, keepdim=True)
        span = flat.amax(dim=1, keepdim=True) - low
        # A constant layer (span 0) gives 0 for every unit, never NaN.
        units = (units - low) / torch.where(span > 0, span, torch.ones_like(span))
        units = torch.where(span > 0, units, torch.zeros_like(units))
    return units


def _deepxplore_layers(model: nn.Module) -> list[str]:
    """DeepXplore's neuron layers: every layer but input and flatten, activated values.

    Each Linear/Conv is read after the activation module that follows it (if any), then
    pooling layers, the logits layer and the softmax of the output, in registration order.
    A model whose last module is a ``Softmax`` (a Keras import ending in
    ``Activation('softmax')``) has that module read as the softmax layer; any other model
    gets the pseudo-layer :data:`SOFTMAX_LAYER` (a softmax of the output), never a softmax
    of a softmax.
    """
    leaves = [(n, m) for n, m in model.named_modules() if n and not list(m.children())]
    names: list[str] = []
    for i, (name, module) in enumerate(leaves):
        if isinstance(module, NEURON_MODULE_TYPES):
            nxt = leaves[i + 1] if i + 1 < len(leaves) else None
            names.append(nxt[0] if nxt is not None and isinstance(nxt[1], _ACTIVATIONS) else name)
        elif isinstance(module, _POOLING):
            names.append(name)
    if not names:
        raise DeepFaultError("the model has no Linear, Conv or pooling layer for the 'deepxplore' selection")
    if isinstance(leaves[-1][1], nn.Softmax):
        return names + [leaves[-1][0]]
    return names + [SOFTMAX_LAYER]


#: What a residual or transformer block's class is called (torchvision's ``BasicBlock`` and
#: ``Bottleneck``, timm's ``Block``, PyTorch's ``TransformerEncoderLayer``, a user's ``ResBlock``).
_BLOCK_NAME = re.compile(r"(Block|Bottleneck|EncoderLayer|DecoderLayer)$")
#: Modules whose 3-D outputs are ``(N, tokens, features)``.
_TOKEN_MODULES = (nn.LayerNorm, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)


def _is_block(module: nn.Module) -> bool:
    return bool(_BLOCK_NAME.search(type(module).__name__)) and any(True for _ in module.children())


def _block_names(model: nn.Module) -> list[str]:
    """The outermost modules whose class name ends in ``Block``, ``Bottleneck``,
    ``EncoderLayer`` or ``DecoderLayer``, in registration order (empty when there are none).
    """
    names: list[str] = []
    for name, module in model.named_modules():
        if name and _is_block(module) and not any(name.startswith(f"{b}.") for b in names):
            names.append(name)
    return names


def _blocks(model: nn.Module) -> list[str]:
    """The outputs of a network's residual or transformer blocks (:func:`_block_names`); an
    error when it has none.
    """
    names = _block_names(model)
    if not names:
        raise DeepFaultError(
            "the 'blocks' selection found no residual or transformer block (a module whose class name "
            "ends in Block, Bottleneck, EncoderLayer or DecoderLayer); name the layers instead "
            "(names, globs such as 'layer*.1', or type:Conv2d)"
        )
    return names


def features_last(module: nn.Module) -> bool:
    """Whether a 3-D output of ``module`` is ``(N, tokens, features)`` (a neuron is a feature)
    rather than ``(N, channels, length)`` (a neuron is a channel): layer norms, transformer
    layers, and blocks (:data:`_BLOCK_NAME`) with no 1-D convolution inside.
    """
    if isinstance(module, _TOKEN_MODULES):
        return True
    return _is_block(module) and not any(isinstance(m, nn.Conv1d) for m in module.modules())


def _linear_conv(model: nn.Module) -> list[str]:
    """Every ``Linear`` and ``Conv{1,2,3}d`` module; the one that runs last (the logits layer)
    is dropped when the values are collected.
    """
    names = [n for n, m in model.named_modules() if isinstance(m, NEURON_MODULE_TYPES)]
    if len(names) < 2:
        raise DeepFaultError(
            "the model has fewer than two Linear/Conv layers, so none is left after the "
            "logits layer; name the modules to analyse with layers=[...] (--layers)"
        )
    return names


#: The selection of every Linear/Conv but the logits layer (the default for networks without
#: residual or transformer blocks).
LINEAR_CONV = "linear-conv"

#: Named layer selections (``layers="deepxplore"``, ``--layers deepxplore``).
LAYER_SELECTIONS: dict[str, Callable[[nn.Module], list[str]]] = {"deepxplore": _deepxplore_layers,
                                                                  "blocks": _blocks,
                                                                  LINEAR_CONV: _linear_conv}

#: Why each default was chosen, in the words of the printed neuron line.
_DEFAULT_WHY = {
    "blocks": "the default for networks with residual/transformer blocks",
    LINEAR_CONV: "the default for networks without residual/transformer blocks: every Linear/Conv "
                 "but the logits layer",
}


def default_layers(model: nn.Module) -> str:
    """The named selection used when no layers are named: ``"blocks"`` for a network with
    residual or transformer blocks (each block's output: after the activation that ends a
    ResNet block, a transformer block's features averaged over the tokens), else
    ``"linear-conv"`` (every Linear/Conv but the logits layer, raw outputs: the DeepFault
    and coverage specs' default for the papers' models).

    Examples:
        >>> from torch import nn
        >>> default_layers(nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)))
        'linear-conv'
    """
    check_model(model)
    return "blocks" if _block_names(model) else LINEAR_CONV


def layer_selection(model: nn.Module, layers: Sequence[str] | str | None) -> str | list[str]:
    """What selects ``model``'s neurons for a ``layers`` argument, as result files record it:
    the default's selection name (:func:`default_layers`) for ``None``, else ``layers`` as
    given (a selection name, or the list of entries).
    """
    if layers is None:
        return default_layers(model)
    return layers if isinstance(layers, str) else [str(entry) for entry in layers]


def selection_source(model: nn.Module, layers: Sequence[str] | str | None, *,
                     named_by: str = "--layers") -> str:
    """Where a run's neurons came from, in a few words: ``"blocks: the default for networks
    with residual/transformer blocks"``, or ``"conv1,fc1: named with --layers"``.
    """
    selection = layer_selection(model, layers)
    if layers is None:
        return f"{selection}: {_DEFAULT_WHY[str(selection)]}"
    shown = selection if isinstance(selection, str) else ",".join(selection)
    return f"{shown}: named with {named_by}"


def neurons_line(count: int, layers: int, source: str, *, of: str | None = None) -> str:
    """The one line every command prints about its neurons: ``count`` neurons in ``layers``
    layers, and where they came from (:func:`selection_source`); ``of`` names the model where
    a command runs several.

    Examples:
        >>> neurons_line(1920, 8, "blocks: the default for networks with residual/transformer blocks")
        'neurons: 1,920 in 8 layers (blocks: the default for networks with residual/transformer blocks)'
        >>> neurons_line(52, 1, "fc1: named with --layers", of="m1.pt")
        'neurons of m1.pt: 52 in 1 layer (fc1: named with --layers)'
    """
    who = "neurons" if of is None else f"neurons of {of}"
    return f"{who}: {count:,} in {layers} layer{'' if layers == 1 else 's'} ({source})"


def _expand(model: nn.Module, modules: dict[str, nn.Module], entry: str) -> list[str] | None:
    """The module names one ``layers`` entry stands for: a named selection, ``type:Class``
    (every module of that class), or a glob over the qualified names; ``None`` for a plain
    name (checked by the caller).
    """
    if entry in LAYER_SELECTIONS:  # before a module of that name (timm's ViT has one called "blocks")
        if entry == LINEAR_CONV:  # its logits layer is known only once the model has run
            raise DeepFaultError(f"--layers {LINEAR_CONV} stands alone (it drops the layer that runs last, "
                                 "the logits); name it without other entries")
        return LAYER_SELECTIONS[entry](model)
    if entry.startswith("type:"):
        kind = entry[len("type:"):]
        found = [n for n, m in modules.items() if n and type(m).__name__ == kind]
        if not found:
            kinds = sorted({type(m).__name__ for n, m in modules.items() if n})
            raise DeepFaultError(f"--layers {entry}: the model has no module of class {kind!r}"
                                 f"{suggestion(kind, kinds)}; its classes: {', '.join(kinds)}")
        return found
    if any(c in entry for c in "*?["):
        found = [n for n in modules if n and fnmatch.fnmatchcase(n, entry)]
        if not found:
            raise DeepFaultError(f"--layers {entry!r} matches no module name; the names: "
                                 f"{', '.join(n for n in modules if n)}")
        return found
    return None


def _resolve(model: nn.Module, layers: Sequence[str] | str | None) -> tuple[list[str], bool]:
    """Module names to hook, and whether the last one to run is to be dropped (the logits)."""
    if is_compiled(model):
        raise no_hooks_error()
    modules = dict(model.named_modules())
    if layers is None:
        layers = default_layers(model)
    if not isinstance(layers, str) and len(layers) == 1 and isinstance(layers[0], str):
        layers = layers[0]
    if isinstance(layers, str):
        if layers in LAYER_SELECTIONS:  # a selection's name wins over a module's: '[b]locks' names that
            return LAYER_SELECTIONS[layers](model), layers == LINEAR_CONV
        layers = [layers]
    expanded: list[str] = []
    for entry in layers:
        more = _expand(model, modules, entry) if isinstance(entry, str) else None
        expanded.extend([entry] if more is None else more)
    names = list(dict.fromkeys(expanded))
    unknown = [n for n in names if (n not in modules or n == "") and n != SOFTMAX_LAYER]
    if unknown:
        valid = ", ".join([n for n in modules if n] + [SOFTMAX_LAYER])
        selections = ", ".join(LAYER_SELECTIONS)
        raise DeepFaultError(
            f"unknown layer name(s) {', '.join(map(repr, unknown))}"
            f"{suggestion(unknown[0], [*(n for n in modules if n), *LAYER_SELECTIONS])}; valid: {valid} "
            f"(or a named selection: {selections}; a glob such as 'layer*.1'; or type:CLASS)"
        )
    if not names:
        raise DeepFaultError("layers must name at least one module")
    return names, False


def resolve_layers(model: nn.Module, layers: Sequence[str] | str | None) -> list[str]:
    """The module names ``layers`` selects in ``model`` (names, globs, ``type:CLASS`` or a named
    selection), checked without a forward pass: an unknown name is the one-line error that
    :func:`capture` gives.
    """
    return _resolve(model, layers)[0]


class _Recorder:
    """Collects one forward pass's unit values from the hooks."""

    def __init__(self, names: list[str], drop_last: bool, transform: str = "raw",
                 tokens: frozenset[str] = frozenset(), also: str | None = None):
        self._names = names
        self._tokens = tokens
        self._drop_last = drop_last
        self._transform = transform
        self._also = also
        self._values: dict[str, torch.Tensor] = {}
        self._also_values: dict[str, torch.Tensor] = {}
        #: With ``also``: the last pass's values under that transform, without graph.
        self.also_values: torch.Tensor | None = None
        self._order: list[str] = []
        self.layout: NeuronLayout | None = None

    def hook(self, name: str):
        softmax = name == SOFTMAX_LAYER

        def record(module, args, output):
            if softmax:
                output = model_outputs(output)
            if not isinstance(output, torch.Tensor):
                raise DeepFaultError(
                    f"layer {name!r} returns {type(output).__name__}, not a tensor; "
                    "choose a module that outputs a single tensor"
                )
            if name in self._values:
                raise DeepFaultError(
                    f"layer {name!r} runs more than once per forward pass; choose modules "
                    "that run once (for example the enclosing block)"
                )
            if softmax:
                output = torch.softmax(model_outputs(output).flatten(1), dim=1)
            self._values[name] = _units(module, output, self._transform, features_last=name in self._tokens)
            if self._also is not None:  # from the same output, without a graph
                self._also_values[name] = _units(module, output.detach(), self._also,
                                                 features_last=name in self._tokens)
            self._order.append(name)

        return record

    def collect(self) -> torch.Tensor:
        """The ``(N, M)`` neuron values of the last forward pass, in layout order."""
        parts = list(self.collect_layers().values())
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]

    def collect_layers(self) -> dict[str, torch.Tensor]:
        """The last forward pass's ``(N, U)`` unit values of each layer, in layout order.

        Kept apart, a layer's values carry only that layer's graph: a gradient taken from one
        of them goes back from that layer alone, where one taken from :meth:`collect`'s
        concatenation also sends zeros back through every other layer's graph.
        """
        if self.layout is None:
            order = list(self._order)
            missing = [n for n in self._names if n not in self._values]
            if missing and not self._drop_last:
                if not order:
                    raise DeepFaultError(
                        f"layer(s) {', '.join(map(repr, missing))} did not run in the forward pass"
                    )
                warnings.warn(f"layer(s) {', '.join(map(repr, missing))} did not run in the forward pass; "
                              "skipped (their neurons are not analysed)", stacklevel=2)
            if self._drop_last:
                order = order[:-1]
            self.layout = NeuronLayout.from_sizes(order, [self._values[n].shape[1] for n in order])
        try:
            parts = {layer.name: self._values[layer.name] for layer in self.layout.layers}
        except KeyError as err:
            raise DeepFaultError(f"layer {err.args[0]!r} did not run in this forward pass") from None
        if self._also is not None:
            also = [self._also_values[layer.name] for layer in self.layout.layers]
            self.also_values = torch.cat(also, dim=1) if len(also) > 1 else also[0]
            self._also_values.clear()
        self._values.clear()
        self._order.clear()
        return parts


@contextlib.contextmanager
def capture(
    model: nn.Module, layers: Sequence[str] | str | None = None, *, transform: str = "raw",
    also: str | None = None,
) -> Iterator[_Recorder]:
    """Register forward hooks on the neuron layers for the duration of a ``with`` block.

    Args:
        model: The network.
        layers: Qualified module names to analyse, globs over them (``"layer*.1"``),
            ``"type:Class"`` (every module of that class), or a named selection
            (``"deepxplore"``: DeepXplore's layers, coverage spec section 1; ``"blocks"``:
            the outputs of the residual or transformer blocks; ``"linear-conv"``: every
            ``Linear`` and ``Conv{1,2,3}d`` module except the last one to run, the logits
            layer). ``None`` is the default (:func:`default_layers`): ``"blocks"`` for a
            network that has such blocks, else ``"linear-conv"``. A selection's name
            wins over a module of that name (timm's ViT holds its blocks in one called
            ``blocks``); a one-name glob such as ``"[b]locks"`` names such a module. A
            selected module that never runs is skipped with a warning; a 3-D
            output of a transformer block or layer norm is ``(N, tokens, features)``, and
            its neurons are the features (the mean over the tokens).
        transform: ``"raw"`` values, or ``"layer-minmax"``: each input's whole layer
            output min-max scaled to [0, 1] before a channel's spatial mean.
        also: A second transform computed from the same pass (without a graph), read as
            ``recorder.also_values`` after ``collect()``: xplore's gradient takes the raw
            values and its coverage the ``layer-minmax`` ones, from one forward pass.

    Yields:
        A recorder; after each forward pass, ``recorder.collect()`` returns the ``(N, M)``
        neuron values and ``recorder.layout`` describes the columns.

    Raises:
        DeepFaultError: An unknown layer name (the message lists the valid ones) or
            transform.
    """
    check_transform(transform)
    if also is not None:
        check_transform(also)
    check_model(model)
    names, drop_last = _resolve(model, layers)
    modules = dict(model.named_modules())
    modules[SOFTMAX_LAYER] = model
    tokens = frozenset(n for n in names if n in modules and features_last(modules[n]))
    recorder = _Recorder(names, drop_last, transform, tokens, also)
    with forward_hooks({name: modules[name] for name in names}, recorder.hook):
        yield recorder


@contextlib.contextmanager
def forward_hooks(modules: dict[str, nn.Module], make_hook: Callable[[str], Callable]) -> Iterator[None]:
    """Register ``make_hook(name)`` as a forward hook on each module for a ``with`` block.

    The one place deepfault registers hooks: they are always removed in ``finally``, on
    errors and interrupts too. :func:`capture` and ``deepfault inspect`` build on it.
    """
    handles = []
    try:
        for name, module in modules.items():
            handles.append(module.register_forward_hook(make_hook(name)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Put ``model`` in ``eval()`` mode and restore its previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


_SHAPE_WORDS = ("shape", "size", "mat1", "dimension", "expected input", "channels", "must match")


_said: set[str] = set()


def _say_which(message: str) -> None:
    """Warn once per kind of output which part of it deepfault takes."""
    if message not in _said:
        _said.add(message)
        warnings.warn(message, stacklevel=4)


def model_outputs(result, *, where: str = "the model") -> torch.Tensor:
    """The class scores in what a model's ``forward`` returned.

    A tensor is used as it is; from a tuple or list the first element, from a dict the
    ``"logits"`` entry (Hugging Face's convention). Anything else is an error.
    """
    if isinstance(result, torch.Tensor):
        return result
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        _say_which(f"{where} returns a {type(result).__name__}; deepfault uses its first element as the "
                   "class scores")
        return result[0]
    if isinstance(result, dict) and isinstance(result.get("logits"), torch.Tensor):
        _say_which(f"{where} returns a dict; deepfault uses its 'logits' entry as the class scores")
        return result["logits"]
    if hasattr(result, "logits") and isinstance(result.logits, torch.Tensor):
        _say_which(f"{where} returns a {type(result).__name__}; deepfault uses its .logits as the "
                   "class scores")
        return result.logits
    raise DeepFaultError(
        f"{where} returns {type(result).__name__}; deepfault needs a tensor of class scores, "
        "a tuple whose first element is one, or a dict with a 'logits' entry"
    )


#: Where the modules of torch, deepfault and the libraries it converts with live: a ``forward``
#: defined there is no user's code (a failure inside one is a bug to show with its traceback).
_LIBRARY_MODULES = ("torch", "deepfault", "onnx2torch", "torchvision", "timm", "transformers")


def _user_forward(err: BaseException) -> str | None:
    """The class of the innermost user-written ``forward`` (or other method of a module whose
    class is the user's) on ``err``'s traceback, ``None`` when the error rose elsewhere.
    """
    found = None
    tb = err.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module):
            where = type(owner).__module__ or ""
            if where.split(".")[0] not in _LIBRARY_MODULES:
                found = type(owner).__name__
        tb = tb.tb_next
    return found


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err).strip() else type(err).__name__


def user_code_error(err: Exception) -> UserCodeError | None:
    """The one line for ``err`` when it rose in the user's own module code (the class of the
    innermost user-written method of an ``nn.Module`` on its traceback, the exception and its
    message), ``None`` when it rose elsewhere or is running out of memory. Raise it ``from err``.
    """
    if isinstance(err, (MemoryError, DeepFaultError)) or "out of memory" in _first_line(err).lower():
        return None
    owner = _user_forward(err)
    if owner is None:
        return None
    said = _first_line(err)[:300]
    return UserCodeError(f"your class {owner}'s forward raised {type(err).__name__}: {said}; fix it (run "
                         "deepfault -v ... for the traceback)")


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's class scores for ``x``, turning a shape error into a message that says
    what to do, and any other error raised in the user's own module code into one line
    naming its class, the exception and its message (:class:`~deepfault.errors.UserCodeError`,
    the original as its ``__cause__``). Out of memory, and errors that rise outside a user's
    class (a bug of deepfault or torch), pass through unchanged.
    """
    try:
        result = model(x)
    except DeepFaultError:
        raise
    except Exception as err:
        first = _first_line(err)
        if isinstance(err, MemoryError) or "out of memory" in first.lower():
            raise
        if isinstance(err, (RuntimeError, ValueError, IndexError)) and any(
                w in first.lower() for w in _SHAPE_WORDS):
            raise DeepFaultError(
                f"the model cannot take inputs of shape {tuple(x.shape[1:])} (per input): "
                f"{first}; give inputs in the shape and layout the model expects"
            ) from err
        found = user_code_error(err)
        if found is None:
            raise
        raise found from err
    return model_outputs(result)


def check_finite(values: torch.Tensor, layout: NeuronLayout, start: int = 0) -> None:
    """Raise when any neuron value is NaN or infinite, naming the layer and the input."""
    if all_finite(values):  # no mask unless something is wrong
        return
    finite = torch.isfinite(values)
    row, col = (int(i) for i in (~finite).nonzero()[0])
    layer, unit = layout.neuron(col)
    raise DeepFaultError(
        f"neuron {layer}[{unit}] is NaN or infinite for input {start + row}; "
        "check the model's weights and that the inputs are scaled as it expects"
    )
