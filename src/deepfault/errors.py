"""The exceptions that deepfault raises for things a user can get wrong."""

from __future__ import annotations

__all__ = ["DeepFaultError", "check_int", "MAX_ITERATIONS", "MAX_REPEAT", "MAX_BATCH", "MAX_SEED"]


class DeepFaultError(ValueError):
    """A bad argument, file or input; the message says what was wrong and what to do.

    It subclasses :class:`ValueError` so that generic ``except ValueError`` code keeps
    working. The command-line interface turns it into a one-line message and exit
    status 2.
    """


def check_int(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an ``int`` when it is an integer in ``[minimum, maximum]`` (bools are not).

    ``maximum`` bounds counts that drive loops (iterations, repetitions), so that a typo
    such as ``--repeat 1000000000`` is an error rather than a run that never ends.
    """
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise DeepFaultError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if maximum is not None and value > maximum:
        raise DeepFaultError(f"{name} must be at most {maximum:,}; got {value!r}")
    return int(value)


#: Upper bounds of loop counts: generous for any real use, finite for typos.
MAX_ITERATIONS = 100_000
MAX_REPEAT = 10_000
MAX_BATCH = 1 << 24
MAX_SEED = 2**63 - 1


def check_bounds(bounds, name: str = "bounds") -> tuple[float, float]:
    """``bounds`` as ``(lo, hi)`` floats with ``lo < hi``.

    Raises:
        DeepFaultError: Not a pair of numbers, or not ``lo < hi``.
    """
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise DeepFaultError(f"{name} must be a pair (lo, hi); got {bounds!r}") from None
    if not lo < hi:
        raise DeepFaultError(f"{name} must satisfy lo < hi; got ({lo}, {hi})")
    return lo, hi
