"""Every option of every sub-command checked before the command starts any work.

:func:`check` runs between parsing and the command: the values and paths by
:mod:`deepfault.core.guard` (which a Python caller can use too), with each option's spelling
from the parser, and the command module's own ``preflight(args)`` (what only that command can
see) and ``outputs(args)`` (the paths it writes, a list of :class:`~deepfault.core.guard.Output`).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from ..core.constraints import FieldConstraint
from ..core.guard import Output, check_paths, check_values, inputs, output_path

__all__ = ["check", "declared_inputs"]


def _actions(parser: argparse.ArgumentParser, args) -> list[argparse.Action]:
    """The actions of the sub-command that ``args`` runs (and of the parsers above it)."""
    found: list[argparse.Action] = []
    stack = [parser]
    while stack:
        p = stack.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = getattr(args, action.dest, None)
                if chosen in action.choices:
                    stack.append(action.choices[chosen])
            else:
                found.append(action)
    return found


def constraint(action: argparse.Action) -> FieldConstraint | None:
    """The declaration an option was made from: a config field's (:func:`._common.add_field`), or
    its argument type's (:class:`._common.FieldType`).
    """
    typed = getattr(action.type, "constraint", None)
    if typed is not None and typed.role is not None:  # a path typed by its role (--seed-indices FILE)
        return typed
    return getattr(action, "constraint", None) or typed


def _files(parser: argparse.ArgumentParser, args) -> dict[str, FieldConstraint]:
    """``dest -> declaration`` of the options that name files (their declared role)."""
    found = {}
    for action in _actions(parser, args):
        declared = constraint(action)
        if declared is not None and declared.role is not None:
            found[action.dest] = declared
    return found


def declared_inputs(parser: argparse.ArgumentParser, args) -> list[tuple[str, str]]:
    """``(option, path)`` of every file and folder the run of ``args`` reads, from the declarations."""
    return inputs(args, _options(parser, args), _files(parser, args))


def _options(parser: argparse.ArgumentParser, args) -> dict[str, str]:
    """``dest -> the option's longest spelling`` for the sub-command that ``args`` runs."""
    names: dict[str, str] = {}
    for action in _actions(parser, args):
        if action.option_strings:
            if not (action.nargs == 0 and action.dest in names):  # --surprise's name, not --no-surprise's
                names[action.dest] = max(action.option_strings, key=len)
        elif action.dest not in ("help", argparse.SUPPRESS):
            names[action.dest] = str(action.metavar or action.dest)  # a positional, e.g. MODEL
    return names


def check(parser: argparse.ArgumentParser, args) -> None:
    """Raise :class:`~deepfault.errors.DeepFaultError` for the first bad option of ``args``."""
    options = _options(parser, args)
    check_values(args, options)
    module = None if getattr(args, "func", None) is None else importlib.import_module(args.func.__module__)
    own = getattr(module, "preflight", None)
    if own is not None:
        own(args)
    declare = getattr(module, "outputs", None)
    files = _files(parser, args)
    listed = None if declare is None else declare(args)
    check_paths(args, options, written(args, options, files, listed), files)


def written(args, options: dict[str, str], files: dict[str, FieldConstraint],
            listed: list[Output] | None) -> list[Output] | None:
    """Every path the run writes: what its command lists (``outputs(args)``: siblings, defaults),
    and the value of every option declared an output that the list does not name, so an output
    option is checked even where its command forgot to list it (``--report`` is the report
    folder's own check).
    """
    named = {o.option.split(" ")[0] for o in listed or ()}
    extra = [Output(options[dest], output_path(getattr(args, dest, None), options[dest]),
                    folder=getattr(declared, "folder", False))
             for dest, declared in files.items()
             if declared.role == "output" and dest != "report_dir" and options.get(dest) not in named
             and getattr(args, dest, None) is not None]
    from ._common import spread_runtime  # noqa: PLC0415 (the command line's own rule)

    # a spread pass keeps its finished shards beside --out (regress and xplore spread otherwise)
    state = spread_runtime(args).shard_state if getattr(args, "spread_pass", False) else None
    if state is not None:
        extra.append(Output("--out (its shard state, .shards)", Path(state)))
    return listed if not extra else [*(listed or ()), *extra]

