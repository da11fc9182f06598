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
import re
import sys
import traceback
import warnings
from collections.abc import Sequence

from .. import _signals
from ..core.registry import invalid_choice, unrecognized_options
from ..errors import DeepFaultError, UserCodeError, failure_line
from ..errors import out_of_memory_line as out_of_memory_line
from ..methods import ABOUT
from ..methods import ALL as _METHODS
from . import _preflight

__all__ = ["main", "build_parser", "COMMANDS"]

#: The engine's sub-commands (models, data, experiments and reports of any method).
ENGINE_COMMANDS = ("train", "data", "inspect", "experiment", "corpus")
#: Sub-command modules of this package, in help order: the methods' own, then the engine's.
COMMANDS = (*(c for method in _METHODS for c in method.commands), *ENGINE_COMMANDS)


#: Where a sub-command's parser leaves itself on the namespace when it did not recognise an
#: argument, so that the message names that command's help (``deepfault run --help``).
_OWNER = "_deepfault_unrecognized_by"


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line (``deepfault: error: ...``), a "did you mean" where a known name
    is close, and a pointer to the command's own ``--help``.

    No abbreviations: ``--batch`` must not silently mean ``--batch-size``, and an old
    spelling must not match a new option by its prefix.
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # A bounded argument type's "argument -k: must be ..." reads as every other check's
        # "-k must be ...; got ..." (deepfault.checks' one message shape).
        message = re.sub(r"^argument (\S+): must be ", r"\1 must be ", message)
        # A name type's "argument --measure: unknown measure ..." (registry.unknown_name's shape).
        message = re.sub(r"^argument (\S+): unknown ", r"\1: unknown ", message)
        self.exit(2, f"deepfault: error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(namespace, _OWNER):  # the innermost command that left them
            setattr(namespace, _OWNER, self)
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        owner = vars(namespace).pop(_OWNER, self)
        if extras:
            owner.error(owner.unrecognized(extras))
        return namespace

    def unrecognized(self, extras: Sequence[str]) -> str:
        """``unrecognized arguments: ...`` with the closest option of this command for each
        unknown option (``--mesure`` -> ``--measure``).
        """
        return unrecognized_options(extras, (o for a in self._actions for o in a.option_strings
                                             if o.startswith("--")))

    def _check_value(self, action, value):
        # argparse's "invalid choice: 'blurr' (choose from ...)" with the closest choices.
        message = None if action.choices is None or value in action.choices else invalid_choice(
            value, action.choices)
        if message is not None:
            raise argparse.ArgumentError(action, message)
        super()._check_value(action, value)


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
    parser = _Parser(prog="deepfault", description=ABOUT)
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
    """Run the command line; returns the exit status (0 success, 2 bad input, 130 after SIGINT,
    143 after SIGTERM: both unwind alike, see :mod:`deepfault._signals`).
    """
    with _signals.handling():
        try:
            status = _main(argv)
        except KeyboardInterrupt as exc:
            return _interrupted(_signals.exit_status(exc))
        # A command that caught the interruption itself (to keep a resumable state) returns 130.
        return _interrupted(_signals.exit_status()) if status == 130 else status


def _join_negative_values(argv: list[str]) -> list[str]:
    """``--budget -5s`` as ``--budget=-5s``: argparse takes a value that starts with '-' for an
    option unless it is a plain number, so values such as ``-5s`` or ``-1e3`` get the ``=``
    form here (and then a message about the value, not about an unknown option).
    """
    out: list[str] = []
    for arg in argv:
        if (out and out[-1].startswith("--") and "=" not in out[-1] and re.match(r"-[\d.]", arg)
                and not re.fullmatch(r"-\d+|-\d*\.\d+", arg)):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def _interrupted(status: int) -> int:
    name = "SIGTERM" if status == 143 else "SIGINT"
    with contextlib.suppress(Exception):
        print(f"deepfault: interrupted ({name}); temporary files removed, finished results kept "
              "(rerun the same command to resume where it has a store)", file=sys.stderr)
    return status


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from ._common import check_renamed, remembered_data_dir

    renamed = check_renamed(argv)
    if renamed is not None:
        print(f"deepfault: error: {renamed}", file=sys.stderr)
        return 2
    parser = build_parser()
    try:
        args = parser.parse_args(_join_negative_values(argv))
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    args.argv = ["deepfault", *argv]
    logging.basicConfig(format="deepfault: %(message)s")
    logging.getLogger().setLevel(_log_level(args))
    try:
        remembered_data_dir(args)  # the model file's data root when no --data-dir/$DEEPFAULT_DATA
        _preflight.check(parser, args)  # every option and output (that folder's files too), before any work
        with warnings.catch_warnings():
            # PyTorch's own warnings about files it refuses: the one error line says it all.
            warnings.filterwarnings("ignore", module=r"torch(\.|$)")
            return args.func(args)
    except (DeepFaultError, MemoryError, RuntimeError, OSError) as err:
        line = failure_line(err, args)  # None: a bug, with its traceback
        if line is None:
            raise
        if isinstance(err, UserCodeError) and args.verbose and err.__cause__ is not None:
            traceback.print_exception(err.__cause__, file=sys.stderr)  # where in the user's code
        print(f"deepfault: error: {line}", file=sys.stderr)
        return 2
