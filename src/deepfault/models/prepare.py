"""One route from a model (file, :class:`ModelFile`, module) and a data set to a prepared model.

Every command and every public function that runs a model on data goes through
:func:`prepare_model`, so a mismatch is refused (or repaired, where that is safe) the same
way everywhere, and every method then works in one tensor layout:

- **Layout.** The data stays in the data set's native layout (channels first, ``(N, C, H,
  W)``, for images). A model that takes another layout (a Keras model's channels-last
  ``(N, H, W, C)``, ``(N, H, W)``, or flat inputs in channels-first or, after a Keras
  ``Flatten``, channels-last element order) is adapted once, here, by an
  :class:`InputAdapter` that converts a batch on the way in. The adapter shares the
  module's layers, so ``named_modules()`` names (``--layers``), the ``state_dict`` and
  the fingerprint are the module's own, and the caller's module is not modified. Mutation
  rules, constraints and figures therefore never see the file's layout.
- **Range.** A model trained on ``[0, 1]`` inputs gets a 0-255 data set scaled to
  ``[0, 1]``; any other difference between the model's bounds and the data's is an error
  (a 0-255 model on 0-1 data would run at chance accuracy without a word).
- **Output kind.** ``"logits"`` or ``"probabilities"``, from the file, the keyword, or
  (for a bare module) whether it ends in an ``nn.Softmax``. A model that ends in a
  softmax that can be split off (the last leaf of a chain of ``nn.Sequential``, as the
  Keras importer builds a ``Dense(..., activation='softmax')``) also gets a ``logits``
  module sharing its weights; one whose softmax cannot be split off has none and says why.
- **Fingerprint.** One :func:`~deepfault.models.fingerprint.fingerprint` of the weights.

Examples:
    >>> from deepfault.models.prepare import prepare_model
    >>> pm = prepare_model("lenet5.h5", "mnist")  # doctest: +SKIP
    >>> pm.module(torch.as_tensor(pm.data.x_test[:4])).shape  # NCHW in  # doctest: +SKIP
    torch.Size([4, 10])
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TypedDict, Unpack

import numpy as np
import torch
from torch import nn

from ..checks import check_bounds
from ..core.capture import check_model
from ..core.kinds import OUTPUT_KINDS
from ..core.outputs import TRANSPARENT_LEAVES as _TRANSPARENT
from ..core.outputs import ends_in_softmax
from ..core.outputs import last_leaf as _last_leaf
from ..data import DATASETS, Dataset, load_dataset
from ..data.bounds import in_model_range
from ..errors import DeepFaultError
from .fingerprint import fingerprint
from .io import ModelFile

__all__ = [
    "InputAdapter",
    "LAYOUTS",
    "PreparedModel",
    "prepare_model",
    "PrepareOptions",
    "PrepareKeywords",
    "resolve_model",
    "model_label",
    "layout_name",
    "native_shape",
]

log = logging.getLogger(__name__)

#: Input layout a model takes -> how a native batch (``(N, C, H, W)`` for images) becomes it.
#: ``flat-NHWC`` is the element order of a Keras ``Flatten`` over channels-last images.
LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "NHWC": lambda x: x.permute(0, 2, 3, 1),
    "NHW": lambda x: x[:, 0],
    "flat": lambda x: x.flatten(1),
    "flat-NHWC": lambda x: x.permute(0, 2, 3, 1).flatten(1),
}



class InputAdapter(nn.Module):
    """A module that converts a native-layout batch to the layout ``module`` takes, then runs it.

    The adapter holds no layers of its own: it shares ``module``'s registries of child
    modules, parameters and buffers, so ``named_modules()`` (minus the root), ``state_dict()``
    and :func:`~deepfault.models.fingerprint.fingerprint` are those of ``module``, and
    hooks on its layers fire. ``module`` itself is not modified (``.to()``/``.train()`` on the
    adapter move and switch the shared layers, as they would on ``module``).

    Args:
        module: The network, taking inputs in ``layout``.
        layout: A key of :data:`LAYOUTS`.
    """

    inner: nn.Module  # set in __init__, outside nn.Module's registries

    def __init__(self, module: nn.Module, layout: str):
        if layout not in LAYOUTS:
            raise ValueError(f"unknown input layout {layout!r}; known: {', '.join(LAYOUTS)}")
        super().__init__()
        for registry in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            self.__dict__[registry] = getattr(module, registry)
        self.__dict__["inner"] = module
        self.layout = layout
        self.training = module.training

    def forward(self, x: torch.Tensor, *args, **kwargs):
        return self.inner(LAYOUTS[self.layout](x), *args, **kwargs)

    def train(self, mode: bool = True) -> InputAdapter:
        self.inner.training = mode  # a custom forward may read its own flag
        return super().train(mode)

    def extra_repr(self) -> str:
        return f"layout={self.layout!r}, inner={type(self.inner).__name__}"


@dataclass(frozen=True, eq=False)
class PreparedModel:
    """A model ready for every method: native-layout inputs, known range, output kind and weights.

    Attributes:
        module: The network taking ``(N, *input_shape)`` batches in the data set's native
            layout (an :class:`InputAdapter` when the file takes another layout).
        name: How results name the model (the file name, the architecture, or ``name=``).
        fingerprint: :func:`~deepfault.models.fingerprint.fingerprint` of the weights.
        output_kind: ``"logits"`` or ``"probabilities"``.
        logits: A module (same input as ``module``, sharing its weights) returning logits:
            ``module`` itself for a logits model, the model without its final softmax for a
            separable probability model, else ``None`` (see :meth:`logits_module`).
        input_shape: Per-input shape ``module`` takes (native layout; ``None`` when unknown).
        layout: Name of the layout the file's module takes (``NCHW``, ``NHWC``, ``flat``,
            ..., for the record).
        adapter: The conversion applied (a key of :data:`LAYOUTS`), ``None`` for none.
        file_input_shape: Per-input shape the file's module takes, as recorded.
        bounds: ``(lo, hi)`` valid input range (``None`` when neither model nor data says).
        num_classes: Number of classes (``None`` when unknown).
        data: The data set in the model's range, native layout (``None`` when none was given).
        model_file: The opened :class:`ModelFile` (``None`` for a caller's module).
        no_logits: Why ``logits`` is ``None`` (``None`` when it is set).
    """

    module: nn.Module
    name: str
    fingerprint: str
    output_kind: str
    logits: nn.Module | None
    input_shape: tuple[int | None, ...] | None
    layout: str
    adapter: str | None
    file_input_shape: tuple[int | None, ...] | None
    bounds: tuple[float, float] | None
    num_classes: int | None
    data: Dataset | None = None
    model_file: ModelFile | None = None
    no_logits: str | None = None

    @property
    def model(self) -> nn.Module:
        """Alias of :attr:`module`."""
        return self.module

    @property
    def arch(self) -> str:
        return self.model_file.arch if self.model_file is not None else type(self._inner()).__name__

    def _inner(self) -> nn.Module:
        return self.module.inner if isinstance(self.module, InputAdapter) else self.module

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)

    def to(self, device: torch.device | str) -> PreparedModel:
        """Move the weights (shared by ``module`` and ``logits``) to ``device``; returns ``self``."""
        self.module.to(device)
        if self.logits is not None:
            self.logits.to(device)
        return self

    def logits_module(self) -> nn.Module:
        """The module returning logits.

        Raises:
            DeepFaultError: The model returns probabilities and its softmax cannot be split
                off (the message says why).
        """
        if self.logits is None:
            raise DeepFaultError(
                f"model {self.name!r} outputs probabilities and its logits are not available: "
                f"{self.no_logits}; use its probabilities (--objective probabilities), or pass a "
                "module that returns logits"
            )
        return self.logits

    def to_dict(self) -> dict:
        """What results record about the model."""
        return {"name": self.name, "arch": self.arch, "fingerprint": self.fingerprint,
                "output_kind": self.output_kind, "logits_available": self.logits is not None,
                "input_shape": None if self.input_shape is None else list(self.input_shape),
                "layout": self.layout, "adapter": self.adapter,
                "file_input_shape": None if self.file_input_shape is None else list(self.file_input_shape),
                "bounds": None if self.bounds is None else list(self.bounds), "num_classes": self.num_classes}


# --------------------------------------------------------------------------- helpers


def layout_name(shape) -> str:
    """A short name for a per-input shape: ``NCHW``, ``NHWC``, ``flat`` or ``NxM``."""
    shape = tuple(shape)
    if len(shape) == 1:
        return "flat"
    if len(shape) == 3:
        if shape[0] in (1, 3) and shape[2] not in (1, 3):
            return "NCHW"
        if shape[2] in (1, 3) and shape[0] not in (1, 3):
            return "NHWC"
    return "x".join(str(s) for s in shape)


def model_label(path: str | os.PathLike | None, mf: ModelFile) -> str:
    """The model's name in headers and results: its file name, else its architecture."""
    return Path(path).name if path else mf.arch


def _without_softmax(model: nn.Module) -> nn.Module | None:
    """``model`` minus its final ``nn.Softmax``, sharing its layers and names; ``None`` when the
    softmax is not the last step of a chain of ``nn.Sequential`` (then a custom ``forward`` may
    do anything after it).
    """
    if not isinstance(model, nn.Sequential):
        return None
    items = list(model.named_children())
    while items and isinstance(items[-1][1], _TRANSPARENT):
        items.pop()
    if not items:
        return None
    name, last = items[-1]
    if isinstance(last, nn.Softmax):
        return nn.Sequential(OrderedDict(items[:-1])).train(model.training)
    inner = _without_softmax(last)
    if inner is None:
        return None
    return nn.Sequential(OrderedDict([*items[:-1], (name, inner)])).train(model.training)


def _split_logits(module: nn.Module) -> tuple[nn.Module | None, str | None]:
    """The logits module of a probability model, or ``(None, why not)``."""
    last = _last_leaf(module)
    if not isinstance(last, nn.Softmax):
        return None, ("its last layer is not an nn.Softmax (a softmax inside forward() cannot be split "
                      "off)" if last is not None else "it has no layers")
    if last.dim not in (None, 1, -1):
        return None, f"its final softmax is over dim {last.dim}, not the class dimension"
    head = _without_softmax(module)
    if head is None:
        return None, ("its final nn.Softmax is called from a custom forward(), so what runs after it "
                      "is unknown")
    return head, None


def _fits(want: Sequence, have: Sequence) -> bool:
    return len(want) == len(have) and all(w in (None, h) for w, h in zip(want, have, strict=True))


def _conversion(native: tuple, want: tuple, *, keras: bool, what: str) -> str | None:
    """The :data:`LAYOUTS` key turning native inputs into ``want`` (``None``: they fit)."""
    if _fits(want, native):
        return None
    candidates: list[tuple[tuple[int, ...], str]] = []
    flat = "flat"
    if len(native) == 3:
        c, h, w = native
        candidates.append(((h, w, c), "NHWC"))
        if c == 1:
            candidates.append(((h, w), "NHW"))
        flat = "flat-NHWC" if keras else "flat"
    candidates.append(((math.prod(native),), flat))
    for target, key in candidates:
        if _fits(want, target):
            return key
    raise DeepFaultError(
        f"{what} has inputs of shape {native} but the model takes {want}; use a data set of that "
        "shape or a model made for this one"
    )


def _native_of(shape: tuple, layout: str | None) -> tuple | None:
    """The native per-input shape of a model input ``shape`` in ``layout`` (``None``: unknown)."""
    if layout is None:
        return shape
    if layout == "NHWC" and len(shape) == 3:
        return (shape[2], shape[0], shape[1])
    if layout == "NHW" and len(shape) == 2:
        return (1, *shape)
    return None


def native_shape(shape: Sequence[int | None], *, channels_last: bool = False) -> tuple[int | None, ...]:
    """The native (channels-first) per-input shape of a model input ``shape``: an
    ``(H, W, C)`` image shape (by :func:`layout_name`, or any 3-D shape when
    ``channels_last``, as a Keras file records) becomes ``(C, H, W)``; others stay.
    """
    shape = tuple(shape)
    if len(shape) == 3 and (channels_last or layout_name(shape) == "NHWC"):
        return (shape[2], shape[0], shape[1])
    return shape


def _source(data: Dataset | str) -> str:
    return data if isinstance(data, str) else str(data.meta.get("source", data.name))


def _is_user_file(source: str, trained_on: str | None) -> bool:
    return str(source).lower().endswith(".npz") or str(trained_on or "").lower().endswith(".npz")


def _in_range(bounds, data: Dataset, source: str, *, trained_on: str | None, data_dir, what: str) -> Dataset:
    """``data`` in the model's value range: 0-255 scaled to [0, 1] where safe, else an error.

    Bounds inferred from the data (:mod:`deepfault.data.bounds`) must lie inside the model's
    recorded range (the data then takes the model's bounds); outside it, the error names the
    likely fix.
    """
    if bounds is None or tuple(bounds) == tuple(data.bounds):
        return data
    if data.meta.get("bounds_inferred"):
        return in_model_range(data, bounds, what=what)
    user_file = _is_user_file(source, trained_on)
    if tuple(bounds) == (0.0, 1.0) and tuple(data.bounds) == (0.0, 255.0) and not user_file:
        if source in DATASETS:
            return load_dataset(source, data_dir=data_dir, scale01=True)
        return replace(data, x_train=data.x_train / np.float32(255.0), x_test=data.x_test / np.float32(255.0),
                       bounds=(0.0, 1.0), meta={**data.meta, "scale01": True})
    raise DeepFaultError(
        f"{what} was trained on inputs in {tuple(bounds)} but data set {data.name!r} gives "
        f"{tuple(data.bounds)}; use the data set (and scaling) the model was trained on"
    )


def _check_trained_on(trained_on: str | None, data: Dataset, source: str, what: str) -> None:
    if trained_on and trained_on != data.name and not _is_user_file(source, trained_on):
        log.warning("%s was trained on %s, not %s; failures may come from the data shift",
                    what, trained_on, data.name)


def _probe_classes(module: nn.Module, shape: tuple | None) -> int | None:
    if shape is None or None in shape:
        return None
    from ..core.capture import eval_mode, model_device

    try:
        with torch.inference_mode(), eval_mode(module):
            out = module(torch.zeros(1, *shape, device=model_device(module)))
    except Exception:  # the caller's data will say what is wrong, with a better message
        return None
    return int(out.shape[1]) if isinstance(out, torch.Tensor) and out.ndim == 2 else None


def _kind_unrecorded(mf: ModelFile) -> bool:
    """Whether the file's format does not record what the model outputs (TorchScript, a pickled
    module: then a final ``nn.Softmax`` says it, as for a caller's module).
    """
    return mf.arch == "torchscript" or bool(mf.meta.get("pickled"))


def _checked_outputs(module: nn.Module, dataset: Dataset | None, native: tuple | None, stated: int | None,
                     kind: str, what: str) -> tuple[int | None, Dataset | None]:
    """The class count, after :func:`~deepfault.core.outputs.check_model_outputs` on the data's
    first inputs (zeros without data), and the data set (an ``.npz`` whose classes are only
    the labels seen gets the model's wider class count).
    """
    from ..core.outputs import SAMPLE, check_model_outputs

    if kind not in OUTPUT_KINDS:  # a GAN generator's images: no class scores to check
        return stated, dataset
    if dataset is not None:
        pool = dataset.x_test if len(dataset.x_test) else dataset.x_train
        x = torch.as_tensor(pool[:SAMPLE]) if len(pool) else None
    else:
        x = None
    if x is None:  # no data: zeros of the model's shape, where it takes them (else nothing to check)
        if _probe_classes(module, native) is None or native is None:
            return stated, dataset
        x = torch.zeros(2, *(int(d) for d in native if d is not None))
    known = stated is not None or dataset is None or bool(dataset.meta.get("class_names_given", True))
    expected = stated if stated is not None else (dataset.num_classes if dataset is not None else None)
    width = check_model_outputs(module, x, num_classes=expected, classes_known=known, output_kind=kind,
                                what=f"model {what!r}",
                                data=f"data set {dataset.name!r}" if dataset is not None and stated is None
                                else "num_classes")
    if dataset is not None and stated is None and width > dataset.num_classes:
        names = (*dataset.class_names, *(str(c) for c in range(dataset.num_classes, width)))
        dataset = replace(dataset, class_names=names)
    return (stated if stated is not None else width), dataset


# --------------------------------------------------------------------------- the one route


def prepare_model(
    model: str | os.PathLike | ModelFile | nn.Module | PreparedModel | None,
    data: Dataset | str | None = None,
    *,
    data_dir: str | os.PathLike | None = None,
    name: str | None = None,
    options: PrepareOptions | None = None,
    **keywords: Unpack[PrepareKeywords],
) -> PreparedModel:
    """Turn a model and a data set into a :class:`PreparedModel` (see the module's docstring).

    Args:
        model: A model file path (any format :func:`~deepfault.models.open_model` opens), a
            :class:`ModelFile`, a caller's ``nn.Module`` (never modified), a
            :class:`PreparedModel` (returned as it is, or re-prepared for ``data``), or
            ``None`` for the embedded digits model.
        data: A :class:`Dataset`, a data set name or ``.npz`` path, or ``None`` for the one
            the model file names (no data when it names none).
        data_dir: Data root.
        name: The model's name in results (default: the file name or architecture).
        options: What the caller states about the model (how to open its file, its layout,
            range, output kind, ...) instead of letting the file, the module and the data say it.
        **keywords: :class:`PrepareOptions`'s fields one by one, the older form, which keeps
            working (``prepare_model(path, "mnist", arch="lenet5")``); each replaces that
            field of ``options``.

    Returns:
        The :class:`PreparedModel`.

    Raises:
        DeepFaultError: Unreadable files, a data range or shape the model cannot take, or an
            unknown layout or output kind.
        TypeError: A keyword that is no field of :class:`PrepareOptions`.

    Examples:
        >>> pm = prepare_model("weights.pt", "mnist", options=PrepareOptions(arch="lenet5"))  # doctest: +SKIP
    """
    options = replace(options or PrepareOptions(), **keywords)
    if isinstance(model, PreparedModel):
        return _prepare_again(model, data, data_dir=data_dir, name=name, options=options)
    options.check()
    mf, module, label = _open(model, data, data_dir=data_dir, options=options)
    check_model(module)
    what = name or label
    kind = _output_kind(options, mf, module)
    trained_bounds = _trained_bounds(options, mf)
    dataset = _data_for(mf, data, trained_bounds, data_dir=data_dir, what=what)
    layout = _input_layout(options, mf, dataset)
    head, no_logits = _logits_head(module, kind, options.logits, mf, what)
    wrapped, wrapped_logits = _adapted(module, head, layout.adapter)
    classes, dataset = _checked_outputs(wrapped, dataset, layout.native, options.num_classes, kind, what)
    final_bounds = _pair(dataset.bounds) if dataset is not None else trained_bounds
    return PreparedModel(
        module=wrapped, name=what, fingerprint=fingerprint(module), output_kind=kind, logits=wrapped_logits,
        input_shape=layout.native, layout=layout.name, adapter=layout.adapter,
        file_input_shape=layout.file_shape,
        bounds=final_bounds, num_classes=classes, data=dataset, model_file=mf, no_logits=no_logits,
    )


class PrepareKeywords(TypedDict, total=False):
    """:class:`PrepareOptions`'s fields as :func:`prepare_model`'s keywords (the older form)."""

    weights: str | os.PathLike | None
    arch: str | None
    arch_kwargs: dict | None
    trust_pickle: bool
    input_layout: str | None
    input_shape: Sequence[int | None] | None
    bounds: Sequence[float] | None
    output_kind: str | None
    num_classes: int | None
    logits: nn.Module | None


#: The fields that open a model file (they do not apply to a module or a prepared model).
_OPENING = ("weights", "arch", "arch_kwargs", "trust_pickle")


@dataclass(frozen=True)
class PrepareOptions:
    """What a caller states about a model instead of letting :func:`prepare_model` work it out
    from the file, the module and the data (``None``: work it out).

    Attributes:
        input_layout: The layout the module takes, a key of :data:`LAYOUTS` or ``"NCHW"``
            (native); default: worked out from ``input_shape`` against the data's shape.
        input_shape: Per-input shape the module takes, in its own layout (default: what the
            file records; for a module, the data's shape).
        bounds: Valid input range the model was trained on (default: the file's).
        output_kind: ``"logits"`` or ``"probabilities"`` (default: the file's; for a module,
            ``"probabilities"`` when it ends in an ``nn.Softmax``, else ``"logits"``).
        num_classes: Class count (default: the data's, else the module's output width).
        logits: A module returning the logits of a probability model (same inputs).
        weights: The Keras weights HDF5 when the model is an architecture JSON (files only).
        arch: Architecture of a plain ``state_dict`` or ``.safetensors`` file (files only): a zoo
            name, ``file.py:Class``, ``module:factory``, ``torchvision:NAME`` or ``timm:NAME``.
        arch_kwargs: Its keyword arguments.
        trust_pickle: Allow unpickling a whole pickled ``nn.Module`` (files only); only for
            files you trust: unpickling can run arbitrary code.
    """

    input_layout: str | None = None
    input_shape: Sequence[int | None] | None = None
    bounds: Sequence[float] | None = None
    output_kind: str | None = None
    num_classes: int | None = None
    logits: nn.Module | None = None
    weights: str | os.PathLike | None = None
    arch: str | None = None
    arch_kwargs: dict | None = None
    trust_pickle: bool = False

    def stated(self) -> list[str]:
        """The names of the fields given about the model itself (not those that open its file)."""
        return [f.name for f in fields(self) if f.name not in _OPENING and getattr(self, f.name) is not None]

    def check(self) -> None:
        """Raise :class:`DeepFaultError` for an unknown output kind or input layout."""
        if self.output_kind is not None and self.output_kind not in OUTPUT_KINDS:
            raise DeepFaultError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}; "
                                 f"got {self.output_kind!r}")
        if self.input_layout is not None and self.input_layout not in (*LAYOUTS, "NCHW"):
            raise DeepFaultError(f"input_layout must be one of NCHW, {', '.join(LAYOUTS)}; "
                                 f"got {self.input_layout!r}")


@dataclass(frozen=True)
class _Layout:
    """How the module takes its inputs: the adapter from the native layout (``None``: none),
    the native per-input shape, the layout's name and the shape the file records.
    """

    adapter: str | None
    native: tuple[int | None, ...] | None
    name: str
    file_shape: tuple[int | None, ...] | None


def _prepare_again(model: PreparedModel, data: Dataset | str | None, *, data_dir: str | os.PathLike | None,
                   name: str | None, options: PrepareOptions) -> PreparedModel:
    """A prepared model as it is (renamed), or prepared again for other data."""
    if options.stated():
        raise DeepFaultError(f"model is already prepared; {', '.join(options.stated())} cannot change it "
                             "(prepare the module again instead)")
    if data is None or data is model.data:
        return model if name is None else replace(model, name=name)
    base: ModelFile | nn.Module = model.model_file if model.model_file is not None else model._inner()
    stated = PrepareOptions(output_kind=model.output_kind, bounds=model.bounds,
                            input_shape=model.file_input_shape, input_layout=model.adapter or "NCHW",
                            logits=None if model.model_file is not None else _logits_inner(model))
    return prepare_model(base, data, data_dir=data_dir, name=name or model.name, options=stated)


def _output_kind(options: PrepareOptions, mf: ModelFile | None, module: nn.Module) -> str:
    """The caller's output kind, else the file's (where its format records one), else whether
    the module ends in an ``nn.Softmax``.
    """
    structural = "probabilities" if isinstance(_last_leaf(module), nn.Softmax) else "logits"
    recorded = mf.output_kind if mf is not None and not _kind_unrecorded(mf) else None
    return options.output_kind or recorded or structural


def _adapted(module: nn.Module, head: nn.Module | None,
             adapter: str | None) -> tuple[nn.Module, nn.Module | None]:
    """``module`` and its logits ``head`` taking native inputs (through ``adapter``); a head
    that is the module itself stays the same object.
    """
    wrapped = module if adapter is None else InputAdapter(module, adapter)
    if head is None or head is module:
        return wrapped, None if head is None else wrapped
    return wrapped, head if adapter is None else InputAdapter(head, adapter)


def _trained_bounds(options: PrepareOptions, mf: ModelFile | None) -> tuple[float, float] | None:
    """The input range the model was trained on: the caller's, else the file's."""
    if options.bounds is not None:
        return check_bounds(options.bounds, "bounds")
    if mf is not None and mf.bounds is not None:
        lo, hi = mf.bounds
        return lo, hi
    return None


def _data_for(mf: ModelFile | None, data: Dataset | str | None, trained_bounds: tuple[float, float] | None, *,
              data_dir: str | os.PathLike | None, what: str) -> Dataset | None:
    """The data (the caller's, else the one the file names) in the model's range."""
    if data is None and mf is not None and mf.dataset is not None:
        data = mf.dataset
    if data is None:
        return None
    source = _source(data)
    if isinstance(data, str) and mf is not None and data == mf.dataset:
        from ..data._api import usable_recorded_dir

        data_dir = usable_recorded_dir(data_dir, mf.meta.get("data_dir"))
    dataset = load_dataset(data, data_dir=data_dir) if isinstance(data, str) else data
    trained_on = mf.dataset if mf is not None else None
    _check_trained_on(trained_on, dataset, source, what)
    return _in_range(trained_bounds, dataset, source, trained_on=trained_on, data_dir=data_dir, what=what)


def _input_layout(options: PrepareOptions, mf: ModelFile | None, dataset: Dataset | None) -> _Layout:
    """The layout the module takes, and the adapter from the native layout."""
    recorded = options.input_shape if options.input_shape is not None else (
        mf.meta.get("input_shape") if mf is not None else None)
    file_shape = tuple(recorded) if recorded else None
    keras = mf is not None and (mf.arch == "keras" or "keras_version" in mf.meta)
    channels_last = keras and mf is not None and mf.meta.get("data_format") == "channels_last"
    native: tuple[int | None, ...] | None
    if options.input_layout is not None:
        adapter = None if options.input_layout == "NCHW" else options.input_layout
        native = dataset.input_shape if dataset is not None else (
            _native_of(file_shape, adapter) if file_shape is not None else None)
    elif dataset is not None:
        native = dataset.input_shape
        adapter = None if file_shape is None else _conversion(
            native, file_shape, keras=keras, what=f"data set {dataset.name!r}")
    elif file_shape is not None and native_shape(file_shape, channels_last=channels_last) != file_shape:
        adapter, native = "NHWC", native_shape(file_shape, channels_last=channels_last)
    else:
        adapter, native = None, file_shape
    name = layout_name(file_shape) if file_shape is not None else (
        layout_name(native) if native is not None else "unknown")
    return _Layout(adapter=adapter, native=None if native is None else tuple(native), name=name,
                   file_shape=file_shape)


def _logits_head(module: nn.Module, kind: str, logits: nn.Module | None, mf: ModelFile | None,
                 what: str) -> tuple[nn.Module | None, str | None]:
    """The module returning logits, where the model has them, and why not where it has none."""
    if kind == "logits" and mf is not None and ends_in_softmax(module):
        warnings.warn(f"{what} ends in a softmax but is declared to return logits; losses will be "
                      "computed as if its probabilities were logits", stacklevel=3)
    if kind == "logits":
        return module, None
    if logits is not None:
        return logits, None
    return _split_logits(module)


def _pair(bounds: Sequence[float]) -> tuple[float, float]:
    lo, hi = bounds
    return lo, hi


def _logits_inner(pm: PreparedModel) -> nn.Module | None:
    if pm.logits is None or pm.logits is pm.module:
        return None
    return pm.logits.inner if isinstance(pm.logits, InputAdapter) else pm.logits


def _open(model: str | os.PathLike | ModelFile | nn.Module | None, data: Dataset | str | None, *,
          data_dir: str | os.PathLike | None,
          options: PrepareOptions) -> tuple[ModelFile | None, nn.Module, str]:
    """The model file (``None`` for a caller's module), the module and the model's default name."""
    if isinstance(model, ModelFile):
        return model, model.model, model.arch
    if isinstance(model, nn.Module):
        return None, model, type(model).__name__
    if model is None:
        from .default import default_model

        name = data if isinstance(data, str) or data is None else data.name
        if (name or "digits") != "digits":
            raise DeepFaultError(f"--dataset {name} needs a model trained on it; give one with --model FILE")
        mf = default_model(data if isinstance(data, Dataset) else load_dataset("digits", data_dir=data_dir))
        return mf, mf.model, mf.arch
    if not isinstance(model, (str, os.PathLike)):
        raise DeepFaultError(f"model must be a path, a ModelFile, an nn.Module or a PreparedModel; "
                             f"got {type(model).__name__}")
    from .load import open_model

    mf = open_model(model, weights=options.weights, arch=options.arch, arch_kwargs=options.arch_kwargs,
                    trust_pickle=options.trust_pickle)
    return mf, mf.model, model_label(model, mf)


def resolve_model(model: nn.Module | PreparedModel, output_kind: str | None = None) -> tuple[nn.Module, str]:
    """``(module, output_kind)`` for a function that takes a module or a prepared model.

    A :class:`PreparedModel` gives its module and output kind (an ``output_kind`` that
    contradicts it is an error); a module gives itself and ``output_kind`` (default
    ``"logits"``, the library's convention for bare modules).

    Raises:
        DeepFaultError: ``output_kind`` is unknown or contradicts the prepared model's.
    """
    if isinstance(model, PreparedModel):
        if output_kind is not None and output_kind != model.output_kind:
            raise DeepFaultError(f"output_kind={output_kind!r} contradicts model {model.name!r}, prepared as "
                                 f"returning {model.output_kind}; leave output_kind out")
        return model.module, model.output_kind
    kind = output_kind or "logits"
    if kind not in OUTPUT_KINDS:
        raise DeepFaultError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}; got {kind!r}")
    return model, kind
