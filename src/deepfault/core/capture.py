"""Capturing neuron values with forward hooks.

A *neuron* is ``(layer, unit)``. For a layer whose output is ``(N, U)`` the units are
the columns; for ``(N, C, *spatial)`` a unit is a channel and its value is the mean over
the spatial positions (spec section 1). ``nn.Linear`` outputs with extra middle
dimensions are averaged over those. Every value is copied inside the hook, so an
in-place activation (``nn.ReLU(inplace=True)``) that runs after a captured layer cannot
change what was recorded.

All hooks are registered and removed by :func:`capture`, in a ``finally`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..errors import DeepFaultError

__all__ = [
    "Layer",
    "NeuronLayout",
    "NEURON_MODULE_TYPES",
    "capture",
    "activations",
    "model_device",
    "as_tensor",
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
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int) if sizes else []
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


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a parameter-less model)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


_FINITE_CHUNK = 4096


def as_tensor(inputs, *, name: str = "inputs") -> torch.Tensor:
    """``inputs`` as a float32 tensor (not copied when it already is one), checked finite."""
    x = torch.as_tensor(np.asarray(inputs) if not isinstance(inputs, torch.Tensor) else inputs)
    if not torch.is_floating_point(x):
        x = x.float()
    elif x.dtype != torch.float32:
        x = x.to(torch.float32)
    if x.ndim < 2:
        raise DeepFaultError(
            f"{name} must have a batch dimension, shape (N, ...); got shape {tuple(x.shape)}"
        )
    # Checked in chunks of rows: a whole-set mask would cost N bytes per input element,
    # the only allocation that would grow with N in the streaming spectrum.
    for start in range(0, len(x), _FINITE_CHUNK):
        part = x[start : start + _FINITE_CHUNK]
        if not torch.isfinite(part).all():
            bad = start + int((~torch.isfinite(part)).flatten(1).any(1).nonzero()[0])
            raise DeepFaultError(f"{name} contain NaN or infinite values (first at input {bad})")
    return x


def _units(module: nn.Module, output: torch.Tensor) -> torch.Tensor:
    """The ``(N, U)`` unit values of one module output, always a fresh tensor."""
    if isinstance(module, nn.Linear) and output.ndim > 2:
        output = output.movedim(-1, 1)
    if output.ndim == 2:
        return output.clone()
    return output.flatten(2).mean(dim=2)


def _resolve(model: nn.Module, layers: Sequence[str] | None) -> tuple[list[str], bool]:
    """Module names to hook, and whether the last one to run is to be dropped (the logits)."""
    modules = dict(model.named_modules())
    if layers is None:
        names = [n for n, m in modules.items() if isinstance(m, NEURON_MODULE_TYPES)]
        if len(names) < 2:
            raise DeepFaultError(
                "the model has fewer than two Linear/Conv layers, so none is left after the "
                "logits layer; name the modules to analyse with layers=[...] (--layers)"
            )
        return names, True
    if isinstance(layers, str):
        layers = [layers]
    names = list(dict.fromkeys(layers))
    unknown = [n for n in names if n not in modules or n == ""]
    if unknown:
        valid = ", ".join(n for n in modules if n)
        raise DeepFaultError(f"unknown layer name(s) {', '.join(map(repr, unknown))}; valid: {valid}")
    if not names:
        raise DeepFaultError("layers must name at least one module")
    return names, False


class _Recorder:
    """Collects one forward pass's unit values from the hooks."""

    def __init__(self, names: list[str], drop_last: bool):
        self._names = names
        self._drop_last = drop_last
        self._values: dict[str, torch.Tensor] = {}
        self._order: list[str] = []
        self.layout: NeuronLayout | None = None

    def hook(self, name: str):
        def record(module, args, output):
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
            self._values[name] = _units(module, output)
            self._order.append(name)

        return record

    def collect(self) -> torch.Tensor:
        """The ``(N, M)`` neuron values of the last forward pass, in layout order."""
        if self.layout is None:
            order = list(self._order)
            missing = [n for n in self._names if n not in self._values]
            if missing and not self._drop_last:
                raise DeepFaultError(
                    f"layer(s) {', '.join(map(repr, missing))} did not run in the forward pass"
                )
            if self._drop_last:
                order = order[:-1]
            self.layout = NeuronLayout.from_sizes(order, [self._values[n].shape[1] for n in order])
        try:
            parts = [self._values[layer.name] for layer in self.layout.layers]
        except KeyError as err:
            raise DeepFaultError(f"layer {err.args[0]!r} did not run in this forward pass") from None
        self._values.clear()
        self._order.clear()
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


@contextlib.contextmanager
def capture(model: nn.Module, layers: Sequence[str] | None = None) -> Iterator[_Recorder]:
    """Register forward hooks on the neuron layers for the duration of a ``with`` block.

    Args:
        model: The network.
        layers: Qualified module names to analyse. ``None`` selects every ``Linear`` and
            ``Conv{1,2,3}d`` module except the last one to run (the logits layer).

    Yields:
        A recorder; after each forward pass, ``recorder.collect()`` returns the ``(N, M)``
        neuron values and ``recorder.layout`` describes the columns.

    Raises:
        DeepFaultError: An unknown layer name (the message lists the valid ones).
    """
    names, drop_last = _resolve(model, layers)
    modules = dict(model.named_modules())
    recorder = _Recorder(names, drop_last)
    handles = []
    try:
        for name in names:
            handles.append(modules[name].register_forward_hook(recorder.hook(name)))
        yield recorder
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


def forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)``, turning a shape error into a message that says what to do."""
    try:
        return model(x)
    except DeepFaultError:
        raise
    except (RuntimeError, ValueError, IndexError) as err:
        raise DeepFaultError(
            f"the model cannot take inputs of shape {tuple(x.shape[1:])} (per input): "
            f"{str(err).splitlines()[0]}; give inputs in the shape and layout the model expects"
        ) from err


def check_finite(values: torch.Tensor, layout: NeuronLayout, start: int = 0) -> None:
    """Raise when any neuron value is NaN or infinite, naming the layer and the input."""
    finite = torch.isfinite(values)
    if bool(finite.all()):
        return
    row, col = (int(i) for i in (~finite).nonzero()[0])
    layer, unit = layout.neuron(col)
    raise DeepFaultError(
        f"neuron {layer}[{unit}] is NaN or infinite for input {start + row}; "
        "check the model's weights and that the inputs are scaled as it expects"
    )


def activations(
    model: nn.Module,
    inputs,
    *,
    layers: Sequence[str] | None = None,
    batch_size: int = 1024,
) -> tuple[NeuronLayout, torch.Tensor]:
    """All neuron values for a set of inputs.

    Args:
        model: The network; analysed in ``eval()`` mode, its mode restored afterwards.
        inputs: ``(N, ...)`` array or tensor.
        layers: Module names, as in :func:`capture`.
        batch_size: Inputs per forward pass; the result does not depend on it.

    Returns:
        The layout and a ``(N, M)`` float32 CPU tensor of neuron values.
    """
    x = as_tensor(inputs)
    device = model_device(model)
    out = []
    with eval_mode(model), capture(model, layers) as rec, torch.inference_mode():
        for start in range(0, len(x), batch_size):
            forward(model, x[start : start + batch_size].to(device))
            values = rec.collect()
            check_finite(values, rec.layout, start)
            out.append(values.cpu())
    return rec.layout, torch.cat(out) if out else torch.zeros(0, 0)
