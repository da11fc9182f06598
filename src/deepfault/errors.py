"""The exception that deepfault raises for things a user can get wrong.

The checks that raise it live in :mod:`deepfault.checks`.
"""

from __future__ import annotations

import errno
import re

__all__ = ["DeepFaultError", "UserCodeError", "out_of_memory_line", "failure_line"]


class DeepFaultError(ValueError):
    """A bad argument, file or input; the message says what was wrong and what to do.

    It subclasses :class:`ValueError` so that generic ``except ValueError`` code keeps
    working. The command-line interface turns it into a one-line message and exit
    status 2.
    """


class UserCodeError(DeepFaultError):
    """The user's own code (an ``--arch`` class's ``forward``, say) raised: the message names
    the class, the exception and its first line; the original exception is the ``__cause__``,
    whose traceback the command line shows under ``-v``.
    """


#: What PyTorch's allocators say when memory runs out (CPU, CUDA, MPS), and Python's own.
_OOM = re.compile(r"out of memory|can't allocate memory|DefaultCPUAllocator|Cannot allocate memory", re.I)


def out_of_memory_line(err: BaseException, settings) -> str | None:
    """One line for running out of memory, naming what to lower; ``None`` for another error.

    PyTorch reports it as a ``RuntimeError`` (``torch.OutOfMemoryError`` on CUDA, a
    ``DefaultCPUAllocator`` message on the CPU); Python as a ``MemoryError``. ``settings``
    (the parsed options) says the run's ``batch_size`` and ``device`` where it has them.
    """
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if not isinstance(err, MemoryError) and not _OOM.search(text):
        return None
    batch = getattr(settings, "batch_size", None)
    lower = (f"lower --batch-size (it is {batch})" if isinstance(batch, int)
             else "lower --batch-size" if hasattr(settings, "batch_size") else "use fewer or smaller inputs")
    where = getattr(settings, "device", None)
    more = " or run on a device with more memory" if where not in (None, "cpu") else ""
    return f"out of memory ({text[:160]}); {lower}{more}, then rerun the same command"


def failure_line(err: BaseException, settings=None) -> str | None:
    """The one line that explains ``err`` to a user, or ``None`` for an error that is a bug.

    A :class:`DeepFaultError` says it itself; running out of memory names what to lower
    (:func:`out_of_memory_line`); a full disk, or a path the system refuses, says what to do.
    The command line prints the line and exits with status 2.
    """
    if isinstance(err, DeepFaultError):
        return str(err)
    if isinstance(err, (MemoryError, RuntimeError)):
        return out_of_memory_line(err, settings)
    if not isinstance(err, OSError):
        return None
    if err.errno in (errno.ENOSPC, errno.EDQUOT):  # every writer removed its temporary on the way
        return (f"the disk is full ({err.strerror or err}); nothing partial was kept: free some space and "
                "rerun the same command")
    if err.errno == errno.EFBIG:  # a file-size limit (ulimit -f) or the file system's largest file
        return (f"a file grew past the largest this system allows ({err.strerror or err}); nothing partial "
                "was kept: raise the limit (ulimit -f) or write elsewhere, then rerun the same command")
    if isinstance(err, BrokenPipeError) or err.filename is None:
        return None
    return f"cannot use {err.filename!r}: {err.strerror or err}; check the path"  # the checks missed it
