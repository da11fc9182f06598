"""``deepfault run``: localise suspicious neurons and synthesize inputs from them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..core.capture import layer_selection
from ..core.runtime import Runtime
from ..experiment.results import dataset_record, model_record
from ..localization.config import SURPRISE_WHAT
from ..localization.protocol import RunConfig, run_deepfault
from ..provenance import provenance
from ._common import (
    HelpFormatter,
    Output,
    add_batch_size,
    add_data_dir,
    add_device,
    add_field,
    add_model_options,
    add_no_progress,
    add_report_option,
    add_threads,
    apply_threads,
    device_from,
    output_path,
    prepare_from_args,
    seed_int,
    sibling,
    write_outcome,
    write_run_report,
)

#: The options that set RunConfig's fields, in the order --help lists them.
_FIELDS = ("classes", "measure", "k", "step_size", "distance", "seed", "star", "repeat", "layers",
           "threshold", "activity", "iterations", "normalize", "num_inputs", "k_primes")

#: The seed's parser is every command's one (the same words for --seed everywhere).
_OVERRIDES: dict[str, dict] = {"measure": {"metavar": "NAME"}, "seed": {"type": seed_int, "metavar": "S"},
                               "classes": {"metavar": "C"}, "layers": {"metavar": "NAMES"},
                               "num_inputs": {"metavar": "N"}, "k_primes": {"metavar": "K1,K2"}}


def add_parser(sub) -> None:
    """Add ``deepfault run`` to ``sub``."""
    run = sub.add_parser(
        "run",
        help="localise suspicious neurons and synthesize inputs from them",
        description="Build each class's hit spectrum on the test split, select the k most "
        "suspicious neurons, synthesize new inputs from correctly classified ones and "
        "evaluate them. With no --model and no --dataset, uses the embedded default "
        "(scikit-learn's 8x8 digits and a small MLP trained on them, cached).",
        formatter_class=HelpFormatter,
    )
    run.add_argument("--model", metavar="FILE", default=None,
                     help="model file: deepfault .pt, state_dict (with --arch), TorchScript, "
                     "Keras .h5/.json or stem, .onnx (default: the embedded digits model)")
    run.add_argument("--dataset", metavar="NAME", default=None,
                     help="data set name (default: the model file's data set, else 'digits')")
    add_data_dir(run)
    for name in _FIELDS:
        add_field(run, RunConfig, name, **_OVERRIDES.get(name, {}))
    add_device(run)
    add_threads(run)
    add_batch_size(run, "inputs per pass (sized for synthesis's forward and backward passes when auto)")
    run.add_argument("--out", metavar="FILE", default="deepfault-result.json",
                     help="JSON result file, written atomically; '-' writes none")
    run.add_argument("--log", metavar="FILE", default=None,
                     help="also append the printed summary to this file")
    run.add_argument("--save-inputs", metavar="FILE.npz", default=None,
                     help="where to save the synthesized inputs with their originals, labels and "
                     "predictions, plus an image grid beside it (.png) (default: beside --out, "
                     "e.g. deepfault-result.npz)")
    run.add_argument("--no-save-inputs", action="store_true", help="do not save the synthesized inputs")
    run.add_argument("-q", "--quiet", action="store_true",
                     help="print only the evaluation table, not every class's neurons")
    add_no_progress(run)
    add_model_options(run)
    add_report_option(run)
    run.add_argument("--no-baseline", action="store_true",
                     help="with --report: skip the random baseline the page compares the run with "
                     "(the same run from random neurons, about as long as the run itself)")
    surprise = run.add_mutually_exclusive_group()
    add_field(surprise, RunConfig, "surprise", default="auto", metavar="FILE",
              help=f"{SURPRISE_WHAT}: a fitted state (.npz from fit_surprise/save_surprise) instead of "
              "the one fitted on the training split and cached")
    surprise.add_argument("--no-surprise", dest="surprise", action="store_const", const=None,
                          help="do not compute the generated inputs' surprise adequacy (saves one pass over "
                          "the training split the first time a model is seen)")
    run.set_defaults(func=_cmd_run)


def outputs(args) -> list[Output]:
    """The files ``deepfault run`` writes: the JSON result, the synthesized inputs and their grid,
    and the log it appends to.
    """
    out = output_path(args.out)
    inputs = None
    if not args.no_save_inputs and (args.save_inputs or out is not None):
        inputs = Path(args.save_inputs) if args.save_inputs else sibling(out, ".npz")
    return [Output("--out", out), Output("--save-inputs", inputs),
            Output("--save-inputs (its image grid)", sibling(inputs, ".png")),
            Output("--log", output_path(args.log))]


def _cmd_run(args) -> int:
    config = RunConfig(**{name: getattr(args, name) for name in (*_FIELDS, "surprise")},
                       baseline=args.report_dir is not None and not args.no_baseline)
    out, inputs_path, grid_path, log_path = (o.path for o in outputs(args))
    device = device_from(args.device)
    prepared = prepare_from_args(args).to(device)
    threads = apply_threads(args.threads, [prepared.module], device)
    runtime = Runtime(device=str(device), batch_size=args.batch_size, progress=not args.no_progress)
    result = replace(run_deepfault(prepared, prepared.data, config, runtime=runtime), quiet=args.quiet)
    write_outcome(args, result, command="run", config=result.config, out=out, device=device, threads=threads,
                  paths={"inputs": inputs_path, "grid": grid_path}, records=_records(args, prepared, result))
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(result.summary() + "\n")
    write_run_report(args, lambda folder: result.page(folder, provenance=provenance(device, argv=args.argv)))
    return 0


def _records(args, prepared, result) -> dict:
    """The model's and the data set's records of the result file."""
    mf, data = prepared.model_file, prepared.data
    model = model_record(prepared, args.model, arch_kwargs=mf.arch_kwargs,
                         layout=list(prepared.file_input_shape or data.input_shape),
                         layout_name=prepared.layout, input_shape=list(data.input_shape),
                         adapter=prepared.adapter, label=prepared.name,
                         meta={k: v for k, v in mf.meta.items() if k != "recipe"},
                         layer_selection=layer_selection(prepared.module, result.config.layers))
    return {"model": model, "dataset": dataset_record(data, args.data_dir)}
