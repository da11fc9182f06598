"""Atomic file writing: a result either appears whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "write_json", "write_npz", "user_cache_dir", "temporary_name_overhead"]

#: Random characters :func:`tempfile.mkstemp` puts in a name (``tempfile._RandomNameSequence``).
_RANDOM_CHARS = 8


def temporary_name_overhead() -> int:
    """Bytes :func:`atomic_path`'s temporary name ``.{name}.{pid}.XXXXXXXX.tmp`` adds to ``name``.

    The pid is counted at its longest (the digits of the system's largest pid, 7 where
    ``/proc/sys/kernel/pid_max`` cannot be read: Linux's ``PID_MAX_LIMIT`` is 4194304), since the
    writer may be another process than the one that checks (an executor's worker).
    """
    try:
        pid_digits = len(str(int(Path("/proc/sys/kernel/pid_max").read_text()) - 1))
    except (OSError, ValueError):
        pid_digits = 7
    pid_digits = max(pid_digits, len(str(os.getpid())))
    return len(".") + len(".") + pid_digits + len(".") + _RANDOM_CHARS + len(".tmp")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    # The writer's pid is in the name, so that a later run can remove what a ``kill -9``
    # (which runs no ``finally``) left behind.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results follow the user's umask
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _remove_stale(path: Path) -> None:
    """Remove ``.NAME.PID.*.tmp`` files beside ``path`` whose writer process is gone."""
    prefix = f".{path.name}."
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(".tmp")):
                continue
            pid = name[len(prefix):].split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_json(path: str | os.PathLike, data) -> Path:
    """Write ``data`` as indented JSON, atomically. Non-finite floats are not allowed."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, allow_nan=False)
        fh.write("\n")
    return Path(path)


def write_npz(path: str | os.PathLike, arrays: dict) -> Path:
    """Write ``arrays`` as an ``.npz`` file without object arrays (so it reads back with
    ``allow_pickle=False``), atomically.
    """
    import numpy as np

    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, allow_pickle=False, **arrays)
    return Path(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def user_cache_dir() -> Path:
    """``$DEEPFAULT_CACHE``, else deepfault's folder in the user cache directory."""
    env = os.environ.get("DEEPFAULT_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("deepfault"))
