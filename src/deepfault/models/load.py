"""Open any supported model file: the one entry point behind ``deepfault run --model``.

| file | how it is read |
| --- | --- |
| deepfault model file (``.pt``) | ``torch.load(weights_only=True)``, rebuilt from its ``arch`` |
| plain ``state_dict`` (``.pt``, ``.pth``) | ``torch.load(weights_only=True)`` into ``arch`` |
| ``.safetensors`` state dict | ``safetensors.torch.load_file`` into ``arch`` (extra ``models``) |
| TorchScript archive, scripted or traced | ``torch.jit.load``; see :mod:`.torchscript` |
| pickled whole ``nn.Module`` | only with ``trust_pickle=True`` (unpickling can run code) |

A scripted ``nn.Sequential`` of ``torch.nn`` layers is rebuilt as eager modules (hooks need
them); any other TorchScript runs compiled, for the methods that need outputs and gradients
only. A pickled module is unpickled with the file's folder importable, where its class's code
usually lies.
| Keras 2 ``.h5``, ``.json`` (+ weights), or a stem | :func:`deepfault.models.keras.load_keras` |
| ``.onnx`` | :func:`deepfault.models.onnx.load_onnx` (extra ``onnx``); see below |
| ``.tflite`` | the LiteRT interpreter, a black box (extra ``litert``) |

``arch`` is a zoo name, ``file.py:Class``, ``package.module:factory``, ``torchvision:NAME`` or
``timm:NAME`` (:func:`~deepfault.models.build_model`), built with ``arch_kwargs``.

An ``.onnx`` file runs in ONNX Runtime as a black box (:mod:`deepfault.models.blackbox`, extra
``runtime``) with ``runtime="onnxruntime"``, or with ``"auto"`` when onnx2torch cannot convert
the graph (an int8 or float16 model).
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..core.registry import Registry, unknown_name
from ..errors import DeepFaultError
from ._api import build_model, canonical_arch, importable, list_architectures
from .io import MODEL_FILE_FORMAT, ModelFile, check_build, load_model, state_dict_mismatch

log = logging.getLogger(__name__)

__all__ = ["open_model", "MODEL_FORMATS", "ModelFormat", "register_format", "supported_formats"]

_KERAS_SUFFIXES = {".h5", ".hdf5", ".json"}


def _is_torchscript(path: Path) -> bool:
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(n.endswith("constants.pkl") or "/code/" in n for n in zf.namelist())


def _load_state_dict_into(path: Path, state, arch: str | None, arch_kwargs: dict, *,
                          what: str = "a plain state_dict") -> ModelFile:
    if arch is None:
        raise DeepFaultError(
            f"{str(path)!r} holds {what}, which does not say what network it belongs to; name it with "
            f"--arch: your class (--arch path/to/file.py:ClassName, with --arch-args '{{...}}' for its "
            f"arguments), package.module:factory, torchvision:NAME, timm:NAME, or a zoo name "
            f"({', '.join(list_architectures())})"
        )
    misfit = f"the state_dict in {str(path)!r} does not fit architecture {arch!r} with {arch_kwargs}"
    check_build(arch, arch_kwargs, state, misfit=misfit)  # on the meta device: nothing allocated yet
    model = build_model(arch, **arch_kwargs)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        detail = state_dict_mismatch(model, state) or str(err).splitlines()[0]
        raise DeepFaultError(f"{misfit}: {detail}") from err
    return ModelFile(model.eval(), canonical_arch(arch), dict(arch_kwargs), meta={"source": str(path)})


@dataclass(frozen=True)
class ModelFormat:
    """A model file format: how to recognise a file, how to open it, and what it takes.

    Attributes:
        name: Registry name.
        description: One line for messages and listings.
        detect: ``detect(path, weights, arch) -> bool``; formats are tried in registration order.
        load: ``load(path, *, weights, arch, arch_kwargs, trust_pickle, **options) -> ModelFile``.
        options: The :func:`open_model` options it takes beyond those every format takes
            (``("runtime",)`` for the files a runtime can run); the others never see them.
        loader: How it is read, for ``deepfault inspect`` (``""``: the description); a load
            function that reads a file another way sets ``ModelFile.read["loader"]`` itself.
    """

    name: str
    description: str
    detect: Callable[[Path, Path | None, str | None], bool]
    load: Callable[..., ModelFile]
    options: tuple[str, ...] = ()
    loader: str = ""


#: Every model file format, tried in registration order.
MODEL_FORMATS: Registry[ModelFormat] = Registry("model format")


def register_format(name: str, *, description: str, detect: Callable[[Path, Path | None, str | None], bool],
                    options: tuple[str, ...] = (), loader: str = ""):
    """Decorator adding ``load`` as model format ``name`` (see :class:`ModelFormat`)."""

    def add(load):
        MODEL_FORMATS.register(name, ModelFormat(name, description, detect, load, options, loader))
        return load

    return add


def supported_formats() -> str:
    """The supported formats in one line, for messages."""
    return ", ".join(f.description for _, f in MODEL_FORMATS.items())


def _keras_weights_into_zoo(path: Path, weights, arch) -> bool:
    if arch is None:
        return False
    from .keras_weights import is_weights_only

    return is_weights_only(weights or path)


@register_format("keras-weights", description="Keras save_weights .h5 into a zoo architecture (--arch)",
                 detect=_keras_weights_into_zoo,
                 loader="deepfault's Keras weights reader (h5py) into the architecture")
def _open_keras_weights(path, *, weights, arch, arch_kwargs, trust_pickle):
    from .keras_weights import open_keras_weights

    return open_keras_weights(weights or path, arch=arch, arch_kwargs=arch_kwargs)


def _keras_path(path: Path, weights, arch) -> bool:
    return path.suffix.lower() in _KERAS_SUFFIXES or weights is not None or (
        not path.exists() and Path(f"{path}.json").is_file())


@register_format("keras", description="Keras .h5/.json (+ --weights) or stem", detect=_keras_path,
                 loader="deepfault's Keras reader (h5py), rebuilt as torch modules")
def _open_keras(path, *, weights, arch, arch_kwargs, trust_pickle):
    from .keras import load_keras

    return load_keras(path, weights)


@register_format("onnx", description=".onnx", detect=lambda p, w, a: p.suffix.lower() == ".onnx",
                 options=("runtime",), loader="onnx2torch, converted to torch modules")
def _open_onnx(path, *, weights, arch, arch_kwargs, trust_pickle, runtime="auto"):
    from .blackbox import RUNTIMES, onnx_input_type
    from .onnx import load_onnx

    if runtime not in RUNTIMES:
        message = unknown_name("runtime", runtime, RUNTIMES)
        raise DeepFaultError(message.replace("; ", " for an ONNX file; ", 1))
    if runtime == "onnxruntime":
        return _onnx_black_box(path)
    missing: ModuleNotFoundError | None = None
    try:
        if runtime == "auto" and onnx_input_type(path) not in (None, "float32"):
            raise DeepFaultError(f"it takes {onnx_input_type(path)} inputs")  # a module would not run
        return load_onnx(path)
    except (DeepFaultError, ModuleNotFoundError) as err:
        if (runtime == "torch" or not Path(path).is_file() or "not a valid ONNX" in str(err)
                or "single-input classifier" in str(err)):  # no runtime runs those
            raise
        missing = err if isinstance(err, ModuleNotFoundError) else None
        op = re.search(r"operation_type='(\w+)'", str(err))
        why = f"no converter for {op.group(1)}" if op else str(err).splitlines()[0][:160]
    try:
        mf = _onnx_black_box(path)
    except ModuleNotFoundError as err:
        if missing is not None:  # neither onnx2torch nor onnxruntime: name the usual extra
            raise missing from err
        raise DeepFaultError(f"{str(path)!r} cannot be read as a torch module ({why}) and ONNX Runtime "
                             "is not installed; pip install -e '.[runtime]'") from err
    log.warning("%s: onnx2torch cannot convert it (%s); running it in ONNX Runtime as a black box "
                "(no layers; --runtime torch refuses instead)", path, why)
    mf.meta["runtime_fallback"] = why
    return mf


def _onnx_black_box(path) -> ModelFile:
    from .blackbox import open_onnxruntime

    mf = open_onnxruntime(path)
    mf.read.setdefault("loader", "ONNX Runtime, a black box")
    return mf


@register_format("tflite", description=".tflite (LiteRT)",
                 detect=lambda p, w, a: p.suffix.lower() == ".tflite", options=("runtime",),
                 loader="the LiteRT interpreter, a black box")
def _open_tflite(path, *, weights, arch, arch_kwargs, trust_pickle, runtime="auto"):
    from .blackbox import open_litert

    return open_litert(path)


def _read_safetensors(path: Path) -> dict:
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ModuleNotFoundError as err:
        raise DeepFaultError(f"{str(path)!r} is a .safetensors file, which needs the safetensors package; "
                             "pip install -e '.[models]'") from err
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as err:
        raise DeepFaultError(f"{str(path)!r} is not a readable .safetensors file (corrupt or truncated: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__})") from err


@register_format("safetensors", description=".safetensors state_dict (with --arch)",
                 detect=lambda p, w, a: p.suffix.lower() == ".safetensors" and p.is_file(),
                 loader="safetensors.torch.load_file, then the architecture built and load_state_dict")
def _open_safetensors(path, *, weights, arch, arch_kwargs, trust_pickle):
    state = _read_safetensors(path)
    if not state:
        raise DeepFaultError(f"{str(path)!r} holds no tensors; save model.state_dict() with safetensors")
    return _load_state_dict_into(path, state, arch, arch_kwargs or {}, what="a .safetensors state_dict")


@register_format("torchscript", description="TorchScript",
                 detect=lambda p, w, a: p.is_file() and _is_torchscript(p))
def _open_torchscript(path, *, weights, arch, arch_kwargs, trust_pickle):
    from .torchscript import load_torchscript

    return load_torchscript(path)


@register_format("torch", description="deepfault .pt, state_dict (with --arch)",
                 detect=lambda p, w, a: p.is_file(),
                 loader="torch.load(weights_only=True), then the architecture built and load_state_dict")
def _open_torch(path, *, weights, arch, arch_kwargs, trust_pickle):
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "global" not in str(err).lower():  # no refused class or function: a damaged file
            raise DeepFaultError(
                f"{str(path)!r} is not a model file deepfault can read (corrupt or truncated); "
                f"supported: {supported_formats()}"
            ) from err
        if not trust_pickle:
            raise DeepFaultError(
                f"{str(path)!r} holds pickled Python objects (likely a whole nn.Module), and "
                "unpickling can run arbitrary code; if you trust the file pass --trust-pickle, "
                "or better save model.state_dict() and load it with --arch path/to/file.py:ClassName"
            ) from err
        mf = _unpickle_module(path)
        mf.read.setdefault("loader", "torch.load(weights_only=False): unpickled (--trust-pickle)")
        return mf
    except Exception as err:
        raise DeepFaultError(
            f"{str(path)!r} is not a model file deepfault can read (corrupt or truncated: "
            f"{type(err).__name__}); supported: {supported_formats()}"
        ) from err
    if isinstance(payload, dict) and payload.get("format") == MODEL_FILE_FORMAT:
        return load_model(path, arch=arch, arch_kwargs=arch_kwargs)
    if isinstance(payload, dict) and payload and all(
        isinstance(v, torch.Tensor) for v in payload.values()
    ):
        return _load_state_dict_into(path, payload, arch, arch_kwargs or {})
    raise DeepFaultError(
        f"{str(path)!r} holds a {type(payload).__name__}, not a model; supported: {supported_formats()}"
    )


def open_model(
    path: str | os.PathLike,
    *,
    weights: str | os.PathLike | None = None,
    arch: str | None = None,
    arch_kwargs: dict | None = None,
    trust_pickle: bool = False,
    runtime: str = "auto",
) -> ModelFile:
    """Load a model from any supported file (see the module's table and :data:`MODEL_FORMATS`).

    Args:
        path: The model file, or a Keras stem ``dir/name`` (``name.json`` + ``name.h5``).
        weights: The Keras weights HDF5 when ``path`` is an architecture JSON.
        arch: Zoo architecture for a plain ``state_dict``.
        arch_kwargs: Its arguments.
        trust_pickle: Allow unpickling a whole pickled ``nn.Module``. Only for files you
            trust: unpickling can run arbitrary code.
        runtime: How an ``.onnx`` file runs (:data:`~deepfault.models.blackbox.RUNTIMES`):
            ``"auto"`` (onnx2torch, or ONNX Runtime when onnx2torch cannot convert the graph),
            ``"torch"`` or ``"onnxruntime"``. Other files ignore it.

    Raises:
        DeepFaultError: A missing, corrupt or unsupported file, with what to do.
    """
    path = Path(path)
    weights_path = Path(weights) if weights is not None else None
    if path.is_dir():
        raise DeepFaultError(
            f"{str(path)!r} is a directory; give a model file (a TensorFlow SavedModel must be "
            "exported to ONNX or Keras .h5 first)"
        )
    options = {"runtime": runtime}  # each format takes the ones its entry declares
    for _, fmt in MODEL_FORMATS.items():
        if fmt.detect(path, weights_path, arch):
            mf = fmt.load(path, weights=weights, arch=arch, arch_kwargs=arch_kwargs,
                          trust_pickle=trust_pickle, **{key: options[key] for key in fmt.options})
            mf.read.setdefault("format", fmt.name)
            mf.read.setdefault("loader", fmt.loader or fmt.description)
            return mf
    raise DeepFaultError(f"model file {str(path)!r} does not exist; check the path")


def _unpickle_module(path: Path) -> ModelFile:
    folder = path.resolve().parent
    try:
        with importable(folder):  # the classes of a pickled module usually live beside it
            model = torch.load(path, map_location="cpu", weights_only=False)
    except ModuleNotFoundError as err:
        top = (err.name or "it").partition(".")[0]
        raise DeepFaultError(
            f"unpickling {str(path)!r} needs module {err.name!r}, the code of the pickled class, which is "
            f"neither beside the file ({folder}) nor installed; put {top} there or on PYTHONPATH, or save "
            "model.state_dict() and use --arch path/to/file.py:ClassName"
        ) from err
    except AttributeError as err:  # the module imports, but the class is gone from it
        raise DeepFaultError(f"unpickling {str(path)!r} failed: {err}; the class's code has changed since "
                             "the file was saved; save model.state_dict() and use --arch file.py:ClassName"
                             ) from err
    except Exception as err:
        raise DeepFaultError(f"could not unpickle {str(path)!r}: {err}") from err
    if not isinstance(model, nn.Module):
        raise DeepFaultError(f"{str(path)!r} unpickles to a {type(model).__name__}, not an nn.Module")
    return ModelFile(model.eval(), type(model).__name__, meta={"source": str(path), "pickled": True})
