"""One small registry for every extension point.

Methods, presets, measures and baselines, model file formats, data sets, zoo
architectures, coverage criteria, mutation rules, fuzz strategies and executors are all looked up by name
in a :class:`Registry` (torchvision's ``register_model``/``get_model``/``list_models``):
a decorator adds an entry, a duplicate name is refused, and an unknown name raises a
:class:`~deepfault.errors.DeepFaultError` that offers the closest known names ("did you
mean") and lists them all (:func:`unknown_name`, which the lookups that are no registry use
too).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar, overload

from ..errors import DeepFaultError


class DuplicateName(DeepFaultError, RuntimeError):
    """A name registered twice: a :class:`DeepFaultError` (the CLI prints one line), and a
    :class:`RuntimeError` as it was before, for code that catches that.
    """

__all__ = ["Registry", "did_you_mean", "suggestion", "unknown_name", "unrecognized_options", "invalid_choice"]

T = TypeVar("T")


def did_you_mean(name: object, known: Iterable[object]) -> list[str]:
    """The known names closest to ``name``, for "did you mean" in messages: at most three, best
    first (:func:`difflib.get_close_matches`' score and cutoff, ties in the order of ``known``),
    case ignored (a name that differs only in case gets that one); ``[]`` when none is close.

    Examples:
        >>> did_you_mean("ochia", ["dstar", "ochiai", "tarantula"])
        ['ochiai']
        >>> did_you_mean("zzz", ["dstar", "ochiai"])
        []
    """
    if not isinstance(name, str) or not name:
        return []
    names = [str(k) for k in known]
    lowered: dict[str, str] = {}
    for k in names:
        lowered.setdefault(k.lower(), k)
    if name.lower() in lowered:  # only the case differs: that one
        return [lowered[name.lower()]]
    # difflib.get_close_matches' score and cutoff; equal scores keep the order of ``known``
    matcher = difflib.SequenceMatcher(b=name.lower())
    scored = []
    for i, k in enumerate(lowered):
        matcher.set_seq1(k)
        if matcher.real_quick_ratio() >= 0.6 and matcher.quick_ratio() >= 0.6 and matcher.ratio() >= 0.6:
            scored.append((-matcher.ratio(), i, lowered[k]))
    return [k for _, _, k in sorted(scored)[:3]]


def suggestion(name: object, known: Iterable[object]) -> str:
    """``" (did you mean 'x'?)"`` for the names of ``known`` closest to ``name``, else ``""``:
    for messages of another shape than :func:`unknown_name`'s.

    Examples:
        >>> "unknown layer 'fc'" + suggestion("fc", ["fc1", "fc2", "conv"]) + "; valid: fc1, fc2, conv"
        "unknown layer 'fc' (did you mean 'fc1' or 'fc2'?); valid: fc1, fc2, conv"
    """
    close = did_you_mean(name, known)
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def unrecognized_options(extras: Sequence[str], known: Iterable[str]) -> str:
    """``unrecognized arguments: ...`` with the closest of the ``known`` options for each
    unknown option among ``extras`` (``--mesure`` -> ``--measure``).
    """
    known = list(known)
    pairs = []
    for arg in extras:
        option = arg.split("=", 1)[0]
        close = did_you_mean(option, known) if option.startswith("--") else []
        if close:
            pairs.append((close[0], option))
    hints = [new if len(pairs) == 1 else f"{new} for {old}" for new, old in pairs]
    hint = f"; did you mean {', '.join(hints)}?" if hints else ""
    return f"unrecognized arguments: {' '.join(extras)}{hint}"


def invalid_choice(value: object, choices: Iterable[object]) -> str | None:
    """``invalid choice: 'blurr'; did you mean 'blur'? (choose from ...)``, or ``None`` when no
    choice is close.
    """
    choices = [str(c) for c in choices]
    close = did_you_mean(value, choices)
    if not close:
        return None
    return (f"invalid choice: {value!r}; did you mean {' or '.join(map(repr, close))}? "
            f"(choose from {', '.join(map(repr, choices))})")


def unknown_name(kind: str, name: object, known: Iterable[object]) -> str:
    """The one message for a name that is not among ``known``: the user's word for what it
    names (``kind``), the closest names, then all of them.

    Examples:
        >>> unknown_name("measure", "ochia", ["dstar", "ochiai", "tarantula"])
        "unknown measure 'ochia'; did you mean 'ochiai'? (known: dstar, ochiai, tarantula)"
        >>> unknown_name("measure", "zzz", ["dstar", "ochiai"])
        "unknown measure 'zzz'; known: dstar, ochiai"
    """
    names = [str(k) for k in known]
    close = did_you_mean(name, names)
    listed = ", ".join(names)
    if close:
        return f"unknown {kind} {name!r}; did you mean {' or '.join(map(repr, close))}? (known: {listed})"
    return f"unknown {kind} {name!r}; known: {listed}"


class Registry(Generic[T]):
    """Named entries of one kind.

    Args:
        kind: What the entries are, for messages ("measure", "model format", ...).
        listing: The names in the order an unknown-name message lists them (default sorted).

    Examples:
        >>> shapes = Registry("shape")
        >>> @shapes.register("square")
        ... def square(a):
        ...     return a * a
        >>> shapes.get("square")(3)
        9
        >>> shapes.names()
        ['square']
    """

    def __init__(self, kind: str, *, listing: Callable[[], list[str]] | None = None):
        self.kind = kind
        self._entries: dict[str, T] = {}
        self._listing = listing

    @overload
    def register(self, name: str, entry: None = None) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, entry: T) -> T: ...

    def register(self, name: str, entry: T | None = None) -> Callable[[T], T] | T:
        """Add ``entry`` under ``name``; without ``entry``, return a decorator that does.

        Raises:
            DuplicateName: (a :class:`DeepFaultError`) ``name`` is registered already (a plug-in or
                a user's own measure registered twice: unregister it first to replace it).
        """

        def add(obj: T) -> T:
            if name in self._entries:
                raise DuplicateName(f"{self.kind} {name!r} is registered twice: the name is taken; pick "
                                    "another name or unregister the old entry first")
            self._entries[name] = obj
            return obj

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests and plug-ins that replace an entry)."""
        self._entries.pop(name, None)

    def pop(self, name: str, default: T | None = None) -> T | None:
        """Remove ``name`` and return its entry (``default`` when absent)."""
        return self._entries.pop(name, default)

    def get(self, name: str) -> T:
        """The entry registered as ``name``.

        Raises:
            DeepFaultError: ``name`` is unknown; the message offers the closest names and lists
                the known ones.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise DeepFaultError(unknown_name(self.kind, name, (self._listing or self.names)())) from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def items(self) -> list[tuple[str, T]]:
        """``(name, entry)`` pairs in registration order."""
        return list(self._entries.items())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self.names())})"
