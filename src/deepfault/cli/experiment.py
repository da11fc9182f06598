"""``deepfault experiment`` and ``deepfault report``: grids into a store, and reports."""

from __future__ import annotations

from pathlib import Path

from ..errors import DeepFaultError
from ._common import HelpFormatter, add_data_dir, positive_int


def add_parser(sub) -> None:
    from ..experiment.grid import PRESETS

    exp = sub.add_parser(
        "experiment", help="run (or resume) an experiment grid into a results store",
        description="Run models x classes x approaches x k x repetitions with the paper's "
        "protocol (spec section 6) and write every cell to an SQLite store as soon as it is "
        "done. Rerunning the same command skips finished cells, also after a crash or kill.",
        formatter_class=HelpFormatter,
    )
    source = exp.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                        help=f"built-in grid ({', '.join(sorted(PRESETS))})")
    source.add_argument("--config", metavar="FILE", help="TOML experiment file")
    exp.add_argument("--store", metavar="FILE", default=None,
                     help="SQLite results store (default: results/NAME.sqlite)")
    add_data_dir(exp)
    exp.add_argument("--models-dir", metavar="DIR", default=None,
                     help="where zoo models are kept and trained when missing (default: next to the store)")
    exp.add_argument("--workers", type=positive_int, default=1, help="local worker processes")
    exp.add_argument("--seed", type=positive_int, default=None, help="override the grid's seed")
    exp.add_argument("--no-progress", action="store_true", help="no progress bar")
    exp.set_defaults(func=_cmd_experiment)

    rep = sub.add_parser("report", help="tables, figures and an HTML report from a results store",
                         formatter_class=HelpFormatter)
    rep.add_argument("store", metavar="STORE", help="SQLite results store")
    rep.add_argument("--out", metavar="DIR", default=None, help="output folder (default: STORE-report/)")
    rep.add_argument("--experiment", metavar="HASH", default=None,
                     help="configuration hash (default: the most recent experiment in the store)")
    rep.set_defaults(func=_cmd_report)



def _cmd_experiment(args) -> int:
    from ..experiment.grid import PRESETS, load_config, run_experiment, with_overrides

    config = PRESETS[args.preset] if args.preset else load_config(args.config)
    config = with_overrides(config, seed=args.seed)
    store = Path(args.store or f"results/{config.name}.sqlite")
    if store.is_dir():
        raise DeepFaultError(f"--store {str(store)!r} is a directory; give a file name")
    summary = run_experiment(config, store, data_dir=args.data_dir, models_dir=args.models_dir,
                             workers=args.workers, progress=not args.no_progress, argv=args.argv)
    accuracy = ", ".join(f"{m} {a:.2%}" for m, a in summary.model_accuracy.items())
    print(f"experiment {config.name} ({summary.config_hash}): {summary.cells_total} cells, "
          f"{summary.cells_run} run now, {summary.cells_skipped} already in the store; "
          f"{summary.seconds:.1f} s")
    print(f"test accuracy: {accuracy}")
    print(f"store: {summary.store}; next: deepfault report {summary.store}")
    return 0


def _cmd_report(args) -> int:
    from ..experiment.report import write_report

    store = Path(args.store)
    if not store.is_file():
        raise DeepFaultError(f"results store {str(store)!r} does not exist; run 'deepfault experiment' first")
    out = Path(args.out) if args.out else store.with_name(store.stem + "-report")
    paths = write_report(store, out, config_hash=args.experiment)
    print(f"wrote the report to {out}/ (open {getattr(paths, 'html', out / 'report.html')})")
    return 0


