"""``deepfault experiment`` and ``deepfault report``: grids into a store, and reports."""

from __future__ import annotations

from pathlib import Path

from ..checks import error
from ..core.guard import report_folder
from ..errors import DeepFaultError
from ..experiment.presets import EXPERIMENT_COMMAND, describe_presets, get_preset, list_presets
from ..experiment.report import REPORT_COMMAND, write_report
from ..experiment.runner import RunSettings, preset_option
from ..localization.preset import DeepFaultGrid, load_config
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault experiment`` and ``deepfault report`` to ``sub``."""
    help, description = EXPERIMENT_COMMAND
    exp = c.command(sub, "experiment", help, description.format(presets=describe_presets()))
    source = exp.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=list_presets(), metavar="NAME",
                        help=f"built-in experiment ({', '.join(list_presets())})")
    source.add_argument("--config", type=c.READS, metavar="FILE", help="TOML experiment file")
    exp.add_argument("--store", type=c.READS, metavar="FILE", default=None,
                     help="SQLite results store (default: results/NAME.sqlite)")
    c.add_options(exp, "data_dir")
    exp.add_argument("--models-dir", type=c.WRITES_FOLDER, metavar="DIR", default=None,
                     help="where zoo models are kept and trained when missing (default: next to the store)")
    c.add_parallel(exp, old_address="--ray-address")
    c.add_options(exp, "device", "threads", "seed",
                  seed={"default": None, "help": "override the grid's seed"})
    exp.add_argument("--preset-option", dest="preset_options", type=c.argument_type(preset_option),
                     action="append", default=[], metavar="KEY=VALUE",
                     help="an option of the chosen preset (repeatable); each preset lists its own in "
                     "'deepfault experiment --help'; none by default")
    c.add_options(exp, "no_progress")
    exp.set_defaults(func=_cmd_experiment)

    rep = c.command(sub, "report", *REPORT_COMMAND)
    rep.add_argument("store", type=c.READS, metavar="STORE", help="SQLite results store")
    rep.add_argument("--out", type=c.WRITES_FOLDER, metavar="DIR", default=None,
                     help="output folder (default: STEM-report/ beside the store, e.g. results/x-report/)")
    rep.add_argument("--experiment", metavar="HASH", default=None,
                     help="configuration hash (default: the most recent experiment in the store)")
    rep.set_defaults(func=_cmd_report)


def preflight(args) -> None:
    """``--address`` goes with the ``ray`` executor only (leaving ``--executor`` out chooses it)."""
    if getattr(args, "address", None) is not None and args.executor not in (None, "ray"):
        raise error("--address", "given with --executor ray only", args.address)


def _cmd_experiment(args) -> int:
    device = c.device_from(args.device)
    c.apply_threads(args.threads)  # this process's; process and Ray workers run one thread each
    preset = get_preset(args.preset) if args.preset else DeepFaultGrid(load_config(args.config))
    store = Path(args.store) if args.store else preset.default_store()
    settings = RunSettings(data_dir=args.data_dir, models_dir=args.models_dir, progress=not args.no_progress,
                           argv=args.argv, device=str(device), seed=args.seed,
                           options=dict(args.preset_options))
    parallel = c.parallel_from(args)
    preset.check_run(store, settings)  # every check before an executor starts (a Ray cluster takes seconds)
    with parallel.start() as executor:
        summary = preset.run(store, settings, executor=executor)
    print(summary.summary())
    return 0


def outputs(args) -> list[c.Output]:
    """What ``deepfault experiment`` (its store, its models folder) or ``deepfault report`` (its
    folder) writes; a default store's name depends on the preset and is checked when known.
    """
    if args.command == "report":
        if args.out is not None:
            if not args.out:
                raise DeepFaultError("--out is empty; give a folder name, or leave --out out for STEM-report/"
                                     " beside the store")
            return [c.Output("--out", Path(args.out), folder=True)]
        read = Path(args.store)
        if not read.name:  # '.', '/': no store file; the command refuses it itself
            return []
        return [c.Output("--out (default: STEM-report)", report_folder(read), folder=True)]
    preset = get_preset(args.preset) if args.preset else None  # a --config's grid is read by the command
    store = Path(args.store) if args.store else preset.default_store() if preset else None
    models = args.models_dir
    if models is None and store is not None:
        if store.parent.exists() and not store.parent.is_dir():  # the store's own check names the problem
            return [c.Output("--store", store)]
        beside = preset.default_models_dir(store) if preset else store.parent / "models"  # the grid's rule
        return [c.Output("--models-dir (default: models/ beside the store)", beside, folder=True),
                c.Output("--store", store)]
    return [c.Output("--models-dir", None if models is None else Path(models), folder=True),
            c.Output("--store", store)]


def _cmd_report(args) -> int:
    store = Path(args.store)
    if not store.is_file():
        raise DeepFaultError(f"results store {str(store)!r} does not exist; run 'deepfault experiment' first")
    out = Path(args.out) if args.out else report_folder(store)
    paths = write_report(store, out, config_hash=args.experiment)
    print(f"wrote the report to {out}/ (open {getattr(paths, 'html', out / 'report.html')})")
    return 0


