"""``deepfault run``: localise suspicious neurons and synthesize inputs from them."""

from __future__ import annotations

from dataclasses import replace

from ..localization.config import SURPRISE_WHAT
from ..localization.outputs import RunFiles
from ..localization.protocol import RunConfig, run_deepfault
from ..models.source import ModelSource
from ..provenance import provenance
from . import _common as c
from .corpus import add_corpus_option, add_to_corpus, check_corpus_option, corpus_output

#: The options that set RunConfig's fields, in the order --help lists them.
_FIELDS = ("classes", "measure", "k", "step_size", "distance", "seed", "star", "repeat", "layers",
           "threshold", "activity", "iterations", "normalize", "num_inputs", "k_primes")

def add_parser(sub) -> None:
    """Add ``deepfault run`` to ``sub``."""
    run = c.command(sub, "run", *c.text("run"))
    c.add_options(run, "model", "dataset", "data_dir",
                dataset="data set name (default: the model file's data set, else 'digits')")
    c.add_fields(run, RunConfig, *_FIELDS)
    c.add_options(run, "device", "threads", "batch_size", batch_size="inputs per pass (sized for "
                "synthesis's forward and backward passes when auto); 'auto' (the default) sizes it from the "
                "memory one input takes and the memory free, at most 1024")
    c.add_parallel(run)  # the spectrum pass spreads over them
    c.add_fields(run, RunFiles, "out", "log", "save_inputs", "no_save_inputs")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="print only the evaluation table, not every class's neurons")
    c.add_options(run, "no_progress", *c.MODEL_FILE, "report")
    run.add_argument("--no-baseline", action="store_true",
                     help="with --report: skip the random baseline the page compares the run with "
                     "(the same run from random neurons, about as long as the run itself)")
    surprise = run.add_mutually_exclusive_group()
    c.add_field(surprise, RunConfig, "surprise", default="auto", metavar="FILE",
              help=f"{SURPRISE_WHAT}: a fitted state (.npz from fit_surprise/save_surprise) instead of "
              "the one fitted on the training split and cached")
    surprise.add_argument("--no-surprise", dest="surprise", action="store_const", const=None,
                          help="do not compute the generated inputs' surprise adequacy (saves one pass over "
                          "the training split the first time a model is seen)")
    add_corpus_option(run, "the synthesized inputs whose prediction is not their seed's label, each expected "
                      "to get the seed's true label")
    run.set_defaults(func=_cmd_run)


def preflight(args) -> None:
    """What the declarations cannot see, before any work: ``--corpus DIR``."""
    check_corpus_option(args, args.dataset)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault run`` writes: the JSON result, the synthesized inputs and their grid,
    and the log it appends to; then the corpus folder it adds to.
    """
    out, inputs, grid, log = c.config_from(args, RunFiles).paths()
    return [c.Output("--out", out), c.Output("--save-inputs", inputs),
            c.Output("--save-inputs (its image grid)", grid), c.Output("--log", log), corpus_output(args)]


def _cmd_run(args) -> int:
    config = RunConfig(**{name: getattr(args, name) for name in (*_FIELDS, "surprise")},
                       baseline=args.report_dir is not None and not args.no_baseline)
    out, inputs_path, grid_path, log_path, _ = (o.path for o in outputs(args))
    prepared = c.config_from(args, ModelSource).prepare(need_data=True).to(c.device_from(args.device))
    runtime = c.runtime_for(args, [prepared.module], batch_size=args.batch_size)
    ran = run_deepfault(prepared, prepared.data, config, runtime=runtime)
    result = replace(ran, quiet=args.quiet).spread_over(ran.spread)  # a replaced outcome keeps its workers
    c.write_outcome(args, result, command="run", config=result.config, out=out, runtime=runtime,
                    paths={"inputs": inputs_path, "grid": grid_path},
                    records=result.records(prepared, args.model, args.data_dir))
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(result.summary() + "\n")
    c.write_run_report(args, lambda folder: result.page(folder, provenance=provenance(runtime.device,
                                                                                 argv=args.argv)))
    add_to_corpus(args, result.findings())
    return 0

