"""The ``deepfault`` command line: a thin layer that parses, calls one function, prints.

Each sub-command lives in its own module of this package with an ``add_parser(sub)``
function. A method's commands come from its record (``Method.commands``, listed by
:mod:`deepfault.methods`); the engine's own follow. :data:`COMMANDS` is the order
``deepfault --help`` shows them in.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import DeepFaultError
from ..methods import ALL as _METHODS

__all__ = ["main", "build_parser", "COMMANDS"]

#: The engine's sub-commands (models, data, experiments and reports of any method).
ENGINE_COMMANDS = ("train", "data", "inspect", "experiment")
#: Sub-command modules of this package, in help order: the methods' own, then the engine's.
COMMANDS = (*(c for method in _METHODS for c in method.commands), *ENGINE_COMMANDS)


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line (``deepfault: error: ...``) and a pointer to ``--help``."""

    def error(self, message: str):
        self.exit(2, f"deepfault: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="deepfault",
        description="Test deep neural networks the way software is tested: localise the neurons "
        "behind a classifier's mistakes and synthesize inputs that expose them (DeepFault), measure "
        "coverage, find inputs on which models disagree (DeepXplore), and fuzz a new version of a "
        "model for regressions (DRFuzz).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    args.argv = ["deepfault", *argv]
    logging.basicConfig(level=logging.INFO, format="deepfault: %(message)s")
    try:
        return args.func(args)
    except DeepFaultError as err:
        print(f"deepfault: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("deepfault: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            sys.stdout = open(Path("/dev/null"), "w")  # noqa: SIM115
        return 0
