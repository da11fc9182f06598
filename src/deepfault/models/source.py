"""Where a model comes from: its file, what opens it, and the data set it is tested on.

The settings every command that reads a model file shares (``--model``, ``--dataset``,
``--data-dir``, ``--arch``, ``--arch-args``, ``--weights``, ``--trust-pickle``) are declared once
here, each with its constraint, help and file role (:mod:`deepfault.core.constraints`): the
command line builds those options from these declarations, the guard learns from them which
files a run reads, and a Python caller gets the same checks::

    source = ModelSource("net.pt", dataset="mnist", arch="net.py:Net")
    prepared = source.prepare()
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..core.constraints import Checked, FilePath, Flag, param, validate
from ..errors import DeepFaultError
from ._api import arch_files
from .io import model_reads

__all__ = ["ModelSource"]


def _arch_kwargs(name: str, value: Any) -> dict:
    """A JSON object's text (as typed) or a mapping, as a dict of keyword arguments."""
    from .specs import arch_kwargs_json

    if isinstance(value, str):
        try:
            return arch_kwargs_json(value)
        except DeepFaultError as err:
            raise DeepFaultError(f"{name} {err}" if name else str(err)) from None
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return value
    raise DeepFaultError(f"{name} must be a JSON object of keyword arguments; got {value!r}")


@dataclass(frozen=True)
class ModelSource:
    """A model file, how to open it, and its data set (``None``: what the file names).

    Attributes:
        model: The model file, in any format :func:`~deepfault.models.open_model` opens
            (``None``: the embedded digits model).
        dataset: A data set name or ``.npz`` file (``None``: the one the model file names).
        data_dir: The data root.
        arch: The network of a plain ``state_dict`` or ``.safetensors`` file.
        arch_kwargs: Its keyword arguments (on the command line a JSON object).
        weights: The Keras weights HDF5 of an architecture JSON.
        trust_pickle: Allow unpickling a whole pickled ``nn.Module`` (only for trusted files).
    """

    model: str | os.PathLike | None = param(
        None, FilePath("input", names=model_reads), metavar="FILE", plain_help=True,
        help="model file: deepfault .pt, state_dict (with --arch), TorchScript, Keras .h5/.json or stem, "
        ".onnx (default: the embedded digits model)")
    dataset: str | os.PathLike | None = param(
        None, FilePath("input"), metavar="NAME", plain_help=True,
        help="data set name or .npz file (default: the one the model file names)")
    data_dir: str | os.PathLike | None = param(
        None, FilePath("input", folder=True), metavar="DIR", plain_help=True,
        help="data root (default: $DEEPFAULT_DATA, else the folder the model file was trained from, else the "
        "user cache directory; MNIST and Fashion-MNIST download on first use)")
    arch: str | None = param(
        None, FilePath("input", names=arch_files), metavar="SPEC", plain_help=True,
        help="the network of a plain state_dict or .safetensors file: your class (path/to/file.py:ClassName; "
        "this runs that file), package.module:factory, torchvision:NAME, timm:NAME, or a zoo name (see "
        "'deepfault train --help')")
    arch_kwargs: dict | None = param(
        None, Checked(_arch_kwargs, "a JSON object of keyword arguments", bad=("[1]", "{", ""), none=True),
        option="--arch-args", metavar="JSON", plain_help=True,
        help="keyword arguments of --arch, a JSON object, e.g. '{\"num_classes\": 10}'")
    weights: str | os.PathLike | None = param(
        None, FilePath("input"), metavar="FILE", plain_help=True,
        help="Keras weights HDF5 when --model is an architecture JSON")
    trust_pickle: bool = param(
        False, Flag(),
        help="allow loading a pickled whole nn.Module (unpickling can run code: only for files you trust)")

    def __post_init__(self):
        if isinstance(self.arch_kwargs, str):  # as typed: the checked dict
            object.__setattr__(self, "arch_kwargs", _arch_kwargs("arch_kwargs", self.arch_kwargs))
        validate(self)

    def prepare(self, data=None, *, need_data: bool = False):
        """The prepared model and its data set (:func:`~deepfault.models.prepare.prepare_model`):
        ``data`` (a :class:`~deepfault.data.Dataset`) in place of :attr:`dataset`.

        Raises:
            DeepFaultError: With ``need_data``, no data set given and none named by the file.
        """
        from .prepare import prepare_model

        named = os.fspath(self.dataset) if self.dataset is not None else None
        prepared = prepare_model(self.model, data if data is not None else named, data_dir=self.data_dir,
                                 weights=self.weights, arch=self.arch, arch_kwargs=self.arch_kwargs,
                                 trust_pickle=self.trust_pickle)
        if need_data and prepared.data is None:
            raise DeepFaultError(f"model file {str(self.model)!r} does not name its data set; add --dataset "
                                 "NAME")
        return prepared

    def open(self, runtime: str = "auto"):
        """The model file opened (:func:`~deepfault.models.open_model`; ``runtime``: how ``.onnx`` runs)."""
        from .load import open_model

        if self.model is None:
            raise DeepFaultError("no model file to open; give one")
        return open_model(self.model, weights=self.weights, arch=self.arch, arch_kwargs=self.arch_kwargs,
                          trust_pickle=self.trust_pickle, runtime=runtime)
