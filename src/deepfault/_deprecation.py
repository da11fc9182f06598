"""Names that moved or were renamed: the old place still answers, with a ``DeprecationWarning``.

A module whose public names moved sets ``__getattr__ = moved_names(__name__, {...})`` (PEP 562):
an import from the old place keeps working and says where the name lives now. A function whose
keywords became the fields of one options object takes both forms through :func:`grouped`.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["grouped", "moved_names"]

_T = TypeVar("_T")


def moved_names(old_module: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for the names that left ``old_module``.

    Args:
        old_module: The module they were defined in (``__name__``).
        homes: Old name -> ``"package.module"`` (the same name there) or
            ``"package.module:new_name"`` (renamed).

    Returns:
        ``__getattr__(name)``: the name from its new home, after a ``DeprecationWarning``; an
        ``AttributeError`` for any other name.
    """

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, _, new = homes[name].partition(":")
        warnings.warn(f"{old_module}.{name} is deprecated; use {module}.{new or name}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), new or name)

    return __getattr__


def grouped(function: str, param: str, cls: type[_T], given: _T | None, keywords: Mapping[str, Any], *,
            names: Mapping[str, str] | None = None, warn: int | None = 3) -> _T:
    """``given``, or the options object ``cls`` (a dataclass) that its fields given one by one as
    ``keywords`` make: the old call form of a function whose keywords became one parameter.

    Args:
        function: The function's name, for the messages.
        param: The parameter that takes the object.
        cls: Its dataclass.
        given: What the caller passed as ``param`` (``None``: nothing).
        keywords: The other keywords the function was given.
        names: Keyword -> field, where the keywords had other names (default: the fields).
        warn: The keyword form's ``FutureWarning`` (naming the new form): its stack level from
            here (3, the default, points at the function's caller; one more for each private step
            between), or ``None``: the keyword form is not deprecated.

    Returns:
        The object; ``cls()`` when neither form was given.

    Raises:
        TypeError: A keyword that is no field, or ``param`` and keywords both.
    """
    if names is None:
        names = {f.name: f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(keywords) - set(names))
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    if not keywords:
        return cls() if given is None else given
    if given is not None:
        raise TypeError(f"give {param} or its fields ({', '.join(sorted(keywords))}), not both")
    if warn is not None:
        given_keywords = ", ".join(f"{k}=..." for k in keywords)
        warnings.warn(f"{function}(..., {given_keywords}) is deprecated: pass {param}={cls.__name__}"
                      f"({given_keywords})", FutureWarning, stacklevel=warn)
    return cls(**{names[k]: v for k, v in keywords.items()})
