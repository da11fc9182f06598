"""What every public entry point does the same way: the CLI's names, its thread rule.

- :func:`renamed` / :func:`renamed_fields`: an argument (a config field) takes the name of
  its command-line option (``measure=`` for ``--measure``, ``step_size=`` for
  ``--step-size``); the old name still works and warns (:class:`FutureWarning`, shown by
  default: the API's users are people's scripts and notebooks, not only libraries).
- :func:`applies_threads`: the entry point's ``threads=`` argument, with the CLI's rule
  (``--threads auto``, :func:`~.threads.auto_threads`), applied for the call and restored
  afterwards. Only a call from outside the package applies it: an entry point called by
  another, by the command line or by an experiment's worker keeps the thread count its
  caller chose (``--threads``, one thread per worker).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import inspect
import os
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import DeepFaultError
from .runtime import RUNTIME_FIELDS, Runtime
from .threads import auto_threads

__all__ = ["THREADS_ENV", "applies_threads", "entry", "split_arguments", "renamed", "renamed_fields",
           "resolve_threads", "use_threads", "thread_count", "apply_threads"]

#: Environment variable that sets the default of every entry point's ``threads=`` (``auto``,
#: a count, or ``none`` for PyTorch's own setting); unset means ``auto``.
THREADS_ENV = "DEEPFAULT_THREADS"

#: Seconds an ``auto`` thread count is reused for the same models (a loop of short calls).
AUTO_REUSE = 2.0
_last_auto: list = []

_applied: contextvars.ContextVar[bool] = contextvars.ContextVar("deepfault_threads_applied", default=False)


def _warn(owner: str, old: str, new: str) -> None:
    warnings.warn(f"{owner}({old}=...) is deprecated: use {new}=..., the name of the command line's "
                  f"--{new.replace('_', '-')}", FutureWarning, stacklevel=3)


def _translate(owner: str, renames: dict[str, str], kwargs: dict) -> dict:
    for old, new in renames.items():
        if old in kwargs:
            if new in kwargs:
                raise DeepFaultError(f"{owner}: give {new}= only ({old}= is its deprecated old name)")
            _warn(owner, old, new)
            kwargs[new] = kwargs.pop(old)
    return kwargs


def renamed(**renames: str) -> Callable:
    """Accept each ``old=`` keyword of the decorated function as its new name, with a
    :class:`FutureWarning` (``@renamed(step="step_size")``).
    """
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            return fn(*args, **_translate(fn.__name__, renames, kwargs))

        inner.__deprecated_names__ = dict(renames)  # type: ignore[attr-defined]
        return inner
    return wrap


def _read(obj, *, name: str):
    return getattr(obj, name)


def renamed_fields(**renames: str) -> Callable:
    """A dataclass decorator: the constructor (and :func:`dataclasses.replace`) accepts each
    ``old=`` as the field ``new`` with a :class:`FutureWarning`; ``obj.old`` still reads
    ``obj.new`` (silently: result files and the code that reads them keep the old word).
    """
    def wrap(cls):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **_translate(cls.__name__, renames, kwargs))

        cls.__init__ = __init__
        for old, new in renames.items():
            if old in cls.__dict__:  # the class declares the alias itself (typed, for mypy)
                continue
            setattr(cls, old, property(functools.partial(_read, name=new),
                                       doc=f"The deprecated name of :attr:`{new}`."))
        cls.__deprecated_names__ = dict(renames)
        return cls
    return wrap


def resolve_threads(value: int | str | None, models=(), device="cpu") -> int | None:
    """The thread count ``threads=`` asks for, by the CLI's rule: a count as given; ``auto``:
    the free cores for small models on the CPU (:func:`~.threads.auto_threads`), else
    PyTorch's setting; ``None``: PyTorch's setting (returned as ``None``).

    Raises:
        DeepFaultError: Neither a positive count, ``"auto"`` nor ``None``.
    """
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    if isinstance(value, str) and value.lower() == "auto":
        if not models:
            return None
        # auto_threads samples the machine's load for ~40 ms: a loop of short calls reuses the
        # answer for AUTO_REUSE seconds
        key = (tuple(id(m) for m in models), str(device))
        now = time.monotonic()
        if _last_auto and _last_auto[0] == key and now - _last_auto[1] < AUTO_REUSE:
            return _last_auto[2]
        auto = auto_threads(list(models), device)
        _last_auto[:] = [key, now, auto]
        return auto
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise DeepFaultError(f"threads must be a positive count, 'auto' or None; got {value!r}")
    try:
        count = int(value)
    except ValueError:
        raise DeepFaultError(f"threads must be a positive count, 'auto' or None; got {value!r}") from None
    if count < 1:
        raise DeepFaultError(f"threads must be a positive count, 'auto' or None; got {value!r}")
    return count


def thread_count(value: int | str | None, models=(), device="cpu") -> int:
    """The thread count a ``threads`` setting asks for (:func:`resolve_threads`), else PyTorch's
    current setting.
    """
    return resolve_threads(value, models, device) or torch.get_num_threads()


def apply_threads(value: int | str | None, models=(), device="cpu") -> int:
    """``torch.set_num_threads`` per a ``threads`` setting (:func:`thread_count`) for the whole
    process, before the work (the command line's); returns the count now in effect.
    """
    count = thread_count(value, models, device)
    if count != torch.get_num_threads():
        torch.set_num_threads(count)
    return count


@contextlib.contextmanager
def use_threads(value: int | str | None, models=(), device="cpu") -> Iterator[int]:
    """``torch.set_num_threads`` per :func:`resolve_threads` for the ``with`` block, restored
    afterwards; yields the count in effect. Inside another ``use_threads`` block nothing
    changes (the outermost entry point decides).
    """
    before = torch.get_num_threads()
    if _applied.get():
        yield before
        return
    count = resolve_threads(value, models, device)
    token = _applied.set(True)
    try:
        if count is not None and count != before:
            torch.set_num_threads(count)
        yield torch.get_num_threads()
    finally:
        _applied.reset(token)
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def default_threads() -> int | str | None:
    """The default of ``threads=``: :data:`THREADS_ENV` when set, else ``"auto"``."""
    return os.environ.get(THREADS_ENV, "auto") or "auto"


def _called_from_deepfault() -> bool:
    """Whether the entry point's caller is deepfault's own code (this module's wrappers skipped)."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    name = "" if frame is None else str(frame.f_globals.get("__name__", ""))
    return name == "deepfault" or name.startswith("deepfault.")


def _modules(value) -> list:
    items = value if isinstance(value, list | tuple) else [value]
    out = []
    for m in items:
        m = getattr(m, "module", m)  # a prepared model
        if isinstance(m, torch.nn.Module):
            out.append(m)
    return out


def applies_threads(fn):
    """Run the decorated entry point under its ``threads=`` argument (:func:`use_threads`).

    The function declares ``threads: int | str | None = "auto"``; its models are its first
    argument (a model or a sequence of models). ``"auto"`` follows :data:`THREADS_ENV` when
    that is set.
    """
    sig = inspect.signature(fn)
    if "threads" not in sig.parameters:
        raise TypeError(f"{fn.__name__} has no threads parameter")

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        if _called_from_deepfault():
            return fn(*args, **kwargs)
        value = kwargs.get("threads", "auto")
        if value == "auto":
            value = default_threads()
        models = _modules(args[0]) if args else _modules(next(iter(kwargs.values()), None))
        device = "cpu"
        for m in models:
            p = next(m.parameters(), None)
            if p is not None:
                device = p.device
                break
        with use_threads(value, models, device):
            return fn(*args, **kwargs)

    return inner


# --- the one call shape ---------------------------------------------------------------------------

#: ``legacy(name, config_fields, args, kwargs) -> (models, data, config_keywords, runtime_keywords)``
#: of an entry: how its old form maps onto the one shape (the method knows its old arguments;
#: :func:`split_arguments` is the usual part of it).
Legacy = Callable[[str, set, tuple, dict], tuple[Any, Any, dict, dict]]


def split_arguments(name: str, fields: set, args: tuple, kwargs: dict) -> tuple[Any, Any, dict, dict]:
    """``(models, data, config keywords, runtime keywords)`` of a call ``name(models, data,
    **keywords)``: each keyword that names a config field goes to the config, each runtime field
    to the runtime; any other is a ``TypeError`` that shows the one shape.
    """
    if not args:
        raise TypeError(f"{name}() needs the model (or models) as its first argument")
    models, obj = args[0], (args[1] if len(args) > 1 else kwargs.pop("data", None))
    config_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
    runtime_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in RUNTIME_FIELDS}
    if kwargs:
        raise TypeError(f"{name}() got unexpected keyword arguments: {', '.join(sorted(kwargs))} "
                        f"(the one shape: {name}(model, data, config, runtime=...))")
    return models, obj, config_kw, runtime_kw


def entry(config_type: type[Any], *, data: Callable[[Any], Any] | None = None, legacy: Legacy | None = None):
    """Make the decorated ``fn(models, data, config, *, runtime)`` a method's public entry.

    What every entry did by hand, done once (foolbox's final ``Attack.__call__``):

    - the config: ``None`` is ``config_type()``; anything but a ``config_type`` is refused in
      one line;
    - the runtime: ``None`` is :class:`~.runtime.Runtime` ``()``;
    - the data: ``data(obj)`` coerces it where the method needs one form (a data-set name or
      ``.npz`` path to a :class:`~deepfault.data.Dataset`, ...); tensors, arrays, ``(inputs,
      labels)`` pairs and ``DataLoader`` objects are otherwise passed on as they are;
    - the old keyword forms (``measure_coverage(model, x, criteria="nc", batch_size=32)``) keep
      working for one release with a :class:`FutureWarning`: a config field given as a keyword
      goes into the config, a runtime field into the runtime, and ``legacy`` maps the rest;
    - the threads: ``runtime.threads`` is applied for the call by the CLI's rule (only for a
      call from outside the package; :func:`applies_threads`).

    The decorated function sees ``(models, data, config, runtime=runtime)`` with each in its
    one form, and returns the method's outcome.
    """
    fields = {f.name for f in dataclasses.fields(config_type)}

    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            config = kwargs.pop("config", None)
            runtime = kwargs.pop("runtime", None)
            if len(args) > 2:
                config, args = (args[2] if config is None else config), args[:2]
            split = legacy if legacy is not None else split_arguments
            models, obj, config_kw, runtime_kw = split(fn.__name__, fields, args, kwargs)
            if config_kw or runtime_kw:
                _warn_shape(fn.__name__, config_type.__name__, config_kw, runtime_kw)
            config = _settings(f"{fn.__name__}: config must be a {config_type.__name__}", config_type, config,
                               config_kw)
            runtime = _settings(f"{fn.__name__}: runtime must be a deepfault Runtime", Runtime, runtime,
                                runtime_kw)
            if data is not None:
                obj = data(obj)
            if _called_from_deepfault():
                return fn(models, obj, config, runtime=runtime)
            threads = default_threads() if runtime.threads == "auto" else runtime.threads
            found = _modules(models)
            device = runtime.device or _device_of(found)
            with use_threads(threads, found, device):
                return fn(models, obj, config, runtime=runtime)

        inner.__entry__ = (config_type, Runtime)  # type: ignore[attr-defined]
        return inner
    return wrap


def _settings(refusal: str, kind: type[Any], given: Any, changes: dict) -> Any:
    """``given`` (a ``kind``: a config or the runtime) with the old keywords' ``changes``, or
    ``kind(**changes)`` when none was given; anything else is refused in one line (``refusal``,
    then what was given).
    """
    if given is None:
        return kind(**changes)
    if not isinstance(given, kind):
        raise DeepFaultError(f"{refusal}; got {type(given).__name__}")
    return dataclasses.replace(given, **changes) if changes else given


def _warn_shape(name: str, config_name: str, config_kw: dict, runtime_kw: dict) -> None:
    parts = []
    if config_kw:
        parts.append(f"config={config_name}({', '.join(f'{k}=...' for k in config_kw)})")
    if runtime_kw:
        parts.append(f"runtime=Runtime({', '.join(f'{k}=...' for k in runtime_kw)})")
    warnings.warn(f"{name}(..., {', '.join(f'{k}=' for k in (*config_kw, *runtime_kw))}...) is deprecated: "
                  f"pass {' and '.join(parts)}", FutureWarning, stacklevel=3)


def _device_of(modules: list) -> str | torch.device:
    for m in modules:
        p = next(m.parameters(), None)
        if p is not None:
            return p.device
    return "cpu"
