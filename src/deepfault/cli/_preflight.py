"""Every option of every sub-command checked before the command starts any work.

:func:`check` runs between parsing and the command. Counts and numbers arrive bounded: each
option that sets a declared field is parsed by its declaration (:mod:`deepfault.core.constraints`,
the same check the library makes). This pass refuses non-finite numbers and over-long names,
checks the device, runs the command module's own ``preflight(args)`` where it has one (what
only that command can see), and checks every file and folder the command will write,
together, sibling files included (``xplore --out r.npz`` would be overwritten by its own
inputs file). The files are those the command's module
declares (its ``outputs(args)``, a list of :class:`~._common.Output`), the same list the
command writes to; the checks themselves live in :mod:`deepfault.checks`, which the
Python API uses too.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
from pathlib import Path

from .. import checks as c

#: Options that name files a command reads, by ``dest`` (their spelling comes from the parser, as
#: for the bounds): one table, not an ``inputs(args)`` per command, because the same few options
#: (``--model``, ``--dataset``, ``--surprise``, ...) recur across commands and read files the same
#: way everywhere. A data set or split that is a name (``mnist``, ``test``) names no file and is
#: skipped, as is every input that does not exist.
INPUTS = ("model", "models", "m1", "m2", "weights", "dataset", "split", "profile", "surprise", "inputs",
          "config", "store")
#: Of these, the model options: a Keras stem ``DIR/NAME`` reads ``NAME.json`` and ``NAME.h5``.
MODEL_INPUTS = ("model", "models", "m1", "m2")


def _options(parser: argparse.ArgumentParser, args) -> dict[str, str]:
    """``dest -> the option's longest spelling`` for the sub-command that ``args`` runs."""
    names: dict[str, str] = {}
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(args, action.dest, None)
                if chosen in action.choices:
                    stack.append(action.choices[chosen])
            elif action.option_strings:
                names[action.dest] = max(action.option_strings, key=len)
            elif action.dest not in ("help", argparse.SUPPRESS):
                names[action.dest] = str(action.metavar or action.dest)  # a positional, e.g. MODEL
    return names


def check(parser: argparse.ArgumentParser, args) -> None:
    """Raise :class:`~deepfault.errors.DeepFaultError` for the first bad option of ``args``."""
    options = _options(parser, args)
    for dest, option in options.items():
        value = getattr(args, dest, None)
        # counts and numbers are bounded by their declarations while parsing (core.constraints)
        if isinstance(value, float) and not math.isfinite(value):
            raise c.error(option, "a finite number", _typed(args, option, value))
        if isinstance(value, str) and any(len(os.fsencode(part)) > 255 for part in value.split("/")):
            raise c.error(option, "a name of at most 255 bytes (between slashes)",
                          f"<{len(value)} characters>",
                          "no file system takes longer names")
    if "device" in options and getattr(args, "device", None) is not None:
        c.check_device(args.device, "--device")
    module = None if getattr(args, "func", None) is None else importlib.import_module(args.func.__module__)
    own = getattr(module, "preflight", None)  # what only the command can see (its module's hook)
    if own is not None:
        own(args)
    declare = None if module is None else getattr(module, "outputs", None)
    declared = declare(args) if declare is not None else []
    read = inputs(args, options)
    if declare is not None:
        check_declared(declared)
        c.check_not_inputs(((o.option, o.path) for o in declared), read)
    report = _report_folder(args)
    if getattr(args, "corpus", None) is not None and declare is not None:  # --corpus DIR: its files only
        written = [(o.option, o.path) for o in declared if o.option != "--corpus"]
        c.check_not_under([*written, *([report] if report else [])], "--corpus", args.corpus)
    if report is not None:  # never deletes what it did not write, the run's own files included
        own = [(o.option, o.path) for o in declared if not o.folder]
        c.check_report_dir(report[0], report[1], own + read)


def _report_folder(args) -> tuple[str, str] | None:
    """``(option, folder)`` of the report folder the command replaces: ``--report DIR`` of the
    single-run commands, or ``deepfault report``'s ``--out`` (default ``STEM-report`` beside the
    store).
    """
    if getattr(args, "report_dir", None) is not None:
        return "--report", args.report_dir
    if getattr(args, "command", None) == "report":
        if args.out is not None:
            return "--out", args.out
        store = Path(args.store)
        if not store.name:  # '.', '/': no store file; the command refuses it itself
            return None
        return "--out (default: STEM-report)", os.fspath(store.with_name(store.stem + "-report"))
    return None


def inputs(args, options: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """``(option, path)`` of every file the command of ``args`` reads (:data:`INPUTS`): lists and
    comma lists (``--model a.pt,b.pt``, ``--surprise s1.npz,-``) give one pair per file, and
    ``--seed-indices FILE`` its file. The preflight refuses any output that names one of them.
    """
    options = options if options is not None else {}
    found: list[tuple[str, str]] = []
    for dest in INPUTS:
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool):
            continue
        option = options.get(dest, f"--{dest.replace('_', '-')}")
        items = [value] if isinstance(value, (str, os.PathLike)) else list(value)
        for item in items:
            if item is None:
                continue
            text = os.fspath(item)
            parts = [text] if os.path.lexists(text) or "," not in text else text.split(",")
            for part in (p.strip() for p in parts):
                if not part or part == "-":
                    continue
                found.append((option, part))
                if dest in MODEL_INPUTS:
                    found += [(option, f"{part}.json"), (option, f"{part}.h5")]
    if "seed_indices" in options:
        typed = _typed(args, options["seed_indices"], None)
        if isinstance(typed, str):
            found.append((options["seed_indices"], typed))
    return found


def _typed(args, option: str, value):
    """What the user typed after ``option`` (messages quote that, not a parsed value)."""
    argv = getattr(args, "argv", [])
    for i, a in enumerate(argv):
        if a == option and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(option + "="):
            return a.split("=", 1)[1]
    return value


def check_declared(outputs) -> None:
    """Check the outputs a command declares (its module's ``outputs(args)``), folders first,
    then every file together (so that siblings that collide are caught).
    """
    for o in outputs:
        if o.folder and o.path is not None:
            c.check_output_dir(o.option, o.path)
    c.check_outputs(*((o.option, o.path) for o in outputs if not o.folder))
