"""Names that moved or were renamed: the old place still answers, with a ``DeprecationWarning``.

A module whose public names moved sets ``__getattr__ = moved_names(__name__, {...})`` (PEP 562):
an import from the old place keeps working and says where the name lives now.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["moved_names"]


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
