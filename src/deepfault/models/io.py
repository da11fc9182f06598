"""The deepfault model file: weights plus what is needed to rebuild and use the model.

A model file is a ``torch.save`` dictionary of tensors and plain values only, so it
loads with ``torch.load(weights_only=True)``: nothing is unpickled that could run code.

Its ``arch`` is any form :func:`~deepfault.models.build_model` builds. A ``.py`` file is recorded
with its absolute path (:func:`~._api.canonical_arch`), a module by its name. Reading such a
file back runs that code, so :func:`load_model` builds it only when the caller names the code
again (``arch=``, ``--arch``): a model file alone never makes deepfault run code it names.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from .._io import write_torch
from ..errors import DeepFaultError
from ._api import ARCH_FORMS, arch_kind, build_model, canonical_arch, meta_build, runs_user_code

__all__ = ["ModelFile", "save_model", "load_model", "load_cached", "state_dict_mismatch", "training_finished",
           "near_chance", "warn_if_chance", "model_reads", "MODEL_FILE_FORMAT", "check_build"]

log = logging.getLogger(__name__)

#: A recorded test accuracy below this many times chance (one over the number of classes) is
#: "at chance": such a model did not learn, and what any method finds in it means little.
CHANCE_FACTOR = 1.5

MODEL_FILE_FORMAT = "deepfault-model/1"


@dataclass
class ModelFile:
    """A loaded model and its description.

    Attributes:
        model: The network, in ``eval()`` mode.
        arch: The architecture: a zoo name or another form of :func:`~deepfault.models.build_model`
            (``file.py:Class``, ``module:factory``, ``torchvision:NAME``); a loader's tag
            (``torchscript``, ``keras``, ...) for a model that was not built from one.
        arch_kwargs: Arguments the architecture was built with.
        dataset: Name of the data set it was trained on (or ``None``).
        bounds: Valid input range, ``(lo, hi)``.
        output_kind: ``"logits"`` or ``"probabilities"``.
        meta: Anything else recorded (``test_accuracy``, training settings, ...).
        read: How the file was read, for ``deepfault inspect`` (``{"format", "loader"}``; empty for a
            model built in memory). Not written to model files.
    """

    model: nn.Module
    arch: str
    arch_kwargs: dict = field(default_factory=dict)
    dataset: str | None = None
    bounds: tuple[float, float] | None = None
    output_kind: str = "logits"
    meta: dict = field(default_factory=dict)
    read: dict = field(default_factory=dict)


def save_model(path: str | os.PathLike, mf: ModelFile) -> Path:
    """Write ``mf`` atomically to ``path``; returns the path.

    Raises:
        DeepFaultError: ``mf.arch`` is not a form :func:`~deepfault.models.build_model` builds
            (a TorchScript or pickled model: write it with ``torch.jit.save`` instead).
    """
    try:
        arch = canonical_arch(mf.arch)
    except DeepFaultError as err:
        raise DeepFaultError(f"cannot write a deepfault model file for architecture {mf.arch!r}, which "
                             "deepfault cannot build again; save it as TorchScript") from err
    payload = {
        "format": MODEL_FILE_FORMAT,
        "arch": arch,
        "arch_kwargs": dict(mf.arch_kwargs),
        "dataset": mf.dataset,
        "bounds": list(mf.bounds) if mf.bounds is not None else None,
        "output_kind": mf.output_kind,
        "meta": dict(mf.meta),
        "state_dict": {k: v.detach().cpu() for k, v in mf.model.state_dict().items()},
    }
    return write_torch(path, payload)


def _recorded(path: str | os.PathLike) -> dict:
    """The header of a deepfault model file (its fields but the weights' values), or ``{}``: not
    such a file, or one that cannot be read.
    """
    path = Path(path)
    if path.suffix != ".pt" or not path.is_file():
        return {}
    try:
        with warnings.catch_warnings():  # a TorchScript archive: torch warns it dispatches to jit.load
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - any unreadable file: opening it later says what is wrong
        return {}
    if not isinstance(payload, dict) or payload.get("format") != MODEL_FILE_FORMAT:
        return {}
    return payload


def recorded_data_dir(path: str | os.PathLike) -> str | None:
    """The data root a deepfault model file remembers (``meta["data_dir"]``, written by
    :func:`~deepfault.models.train.train_model` when the data was not in the default folder),
    or ``None``: not such a file, nothing recorded, or the file cannot be read.
    """
    meta = _recorded(path).get("meta")
    value = meta.get("data_dir") if isinstance(meta, dict) else None
    return value if isinstance(value, str) and value else None


def model_reads(path: str) -> list[str]:
    """Every file opening the model file ``path`` reads: the file, a Keras stem's ``.json`` and
    ``.h5``, and what a deepfault model file names: its data set's ``.npz`` and the ``.py`` file of
    its architecture (the guard refuses an output that would replace any of them).
    """
    from ._api import arch_files

    header = _recorded(path)
    dataset, arch = header.get("dataset"), header.get("arch")
    named = [dataset] if isinstance(dataset, str) and dataset.endswith(".npz") else []
    return [path, f"{path}.json", f"{path}.h5", *named, *(arch_files(arch) if isinstance(arch, str) else [])]


def recorded_data_root(files) -> str | os.PathLike | None:
    """The data root for models read from ``files`` when no folder is given: the first that a
    model file remembers (:func:`recorded_data_dir`) and that still exists, unless
    ``$DEEPFAULT_DATA`` names one (``None``: the default; :func:`deepfault.data._api.usable_recorded_dir`).
    Each of ``files`` is a path, a comma list of paths (``--model a.pt,b.pt``) or a list of
    them; anything else (a module, ``None``) names no file.
    """
    from ..data._api import usable_recorded_dir

    entries = [e for v in files for e in (v if isinstance(v, (list, tuple)) else [v])]
    for path in (p.strip() for e in entries if isinstance(e, (str, os.PathLike)) for p in str(e).split(",")):
        found = usable_recorded_dir(None, recorded_data_dir(path))
        if found is not None:
            return found
    return None


def _check_crc(path: Path) -> None:
    """Refuse a damaged file: ``torch.load`` does not check the zip's CRC-32s, so a flipped byte
    inside a weight would load as a silently different model.
    """
    import zipfile

    if not zipfile.is_zipfile(path):
        return  # a legacy (non-zip) file, or not a model file at all: torch.load reports it
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as err:
        bad = f"({type(err).__name__}: {err})"
    except Exception as err:  # noqa: BLE001 - zlib errors and the like: the file is damaged
        bad = f"({type(err).__name__})"
    if bad is not None:
        raise DeepFaultError(f"{str(path)!r} is damaged (a checksum fails at {bad}); copy or train the model "
                             "again")


#: Largest integer an architecture keyword may hold (widths, class counts).
MAX_WIDTH = 1 << 20


def _check_payload(path: Path, payload: dict) -> None:  # noqa: C901 - a flat sequence of field checks
    """Validate a model file's metadata before anything is built (as the Keras loader does):
    the architecture and its keywords, the weights' names and shapes (against the
    architecture built on the ``meta`` device, which allocates nothing), bounds and kinds.

    Raises:
        DeepFaultError: Naming the field, what was expected and what the file holds.
    """
    import inspect

    from ._api import ARCHITECTURES, list_architectures

    def bad(field_: str, expected: str, got) -> DeepFaultError:
        return DeepFaultError(f"{str(path)!r}: field {field_!r} must be {expected}; got {got}; the file is "
                              "damaged or not written by deepfault: train it again with 'deepfault train'")

    arch = payload.get("arch")
    kind = None
    if isinstance(arch, str):
        try:
            kind = arch_kind(arch)
        except DeepFaultError:
            kind = None
    if kind is None or not isinstance(arch, str):
        raise bad("arch", f"one of {', '.join(list_architectures())}, or {ARCH_FORMS}", repr(arch)[:80])
    kwargs = payload.get("arch_kwargs", {})
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise bad("arch_kwargs", "a mapping of keyword names to values", type(kwargs).__name__)
    if kind != "zoo":  # its builder is the user's or a library's: load_state_dict checks the weights
        _check_fields(path, payload, bad)
        return
    params = inspect.signature(ARCHITECTURES.get(arch)).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key, value in kwargs.items():
        if key not in params and not takes_any:
            raise bad("arch_kwargs", f"keywords of {arch} ({', '.join(params) or 'none'})", repr(key))
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if isinstance(v, bool) or v is None or isinstance(v, (float, str)):
                continue
            if not isinstance(v, int) or not 1 <= v <= MAX_WIDTH:
                raise bad(f"arch_kwargs.{key}", f"integers from 1 to {MAX_WIDTH:,}", repr(v)[:80])
    state = payload.get("state_dict")
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise bad("state_dict", "a mapping of parameter names to tensors", type(state).__name__)
    try:
        with torch.device("meta"):
            skeleton = build_model(arch, **kwargs)
    except Exception as err:  # noqa: BLE001 - any builder error is a bad keyword
        raise bad("arch_kwargs", f"keywords {arch} can be built with", f"{kwargs!r}"[:120]
                  + f" ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
    want = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    have = {k: tuple(v.shape) for k, v in state.items()}
    if want != have:
        diff = sorted(set(want) ^ set(have)) or [k for k in want if want[k] != have[k]]
        key = diff[0]
        raise DeepFaultError(
            f"the weights in {str(path)!r} do not fit architecture {arch!r} with {kwargs}: {key!r} is "
            f"{have.get(key, 'missing')} in the file, {want.get(key, 'absent')} in the architecture; "
            "the file is damaged or its metadata is wrong"
        )
    _check_fields(path, payload, bad)


def _check_fields(path: Path, payload: dict, bad) -> None:
    """The fields after the architecture: state_dict, bounds, output kind, data set, meta."""
    state = payload.get("state_dict")
    if not isinstance(state, dict) or not state or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise bad("state_dict", "a mapping of parameter names to tensors", type(state).__name__)
    bounds = payload.get("bounds")
    if bounds is not None:
        ok = (isinstance(bounds, (list, tuple)) and len(bounds) == 2
              and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds))
        if not ok or not (math.isfinite(bounds[0]) and math.isfinite(bounds[1]) and bounds[0] < bounds[1]):
            raise bad("bounds", "two finite numbers [lo, hi] with lo < hi", repr(bounds)[:80])
    if payload.get("output_kind", "logits") not in ("logits", "probabilities", "images"):
        raise bad("output_kind", "'logits', 'probabilities' or 'images' (a generator)",
                  repr(payload.get("output_kind"))[:80])
    if payload.get("dataset") is not None and not isinstance(payload.get("dataset"), str):
        raise bad("dataset", "a data set name", type(payload.get("dataset")).__name__)
    if not isinstance(payload.get("meta", {}), dict):
        raise bad("meta", "a mapping", type(payload.get("meta")).__name__)
    shape = payload.get("meta", {}).get("input_shape")
    if shape is not None and not _sane_shape(shape):
        raise bad("meta.input_shape", f"1 to {_MAX_INPUT_DIMS} sizes from 1 to {_MAX_INPUT_SIDE:,} (None "
                  "where any size is taken)", repr(shape)[:80])


#: A recorded per-input shape: at most 4 dimensions (``C, H, W`` and one more) of at most 65,536,
#: as ``inspect --input-shape`` takes.
_MAX_INPUT_DIMS, _MAX_INPUT_SIDE = 4, 1 << 16


def _sane_shape(shape) -> bool:
    """Whether ``shape`` is a per-input shape a model can be given: a list of 1 to 4 sizes,
    each an integer in ``[1, 65536]`` or ``None`` (a dimension of any size).
    """
    return isinstance(shape, (list, tuple)) and 1 <= len(shape) <= _MAX_INPUT_DIMS and all(
        d is None or (isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= _MAX_INPUT_SIDE)
        for d in shape)


def _same_code(recorded: str, given: str) -> bool:
    """Whether ``given`` names the same code as the ``recorded`` architecture: the same class or
    function name, in a file of the same name (the folder may have moved) or the same module.
    """
    (rw, _, rn), (gw, _, gn) = recorded.rpartition(":"), given.rpartition(":")
    if rn != gn or arch_kind(given) != arch_kind(recorded):
        return False
    return Path(rw).name == Path(gw).name if arch_kind(given) == "file" else rw == gw


def _arch_to_build(path: Path, recorded: str, arch: str | None, arch_kwargs: dict | None,
                   kwargs: dict) -> str:
    """The architecture to build a file's model from: its own, but a ``.py`` file or a module only
    when the caller names that code again (building it runs it).
    """
    if arch_kwargs and dict(arch_kwargs) != kwargs:
        raise DeepFaultError(f"{str(path)!r} records --arch-args {kwargs}; --arch-args {dict(arch_kwargs)} "
                             "contradicts them (leave --arch-args out for deepfault .pt files)")
    if not runs_user_code(recorded):
        if arch is not None and arch != recorded:
            raise DeepFaultError(f"{str(path)!r} is a deepfault model file of architecture {recorded!r}; "
                                 f"--arch {arch} contradicts it (leave --arch out for deepfault .pt files)")
        return recorded
    if arch is None:
        raise DeepFaultError(f"{str(path)!r} was built from your code {recorded!r}, and reading it runs that "
                             f"code; confirm with --arch {recorded} (or the file's new path, same class "
                             "name)")
    if not runs_user_code(arch) or not _same_code(recorded, arch):
        raise DeepFaultError(f"{str(path)!r} was built from {recorded!r}; --arch {arch} names other code "
                             f"(give --arch {recorded}, or the file's new path with the same class name)")
    return arch


#: How many keys of each kind a state_dict mismatch names (then "and N more").
MISMATCH_KEYS = 3


def state_dict_mismatch(model: nn.Module, state) -> str:
    """Why ``state`` does not load into ``model``, in whole key names: the first
    :data:`MISMATCH_KEYS` missing keys, unexpected keys and shape mismatches, each kind with how
    many more there are ("" where the keys and shapes all agree).

    Args:
        model: The module the weights are meant for.
        state: The state_dict (a mapping of names to tensors) that failed to load.
    """
    want = model.state_dict()
    have = dict(state)

    def named(kind: str, keys: list[str]) -> str:
        more = f" and {len(keys) - MISMATCH_KEYS} more" if len(keys) > MISMATCH_KEYS else ""
        return f"{kind} {', '.join(keys[:MISMATCH_KEYS])}{more}"

    def size(t) -> str:
        return "x".join(map(str, t.shape)) or "scalar"

    shapes = [f"{k} {size(have[k])} in the file but {size(want[k])} in the model"
              for k in want if k in have and hasattr(have[k], "shape") and have[k].shape != want[k].shape]
    parts = [named(kind, keys) for kind, keys in (
        ("missing keys", [k for k in want if k not in have]),
        ("unexpected keys", [k for k in have if k not in want]),
        ("shapes differ:", shapes)) if keys]
    return "; ".join(parts)


def check_build(name: str, kwargs: dict, state=None, *, misfit: str = "") -> None:
    """Check, before any memory is taken, that architecture ``name`` built with ``kwargs`` fits
    ``state`` (a state_dict; ``None``: no weights to fit) and the memory free here: it is built
    on the ``meta`` device first (:func:`meta_build`; a builder that cannot run there is not
    checked). ``{"hidden": 30000}`` grew past 4 GiB before the state_dict's mismatch was found.

    Args:
        name: The architecture (any form of :func:`build_model`).
        kwargs: Its keyword arguments (``--arch-args``).
        state: The weights it must take (names and shapes compared), or ``None``.
        misfit: The message's start when the weights do not fit (their mismatch follows).

    Raises:
        DeepFaultError: The weights' names or shapes differ (naming them), or the parameters
            and buffers need more memory than is free (giving both sizes).
    """
    from ..core.memory import check_fits, tensor_bytes

    skeleton = meta_build(name, **kwargs)
    if skeleton is None:
        return
    if state is not None:
        detail = state_dict_mismatch(skeleton, state)
        if detail:
            start = misfit or f"the weights do not fit architecture {name!r} with {kwargs}"
            raise DeepFaultError(f"{start}: {detail}")
    count = sum(p.numel() for p in skeleton.parameters())
    check_fits(tensor_bytes(skeleton), f"--arch {name!r} with --arch-args {kwargs} ({count:,} weights)",
               "give smaller --arch-args")


def load_model(path: str | os.PathLike, *, map_location: str | torch.device = "cpu", arch: str | None = None,
               arch_kwargs: dict | None = None) -> ModelFile:
    """Load a deepfault model file without unpickling arbitrary objects.

    Args:
        path: The file.
        map_location: Where its tensors go.
        arch: Needed only when the file's architecture is the user's code (``file.py:Class`` or
            ``module:factory``): the same code, named again, as consent to run it (a ``.py`` file
            may have moved: the same file and class name suffice). Otherwise it must be the
            file's own architecture or ``None``.
        arch_kwargs: ``None``, or the file's own architecture arguments.

    Raises:
        DeepFaultError: The file is missing, unreadable, not a deepfault model file, or its
            weights do not fit its architecture; or its architecture is code not named by ``arch``.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"model file {str(path)!r} does not exist; check the path")
    _check_crc(path)
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for corrupt or foreign files
        raise DeepFaultError(
            f"{str(path)!r} is not a readable deepfault model file ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else 'no detail'}); train one with "
            "'deepfault train' or check that the file is complete"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != MODEL_FILE_FORMAT:
        raise DeepFaultError(
            f"{str(path)!r} is not a deepfault model file (no {MODEL_FILE_FORMAT!r} marker); "
            "train one with 'deepfault train'"
        )
    _check_payload(path, payload)
    built_from = _arch_to_build(path, payload["arch"], arch, arch_kwargs, payload["arch_kwargs"])
    check_build(built_from, payload["arch_kwargs"], payload["state_dict"],
                misfit=f"the weights in {str(path)!r} do not fit architecture {payload['arch']!r}")
    model = build_model(built_from, **payload["arch_kwargs"])
    try:
        model.load_state_dict(payload["state_dict"])
    except RuntimeError as err:
        raise DeepFaultError(
            f"the weights in {str(path)!r} do not fit architecture {payload['arch']!r}: "
            f"{state_dict_mismatch(model, payload['state_dict']) or err}"
        ) from err
    model.eval()
    bounds = payload.get("bounds")
    mf = ModelFile(
        model=model,
        arch=canonical_arch(built_from),
        arch_kwargs=payload["arch_kwargs"],
        dataset=payload.get("dataset"),
        bounds=tuple(bounds) if bounds is not None else None,
        output_kind=payload.get("output_kind", "logits"),
        meta=payload.get("meta", {}),
    )
    warn_if_chance(mf, str(path))
    return mf


def training_finished(mf: ModelFile) -> bool:
    """Whether ``mf`` records a training that ran to its end: ``meta["training"]`` says it was not
    interrupted (a file written before ``finished`` was recorded counts by ``interrupted``).
    """
    training = mf.meta.get("training")
    if not isinstance(training, dict):
        return False
    return bool(training.get("finished", training.get("interrupted") is False))


def near_chance(mf: ModelFile) -> bool:
    """Whether ``mf``'s recorded test accuracy is at chance: below :data:`CHANCE_FACTOR` times one
    over its number of classes (``False`` when either is not recorded).
    """
    acc = mf.meta.get("test_accuracy")
    classes = mf.arch_kwargs.get("num_classes") or next(
        (m.out_features for m in reversed(list(mf.model.modules())) if isinstance(m, nn.Linear)), None)
    if not isinstance(acc, int | float) or math.isnan(acc) or not isinstance(classes, int) or classes < 2:
        return False
    return acc < CHANCE_FACTOR / classes


def warn_if_chance(mf: ModelFile, where: str) -> None:
    """Log a warning when ``mf`` (from ``where``, a path or name) is at chance (:func:`near_chance`):
    every result computed on it would describe a model that did not learn.
    """
    if near_chance(mf) and str(where) not in _WARNED:
        _WARNED.add(str(where))  # once per file and process: training it, then opening it, is one model
        log.warning("%s is at chance: its recorded test accuracy is %.4f; what is found in it means little. "
                    "Train it again ('deepfault train') or give a trained model", where,
                    mf.meta["test_accuracy"])


#: The files :func:`warn_if_chance` has warned of in this process.
_WARNED: set[str] = set()


def load_cached(path: Path, fits: Callable[[ModelFile], bool], log: logging.Logger, unreadable: str,
                *args: object) -> ModelFile | None:
    """The model file cached at ``path`` when it is there, readable and ``fits`` (made by the
    current recipe), else ``None`` for the caller to make it again.

    Args:
        path: The cache file.
        fits: Whether the loaded file is the one wanted (its ``meta`` names the recipe).
        log: The caller's logger, which warns of an unreadable file.
        unreadable: That warning, a ``%`` format whose last argument is the error.
        *args: The warning's other arguments.
    """
    if not path.is_file():
        return None
    try:
        mf = load_model(path)
    except DeepFaultError as err:
        log.warning(unreadable, *args, err)
        return None
    return mf if fits(mf) else None
