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
import functools
import inspect
import os
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator

import torch

from ..errors import DeepFaultError
from .threads import auto_threads

__all__ = ["THREADS_ENV", "applies_threads", "renamed", "renamed_fields", "resolve_threads", "use_threads"]

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
