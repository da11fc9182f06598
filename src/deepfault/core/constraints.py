"""Constraints declared once, as data on a config's fields (scikit-learn's parameter validation).

A config field says what it accepts where it is declared::

    @dataclass(frozen=True)
    class CoverageConfig:
        sections: int = param(10, Interval(int, 1, MAX_SECTIONS), help="k of kmnc")

and everything else is derived from that one declaration:

- the library's check: :func:`validate` (a config's ``__post_init__`` calls it), one line in
  :func:`deepfault.checks.error`'s shape naming the field (``sections must be an integer from
  1 to 100,000; got 0``);
- the command line's argument type (:meth:`FieldConstraint.parse`: text to a checked value, the
  same message with the option's name) and its help text (:meth:`FieldConstraint.describe`);
- the values the tests and the hostile-value probe try (:meth:`FieldConstraint.invalid`), so the
  API and the CLI refuse exactly the same values, and a new field is probed the day it is
  declared.

A field without a declaration is found by :func:`undeclared` (a test fails on one).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..checks import MAX_EPOCHS, MAX_GRID, MAX_LEARNING_RATE, MAX_SEED, MAX_WORKERS
from ..errors import DeepFaultError

__all__ = [
    "FieldConstraint", "Interval", "Options", "Flag", "Text", "Each", "Checked", "FilePath", "param",
    "constraint_of", "constraints",
    "undeclared", "validate", "param_of", "file_param", "Declared", "SEED", "EPOCHS", "LEARNING_RATE",
    "WORKERS", "GRID",
]

#: The metadata key a field's constraint is stored under.
KEY = "deepfault.constraint"


def _refuse(name: str, expected: str, value: object) -> DeepFaultError:
    shown = value if isinstance(value, str) and value.startswith("<") else repr(value)
    return DeepFaultError(f"{name} must be {expected}; got {shown}")


class FieldConstraint(ABC):
    """What one field accepts. Subclasses implement :meth:`accepts` (a value of the field's
    type), :meth:`convert` (text as typed on the command line to that value), :meth:`describe`
    (the expected value in words) and :meth:`invalid` (values it must refuse).
    """

    #: ``None`` is accepted too (the field's "not given").
    none: bool = False
    #: Literal words accepted beside the values (``"auto"``).
    words: tuple[str, ...] = ()
    #: What a value names on disk: ``"input"`` (files the run reads), ``"output"`` (files it
    #: writes) or ``None`` (no file). The guard's list of what a run reads comes from these
    #: declarations (:mod:`deepfault.core.guard`), so an option cannot be forgotten there.
    role: str | None = None

    def paths(self, value: Any) -> list[str]:
        """The paths ``value`` names when :attr:`role` is set: the text itself, or each text of a
        list (a value that is no path, such as a fitted object or a word, names none).
        """
        items = value if isinstance(value, (list, tuple)) else [value]
        return [os.fspath(v) for v in items if isinstance(v, (str, os.PathLike))
                and os.fspath(v).lower() not in self.words]

    @abstractmethod
    def accepts(self, value: Any) -> bool:
        """Whether ``value`` (not ``None``, not one of :attr:`words`) is allowed."""

    @abstractmethod
    def convert(self, text: str) -> Any:
        """``text`` as the field's type (``ValueError`` when it is none)."""

    @abstractmethod
    def expected(self) -> str:
        """The allowed values, not counting ``None`` and :attr:`words`."""

    @abstractmethod
    def hostile(self) -> tuple:
        """Values of the field's type it must refuse (boundaries, non-finite numbers, typos)."""

    def describe(self) -> str:
        """The allowed values in words: ``an integer from 1 to 100``, ``'auto' or ...``."""
        words = " or ".join(repr(w) for w in self.words)
        return f"{words} or {self.expected()}" if words else self.expected()

    def check(self, name: str, value: Any) -> Any:
        """``value`` when allowed; else :class:`~deepfault.errors.DeepFaultError` naming ``name``."""
        if value is None and self.none:
            return value
        if isinstance(value, str) and value.lower() in self.words:
            return value.lower()
        if value is not None and self.accepts(value):
            return value
        raise _refuse(name, self.describe(), value)

    def parse(self, name: str, text: str) -> Any:
        """Command-line ``text`` as a checked value, or the error :meth:`check` raises."""
        if text.strip().lower() in self.words:
            return text.strip().lower()
        try:
            value = self.convert(text)
        except ValueError:
            raise _refuse(name, self.describe(), text) from None
        return self.check(name, value)

    def invalid(self) -> tuple:
        """Values to refuse: :meth:`hostile`, and ``None`` where it is not allowed."""
        return (*self.hostile(), *(() if self.none else (None,)))


@dataclass(frozen=True)
class Interval(FieldConstraint):
    """A number of ``kind`` (``int`` or ``float``) between ``low`` and ``high`` (``None``:
    unbounded), ends included unless ``closed`` leaves them out. Bools are no numbers;
    floats must be finite.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    closed: Literal["both", "left", "right", "neither"] = "both"
    none: bool = False
    words: tuple[str, ...] = ()

    def __post_init__(self):
        if self.kind not in (int, float):
            raise TypeError(f"Interval kind must be int or float, not {self.kind!r}")

    def _low_ok(self, v) -> bool:
        return self.low is None or (v >= self.low if self.closed in ("both", "left") else v > self.low)

    def _high_ok(self, v) -> bool:
        return self.high is None or (v <= self.high if self.closed in ("both", "right") else v < self.high)

    def accepts(self, value) -> bool:
        if isinstance(value, bool):
            return False
        if self.kind is int:
            if not isinstance(value, numbers.Integral):
                return False
        elif not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            return False
        return self._low_ok(value) and self._high_ok(value)

    def convert(self, text: str):
        value = float(text) if self.kind is float else int(text.strip())
        if self.kind is float and not math.isfinite(value):
            raise ValueError(text)
        return value

    def expected(self) -> str:
        noun = "an integer" if self.kind is int else "a number"

        def show(v):
            return f"{v:,}" if self.kind is int else f"{v:g}"

        lo, hi = self.low, self.high
        if lo is not None and hi is not None and self.closed == "both":
            return f"{noun} from {show(lo)} to {show(hi)}"
        parts = []
        if lo is not None:
            parts.append(f"{'>=' if self.closed in ('both', 'left') else '>'} {show(lo)}")
        if hi is not None:
            parts.append(f"{'<=' if self.closed in ('both', 'right') else '<'} {show(hi)}")
        if not parts:
            return "a finite number" if self.kind is float else noun
        return f"{noun} {' and '.join(parts)}"

    def hostile(self) -> tuple:
        out: list = []

        def beyond(edge, sign: int, closed: bool):  # the first value past an end, or the end left out
            if not closed:
                return edge
            return edge + sign * (1 if self.kind is int else max(abs(edge) * 1e-3, 1e-3))

        if self.low is not None:
            out.append(beyond(self.kind(self.low), -1, self.closed in ("both", "left")))
        if self.high is not None:
            out.append(beyond(self.kind(self.high), 1, self.closed in ("both", "right")))
        if self.kind is float:
            out += [math.nan, math.inf]
        else:
            out.append(1.5)
        out.append(True)
        return tuple(out)


@dataclass(frozen=True)
class Options(FieldConstraint):
    """One name of ``choices`` (a tuple, or a registry's listing function, called when checked),
    or with ``many`` a comma-separated text, list or tuple of them (``"all"`` among ``words``
    means every one).
    """

    choices: tuple[str, ...] | Callable[[], Iterable[str]]
    many: bool = False
    none: bool = False
    words: tuple[str, ...] = ()

    def names(self) -> list[str]:
        """The allowed names now (a registry may grow)."""
        return list(self.choices() if callable(self.choices) else self.choices)

    def _items(self, value) -> list | None:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",")] if self.many else [value]
        if self.many and isinstance(value, (list, tuple)) and value:
            return list(value)
        return None

    def accepts(self, value) -> bool:
        items = self._items(value)
        known = self.names()
        return items is not None and all(isinstance(i, str) and i in known for i in items)

    def check(self, name: str, value):
        items = self._items(value) if value is not None else None
        if items is not None and not self.accepts(value) and not (
                isinstance(value, str) and value.lower() in self.words):
            from .registry import suggestion  # noqa: PLC0415  (one did-you-mean for every name)

            bad = next(i for i in items if not isinstance(i, str) or i not in self.names())
            raise DeepFaultError(f"{name} must be {self.describe()}; got {bad!r}"
                                 + suggestion(str(bad), self.names()))
        return super().check(name, value)

    def convert(self, text: str):
        return tuple(t.strip() for t in text.split(",")) if self.many else text.strip()

    def expected(self) -> str:
        listing = ", ".join(self.names())
        return f"{'names' if self.many else 'one'} of {listing}"

    def hostile(self) -> tuple:
        names = self.names()
        typo = (names[0][:-1] + "x") if names and names[0] else "nosuch"
        return ("nosuch", typo if typo not in names else "nosuch2", "")


@dataclass(frozen=True)
class Flag(FieldConstraint):
    """``True`` or ``False``."""

    none: bool = False
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        return isinstance(value, bool)

    def convert(self, text: str) -> bool:
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(text)

    def expected(self) -> str:
        return "True or False"

    def hostile(self) -> tuple:
        return (2, "yes")


@dataclass(frozen=True)
class Text(FieldConstraint):
    """A non-empty text without NUL (names checked later against a model or a file system:
    layer names, a campaign's name), at most ``max_length`` characters.
    """

    max_length: int = 4096
    none: bool = False
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        return isinstance(value, str) and 0 < len(value) <= self.max_length and "\x00" not in value

    def convert(self, text: str) -> str:
        return text

    def expected(self) -> str:
        return f"a non-empty text of at most {self.max_length:,} characters"

    def hostile(self) -> tuple:
        return ("", "a\x00b", 7)


@dataclass(frozen=True)
class Each(FieldConstraint):
    """A tuple (or list) of 1 to ``max_items`` values, each allowed by ``item``; on the command
    line a comma-separated text.
    """

    item: FieldConstraint
    max_items: int = 1 << 20
    none: bool = False
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return False
        if not 0 < len(value) <= self.max_items:
            return False
        return all(v is not None and self.item.accepts(v) for v in value)

    def convert(self, text: str) -> tuple:
        return tuple(self.item.convert(t) for t in text.split(","))

    def expected(self) -> str:
        return f"one or more (at most {self.max_items:,}) of: {self.item.expected()}"

    def hostile(self) -> tuple:
        typed = next((str(v) for v in self.item.hostile() if isinstance(v, (str, int, float))
                      and not isinstance(v, bool)), "")
        return ((), tuple(self.item.hostile()[:1]), f"x,{typed}")  # a list with one bad item


@dataclass(frozen=True)
class Checked(FieldConstraint):
    """A value ``test(name, value)`` accepts (returning it, converted); ``test`` raises
    :class:`~deepfault.errors.DeepFaultError` in its own words, naming ``name``, for any other:
    checks with more to say than one range (a budget, a size, a fidelity spec, a grid's name).
    ``what`` describes the allowed values; ``bad`` are values it must refuse.
    """

    test: Callable[[str, Any], Any]
    what: str
    bad: tuple = ()
    none: bool = False
    words: tuple[str, ...] = ()
    role: str | None = None
    #: The files a value names, when it names some inside a longer text (``dsa::state.npz``).
    names: Callable[[str], list[str]] | None = None

    def paths(self, value: Any) -> list[str]:
        if self.names is None or not isinstance(value, str):
            return super().paths(value)
        return self.names(value)

    def accepts(self, value) -> bool:
        try:
            self.test("value", value)
        except DeepFaultError:
            return False
        return True

    def check(self, name: str, value):
        if value is None and self.none:
            return value
        return self.test(name, value)

    def convert(self, text: str):
        return text

    def expected(self) -> str:
        return self.what

    def hostile(self) -> tuple:
        return self.bad


@dataclass(frozen=True)
class FilePath(FieldConstraint):
    """The path of a file (or, with ``folder``, a folder) that the run reads (``role="input"``)
    or writes (``role="output"``): a non-empty name without NUL. ``names(text)`` lists the paths
    a value names when that is not the text itself (``net.py:Net`` reads ``net.py``; a Keras stem
    ``m`` reads ``m.json`` and ``m.h5``); ``many`` takes a comma-separated list.
    """

    role: str | None = "input"
    folder: bool = False
    many: bool = False
    names: Callable[[str], list[str]] | None = None
    none: bool = True
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        items = value if self.many and isinstance(value, (list, tuple)) else [value]
        return all(isinstance(v, (str, os.PathLike)) and len(os.fspath(v)) > 0 and "\x00" not in os.fspath(v)
                   for v in items) and len(items) > 0

    def convert(self, text: str):
        return tuple(p.strip() for p in text.split(",") if p.strip()) if self.many else text

    def expected(self) -> str:
        what = "folder" if self.folder else "file"
        return f"a comma-separated list of {what} names" if self.many else f"a {what} name"

    def hostile(self) -> tuple:
        return ("", "a\x00b", 3)

    def paths(self, value: Any) -> list[str]:
        found = super().paths(value)
        if self.many:  # ``a.pt,b.pt`` typed as one text
            found = [p.strip() for f in found for p in ([f] if os.path.lexists(f) else f.split(","))]
            found = [f for f in found if f]
        return [n for f in found for n in (self.names(f) if self.names else [f])]


def param(default: Any, constraint: FieldConstraint, *, help: str = "", option: str | None = None,
          metavar: str | None = None, plain_help: bool = False) -> Any:
    """A dataclass field with its ``default``, its :class:`FieldConstraint`, the help text the
    command line shows, the option that sets it (``--step-size``; default: the field's name
    with dashes) and, where the constraint's is too general, its metavar (``N``, ``FILE``,
    ``JSON``). The command line's help is ``help`` followed by the constraint's words
    (:meth:`FieldConstraint.describe`), or ``help`` alone with ``plain_help`` (it says what the
    value is itself). A mutable default is not allowed (configs are frozen values).
    """
    meta = {KEY: constraint, "help": help, "option": option, "metavar": metavar, "plain_help": plain_help}
    return dataclasses.field(default=default, metadata=meta)


def file_param(default: Any, help: str, *, role: str = "output", metavar: str = "FILE", **path: Any) -> Any:
    """:func:`param` of a field naming a file (or, with ``folder=True``, a folder) that a run reads
    (``role="input"``) or writes (``"output"``): a :class:`FilePath` (``path``: its other options),
    shown as ``metavar``, its ``help`` saying what the value is itself (``plain_help``).
    """
    return param(default, FilePath(role, **path), metavar=metavar, plain_help=True, help=help)


class Declared:
    """Base of a frozen dataclass whose declared fields are checked when it is made
    (:func:`validate`; a subclass that converts a field first calls it itself).
    """

    def __post_init__(self):
        validate(self)


def param_of(cls_or_obj, name: str, **changes: Any) -> Any:
    """A dataclass field declared as ``cls_or_obj``'s field ``name`` is (its default, constraint,
    help, option and metavar: one declaration for two configs that take the same setting), with
    ``changes`` (``help=``, ``default=``) in place.
    """
    found = next(f for f in dataclasses.fields(cls_or_obj) if f.name == name)
    meta = {**found.metadata, **{k: v for k, v in changes.items() if k != "default"}}
    return dataclasses.field(default=changes.get("default", found.default), metadata=meta)


def constraint_of(cls_or_obj, name: str) -> FieldConstraint:
    """The constraint declared on field ``name`` (``KeyError`` when none is)."""
    for f in dataclasses.fields(cls_or_obj):
        if f.name == name and KEY in f.metadata:
            return f.metadata[KEY]
    raise KeyError(name)


def constraints(cls_or_obj) -> dict[str, FieldConstraint]:
    """``field name -> constraint`` of every declared field of a config class or object."""
    return {f.name: f.metadata[KEY] for f in dataclasses.fields(cls_or_obj) if KEY in f.metadata}


def option_of(cls_or_obj, name: str) -> str:
    """The command-line option that sets field ``name`` (declared, or ``--name-with-dashes``)."""
    for f in dataclasses.fields(cls_or_obj):
        if f.name == name:
            return f.metadata.get("option") or "--" + name.replace("_", "-")
    raise KeyError(name)


def undeclared(cls_or_obj) -> list[str]:
    """Fields that declare no constraint (a test fails on any, for every config)."""
    return [f.name for f in dataclasses.fields(cls_or_obj) if KEY not in f.metadata]


def validate(obj, *, names: dict[str, str] | None = None) -> None:
    """Check every declared field of the dataclass ``obj`` against its constraint, in field
    order; the first refusal raises, naming the field (or ``names[field]``, e.g. the CLI's
    option) as :func:`deepfault.checks.error` does.
    """
    for f in dataclasses.fields(obj):
        c = f.metadata.get(KEY)
        if c is not None:
            c.check((names or {}).get(f.name, f.name), getattr(obj, f.name))


# --- declarations many configs share (one object each, so one value per limit) ------------------

#: Every random seed: a 64-bit integer >= 0.
SEED = Interval(int, 0, MAX_SEED)
#: Passes of training or fine-tuning over a data set.
EPOCHS = Interval(int, 1, MAX_EPOCHS)
#: Adam's learning rate (larger ones only diverge).
LEARNING_RATE = Interval(float, 0.0, MAX_LEARNING_RATE, closed="right")
#: Parallel workers of an executor (processes or Ray CPUs).
WORKERS = Interval(int, 1, MAX_WORKERS)
#: Images in an image grid (``--grid``).
GRID = Interval(int, 1, MAX_GRID)
