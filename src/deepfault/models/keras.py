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
"""

from __future__ import annotations

import json
import math
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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

_LayerBuilder = Callable[["_Builder", str, dict], None]
_LAYERS: dict[str, _LayerBuilder] = {}


def _layer(*class_names: str):
    """Decorator registering ``build(builder, name, config)`` for Keras classes."""

    def decorate(build: _LayerBuilder) -> _LayerBuilder:
        for cls in class_names:
            if cls in _LAYERS:
                raise RuntimeError(f"Keras layer {cls!r} is registered twice")
            _LAYERS[cls] = build
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
    attribute of ``nn.Sequential`` (torch refuses both)."""
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


@_layer("Dense")
def _dense(b: _Builder, name: str, cfg: dict) -> None:
    b.to_keras(name)
    in_features = b.shape[-1] if b.shape else None
    if not isinstance(in_features, int):
        raise DeepFaultError(
            f"Keras layer {name!r} (Dense) has an input of unknown width {(None, *b.shape)}; "
            "give the model a fixed input shape"
        )
    units = int(cfg["units"])
    b.add(name, nn.Linear(in_features, units, bias=bool(cfg.get("use_bias", True))), "Dense", cfg)
    b.shape = (*b.shape[:-1], units)
    b.activation(name, "Dense", cfg.get("activation"), suffix="act")


@_layer("Conv2D")
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
    if c % groups:
        raise DeepFaultError(
            f"Keras layer {name!r} (Conv2D) gets {c} input channels, which is not a multiple "
            f"of groups={groups}; check the model's input shape"
        )
    symmetric = sh == sw == 1 and (kh - 1) * dh % 2 == 0 and (kw - 1) * dw % 2 == 0
    conv_padding = (0, 0)
    if padding == "same" and symmetric:
        conv_padding = ((kh - 1) * dh // 2, (kw - 1) * dw // 2)
    elif padding == "same":
        b.aux(name, "pad", _SamePad((kh, kw), (sh, sw), (dh, dw)))
    filters = int(cfg["filters"])
    conv = nn.Conv2d(c, filters, (kh, kw), stride=(sh, sw), padding=conv_padding,
                     dilation=(dh, dw), groups=groups, bias=bool(cfg.get("use_bias", True)))
    b.add(name, conv, "Conv2D", cfg)
    b.set_image(filters, _window_out(h, kh, sh, dh, padding), _window_out(w, kw, sw, dw, padding))
    b.activation(name, "Conv2D", cfg.get("activation"), suffix="act")


def _pooling(b: _Builder, name: str, cfg: dict, cls: str, mode: str) -> None:
    c, h, w = b.spatial(name, cls, cfg.get("data_format") or "channels_last")
    kernel = _pair(cfg.get("pool_size", 2), "pool_size")
    stride = _pair(cfg.get("strides") or kernel, "strides")
    padding = cfg.get("padding", "valid")
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


@_layer("MaxPooling2D")
def _max_pooling(b: _Builder, name: str, cfg: dict) -> None:
    _pooling(b, name, cfg, "MaxPooling2D", "max")


@_layer("AveragePooling2D")
def _average_pooling(b: _Builder, name: str, cfg: dict) -> None:
    _pooling(b, name, cfg, "AveragePooling2D", "avg")


def _global_pooling(b: _Builder, name: str, cfg: dict, cls: str, mode: str) -> None:
    c, _, _ = b.spatial(name, cls, cfg.get("data_format") or "channels_last")
    if cfg.get("keepdims", False):
        raise _unsupported(name, cls, "keepdims=True")
    b.add(name, _GlobalPool(mode))
    b.shape, b.nchw = (c,), False


@_layer("GlobalAveragePooling2D")
def _global_average_pooling(b: _Builder, name: str, cfg: dict) -> None:
    _global_pooling(b, name, cfg, "GlobalAveragePooling2D", "avg")


@_layer("GlobalMaxPooling2D")
def _global_max_pooling(b: _Builder, name: str, cfg: dict) -> None:
    _global_pooling(b, name, cfg, "GlobalMaxPooling2D", "max")


@_layer("ZeroPadding2D")
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


@_layer("BatchNormalization")
def _batch_norm(b: _Builder, name: str, cfg: dict) -> None:
    axis = cfg.get("axis", -1)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise _unsupported(name, "BatchNormalization", f"axis={axis} (several axes)")
        axis = axis[0]
    if cfg.get("renorm"):
        raise _unsupported(name, "BatchNormalization", "renorm=True")
    ndim = len(b.shape) + 1
    axis = int(axis) + ndim if int(axis) < 0 else int(axis)
    eps = float(cfg.get("epsilon", 1e-3))
    if ndim == 2 and axis == 1:
        module: nn.Module = nn.BatchNorm1d(b.shape[0], eps=eps)
    elif ndim == 4 and axis in (1, 3):
        fmt = "channels_first" if axis == 1 else "channels_last"
        c, _, _ = b.spatial(name, "BatchNormalization", fmt)
        module = nn.BatchNorm2d(c, eps=eps)
    else:
        raise _unsupported(
            name, "BatchNormalization",
            f"axis={cfg.get('axis')} on an input of shape {(None, *b.shape)} (supported: the "
            "last axis of a 2-D input, the channel axis of an image)",
        )
    b.add(name, module, "BatchNormalization", cfg)


@_layer("Flatten")
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


@_layer("Reshape")
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


@_layer("Activation")
def _activation(b: _Builder, name: str, cfg: dict) -> None:
    b.activation(name, "Activation", cfg["activation"], suffix=None)


@_layer("Softmax")
def _softmax(b: _Builder, name: str, cfg: dict) -> None:
    axis = cfg.get("axis", -1)
    if isinstance(axis, (list, tuple)):
        if len(axis) != 1:
            raise _unsupported(name, "Softmax", f"axis={axis} (several axes)")
        axis = axis[0]
    b.add(name, nn.Softmax(dim=b.torch_dim(int(axis))))
    b.softmax_out = int(axis) == -1 or int(axis) == len(b.shape)


@_layer("LeakyReLU")
def _leaky_relu(b: _Builder, name: str, cfg: dict) -> None:
    slope = cfg.get("alpha", cfg.get("negative_slope", 0.3))
    b.add(name, nn.LeakyReLU(float(slope)))


@_layer("ReLU")
def _relu(b: _Builder, name: str, cfg: dict) -> None:
    max_value = cfg.get("max_value")
    slope = float(cfg.get("negative_slope") or 0.0)
    if float(cfg.get("threshold") or 0.0) != 0.0:
        raise _unsupported(name, "ReLU", f"threshold={cfg['threshold']}")
    if max_value is not None and slope != 0.0:
        raise _unsupported(name, "ReLU", "max_value together with negative_slope")
    if max_value is not None:
        b.add(name, nn.Hardtanh(0.0, float(max_value)))
    elif slope != 0.0:
        b.add(name, nn.LeakyReLU(slope))
    else:
        b.add(name, nn.ReLU())


@_layer("ELU")
def _elu(b: _Builder, name: str, cfg: dict) -> None:
    b.add(name, nn.ELU(float(cfg.get("alpha", 1.0))))


@_layer("Dropout")
def _dropout(b: _Builder, name: str, cfg: dict) -> None:
    b.add(name, nn.Dropout(float(cfg.get("rate", 0.0))))


@_layer("InputLayer")
def _input_layer(b: _Builder, name: str, cfg: dict) -> None:
    raise DeepFaultError(
        f"Keras layer {name!r} (InputLayer) is not the first layer; load_keras imports "
        "models with one input only"
    )


# --------------------------------------------------------------------------- config


def _model_layers(config: dict, source: str) -> tuple[list[tuple[str, str, dict]], tuple]:
    """The layers ``(name, class, config)`` in order, and the input shape without batch."""
    if not isinstance(config, dict) or "class_name" not in config:
        raise DeepFaultError(
            f"{source!r} does not hold a Keras model config (no 'class_name'); give the "
            "file written by model.save() or model.to_json()"
        )
    cls, inner = config["class_name"], config.get("config")
    if cls == "Sequential":
        items = inner if isinstance(inner, list) else (inner or {}).get("layers", [])
        layers = [(_layer_name(item), item["class_name"], item.get("config") or {})
                  for item in items]
    elif cls in ("Model", "Functional"):
        layers = _chain(inner or {}, source)
    else:
        raise DeepFaultError(
            f"{source!r} holds a Keras {cls!r} model; load_keras imports Sequential models "
            "and functional models that form a chain"
        )
    if not layers:
        raise DeepFaultError(f"the Keras model in {source!r} has no layers")
    first_cls, first_cfg = layers[0][1], layers[0][2]
    shape = first_cfg.get("batch_input_shape", first_cfg.get("batch_shape"))
    if first_cls == "InputLayer":
        layers = layers[1:]
    if shape is None:
        raise DeepFaultError(
            f"the Keras model in {source!r} records no input shape; build it with "
            "input_shape=... (or an Input layer) before saving"
        )
    return layers, tuple(None if n is None else int(n) for n in list(shape)[1:])


def _layer_name(item: dict) -> str:
    name = item.get("name") or (item.get("config") or {}).get("name")
    if not isinstance(name, str):
        raise DeepFaultError(f"a Keras layer config has no name: {json.dumps(item)[:200]}")
    return name


def _chain(inner: dict, source: str) -> list[tuple[str, str, dict]]:
    """The layers of a functional model that is a chain, from its input to its output."""
    layers = {_layer_name(item): item for item in inner.get("layers", [])}

    def not_a_chain(why: str) -> DeepFaultError:
        return DeepFaultError(
            f"the functional Keras model in {source!r} is not a chain ({why}); load_keras "
            "imports functional models only when each layer takes its one input from the "
            "layer before"
        )

    # tf.keras 2 writes a single input or output as ["name", 0, 0] rather than a list of them
    inputs, outputs = (
        [ends] if ends and isinstance(ends[0], str) else ends
        for ends in (inner.get("input_layers", []), inner.get("output_layers", []))
    )
    if len(inputs) != 1 or len(outputs) != 1:
        raise not_a_chain(f"{len(inputs)} inputs and {len(outputs)} outputs")
    child: dict[str, str] = {}
    for name, item in layers.items():
        nodes = item.get("inbound_nodes") or []
        if item.get("class_name") == "InputLayer":
            continue
        if len(nodes) != 1:
            raise not_a_chain(f"layer {name!r} is called {len(nodes)} times")
        node = nodes[0]
        if not isinstance(node, list) or len(node) != 1 or not isinstance(node[0], list):
            count = len(node) if isinstance(node, list) else "an unreadable number of"
            raise not_a_chain(f"layer {name!r} takes {count} inputs")
        parent, node_index, tensor_index = node[0][0], node[0][1], node[0][2]
        if parent in child or node_index != 0 or tensor_index != 0:
            raise not_a_chain(f"layer {parent!r} feeds more than one layer")
        child[parent] = name
    order, name = [], inputs[0][0]
    while name is not None:
        if name not in layers:
            raise not_a_chain(f"layer {name!r} is used but not defined")
        order.append(name)
        name = child.get(name)
    if order[-1] != outputs[0][0] or len(order) != len(layers):
        raise not_a_chain("some layers are not on the path from the input to the output")
    return [(n, layers[n]["class_name"], layers[n].get("config") or {}) for n in order]


def _build(layers: list[tuple[str, str, dict]], input_shape: tuple, source: str) -> _Builder:
    """The torch modules of all layers, in a builder that also lists the weight targets."""
    b = _Builder(input_shape, [name for name, _, _ in layers])
    for name, cls, cfg in layers:
        build = _LAYERS.get(_ALIASES.get(cls, cls))
        if build is None:
            raise DeepFaultError(
                f"Keras layer {name!r} in {source!r} is a {cls}, which load_keras does not "
                f"support; supported layers: {', '.join(list_keras_layers())}"
            )
        softmax_out, b.softmax_out = b.softmax_out, False
        try:
            build(b, name, cfg)
        except DeepFaultError:
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise DeepFaultError(
                f"Keras layer {name!r} ({cls}) in {source!r} has a config that load_keras "
                f"cannot read ({type(err).__name__}: {err}); check that the file is a Keras 2 "
                "model"
            ) from err
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


def _parse_json(text: str, source: str, what: str) -> dict:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise DeepFaultError(
            f"the {what} of {source!r} is not valid JSON ({err}); save the model again"
        ) from err
    if not isinstance(config, dict):
        raise DeepFaultError(f"the {what} of {source!r} is not a Keras model config")
    return config


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
        try:
            config = json.loads(text)
        except json.JSONDecodeError as err:
            raise DeepFaultError(
                f"{role} {str(path)!r} is neither HDF5 nor JSON ({err}); give the .h5 file "
                "from model.save() or the .json file from model.to_json()"
            ) from err
        if not isinstance(config, dict):
            raise DeepFaultError(f"{role} {str(path)!r} is JSON but not a Keras model config")
        version, backend = config.get("keras_version"), config.get("backend")
        return _KerasFile("json", config, version, backend, None)
    return _read_hdf5(path, role)


def _read_hdf5(path: Path, role: str) -> _KerasFile:
    try:
        import h5py
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError(
            "reading Keras files needs h5py: pip install 'deepfault[keras]'"
        ) from err
    source = str(path)
    try:
        with h5py.File(path, "r") as f:
            config = None
            if "model_config" in f.attrs:
                config = _parse_json(_text(f.attrs["model_config"]), source, "model_config")
            group = f["model_weights"] if "model_weights" in f else f
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
    except OSError as err:
        detail = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DeepFaultError(
            f"{role} {source!r} cannot be read as HDF5 ({detail}); it may be truncated or "
            "corrupt: copy or save it again"
        ) from err


# --------------------------------------------------------------------------- weights


def _short(weight_name: str) -> str:
    """``'dense_1/kernel:0'`` -> ``'kernel'``."""
    return weight_name.rsplit("/", 1)[-1].split(":", 1)[0]


def _load_weights(targets: list[_Target], weights: dict[str, list[tuple[str, np.ndarray]]],
                  source: str, backend: str | None) -> None:
    """Copy the file's arrays into the modules, checking every shape (``_WEIGHT_RULES``)."""
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
            tensor = torch.from_numpy(np.ascontiguousarray(array.transpose(dims) if dims else array))
            with torch.no_grad():
                target.copy_(tensor)


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
        DeepFaultError: A missing, unreadable or non-Keras file, an unsupported layer or
            option, or weights whose shapes do not fit the architecture.
        ModuleNotFoundError: h5py is not installed.

    Example:
        >>> mf = load_keras("mnist_model.h5")  # doctest: +SKIP
        >>> mf.model(torch.zeros(1, 28, 28, 1)).shape  # doctest: +SKIP
        torch.Size([1, 10])
    """
    source = str(path)
    path = Path(path)
    weights_path = None if weights is None else Path(weights)
    if weights_path is None and not path.exists():
        stem_json, stem_h5 = Path(f"{path}.json"), Path(f"{path}.h5")
        if stem_json.is_file() and stem_h5.is_file():
            path, weights_path = stem_json, stem_h5
        elif stem_json.is_file() or stem_h5.is_file():
            have, lack = (stem_json, stem_h5) if stem_json.is_file() else (stem_h5, stem_json)
            raise DeepFaultError(
                f"found {str(have)!r} but not {str(lack)!r}; a model stem needs both the "
                "architecture JSON and the weights HDF5"
            )

    main = _read(path, "Keras model file")
    if main.config is None:
        raise DeepFaultError(
            f"Keras model file {str(path)!r} has no model_config (it holds weights only, as "
            "written by model.save_weights()); pass the architecture JSON from "
            "model.to_json() as path and this file as weights"
        )
    if weights_path is None and main.kind == "json":
        raise DeepFaultError(
            f"{str(path)!r} is an architecture JSON without weights; pass weights= (the HDF5 "
            "file from model.save_weights())"
        )
    weight_file = main if weights_path is None else _read(weights_path, "Keras weights file")
    if weight_file.weights is None:
        raise DeepFaultError(
            f"{str(weights_path or path)!r} holds no Keras weights (no 'layer_names' "
            "attribute); give the HDF5 file from model.save() or model.save_weights()"
        )
    version = main.keras_version or weight_file.keras_version
    if version is not None and version.split(".")[0] == "1":
        raise DeepFaultError(
            f"{str(path)!r} was written by Keras {version}; load_keras reads Keras 2 files: "
            "load the model in Keras 2 and save it again"
        )

    layers, input_shape = _model_layers(main.config, str(path))
    builder = _build(layers, input_shape, str(path))
    model = nn.Sequential(builder.modules)
    backend = weight_file.backend or main.backend
    _load_weights(builder.targets, weight_file.weights, str(weights_path or path), backend)
    model.eval()

    meta = {
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
    return ModelFile(
        model=model,
        arch="keras",
        arch_kwargs={},
        dataset=None,
        bounds=None,
        output_kind="probabilities" if builder.softmax_out else "logits",
        meta=meta,
    )
