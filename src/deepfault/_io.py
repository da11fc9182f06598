"""Atomic file writing: a result either appears whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_path", "atomic_paths", "write_json", "write_npz", "write_torch", "user_cache_dir",
           "temporary_name_overhead", "REPORT_MANIFEST", "write_manifest", "listed_files", "unlisted_files",
           "remove_listed"]

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


#: Prefix of :func:`atomic_paths`' temporaries (short, so that the writers that fill them may add
#: their own temporary name beside them).
_UNIT_PREFIX = ".deepfault-unit."


@contextlib.contextmanager
def atomic_paths(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Temporaries beside each of ``paths``, moved onto them together when the block ends without
    error, in the order given (the last one, a result's ``.json``, is moved last: where it is new,
    the others are too); on any error or interrupt, none is. A temporary the block removes is not
    moved (an optional output it did not write). Any writer, atomic ones included, may fill them.
    The folders made for them are removed again, where they are left empty, when the unit fails.
    """
    targets = [Path(p) for p in paths]
    made: list[tuple[Path, Path]] = []
    folders: list[Path] = []  # the folders made for the unit: removed again, where empty, on failure
    done = False
    try:
        for path in targets:
            folders += [f for f in (path.parent, *path.parent.parents) if not f.exists() and f not in folders]
            path.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale(path.parent / _UNIT_PREFIX.strip("."))  # a killed unit's temporaries
            _remove_stale(path.parent / _UNIT_PREFIX.rstrip("."))  # and those of the writers that filled them
            prefix = f"{_UNIT_PREFIX}{os.getpid()}."
            fd, name = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
            os.close(fd)
            os.chmod(name, 0o666 & ~_umask())
            made.append((path, Path(name)))
        yield [temporary for _, temporary in made]
        for _, temporary in made:
            if temporary.exists():
                with open(temporary, "rb") as fh:
                    os.fsync(fh.fileno())
        for path, temporary in made:
            if temporary.exists():
                os.replace(temporary, path)
        done = True
    finally:
        for _, temporary in made:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        for folder in () if done else sorted(folders, key=lambda f: -len(f.parts)):
            with contextlib.suppress(OSError):
                folder.rmdir()


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


class _Sink:
    """A binary file that keeps the first write the system refused: torch's zip writer reports it
    as ``RuntimeError: [enforce fail at inline_container.cc...]``, the ``OSError`` only its context.
    """

    def __init__(self, fh) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self._fh.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self._fh.flush()


def write_torch(path: str | os.PathLike, obj, *, save=None) -> Path:
    """Write ``obj`` with ``torch.save`` (or ``save(obj, file)``, ``torch.jit.save`` say) atomically,
    through a Python file, never a path handed to torch: a write the system refuses (a full disk)
    raises its own ``OSError`` (``ENOSPC``: one line in the command line), not torch's
    ``RuntimeError``, and torch's C++ writer, which can abort the process when its file fails, is
    never used. Nothing partial is left (:func:`atomic_path`).

    Args:
        path: The file to write.
        obj: What to write.
        save: ``save(obj, file)``; default ``torch.save``.

    Returns:
        ``path``.

    Raises:
        OSError: The system refused a write (``ENOSPC``, ``EFBIG``, ``EDQUOT``, ...).
    """
    import torch

    save = torch.save if save is None else save
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        sink = _Sink(fh)
        try:
            save(obj, sink)
        except (RuntimeError, OSError) as err:
            if sink.error is not None and sink.error is not err:
                raise sink.error from None
            raise
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


# --- report folders: replace only what a report wrote -----------------------------------------

#: The file in every report folder that lists the files the report wrote (paths relative to the
#: folder, ``/``-separated). A later report replaces exactly these; a folder that holds anything
#: else is refused (:func:`deepfault.checks.check_report_dir`).
REPORT_MANIFEST = ".deepfault-report.json"


def _entries(folder: Path) -> Iterator[str]:
    """Every non-folder entry under ``folder`` (symlinks not followed), relative, as found."""
    for root, dirs, names in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        yield from ((rel / n).as_posix() for n in names)
        # a symlink to a folder is listed by os.walk among ``dirs``: it is an entry, not a folder
        yield from ((rel / d).as_posix() for d in dirs if os.path.islink(os.path.join(root, d)))


def _files_under(folder: Path) -> list[str]:
    return sorted(_entries(folder))


def write_manifest(folder: str | os.PathLike) -> Path:
    """Write ``folder``'s :data:`REPORT_MANIFEST`, listing every file now under it."""
    folder = Path(folder)
    files = [f for f in _files_under(folder) if f != REPORT_MANIFEST]
    path = folder / REPORT_MANIFEST
    path.write_text(json.dumps({"deepfault_report": 1, "files": files}, indent=1) + "\n", encoding="utf-8")
    return path


def listed_files(folder: str | os.PathLike) -> set[str] | None:
    """The files ``folder``'s manifest lists, or ``None`` when it has none (or an unreadable one)."""
    try:
        data = json.loads((Path(folder) / REPORT_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return {f for f in files if ".." not in f.split("/") and not f.startswith("/")}


def unlisted_files(folder: str | os.PathLike, *, first: int | None = None) -> list[str]:
    """Files under ``folder`` that no report wrote: those its manifest does not list (every file,
    where it has no manifest); only the ``first`` found when given (a large folder is not walked
    to its end). Empty folders count as nothing.
    """
    listed = listed_files(folder) or set()
    found = []
    for f in _entries(Path(folder)):
        if f != REPORT_MANIFEST and f not in listed:
            found.append(f)
            if first is not None and len(found) >= first:
                break
    return sorted(found)


def remove_listed(folder: str | os.PathLike) -> list[str]:
    """Delete the files ``folder``'s manifest lists, the manifest, then every folder left empty;
    returns what remains (nothing, unless a file came in that no report wrote, which stays).
    """
    folder = Path(folder)
    for rel in sorted(listed_files(folder) or ()):
        with contextlib.suppress(OSError):
            (folder / rel).unlink()
    with contextlib.suppress(OSError):
        (folder / REPORT_MANIFEST).unlink()
    for root, _, _ in sorted(os.walk(folder, followlinks=False), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(root)
    return _files_under(folder) if folder.exists() else []
