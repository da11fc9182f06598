"""The repaired model written as a file that :func:`deepfault.models.open_model` opens without
``trust_pickle``: :func:`save_repaired`.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..errors import DeepFaultError
from ..models import ModelFile
from ..models.prepare import PreparedModel

if TYPE_CHECKING:
    from .results import RepairResult

__all__ = ["save_repaired"]

log = logging.getLogger(__name__)


def save_repaired(path: str | os.PathLike, mf: ModelFile | PreparedModel | None,
                  result: RepairResult) -> Path:
    """Write the model fine-tuned on the found inputs as a PyTorch ``.pt`` that
    :func:`deepfault.models.open_model` opens without ``trust_pickle``.

    A model built from an architecture (a zoo name, ``deepfault train``, the scenarios, a
    state_dict opened with ``--arch``, a user's ``file.py:Class`` included) is written as a
    deepfault model file with its architecture, data set, bounds and ``meta["repair"]`` (the
    summary); any other model (TorchScript, Keras, ONNX, a pickled or caller's module) as a
    TorchScript archive: scripted when it scripts, else traced on one input of the model's
    shape (a traced model runs for the methods that need outputs and gradients only). Never a
    pickle. Written atomically.

    ``mf`` is the repaired model's file (a prepared model gives its own; ``None`` for a
    caller's module).

    Raises:
        DeepFaultError: The model neither scripts nor traces (its error says why).
    """
    from .._io import write_torch
    from ..models import save_model
    from ..models._api import arch_kind
    from ..models.prepare import InputAdapter

    model = result.model
    shape = mf.input_shape if isinstance(mf, PreparedModel) else None
    if isinstance(model, InputAdapter):  # write the file's own module, in its own layout
        model = model.inner
        shape = mf.file_input_shape if isinstance(mf, PreparedModel) else None
    if isinstance(mf, PreparedModel):
        mf = mf.model_file

    path = Path(path)
    summary = {
        "from": result.model_name,
        "inputs": [f.path for f in result.files],
        "config": result.config.to_dict(),
        "before": result.before.to_dict(),
        "after": result.found.after.to_dict(),
    }
    try:
        buildable = mf is not None and bool(arch_kind(mf.arch))
    except DeepFaultError:  # a loader's tag (torchscript, keras, onnx): no architecture to build
        buildable = False
    if mf is not None and buildable:
        meta = {**mf.meta, "test_accuracy": result.found.after.test_accuracy, "repair": summary}
        if shape is not None and all(isinstance(d, int) for d in shape):  # a state_dict records none
            meta.setdefault("input_shape", list(shape))
        return save_model(
            path, ModelFile(model, mf.arch, dict(mf.arch_kwargs), mf.dataset, mf.bounds, mf.output_kind, meta)
        )
    from ..models.torchscript import jit_quietly

    with jit_quietly():
        return write_torch(path, _torchscript(model, shape, result.model_name), save=torch.jit.save)


def _torchscript(model: nn.Module, shape, name: str):
    """``model`` as TorchScript: its compiled module as it is, else scripted, else traced on zeros
    of the model's input ``shape``.
    """
    from ..models.torchscript import CompiledModel, jit_quietly

    if isinstance(model, CompiledModel):
        return model.compiled
    with jit_quietly(), warnings.catch_warnings():  # deprecated, but it is what open_model reads
        try:
            return torch.jit.script(model)
        except Exception as err:  # noqa: BLE001 - any scripting failure falls back to tracing
            why = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        if shape is None or None in tuple(shape):
            raise DeepFaultError(f"{name} does not script to TorchScript ({why}) and its input shape is "
                                 "unknown, so it cannot be traced; give a model built from --arch")
        log.info("%s does not script to TorchScript (%s); writing it traced", name, why)
        device = next((t.device for t in (*model.parameters(), *model.buffers())), torch.device("cpu"))
        with torch.no_grad():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            try:
                x = torch.zeros((1, *shape), device=device)
                return torch.jit.trace(model.eval(), x, check_trace=False)
            except Exception as err:
                raise DeepFaultError(f"{name} neither scripts ({why}) nor traces ({type(err).__name__}: "
                                     f"{str(err).splitlines()[0] if str(err) else ''}) to TorchScript; "
                                     "give a model built from --arch") from err
