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
