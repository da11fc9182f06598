"""TorchScript archives (scripted or traced): rebuilt as ordinary modules where possible, so
that forward hooks work, else run compiled.

PyTorch refuses forward hooks on ``ScriptModule``s, and deepfault reads neuron values
through hooks. A scripted ``nn.Sequential`` of standard ``torch.nn`` layers (the common
case, and every zoo model) is therefore rebuilt as the same eager modules: each layer's
constructor arguments are read back from the script module's attributes and its
weights copied with ``load_state_dict``.

Any other archive (a ResNet's compiled ``forward``, a traced module) runs as it is, inside a
:class:`CompiledModel`: outputs and gradients flow as in any module, so every method that needs
only those runs (``regress`` with DRFuzz and a distance, SSIM or discriminator check,
``repair``'s fine-tuning). A method that reads neurons (``run``, ``coverage``, ``xplore``,
``regress``'s DeepHunter and surprise checks) gets :func:`no_hooks_error`, which lists the
routes that work.
"""

from __future__ import annotations

import inspect
import io
import os
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..core.capture import is_compiled, no_hooks_error
from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["CompiledModel", "is_compiled", "load_torchscript", "no_hooks_error", "jit_quietly"]

_SKIP = {"self", "device", "dtype", "args", "kwargs"}


@contextmanager
def jit_quietly() -> Iterator[None]:
    """Silence exactly PyTorch's notice that ``torch.jit.load``, ``save``, ``script`` and ``trace``
    are deprecated (PyTorch 2.9 and later), which it printed on every TorchScript file opened
    or written, even when all went well; TorchScript is a format deepfault reads and writes on
    purpose. Every other warning passes.

    Examples:
        >>> with jit_quietly():
        ...     scripted = torch.jit.script(nn.Linear(2, 2))
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.\w+` is deprecated",
                                category=DeprecationWarning)
        yield


class _Compiled(Exception):
    """A part of the archive that cannot be rebuilt as eager modules (why, for ``deepfault inspect``)."""


class CompiledModel(nn.Module):
    """A TorchScript module with compiled code, as an ``nn.Module`` that runs it.

    Its parameters, buffers, ``state_dict``, device moves and gradients are the script module's;
    it has no layers a forward hook can reach (:func:`is_compiled`).

    Args:
        scripted: The loaded ``torch.jit.ScriptModule``.
        source: The file, for messages.
        why: Why it could not be rebuilt as eager modules.
    """

    def __init__(self, scripted: torch.jit.ScriptModule, *, source: str = "", why: str = ""):
        super().__init__()
        self.compiled = scripted
        self.source, self.why = source, why

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_inference_mode_enabled():
            # the TorchScript interpreter records autograd for parameters that require grad even
            # under inference_mode, and then refuses inference tensors: no_grad is what is meant
            with torch.inference_mode(False), torch.no_grad():
                return self.compiled(x)
        return self.compiled(x)

    def extra_repr(self) -> str:
        return f"source={self.source!r}"

    def __deepcopy__(self, memo):
        # copy.deepcopy of a ScriptModule gives parameters that are not leaves, which no optimiser
        # takes (repair fine-tunes a copy): copy through TorchScript's own serialisation instead
        buffer = io.BytesIO()
        device = next((t.device for t in (*self.parameters(), *self.buffers())), torch.device("cpu"))
        with jit_quietly():
            torch.jit.save(self.compiled, buffer)
            buffer.seek(0)
            compiled = torch.jit.load(buffer, map_location=device)
        copied = CompiledModel(compiled, source=self.source, why=self.why)
        memo[id(self)] = copied
        return copied.train(self.training)


def _leaf(name: str, sm) -> nn.Module:
    cls = getattr(nn, sm.original_name, None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise _Compiled(f"layer {name!r} is a {sm.original_name}, not a torch.nn layer")
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
    except TypeError as err:  # a traced module keeps weights, not constructor arguments
        raise _Compiled(f"layer {name!r} ({sm.original_name}) keeps no constructor arguments "
                        "(a traced module)") from err
    except RuntimeError as err:
        raise _Compiled(f"layer {name!r} ({sm.original_name}) could not be rebuilt: "
                        f"{str(err).splitlines()[0] if str(err) else type(err).__name__}") from err
    return module


def _rebuild(name: str, sm) -> nn.Module:
    children = list(sm.named_children())
    if not children:
        return _leaf(name, sm)
    if sm.original_name != "Sequential":
        raise _Compiled(f"{name or 'the model'} ({sm.original_name}) has a compiled forward")
    return nn.Sequential(OrderedDict(
        (child, _rebuild(f"{name}.{child}" if name else child, mod)) for child, mod in children
    ))


def load_torchscript(path: str | os.PathLike) -> ModelFile:
    """Load a TorchScript archive as an eager ``nn.Module`` (see the module's notes).

    Raises:
        DeepFaultError: A damaged archive.
    """
    try:
        with jit_quietly():
            scripted = torch.jit.load(str(path), map_location="cpu")
    except Exception as err:
        raise DeepFaultError(f"{str(path)!r} is a damaged TorchScript archive: {err}") from err
    try:
        model = _rebuild("", scripted).eval()
    except _Compiled as why:
        model = CompiledModel(scripted.eval(), source=str(path), why=str(why)).eval()
        return ModelFile(model, "torchscript", meta={"source": str(path)},
                         read={"loader": f"torch.jit.load, run compiled ({why}): no forward hooks"})
    return ModelFile(model, "torchscript", meta={"source": str(path)},
                     read={"loader": "torch.jit.load, rebuilt as eager torch.nn modules"})

