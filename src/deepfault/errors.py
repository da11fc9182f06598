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
    """Old spelling of :func:`deepfault.checks.check_int` (positional bounds), the same check and
    message (a copy, since this module must not import :mod:`deepfault.checks`, which imports it).
    """
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise DeepFaultError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if maximum is not None and int(value) > maximum:
        raise DeepFaultError(f"{name} must be at most {maximum:,}; got {value!r}; larger cannot fit in "
                             "memory or time")
    return int(value)
