"""TorchScript archives, rebuilt as ordinary modules so that forward hooks work.

PyTorch refuses forward hooks on ``ScriptModule``s, and deepfault reads neuron values
through hooks. A scripted ``nn.Sequential`` of standard ``torch.nn`` layers (the common
case, and every zoo model) is therefore rebuilt as the same eager modules: each layer's
constructor arguments are read back from the script module's attributes and its
weights copied with ``load_state_dict``. Compiled custom ``forward`` code cannot be
rebuilt; such a file gets an error that says what to do instead.
"""

from __future__ import annotations

import inspect
import os
from collections import OrderedDict

import torch
from torch import nn

from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["load_torchscript"]

_SKIP = {"self", "device", "dtype", "args", "kwargs"}


def _leaf(name: str, sm) -> nn.Module:
    cls = getattr(nn, sm.original_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise DeepFaultError(
            f"TorchScript layer {name!r} is a {sm.original_name}, which is not a torch.nn layer, "
            "and hooks cannot run inside compiled code; load the model from its class and "
            "state_dict instead (--arch), or export it to ONNX"
        )
    kwargs = {}
    for param in inspect.signature(cls.__init__).parameters.values():
        if param.name in _SKIP or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name == "bias" and param.default is True:
            kwargs["bias"] = getattr(sm, "bias", None) is not None
        elif hasattr(sm, param.name):
            kwargs[param.name] = getattr(sm, param.name)
    try:
        module = cls(**kwargs)
        module.load_state_dict(sm.state_dict())
    except (TypeError, RuntimeError) as err:
        raise DeepFaultError(
            f"could not rebuild TorchScript layer {name!r} ({sm.original_name}): {err}"
        ) from err
    return module


def _rebuild(name: str, sm) -> nn.Module:
    children = list(sm.named_children())
    if not children:
        return _leaf(name, sm)
    if sm.original_name != "Sequential":
        raise DeepFaultError(
            f"TorchScript module {name or 'the model'!r} ({sm.original_name}) has compiled "
            "forward code, where deepfault's hooks cannot run; only scripted nn.Sequential "
            "models of torch.nn layers can be analysed. Load the model from its class and "
            "state_dict instead (--arch), or export it to ONNX"
        )
    return nn.Sequential(OrderedDict(
        (child, _rebuild(f"{name}.{child}" if name else child, mod)) for child, mod in children
    ))


def load_torchscript(path: str | os.PathLike) -> ModelFile:
    """Load a TorchScript archive as an eager ``nn.Module`` (see the module's notes).

    Raises:
        DeepFaultError: A damaged archive, or a model that is not a scripted Sequential of
            ``torch.nn`` layers.
    """
    try:
        scripted = torch.jit.load(str(path), map_location="cpu")
    except Exception as err:
        raise DeepFaultError(f"{str(path)!r} is a damaged TorchScript archive: {err}") from err
    model = _rebuild("", scripted).eval()
    return ModelFile(model, "torchscript", meta={"source": str(path)})
