"""One validation layer for the command line and the Python API alike.

Every check raises :class:`~deepfault.errors.DeepFaultError` with one line that names the
parameter, says what was expected and what was received, and, where there is one, the
fix: ``--out must be a file name; got '.' (a directory); give a file such as result.json``.
The CLI passes option names (``--out``), the API its keyword names (``out``); both reach
the same code, so a bad value reads the same from either side.

The checks change nothing on disk and start no work: a command runs them all first, so a
bad input costs nothing and leaves nothing behind.
"""

from __future__ import annotations

import math
import numbers
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._deprecation import moved_names
from .errors import DeepFaultError

__all__ = [
    "MAX_INPUTS", "MAX_BLACKOUT_SIZE", "MAX_BUDGET_ITERATIONS", "MAX_BUDGET_SECONDS", "MAX_CLASSES",
    "MAX_EPOCHS", "MAX_GRADIENT_ITERATIONS", "MAX_GRID", "MAX_LEARNING_RATE", "MAX_MODELS", "MAX_MUTANTS",
    "MAX_REPEAT", "MAX_SECTIONS", "MAX_SEED", "MAX_THREADS", "MAX_WORKERS", "MAX_GPUS_PER_WORKER",
    "error", "check_int", "check_number", "check_bounds", "check_seed", "check_device", "available_devices",
    "without_repeats", "check_outputs", "check_not_inputs", "check_writable", "check_output_dir",
    "check_report_dir",
    "check_name", "check_labels", "check_finite_outputs", "check_memory", "memory_bytes", "meminfo_bytes",
    "check_count_text", "check_not_under",
]

# --- limits -----------------------------------------------------------------------------------
# Generous for any real use, finite for typos: ``--repeat 1000000000`` is an error, not a run
# that never ends. Each has one value; every check and the CLI's bounds read them from here.

#: The bound of every option that counts inputs: per batch, per step or per run (batch sizes,
#: seeds, top-k, inputs per class). Not a runtime's batch cap
#: (:data:`deepfault.models.blackbox.MAX_RUNTIME_BATCH`).
MAX_INPUTS = 1 << 24
#: Side of xplore's blackout patches, in pixels.
MAX_BLACKOUT_SIZE = 1 << 16
#: Iterations of a fuzzing budget (``5000it``): one iteration is one selected input, cheap.
MAX_BUDGET_ITERATIONS = 10**9
#: Seconds of a fuzzing budget: a year.
MAX_BUDGET_SECONDS = 365 * 86400
#: Classes of a data set's labels.
MAX_CLASSES = 100_000
#: Training and fine-tuning passes over a data set.
MAX_EPOCHS = 100_000
#: Gradient steps per input (DeepFault's synthesis, DeepXplore's search): each one a
#: forward and backward pass, so far fewer than a fuzzing budget's iterations.
MAX_GRADIENT_ITERATIONS = 100_000
#: Images in an image grid.
MAX_GRID = 10_000
#: Learning rates (Adam's; larger ones only diverge).
MAX_LEARNING_RATE = 10.0
#: Repetitions of a run.
MAX_REPEAT = 10_000
#: Mutants per selected input of a fuzzing step (DRFuzz publishes 20).
MAX_MUTANTS = 10_000
#: Models compared at once (xplore's models, a vote's): the bound of an index among them.
MAX_MODELS = 1024
#: Sections of KMNC (and DeepHunter's k).
MAX_SECTIONS = 100_000
#: Random seeds are 64-bit integers.
MAX_SEED = 2**63 - 1
#: PyTorch CPU threads.
MAX_THREADS = 1024
#: Worker processes of an executor.
MAX_WORKERS = 1024
#: GPUs one Ray worker reserves (``--gpus-per-worker``; fractions share a GPU).
MAX_GPUS_PER_WORKER = 64.0


#: ``MAX_BATCH``, the old name of :data:`MAX_INPUTS`, answers with a deprecation warning.
__getattr__ = moved_names(__name__, {"MAX_BATCH": "deepfault.checks:MAX_INPUTS"})


def error(param: str, expected: str, received: object, fix: str = "") -> DeepFaultError:
    """The one message shape: ``PARAM must be EXPECTED; got RECEIVED[; FIX]``."""
    shown = received if isinstance(received, str) and received.startswith("<") else repr(received)
    return DeepFaultError(f"{param} must be {expected}; got {shown}" + (f"; {fix}" if fix else ""))


# --- numbers ----------------------------------------------------------------------------------


def check_count_text(param: str, text: str, *, minimum: int = 1, maximum: int) -> int:
    """A count typed as text (``--preset-option repeats=5``): digits only, in ``[minimum, maximum]``,
    with :func:`check_int`'s messages (``1e9`` and ``-3`` are no counts).
    """
    stripped = str(text).strip()
    if not stripped.isdigit():
        raise error(param, f"an integer >= {minimum}", text)
    if len(stripped) > 30:  # beyond any limit; int() of a million digits is slow
        raise error(param, f"at most {maximum:,}", f"<{len(stripped)} digits>",
                    "larger cannot fit in memory or time")
    return check_int(param, int(stripped), minimum=minimum, maximum=maximum)


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes (``None`` where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    return meminfo_bytes("MemTotal")


def meminfo_bytes(field: str) -> int | None:
    """A ``/proc/meminfo`` field (``"MemTotal"``, ``"MemAvailable"``) in bytes; ``None`` off Linux."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _size(nbytes: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:,.0f} {unit}" if unit == "bytes" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:,.1f} PiB"  # pragma: no cover - the loop returns


def check_memory(param: str, value: object, needed: float, what: str) -> None:
    """Refuse, before it starts, a request whose ``needed`` bytes (an estimate from the sizes
    involved: ``what`` says of what) exceed this machine's physical memory, saying how much it
    would need and how much there is.
    """
    total = memory_bytes()
    if total is not None and needed > total:
        raise error(param, f"a size that fits in this machine's memory ({_size(total)})", value,
                    f"{what} would need at least {_size(needed)}; give a smaller value")


def check_int(param: str, value: object, *, minimum: int = 1, maximum: int | None = None,
              fix: str = "") -> int:
    """``value`` as an ``int`` when it is an integer in ``[minimum, maximum]`` (bools are not).

    ``maximum`` bounds counts that drive loops or allocations (iterations, repetitions,
    batch sizes; the ``MAX_*`` limits above).

    Raises:
        DeepFaultError: ``PARAM must be an integer >= MINIMUM; got VALUE`` or
            ``PARAM must be at most MAXIMUM; got VALUE; FIX``.

    Examples:
        >>> check_int("repeat", 3, maximum=MAX_REPEAT)
        3
        >>> check_int("k", 0)
        Traceback (most recent call last):
        ...
        deepfault.errors.DeepFaultError: k must be an integer >= 1; got 0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise error(param, f"an integer >= {minimum}", value, fix)
    if maximum is not None and int(value) > maximum:
        raise error(param, f"at most {maximum:,}", value, fix or "larger cannot fit in memory or time")
    return int(value)


def check_seed(param: str, value: object) -> int:
    """``value`` as a random seed: an ``int`` in ``[0, MAX_SEED]``."""
    return check_int(param, value, minimum=0, maximum=MAX_SEED, fix="seeds are 64-bit integers")


def check_number(param: str, value, *, minimum: float | None = None, maximum: float | None = None,
                 strict_minimum: bool = False) -> float:
    """A finite real number in the given range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise error(param, "a finite number", value)
    value = float(value)
    low_ok = minimum is None or (value > minimum if strict_minimum else value >= minimum)
    if not low_ok or (maximum is not None and value > maximum):
        lo = "" if minimum is None else f"{'>' if strict_minimum else '>='} {minimum:g}"
        hi = "" if maximum is None else f"<= {maximum:g}"
        raise error(param, f"a number {' and '.join(p for p in (lo, hi) if p)}", value)
    return value


def check_bounds(bounds: Iterable[float], name: str = "bounds", *,
                 finite: bool = False) -> tuple[float, float]:
    """``bounds`` as ``(lo, hi)`` floats with ``lo < hi`` (and both finite, with ``finite=True``).

    Raises:
        DeepFaultError: Not a pair of numbers, not ``lo < hi``, or (``finite``) not finite.
    """
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise error(name, "a pair (lo, hi)", bounds) from None
    if not lo < hi:
        raise error(name, "a pair with lo < hi", (lo, hi))
    if finite and not (math.isfinite(lo) and math.isfinite(hi)):
        raise error(name, "a pair of finite numbers", (lo, hi))
    return lo, hi


# --- devices ----------------------------------------------------------------------------------


def available_devices() -> list[str]:
    """The devices this machine has: ``cpu``, then ``cuda:N`` and ``mps`` where present."""
    import torch

    names = ["cpu"]
    if torch.cuda.is_available():
        names += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        names.append("mps")
    return names


def check_device(value, param: str = "device"):
    """``value`` (``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'``, ``'mps'`` or a ``torch.device``)
    as a :class:`torch.device` that exists here; the message lists the ones that do.
    """
    import torch

    have = available_devices()
    if isinstance(value, str) and value.strip().lower() == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(value, (str, torch.device)):
        raise error(param, f"a device name ({', '.join(['auto', *have])})", value)
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError):
        raise error(param, f"one of this machine's devices ({', '.join(['auto', *have])})",
                    f"unknown device {str(value)!r}", "see torch.device for the syntax") from None
    ok = (device.type == "cpu"
          or (device.type == "cuda" and torch.cuda.is_available()
              and (device.index is None or device.index < torch.cuda.device_count()))
          or (device.type == "mps" and "mps" in have))
    if not ok:
        raise error(param, f"one of this machine's devices ({', '.join(['auto', *have])})", str(value),
                    "use --device cpu (or auto)")
    return device


# --- output paths -----------------------------------------------------------------------------


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _nearest_existing(path: Path) -> Path:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def _check_names(param: str, path: Path) -> None:
    """Refuse names longer than the file system takes (checked before any ``stat``, which
    would fail on them).
    """
    limit = 255
    long = next((part for part in path.parts if len(os.fsencode(part)) > limit), None)
    if long is not None:
        raise error(param, f"a path whose every name has at most {limit} bytes",
                    f"<a name of {len(os.fsencode(long))} bytes>", "choose a shorter name")
    if len(os.fsencode(os.path.abspath(path))) >= 4096:
        raise error(param, "a path shorter than 4096 bytes", f"<{len(str(path))} characters>",
                    "choose a shorter path")


def _check_place(param: str, path: Path, *, what: str) -> None:
    """Refuse a path whose folders cannot be made or written, or whose names are too long."""
    text = str(path)
    existing = _nearest_existing(path.parent if str(path.parent) else Path("."))
    if not existing.is_dir():
        raise error(param, f"a {what} whose folders can be made", text,
                    f"cannot write output {what} there: {str(existing)!r} is a file; choose another path")
    limit = _name_max(existing)
    long = next((part for part in path.parts if len(os.fsencode(part)) > limit), None)
    if long is not None:
        raise error(param, f"a path whose every name has at most {limit} bytes",
                    f"<a name of {len(os.fsencode(long))} bytes>", "choose a shorter name")
    problem = None if os.access(existing, os.W_OK | os.X_OK) else "no permission or a read-only file system"
    if problem is None:  # root passes access(); only a real file tells (then it is removed at once)
        try:
            with tempfile.NamedTemporaryFile(dir=existing, prefix=".deepfault-probe.", suffix=".tmp"):
                pass
        except OSError as err:
            problem = err.strerror or str(err)
    if problem:
        raise error(param, f"a {what} in a writable folder", text,
                    f"cannot write output {what} in {str(existing)!r} ({problem}); choose another path")


def check_outputs(*outputs: tuple[str, str | os.PathLike | None]) -> list[Path | None]:
    """Check every output file a command will write, together, before any work.

    Args:
        outputs: ``(parameter, path)`` pairs; a ``None`` or ``'-'`` path writes nothing and
            is skipped. Sibling files (``x.npz`` beside ``x.json``) are passed as their own
            pairs so that collisions between them are caught too.

    Returns:
        The paths (``None`` where skipped), in order.

    Raises:
        DeepFaultError: A path that is a directory (``.`` included), lies under a file, has
            a name too long for the file system (or for the temporary file written beside
            it), sits on a read-only file system, is no regular file (a device, a FIFO, a
            socket, anything under ``/proc``), or is the same file as another output (after
            resolving symlinks, or the same inode).
    """
    seen: list[tuple[str, Path]] = []
    out: list[Path | None] = []
    for param, raw in outputs:
        if raw is None or str(raw) == "-":
            out.append(None)
            continue
        text = os.fspath(raw)
        if not text.strip():
            raise error(param, "a file name", text)
        path = Path(text).expanduser()
        _check_names(param, path)
        if text.endswith(os.sep) or text in (".", "..") or path.is_dir():
            raise error(param, "a file name", text,
                        "it is a directory; give a file such as result.json inside it")
        _check_regular(param, path, text)
        _check_place(param, path, what="file")
        _check_temporary_name(param, path)
        other = next((p for p, q in seen if same_file(path, q)), None)
        if other is not None:
            raise error(param, f"a file other than {other}'s", text,
                        "two outputs of one run would overwrite each other; give them different names")
        seen.append((param, path))
        out.append(path)
    return out


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path after resolving symlinks (``..``
    included), or, where both exist, the same inode (hard links, bind mounts).
    """
    if os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b)):
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def check_not_inputs(outputs: Iterable[tuple[str, str | os.PathLike | None]],
                     inputs: Iterable[tuple[str, str | os.PathLike | None]]) -> None:
    """Refuse an output that is one of the run's inputs (after resolving symlinks, or the same
    inode), before any work: writing it would replace what the run reads.

    Args:
        outputs: ``(parameter, path)`` of every file or folder the run writes (``None``: none).
        inputs: ``(parameter, path)`` of every file it reads; one that does not exist is
            skipped (nothing there to lose). A parameter that is both (a store the run
            resumes) is not compared with itself.

    Raises:
        DeepFaultError: ``OUT must be a file other than IN's ...; got PATH; ...``, one line
            naming both parameters and both paths.
    """
    read = [(p, os.fspath(i)) for p, i in inputs if i is not None and os.fspath(i) not in ("", "-")]
    read = [(p, os.path.expanduser(i)) for p, i in read if os.path.lexists(os.path.expanduser(i))]
    for param, raw in outputs:
        if raw is None or os.fspath(raw) in ("", "-"):
            continue
        text = os.fspath(raw)
        for in_param, in_path in read:
            if in_param != param and same_file(os.path.expanduser(text), in_path):
                raise error(param, f"a file other than the input {in_param} ({in_path!r})", text,
                            f"writing it would replace {in_param}'s file; choose another name")


def check_not_under(outputs: Iterable[tuple[str, str | os.PathLike | None]], folder_param: str,
                    folder: str | os.PathLike | None) -> None:
    """Refuse an output that is ``folder`` or lies under it (a corpus, whose folder must hold only
    its own files), after resolving symlinks, before any work.

    Raises:
        DeepFaultError: ``OUT must be a path outside FOLDER_PARAM's folder ...; got PATH; ...``.
    """
    if folder is None:
        return
    root = os.path.normcase(os.path.realpath(os.path.expanduser(folder)))
    for param, raw in outputs:
        if raw is None or os.fspath(raw) in ("", "-"):
            continue
        text = os.fspath(raw)
        where = os.path.normcase(os.path.realpath(os.path.expanduser(text)))
        if where == root or where.startswith(root.rstrip(os.sep) + os.sep):
            raise error(param, f"a path outside the {folder_param} folder ({os.fspath(folder)!r})", text,
                        "that folder holds only the corpus's own files; write the output elsewhere")


def _check_regular(param: str, path: Path, text: str) -> None:
    """A regular file or nothing yet: never a device, FIFO, socket or ``/proc`` entry (which an
    atomic rename would replace, or a write would block on), symlinks followed.
    """
    for where in (os.path.abspath(path), os.path.realpath(path)):
        if where == "/proc" or where.startswith("/proc/"):
            raise error(param, "a regular file or a new name", text,
                        "it is under /proc; give a file name such as result.json")
    try:
        mode = os.stat(path).st_mode
    except OSError:  # absent (or a dangling symlink, whose target is then a new file)
        return
    if not stat.S_ISREG(mode):
        kind = ("a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
                else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "no regular file")
        raise error(param, "a regular file or a new name", text,
                    f"it is {kind}, which writing would replace; give a file name such as result.json")


def _check_temporary_name(param: str, path: Path) -> None:
    """The temporary file written beside ``path`` (``.NAME.PID.XXXXXXXX.tmp``, see
    :func:`deepfault._io.atomic_path`) must fit the file system's name limit too.
    """
    from ._io import temporary_name_overhead

    limit = _name_max(_nearest_existing(path.parent if str(path.parent) else Path(".")))
    overhead = temporary_name_overhead()
    size = len(os.fsencode(path.name))
    if size + overhead > limit:
        raise error(param, f"a file name of at most {limit - overhead} bytes", f"<a name of {size} bytes>",
                    f"the temporary file written beside it adds {overhead} bytes to the file system's "
                    f"limit of {limit}; choose a shorter name")


def check_writable(path: str | os.PathLike, param: str = "output") -> Path:
    """Fail early, before any work, when ``path`` cannot be written; creates nothing: the
    one-path form of :func:`check_outputs` (which checks several outputs together, sibling
    files included).
    """
    return check_outputs((param, path))[0] or Path(path)


def check_output_dir(param: str, raw: str | os.PathLike) -> Path:
    """A folder a command will create (or fill): not a file, not under a file, writable."""
    text = os.fspath(raw)
    if not text.strip():
        raise error(param, "a folder name", text)
    path = Path(text).expanduser()
    _check_names(param, path)
    if path.exists() and not path.is_dir():
        raise error(param, "a folder", text, "it is an existing file; give a folder name")
    try:
        resolved = path.resolve()
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13)
        raise error(param, "a folder", text, "it is a symbolic link loop; give a folder name") from None
    if path.is_symlink() and not path.exists():  # made beside it and swapped in: that would fail
        raise error(param, "a folder", text, f"it is a symbolic link to {os.readlink(path)!r}, which does "
                    "not exist; create that folder first, or give another name")
    if resolved == resolved.parent:  # even where it is writable (as root), results never go there
        raise error(param, "a folder of its own", text,
                    "writing results into the file system's root is refused; give a folder such as out/")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise error(param, "a writable folder", text, "choose another folder")
        return path
    _check_place(param, path / "x", what="folder")
    return path


def check_report_dir(param: str, raw: str | os.PathLike,
                     others: Iterable[tuple[str, str | os.PathLike | None]] = ()) -> Path:
    """A report folder: new, empty, or a previous report's that holds nothing but what its
    manifest (:data:`deepfault._io.REPORT_MANIFEST`) lists, which is then replaced; never a
    folder that holds anything else (``.``, ``results/``, a report folder where a store was put
    later), nor one that holds one of ``others``: ``(parameter, path)`` of the run's own inputs
    and outputs (``regress --store rep/s.sqlite --report rep``), even before they exist.
    """
    import errno

    from ._io import REPORT_MANIFEST, unlisted_files

    text = os.fspath(raw)
    try:
        os.stat(os.path.expanduser(text))
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise error(param, "a folder", text, "it is a loop of symbolic links; give a new folder such "
                        "as report/") from None
    path = check_output_dir(param, raw)
    resolved = os.path.realpath(path)
    here = os.path.realpath(os.getcwd())
    if resolved == os.path.dirname(resolved) or (here + "/").startswith(resolved + "/"):
        raise error(param, "a folder of its own", text,
                    "the report replaces its folder, which cannot be '/', '.' or a folder above this "
                    "one; give a new folder such as report/")
    for other, where in others:
        if where is None or os.fspath(where) in ("", "-"):
            continue
        if os.path.realpath(os.path.expanduser(os.fspath(where))).startswith(resolved + "/"):
            raise error(param, "a folder that holds none of the run's own files", text,
                        f"{other} ({os.fspath(where)!r}) lies inside it, and a report folder holds only what "
                        "the report writes; give another folder such as report/")
    if path.is_dir():
        foreign = unlisted_files(path, first=2)
        if foreign:
            raise error(param, "a new folder or a previous report's", text,
                        f"it holds files no report wrote ({foreign[0]!r}"
                        f"{', ...' if len(foreign) > 1 else ''}; a report's are listed in its "
                        f"{REPORT_MANIFEST}), which replacing it would delete; give a new folder such as "
                        "report/, or move them out")
    return path


def without_repeats(param: str, values: Sequence, *, why: str) -> tuple:
    """``values`` with each repeat dropped, in first-seen order; a warning (logged, so the CLI prints
    it as one ``deepfault:`` line) names the repeated values and ``why`` they are dropped.

    Args:
        param: The option or field, for the message.
        values: The values given.
        why: Why a repeat is dropped, for the message (``each seed is searched once``).

    Returns:
        The distinct values as a tuple (``values`` itself, as a tuple, when none repeats).

    Examples:
        >>> without_repeats("seeds", [0, 1, 0], why="a repeated seed repeats its campaign")
        (0, 1)
    """
    kept = tuple(dict.fromkeys(values))
    if len(kept) < len(values):
        import logging
        from collections import Counter

        counts = Counter(values)
        repeated = [v for v in kept if counts[v] > 1]
        shown = ", ".join(str(v) for v in repeated[:5]) + (", ..." if len(repeated) > 5 else "")
        logging.getLogger(__name__).warning(
            "%s: %d repeated value(s) dropped (%s): %s; %d kept", param, len(values) - len(kept), shown, why,
            len(kept))
    return kept


def check_name(param: str, value, *, max_length: int = 200) -> str:
    """An identifier that also names files (a campaign id): no folders, no ``..``, printable."""
    if not isinstance(value, str) or not value.strip():
        raise error(param, "a non-empty name", value)
    bad = value in (".", "..") or ".." in value.split("/") or any(c in value for c in "/\\\0")
    if bad or not value.isprintable() or len(value) > max_length:
        raise error(param, f"a plain name (letters, digits, '-', '_', '.'; at most {max_length} characters, "
                    "no '/' or '..')", value, "it becomes part of file names")
    return value


# --- data and models --------------------------------------------------------------------------


def check_labels(param: str, labels, num_classes: int, *, count: int | None = None):
    """``(N,)`` integer labels in ``0 .. num_classes - 1`` as an ``int64`` array."""
    import numpy as np

    if labels is None:
        raise error(param, f"an array of {count if count is not None else 'N'} class labels", None,
                    "pass the inputs' true labels (they decide which inputs fail)")
    try:
        y = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
    except Exception:  # noqa: BLE001 - anything array_like refuses
        raise error(param, "an array of integer class labels", f"<{type(labels).__name__}>") from None
    if y.ndim != 1 or (count is not None and len(y) != count):
        raise error(param, f"a 1-D array of {count if count is not None else 'N'} labels",
                    f"<shape {y.shape}>")
    if y.dtype.kind == "f":
        if not np.isfinite(y).all() or (y != np.round(y)).any():
            bad = y[~np.isfinite(y) | (y != np.round(y))][0]
            raise error(param, "integer class labels", float(bad))
    elif y.dtype.kind not in "biu":
        raise error(param, "integer class labels", f"<dtype {y.dtype}>")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        bad = int(y.min()) if y.min() < 0 else int(y.max())
        raise error(param, f"labels in 0..{num_classes - 1} (the model's {num_classes} classes)", bad)
    return y


def check_finite_outputs(models: Sequence, inputs, *, names: Sequence[str] | None = None, sample: int = 16,
                         param: str = "model", same_classes: bool = False) -> list[int]:
    """Run every model on the first ``sample`` inputs; refuse NaN/inf outputs, inputs a model
    cannot take and (with ``same_classes``) differing class counts. Returns each model's number
    of classes (the commands word the class-count mismatch their own way).
    """
    import torch

    x = torch.as_tensor(inputs[:sample]).float()
    classes = []
    for i, model in enumerate(models):
        label = names[i] if names is not None else f"{param} {i}"
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        try:
            with torch.inference_mode():
                out = model(x.to(device))
        except (RuntimeError, ValueError, TypeError) as err:
            raise error(label, f"a model that takes the data's inputs of shape {tuple(x.shape[1:])}",
                        f"<{type(err).__name__}: {str(err).splitlines()[0][:100] if str(err) else ''}>",
                        "give models of the data set's input shape") from None
        out = out[0] if isinstance(out, (tuple, list)) else out
        out = next(iter(out.values())) if isinstance(out, dict) else out
        if not torch.isfinite(out).all():
            raise error(f"{label}", "a model with finite outputs on the data", "<NaN or infinite outputs>",
                        "its weights are broken (NaN or inf); retrain or reload it")
        classes.append(int(out.shape[-1]))
    if same_classes and len(set(classes)) > 1:
        detail = ", ".join(f"{names[i] if names else i}: {c}" for i, c in enumerate(classes))
        raise error("models", "classifiers of the same classes", f"<{detail} classes>",
                    "compare models trained on the same data set")
    return classes
