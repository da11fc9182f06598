"""``deepfault regress``: fuzz a new version of a model for regression faults (DRFuzz)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..checks import check_outputs, error
from ..core.constraints import GRID, Interval, constraint_of
from ..core.guard import check_declared
from ..core.runtime import Runtime
from ..coverage import CoverageConfig
from ..experiment.store import ResultStore
from ..fuzz.campaign import CampaignConfig
from ..fuzz.campaign.config import criterion_settings
from ..fuzz.campaign.strategies import STRATEGIES
from ..fuzz.regress import campaign_cell, compare_strategies, faults_paths, regress
from ..fuzz.report import campaign_page
from . import _common as c
from .corpus import add_corpus_option, add_to_corpus, check_corpus_option, corpus_output

#: The options that set CampaignConfig's fields as declared (their metavars too), in --help's order.
_FIELDS = ("fidelity", "shared_fidelity", "mutants", "count_selections", "queue_memory", "queue_dtype",
           "queue_capacity", "chooser", "inputs_per_step", "seed", "workers", "executor", "address",
           "sync_every", "gpus_per_worker")


def add_parser(sub) -> None:
    """Add ``deepfault regress`` to ``sub``."""
    p = c.command(sub, "regress", *c.text("regress"))
    c.add_options(p, *c.PAIR, "dataset", "data_dir",
                dataset="data set or .npz file (default: the one the model files name)")
    c.add_field(p, CampaignConfig, "budget", default="5m")
    c.add_field(p, CampaignConfig, "strategy", type=str, choices=[*STRATEGIES.names(), "both"],
              help="fuzzing strategy; 'both' runs drfuzz and deephunter one after the other under the same "
              "budget and one shared fidelity filter, and compares them")
    c.add_fields(p, CampaignConfig, *_FIELDS)
    p.add_argument("--store", type=c.READS, metavar="FILE", default="regress.sqlite",
                   help="SQLite results store for checkpoints and the result")
    c.add_fields(p, CampaignConfig, "campaign", "fresh")
    p.add_argument("--out", type=c.WRITES, metavar="FILE.npz", default=None,
                   help="the faults file; the fault grid and the JSON result go beside it as FILE.png and "
                   "FILE.json (default: STORE-CAMPAIGN-faults.npz beside the store)")
    p.add_argument("--grid", type=c.FieldType(GRID), default=16, metavar="N", help="faults in the image grid")
    c.add_field(p, CampaignConfig, "criteria", dest="criterion")
    p.add_argument("--sections", type=c.FieldType(constraint_of(CoverageConfig, "sections")), default=1000,
                   metavar="K", help="KMNC sections (DeepHunter's k)")
    p.add_argument("--threshold", type=c.FieldType(Interval(float)), default=None,
                   help="NC threshold (for --criteria nc)")
    c.add_field(p, CampaignConfig, "layers", type=c.names)
    c.add_fields(p, CampaignConfig, "max_seeds", "checkpoint_every")
    c.add_options(p, "device", "threads", "arch", "arch_args", "trust_pickle", "no_progress", "report")
    add_corpus_option(p, "the regression faults found, each expected to get M1's label (the seed's)")
    p.set_defaults(func=_cmd_regress)


def _cells(args) -> list[tuple[str, str]]:
    """``(strategy, campaign id)`` of each campaign the command runs, in order."""
    if args.strategy == "both":
        return [(s, campaign_cell(s, args.seed)) for s in ("drfuzz", "deephunter")]
    return [(args.strategy, campaign_cell(args.strategy, args.seed, args.campaign))]


def preflight(args) -> None:
    """What the declarations cannot see, before any work: the store's path and its schema, the
    faults file's name, and an empty ``--layers``.
    """
    if args.layers is not None and not args.layers:
        raise error("--layers", "comma-separated layer names", "")
    check_outputs(("--store", args.store))
    npz_name = "a file name ending in .npz (the fault grid goes beside it as .png)"
    if args.out is not None and (not Path(args.out).name or Path(args.out).name in (".", "..")
                                 or args.out.endswith("/")):
        raise error("--out", npz_name, args.out)
    if args.out is not None and (Path(args.out).suffix != ".npz" or Path(args.out).name == ".npz"):
        check_declared(outputs(args))  # a path's own fault (under a file, ...) is named before its suffix
        raise error("--out", npz_name, args.out)
    ResultStore.check(args.store)
    check_corpus_option(args, args.dataset)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault regress`` writes: the store, and per campaign its faults (.npz), their
    grid (.png) and its JSON result (.json beside the faults); then the corpus folder it adds to.
    """
    out = [c.Output("--store", Path(args.store))]
    for strategy, cell in _cells(args):
        npz, png = faults_paths(args.store, cell, args.out if args.strategy != "both" else None)
        where = "" if args.strategy != "both" else f" of {strategy}"
        out += [c.Output(f"--out (faults{where}, .npz)", npz),
                c.Output(f"--out (fault grid{where}, .png)", png),
                c.Output(f"--out (result{where}, .json)", npz.with_suffix(".json"))]
    return [*out, corpus_output(args)]


def _cmd_regress(args) -> int:
    config = CampaignConfig(
        strategy="drfuzz" if args.strategy == "both" else args.strategy, budget=args.budget,
        criteria=args.criterion,
        criterion_params=criterion_settings(args.criterion, args.sections, args.threshold),
        layers=args.layers, campaign=args.campaign, fresh=args.fresh,
        **{name: getattr(args, name) for name in (*_FIELDS, "max_seeds", "checkpoint_every")})
    versions = c.versions_from(args)
    runtime = Runtime(device=args.device, threads=args.threads, progress=not args.no_progress,
                      store=args.store)
    run = compare_strategies if args.strategy == "both" else regress
    outcome = run(versions, args.dataset, config, runtime=runtime)
    outcomes = getattr(outcome, "outcomes", {config.strategy: outcome})
    paths = outputs(args)[1:]
    for i, one in enumerate(outcomes.values()):
        npz, png, result = (o.path for o in paths[3 * i:3 * i + 3])
        c.write_outcome(args, replace(one, grid_size=args.grid), command="regress", config=one.result.config,
                      out=result, runtime=Runtime(device=one.device, threads=one.threads),
                      paths={"faults": npz, "grid": png})
    c.write_run_report(args, lambda folder: campaign_page(outcomes, folder))
    for one in outcomes.values():
        add_to_corpus(args, one.findings())
    print(outcome.closing())
    return 130 if outcome.interrupted else 0
