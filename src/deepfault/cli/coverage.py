"""``deepfault coverage profile|surprise|measure|rank``: neuron profiles, surprise states,
coverage, prioritisation.

Each action parses (the options that set a config field come from its declaration), loads the
model and the split, calls its entry, and hands the outcome to ``write_outcome``; the text, the
defaults and the surprise state fitted when none is given are the library's.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from ..core.memory import choose_batch_size
from ..core.runtime import Runtime
from ..coverage import (
    CoverageConfig,
    ProfileConfig,
    SurpriseConfig,
    compute_profile,
    fit_surprise,
    measure_coverage,
    rank_inputs,
)
from ..coverage.config import parse_thresholds
from ..coverage.criteria import list_criteria
from ..coverage.figures import _pyplot
from ..coverage.inputs import SplitInputs, load_split
from ..coverage.report import PLOT_FILES, measure_page, rank_page, write_plot_folder
from ..models.source import ModelSource
from ..provenance import provenance
from . import _common as c


def _add_common(p: argparse.ArgumentParser, config: type, *, split: str) -> None:
    c.add_options(p, "model", "dataset", "data_dir",
                dataset="data set name or .npz file (default: the model file's data set)")
    p.add_argument("--split", type=c.READS, default=split, metavar="SPLIT",
                   help="'test', 'train', or an .npz file whose x (and y) are the inputs")
    c.add_fields(p, config, "layers", "transform")
    c.add_options(p, "batch_size", *c.RUNNING, *c.MODEL_FILE)
    c.add_parallel(p)


def _add_criteria(p: argparse.ArgumentParser) -> None:
    c.add_field(p, CoverageConfig, "criteria", type=str, default="nc")
    # several: 0 0.25 0.5 or 0,0.25,0.5 (its own parser: the groups are flattened)
    c.add_field(p, CoverageConfig, "threshold", type=c.argument_type(parse_thresholds), action="extend",
                nargs="+", default=None)
    c.add_fields(p, CoverageConfig, "sections", "top_k", "scale")
    c.add_field(p, CoverageConfig, "profile", type=str)  # a path: the config checks it
    c.add_field(p, CoverageConfig, "surprise", type=str)


def _action(sub, name: str, config: type, split: str, func, *, out: tuple[str, str]):
    """The action ``name``: its text (the method's), its options, those of every action, and its
    ``--out`` (default, what).
    """
    p = c.command(sub, name, *c.text(f"coverage {name}"))
    _add_common(p, config, split=split)
    p.add_argument("--out", type=c.WRITES, metavar="FILE", default=out[0],
                   help=f"{out[1]}, written atomically; '-' writes none")
    p.set_defaults(func=func)
    return p


def add_parser(sub) -> None:
    """Add ``deepfault coverage`` and its actions profile, surprise, measure and rank to ``sub``."""
    cov = sub.add_parser(
        "coverage",
        help=f"neuron coverage ({', '.join(n.upper() for n in list_criteria())}), surprise adequacy, "
        "prioritisation",
        description="Structural coverage criteria of DeepXplore and DeepGauge on a model's neurons and Kim "
        "et al.'s surprise adequacy: profile the training data or fit surprise adequacy on it, measure "
        "coverage of a test set, or order a test set by uncertainty, surprise or coverage.")
    cov_sub = cov.add_subparsers(dest="coverage_command", metavar="ACTION")
    cov_sub.required = True
    _action(cov_sub, "profile", ProfileConfig, "train", _cmd_fit,
            out=("coverage-profile.npz", "profile file (.npz)"))
    surp = _action(cov_sub, "surprise", SurpriseConfig, "train", _cmd_fit,
                   out=("surprise.npz", "surprise state (.npz)"))
    c.add_fields(surp, SurpriseConfig, "classes", "var_threshold", "max_features")
    meas = _action(cov_sub, "measure", CoverageConfig, "test", _cmd_measure,
                   out=("coverage.json", "JSON result file"))
    _add_criteria(meas)
    c.add_fields(meas, CoverageConfig, "sa_upper", "sa_sections")
    meas.add_argument("--plot", type=c.WRITES_FOLDER, metavar="DIR", default=None,
                      help="also write report.html, coverage_threshold.png, coverage_layers.png and "
                      "coverage_growth.png into DIR")
    c.add_options(meas, "report")
    rank = _action(cov_sub, "rank", CoverageConfig, "test", _cmd_rank,
                   out=("coverage-rank.json", "JSON result file with each order and score"))
    c.add_field(rank, CoverageConfig, "by", type=str, default=",".join(CoverageConfig.by))
    _add_criteria(rank)
    c.add_options(rank, "report")


# --------------------------------------------------------------------------- helpers


def outputs(args) -> list[c.Output]:
    """The files ``coverage profile`` and ``surprise`` (an .npz), ``measure`` (a JSON result, and
    ``--plot DIR``'s page and figures) and ``rank`` (a JSON result) write.
    """
    out = [c.Output("--out", c.output_path(args.out, "--out"))]
    if args.coverage_command == "measure" and args.plot:
        folder = Path(args.plot)
        out = [c.Output("--plot", folder, folder=True), *out,
               *[c.Output(f"--plot ({name})", folder / name) for name in PLOT_FILES]]
    return out


def _start(args, fits: bool = False) -> tuple[SplitInputs, Runtime]:
    """The model and the split loaded, the threads applied, the batch size chosen (for the
    training split too when a surprise state is fitted first).
    """
    loaded = load_split(c.config_from(args, ModelSource), args.split, c.device_from(args.device))
    module, count = loaded.model.module, loaded.pass_count(fits and not getattr(args, "surprise", None))
    runtime = c.runtime_for(args, [module])
    choice = choose_batch_size(module, loaded.data.x_test, args.batch_size, count=count)
    if choice.auto:
        print(choice.describe())  # batch: 48 inputs (auto: ...)
    args.batch_size = choice.size  # so that an out-of-memory message names the number
    return loaded, runtime.with_(batch_size=choice.size)


def _write(args, report, action: str, config: CoverageConfig, out, loaded: SplitInputs, runtime) -> None:
    """``write_outcome`` of ``coverage measure|rank``, with the model's and the data set's records."""
    c.write_outcome(args, report, command=f"coverage {action}", config=config.record(action, args.batch_size),
                  out=out, runtime=runtime, records=loaded.records(args.model, args.data_dir,
                                                                   report.about.selection))


def _page(page, report, args, loaded: SplitInputs, device, **extra):
    config = {k: v for k, v in vars(args).items() if k not in ("func", "argv")}
    return functools.partial(page, report, model_name=loaded.model.name, data_name=loaded.label,
                             device=str(device), provenance=provenance(device, argv=args.argv), config=config,
                             **extra)


# --------------------------------------------------------------------------- commands


#: What ``profile`` and ``surprise`` fit (the action's name is its file's): its config and its entry.
_FITS = {"profile": (ProfileConfig, compute_profile), "surprise": (SurpriseConfig, fit_surprise)}


def _cmd_fit(args) -> int:
    action = args.coverage_command
    cls, fit = _FITS[action]
    config = c.config_from(args, cls)
    out = c.declared(outputs(args), "--out")  # '-' writes none, as elsewhere
    loaded, runtime = _start(args)
    state = fit(loaded.model, loaded.data, config, runtime=runtime)
    c.write_outcome(args, state, command=f"coverage {action}", config=config, out=None,
                  runtime=runtime, paths={action: out})
    return 0


def _cmd_measure(args) -> int:
    config = c.config_from(args, CoverageConfig)
    out = c.declared(outputs(args), "--out")
    if args.plot:
        _pyplot()  # fail now, not after the work, when matplotlib is missing
    loaded, runtime = _start(args, fits=bool(config.scored_criteria))
    report = measure_coverage(loaded.model, loaded.data, config, runtime=runtime)
    _write(args, report, "measure", config, out, loaded, runtime)
    page = _page(measure_page, report, args, loaded, runtime.device)
    for path in write_plot_folder(args.plot, page) if args.plot else ():
        print(f"wrote {path}")
    c.write_run_report(args, page)
    return 0


def _cmd_rank(args) -> int:
    config = c.config_from(args, CoverageConfig)
    if args.report_dir:
        _pyplot()
    out = c.declared(outputs(args), "--out")
    loaded, runtime = _start(args, fits=bool(config.scored_by))
    report = rank_inputs(loaded.model, loaded.data, config, runtime=runtime)
    _write(args, report, "rank", config, out, loaded, runtime)
    notes = "\n".join(report.about.notes)
    c.write_run_report(args, _page(rank_page, report, args, loaded, runtime.device, notes=notes))
    return 0
