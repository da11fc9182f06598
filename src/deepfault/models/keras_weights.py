"""Keras ``save_weights`` HDF5 files (weights only, no architecture) into zoo models.

DeepXplore published its MNIST models as Keras weight files (``Model1.h5`` ...) whose
architecture lives only in Python code. The zoo's ``lenet1``/``lenet4``/``lenet5`` are
those architectures, so the weights can be matched to them layer by layer, in order:

- the Keras layers that hold weights are taken in file order (``attrs['layer_names']``,
  each group's ``attrs['weight_names']``; a full ``model.save`` file keeps the same
  layout under ``model_weights``);
- the torch modules that hold weights (``Conv2d``, ``Linear``) are taken in registration
  order; the two lists must have the same length;
- each Keras tensor becomes a torch tensor by the one table :data:`_RULES`, and the first
  ``Linear`` after a ``Flatten`` also has its input features reordered from Keras's
  channels-last flattening ``(H, W, C)`` to PyTorch's ``(C, H, W)``;
- every shape is checked and a mismatch names both layers and both shapes.

Examples:
    >>> mf = open_keras_weights("Model1.h5", arch="lenet1", input_shape=(1, 28, 28))  # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..core.capture import eval_mode, forward_hooks
from ..errors import DeepFaultError
from ._api import build_model
from .io import ModelFile, check_build

__all__ = ["read_keras_weights", "match_keras_weights", "load_keras_weights", "open_keras_weights",
           "is_weights_only"]

#: torch module type -> Keras weight name -> (torch parameter, permutation of the Keras array).
_RULES: dict[type[nn.Module], dict[str, tuple[str, tuple[int, ...] | None]]] = {
    # Conv2D kernel (kh, kw, in, out) -> (out, in, kh, kw)
    nn.Conv2d: {"kernel": ("weight", (3, 2, 0, 1)), "bias": ("bias", None)},
    # Dense kernel (in, out) -> (out, in)
    nn.Linear: {"kernel": ("weight", (1, 0)), "bias": ("bias", None)},
}


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _h5py():
    try:
        import h5py
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "reading Keras HDF5 files needs h5py: pip install -e '.[keras]'"
        ) from err
    return h5py


def is_weights_only(path: str | os.PathLike) -> bool:
    """Whether ``path`` is an HDF5 file of weights without a model architecture."""
    path = Path(path)
    if path.suffix.lower() not in (".h5", ".hdf5", ".keras") or not path.is_file():
        return False
    h5py = _h5py()
    try:
        with h5py.File(path, "r") as f:
            return "model_config" not in f.attrs and ("layer_names" in f.attrs or "model_weights" in f)
    except OSError:
        return False


def read_keras_weights(path: str | os.PathLike) -> tuple[list[tuple[str, list[tuple[str, np.ndarray]]]], str]:
    """The weight-holding layers of a Keras HDF5 file, in file order, and its backend.

    Returns:
        ``([(layer_name, [(weight_name, array), ...]), ...], backend)``; layers without
        weights (pooling, flatten, activations) are left out. ``weight_name`` is the
        short name (``kernel``, ``bias``).

    Raises:
        DeepFaultError: The file is missing or not in Keras's ``save_weights`` layout.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"Keras weights file {str(path)!r} does not exist; check the path")
    h5py = _h5py()
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise DeepFaultError(
            f"{str(path)!r} is not an HDF5 file ({err}); give a Keras .h5 weights file"
        ) from err
    with f:
        root = f.get("model_weights", f)
        if "layer_names" not in root.attrs:
            raise DeepFaultError(
                f"{str(path)!r} has no 'layer_names' attribute, so it is not a Keras save_weights file"
            )
        backend = _text(root.attrs.get("backend", f.attrs.get("backend", "tensorflow")))
        layers = []
        for layer in (_text(n) for n in root.attrs["layer_names"]):
            group = root[layer]
            names = [_text(n) for n in group.attrs.get("weight_names", [])]
            if names:
                short = [n.split("/")[-1].split(":")[0] for n in names]
                layers.append((layer, [(s, np.asarray(group[n])) for s, n in zip(short, names, strict=True)]))
    return layers, backend


def _square_shape(leaves, flatten: str) -> tuple[int, int, int]:
    """``(C, H, W)`` before ``flatten`` without an input shape: ``C`` from the last Conv2d before
    it, ``H = W`` from the next Linear's ``in_features`` (square feature maps, as in the LeNets).
    """
    names = [n for n, _ in leaves]
    before = [m for _, m in leaves[: names.index(flatten)] if isinstance(m, nn.Conv2d)]
    after = next(m for _, m in leaves[names.index(flatten) + 1 :] if isinstance(m, nn.Linear))
    if before:
        c = before[-1].out_channels
        side = int(round((after.in_features / c) ** 0.5))
        if side * side * c == after.in_features:
            return (c, side, side)
    raise DeepFaultError(
        "the model flattens an image before a Dense layer and its feature maps are not square, so "
        "the Keras weights need the input shape to reorder their features; give input_shape=(C, H, W)"
    )


def _flatten_shapes(model: nn.Module, input_shape) -> dict[str, tuple[int, ...]]:
    """``{linear_name: (C, H, W)}`` for each Linear that reads a Flatten of an image tensor."""
    leaves = [(n, m) for n, m in model.named_modules() if n and not list(m.children())]
    pairs = {}
    for i, (name, module) in enumerate(leaves):
        if isinstance(module, nn.Flatten):
            following = next((n for n, m in leaves[i + 1:] if isinstance(m, (nn.Linear, nn.Conv2d))), None)
            if following is not None and isinstance(dict(leaves)[following], nn.Linear):
                pairs[name] = following
    if not pairs:
        return {}
    if input_shape is None:
        return {following: _square_shape(leaves, flatten) for flatten, following in pairs.items()}
    seen: dict[str, tuple[int, ...]] = {}
    modules = dict(model.named_modules())

    def hook(f):
        return lambda m, args, out: seen.__setitem__(pairs[f], tuple(args[0].shape[1:]))

    try:
        with forward_hooks({f: modules[f] for f in pairs}, hook), torch.no_grad(), eval_mode(model):
            model(torch.zeros(1, *input_shape))
    except RuntimeError as err:
        raise DeepFaultError(f"the model cannot take inputs of shape {tuple(input_shape)}: "
                             f"{str(err).splitlines()[0]}") from err
    return {k: v for k, v in seen.items() if len(v) == 3}


def match_keras_weights(
    model: nn.Module, layers: list[tuple[str, list[tuple[str, np.ndarray]]]], *,
    input_shape=None, backend: str = "tensorflow", source: str = "the Keras file",
) -> dict[str, torch.Tensor]:
    """The ``state_dict`` entries of ``model``'s Conv2d/Linear modules from Keras weights.

    Args:
        model: The zoo model (not modified).
        layers: As returned by :func:`read_keras_weights`.
        input_shape: Per-input ``(C, H, W)`` shape the model takes, to reorder the features
            of a Dense layer after a Flatten (default: square feature maps inferred from the
            layer sizes).
        backend: ``"theano"`` kernels are flipped spatially, as Keras does when loading them.
        source: Name of the file, for messages.

    Raises:
        DeepFaultError: Different numbers of weight layers, an unknown or missing weight,
            or a shape mismatch (the message names the Keras layer, the module and both shapes).
    """
    modules = _weight_modules(model, layers, source)
    flat = _flatten_shapes(model, input_shape)
    state = {}
    for (layer, weights), (name, module) in zip(layers, modules, strict=True):
        rules = _RULES[type(module)]
        given = {w for w, _ in weights}
        unknown = given - set(rules)
        if unknown:
            raise DeepFaultError(f"Keras layer {layer!r} in {source} has weight(s) {sorted(unknown)} that a "
                                 f"{type(module).__name__} ({name!r}) does not have")
        for wname, array in weights:
            attr, perm = rules[wname]
            if wname == "kernel":
                array = _kernel_in_torch_order(array, module, flat.get(name), backend)
            tensor = torch.from_numpy(np.ascontiguousarray(array.transpose(perm) if perm else array))
            target = getattr(module, attr)
            if target is None or tuple(tensor.shape) != tuple(target.shape):
                need = None if target is None else tuple(target.shape)
                raise DeepFaultError(
                    f"Keras layer {layer!r} weight {wname!r} has shape {tuple(array.shape)} "
                    f"(as torch {tuple(tensor.shape)}), but module {name!r} needs {attr} of shape {need}; "
                    "is it the right architecture?"
                )
            state[f"{name}.{attr}"] = tensor.to(target.dtype)
        missing = [a for w, (a, _) in rules.items() if w not in given and getattr(module, a) is not None]
        if missing:
            raise DeepFaultError(
                f"Keras layer {layer!r} in {source} has no {', '.join(missing)} for module {name!r}"
            )
    return state


def _weight_modules(model: nn.Module, layers: list, source: str) -> list[tuple[str, nn.Module]]:
    """``model``'s modules with weights, one per Keras layer with weights, in order; refused
    when one is of a kind the matcher does not know or the counts differ.
    """
    modules = [(n, m) for n, m in model.named_modules() if type(m) in _RULES]
    other = [n for n, m in model.named_modules() if n and not list(m.children())
             and any(True for _ in m.parameters(recurse=False)) and type(m) not in _RULES]
    if other:
        raise DeepFaultError(f"module(s) {', '.join(other)} hold weights of a kind the Keras weight matcher "
                             f"does not know (it knows {', '.join(t.__name__ for t in _RULES)})")
    if len(modules) != len(layers):
        raise DeepFaultError(
            f"{source} has {len(layers)} layers with weights ({', '.join(n for n, _ in layers)}) but the "
            f"model has {len(modules)} ({', '.join(n for n, _ in modules)}); is it the right architecture?"
        )
    return modules


def _kernel_in_torch_order(array: np.ndarray, module: nn.Module, flat: tuple[int, ...] | None,
                           backend: str) -> np.ndarray:
    """A Keras kernel before its transpose: a Theano convolution kernel flipped spatially (as
    Keras does when loading it); a Dense kernel after a Flatten with its rows in ``(C, H, W)``
    order instead of Keras's ``(H, W, C)`` (``flat``: the ``(C, H, W)`` flattened).
    """
    if isinstance(module, nn.Conv2d) and backend == "theano":
        return array[::-1, ::-1]
    if isinstance(module, nn.Linear) and flat is not None and array.ndim == 2:
        c, h, w = flat
        if array.shape[0] == c * h * w:
            return array.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)
    return array


def load_keras_weights(model: nn.Module, path: str | os.PathLike, *, input_shape=None) -> nn.Module:
    """Copy the weights of a Keras ``save_weights`` file into ``model`` (in place) and return it."""
    layers, backend = read_keras_weights(path)
    state = match_keras_weights(model, layers, input_shape=input_shape, backend=backend,
                                source=repr(str(path)))
    with torch.no_grad():
        params = dict(model.named_parameters())
        for key, value in state.items():
            params[key].copy_(value)
    return model.eval()


def open_keras_weights(
    path: str | os.PathLike, *, arch: str, input_shape=None, arch_kwargs: dict | None = None,
    dataset: str | None = None, bounds: tuple[float, float] | None = None,
) -> ModelFile:
    """A zoo model ``arch`` with the weights of a Keras ``save_weights`` file.

    Args:
        path: The ``.h5`` file.
        arch: Zoo architecture (``lenet1`` for DeepXplore's ``Model1.h5``, ...).
        input_shape: Per-input ``(C, H, W)`` shape; recorded in ``meta["input_shape"]``.
        arch_kwargs: Arguments of the architecture (``num_classes``).
        dataset: The data set's name, recorded in the model file when known.
        bounds: The input range, recorded in the model file when known.

    Raises:
        DeepFaultError: See :func:`match_keras_weights`.
    """
    check_build(arch, dict(arch_kwargs or {}))  # its size first, on the meta device
    model = build_model(arch, **(arch_kwargs or {}))
    load_keras_weights(model, path, input_shape=input_shape)
    meta = {"source": str(path), "keras_weights": True}
    if input_shape is not None:
        meta["input_shape"] = list(input_shape)
    return ModelFile(model, arch, dict(arch_kwargs or {}), dataset=dataset, bounds=bounds, meta=meta)
