"""Models: the architecture registry, the model file format, training and the default model."""

from . import dcgan, zoo  # noqa: F401  (the registry's entries: importing them registers them)
from ._api import build_model, list_architectures, register_architecture
from .default import default_model
from .io import ModelFile, load_model, save_model
from .load import open_model

__all__ = [
    "ModelFile",
    "default_model",
    "load_model",
    "open_model",
    "save_model",
    "build_model",
    "list_architectures",
    "register_architecture",
]
