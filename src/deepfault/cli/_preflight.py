"""Every option of every sub-command checked before the command starts any work.

:func:`check` runs between parsing and the command: the values and paths by
:mod:`deepfault.core.guard` (which a Python caller can use too), with each option's spelling
from the parser, and the command module's own ``preflight(args)`` (what only that command can
see) and ``outputs(args)`` (the paths it writes, a list of :class:`~deepfault.core.guard.Output`).
"""

from __future__ import annotations

import argparse
import importlib

from ..core.guard import check_paths, check_values, inputs

__all__ = ["check", "inputs"]


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
    check_values(args, options)
    module = None if getattr(args, "func", None) is None else importlib.import_module(args.func.__module__)
    own = getattr(module, "preflight", None)
    if own is not None:
        own(args)
    declare = getattr(module, "outputs", None)
    check_paths(args, options, None if declare is None else declare(args))
