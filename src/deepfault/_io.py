"""Atomic file writing: a result either appears whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .errors import DeepFaultError

__all__ = ["atomic_path", "write_json", "check_writable", "user_cache_dir"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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


def write_json(path: str | os.PathLike, data) -> Path:
    """Write ``data`` as indented JSON, atomically. Non-finite floats are not allowed."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, allow_nan=False)
            fh.write("\n")
    return Path(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike) -> Path:
    """Fail early, before any work, when ``path`` cannot be written; creates nothing.

    The nearest existing folder on the way to ``path`` must be writable (missing folders
    are made only when the result is written).
    """
    path = Path(path)
    if path.is_dir():
        raise DeepFaultError(f"output path {str(path)!r} is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            raise NotADirectoryError(f"{str(existing)!r} is a file")
        with tempfile.NamedTemporaryFile(dir=existing, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as err:
        raise DeepFaultError(
            f"cannot write output file {str(path)!r}: {err.strerror or err}; choose a writable path"
        ) from None
    return path


def user_cache_dir() -> Path:
    """``$DEEPFAULT_CACHE``, else deepfault's folder in the user cache directory."""
    env = os.environ.get("DEEPFAULT_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("deepfault"))
