"""What a model looks like from deepfault's side: layers, output shapes, neuron counts."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..core.capture import (
    LINEAR_CONV,
    NEURON_MODULE_TYPES,
    default_layers,
    eval_mode,
    forward,
    forward_hooks,
    model_device,
)

__all__ = ["LayerRow", "describe_model"]


@dataclass(frozen=True)
class LayerRow:
    """One module: qualified name, type, output shape (per input), units, parameters."""

    name: str
    kind: str
    output_shape: tuple[int, ...] | None
    units: int | None
    parameters: int
    default_neuron_layer: bool


def describe_model(model: nn.Module, input_shape) -> tuple[list[LayerRow], tuple[int, ...]]:
    """Run one zero input through ``model`` and describe every leaf module.

    A module's ``units`` are what deepfault counts as its neurons (columns of a 2-D output,
    channels of a larger one). ``default_neuron_layer`` marks the layers analysed when
    none are named (none of the leaves for a network with residual/transformer blocks, whose
    default is the blocks' outputs). Returns the rows in execution order and the model's output shape.
    """
    leaves = [(n, m) for n, m in model.named_modules() if n and not list(m.children())]
    shapes: dict[str, tuple[int, ...]] = {}
    order: list[str] = []

    def hook(name):
        def record(module, args, output):
            if isinstance(output, torch.Tensor) and name not in shapes:
                shapes[name] = tuple(output.shape[1:])
                order.append(name)

        return record

    with forward_hooks(dict(leaves), hook), eval_mode(model), torch.inference_mode():
        x = torch.zeros((1, *input_shape), device=model_device(model))
        out = forward(model, x)
    modules = dict(leaves)
    linear_conv = [n for n in order if isinstance(modules[n], NEURON_MODULE_TYPES)]
    # a network with residual/transformer blocks analyses the blocks, which are not leaves
    default = set(linear_conv[:-1]) if default_layers(model) == LINEAR_CONV else set()
    rows = []
    for name in order + [n for n, _ in leaves if n not in shapes]:
        module = modules[name]
        shape = shapes.get(name)
        units = None
        if shape:
            units = shape[-1] if isinstance(module, nn.Linear) or len(shape) == 1 else shape[0]
        rows.append(LayerRow(name, type(module).__name__, shape, units,
                             sum(p.numel() for p in module.parameters(recurse=False)),
                             name in default))
    return rows, tuple(out.shape[1:])
