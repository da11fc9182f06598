"""``deepfault run``: localise suspicious neurons and synthesize inputs from them."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import torch

from ..core.capture import layer_selection, neurons_line, selection_source
from ..experiment.results import dataset_record, model_record, result_document, write_result
from ..localization.outputs import save_synthesized, summary_text, synthesized_grid
from ..localization.protocol import RunConfig, add_surprise, run_deepfault
from ..localization.selection import get_approach, list_approaches
from ..provenance import provenance
from . import _surprise
from ._common import (
    HelpFormatter,
    Output,
    add_batch_size,
    add_data_dir,
    add_device,
    add_model_options,
    add_no_progress,
    add_report_option,
    add_seed,
    add_threads,
    apply_threads,
    batch_choice,
    class_list,
    device_from,
    int_list,
    known_name,
    names,
    number,
    output_path,
    positive_int,
    prepare_from_args,
    sibling,
    write_run_report,
)


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
    run.add_argument("--class", dest="classes", metavar="C", type=class_list, default=None,
                     help="class to analyse: an index, a comma-separated list, or 'all' "
                     "(default: all)")
    approaches = list_approaches()
    run.add_argument("--measure", dest="approach", metavar="NAME",
                     type=known_name("measure", list_approaches),
                     default="tarantula",
                     help="suspiciousness measure or baseline; see 'deepfault measures' "
                     f"({', '.join(approaches)})")
    run.add_argument("-k", dest="k", type=positive_int, default=10,
                     help="number of suspicious neurons")
    run.add_argument("--step-size", dest="step", type=number, default=1.0,
                     help="multiplier of the gradient in synthesis")
    run.add_argument("--distance", type=number, default=0.1,
                     help="largest change of any input element (L_inf bound), in the data "
                     "set's units")
    add_seed(run, "seed of every random choice")
    run.add_argument("--star", type=number, default=3.0, help="exponent of D* (dstar), >= 1")
    run.add_argument("--repeat", type=positive_int, default=1,
                     help="repetitions (new neurons for random/uniform, new inputs with --inputs)")
    run.add_argument("--layers", type=names, default=None, metavar="NAMES",
                     help="comma-separated module names, globs ('layer*.1'), type:CLASS, or a named "
                     "selection ('blocks', 'linear-conv', 'deepxplore') to analyse (default: 'blocks', the "
                     "residual/transformer block outputs, for a network that has such blocks, else "
                     "'linear-conv': every Linear/Conv layer except the logits layer)")
    run.add_argument("--threshold", type=number, default=0.0,
                     help="a neuron is active when its value is greater than this")
    run.add_argument("--iterations", type=positive_int, default=1,
                     help="synthesis steps per input (the paper takes one)")
    run.add_argument("--raw-gradients", dest="normalize", action="store_false",
                     help="average raw gradients instead of RMS-normalised ones")
    run.add_argument("--inputs", dest="num_inputs", type=positive_int, default=None,
                     metavar="N", help="correctly classified inputs per class to synthesize "
                     "from, drawn without replacement (default: all)")
    run.add_argument("--k-prime", dest="k_primes", type=int_list, default=None, metavar="K1,K2",
                     help="report the share of the top k' neurons that increased "
                     "(default: 2k,5k)")
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
    _surprise.add_surprise_options(run)
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
    config = RunConfig(
        measure=args.approach, k=args.k, classes=args.classes, step_size=args.step,
        distance=args.distance, star=args.star, seed=args.seed, repeat=args.repeat,
        layers=args.layers, threshold=args.threshold, iterations=args.iterations,
        normalize=args.normalize, num_inputs=args.num_inputs, k_primes=args.k_primes,
        batch_size=args.batch_size,
    )
    out, inputs_path, grid_path, log_path = (o.path for o in outputs(args))
    device = device_from(args.device)
    prepared = prepare_from_args(args)
    mf, data = prepared.model_file, prepared.data
    config.validate(data.bounds)
    config.check_classes(data)
    model = prepared.to(device).module
    threads = apply_threads(args.threads, [model], device)
    config = replace(config, batch_size=batch_choice(model, data.x_test, args, backward=True))
    fit, no_fit = (None, None) if args.no_surprise else _surprise.prepare(
        model, data, args.surprise, progress=not args.no_progress)
    if _needs_baseline(args, config):
        print("--report: after the run, the same run from random neurons for the page's baseline, up to as "
              "long again (--no-baseline skips it)")
    t0 = time.perf_counter()
    result = _run(model, data, config, prepared.output_kind, "run", args.no_progress)
    run_seconds = time.perf_counter() - t0
    if fit is not None:  # after the run, from the inputs it made: nothing it found changes
        result = add_surprise(result, data.x_test, _surprise.scorer(model, fit, config.batch_size))
    layout = result.classes[0].spectrum.layout if result.classes else None
    text = summary_text(result, prepared, device, quiet=args.quiet, neurons=None if layout is None else
                        neurons_line(layout.num_neurons, len(layout.layers),
                                     selection_source(model, config.layers)))
    if fit is not None:
        text += _surprise.describe(fit) + "\n"
    elif no_fit is not None:
        text += f"no surprise adequacy: {no_fit}\n"
    print(text, end="")
    if out is not None:
        payload = result.to_dict()
        payload.pop("config")
        payload["surprise"] = None if fit is None else fit.to_dict()
        model_info = model_record(prepared, args.model, arch_kwargs=mf.arch_kwargs,
                                  layout=list(prepared.file_input_shape or data.input_shape),
                                  layout_name=prepared.layout, input_shape=list(data.input_shape),
                                  adapter=prepared.adapter, label=prepared.name,
                                  meta={k: v for k, v in mf.meta.items() if k != "recipe"},
                                  layer_selection=layer_selection(model, config.layers))
        dataset = dataset_record(data, args.data_dir)
        files = {"inputs": None if inputs_path is None else inputs_path.name,
                 "grid": None if grid_path is None else grid_path.name}
        write_result(out, result_document("run", {"model": model_info, "dataset": dataset, **payload},
                                          config=config.to_dict(), seed=config.seed, device=device,
                                          argv=args.argv, threads=threads, outputs=files))
        print(f"\nwrote {out}")
    if inputs_path is not None and grid_path is not None:  # the grid goes with the inputs
        save_synthesized(result, data, inputs_path)
        grid = synthesized_grid(inputs_path, grid_path, bounds=data.bounds,
                                class_names=list(data.class_names))
        print(f"wrote {inputs_path}" + (f" and {grid}" if grid else ""))
    if log_path is not None:
        with open(log_path, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    if args.report_dir is not None:
        _report(args, config, result, prepared, model, device, run_seconds)
    return 0


def _needs_baseline(args, config) -> bool:
    return args.report_dir is not None and not args.no_baseline and not get_approach(config.measure).baseline


def _run(model, data, config, output_kind, desc: str, no_progress: bool, reuse=None):
    """One ``run_deepfault``, the global RNG left as it was; its spectrum pass and synthesis show
    their progress and time left (a bar, or a line after the first batch when piped).
    """
    with torch.random.fork_rng(devices=[]):
        return run_deepfault(model, data, config, output_kind=output_kind,
                             progress=False if no_progress else (desc if desc != "run" else True),
                             reuse=reuse)


def _report(args, config, result, prepared, model, device, run_seconds: float) -> None:
    """``--report DIR``: the run beside the same run from random neurons (its baseline), unless
    ``--no-baseline``.
    """
    from ..localization.report import run_page

    baseline = baseline_seconds = None
    no_baseline = ""
    if _needs_baseline(args, config):
        print(f"--report: the random baseline, up to about {run_seconds:.0f} s more (the run took "
              f"{run_seconds:.1f} s; --no-baseline skips it)", flush=True)
        t0 = time.perf_counter()
        baseline = _run(model, prepared.data, replace(config, measure="random", k_primes=None),
                        prepared.output_kind, "baseline", args.no_progress, reuse=result)
        baseline_seconds = time.perf_counter() - t0
        print(f"--report: the baseline took {baseline_seconds:.1f} s")
    elif args.no_baseline:
        no_baseline = ("No random baseline: the run was asked not to compute it (--no-baseline), so its "
                       "accuracy has nothing to be compared with.")
    write_run_report(args, lambda folder: run_page(result, prepared.data, folder, model_name=prepared.name,
                                                   baseline=baseline,
                                                   provenance=provenance(device, argv=args.argv),
                                                   run_seconds=run_seconds, baseline_seconds=baseline_seconds,
                                                   no_baseline=no_baseline))


