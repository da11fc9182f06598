"""Names that moved or were renamed: the old place still answers, with a ``DeprecationWarning``.

A module whose public names moved sets ``__getattr__ = moved_names(__name__, {...})`` (PEP 562):
an import from the old place keeps working and says where the name lives now. A function whose
keywords became the fields of one options dataclass folds the old keywords in with
:func:`folded_keywords`.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["folded_keywords", "moved_names"]

_Options = TypeVar("_Options")


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


def folded_keywords(function: str, parameter: str, options: _Options, old: Mapping[str, Any], *,
                    stacklevel: int = 3) -> _Options:
    """``options`` (a dataclass) with the old form's keywords ``old``, its fields, replaced in it.

    Args:
        function: The function's name, as the messages name it.
        parameter: The new parameter the keywords belong to (``settings``).
        options: Its value (the dataclass' default when the caller gave none).
        old: The keywords the caller gave in the old form (none: ``options`` as it is).
        stacklevel: The warning's, from this function: 3 (the default) names the caller of the
            function that calls this one.

    Returns:
        ``options`` with ``old`` replaced in it, after a ``DeprecationWarning`` naming the new form.

    Raises:
        TypeError: A keyword that is no field (Python's own words for an unexpected keyword).
    """
    if not old:
        return options
    known = {f.name for f in dataclasses.fields(options)}  # type: ignore[arg-type]
    unknown = sorted(set(old) - known)
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword arguments: {', '.join(unknown)}")
    given = ", ".join(f"{k}=..." for k in old)
    new = f"{parameter}={type(options).__name__}({given})"
    warnings.warn(f"{function}(..., {given}) is deprecated: pass {new}", DeprecationWarning,
                  stacklevel=stacklevel)
    return dataclasses.replace(options, **old)  # type: ignore[type-var]
