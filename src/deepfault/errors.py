"""The exception that deepfault raises for things a user can get wrong.

The checks that raise it live in :mod:`deepfault.checks`.
"""

from __future__ import annotations

__all__ = ["DeepFaultError"]


class DeepFaultError(ValueError):
    """A bad argument, file or input; the message says what was wrong and what to do.

    It subclasses :class:`ValueError` so that generic ``except ValueError`` code keeps
    working. The command-line interface turns it into a one-line message and exit
    status 2.
    """


# --- TEMPORARY: remove once fuzz/ imports from deepfault.checks --------------------------------
# fuzz/ is being moved into sub-packages on another branch; until that lands, its modules
# still import these names from here. They are deepfault.checks' own; nothing else may use
# them from this module.


def check_int(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """Deprecated spelling of :func:`deepfault.checks.check_int` (positional bounds)."""
    from .checks import check_int as _check_int

    return _check_int(name, value, minimum=minimum, maximum=maximum)
