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


class _Completion(argparse.Action):
    """``--print-completion SHELL``: shtab's script for the whole parser, then exit."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            import shtab
        except ModuleNotFoundError:
            parser.exit(2, "deepfault: error: --print-completion needs shtab; pip install shtab\n")
        with contextlib.suppress(BrokenPipeError):
            print(shtab.complete(parser, shell=values))
        parser.exit(0)


def _log_level(args) -> int:
    """INFO by default; each -v one step more detail, each -q one step less."""
    step = args.verbose - args.quieter
    return logging.DEBUG if step > 0 else {0: logging.INFO, -1: logging.WARNING}.get(step, logging.ERROR)


def build_parser() -> argparse.ArgumentParser:
    """The ``deepfault`` parser with every sub-command (each module's ``add_parser``)."""
    parser = _Parser(
        prog="deepfault",
        description="Test deep neural networks the way software is tested: localise the neurons "
        "behind a classifier's mistakes and synthesize inputs that expose them (DeepFault), measure "
        "coverage, find inputs on which models disagree (DeepXplore), and fuzz a new version of a "
        "model for regressions (DRFuzz), and fine-tune it on the failing inputs found (repair).",
    )
    from .._version import __version__

    parser.add_argument("--version", action="version", version=f"deepfault {__version__}")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-v", "--verbose", action="count", default=0,
                       help="more messages: -v adds debugging detail (before the command)")
    level.add_argument("-q", "--quiet", action="count", default=0, dest="quieter",
                       help="fewer messages: -q shows only warnings and errors, -qq only errors "
                       "(before the command)")
    parser.add_argument("--print-completion", choices=("bash", "zsh", "tcsh"), metavar="SHELL",
                        action=_Completion, help="print a tab-completion script for bash, zsh or tcsh "
                        "(e.g. deepfault --print-completion bash > ~/.local/share/bash-completion/"
                        "completions/deepfault)")
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
    logging.basicConfig(format="deepfault: %(message)s")
    logging.getLogger().setLevel(_log_level(args))
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
