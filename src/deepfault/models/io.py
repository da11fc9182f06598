"""The deepfault model file: weights plus what is needed to rebuild and use the model.

A model file is a ``torch.save`` dictionary of tensors and plain values only, so it
loads with ``torch.load(weights_only=True)``: nothing is unpickled that could run code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from .._io import atomic_path
from ..errors import DeepFaultError
from .zoo import build_model

__all__ = ["ModelFile", "save_model", "load_model", "FORMAT"]

FORMAT = "deepfault-model/1"


@dataclass
class ModelFile:
    """A loaded model and its description.

    Attributes:
        model: The network, in ``eval()`` mode.
        arch: Architecture name in the zoo.
        arch_kwargs: Arguments the architecture was built with.
        dataset: Name of the data set it was trained on (or ``None``).
        bounds: Valid input range, ``(lo, hi)``.
        output_kind: ``"logits"`` or ``"probabilities"``.
        meta: Anything else recorded (``test_accuracy``, training settings, ...).
    """

    model: nn.Module
    arch: str
    arch_kwargs: dict = field(default_factory=dict)
    dataset: str | None = None
    bounds: tuple[float, float] | None = None
    output_kind: str = "logits"
    meta: dict = field(default_factory=dict)


def save_model(path: str | os.PathLike, mf: ModelFile) -> Path:
    """Write ``mf`` atomically to ``path``; returns the path."""
    payload = {
        "format": FORMAT,
        "arch": mf.arch,
        "arch_kwargs": dict(mf.arch_kwargs),
        "dataset": mf.dataset,
        "bounds": list(mf.bounds) if mf.bounds is not None else None,
        "output_kind": mf.output_kind,
        "meta": dict(mf.meta),
        "state_dict": {k: v.detach().cpu() for k, v in mf.model.state_dict().items()},
    }
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)
    return path


def load_model(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> ModelFile:
    """Load a deepfault model file without unpickling arbitrary objects.

    Raises:
        DeepFaultError: The file is missing, unreadable, not a deepfault model file, or its
            weights do not fit its architecture.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"model file {str(path)!r} does not exist; check the path")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for corrupt or foreign files
        raise DeepFaultError(
            f"{str(path)!r} is not a readable deepfault model file ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}); train one with "
            "'deepfault train' or check that the file is complete"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise DeepFaultError(
            f"{str(path)!r} is not a deepfault model file (no {FORMAT!r} marker); "
            "train one with 'deepfault train'"
        )
    model = build_model(payload["arch"], **payload["arch_kwargs"])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as err:
        raise DeepFaultError(
            f"the weights in {str(path)!r} do not fit architecture {payload['arch']!r}: "
            f"{str(err).splitlines()[1].strip() if len(str(err).splitlines()) > 1 else err}"
        ) from err
    model.eval()
    bounds = payload.get("bounds")
    return ModelFile(
        model=model,
        arch=payload["arch"],
        arch_kwargs=payload["arch_kwargs"],
        dataset=payload.get("dataset"),
        bounds=tuple(bounds) if bounds is not None else None,
        output_kind=payload.get("output_kind", "logits"),
        meta=payload.get("meta", {}),
    )
