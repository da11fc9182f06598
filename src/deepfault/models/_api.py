"""The architecture registry, apart from its entries (torchvision's ``models/_api.py``), and the
other ways ``--arch`` names a network.

The entries live in their own modules (:mod:`.zoo` for the classifiers, :mod:`.dcgan` for the
GAN parts), which import :func:`register_architecture` from here; ``deepfault.models``
imports them so that the decorators have run before anyone looks a name up. This module
imports no entry, so no entry module can form a cycle with it.

An architecture (``arch``, ``--arch``) is one of:

| form | what is built | runs the user's code |
| --- | --- | --- |
| ``lenet5`` (a zoo name) | the zoo's builder | no |
| ``path/to/file.py:ClassName`` | the class (or function) of that file | yes: the file runs |
| ``package.module:factory`` | an importable module's class or function | yes: the module runs |
| ``torchvision:resnet18`` | ``torchvision.models.get_model(name, weights=None)`` | no (extra ``vision``) |
| ``timm:vit_tiny_patch16_224`` | ``timm.create_model(name, pretrained=False)`` | no (extra ``vision``) |

Each is called with the architecture's keyword arguments (``arch_kwargs``, ``--arch-args``)
and must return an ``nn.Module``. No weights are ever downloaded: the weights come from the
user's file. A ``.py`` file runs with its own folder importable (so it can import its
siblings), a module with the current directory importable, as ``python -m`` would.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from ..core.registry import Registry, unknown_name
from ..errors import DeepFaultError

__all__ = ["ARCHITECTURES", "register_architecture", "build_model", "list_architectures", "arch_kind",
           "arch_files", "runs_user_code", "canonical_arch", "ARCH_FORMS", "TORCH_WHEELS", "vision_install",
           "meta_build"]

#: Every zoo architecture, by name (``--arch``).
ARCHITECTURES: Registry[Callable[..., nn.Module]] = Registry("architecture")

#: The forms of ``--arch`` besides a zoo name, for messages.
ARCH_FORMS = "file.py:ClassName, package.module:factory, torchvision:NAME or timm:NAME"

#: The libraries whose model names ``LIB:NAME`` builds, and the extra that installs them.
_LIBRARIES = {"torchvision": "vision", "timm": "vision"}


def register_architecture(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Decorator registering ``builder(**kwargs) -> nn.Module`` under ``name``."""

    def add(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        ARCHITECTURES.register(name, builder)
        return builder

    return add


def list_architectures() -> list[str]:
    """The names of the registered zoo architectures."""
    return ARCHITECTURES.names()


def _split(spec: str) -> tuple[str, str]:
    """``(where, name)`` of ``where:name``, split at the last colon (a Windows drive keeps its own)."""
    where, _, name = spec.rpartition(":")
    return where, name


def arch_kind(spec: str) -> str:
    """Which form ``spec`` is: ``"zoo"``, ``"file"``, ``"module"``, ``"torchvision"`` or ``"timm"``.

    Raises:
        DeepFaultError: ``spec`` is none of the forms (an unknown zoo name, an empty part).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise DeepFaultError(f"--arch must be a zoo name or {ARCH_FORMS}; got {spec!r}")
    if spec in ARCHITECTURES:
        return "zoo"
    where, name = _split(spec)
    if not where:
        raise DeepFaultError(f"{unknown_name('architecture', spec, list_architectures())}, or {ARCH_FORMS}")
    if not name or not all(part.isidentifier() for part in name.split(".")):
        raise DeepFaultError(f"--arch {spec!r}: {name!r} after the colon must name a class or function "
                             "(e.g. mynet.py:Net)")
    if where in _LIBRARIES:
        return where
    if where.endswith(".py") or os.sep in where or "/" in where:
        return "file"
    if not all(part.isidentifier() for part in where.split(".")):
        raise DeepFaultError(f"--arch {spec!r}: {where!r} is neither a .py file nor an importable module "
                             "name")
    return "module"


def arch_files(spec: str) -> list[str]:
    """The file an architecture spec reads: ``[net.py]`` for ``net.py:Net``, else none (a zoo
    name, a module or a library names no file; a malformed spec is refused when it is built).
    """
    try:
        return [_split(spec)[0]] if arch_kind(spec) == "file" else []
    except DeepFaultError:
        return []


def runs_user_code(spec: str) -> bool:
    """Whether building ``spec`` runs code outside deepfault and the installed libraries (a
    ``.py`` file or a module named by the user).
    """
    return arch_kind(spec) in ("file", "module")


def canonical_arch(spec: str) -> str:
    """``spec`` as a model file records it: a ``.py`` file's path made absolute (a model file is
    read from other folders than the one it was written in), every other form as it is.
    """
    if arch_kind(spec) != "file":
        return spec
    where, name = _split(spec)
    return f"{Path(where).expanduser().resolve()}:{name}"


@contextlib.contextmanager
def importable(folder: str | os.PathLike) -> Iterator[None]:
    """``folder`` first on ``sys.path`` for a ``with`` block (removed afterwards, also on errors)."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(entry)


#: Modules already run from ``.py`` files: resolved path -> (modification time, module).
_FILES: dict[Path, tuple[int, object]] = {}


def _run_file(where: str) -> object:
    path = Path(where).expanduser()
    if not path.is_file():
        raise DeepFaultError(f"--arch: file {where!r} does not exist (looked in {Path.cwd()}); check the "
                             "path")
    resolved = path.resolve()
    mtime = resolved.stat().st_mtime_ns
    cached = _FILES.get(resolved)
    if cached is not None and cached[0] == mtime:
        return cached[1]
    tag = hashlib.sha256(str(resolved).encode()).hexdigest()[:8]
    stem = re.sub(r"\W", "_", resolved.stem)
    name = f"_deepfault_arch_{stem}_{tag}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise DeepFaultError(f"--arch: {where!r} cannot be imported as Python code; give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        with importable(resolved.parent):
            spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise DeepFaultError(f"--arch: running {where!r} failed: {type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")) from err
    _FILES[resolved] = (mtime, module)
    return module


def _import_module(where: str) -> object:
    try:
        with importable(Path.cwd()):
            return importlib.import_module(where)
    except ModuleNotFoundError as err:
        raise DeepFaultError(f"--arch: no module named {err.name or where!r} (importing {where!r} from "
                             f"{Path.cwd()} and the installed packages); give a file instead "
                             "(path/to/file.py:Name) or install the package") from err
    except Exception as err:
        raise DeepFaultError(f"--arch: importing {where!r} failed: {type(err).__name__}: "
                             f"{str(err).splitlines()[0] if str(err) else ''}") from err


#: Where PyTorch publishes the wheels of each build (``cpu``, ``cu121``, ...): one torchvision per torch.
TORCH_WHEELS = "https://download.pytorch.org/whl/"


def vision_install(torch_version: str | None = None) -> str:
    """The command that installs the ``vision`` extra beside the installed torch.

    PyPI's torchvision wheels are built for PyPI's torch; beside a torch of another build (a
    local version such as ``2.13.0+cpu``, from PyTorch's own index) they do not import. For
    such a torch the command first installs the torchvision of the same build from that index,
    with torch pinned so that pip picks the matching release and keeps the torch there is.

    Args:
        torch_version: ``torch.__version__`` (default: the installed one's).
    """
    version = torch.__version__ if torch_version is None else torch_version
    extra = "pip install -e '.[vision]'"
    if "+" not in version:
        return extra
    build = version.split("+", 1)[1]
    return f"pip install torchvision 'torch=={version}' --index-url {TORCH_WHEELS}{build}, then {extra}"


def _library(lib: str, name: str, kwargs: dict) -> nn.Module:
    try:
        module = importlib.import_module(lib)
    except Exception as err:  # noqa: BLE001 - a torchvision built for another torch raises RuntimeError
        reason = ("it is not installed" if isinstance(err, ModuleNotFoundError)
                  else f"it does not import beside torch {torch.__version__} here ({type(err).__name__}: "
                  f"{str(err).splitlines()[0] if str(err) else ''}; it was built for another torch)")
        raise DeepFaultError(f"--arch {lib}:{name} needs {lib}, and {reason}; {vision_install()}, or give "
                             "the class itself (--arch file.py:Class)") from err
    try:
        if lib == "torchvision":
            known = module.models.list_models()
            if name not in known:
                raise DeepFaultError(f"--arch torchvision:{name}: torchvision has no model {name!r}; known: "
                                     f"{', '.join(known[:12])}, ... (torchvision.models.list_models())")
            return module.models.get_model(name, weights=None, **kwargs)
        if not module.is_model(name):
            raise DeepFaultError(f"--arch timm:{name}: timm has no model {name!r}; see timm.list_models()")
        return module.create_model(name, pretrained=False, **kwargs)
    except TypeError as err:
        raise DeepFaultError(f"--arch {lib}:{name} cannot be built with --arch-args {kwargs}: {err}") from err


def _target(spec: str, kind: str) -> Callable[..., object]:
    where, name = _split(spec)
    holder = _run_file(where) if kind == "file" else _import_module(where)
    obj: object = holder
    for part in name.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n, v in vars(holder).items()
                            if not n.startswith("_") and isinstance(v, type) and issubclass(v, nn.Module))
            raise DeepFaultError(f"--arch: {where!r} has no {name!r}; its nn.Module classes: "
                                 f"{', '.join(public) or 'none'}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise DeepFaultError(f"--arch {spec!r}: {name!r} is a {type(obj).__name__}, not a class or function")
    return obj


def build_model(name: str, **kwargs) -> nn.Module:
    """A freshly initialised model of architecture ``name``, in any form of the module's table
    (initialised from the global RNG; seed it with ``torch.random.fork_rng`` for reproducible
    weights). A ``.py`` file or a module runs the user's code: that is what naming it asks for.

    Raises:
        DeepFaultError: An unknown name, a missing file, module, class or extra, arguments the
            constructor refuses, or a result that is not an ``nn.Module``; one line each.
    """
    kind = arch_kind(name)
    if kind == "zoo":
        return ARCHITECTURES.get(name)(**kwargs)
    model: object
    if kind in _LIBRARIES:
        model = _library(kind, _split(name)[1], kwargs)
    else:
        target = _target(name, kind)
        try:
            model = target(**kwargs)
        except TypeError as err:
            raise DeepFaultError(f"--arch {name!r} cannot be built with --arch-args {kwargs}: {err}") from err
        except DeepFaultError:
            raise
        except Exception as err:
            raise DeepFaultError(f"--arch {name!r}: building it raised {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}") from err
    if not isinstance(model, nn.Module):
        raise DeepFaultError(f"--arch {name!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def meta_build(name: str, **kwargs) -> nn.Module | None:
    """Architecture ``name`` built on the ``meta`` device: its parameters' shapes and dtypes,
    with no memory taken; ``None`` where the builder cannot run there (an initialisation that
    reads values, a library that builds on a device of its own) or fails (the real build then
    says why, as it always did). The global RNG is untouched.
    """
    try:
        with torch.device("meta"), torch.random.fork_rng(devices=[]):
            skeleton = build_model(name, **kwargs)
    except Exception:  # noqa: BLE001 - the real build tells, or works
        return None
    if any(t.device.type != "meta" for t in (*skeleton.parameters(), *skeleton.buffers())):
        return None  # built on a device of its own: its memory is taken already
    return skeleton

