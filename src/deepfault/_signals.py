"""SIGINT and SIGTERM, handled alike by the command line at every stage.

- Start-up (importing torch and the package): nothing has been written yet, so a signal
  prints one line and ends the process at once, 130 for SIGINT and 143 for SIGTERM, with
  no traceback. Installed by :func:`guard_startup` only when the process *is* the
  ``deepfault`` command (``deepfault ...`` or ``python -m deepfault ...``); a library
  user's process keeps its own handlers.
- Running: both signals raise :class:`KeyboardInterrupt` (SIGTERM as its subclass
  :class:`Terminated`), so every ``finally`` runs: atomic writers remove their ``.tmp``
  files, stores commit or roll back whole cells, and commands that checkpoint (``regress``,
  ``train``, ``gan train``, ``experiment``) keep a resumable state. :func:`exit_status`
  turns the interruption into 130 or 143.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

__all__ = ["Terminated", "guard_startup", "handling", "exit_status", "is_cli_process"]

#: Exit statuses by signal: 128 + the signal's number, as shells report them.
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}

_received: list[int] = []


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises :class:`KeyboardInterrupt` so both unwind alike."""


def is_cli_process() -> bool:
    """Whether this process was started as the ``deepfault`` command."""
    argv = getattr(sys, "orig_argv", None) or sys.argv
    if os.path.basename(sys.argv[0] if sys.argv else "") in ("deepfault", "deepfault.exe"):
        return True
    pairs = zip(argv, argv[1:], strict=False)
    return any(a == "-m" and b in ("deepfault", "deepfault.cli") for a, b in pairs)


def _exit_now(signum, _frame) -> None:
    with contextlib.suppress(Exception):
        os.write(2, b"deepfault: interrupted during start-up; nothing was written\n")
    os._exit(STATUS.get(signum, 128 + signum))


def guard_startup() -> None:
    """In the CLI's own process, make a signal during the imports one line and an exit."""
    if threading.current_thread() is not threading.main_thread() or not is_cli_process():
        return
    for signum in STATUS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signum, _exit_now)


def _raise(signum, _frame) -> None:
    _received.append(signum)
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


@contextlib.contextmanager
def handling():
    """While the block runs, SIGINT and SIGTERM raise (see the module docstring); the previous
    handlers come back afterwards. Only the main thread can set handlers: elsewhere a no-op.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    old = {s: signal.getsignal(s) for s in STATUS}
    for signum in STATUS:
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def exit_status(exc: BaseException | None = None) -> int:
    """130 after SIGINT (or Ctrl-C), 143 after SIGTERM."""
    if isinstance(exc, Terminated) or (_received and _received[-1] == signal.SIGTERM):
        return 143
    return 130


# Importing this module (the package's first import) guards the CLI's own start-up.
guard_startup()
