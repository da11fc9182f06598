r"""Advisory locks: one writer at a time, and no shard removed under a reader.

Adds and prunes hold the writers' lock (``.lock``, exclusive; a second writer waits its turn,
so two gates on one corpus add one after the other). A replay holds the readers' lock
(``.readers``, shared) while it streams; a prune removes the shard files it dropped only when it
can take that lock exclusively at once, and otherwise leaves them (unlisted, so ignored) for a
later prune. The locks are ``flock``\\ s: the kernel releases them when the holder dies, ``kill -9``
included, so a killed run never blocks the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import DeepFaultError
from .manifest import LOCK, READERS

__all__ = ["writer_lock", "reader_lock", "no_readers", "LOCK_WAIT"]

#: Seconds a writer waits for another writer before it gives up with a message.
LOCK_WAIT = 600.0


def _open(path: Path) -> int | None:
    """The lock file, opened (made where absent); ``None`` where the folder is read-only and it
    is absent (nobody can write such a corpus, so nothing need be locked against).
    """
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            return None


@contextlib.contextmanager
def _locked(path: Path, operation: int) -> Iterator[bool]:
    """Hold ``flock(operation)`` on ``path`` while the block runs; yields whether it was taken
    (not where ``LOCK_NB`` met another holder, or a read-only folder lacks the file).
    """
    fd = _open(path)
    if fd is None:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, operation)
            taken = True
        except BlockingIOError:
            taken = False
        try:
            yield taken
        finally:
            if taken:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def writer_lock(folder: Path, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold the corpus's writers' lock, waiting up to ``wait`` seconds for another writer.

    Raises:
        DeepFaultError: the folder cannot be written, or another writer held it for ``wait`` s.
    """
    if not os.access(folder, os.W_OK):
        raise DeepFaultError(f"corpus {str(folder)!r} cannot be written (no permission or a read-only "
                             "file system); give a writable copy of the folder")
    deadline = time.monotonic() + wait
    while True:
        with _locked(folder / LOCK, fcntl.LOCK_EX | fcntl.LOCK_NB) as taken:
            if taken:
                yield
                return
        if time.monotonic() >= deadline:
            raise DeepFaultError(f"corpus {str(folder)!r} is being written by another deepfault process for "
                                 f"over {wait:.0f} s; wait for it to finish, then rerun")
        time.sleep(0.05)


@contextlib.contextmanager
def reader_lock(folder: Path) -> Iterator[None]:
    """Hold the readers' lock (shared) while a replay streams the shards (none in a read-only
    folder without the lock file, which no writer can change either).
    """
    with _locked(folder / READERS, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def no_readers(folder: Path) -> Iterator[bool]:
    """Yield whether no reader holds the corpus now (the readers' lock taken exclusively, without
    waiting); while the block runs and it was ``True``, none can start.
    """
    with _locked(folder / READERS, fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
        yield free
