"""Import Keras 2 models as PyTorch modules, without TensorFlow.

Reads the files that Keras 2.0-2.3 and ``tf.keras`` 1.x/2.x write: a full model from
``model.save('m.h5')``, or an architecture JSON from ``model.to_json()`` with the weights
from ``model.save_weights('m.h5')``. Only h5py is needed (the ``keras`` extra).

How the network is rebuilt:

- The result is an ``nn.Sequential`` whose modules are named after the Keras layers, so
  ``model.named_modules()`` (and ``--layers``) use the Keras names. Torch forbids ``.``
  in module names: it becomes ``_`` (and a clash gets a trailing ``_``); the renaming
  is recorded in ``meta["renamed_layers"]``.
- A ``Dense`` or ``Conv2D`` with an ``activation`` becomes two modules, ``<layer>`` and
  ``<layer>_act``, so capturing ``<layer>`` gives the pre-activation values.
- The model takes inputs in the layout the Keras model took (``(N, 28, 28, 1)`` for a
  ``channels_last`` image model, ``(N, 784)`` for a flat one). Inside, image tensors are
  NCHW: a ``<layer>_nchw`` permutation is inserted before the first layer that needs
  NCHW, and ``Flatten``/``Reshape`` permute back first, so the element order is Keras's.
  A layer that needs the Keras layout on an image tensor gets ``<layer>_nhwc`` before it.
- TensorFlow's ``'same'`` padding puts the odd pixel at the bottom/right; where that is
  not symmetric a ``<layer>_pad`` module does it explicitly.
- Kernels written by the Theano backend are flipped, as Keras itself does on loading.

How each Keras weight becomes a torch tensor is the one table ``_WEIGHT_RULES``.

A config is never trusted: :func:`_validate_config` checks the whole of it first (types,
ranges against ``_MAX_SIZE``, a functional graph's references and acyclicity, each
layer's options as registered with ``@_layer(..., options=...)``); the modules are then
built on the ``meta`` device and get memory only once every weight in the file has the
shape its module needs. Whatever is wrong raises :class:`DeepFaultError`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import reprlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["load_keras", "list_keras_layers"]

#: Keras class -> rows ``(Keras weight, torch attribute, permutation, config flag)``, in
#: Keras's storage order. The torch tensor is ``keras_array.transpose(permutation)``; a
#: row with a flag exists only when ``config[flag]`` is true (default true).
_WEIGHT_RULES: dict[str, tuple[tuple[str, str, tuple[int, ...] | None, str | None], ...]] = {
    # (in, out) -> (out, in)
    "Dense": (("kernel", "weight", (1, 0), None), ("bias", "bias", None, "use_bias")),
    # (kh, kw, in / groups, out) -> (out, in / groups, kh, kw)
    "Conv2D": (("kernel", "weight", (3, 2, 0, 1), None), ("bias", "bias", None, "use_bias")),
    "BatchNormalization": (
        ("gamma", "weight", None, "scale"),
        ("beta", "bias", None, "center"),
        ("moving_mean", "running_mean", None, None),
        ("moving_variance", "running_var", None, None),
    ),
}

#: Keras activation name -> torch module factory (softmax is built with its axis).
_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "linear": nn.Identity,
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "selu": nn.SELU,
    "softplus": nn.Softplus,
    "softsign": nn.Softsign,
    "swish": nn.SiLU,
}
_SOFTMAX = "softmax"

#: Other names Keras uses for the same class.
_ALIASES = {
    "Convolution2D": "Conv2D",
    "MaxPool2D": "MaxPooling2D",
    "AvgPool2D": "AveragePooling2D",
    "GlobalAvgPool2D": "GlobalAveragePooling2D",
    "GlobalMaxPool2D": "GlobalMaxPooling2D",
}

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_NHWC_TO_NCHW = (0, 3, 1, 2)
_NCHW_TO_NHWC = (0, 2, 3, 1)


# --------------------------------------------------------------------------- modules


class _Permute(nn.Module):
    """``x.permute(*dims)``."""

    def __init__(self, dims: tuple[int, ...]):
        super().__init__()
        self.dims = tuple(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(*self.dims)

    def extra_repr(self) -> str:
        return f"dims={self.dims}"


class _Flatten(nn.Module):
    """Keras ``Flatten``: optionally permute (to Keras's element order), then flatten."""

    def __init__(self, dims: tuple[int, ...] | None):
        super().__init__()
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dims is not None:
            x = x.permute(*self.dims)
        return x.reshape(x.shape[0], -1)

    def extra_repr(self) -> str:
        return f"permute={self.dims}"


class _Reshape(nn.Module):
    """Keras ``Reshape``: optionally permute to the Keras layout, then reshape."""

    def __init__(self, shape: tuple[int, ...], dims: tuple[int, ...] | None):
        super().__init__()
        self.shape = tuple(shape)
        self.dims = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dims is not None:
            x = x.permute(*self.dims)
        return x.reshape(x.shape[0], *self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, permute={self.dims}"


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow's ``'same'`` padding of one axis: ``(before, after)``, odd one after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


class _SamePad(nn.Module):
    """Pads an NCHW tensor as TensorFlow's ``'same'`` does (extra row/column at the end)."""

    def __init__(self, kernel, stride, dilation=(1, 1), value: float = 0.0):
        super().__init__()
        self.kernel, self.stride, self.dilation = tuple(kernel), tuple(stride), tuple(dilation)
        self.value = value

    def pads(self, x: torch.Tensor) -> tuple[int, int, int, int]:
        (top, bottom), (left, right) = (
            _same_pads(n, k, s, d)
            for n, k, s, d in zip(x.shape[-2:], self.kernel, self.stride, self.dilation, strict=True)
        )
        return left, right, top, bottom

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, self.pads(x), value=self.value)

    def extra_repr(self) -> str:
        return (f"kernel={self.kernel}, stride={self.stride}, dilation={self.dilation}, "
                f"value={self.value}")


class _AvgPoolSame(_SamePad):
    """TensorFlow's ``'same'`` average pooling: the padding is left out of each mean."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = self.pads(x)
        sums = F.avg_pool2d(F.pad(x, pads), self.kernel, self.stride)
        counts = F.avg_pool2d(F.pad(x.new_ones((1, 1, *x.shape[-2:])), pads), self.kernel,
                              self.stride)
        return sums / counts


class _GlobalPool(nn.Module):
    """Mean or max over the spatial axes of an NCHW tensor: ``(N, C)``."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3)) if self.mode == "avg" else x.amax(dim=(2, 3))

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


# --------------------------------------------------------------------------- layers

#: Limits on what a config may ask for, so that a hostile or damaged file gets an error
#: instead of allocating terabytes: one axis or option (units, filters, kernel, stride,
#: padding), the values of one layer's output per input, the weights of one layer, the
#: axes of the input, the nesting of the JSON.
_MAX_SIZE = 2**24
_MAX_VALUES = 2**31
_MAX_WEIGHTS = 2**32
_MAX_RANK = 8
_MAX_DEPTH = 64


def _is_int(value, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _is_size(value) -> bool:
    return _is_int(value, 1, _MAX_SIZE)


def _is_number(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _is_window(value) -> bool:
    return _is_size(value) or (isinstance(value, list) and len(value) == 2
                               and all(_is_size(v) for v in value))


def _is_padding_amount(value) -> bool:
    return _is_int(value, 0, _MAX_SIZE)


def _is_zero_padding(value) -> bool:
    if _is_padding_amount(value):
        return True
    if not isinstance(value, list) or len(value) != 2:
        return False
    return all(_is_padding_amount(v) for v in value) or all(
        isinstance(v, list) and len(v) == 2 and all(_is_padding_amount(p) for p in v) for v in value)


def _is_axis(value) -> bool:
    axes = value if isinstance(value, list) and value else [value]
    return all(_is_int(a, -_MAX_RANK - 1, _MAX_RANK + 1) for a in axes)


def _is_target_shape(value) -> bool:
    return (isinstance(value, list) and 1 <= len(value) <= _MAX_RANK and value.count(-1) <= 1
            and all(v == -1 or _is_size(v) for v in value))


def _is_activation(value) -> bool:
    if isinstance(value, dict):  # a serialised object: {"class_name": ..., "config": ...}
        return isinstance(value.get("config"), str) or isinstance(value.get("class_name"), str)
    return value is None or isinstance(value, str)


@dataclass(frozen=True)
class _Option:
    """How one layer option must look: ``check(value)`` is true, ``expected`` says it."""

    check: Callable[[object], bool]
    expected: str
    required: bool = False


_SIZE = _Option(_is_size, f"an integer from 1 to {_MAX_SIZE}")
_WINDOW = _Option(_is_window, f"an integer from 1 to {_MAX_SIZE} or a list of two")
_OPTIONAL_WINDOW = _Option(lambda v: v is None or _is_window(v), f"null, or {_WINDOW.expected}")
_BOOL = _Option(lambda v: isinstance(v, bool), "true or false")
_NUMBER = _Option(_is_number, "a finite number")
_OPTIONAL_NUMBER = _Option(lambda v: v is None or _is_number(v), "null or a finite number")
_RATE = _Option(lambda v: _is_number(v) and 0 <= v <= 1, "a number from 0 to 1")
_EPSILON = _Option(lambda v: _is_number(v) and v >= 0, "a finite number >= 0")
_PADDING = _Option(lambda v: isinstance(v, str), "'valid' or 'same'")
_DATA_FORMAT = _Option(lambda v: v in (None, "channels_last", "channels_first"),
                       "'channels_last' or 'channels_first'")
_ACTIVATION = _Option(_is_activation, "an activation name such as 'relu'")
_AXIS = _Option(_is_axis, f"an axis from {-_MAX_RANK - 1} to {_MAX_RANK + 1} (or a list of them)")
_ZERO_PADDING = _Option(_is_zero_padding, f"an integer from 0 to {_MAX_SIZE}, a list of two, or "
                        "two lists of two")
_TARGET_SHAPE = _Option(_is_target_shape, f"a list of 1 to {_MAX_RANK} integers from 1 to "
                        f"{_MAX_SIZE}, one of which may be -1")


def _required(option: _Option) -> _Option:
    return _Option(option.check, option.expected, required=True)


_LayerBuilder = Callable[["_Builder", str, dict], None]
_LAYERS: dict[str, _LayerBuilder] = {}
#: Keras class -> the options its builder reads and how each must look; checked for the
#: whole model before anything is built (:func:`_check_options`).
_LAYER_OPTIONS: dict[str, dict[str, _Option]] = {}


def _layer(*class_names: str, options: dict[str, _Option] | None = None):
    """Decorator registering ``build(builder, name, config)`` for Keras classes, with the
    options that ``build`` reads (any other option is ignored).
    """

    def decorate(build: _LayerBuilder) -> _LayerBuilder:
        for cls in class_names:
            if cls in _LAYERS:
                raise RuntimeError(f"Keras layer {cls!r} is registered twice")
            _LAYERS[cls] = build
            _LAYER_OPTIONS[cls] = dict(options or {})
        return build

    return decorate


def list_keras_layers() -> list[str]:
    """The Keras layer classes that :func:`load_keras` can import."""
    return sorted(_LAYERS)


def _pair(value, option: str) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    raise ValueError(f"{option}={value!r} is not an int or a pair of ints")


def _window_out(size, kernel: int, stride: int, dilation: int, padding: str):
    """Output length of a convolution or pooling axis (``None`` stays ``None``)."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - (kernel - 1) * dilation - 1) // stride + 1


@dataclass
class _Target:
    """A module whose weights come from the file."""

    keras_name: str
    cls: str
    config: dict
    module: nn.Module


class _Builder:
    """Turns Keras layers into named torch modules while following the tensor's shape.

    ``shape`` is the Keras shape of the current tensor without the batch axis; ``nchw``
    says that the torch tensor is the NCHW form of an NHWC Keras tensor.
    """

    def __init__(self, input_shape: tuple, keras_names: list[str]):
        self.shape = tuple(input_shape)
        self.nchw = False
        self.data_format: str | None = None
        self.modules: OrderedDict[str, nn.Module] = OrderedDict()
        self.targets: list[_Target] = []
        self.softmax_out = False
        self.names = _module_names(keras_names)

    # -- naming

    def add(self, keras_name: str, module: nn.Module, cls: str | None = None,
            config: dict | None = None) -> None:
        """Add the module for a Keras layer; with ``cls`` its weights are loaded later."""
        self.modules[self.names[keras_name]] = module
        if cls is not None:
            self.targets.append(_Target(keras_name, cls, config or {}, module))

    def aux(self, keras_name: str, suffix: str, module: nn.Module) -> None:
        """Add a helper module named ``<layer>_<suffix>`` that runs before or after it."""
        name = f"{self.names[keras_name]}_{suffix}"
        while name in self.modules or name in self.names.values():
            name += "_"
        self.modules[name] = module

    # -- layouts

    def spatial(self, name: str, cls: str, data_format: str) -> tuple[int | None, ...]:
        """Check for an image tensor, agree on the data format, move to NCHW; ``(C, H, W)``."""
        if data_format not in ("channels_last", "channels_first"):
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) has data_format={data_format!r}; expected "
                "'channels_last' or 'channels_first'"
            )
        if len(self.shape) != 3:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) needs an image input (4 axes with the batch), "
                f"but its input has shape {(None, *self.shape)}; load_keras supports 2-D "
                "image layers only"
            )
        if self.data_format is None:
            self.data_format = data_format
        elif data_format != self.data_format:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) uses {data_format} but earlier layers use "
                f"{self.data_format}; load_keras needs one data format throughout the model"
            )
        if data_format == "channels_last":
            if not self.nchw:
                self.aux(name, "nchw", _Permute(_NHWC_TO_NCHW))
                self.nchw = True
            h, w, c = self.shape
        else:
            c, h, w = self.shape
        return c, h, w

    def set_image(self, c, h, w) -> None:
        """Record an image output, given as channels and size."""
        for size in (h, w):
            if size is not None and size < 1:
                raise DeepFaultError(
                    f"the input shape {list(self.shape)} is too small for the model's "
                    "convolutions and pooling; check the model's input shape"
                )
        self.shape = (h, w, c) if self.data_format == "channels_last" else (c, h, w)

    def keras_dims(self) -> tuple[int, ...] | None:
        """The permutation from the torch tensor to the Keras layout (``None``: same)."""
        return _NCHW_TO_NHWC if self.nchw else None

    def to_keras(self, name: str) -> None:
        """Put the tensor back into the Keras layout before a layer that needs it."""
        if self.nchw:
            self.aux(name, "nhwc", _Permute(_NCHW_TO_NHWC))
            self.nchw = False

    def check_weights(self, name: str, cls: str, count: int) -> None:
        """Refuse a layer with more than ``_MAX_WEIGHTS`` weights before building it."""
        if count > _MAX_WEIGHTS:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) would have {count} weights on its input of shape "
                f"{(None, *self.shape)}, more than load_keras accepts ({_MAX_WEIGHTS}); check "
                "the layer's size and the model's input shape"
            )

    def torch_dim(self, keras_axis: int) -> int:
        """The torch dimension holding Keras axis ``keras_axis`` (batch axis included)."""
        ndim = len(self.shape) + 1
        axis = keras_axis + ndim if keras_axis < 0 else keras_axis
        if not 0 < axis < ndim:
            raise ValueError(f"axis {keras_axis} is out of range for a {ndim}-D tensor")
        return _NCHW_TO_NHWC[axis] if self.nchw else axis

    # -- activations

    def activation(self, name: str, cls: str, activation, suffix: str | None) -> None:
        """Add the activation module, as the layer itself or as ``<layer>_<suffix>``."""
        if isinstance(activation, dict):  # a serialised object rather than a name
            inner = activation.get("config")
            activation = inner if isinstance(inner, str) else activation.get("class_name")
        if activation is None:
            activation = "linear"
        module: nn.Module
        if activation == _SOFTMAX:
            module = nn.Softmax(dim=self.torch_dim(-1))
        elif activation in _ACTIVATIONS:
            if activation == "linear" and suffix is not None:
                return
            module = _ACTIVATIONS[activation]()
        else:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) uses activation {activation!r}, which "
                f"load_keras does not support; supported: "
                f"{', '.join(sorted([*_ACTIVATIONS, _SOFTMAX]))}"
            )
        if suffix is None:
            self.add(name, module)
        else:
            self.aux(name, suffix, module)
        self.softmax_out = activation == _SOFTMAX


def _module_names(keras_names: list[str]) -> dict[str, str]:
    """Keras layer name -> torch module name: ``.`` -> ``_``, made unique and not an
    attribute of ``nn.Sequential`` (torch refuses both).
    """
    probe = nn.Sequential()
    names: dict[str, str] = {}
    for keras_name in keras_names:
        name = keras_name.replace(".", "_") or "layer"
        while name in names.values() or hasattr(probe, name):
            name += "_"
        names[keras_name] = name
    return names


def _unsupported(name: str, cls: str, what: str) -> DeepFaultError:
    return DeepFaultError(
        f"Keras layer {name!r} ({cls}) uses {what}, which load_keras does not support; "
        "change the model or convert this layer by hand"
    )


@_layer("Dense", options={"units": _required(_SIZE), "use_bias": _BOOL, "activation": _ACTIVATION})
def _dense(b: _Builder, name: str, cfg: dict) -> None:
    b.to_keras(name)
    in_features = b.shape[-1] if b.shape else None
    if not isinstance(in_features, int):
        raise DeepFaultError(
            f"Keras layer {name!r} (Dense) has an input of unknown width {(None, *b.shape)}; "
            "give the model a fixed input shape"
        )
    units = cfg["units"]
    b.check_weights(name, "Dense", in_features * units)
    b.add(name, nn.Linear(in_features, units, bias=bool(cfg.get("use_bias", True))), "Dense", cfg)
    b.shape = (*b.shape[:-1], units)
    b.activation(name, "Dense", cfg.get("activation"), suffix="act")


@_layer("Conv2D", options={
    "filters": _required(_SIZE), "kernel_size": _required(_WINDOW), "strides": _WINDOW,
    "dilation_rate": _WINDOW, "groups": _SIZE, "padding": _PADDING, "data_format": _DATA_FORMAT,
    "use_bias": _BOOL, "activation": _ACTIVATION})
def _conv2d(b: _Builder, name: str, cfg: dict) -> None:
    c, h, w = b.spatial(name, "Conv2D", cfg.get("data_format") or "channels_last")
    (kh, kw), (sh, sw) = _pair(cfg["kernel_size"], "kernel_size"), _pair(
        cfg.get("strides", 1), "strides")
    dh, dw = _pair(cfg.get("dilation_rate", 1), "dilation_rate")
    groups = int(cfg.get("groups", 1))
    padding = cfg.get("padding", "valid")
    if padding not in ("valid", "same"):
        raise _unsupported(name, "Conv2D", f"padding={padding!r} (supported: 'valid', 'same')")
    if c is None:
        raise DeepFaultError(
            f"Keras layer {name!r} (Conv2D) has an unknown number of input channels; give "
            "the model a fixed input shape"
        )
    filters = cfg["filters"]
    if c % groups or filters % groups:
        raise DeepFaultError(
            f"Keras layer {name!r} (Conv2D) has {c} input channels and {filters} filters, which "
            f"are not both multiples of groups={groups}; check the model's input shape"
        )
    b.check_weights(name, "Conv2D", kh * kw * c // groups * filters)
    symmetric = sh == sw == 1 and (kh - 1) * dh % 2 == 0 and (kw - 1) * dw % 2 == 0
    conv_padding = (0, 0)
    if padding == "same" and symmetric:
        conv_padding = ((kh - 1) * dh // 2, (kw - 1) * dw // 2)
    elif padding == "same":
        b.aux(name, "pad", _SamePad((kh, kw), (sh, sw), (dh, dw)))
    conv = nn.Conv2d(c, filters, (kh, kw), stride=(sh, sw), padding=conv_padding,
                     dilation=(dh, dw), groups=groups, bias=bool(cfg.get("use_bias", True)))
    b.add(name, conv, "Conv2D", cfg)
    b.set_image(filters, _window_out(h, kh, sh, dh, padding), _window_out(w, kw, sw, dw, padding))
    b.activation(name, "Conv2D", cfg.get("activation"), suffix="act")


_POOLING_OPTIONS = {"pool_size": _WINDOW, "strides": _OPTIONAL_WINDOW, "padding": _PADDING,
                    "data_format": _DATA_FORMAT}
_GLOBAL_POOLING_OPTIONS = {"data_format": _DATA_FORMAT, "keepdims": _BOOL}


def _pooling(b: _Builder, name: str, cfg: dict, cls: str, mode: str) -> None:
    c, h, w = b.spatial(name, cls, cfg.get("data_format") or "channels_last")
    kernel = _pair(cfg.get("pool_size", 2), "pool_size")
    stride = _pair(cfg.get("strides") or kernel, "strides")
    padding = cfg.get("padding", "valid")
    module: nn.Module
    if padding == "valid":
        module = nn.MaxPool2d(kernel, stride) if mode == "max" else nn.AvgPool2d(kernel, stride)
    elif padding == "same" and mode == "max":
        b.aux(name, "pad", _SamePad(kernel, stride, value=float("-inf")))
        module = nn.MaxPool2d(kernel, stride)
    elif padding == "same":
        module = _AvgPoolSame(kernel, stride)
    else:
        raise _unsupported(name, cls, f"padding={padding!r} (supported: 'valid', 'same')")
    b.add(name, module)
    b.set_image(c, *(_window_out(n, k, s, 1, padding)
                     for n, k, s in zip((h, w), kernel, stride, strict=True)))


for _cls, _mode in (("MaxPooling2D", "max"), ("AveragePooling2D", "avg")):
    _layer(_cls, options=_POOLING_OPTIONS)(functools.partial(_pooling, cls=_cls, mode=_mode))


def _global_pooling(b: _Builder, name: str, cfg: dict, cls: str, mode: str) -> None:
    c, _, _ = b.spatial(name, cls, cfg.get("data_format") or "channels_last")
    if cfg.get("keepdims", False):
        raise _unsupported(name, cls, "keepdims=True")
    b.add(name, _GlobalPool(mode))
    b.shape, b.nchw = (c,), False


for _cls, _mode in (("GlobalAveragePooling2D", "avg"), ("GlobalMaxPooling2D", "max")):
    _layer(_cls, options=_GLOBAL_POOLING_OPTIONS)(functools.partial(_global_pooling, cls=_cls, mode=_mode))


def _one_axis(name: str, kind: str, axis):
    """A layer's ``axis`` option as one axis (a one-item list is that item; several are refused)."""
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise _unsupported(name, kind, f"axis={axis} (several axes)")
        return axis[0]
    return axis


@_layer("ZeroPadding2D", options={"padding": _ZERO_PADDING, "data_format": _DATA_FORMAT})
def _zero_padding(b: _Builder, name: str, cfg: dict) -> None:
    c, h, w = b.spatial(name, "ZeroPadding2D", cfg.get("data_format") or "channels_last")
    padding = cfg.get("padding", 1)
    if isinstance(padding, int):
        (top, bottom), (left, right) = (padding, padding), (padding, padding)
    elif all(isinstance(p, int) for p in padding):
        (top, bottom), (left, right) = (padding[0],) * 2, (padding[1],) * 2
    else:
        (top, bottom), (left, right) = _pair(padding[0], "padding"), _pair(padding[1], "padding")
    b.add(name, nn.ZeroPad2d((left, right, top, bottom)))
    b.set_image(c, None if h is None else h + top + bottom, None if w is None else w + left + right)


@_layer("BatchNormalization", options={
    "axis": _AXIS, "epsilon": _EPSILON, "center": _BOOL, "scale": _BOOL, "renorm": _BOOL})
def _batch_norm(b: _Builder, name: str, cfg: dict) -> None:
    axis = _one_axis(name, "BatchNormalization", cfg.get("axis", -1))
    if cfg.get("renorm"):
        raise _unsupported(name, "BatchNormalization", "renorm=True")
    ndim = len(b.shape) + 1
    axis = int(axis) + ndim if int(axis) < 0 else int(axis)
    eps = float(cfg.get("epsilon", 1e-3))
    if ndim == 2 and axis == 1:
        c = b.shape[0]
        make: Callable[..., nn.Module] = nn.BatchNorm1d
    elif ndim == 4 and axis in (1, 3):
        fmt = "channels_first" if axis == 1 else "channels_last"
        c, _, _ = b.spatial(name, "BatchNormalization", fmt)
        make = nn.BatchNorm2d
    else:
        raise _unsupported(
            name, "BatchNormalization",
            f"axis={cfg.get('axis')} on an input of shape {(None, *b.shape)} (supported: the "
            "last axis of a 2-D input, the channel axis of an image)",
        )
    if c is None:
        raise DeepFaultError(
            f"Keras layer {name!r} (BatchNormalization) has an unknown number of channels "
            f"{(None, *b.shape)}; give the model a fixed input shape"
        )
    b.add(name, make(c, eps=eps), "BatchNormalization", cfg)


@_layer("Flatten", options={"data_format": _DATA_FORMAT})
def _flatten(b: _Builder, name: str, cfg: dict) -> None:
    ndim = len(b.shape) + 1
    dims = list(b.keras_dims() or range(ndim))
    # Keras's Flatten(data_format='channels_first') moves the channels last first.
    if (cfg.get("data_format") or "channels_last") == "channels_first" and ndim > 2:
        dims = [dims[i] for i in (0, *range(2, ndim), 1)]
    b.add(name, _Flatten(None if dims == sorted(dims) else tuple(dims)))
    if any(n is None for n in b.shape):
        raise DeepFaultError(
            f"Keras layer {name!r} (Flatten) has an input of unknown size {(None, *b.shape)}; "
            "give the model a fixed input shape"
        )
    b.shape, b.nchw = (math.prod(b.shape),), False


@_layer("Reshape", options={"target_shape": _required(_TARGET_SHAPE)})
def _reshape(b: _Builder, name: str, cfg: dict) -> None:
    target = [int(n) for n in cfg["target_shape"]]
    if None not in b.shape:
        size, known = math.prod(b.shape), math.prod(n for n in target if n != -1)
        if target.count(-1) == 1 and known and size % known == 0:
            target_shape = tuple(size // known if n == -1 else n for n in target)
        elif -1 not in target and known == size:
            target_shape = tuple(target)
        else:
            raise DeepFaultError(
                f"Keras layer {name!r} (Reshape) cannot reshape {(None, *b.shape)} to "
                f"{(None, *target)}; check the model's input shape"
            )
    else:
        target_shape = tuple(None if n == -1 else n for n in target)
    b.add(name, _Reshape(tuple(target), b.keras_dims()))
    b.shape, b.nchw = target_shape, False


@_layer("Activation", options={"activation": _required(_ACTIVATION)})
def _activation(b: _Builder, name: str, cfg: dict) -> None:
    b.activation(name, "Activation", cfg["activation"], suffix=None)


@_layer("Softmax", options={"axis": _AXIS})
def _softmax(b: _Builder, name: str, cfg: dict) -> None:
    axis = _one_axis(name, "Softmax", cfg.get("axis", -1))
    b.add(name, nn.Softmax(dim=b.torch_dim(int(axis))))
    b.softmax_out = int(axis) == -1 or int(axis) == len(b.shape)


@_layer("LeakyReLU", options={"alpha": _NUMBER, "negative_slope": _NUMBER})
def _leaky_relu(b: _Builder, name: str, cfg: dict) -> None:
    slope = cfg.get("alpha", cfg.get("negative_slope", 0.3))
    b.add(name, nn.LeakyReLU(float(slope)))


@_layer("ReLU", options={
    "max_value": _Option(lambda v: v is None or _is_number(v) and v >= 0, "null or a finite number >= 0"),
    "negative_slope": _OPTIONAL_NUMBER, "threshold": _OPTIONAL_NUMBER})
def _relu(b: _Builder, name: str, cfg: dict) -> None:
    max_value = cfg.get("max_value")
    slope = float(cfg.get("negative_slope") or 0.0)
    if float(cfg.get("threshold") or 0.0) != 0.0:
        raise _unsupported(name, "ReLU", f"threshold={cfg['threshold']}")
    if max_value is not None and slope != 0.0:
        raise _unsupported(name, "ReLU", "max_value together with negative_slope")
    if max_value == 0:
        raise _unsupported(name, "ReLU", "max_value=0 (an output of zeros)")
    if max_value is not None:
        b.add(name, nn.Hardtanh(0.0, float(max_value)))
    elif slope != 0.0:
        b.add(name, nn.LeakyReLU(slope))
    else:
        b.add(name, nn.ReLU())


@_layer("ELU", options={"alpha": _NUMBER})
def _elu(b: _Builder, name: str, cfg: dict) -> None:
    b.add(name, nn.ELU(float(cfg.get("alpha", 1.0))))


@_layer("Dropout", options={"rate": _RATE})
def _dropout(b: _Builder, name: str, cfg: dict) -> None:
    b.add(name, nn.Dropout(float(cfg.get("rate", 0.0))))


@_layer("InputLayer")
def _input_layer(b: _Builder, name: str, cfg: dict) -> None:
    raise DeepFaultError(
        f"Keras layer {name!r} (InputLayer) is not the first layer; load_keras imports "
        "models with one input only"
    )


# --------------------------------------------------------------------------- config

_Layer = tuple[str, str, dict]  # (Keras name, Keras class, layer config)
_FIX_CONFIG = "the file is damaged or not written by Keras 2: save the model again"


def _brief(value) -> str:
    """A short ``repr`` of a config value, for messages (long or deep values are cut)."""
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxstring, short.maxother = 3, 4, 3, 40, 40
    return short.repr(value)


def _check_depth(config, source: str) -> None:
    """Refuse JSON nested more than ``_MAX_DEPTH`` levels (walked without recursion)."""
    stack = [(config, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise DeepFaultError(
                f"the model config in {source!r} is nested more than {_MAX_DEPTH} levels deep, "
                f"which no Keras 2 model config is; {_FIX_CONFIG}"
            )
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def _validate_config(config, source: str) -> tuple[list[_Layer], tuple[int | None, ...]]:
    """Check a whole Keras model config before anything is built from it.

    Checks the types of everything the importer reads, the ranges of sizes (units,
    filters, kernels, strides, pools, paddings, input axes: ``1 .. _MAX_SIZE``), unique
    layer names, supported layer classes, and for functional models a graph that is a
    chain: every inbound layer exists, there is no cycle (a topological sort), one input
    and one output. Sizes that depend on the input (weights per layer, values per output)
    are checked while building, before any memory is allocated.

    Args:
        config: The parsed ``model_config`` or architecture JSON.
        source: The file, for messages.

    Returns:
        The layers ``(name, class, config)`` from input to output without the
        ``InputLayer``, and the input shape without the batch axis (``None``: any size).

    Raises:
        DeepFaultError: Whatever in the config is malformed, out of range or unsupported.
    """
    _check_depth(config, source)
    if not isinstance(config, dict) or "class_name" not in config:
        raise DeepFaultError(
            f"{source!r} does not hold a Keras model config (no 'class_name'); give the "
            "file written by model.save() or model.to_json()"
        )
    cls, inner = config["class_name"], config.get("config")
    if cls == "Sequential":
        layers = _layer_items(_layer_list(inner, source, sequential=True), source)
    elif cls in ("Model", "Functional"):
        items = _layer_list(inner, source, sequential=False)  # refuses an ``inner`` that is no dict
        assert isinstance(inner, dict)  # for the type checker: _layer_list has just checked it
        layers = _chain(inner, items, _layer_items(items, source), source)
    else:
        raise DeepFaultError(
            f"{source!r} holds a Keras {_brief(cls)} model; load_keras imports Sequential models "
            "and functional models that form a chain"
        )
    if not layers:
        raise DeepFaultError(f"the Keras model in {source!r} has no layers; {_FIX_CONFIG}")
    input_shape = _input_shape(layers[0], source)
    if layers[0][1] == "InputLayer":
        layers = layers[1:]
    for name, cls, cfg in layers:
        _check_options(name, cls, cfg, source)
    return layers, input_shape


def _layer_list(inner, source: str, *, sequential: bool) -> list:
    """The list of layer entries in a model's ``config`` (a Sequential one may be the list)."""
    if sequential and (inner is None or isinstance(inner, list)):
        return inner or []
    if not isinstance(inner, dict):
        raise DeepFaultError(
            f"the 'config' of the Keras model in {source!r} is {_brief(inner)}, not a dict; "
            f"{_FIX_CONFIG}"
        )
    layers = inner.get("layers") or []
    if not isinstance(layers, list):
        raise DeepFaultError(
            f"the 'layers' of the Keras model in {source!r} is {_brief(layers)}, not a list; "
            f"{_FIX_CONFIG}"
        )
    return layers


def _layer_items(items: list, source: str) -> list[_Layer]:
    """``(name, class, config)`` of each layer entry, checking types and unique names."""
    layers, seen = [], set()
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DeepFaultError(
                f"layer {index} of the Keras model in {source!r} is {_brief(item)}, not a dict; "
                f"{_FIX_CONFIG}"
            )
        cfg = item.get("config")
        name = item.get("name") or (cfg.get("name") if isinstance(cfg, dict) else None)
        if not isinstance(name, str) or not name:
            raise DeepFaultError(
                f"layer {index} of the Keras model in {source!r} has no name: {_brief(item)}; "
                f"{_FIX_CONFIG}"
            )
        cls = item.get("class_name")
        if not isinstance(cls, str):
            raise DeepFaultError(
                f"Keras layer {name!r} in {source!r} has class_name {_brief(cls)}, not a string; "
                f"{_FIX_CONFIG}"
            )
        if cfg is not None and not isinstance(cfg, dict):
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) in {source!r} has config {_brief(cfg)}, not a "
                f"dict; {_FIX_CONFIG}"
            )
        if name in seen:
            raise DeepFaultError(
                f"two layers of the Keras model in {source!r} are named {name!r}; Keras layer "
                f"names are unique: {_FIX_CONFIG}"
            )
        seen.add(name)
        layers.append((name, cls, cfg or {}))
    return layers


def _input_shape(first: _Layer, source: str) -> tuple[int | None, ...]:
    """The first layer's ``batch_input_shape`` without the batch axis."""
    name, cls, cfg = first
    key = "batch_input_shape" if "batch_input_shape" in cfg else "batch_shape"
    shape = cfg.get(key)
    if shape is None:
        raise DeepFaultError(
            f"the Keras model in {source!r} records no input shape; build it with "
            "input_shape=... (or an Input layer) before saving"
        )
    if (not isinstance(shape, list) or not 2 <= len(shape) <= _MAX_RANK + 1
            or not all(n is None or _is_size(n) for n in shape)):
        raise DeepFaultError(
            f"Keras layer {name!r} ({cls}) in {source!r} has {key}={_brief(shape)}; expected a "
            f"list of 2 to {_MAX_RANK + 1} entries, each null or an integer from 1 to {_MAX_SIZE}: "
            f"{_FIX_CONFIG}"
        )
    known = math.prod(n for n in shape[1:] if n is not None)
    if known > _MAX_VALUES:
        raise DeepFaultError(
            f"Keras layer {name!r} ({cls}) in {source!r} has {key}={shape}, {known} values per "
            f"input, more than load_keras accepts ({_MAX_VALUES}); check the model's input shape"
        )
    return tuple(shape[1:])


def _check_options(name: str, cls: str, cfg: dict, source: str) -> None:
    """Check that the layer class is supported and its options look as ``_LAYER_OPTIONS`` says."""
    options = _LAYER_OPTIONS.get(_ALIASES.get(cls, cls))
    if options is None:
        raise DeepFaultError(
            f"Keras layer {name!r} in {source!r} is a {cls}, which load_keras does not "
            f"support; supported layers: {', '.join(list_keras_layers())}"
        )
    for key, option in options.items():
        if key not in cfg:
            if option.required:
                raise DeepFaultError(
                    f"Keras layer {name!r} ({cls}) in {source!r} has no {key!r} option; "
                    f"{_FIX_CONFIG}"
                )
        elif not option.check(cfg[key]):
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) in {source!r} has {key}={_brief(cfg[key])}; "
                f"expected {option.expected}: {_FIX_CONFIG}"
            )


def _tensor_refs(value, what: str, source: str) -> list[str]:
    """The layer names of a list of ``[layer, node_index, tensor_index(, kwargs)]``,
    refusing other node or tensor indices (they mean a layer used more than once).
    """
    ok = isinstance(value, list)
    names = []
    for ref in value if ok else ():
        ok = (isinstance(ref, list) and len(ref) in (3, 4) and isinstance(ref[0], str)
              and _is_int(ref[1], 0, _MAX_SIZE) and _is_int(ref[2], 0, _MAX_SIZE)
              and (len(ref) == 3 or isinstance(ref[3], dict)))
        if not ok:
            break
        if ref[1:3] != [0, 0]:
            raise DeepFaultError(
                f"the functional Keras model in {source!r} is not a chain ({what} uses output "
                f"{ref[2]} of call {ref[1]} of layer {ref[0]!r}); load_keras imports functional "
                "models only when each layer is called once on the layer before"
            )
        names.append(ref[0])
    if not ok:
        raise DeepFaultError(
            f"{what} in {source!r} is {_brief(value)}; expected a list of "
            f"[layer name, node index, tensor index]: {_FIX_CONFIG}"
        )
    return names


def _not_a_chain(source: str, why: str) -> DeepFaultError:
    return DeepFaultError(
        f"the functional Keras model in {source!r} is not a chain ({why}); load_keras "
        "imports functional models only when each layer takes its one input from the "
        "layer before"
    )


def _chain_ends(inner: dict, source: str) -> tuple[str, str]:
    """The names of the model's one input layer and one output layer."""
    ends = {}
    for key in ("input_layers", "output_layers"):
        value = inner.get(key)
        # tf.keras 2 writes a single input or output as ["name", 0, 0] rather than a list of them
        if isinstance(value, list) and value and isinstance(value[0], str):
            value = [value]
        ends[key] = _tensor_refs(value, f"{key!r} of the model", source)
    inputs, outputs = ends["input_layers"], ends["output_layers"]
    if len(inputs) != 1 or len(outputs) != 1:
        raise _not_a_chain(source, f"{len(inputs)} inputs and {len(outputs)} outputs")
    return inputs[0], outputs[0]


def _parents(items: list[_Layer], raw: dict[str, dict], source: str) -> dict[str, str]:
    """Each layer's one inbound layer (input layers have none), from its ``inbound_nodes``."""
    parent: dict[str, str] = {}
    for name, cls, _ in items:
        nodes = raw[name].get("inbound_nodes")
        if nodes is None:
            nodes = []
        what = f"inbound_nodes of Keras layer {name!r}"
        if not isinstance(nodes, list) or not all(isinstance(node, list) for node in nodes):
            raise DeepFaultError(
                f"the {what} in {source!r} is {_brief(nodes)}; expected a list of nodes, each a "
                f"list of [layer name, node index, tensor index, kwargs]: {_FIX_CONFIG}"
            )
        if cls == "InputLayer":
            continue
        if len(nodes) != 1:
            raise _not_a_chain(source, f"layer {name!r} is called {len(nodes)} times")
        inbound = _tensor_refs(nodes[0], f"the {what}", source)
        if len(inbound) != 1:
            raise _not_a_chain(source, f"layer {name!r} takes {len(inbound)} inputs")
        parent[name] = inbound[0]
    return parent


def _children(parent: dict[str, str], layers: dict[str, _Layer], source: str) -> dict[str, list[str]]:
    """The layers each layer feeds; refuses a cycle (Kahn's topological sort), naming it."""
    # Kahn's algorithm: what is left once no layer without a pending input remains is a cycle
    pending = {name: int(name in parent) for name in layers}
    children: dict[str, list[str]] = {}
    for child, ref in parent.items():
        children.setdefault(ref, []).append(child)
    ready = [name for name, count in pending.items() if count == 0]
    while ready:
        for child in children.get(ready.pop(), []):
            pending[child] -= 1
            if pending[child] == 0:
                ready.append(child)
    stuck = [name for name, count in pending.items() if count > 0]
    if stuck:
        # each layer has one parent, so following parents from a stuck layer walks into the loop
        cycle, name = [], stuck[0]
        while name not in cycle:
            cycle.append(name)
            name = parent[name]
        cycle = [*cycle[cycle.index(name):], name]
        loop = " -> ".join(map(repr, cycle)) if len(cycle) <= 6 else f"{cycle[0]!r} -> ... -> {name!r}"
        raise DeepFaultError(
            f"the functional Keras model in {source!r} has a cycle: each layer of {loop} takes "
            f"its input from the one after it; {_FIX_CONFIG}"
        )
    return children


def _chain(inner: dict, entries: list[dict], items: list[_Layer], source: str) -> list[_Layer]:
    """The layers of a functional model that is a chain, from its input to its output.

    The graph is checked in steps: well-formed references to existing layers, no cycle
    (Kahn's topological sort), then one input, one output and one path between them.
    """
    layers = {item[0]: item for item in items}
    raw = {name: entry for (name, _, _), entry in zip(items, entries, strict=True)}
    first, last = _chain_ends(inner, source)
    parent = _parents(items, raw, source)
    for name, ref in [*parent.items(), ("input_layers", first), ("output_layers", last)]:
        if ref not in layers:
            raise DeepFaultError(
                f"{name!r} of the functional Keras model in {source!r} refers to layer {ref!r}, "
                f"which the model does not have; {_FIX_CONFIG}"
            )
    children = _children(parent, layers, source)

    for ref, kids in children.items():
        if len(kids) > 1:
            raise _not_a_chain(source, f"layer {ref!r} feeds more than one layer")
    if first in parent:
        raise _not_a_chain(source, f"the input layer {first!r} takes an input from {parent[first]!r}")
    order, name = [first], first
    while children.get(name):
        name = children[name][0]
        order.append(name)
    if order[-1] != last or len(order) != len(layers):
        raise _not_a_chain(source, "some layers are not on the path from the input to the output")
    return [layers[n] for n in order]


def _build(layers: list[_Layer], input_shape: tuple, source: str) -> _Builder:
    """The torch modules of all layers, in a builder that also lists the weight targets.

    The modules are built on the ``meta`` device: they have shapes but no memory until the
    weights have been checked against them (:func:`load_keras`).
    """
    b = _Builder(input_shape, [name for name, _, _ in layers])
    for name, cls, cfg in layers:
        softmax_out, b.softmax_out = b.softmax_out, False
        try:
            with torch.device("meta"):
                _LAYERS[_ALIASES.get(cls, cls)](b, name, cfg)
        except DeepFaultError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) in {source!r} has a config that load_keras "
                f"cannot read ({type(err).__name__}: {err}); check that the file is a Keras 2 "
                "model"
            ) from err
        values = math.prod(n for n in b.shape if n is not None)
        if values > _MAX_VALUES:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) in {source!r} outputs shape {(None, *b.shape)}, "
                f"{values} values per input, more than load_keras accepts ({_MAX_VALUES}); check "
                "the layer's options and the model's input shape"
            )
        if cls == "Dropout":  # an identity at inference keeps the output kind
            b.softmax_out = softmax_out
    return b


# --------------------------------------------------------------------------- files


@dataclass
class _KerasFile:
    """What one Keras file holds."""

    kind: str  # "hdf5" or "json"
    config: dict | None
    keras_version: str | None
    backend: str | None
    weights: dict[str, list[tuple[str, np.ndarray]]] | None  # layer -> [(name, array)]


def _text(value) -> str:
    """An attribute value as ``str`` (Keras 2 writes bytes, tf.keras 2 writes str)."""
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value[()]
    return value.decode("utf8") if isinstance(value, bytes) else str(value)


def _attr_list(attrs, name: str) -> list[str] | None:
    """A list attribute; Keras splits long ones into ``name0``, ``name1``, ..."""
    if name in attrs:
        chunks = [attrs[name]]
    else:
        chunks = [attrs[f"{name}{i}"] for i in range(len(attrs)) if f"{name}{i}" in attrs]
        if not chunks:
            return None
    return [_text(v) for chunk in chunks for v in np.atleast_1d(np.asarray(chunk)).tolist()]


def _parse_json(text: str, what: str, not_json: str, fix: str) -> object:
    """``json.loads(text)``; text that is not JSON raises ``"<what> <not_json> (<why>); <fix>"``."""
    try:
        return json.loads(text)
    except RecursionError as err:
        raise DeepFaultError(
            f"{what} is nested too deeply to parse, which no Keras model config is; {fix}"
        ) from err
    except ValueError as err:  # a JSONDecodeError, or an integer too long to convert
        detail = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise DeepFaultError(f"{what} {not_json} ({detail}); {fix}") from err


def _sniff(path: Path, role: str) -> str:
    """``"hdf5"`` or ``"json"``, from the file's first bytes."""
    if not path.exists():
        raise DeepFaultError(f"{role} {str(path)!r} does not exist; check the path")
    if path.is_dir():
        raise DeepFaultError(
            f"{role} {str(path)!r} is a directory (a TensorFlow SavedModel?); load_keras "
            "reads HDF5 files: save the model with model.save('model.h5')"
        )
    with open(path, "rb") as fh:
        head = fh.read(8)
        # HDF5 puts its signature at 0, 512, 1024, 2048, ... (after an optional user block)
        offset = 512
        while head != _HDF5_SIGNATURE and offset <= 1 << 20:
            fh.seek(offset)
            head, offset = fh.read(8), offset * 2
            if not head:
                break
    if head == _HDF5_SIGNATURE:
        return "hdf5"
    with open(path, "rb") as fh:
        start = fh.read(4)
    if start.startswith(b"PK"):
        raise DeepFaultError(
            f"{role} {str(path)!r} is a zip archive (a Keras 3 '.keras' file, or a PyTorch "
            "file?); load_keras reads Keras 2 files: save the model with model.save('model.h5')"
        )
    return "json"


def _read(path: Path, role: str) -> _KerasFile:
    """Read a Keras HDF5 or JSON file completely."""
    if _sniff(path, role) == "json":
        try:
            text = path.read_text(encoding="utf8")
        except (UnicodeDecodeError, OSError) as err:
            raise DeepFaultError(
                f"{role} {str(path)!r} is neither HDF5 nor JSON; give the .h5 file from "
                "model.save() or the .json file from model.to_json()"
            ) from err
        config = _parse_json(text, f"{role} {str(path)!r}", "is neither HDF5 nor JSON",
                             "give the .h5 file from model.save() or the .json file from "
                             "model.to_json()")
        if not isinstance(config, dict):
            raise DeepFaultError(f"{role} {str(path)!r} is JSON but not a Keras model config")
        version, backend = config.get("keras_version"), config.get("backend")
        for key, value in (("keras_version", version), ("backend", backend)):
            if value is not None and not isinstance(value, str):
                raise DeepFaultError(
                    f"{role} {str(path)!r} has {key}={_brief(value)}, not a string; {_FIX_CONFIG}"
                )
        return _KerasFile("json", config, version, backend, None)
    return _read_hdf5(path, role)


def _read_hdf5(path: Path, role: str) -> _KerasFile:
    try:
        import h5py
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "reading Keras files needs h5py: pip install -e '.[keras]'"
        ) from err
    source = str(path)
    try:
        with h5py.File(path, "r") as f:
            config: dict | None = None
            if "model_config" in f.attrs:
                what = f"the model_config of {source!r}"
                parsed = _parse_json(_text(f.attrs["model_config"]), what, "is not valid JSON",
                                     "save the model again")
                if not isinstance(parsed, dict):
                    raise DeepFaultError(f"{what} is not a Keras model config; save the model again")
                config = parsed
            group = f.get("model_weights", f)
            layer_names = _attr_list(group.attrs, "layer_names")
            weights = None
            if layer_names is not None:
                weights = {}
                for layer in layer_names:
                    if layer not in group:
                        raise DeepFaultError(
                            f"{role} {source!r} lists layer {layer!r} but holds no group for "
                            "it; the file is damaged: save the model again"
                        )
                    names = _attr_list(group[layer].attrs, "weight_names") or []
                    for w in names:
                        if w not in group[layer]:
                            raise DeepFaultError(
                                f"{role} {source!r} lists weight {w!r} of layer {layer!r} "
                                "but does not hold it; the file is damaged: save the model again"
                            )
                    weights[layer] = [(w, np.asarray(group[layer][w], dtype=np.float32))
                                      for w in names]

            def attr(key):
                value = f.attrs.get(key, group.attrs.get(key))
                return None if value is None else _text(value)

            return _KerasFile("hdf5", config, attr("keras_version"), attr("backend"), weights)
    except DeepFaultError:
        raise
    except (OSError, KeyError, TypeError, ValueError) as err:  # h5py's errors on damaged files
        detail = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise DeepFaultError(
            f"{role} {source!r} cannot be read as HDF5 ({detail}); it may be truncated or "
            "corrupt: copy or save it again"
        ) from err


# --------------------------------------------------------------------------- weights


def _short(weight_name: str) -> str:
    """``'dense_1/kernel:0'`` -> ``'kernel'``."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _match_weights(targets: list[_Target], weights: dict[str, list[tuple[str, np.ndarray]]],
                   source: str, backend: str | None) -> list[tuple[nn.Module, str, np.ndarray]]:
    """Pair each weight of the (still memoryless) modules with the file's array, checking
    every shape (``_WEIGHT_RULES``), so that nothing is allocated for a config that does
    not fit the weights.

    Returns:
        ``(module, attribute, array)`` with the array in torch's layout.
    """
    plan = []
    wanted = {t.keras_name for t in targets}
    extra = [name for name, arrays in weights.items() if arrays and name not in wanted]
    if extra:
        raise DeepFaultError(
            f"the weights in {source!r} include layer(s) {', '.join(map(repr, extra))} that "
            "the architecture does not have; give the weights saved from this model"
        )
    for t in targets:
        rules = [r for r in _WEIGHT_RULES[t.cls] if r[3] is None or t.config.get(r[3], True)]
        expected = [r[0] for r in rules]
        arrays = weights.get(t.keras_name)
        if arrays is None:
            raise DeepFaultError(
                f"the weights in {source!r} have no layer {t.keras_name!r}; give the weights "
                "saved from this model"
            )
        found = [_short(w) for w, _ in arrays]
        if len(found) != len(expected):
            raise DeepFaultError(
                f"Keras layer {t.keras_name!r} ({t.cls}) has weights {found} in {source!r}, "
                f"but its config needs {expected}; give the weights saved from this model"
            )
        by_name = dict(zip(found, arrays, strict=True)) if sorted(found) == sorted(expected) else None
        for i, (keras_weight, attr, dims, _) in enumerate(rules):
            weight_name, array = by_name[keras_weight] if by_name else arrays[i]
            target = getattr(t.module, attr)
            want = tuple(target.shape)
            if dims is not None:
                keras_want = [0] * len(want)
                for torch_axis, keras_axis in enumerate(dims):
                    keras_want[keras_axis] = want[torch_axis]
                want = tuple(keras_want)
            if tuple(array.shape) != want:
                raise DeepFaultError(
                    f"Keras layer {t.keras_name!r} ({t.cls}): weight {weight_name!r} in "
                    f"{source!r} has shape {tuple(array.shape)} but the model needs {want}; "
                    "give the weights saved from this model"
                )
            if t.cls == "Conv2D" and keras_weight == "kernel" and backend == "theano":
                array = array[::-1, ::-1]  # Theano convolves, TensorFlow correlates
            plan.append((t.module, attr, array.transpose(dims) if dims else array))
    return plan


def _materialise(model: nn.Module, targets: list[_Target],
                 plan: list[tuple[nn.Module, str, np.ndarray]]) -> None:
    """Give the meta modules memory and copy the file's weights in."""
    model.to_empty(device="cpu")
    for t in targets:
        # gamma/beta are not in the file when scale/center are off (the builder makes BatchNorm1d/2d)
        if t.cls == "BatchNormalization" and isinstance(t.module, (nn.BatchNorm1d, nn.BatchNorm2d)):
            t.module.reset_parameters()
    with torch.no_grad():
        for module, attr, array in plan:
            getattr(module, attr).copy_(torch.from_numpy(np.ascontiguousarray(array)))


def _check_version(version: str | None, path: Path) -> None:
    """Refuse files written by Keras 1, whose configs and weights are laid out differently."""
    if version is not None and version.split(".")[0] == "1":
        raise DeepFaultError(
            f"{str(path)!r} was written by Keras {version}; load_keras reads Keras 2 files: "
            "load the model in Keras 2 and save it again"
        )


# --------------------------------------------------------------------------- public


def load_keras(path: str | os.PathLike, weights: str | os.PathLike | None = None) -> ModelFile:
    """Import a Keras 2 model as a PyTorch ``nn.Sequential``, without TensorFlow.

    Supported layers: see :func:`list_keras_layers` (Dense, Conv2D, pooling, global
    pooling, Flatten, Reshape, ZeroPadding2D, BatchNormalization, Dropout, activations).
    Sequential models and functional models that form a chain are supported.

    Args:
        path: One of: a full model from ``model.save('m.h5')``; an architecture JSON from
            ``model.to_json()`` (then ``weights`` is needed); or a stem ``dir/name`` for
            which ``dir/name.json`` and ``dir/name.h5`` exist.
        weights: The HDF5 file from ``model.save_weights()``, when ``path`` is a JSON.

    Returns:
        A :class:`ModelFile` with ``arch="keras"``, the model in ``eval()`` mode taking
        inputs in the Keras layout, ``output_kind`` ``"probabilities"`` when the model ends
        in a softmax (else ``"logits"``), and ``meta`` with ``input_shape`` (without the
        batch axis, ``None`` for a free size), ``data_format`` (``None`` when no layer
        depends on it), ``keras_version``, ``backend`` and ``source``.

    Raises:
        DeepFaultError: A missing, unreadable or non-Keras file; a malformed config (wrong
            types, sizes out of range, a functional graph with dangling references or a
            cycle, JSON nested too deeply); an unsupported layer or option; or weights
            whose shapes do not fit the architecture. Nothing else escapes for any file.
        ModuleNotFoundError: h5py is not installed.

    Examples:
        >>> mf = load_keras("mnist_model.h5")  # doctest: +SKIP
        >>> mf.model(torch.zeros(1, 28, 28, 1)).shape  # doctest: +SKIP
        torch.Size([1, 10])
    """
    source = str(path)
    path, weights_path = _stem_files(Path(path), None if weights is None else Path(weights))
    main = _read_model_file(path, weights_path)
    _check_version(main.keras_version, path)
    # the whole config is checked before a (possibly large) weights file is read
    layers, input_shape = _validate_config(main.config, str(path))
    weight_file, layer_weights = _read_weight_file(main, path, weights_path)
    version = main.keras_version or weight_file.keras_version
    _check_version(version, path)

    builder = _build(layers, input_shape, str(path))
    model = nn.Sequential(builder.modules)
    backend = weight_file.backend or main.backend
    plan = _match_weights(builder.targets, layer_weights, str(weights_path or path), backend)
    _materialise(model, builder.targets, plan)
    model.eval()

    meta = _file_meta(input_shape, builder, version=version, backend=backend, source=source,
                      weights_path=weights_path)
    return ModelFile(
        model=model,
        arch="keras",
        arch_kwargs={},
        dataset=None,
        bounds=None,
        output_kind="probabilities" if builder.softmax_out else "logits",
        meta=meta,
    )


def _stem_files(path: Path, weights_path: Path | None) -> tuple[Path, Path | None]:
    """``(model file, weights file)``: a stem ``dir/name`` that is no file stands for
    ``dir/name.json`` with ``dir/name.h5`` (both must exist); otherwise as given.
    """
    if weights_path is not None or path.exists():
        return path, weights_path
    stem_json, stem_h5 = Path(f"{path}.json"), Path(f"{path}.h5")
    if stem_json.is_file() and stem_h5.is_file():
        return stem_json, stem_h5
    if stem_json.is_file() or stem_h5.is_file():
        have, lack = (stem_json, stem_h5) if stem_json.is_file() else (stem_h5, stem_json)
        raise DeepFaultError(
            f"found {str(have)!r} but not {str(lack)!r}; a model stem (--model DIR/NAME on "
            "the command line, load_keras('DIR/NAME') in Python) needs both the architecture "
            "JSON and the weights HDF5"
        )
    return path, weights_path


def _read_model_file(path: Path, weights_path: Path | None) -> _KerasFile:
    """The model file, refused unless it holds a config (and, for a JSON, has its weights)."""
    main = _read(path, "Keras model file")
    if main.config is None and main.weights is None:
        raise DeepFaultError(
            f"{str(path)!r} is an HDF5 file with no Keras model config or weights in it; give "
            "the .h5 file from Keras's model.save(), or the architecture JSON from "
            "model.to_json() with its weights (--weights FILE on the command line, weights= "
            "in Python)"
        )
    if main.config is None:
        raise DeepFaultError(
            f"Keras model file {str(path)!r} has no model_config: it holds weights only, as "
            "written by model.save_weights(); pass the architecture JSON from model.to_json() "
            "as the model and this file as its weights (--model ARCH.json --weights FILE on the "
            "command line, load_keras('ARCH.json', weights=FILE) in Python)"
        )
    if weights_path is None and main.kind == "json":
        raise DeepFaultError(
            f"{str(path)!r} is an architecture JSON without weights; pass weights= in Python or "
            "--weights FILE on the command line, giving the HDF5 file from model.save_weights()"
        )
    return main


def _read_weight_file(
    main: _KerasFile, path: Path, weights_path: Path | None,
) -> tuple[_KerasFile, dict[str, list[tuple[str, np.ndarray]]]]:
    """The file holding the weights (the model file itself without ``weights_path``) and its
    weights, refused when it holds none.
    """
    weight_file = main if weights_path is None else _read(weights_path, "Keras weights file")
    if weight_file.weights is None:
        raise DeepFaultError(
            f"{str(weights_path or path)!r} holds no Keras weights (no 'layer_names' "
            "attribute); give the HDF5 file from model.save(), or the one from "
            "model.save_weights() as the weights (--weights FILE on the command line, weights= "
            "in Python)"
        )
    return weight_file, weight_file.weights


def _file_meta(input_shape, builder: _Builder, *, version, backend, source: str,
               weights_path: Path | None) -> dict[str, object]:
    """What :func:`load_keras` records in the :class:`ModelFile`'s ``meta``."""
    meta: dict[str, object] = {
        "input_shape": list(input_shape),
        "data_format": builder.data_format,
        "keras_version": version,
        "backend": backend,
        "source": source,
    }
    if weights_path is not None:
        meta["weights"] = str(weights_path)
    renamed = {k: v for k, v in builder.names.items() if k != v}
    if renamed:
        meta["renamed_layers"] = renamed
    return meta
