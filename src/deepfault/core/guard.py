"""Every value and path of a run checked before any work: the guard the command line runs
between parsing and the command, usable from Python on any namespace of settings.

A run's settings arrive as attributes (``args.model``, ``args.out``, ...) with the option that
spells each (``dest -> "--model"``, for the messages). :func:`check_values` refuses non-finite
numbers, over-long names and a missing device; :func:`check_paths` checks every file and folder
the run declares it will write (its :class:`Output` list), together, siblings included, and
refuses an output that is one of the run's :func:`inputs` or inside ``--corpus`` or the report
folder. The checks themselves are :mod:`deepfault.checks`'.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from .. import checks as c
from .constraints import FieldConstraint, FilePath

__all__ = ["Output", "output_path", "sibling", "declared", "report_folder", "inputs", "check_values",
           "check_paths", "check_declared"]

#: ``dest -> constraint`` of a run's settings that name files (:attr:`FieldConstraint.role`): the
#: declarations of the options, which the command line collects from its parser. A data set or
#: split that is a name (``mnist``, ``test``) names no file and is skipped, as is every input that
#: does not exist.
Files = Mapping[str, FieldConstraint]


class Output(NamedTuple):
    """One path a run will write, as it declares it (a command module's ``outputs(args)``).

    :func:`check_paths` checks every declared output before the run starts, and the run
    writes exactly these paths.

    Attributes:
        option: How messages name it: ``"--out"``, ``"--out (its inputs, .npz)"``.
        path: Where (``None``: not written this run).
        folder: A folder the run creates or fills, not a file.
    """

    option: str
    path: Path | None
    folder: bool = False


def output_path(value, option: str = "an output file") -> Path | None:
    """An output option's path: ``None`` for none or ``'-'`` (writes none).

    Args:
        value: The option's value.
        option: How the message names it (``"--save-model"``).

    Raises:
        DeepFaultError: ``value`` ends in a path separator (``m/``): it names a folder, and
            ``Path`` would drop the separator and write a file named ``m``.
    """
    if value in (None, "-"):
        return None
    text = os.fspath(value)
    if text.endswith(os.sep) and text.strip(os.sep):  # '/' alone: the root, refused as a directory
        raise c.error(option, "a file name", text, f"it ends in {os.sep!r}, so it names a folder; give a "
                      f"file inside it ({text}NAME)")
    return Path(value)


def sibling(path: Path | None, suffix: str) -> Path | None:
    """``path`` with another suffix (``None`` for none, or a path without a file name, which its
    own check refuses first).
    """
    if path is None or not path.name or path.name in (".", ".."):
        return None
    return path.with_suffix(suffix)


def declared(outputs: Sequence[Output], option: str) -> Path | None:
    """The path of the output named ``option`` in ``outputs``."""
    return next((o.path for o in outputs if o.option == option), None)


def report_folder(store: str | os.PathLike) -> Path:
    """The report folder of a results store (a path with a file name) when none is given:
    ``STEM-report`` beside it.
    """
    store = Path(store)
    return store.with_name(store.stem + "-report")


def check_values(args, options: Mapping[str, str]) -> None:
    """Raise :class:`~deepfault.errors.DeepFaultError` for the first non-finite number, name of
    more than 255 bytes or unusable device among the settings ``options`` names (``dest ->
    option``); counts and numbers arrive bounded by their declarations.
    """
    for dest, option in options.items():
        value = getattr(args, dest, None)
        if isinstance(value, float) and not math.isfinite(value):
            raise c.error(option, "a finite number", _typed(args, option, value))
        if isinstance(value, str) and any(len(os.fsencode(part)) > 255 for part in value.split("/")):
            raise c.error(option, "a name of at most 255 bytes (between slashes)",
                          f"<{len(value)} characters>",
                          "no file system takes longer names")
    if "device" in options and getattr(args, "device", None) is not None:
        c.check_device(args.device, "--device")


def check_paths(args, options: Mapping[str, str], outputs: Sequence[Output] | None,
                files: Files | None = None) -> None:
    """Check the ``outputs`` a run declares (``None``: it declares none) against each other and
    against what it reads (every setting ``files`` declares an input, a folder's files included),
    then ``--corpus DIR`` and the report folder it replaces (which never deletes what it did not
    write, the run's own files included).
    """
    read = inputs(args, options, files)
    if outputs is not None:
        check_declared(outputs)
        c.check_not_inputs(((o.option, o.path) for o in outputs), read)
        _check_not_in_folders(outputs, args, options, files)
    report = _report_option(args)
    if getattr(args, "corpus", None) is not None and outputs is not None:  # --corpus DIR: its files only
        written = [(o.option, o.path) for o in outputs if o.option != "--corpus"]
        c.check_not_under([*written, *([report] if report else [])], "--corpus", args.corpus)
    if report is not None:
        own = [(o.option, o.path) for o in outputs or () if not o.folder]
        c.check_report_dir(report[0], report[1], [*own, *read])


def _report_option(args) -> tuple[str, str] | None:
    """``(option, folder)`` of the report folder the run replaces: ``--report DIR`` of the
    single-run commands, or ``deepfault report``'s ``--out`` (default :func:`report_folder`).
    """
    if getattr(args, "report_dir", None) is not None:
        return "--report", args.report_dir
    if getattr(args, "command", None) == "report":
        if args.out is not None:
            return "--out", args.out
        if not Path(args.store).name:  # '.', '/': no store file; the command refuses it itself
            return None
        return "--out (default: STEM-report)", os.fspath(report_folder(args.store))
    return None


def inputs(args, options: Mapping[str, str], files: Files | None = None) -> list[tuple[str, str]]:
    """``(option, path)`` of every file and folder the run of ``args`` reads: the paths named by
    each setting that ``files`` declares an input (``None``, a Python caller's: every setting
    ``options`` names) (:meth:`FieldConstraint.paths`: lists and comma
    lists give one pair per file; ``--arch net.py:Net`` its ``net.py``; a model file the files it
    names). A setting parsed into something else (``--seed-indices FILE`` into its indices) names
    what was typed. :func:`check_paths` refuses any output that names one.
    """
    found: list[tuple[str, str]] = []
    for dest, constraint in _declared(options, files).items():
        value = getattr(args, dest, None)
        if constraint.role != "input" or value is None or isinstance(value, bool):
            continue
        option = options.get(dest, f"--{dest.replace('_', '-')}")
        named = _is_text(value) or (isinstance(value, (list, tuple)) and all(map(_is_text, value)))
        found += [(option, p) for p in constraint.paths(value if named else _typed(args, option, None))
                  if p and p != "-"]
    return found


def _declared(options: Mapping[str, str], files: Files | None) -> Files:
    """``files``, or for a Python caller without declarations every setting ``options`` names, read
    as a file the run reads.
    """
    return files if files is not None else {dest: FilePath("input") for dest in options}


def _is_text(value) -> bool:
    return isinstance(value, (str, os.PathLike))


def _check_not_in_folders(outputs: Sequence[Output], args, options: Mapping[str, str],
                          files: Files | None) -> None:
    """Refuse an output that would replace a file inside a folder the run reads (``--data-dir``)."""
    for dest, constraint in _declared(options, files).items():
        folder = getattr(args, dest, None)
        if constraint.role != "input" or not getattr(constraint, "folder", False) or not isinstance(
                folder, (str, os.PathLike)):
            continue
        root = os.path.realpath(os.path.expanduser(os.fspath(folder)))
        for o in outputs:
            if o.path is None or o.folder or not os.path.lexists(o.path):
                continue
            where = os.path.realpath(os.path.expanduser(o.path))
            if where.startswith(root.rstrip(os.sep) + os.sep):
                option = options.get(dest, f"--{dest.replace('_', '-')}")
                raise c.error(o.option, f"a path outside the folder the run reads ({option} {str(folder)!r})",
                              os.fspath(o.path),
                              f"writing it would replace a file of {option}; choose another name")


def _typed(args, option: str, value):
    """What the user typed after ``option`` (messages quote that, not a parsed value)."""
    argv = getattr(args, "argv", None) or []
    for i, a in enumerate(argv):
        if a == option and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(option + "="):
            return a.split("=", 1)[1]
    return value


def check_declared(outputs: Sequence[Output]) -> None:
    """Check the outputs a run declares, folders first, then every file together (so that
    siblings that collide are caught).
    """
    for o in outputs:
        if o.folder and o.path is not None:
            c.check_output_dir(o.option, o.path)
    c.check_outputs(*((o.option, o.path) for o in outputs if not o.folder))
