"""One small registry for every extension point.

Methods, presets, measures and baselines, model file formats, data sets, zoo
architectures, coverage criteria, mutation rules, fuzz strategies and executors are all looked up by name
in a :class:`Registry` (torchvision's ``register_model``/``get_model``/``list_models``):
a decorator adds an entry, a duplicate name is refused, and an unknown name raises a
:class:`~deepfault.errors.DeepFaultError` that lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from ..errors import DeepFaultError


class DuplicateName(DeepFaultError, RuntimeError):
    """A name registered twice: a :class:`DeepFaultError` (the CLI prints one line), and a
    :class:`RuntimeError` as it was before, for code that catches that.
    """

__all__ = ["Registry"]

T = TypeVar("T")


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
            DeepFaultError: ``name`` is unknown; the message lists the known names.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise DeepFaultError(
                f"unknown {self.kind} {name!r}; known: {', '.join((self._listing or self.names)())}"
            ) from None

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
