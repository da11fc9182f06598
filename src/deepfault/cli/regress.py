"""``deepfault regress``: fuzz a new version of a model for regression faults (DRFuzz)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.batches import activations
from ..core.capture import is_compiled, layer_selection, neurons_line, selection_source
from ..errors import DeepFaultError
from ..experiment.results import dataset_record, model_record, result_document, write_result
from ..fuzz.campaign import CHECKPOINT_EVERY, DEFAULT_BATCH, CampaignConfig
from ..fuzz.campaign.memory import QUEUE_DTYPES, format_size, image_bytes, parse_size, queue_slots
from ..fuzz.campaign.metrics import compare_campaigns
from ..fuzz.campaign.strategies import STRATEGIES
from ..fuzz.fidelity import check_fidelity_inputs, check_fidelity_spec, default_fidelity
from ..fuzz.figures import fault_grid
from ..fuzz.mutation.mcmc import CHOOSERS
from ..fuzz.mutation.rules import rule_kind
from ..fuzz.regress import PROGRESS_LEGEND, check_black_box, faults_paths, load_pair, progress_line, regress
from ..fuzz.report import METRICS_LEGEND, campaign_page, metrics_table
from ..models.blackbox import RUNTIMES, unwrap_black_box
from ._common import (
    HelpFormatter,
    Output,
    add_arch_options,
    add_data_dir,
    add_device,
    add_no_progress,
    add_report_option,
    add_seed,
    add_threads,
    apply_threads,
    device_from,
    fmt,
    names,
    number,
    positive_int,
    table,
    write_run_report,
)


def add_parser(sub) -> None:
    """Add ``deepfault regress`` to ``sub``."""
    strategies = "; ".join(f"{n}: {STRATEGIES.get(n).description}" for n in STRATEGIES.names())
    p = sub.add_parser(
        "regress", help="fuzz a new version of a model (M2) for regression faults against M1 (DRFuzz)",
        description="Mutate the test inputs that M1 classifies correctly and look for inputs that M1 still "
        "gets right and M2 gets wrong (regression faults), diverse and realistic (spec/drfuzz.md). "
        f"Strategies: {strategies}. Checkpoints go to --store every few seconds; rerunning the same "
        "command resumes (also after a crash or kill), or prints a finished campaign's result; it says which "
        "before any work, and --fresh starts over. Prints the metrics (#RF, #URF, #Seed, #GF, with a "
        "legend), "
        "writes the faults as .npz (the generated faults and, apart, the test inputs M2 already gets wrong), "
        "a PNG grid and the JSON result beside it, and ends with a verdict: levelled off, or still climbing "
        "(a longer budget would likely find more).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--m1", required=True, metavar="FILE", help="the original model file")
    p.add_argument("--m2", required=True, metavar="FILE",
                   help="its new version; a deployed .onnx (ONNX Runtime) or .tflite (LiteRT) file runs as a "
                   "black box: DRFuzz needs its outputs only")
    p.add_argument("--runtime", choices=RUNTIMES, default="auto",
                   help="how .onnx files run: auto (onnx2torch, or ONNX Runtime for a graph it cannot "
                   "convert, e.g. int8 or float16), torch (onnx2torch only) or onnxruntime (the deployed "
                   "runtime, a "
                   "black box: no neurons for --strategy deephunter, no activations of M1 for --fidelity "
                   "dsa/lsa/mdsa). .tflite files always run in LiteRT")
    p.add_argument("--dataset", metavar="NAME", default=None,
                   help="data set or .npz file (default: the one the model files name)")
    add_data_dir(p)
    p.add_argument("--budget", default="5m", metavar="B",
                   help="wall time ('300s', '10m', '1h') or iterations ('5000it'; reproducible with --seed)")
    p.add_argument("--strategy", default="drfuzz", choices=[*STRATEGIES.names(), "both"],
                   help="fuzzing strategy; 'both' runs drfuzz and deephunter one after the other under the "
                   "same budget and one shared fidelity filter, and compares them")
    p.add_argument("--fidelity", default=None, metavar="SPEC",
                   help="DRFuzz's fidelity check (default: 'discriminator' for images, 'mdsa' for vectors "
                   "(N, F) and sequences (N, C, L)): 'discriminator' (the data set's, trained on first use "
                   "for "
                   "mnist and fashion-mnist and cached), 'discriminator:FILE' ('deepfault gan train'), "
                   "'ssim' "
                   "or 'ssim:T' (SSIM >= T, default 0.99, with the data's true range), 'ssim-compat' (a "
                   "compatibility mode: the published code's SSIM path, uniform 7x7 window, int16 range "
                   "65535, up to 20 accepted mutants per iteration, 50 tries each), 'none' (measurement), "
                   "or M1's surprise adequacy against the training split: 'dsa' (DSA <= the 90th "
                   "percentile of the test inputs' DSA), 'dsa:T' (DSA <= T), 'dsa:pQ' (the Q-th "
                   "percentile), 'dsa:T:FILE' or 'dsa::FILE' (a saved surprise state instead of the "
                   "cached fit), and the same with 'lsa' or 'mdsa'; scored from M1's forward pass of each "
                   "mutant, no extra model; or 'linf:T' (every element within T of the seed, in the data's "
                   "units; default 10%% of the range). SSIM and the discriminator take images only")
    p.add_argument("--shared-fidelity", default=None, metavar="SPEC",
                   help="one filter applied on top of each strategy's own check to every executed mutant "
                   "(DeepHunter's affine ones included), same specs as --fidelity (default: none; with "
                   "--strategy both: the --fidelity check)")
    p.add_argument("--mutants", type=positive_int, default=None, metavar="N",
                   help="mutants per selected input (default: 20, as published)")
    p.add_argument("--count-selections", choices=("fault", "every"), default=None,
                   help="when a selected input's times_selected rises: only in iterations where it produced "
                   "a regression fault (fault, as published; the default) or at every selection")
    p.add_argument("--queue-memory", type=_queue_memory, default=None, metavar="SIZE",
                   help="memory for the queue's images ('512MiB', '2GiB', '1.5GB'); the least likely to be "
                   "selected are evicted beyond it (default 1GiB, at most 65536 images: a 3x224x224 float32 "
                   "image takes 588 KiB, so 1,783 of them)")
    p.add_argument("--queue-dtype", choices=tuple(QUEUE_DTYPES), default="float32",
                   help="what the queue keeps its images in: float32 (the data's own, lossless) or float16 "
                   "(twice the images in the same memory; each queued image rounded, so the campaign "
                   "differs)")
    p.add_argument("--queue-capacity", type=positive_int, default=None, metavar="N",
                   help="a count instead of --queue-memory: exactly N queue images, whatever their size "
                   "(with --queue-memory: the smaller)")
    p.add_argument("--chooser", default=None, choices=CHOOSERS.names(),
                   help="rule choice (default: the strategy's: mcmc for drfuzz, uniform for deephunter)")
    p.add_argument("--inputs-per-step", dest="inputs_per_step", type=positive_int, default=DEFAULT_BATCH,
                   metavar="B", help="selected inputs per step (B; 1 is the published algorithm)")
    add_seed(p, "seed of every random choice")
    p.add_argument("--store", metavar="FILE", default="regress.sqlite",
                   help="SQLite results store for checkpoints and the result")
    p.add_argument("--campaign", metavar="ID", default=None,
                   help="the campaign's id in the store (default: STRATEGY-seedS)")
    _add_fresh(p)
    p.add_argument("--out", metavar="FILE.npz", default=None,
                   help="the faults file; the fault grid and the JSON result go beside it as FILE.png and "
                   "FILE.json (default: "
                   "STORE-CAMPAIGN-faults.npz beside the store)")
    p.add_argument("--grid", type=positive_int, default=16, metavar="N", help="faults in the image grid")
    p.add_argument("--criteria", dest="criterion", default="kmnc", metavar="NAME",
                   help="DeepHunter's coverage criterion of M2, one name (kmnc, nbc, snac need the training "
                   "split)")
    p.add_argument("--sections", type=positive_int, default=1000, help="KMNC sections (DeepHunter's k)")
    p.add_argument("--threshold", type=number, default=None, help="NC threshold (for --criteria nc)")
    p.add_argument("--layers", type=names, default=None, metavar="NAMES",
                   help="M2's layers the criterion reads: names, globs, type:CLASS, 'blocks' or "
                   "'linear-conv' (default: 'blocks' for a network with residual/transformer blocks, else "
                   "'linear-conv', every Linear/Conv but the logits)")
    p.add_argument("--max-seeds", type=positive_int, default=None, metavar="N",
                   help="use only the first N test inputs as candidate seeds")
    p.add_argument("--checkpoint-every", type=number, default=CHECKPOINT_EVERY, metavar="S",
                   help="seconds between checkpoints")
    add_device(p)
    add_threads(p)
    add_arch_options(p)
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow pickled whole modules (unpickling can run code: only for files you trust)")
    add_no_progress(p)
    add_report_option(p)
    p.set_defaults(func=_cmd_regress)


def _queue_memory(text: str) -> int:
    """``--queue-memory``'s type: a size in bytes (:func:`~deepfault.fuzz.campaign.memory.parse_size`)."""
    try:
        return parse_size(text, "queue memory")
    except DeepFaultError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix("queue memory ")) from None


def _add_fresh(p) -> None:
    p.add_argument("--fresh", action="store_true",
                   help="start the campaign from the start even when --store holds it (its checkpoint or "
                   "finished result with these options is deleted); without it a rerun with the same options "
                   "resumes, or prints the finished result; other options start a new campaign beside it")


def _say_store(state) -> None:
    """What the run does with the store, before any work."""
    print(state.line(), flush=True)


def _fault_kinds(r, npz) -> str:
    """The two kinds of fault, named apart, and where each went."""
    m = r.metrics
    return (f"faults: {m.rf:,} generated regression faults (#RF; {m.urf:,} unique, #URF) in {npz.name} "
            f"(inputs, seed_index, ...); {m.initial_rf:,} initial faults (test inputs M1 gets right and M2 "
            "already gets wrong: not generated, in no # column) apart, in its initial_* arrays")


def _verdicts(outcomes: dict) -> None:
    """The last lines: one verdict per campaign (:meth:`~deepfault.fuzz.campaign.CampaignResult.verdict`)."""
    for strategy, o in outcomes.items():
        line = o.result.verdict().line()
        print(line if len(outcomes) == 1 else line.replace("verdict:", f"verdict ({strategy}):", 1))


def _criterion_params(args) -> dict:
    if args.criterion == "kmnc":
        return {"sections": args.sections}
    if args.criterion in ("nc", "nac") and args.threshold is not None:
        return {"threshold": args.threshold}
    return {}


def _cells(args) -> list[tuple[str, str]]:
    """``(strategy, campaign id)`` of each campaign the command runs, in order."""
    if args.strategy == "both":
        return [(s, f"{s}-seed{args.seed}") for s in ("drfuzz", "deephunter")]
    return [(args.strategy, args.campaign or f"{args.strategy}-seed{args.seed}")]


def outputs(args) -> list[Output]:
    """The files ``deepfault regress`` writes: the store, and per campaign its faults (.npz), their
    grid (.png) and its JSON result (.json beside the faults).
    """
    out = [Output("--store", Path(args.store))]
    for strategy, cell in _cells(args):
        npz, png = faults_paths(args.store, cell, args.out if args.strategy != "both" else None)
        where = "" if args.strategy != "both" else f" of {strategy}"
        out += [Output(f"--out (faults{where}, .npz)", npz), Output(f"--out (fault grid{where}, .png)", png),
                Output(f"--out (result{where}, .json)", npz.with_suffix(".json"))]
    return out


def _cmd_regress(args) -> int:
    for flag, spec in (("--fidelity", args.fidelity), ("--shared-fidelity", args.shared_fidelity)):
        if spec is not None:
            try:
                check_fidelity_spec(spec)  # the arguments of 'dsa:T:FILE', 'ssim:T': before any work
            except DeepFaultError as err:
                raise DeepFaultError(f"{flag}: {err}") from None
    for flag, path in (("--m1", args.m1), ("--m2", args.m2)):
        if not Path(path).exists() and not Path(f"{path}.json").is_file():  # a Keras stem has a .json
            raise DeepFaultError(f"model file {path!r} ({flag}) does not exist; check the path")
    budget = args.budget  # a Budget, parsed once by the preflight
    device = device_from(args.device)
    # The pair is prepared once, here (--threads auto sees the models' size), and every campaign takes it.
    p1, p2, data = load_pair(args.m1, args.m2, dataset=args.dataset, data_dir=args.data_dir, arch=args.arch,
                             arch_kwargs=args.arch_args, trust_pickle=args.trust_pickle, runtime=args.runtime)
    kind = rule_kind(data.input_shape)
    fidelity = args.fidelity or default_fidelity(kind)  # no discriminator for vectors and sequences
    check_fidelity_inputs(fidelity, kind, option="--fidelity")
    check_fidelity_inputs(args.shared_fidelity, kind, option="--shared-fidelity")
    shared = args.shared_fidelity or (fidelity if args.strategy == "both" else None)
    _black_boxes(args, p1, p2, fidelity, shared)
    threads = apply_threads(args.threads, [p1.module, p2.module], device)
    live = not args.no_progress and sys.stderr.isatty()
    last = [0.0]
    legend = [True]  # once, above the first progress line

    def say_legend() -> None:
        if legend[0]:
            legend[0] = False
            print(f"progress: {PROGRESS_LEGEND}", file=sys.stderr)

    def show(p) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            say_legend()
            print("\r" + progress_line(p).ljust(110)[:160], end="", file=sys.stderr, flush=True)

    def log_line(p) -> None:  # not a terminal: one line every 10 s
        now = time.monotonic()
        if now - last[0] >= 10.0:
            last[0] = now
            say_legend()
            print(progress_line(p), file=sys.stderr, flush=True)

    paths = outputs(args)[1:]
    outcomes = {}
    for i, (strategy, _) in enumerate(_cells(args)):
        config = CampaignConfig(
            strategy=strategy, budget=budget, inputs_per_step=args.inputs_per_step, seed=args.seed,
            chooser=args.chooser,
            fidelity=fidelity, criteria=args.criterion,
            criterion_params=tuple(sorted(_criterion_params(args).items())),
            layers=args.layers, max_seeds=args.max_seeds, checkpoint_every=args.checkpoint_every,
            mutants=args.mutants, count_selections=args.count_selections, queue_capacity=args.queue_capacity,
            queue_memory=args.queue_memory, queue_dtype=args.queue_dtype,
            shared_fidelity=shared,
        )
        npz, png, result_path = (o.path for o in paths[3 * i:3 * i + 3])
        outcomes[strategy] = _run_one(args, (p1, p2, data), config, budget, device, threads,
                                      show if live else log_line, live, (npz, png, result_path))
    if len(outcomes) > 1:
        cmp = compare_campaigns({k: o.result for k, o in outcomes.items()})
        print(f"comparison (shared filter: {cmp['filter']}): at equal wall time "
              f"({cmp['wall_seconds']:.1f} s) and at equal iterations ({cmp['iterations']:,})")
        rows = [(name, row["at_equal_time"]["rf"], row["at_equal_time"]["urf"],
                 row["at_equal_iterations"]["rf"], row["at_equal_iterations"]["urf"],
                 fmt(row["urf_filtered"]), row["iterations"])
                for name, row in cmp["rows"].items()]
        print(table(("strategy", "#RF (time)", "#URF (time)", "#RF (iterations)", "#URF (iterations)",
                     "#URF passing the filter", "iterations"), rows))
        print(f"  ({METRICS_LEGEND})")
    if args.report_dir is not None:
        write_run_report(args, lambda folder: campaign_page(outcomes, folder))
    _verdicts(outcomes)
    return 130 if any(o.result.stop_reason == "interrupted" for o in outcomes.values()) else 0


def _black_boxes(args, p1, p2, fidelity, shared) -> None:
    """Refuse, before any work, what a black box cannot give; say how each black box runs."""
    for strategy, _ in _cells(args):
        check_black_box(p1, p2, CampaignConfig(strategy=strategy, fidelity=fidelity, shared_fidelity=shared),
                        strategy_option="--strategy", fidelity_option="--fidelity")
    for role, p in (("M1", p1), ("M2", p2)):
        box = unwrap_black_box(p.module)
        if box is not None:
            print(f"{role}: {box.source} runs in {box.runtime} as a black box (input "
                  f"{box.input_io.dtype}; its outputs only)")


def _m2_neurons(p2, data, config):
    """``(the neuron line, the selection)`` of M2 where the strategy reads its neurons (DeepHunter's
    coverage), from one test input; ``None`` where it reads none.
    """
    if not config.strategy_spec.reads_m2 or unwrap_black_box(p2.module) is not None or is_compiled(p2.module):
        return None
    layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
    layout, _ = activations(p2.module, data.x_test[:1], layers=layers, threads=None)
    line = neurons_line(layout.num_neurons, len(layout.layers), selection_source(p2.module, layers), of="M2")
    return line, layer_selection(p2.module, layers)


def _run_one(args, pair, config, budget, device, threads, progress, live, paths):
    p1, p2, data = pair
    shape = tuple(data.input_shape)
    slots = queue_slots(shape, config.queue_dtype, memory=config.queue_memory, count=config.queue_capacity)
    print(f"regress: {config.strategy} on {args.m1} -> {args.m2}, budget {budget}, "
          f"{args.inputs_per_step} inputs per step, seed {args.seed}, {config.check_name} check, {device}; "
          f"queue up to {slots:,} inputs ({format_size(slots * image_bytes(shape, config.queue_dtype))} in "
          f"{config.queue_dtype})")
    npz, png, result_path = paths
    neurons = _m2_neurons(p2, data, config)
    if neurons is not None:
        print(neurons[0])
    out = regress(p1, p2, dataset=data, data_dir=args.data_dir, store=args.store,
                  campaign=args.campaign if args.strategy != "both" else None, device=device,
                  progress=None if args.no_progress else progress, config=config, fresh=args.fresh,
                  on_store=_say_store)
    if live:
        print(file=sys.stderr)
    r = out.result
    reason = {"budget": f"stopped at the budget ({budget})",
              "exhausted": "stopped early: no queued input can be selected any more (all used or banned)",
              "interrupted": "interrupted; rerun the same command to resume from the last checkpoint"}
    print(metrics_table(r).text())
    print(f"  ({METRICS_LEGEND})")
    for role, check in r.trace_checks.items():
        print(f"{'shared filter' if role == 'shared' else 'fidelity'} {check['name']}: a mutant passed when "
              f"{check['rule']}; {r.generated:,} mutants made, {r.passed:,} ran on both models")
    print(f"{reason[r.stop_reason]}; {r.roots} seeds, {r.queued_seeds} queued"
          + (f"; resumed from checkpoint {r.resumed}" if r.resumed else "")
          + f"; {r.seconds:.1f} s of fuzzing, and {r.setup_seconds:.1f} s before it evaluating the seeds")
    r.save_faults(npz)
    print(_fault_kinds(r, npz))
    wrote = [str(npz)]
    grid: str | None = png.name
    try:
        gen = ~r.faults.select(r.faults.kind == 0).initial
        idx = [i for i, g in enumerate(gen) if g][: args.grid]
        arrays = r.fault_arrays()
        fault_grid(out.seed_inputs[idx], arrays["inputs"][idx], arrays["label"][idx], arrays["m2_pred"][idx],
                   png, bounds=out.bounds, class_names=out.class_names,
                   title=f"regression faults ({config.strategy}, seed {args.seed}): seed | fault")
        wrote.append(str(png))
    except ModuleNotFoundError as err:
        grid = None
        print(f"no image grid: {err}")
    payload = out.to_dict()
    body = {k: v for k, v in payload.items() if k != "config"}  # the envelope has it
    models = {"m1": model_record(p1, args.m1, name=out.names[0]),
              "m2": model_record(p2, args.m2, name=out.names[1],
                                 **({} if neurons is None else {"layer_selection": neurons[1]}))}
    dataset = dataset_record(data, args.data_dir)
    write_result(result_path, result_document(
        "regress", {"models": models, "dataset": dataset, **body}, config=payload["config"], seed=config.seed,
        device=device, argv=args.argv, threads=threads, outputs={"faults": npz.name, "grid": grid}))
    wrote.append(str(result_path))
    print(f"store: {out.store} (experiment {out.experiment}, campaign {out.cell}); wrote {', '.join(wrote)}")
    return out
