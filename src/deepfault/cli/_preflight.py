"""Every option of every sub-command checked before the command starts any work.

:func:`check` runs between parsing and the command: it bounds every count (each message
names its limit), refuses non-finite numbers, checks the device, and checks every file and
folder the command will write, together, sibling files included (``xplore --out r.npz``
would be overwritten by its own inputs file). The files are those the command's module
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
from ..core.registry import suggestion
from ..coverage import list_criteria
from ..experiment.store import ResultStore
from ..fuzz.campaign.budget import parse_budget
from ..fuzz.fidelity import FIDELITIES

#: Bounds of integer options, by ``dest``: (minimum, maximum).
BOUNDS = {
    "threads": (1, c.MAX_THREADS), "seed": (0, c.MAX_SEED), "iterations": (1, c.MAX_GRADIENT_ITERATIONS),
    "epochs": (1, c.MAX_EPOCHS), "sections": (1, c.MAX_SECTIONS), "workers": (1, c.MAX_WORKERS),
    "grid": (1, c.MAX_GRID), "batch_size": (1, c.MAX_INPUTS), "inputs_per_step": (1, c.MAX_INPUTS),
    "chunk_size": (1, c.MAX_INPUTS),
    "seeds": (1, c.MAX_INPUTS), "max_seeds": (1, c.MAX_INPUTS), "top_k": (1, c.MAX_INPUTS),
    "sa_sections": (1, c.MAX_SECTIONS),
    "blackout_size": (1, c.MAX_BLACKOUT_SIZE),
    "images_per_epoch": (1, c.MAX_INPUTS), "repeat": (1, c.MAX_REPEAT), "num_inputs": (1, c.MAX_INPUTS),
    "bim_steps": (1, c.MAX_GRADIENT_ITERATIONS),
}
#: Bounds of real-valued options, by ``dest``: (exclusive minimum, maximum).
FLOAT_BOUNDS = {"lr": (0.0, c.MAX_LEARNING_RATE)}
#: Options whose command checks no lower bound itself (the others keep their own messages).
NO_OWN_MINIMUM = {"threads", "grid", "workers", "chunk_size", "blackout_size", "images_per_epoch", "seeds",
                  "max_seeds", "sections", "epochs", "iterations", "inputs_per_step", "bim_steps"}
#: Options that name files a command reads, by ``dest`` (their spelling comes from the parser, as
#: for the bounds): one table, not an ``inputs(args)`` per command, because the same few options
#: (``--model``, ``--dataset``, ``--surprise``, ...) recur across commands and read files the same
#: way everywhere. A data set or split that is a name (``mnist``, ``test``) names no file and is
#: skipped, as is every input that does not exist.
INPUTS = ("model", "models", "m1", "m2", "weights", "dataset", "split", "profile", "surprise", "inputs",
          "config", "store")
#: Of these, the model options: a Keras stem ``DIR/NAME`` reads ``NAME.json`` and ``NAME.h5``.
MODEL_INPUTS = ("model", "models", "m1", "m2")
#: Classes of the zoo that are no classifiers (trained and used by ``gan train``).
GAN_PARTS = ("dcgan_generator", "dcgan_discriminator")


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
        if dest == "seed" and value is not None:
            c.check_seed(option, value)
        elif dest in BOUNDS and value is not None and not isinstance(value, (bool, str)):  # "auto"
            lo, hi = BOUNDS[dest]
            c.check_int(option, value, minimum=lo if dest in NO_OWN_MINIMUM else -(2**63), maximum=hi)
        elif isinstance(value, float) and not math.isfinite(value):
            raise c.error(option, "a finite number", _typed(args, option, value))
        elif dest in FLOAT_BOUNDS and isinstance(value, float):
            low, high = FLOAT_BOUNDS[dest]
            if not low < value <= high:
                raise c.error(option, f"a number > {low:g} and <= {high:g}", _typed(args, option, value))
        if isinstance(value, str) and any(len(os.fsencode(part)) > 255 for part in value.split("/")):
            raise c.error(option, "a name of at most 255 bytes (between slashes)",
                          f"<{len(value)} characters>",
                          "no file system takes longer names")
    if "device" in options and getattr(args, "device", None) is not None:
        c.check_device(args.device, "--device")
    checker = _COMMANDS.get(_command(args))
    if checker is not None:
        checker(args)
    func = getattr(args, "func", None)
    declare = None if func is None else getattr(importlib.import_module(func.__module__), "outputs", None)
    declared = declare(args) if declare is not None else []
    read = inputs(args, options)
    if declare is not None:
        check_declared(declared)
        c.check_not_inputs(((o.option, o.path) for o in declared), read)
    report = _report_folder(args)
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


def _command(args) -> str:
    sub = getattr(args, "coverage_command", None) or getattr(args, "gan_command", None)
    return f"{args.command} {sub}" if sub else args.command


def check_declared(outputs) -> None:
    """Check the outputs a command declares (its module's ``outputs(args)``), folders first,
    then every file together (so that siblings that collide are caught).
    """
    for o in outputs:
        if o.folder and o.path is not None:
            c.check_output_dir(o.option, o.path)
    c.check_outputs(*((o.option, o.path) for o in outputs if not o.folder))


# --- per command: what the generic pass cannot see (the files come from the declarations) ----------


def _regress(args) -> None:
    args.budget = parse_budget(args.budget)  # parsed once, here; the command takes the Budget
    _fidelity("--fidelity", args.fidelity)
    if getattr(args, "shared_fidelity", None):
        _fidelity("--shared-fidelity", args.shared_fidelity)
    if args.criterion not in list_criteria():
        raise c.error("--criteria", f"one of {', '.join(list_criteria())}", args.criterion,
                      suggestion(args.criterion, list_criteria()).strip(" ()"))
    if args.layers is not None and not args.layers:
        raise c.error("--layers", "comma-separated layer names", _typed(args, "--layers", ""))
    if args.campaign is not None:
        c.check_name("--campaign", args.campaign)
    c.check_outputs(("--store", args.store))
    npz_name = "a file name ending in .npz (the fault grid goes beside it as .png)"
    if args.out is not None and (not Path(args.out).name or Path(args.out).name in (".", "..")
                                 or args.out.endswith("/")):
        raise c.error("--out", npz_name, args.out)
    if args.out is not None and (Path(args.out).suffix != ".npz" or Path(args.out).name == ".npz"):
        # a path's own fault (under a file, ...) is named before its suffix
        check_declared(importlib.import_module(f"{__package__}.regress").outputs(args))
        raise c.error("--out", npz_name, args.out)
    ResultStore.check(args.store)


def _fidelity(option: str, spec: str) -> None:
    """``discriminator`` (the data set's own: checked when the data set is known),
    ``discriminator:FILE`` (an existing file), ``ssim``, ``ssim:T`` (0 < T <= 1),
    ``ssim-compat`` or ``none``.
    """
    name, sep, arg = str(spec).partition(":")
    known = FIDELITIES.names()
    if name.strip().lower() not in known:
        raise c.error(option, f"one of {', '.join(known)} (ssim:T, discriminator:FILE)", spec,
                      suggestion(name.strip(), known).strip(" ()"))
    if name == "ssim" and sep:
        try:
            t = float(arg)
        except ValueError:
            t = math.nan
        if not (math.isfinite(t) and 0.0 < t <= 1.0):
            raise c.error(option, "ssim:T with a threshold 0 < T <= 1", spec)
    if name == "discriminator" and sep and (not arg or not Path(arg).is_file()):
        raise c.error(option, "discriminator:FILE naming an existing model file", spec,
                      "train one with 'deepfault gan train', or give plain 'discriminator' for the data "
                      "set's own")


def _scenario(args) -> None:
    if args.arch in GAN_PARTS:
        raise c.error("--arch", "a classifier of the zoo", args.arch,
                      "the dcgan parts are trained together with 'deepfault gan train'")


def _train(args) -> None:
    if args.arch == "dcgan_generator":
        raise c.error("--arch", "a classifier of the zoo (or dcgan_discriminator)", args.arch,
                      "the generator is trained with its discriminator: 'deepfault gan train'")


def _experiment(args) -> None:
    if args.ray_address is not None and (args.executor or "serial") != "ray":
        raise c.error("--ray-address", "given with --executor ray only", args.ray_address)


_COMMANDS = {"regress": _regress, "scenario": _scenario, "train": _train, "experiment": _experiment}
