"""Reconcile a model with a data set: value range, layout and output kind.

Every command that runs a model on data (``run``, ``experiment``, ``inspect``,
``coverage``, ``xplore``, ``regress``) calls :func:`reconcile`, so a mismatch is refused
(or repaired, where that is safe) the same way everywhere:

- **Range.** A model trained on ``[0, 1]`` inputs gets a 0-255 data set scaled to
  ``[0, 1]``; any other difference between the model's recorded bounds and the data's is
  an error (a 0-255 model on 0-1 data would run at chance accuracy without a word).
- **Layout.** The data is laid out as the model takes it (channels last for Keras
  models, flat for dense ones), from the input shape the model file records.
- **Output kind.** A model whose last module is a softmax but is declared to return
  logits gets a warning: its losses would be computed on probabilities.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ..data import Dataset, load_dataset
from ..errors import DeepFaultError
from .io import ModelFile

__all__ = ["Prepared", "reconcile", "prepare", "model_label", "layout_name"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A model and the data laid out for it.

    Attributes:
        model_file: The opened model file.
        data: The data set, in the model's range and layout.
        label: How results name the model: the file name, or the zoo architecture.
        layout: ``"NCHW"``, ``"NHWC"``, ``"flat"`` or the per-input shape, always set.
    """

    model_file: ModelFile
    data: Dataset
    label: str
    layout: str

    @property
    def model(self) -> nn.Module:
        return self.model_file.model


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


def _ends_in_softmax(model: nn.Module) -> bool:
    leaves = [m for m in model.modules() if not list(m.children())]
    return bool(leaves) and isinstance(leaves[-1], (nn.Softmax, nn.LogSoftmax))


def reconcile(mf: ModelFile, data: Dataset | str, *, data_dir: str | os.PathLike | None = None,
              label: str | None = None) -> Dataset:
    """The data set ``data`` (or the one named) in ``mf``'s value range and input layout.

    Raises:
        DeepFaultError: The ranges differ in a way that cannot be repaired, or no layout
            of the data fits the model's input shape.
    """
    what = label or mf.arch
    source = data if isinstance(data, str) else data.meta.get("source", data.name)
    if isinstance(data, str):
        data = load_dataset(data, data_dir=data_dir)
    user_file = str(source).lower().endswith(".npz") or str(mf.dataset or "").lower().endswith(".npz")
    if mf.dataset and mf.dataset != data.name and not user_file:
        log.warning("%s was trained on %s, not %s; failures may come from the data shift",
                    what, mf.dataset, data.name)
    if mf.bounds is not None and tuple(mf.bounds) != tuple(data.bounds):
        if tuple(mf.bounds) == (0.0, 1.0) and tuple(data.bounds) == (0.0, 255.0) and not user_file:
            data = load_dataset(source, data_dir=data_dir, scale01=True)
        else:
            raise DeepFaultError(
                f"{what} was trained on inputs in {tuple(mf.bounds)} but data set {data.name!r} gives "
                f"{tuple(data.bounds)}; use the data set (and scaling) the model was trained on"
            )
    shape = mf.meta.get("input_shape")
    if shape:
        data = data.for_input_shape(shape)
    if mf.output_kind == "logits" and _ends_in_softmax(mf.model):
        warnings.warn(f"{what} ends in a softmax but is declared to return logits; losses will be "
                      "computed as if its probabilities were logits", stacklevel=2)
    return data


def prepare(model: str | os.PathLike | None, dataset: str | None = None, *,
            data_dir: str | os.PathLike | None = None, weights: str | None = None,
            arch: str | None = None, trust_pickle: bool = False) -> Prepared:
    """Open a model file (``None``: the embedded default) and its data set, reconciled.

    Args:
        model: Any model file :func:`~deepfault.models.open_model` takes, or ``None`` for
            the embedded digits model.
        dataset: Data set name or ``.npz`` file (default: the one the model file names).
        data_dir: Data root.
        weights, arch, trust_pickle: As in :func:`~deepfault.models.open_model`.

    Raises:
        DeepFaultError: As :func:`reconcile`, or the data set cannot be determined.
    """
    from . import open_model
    from .default import default_model

    if model is None:
        name = dataset or "digits"
        if name != "digits":
            raise DeepFaultError(f"--dataset {name} needs a model trained on it; give one with --model FILE")
        data = load_dataset("digits", data_dir=data_dir)
        mf = default_model(data)
        return Prepared(mf, data, mf.arch, layout_name(data.input_shape))
    mf = open_model(model, weights=weights, arch=arch, trust_pickle=trust_pickle)
    name = dataset or mf.dataset
    if name is None:
        raise DeepFaultError(f"model file {str(model)!r} does not name its data set; add --dataset NAME")
    label = model_label(model, mf)
    data = reconcile(mf, name, data_dir=data_dir, label=label)
    return Prepared(mf, data, label, layout_name(data.input_shape))
