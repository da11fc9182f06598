"""What the sub-commands share: argument types, the help formatter, devices, tables.

``table`` and ``fmt`` are :mod:`deepfault.experiment.tables`' (one table renderer for the
terminal and the pages).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import check_device
from ..core.constraints import (
    KEY,
    SEED,
    Each,
    FieldConstraint,
    FilePath,
    Flag,
    Interval,
    Options,
    constraint_of,
)
from ..core.entry import apply_threads as apply_threads
from ..core.entry import thread_count as thread_count
from ..core.executors import Parallel, list_executors
from ..core.guard import Output as Output
from ..core.guard import declared as declared
from ..core.guard import output_path as output_path
from ..core.guard import sibling as sibling
from ..core.outcome import Outcome
from ..core.runtime import Runtime
from ..errors import DeepFaultError
from ..experiment.report import write_page
from ..experiment.saving import save_result
from ..experiment.tables import fmt as fmt
from ..experiment.tables import text_table
from ..fuzz.pair import Versions
from ..methods import ALL as _METHODS
from ..models.blackbox import RUNTIME_HELP, RUNTIMES
from ..models.io import recorded_data_root
from ..models.source import ModelSource
from ..models.specs import arch_spec

log = logging.getLogger("deepfault")

#: The terminal's table layout (:func:`deepfault.experiment.tables.text_table`).
table = text_table


# --------------------------------------------------------------------------- argument types
# Every bounded option is parsed by a declared constraint (:mod:`deepfault.core.constraints`):
# :class:`FieldType` refuses what is out of range while parsing, with the checks' one message shape
# (``must be EXPECTED; got VALUE``; the parser puts the option's name in front).


@dataclass(frozen=True)
class FieldType:
    """An argparse type made from a config field's declared constraint
    (:mod:`deepfault.core.constraints`): the API and the CLI refuse exactly the same values, with
    the same words (the parser puts the option's name in front).
    """

    constraint: FieldConstraint
    #: A reader of the text, once the constraint accepts it (``--arch A1,A2``'s per-model list).
    read: Callable[[str], Any] | None = None

    def __call__(self, text: str):
        try:
            value = self.constraint.parse("", text)
            return value if self.read is None else self.read(text)
        except DeepFaultError as err:
            raise argparse.ArgumentTypeError(str(err).removeprefix(" ")) from None


def argument_type(read: Callable[..., Any], *args) -> Callable[[str], Any]:
    """An argparse type from a library reader ``read(text, *args)``: its error is the option's."""

    def parse(text: str):
        try:
            return read(text, *args)
        except DeepFaultError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    parse.__name__ = getattr(read, "__name__", "value")
    return parse


def add_field(p: argparse._ActionsContainer, config: type, name: str, *flags: str,
              **overrides) -> argparse.Action:
    """Add the option that sets ``config``'s field ``name``: its spelling (``flags``, default the
    field's declared option), type, default and help all come from the field's declaration
    (:func:`deepfault.core.constraints.param`); ``overrides`` go to ``add_argument`` as they are
    (``metavar``, a ``dest`` that differs from the field's name).
    """
    field = next(f for f in dataclasses.fields(config) if f.name == name)
    constraint = field.metadata[KEY]
    option = field.metadata.get("option") or "--" + name.replace("_", "-")
    text = field.metadata.get("help") or name
    shown = text if field.metadata.get("plain_help") else f"{text}: {constraint.describe()}"
    kwargs: dict[str, Any] = {"dest": name, "default": field.default, "type": FieldType(constraint),
                              "metavar": field.metadata.get("metavar") or _metavar(constraint), "help": shown}
    if isinstance(constraint, Flag):
        kwargs = {"dest": name, "action": "store_false" if field.default else "store_true",
                  "help": field.metadata.get("help") or name}
    kwargs.update(overrides)
    action = p.add_argument(*(flags or (option,)), **kwargs)
    action.field = (config, name)  # type: ignore[attr-defined]  # its declaration, for the tests
    action.constraint = constraint  # type: ignore[attr-defined]  # and for the guard (its files' roles)
    return action


def add_fields(p: argparse._ActionsContainer, config: type, *names: str) -> None:
    """:func:`add_field` for each of ``config``'s fields ``names``, in that order."""
    for name in names:
        add_field(p, config, name)


def _metavar(constraint: FieldConstraint) -> str:
    if isinstance(constraint, FilePath):
        return "|".join((*constraint.words, "DIR" if constraint.folder else "FILE"))
    if isinstance(constraint, Interval):
        return "|".join(("N" if constraint.kind is int else "X", *constraint.words))
    many = isinstance(constraint, Each) or (isinstance(constraint, Options) and constraint.many)
    return "NAMES" if many else "NAME"


def config_from(args, config: type, **given):
    """``config`` built from the parsed options its fields declared (:func:`add_field`), with
    ``given`` overriding them (an option left out, ``None``: the field's default).
    """
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config)
              if getattr(args, f.name, None) is not None}
    return config(**{**values, **given})


#: ``--seed``: the random seed of every command (its declaration: :data:`~deepfault.core.constraints.SEED`).
seed_int = FieldType(SEED)
#: ``--threads``: ``auto`` or a number of threads (the declaration of :attr:`Runtime.threads`).
threads_value = FieldType(constraint_of(Runtime, "threads"))
#: ``--batch-size`` of the analyses: ``auto`` (sized from the memory, :mod:`deepfault.core.memory`)
#: or a number of inputs (the declaration of :attr:`Runtime.batch_size`).
batch_size_value = FieldType(constraint_of(Runtime, "batch_size"))
#: The argument types of options that name files a run reads or writes: the guard's lists of a
#: run's inputs and outputs come from these declarations (:mod:`deepfault.core.guard`).
READS = FieldType(FilePath("input"))
WRITES = FieldType(FilePath("output"))
#: A model file (and what it names: its data set's .npz, its architecture's .py).
MODEL = FieldType(constraint_of(ModelSource, "model"))
#: A folder a run reads, and one it writes.
READS_FOLDER = FieldType(FilePath("input", folder=True))
WRITES_FOLDER = FieldType(FilePath("output", folder=True))
#: ``--arch`` of the commands that build a model: a checked spec (its ``.py`` file an input), declared
#: as :class:`ModelSource`'s (whose own ``--arch`` the commands that open a model file take).
ARCH = FieldType(constraint_of(ModelSource, "arch"), read=arch_spec)


def names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one worth showing and the help does not say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        flag = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        if flag or action.default is None or action.default is argparse.SUPPRESS or "default" in text:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def remembered_data_dir(args) -> None:
    """Set ``args.data_dir`` to the data root the command's model files remember
    (:func:`deepfault.models.io.recorded_data_root`) when ``--data-dir`` names none.
    """
    if not hasattr(args, "data_dir") or args.data_dir is not None:
        return
    found = recorded_data_root([getattr(args, attr, None) for attr in ("model", "models", "m1", "m2")])
    if found is not None:
        args.data_dir = str(found)


# --------------------------------------------------------------------------- shared options

#: The options several commands share, declared once: ``name -> (flags, add_argument's keywords)``;
#: those of a model file are :class:`~deepfault.models.source.ModelSource`'s fields (:data:`SOURCE`),
#: ``threads`` and ``batch_size`` :class:`~deepfault.core.runtime.Runtime`'s.
#: A command adds them with :func:`add_options`, changing a keyword where its meaning differs.
OPTIONS: dict[str, tuple[tuple[str, ...], dict[str, Any]]] = {
    "seed": (("--seed",), dict(type=seed_int, default=0, metavar="S", help="the random seed")),
    "device": (("--device",), dict(default="auto",
        help="'cpu', 'cuda', 'cuda:N' or 'auto' (CUDA when available)")),
    "no_progress": (("--no-progress",), dict(action="store_true", help="no progress bar")),
    "m1": (("--m1",), dict(type=MODEL, required=True, metavar="FILE", help="the original model file")),
    "m2": (("--m2",), dict(type=MODEL, required=True, metavar="FILE",
        help="its new version; a deployed .onnx (ONNX Runtime) or .tflite (LiteRT) file runs as a black box: "
        "DRFuzz needs its outputs only")),
    "runtime": (("--runtime",), dict(choices=RUNTIMES, default="auto", help=RUNTIME_HELP)),
    "report": (("--report",), dict(type=WRITES_FOLDER, dest="report_dir", metavar="DIR",
        default=None,
        help="also write a self-contained DIR/report.html of this run (its PNGs beside it), written whole or "
        "not at all")),
}
#: What a command that compares two versions of a model adds first (:func:`versions_from`).
PAIR = ("m1", "m2", "runtime")
#: What a command that opens one model file adds after its own options.
MODEL_FILE = ("arch", "arch_args", "weights", "trust_pickle")
#: What every command that computes adds: where, how many threads, whether a bar.
RUNNING = ("device", "threads", "no_progress")


def add_options(p: argparse.ArgumentParser, *names: str, **changes: str | dict[str, Any]) -> None:
    """Add the shared options ``names`` (keys of :data:`OPTIONS`) to ``p`` in that order;
    ``changes[name]`` is that option's own help (a string) or its keywords that differ (a dict).
    """
    for name in names:
        change = changes.get(name, {})
        change = {"help": change} if isinstance(change, str) else change
        if name in SOURCE or name in ("threads", "batch_size"):  # declared on ModelSource, Runtime
            add_field(p, ModelSource if name in SOURCE else Runtime, SOURCE.get(name, name), **change)
            continue
        flags, kwargs = OPTIONS[name]
        p.add_argument(*flags, **{**kwargs, **change})


#: The shared options that are :class:`ModelSource`'s fields: ``option name -> field``.
SOURCE = {"model": "model", "dataset": "dataset", "data_dir": "data_dir", "arch": "arch",
          "arch_args": "arch_kwargs", "weights": "weights", "trust_pickle": "trust_pickle"}


#: :class:`~deepfault.core.executors.Parallel`'s fields, in the order every command shows them.
PARALLEL = ("workers", "executor", "address", "gpus_per_worker")


class _DeprecatedSpelling(argparse.Action):
    """An old spelling that still works: sets its new option's value, with a ``DeprecationWarning``
    (silent by default, so an error stays the command's one line).
    """

    def __call__(self, parser, namespace, values, option_string=None):
        import warnings

        warnings.warn(f"{option_string} is deprecated; use {self.metavar}", DeprecationWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


def add_parallel(p: argparse.ArgumentParser, *, old_address: str | None = None,
                 names: tuple[str, ...] = PARALLEL) -> None:
    """Add ``--workers``, ``--executor``, ``--address`` and ``--gpus-per-worker`` from their one
    declaration (:class:`~deepfault.core.executors.Parallel`); ``old_address`` is a deprecated
    spelling of ``--address`` the command keeps accepting (``experiment``'s ``--ray-address``).
    All four: the command's passes spread by shards (:func:`spread_runtime`); ``names``, fewer:
    the command spreads its own way (``xplore``'s ``--workers`` is its config's).
    """
    if names == PARALLEL:
        p.set_defaults(spread_pass=True)
    for name in names:
        # the executor's names as argparse choices: a typo gets argparse's did-you-mean, as before
        choices = {"type": str, "choices": list_executors(), "metavar": None} if name == "executor" else {}
        add_field(p, Parallel, name, **choices)
    if old_address:
        p.add_argument(old_address, dest="address", action=_DeprecatedSpelling, metavar="--address",
                       help=argparse.SUPPRESS)


def parallel_from(args) -> Parallel:
    """The parsed :func:`add_parallel` options as a :class:`~deepfault.core.executors.Parallel`
    (serial when the command has none).
    """
    return config_from(args, Parallel) if hasattr(args, "workers") else Parallel()


def command(sub, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
    """The sub-command ``name`` added to ``sub`` with its help line and description (defaults shown)."""
    return sub.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)


def text(name: str) -> tuple[str, str]:
    """The help line and description of the sub-command ``name`` (``"coverage rank"``), as its
    method declares them (:attr:`~deepfault.experiment.method.Method.texts`).
    """
    return next(method.texts[name] for method in _METHODS if name in method.texts)


# --------------------------------------------------------------------------- one vocabulary

#: Old spellings of options, per sub-command: ``old -> new``, as each method declares them
#: (:attr:`~deepfault.experiment.method.Method.renamed`). Checked before parsing, so an old
#: spelling is an error that names its new one. docs/cli.md lists them.
RENAMES: dict[str, dict[str, str]] = {name: dict(table) for method in _METHODS
                                      for name, table in method.renamed.items()}


def check_renamed(argv: Sequence[str]) -> str | None:
    """The error message for the first old spelling in ``argv``, else ``None``.

    The sub-command is the first argument that is no option (the global options before it
    take no value); an option counts when it is given alone or as ``--option=value``.
    Arguments after ``--`` are values, not options.
    """
    command = next((a for a in argv if not a.startswith("-")), None)
    table_ = RENAMES.get(command or "", {})
    for arg in argv:
        if arg == "--":
            break
        old = arg.split("=", 1)[0]
        new = table_.get(old)
        if new is not None:
            return (f"{old} was renamed {new} (one name for each concept in every command; "
                    "see docs/cli.md)")
    return None


def runtime_for(args, models=(), **given) -> Runtime:
    """The command's :class:`Runtime` for ``models`` (on ``--device``): that device, ``--threads``
    applied now (:func:`apply_threads`; the runtime holds the count in effect), the progress display
    per ``--no-progress``, the workers of :func:`add_parallel` (:func:`spread_runtime`); ``given``
    sets the rest (``batch_size``).
    """
    device = device_from(args.device)
    return spread_runtime(args, device=str(device), threads=apply_threads(args.threads, models, device),
                          progress=not args.no_progress, **given)


def spread_runtime(args, **given) -> Runtime:
    """:meth:`Runtime.spread` over :func:`add_parallel`'s workers, a spread pass keeping its
    finished shards beside ``--out`` (when the command writes one); ``given`` sets the rest.
    """
    parallel = parallel_from(args)
    out = output_path(getattr(args, "out", None)) if parallel.spread else None
    return Runtime.spread(parallel, out, **given)


def write_run_report(args, render) -> None:
    """Write ``--report DIR`` (when given) through the report shell and print where.

    ``render(folder) -> dict(title, html, ...)`` is the method's page
    (:func:`deepfault.experiment.report.write_page`).
    """
    if getattr(args, "report_dir", None) is None:
        return
    print(f"wrote {write_page(args.report_dir, render)}")


def write_outcome(args, outcome: Outcome, *, command: str, config, out: Path | None, runtime: Runtime,
                  paths: Mapping[str, Path | None] | None = None, records: Mapping | None = None) -> None:
    """The tail every command shares: print ``outcome.summary()``, then write the result document
    (``records``, such as the model's and the data set's, then ``outcome.payload()``, in the
    envelope with ``config``, its seed, ``runtime``'s device and threads, and the command line) to
    ``out`` and each of ``outcome.outputs()`` to its path in ``paths``, as one unit
    (:func:`deepfault.experiment.saving.save_result`); an artifact left out for a missing
    optional dependency gets a line saying why.
    """
    text = outcome.summary()
    print(text, end="" if text.endswith("\n") else "\n")
    if outcome.spread is not None:  # a pass spread over workers says how many and where
        print(outcome.spread.summary())
    saved = save_result(outcome, out, command=command, config=config, runtime=runtime,
                        argv=getattr(args, "argv", None), paths=paths, records=records)
    for line in saved.skipped if saved else ():
        print(line)
    if saved:
        print(f"wrote {', '.join(map(str, saved.paths))}")


def device_from(name: str):
    """``--device`` as a :class:`torch.device` that exists here (:func:`deepfault.checks.check_device`)."""
    return check_device(name, "--device")


def versions_from(args) -> Versions:
    """The pair ``--m1``/``--m2`` as :class:`~deepfault.fuzz.pair.Versions`, with the options that
    open their files (``--arch``, ``--arch-args``, ``--trust-pickle``, ``--runtime``, ``--data-dir``).
    """
    return config_from(args, Versions)
