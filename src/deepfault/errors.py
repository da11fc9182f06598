"""The exceptions that deepfault raises for things a user can get wrong."""

from __future__ import annotations

__all__ = ["DeepFaultError", "check_int"]


class DeepFaultError(ValueError):
    """A bad argument, file or input; the message says what was wrong and what to do.

    It subclasses :class:`ValueError` so that generic ``except ValueError`` code keeps
    working. The command-line interface turns it into a one-line message and exit
    status 2.
    """


def check_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an ``int`` when it is an integer ``>= minimum`` (bools are not)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DeepFaultError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)
