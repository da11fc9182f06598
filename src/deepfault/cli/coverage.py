"""``deepfault coverage profile|surprise|measure|rank``: neuron profiles, surprise states,
coverage, prioritisation.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from ..core.capture import layer_selection, neurons_line, selection_source
from ..coverage import (
    compute_profile,
    fit_surprise,
    list_criteria,
    load_profile,
    load_surprise,
    measure_coverage,
    model_hash,
    rank_inputs,
    save_surprise,
)
from ..coverage.figures import _pyplot
from ..coverage.measure import SA_SECTIONS, SCORE_CRITERIA, check_params, parse_criteria
from ..coverage.rank import COVERAGE_ORDERS, DEFAULT_BY, list_prioritisers, parse_by
from ..coverage.report import layer_tables, measure_page, never_activated_line, rank_page, surprise_table
from ..coverage.surprise import SURPRISE_KINDS
from ..errors import DeepFaultError
from ..experiment.report import render_page
from ..experiment.results import dataset_record, model_record, result_document, write_result
from ..models.prepare import prepare_model
from ..provenance import provenance
from ._common import (
    HelpFormatter,
    Output,
    add_batch_size,
    add_data_dir,
    add_device,
    add_model_options,
    add_no_progress,
    add_report_option,
    add_threads,
    apply_threads,
    batch_choice,
    declared,
    device_from,
    names,
    non_negative_number,
    number,
    output_path,
    positive_int,
    positive_number,
    prepare_from_args,
    table,
    write_run_report,
)


def thresholds(text: str) -> tuple[float, ...]:
    """``0,0.25,0.5`` -> ``(0.0, 0.25, 0.5)``."""
    try:
        values = tuple(float(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(
            f"expected a finite number or comma-separated numbers such as 0,0.25,0.5; got {text!r}"
        )
    return values


_LAYERS_HELP = ("'blocks' for a network with residual/transformer blocks, else 'linear-conv': every "
                "Linear/Conv layer except the logits layer; or the profile's layers; a surprise state "
                "brings its own")


def _add_common(p: argparse.ArgumentParser, *, split: str, layers_default: str = _LAYERS_HELP) -> None:
    p.add_argument("--model", metavar="FILE", default=None,
                   help="model file: deepfault .pt, state_dict (with --arch), TorchScript, Keras "
                   ".h5/.json or stem, .onnx (default: the embedded digits model)")
    p.add_argument("--dataset", metavar="NAME", default=None,
                   help="data set name or .npz file (default: the model file's data set)")
    add_data_dir(p)
    p.add_argument("--split", default=split, metavar="SPLIT",
                   help="'test', 'train', or an .npz file whose x (and y) are the inputs")
    p.add_argument("--layers", type=names, default=None, metavar="NAMES",
                   help="comma-separated module names, globs ('layer*.1'), type:CLASS, or a named selection "
                   "('blocks': residual/transformer block outputs; 'linear-conv': every Linear/Conv but "
                   "the logits; 'deepxplore': "
                   f"activated conv/dense outputs, pooling, logits and softmax) (default: {layers_default})")
    p.add_argument("--transform", choices=("raw", "layer-minmax"), default=None,
                   help="neuron values: 'raw', or 'layer-minmax' (each input's layer output scaled "
                   "to [0, 1], DeepXplore's) (default: the profile's, else raw)")
    add_batch_size(p)
    add_device(p)
    add_threads(p)
    add_no_progress(p)
    add_model_options(p)


def _add_criteria(p: argparse.ArgumentParser) -> None:
    p.add_argument("--criteria", default="nc", metavar="NAMES",
                   help=f"comma-separated criteria, or 'all' ({', '.join(list_criteria())})")
    p.add_argument("--threshold", type=thresholds, action="extend", nargs="+", default=None, metavar="T",
                   help="activation threshold of nc/nac; several (0 0.25 0.5 0.75, or 0,0.25,0.5,0.75) "
                   "give coverage versus threshold (default: 0)")
    p.add_argument("--sections", type=positive_int, default=10, metavar="K",
                   help="KMNC sections per neuron (DeepHunter uses 1000)")
    p.add_argument("--top-k", dest="top_k", type=positive_int, default=1, metavar="K",
                   help="TKNC/TKNP: top neurons per layer")
    p.add_argument("--scale", type=number, default=0.0, metavar="S",
                   help="NBC/SNAC: corners start S standard deviations beyond the profiled range")
    p.add_argument("--profile", metavar="FILE", default=None,
                   help="profile from 'deepfault coverage profile' (needed by kmnc, nbc, snac)")


def _add_surprise(p: argparse.ArgumentParser, needed_by: str) -> None:
    p.add_argument("--surprise", metavar="FILE", default=None,
                   help=f"surprise state from 'deepfault coverage surprise' (needed by {needed_by}; "
                        "default: fit "
                   "one on the model's training split first, with that command's defaults, and say so)")


def add_parser(sub) -> None:
    """Add ``deepfault coverage`` and its actions profile, surprise, measure and rank to ``sub``."""
    cov = sub.add_parser(
        "coverage",
        help="neuron coverage (NC, KMNC, NBC, SNAC, TKNC, TKNP), surprise adequacy, prioritisation",
        description="Structural coverage criteria of DeepXplore and DeepGauge on a model's "
        "neurons and Kim et al.'s surprise adequacy: profile the training data or fit surprise "
        "adequacy on it, measure coverage of a test set, or order a test set by uncertainty, "
        "surprise or coverage.",
    )
    cov_sub = cov.add_subparsers(dest="coverage_command", metavar="ACTION")
    cov_sub.required = True

    prof = cov_sub.add_parser(
        "profile", help="each neuron's min, max, mean and std on the training split",
        description="Stream the training split once and write each neuron's min, max, mean and "
        "standard deviation, with the layers, the transform and a hash of the model's weights, "
        "to an .npz file (for kmnc, nbc and snac).",
        formatter_class=HelpFormatter,
    )
    _add_common(prof, split="train")
    prof.add_argument("--out", metavar="FILE", default="coverage-profile.npz",
                      help="profile file (.npz), written atomically; '-' writes none")
    prof.set_defaults(func=_cmd_profile)

    surp = cov_sub.add_parser(
        "surprise", help="fit surprise adequacy (LSA, DSA, MDSA) on the training split",
        description="Stream the training split once and keep each input's activation trace of the "
        "chosen layers with its class, with the transform and a hash of the model's weights, in an "
        ".npz file (for 'rank --by lsa,dsa,mdsa' and 'measure --criteria lsc,dsc,mdsc').",
        formatter_class=HelpFormatter,
    )
    _add_common(surp, split="train", layers_default="the deepest of the default layers: the last block, or "
                "the Linear/Conv layer before the logits, Kim et al.'s usual choice")
    surp.add_argument("--classes", choices=("predictions", "labels"), default="predictions",
                      help="group the training traces by the model's predictions (as a test input always "
                      "is) or by the labels")
    surp.add_argument("--var-threshold", type=non_negative_number, default=1e-5, metavar="V",
                      help="LSA: drop the neurons whose variance within a class is below V (Kim et al.'s; 0 "
                      "drops none)")
    surp.add_argument("--max-features", type=positive_int, default=None, metavar="K",
                      help="LSA: keep only the K neurons of highest variance per class (dnn-tip uses 300) "
                      "(default: all)")
    surp.add_argument("--out", metavar="FILE", default="surprise.npz",
                      help="surprise state (.npz), written atomically; '-' writes none")
    surp.set_defaults(func=_cmd_surprise)

    meas = cov_sub.add_parser(
        "measure", help="coverage of a set of inputs, overall and per layer",
        description="Run the inputs through the model once and print each criterion's coverage "
        "overall and per layer; several thresholds give DeepXplore's coverage-versus-threshold "
        "curve.",
        formatter_class=HelpFormatter,
    )
    _add_common(meas, split="test")
    _add_criteria(meas)
    _add_surprise(meas, "lsc, dsc, mdsc")
    meas.add_argument("--sa-upper", type=positive_number, default=None, metavar="U",
                      help="surprise coverage buckets [0, U) (default: the largest finite score of the "
                      "measured inputs, printed; not comparable between input sets)")
    meas.add_argument("--sa-sections", type=positive_int, default=SA_SECTIONS, metavar="K",
                      help="surprise coverage buckets (Kim et al.'s)")
    meas.add_argument("--out", metavar="FILE", default="coverage.json",
                      help="JSON result file, written atomically; '-' writes none")
    meas.add_argument("--plot", metavar="DIR", default=None,
                      help="also write report.html, coverage_threshold.png, coverage_layers.png and "
                      "coverage_growth.png into DIR")
    add_report_option(meas)
    meas.set_defaults(func=_cmd_measure)

    rank = cov_sub.add_parser(
        "rank", help="order inputs by uncertainty, surprise or coverage; APFD of the failing ones",
        description="Order the inputs by each prioritiser (uncertainty of the outputs, surprise "
        "adequacy, or coverage: additional (cam) or total (ctm) under each --criteria) and report "
        "APFD of the inputs the model misclassifies (0.5 is what a random order gets on average), "
        "each prioritiser's time and its first inputs.",
        formatter_class=HelpFormatter,
    )
    _add_common(rank, split="test")
    rank.add_argument("--by", default=",".join(DEFAULT_BY), metavar="NAMES",
                      help=f"comma-separated prioritisers, or 'all' ({', '.join(list_prioritisers())}); "
                      "cam/ctm rank once per --criteria (default: every one that needs nothing fitted, "
                      f"{','.join(DEFAULT_BY)})")
    _add_criteria(rank)
    _add_surprise(rank, "lsa, dsa, mdsa")
    rank.add_argument("--out", metavar="FILE", default="coverage-rank.json",
                      help="JSON result file with each order and score, written atomically; '-' writes none")
    add_report_option(rank)
    rank.set_defaults(func=_cmd_rank)


# --------------------------------------------------------------------------- helpers

_PLOTS = ("report.html", "coverage_threshold.png", "coverage_layers.png", "coverage_growth.png",
          "coverage_surprise.png")


def outputs(args) -> list[Output]:
    """The files ``coverage profile`` and ``surprise`` (an .npz), ``measure`` (a JSON result, and
    ``--plot DIR``'s page and figures) and ``rank`` (a JSON result) write.
    """
    out = [Output("--out", output_path(args.out))]
    if args.coverage_command == "measure" and args.plot:
        folder = Path(args.plot)
        out = [Output("--plot", folder, folder=True), *out,
               *[Output(f"--plot ({name})", folder / name) for name in _PLOTS]]
    return out


def _layers(args):
    if args.layers is None:
        return None
    return args.layers[0] if len(args.layers) == 1 else list(args.layers)


def _load(args):
    """``(prepared model, inputs, labels, split description, the model's own data set)``; the
    last gives the training split a surprise state is fitted on.
    """
    split = str(args.split)
    if split not in ("test", "train") and not split.lower().endswith(".npz"):
        raise DeepFaultError(f"--split must be 'test', 'train' or an .npz file; got {split!r}")
    prep = prepare_from_args(args)
    data = prep.data
    assert data is not None  # prepare_from_args prepares the model on its data set
    if split in ("test", "train"):
        x, y = (data.x_test, data.y_test) if split == "test" else (data.x_train, data.y_train)
        return prep, x, y, f"{data.name} {split}", data
    prep = prepare_model(prep, split, data_dir=args.data_dir)
    assert prep.data is not None  # prepared on the .npz's data
    return prep, prep.data.x_test, prep.data.y_test, f"{split} (x)", data


def _criteria_options(args) -> dict:
    flat = [t for group in (args.threshold or [(0.0,)]) for t in group]
    return {"criteria": args.criteria, "threshold": flat, "sections": args.sections,
            "top_k": args.top_k, "scale": args.scale}


def _prepare(args, *, check: bool = True):
    """Validate the options and load the profile before the data, so bad input costs nothing."""
    opts = _criteria_options(args)
    profile = load_profile(args.profile) if args.profile else None
    if check:
        extra = ({"sa_sections": args.sa_sections, "sa_upper": args.sa_upper}
                 if hasattr(args, "sa_sections") else {})
        check_params(parse_criteria(opts["criteria"]), threshold=opts["threshold"], sections=opts["sections"],
                     top_k=opts["top_k"], scale=opts["scale"], profile=profile, **extra)
    return opts, profile


def _neurons(layout, model, layers, *, profile=None, deepest: bool = False) -> str:
    """The neuron line (:func:`~deepfault.core.capture.neurons_line`): ``layers`` as given, the
    profile's when none are given, or the deepest default layer (a surprise state's default).
    """
    if layers is None and profile is not None:
        named = selection_source(model, profile.selection, named_by="the profile's --layers")
        source = f"the profile's, {named}"
    elif deepest:
        source = f"the deepest of {selection_source(model, None)}"
    else:
        source = selection_source(model, layers)
    return neurons_line(layout.num_neurons, len(layout.layers), source)


def _selection(report, model, layers, profile):
    """What the result records as the selection of the neurons read (``None`` where none were)."""
    if report.layout is None:
        return None
    if layers is None and profile is not None:
        layers = profile.selection
    return layer_selection(model, layers)


def _layer_names(layout) -> str:
    return ", ".join(f"{la.name} ({la.size})" for la in layout.layers)


def _state(args, module, base) -> tuple:
    """The surprise state of ``--surprise``, or one fitted now on the training split of the
    model's data set (``(state, what to print, summary extras)``).
    """
    if args.surprise:
        state = load_surprise(args.surprise)
        state.check_model(module)
        text = (f"surprise state {args.surprise}: layers {_layer_names(state.layout)}, {state.num_inputs} "
                f"training inputs, {state.transform}\n")
        return state, text, {"source": str(args.surprise)}
    if base is None or len(base.x_train) == 0:
        raise DeepFaultError("the data set has no training split to fit surprise adequacy on; fit a state "
                             "with "
                             "'deepfault coverage surprise --split FILE.npz' and pass --surprise FILE")
    t0 = time.perf_counter()
    state = fit_surprise(module, base.x_train, batch_size=args.batch_size, progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    text = (f"no --surprise given: fitted surprise adequacy on {base.name} train ({state.num_inputs} inputs, "
            f"layers {_layer_names(state.layout)}, raw, by predictions) in {seconds:.2f} s; "
            "'deepfault coverage surprise --out FILE' keeps one for --surprise FILE\n")
    return state, text, {"source": f"fitted on {base.name} train", "fit_seconds": seconds}


def _fit_count(args, x, base, fits: bool) -> int:
    """The inputs one batch may hold: the test inputs, or the training split a fit reads."""
    if fits and not args.surprise and base is not None:
        return max(len(x), len(base.x_train))
    return len(x)


def _header(prep, split: str, n: int, layout, transform: str, device, profile) -> str:
    text = (f"model {prep.name} · data {split} ({n} inputs) · {len(layout.layers)} layers, "
            f"{layout.num_neurons} neurons · transform {transform} · {device}\n")
    if profile is not None:
        text += (f"profile: {profile.count} inputs, {profile.transform}, weights sha256 "
                 f"{profile.model_hash[:12]}...\n")
    return text


def _cell(covered: int, total: int | None) -> str:
    if total is None:
        return str(covered)
    return f"{covered}/{total} {100 * covered / total:.1f}%" if total else "0/0"


def _write(command: str, path, args, device, threads: int, prep, split: str, opts: dict, body: dict,
           selection=None) -> None:
    """The JSON result of ``coverage measure`` or ``rank`` (:mod:`deepfault.experiment.results`);
    ``selection`` (:func:`~deepfault.core.capture.layer_selection`) goes into the model's record.
    """
    data = prep.data
    mf = prep.model_file
    model = model_record(prep, args.model, label=prep.name,
                         arch_kwargs=None if mf is None else mf.arch_kwargs,
                         weights_sha256=model_hash(prep.module), layer_selection=selection)
    dataset = dataset_record(data, args.data_dir, split=split, layout=prep.layout,
                             input_shape=list(data.input_shape))
    config = {**opts, "layers": None if args.layers is None else list(args.layers),
              "transform": args.transform, "batch_size": args.batch_size, "profile": args.profile}
    write_result(path, result_document(command, {"model": model, "dataset": dataset, **body}, config=config,
                                       device=device, argv=args.argv, threads=threads))
    print(f"wrote {path}")


def _page_config(args) -> dict:
    return {k: v for k, v in vars(args).items() if k not in ("func", "argv")}


# --------------------------------------------------------------------------- commands


def _cmd_profile(args) -> int:
    out = declared(outputs(args), "--out")  # '-' writes none, as elsewhere
    device = device_from(args.device)
    prep, x, _, split, _ = _load(args)
    model = prep.to(device).module
    apply_threads(args.threads, [model], device)
    batch_choice(model, x, args)
    profile = compute_profile(model, x, layers=_layers(args), transform=args.transform or "raw",
                              batch_size=args.batch_size, progress=not args.no_progress)
    print(_header(prep, split, len(x), profile.layout, profile.transform, device, None), end="")
    print(_neurons(profile.layout, model, _layers(args)))
    rows = [(r["layer"], r["units"], f"{r['low']:.4g}", f"{r['high']:.4g}", f"{r['mean']:.4g}",
             f"{r['std']:.4g}", r["constant"]) for r in profile.layer_summary()]
    print(table(("layer", "units", "min", "max", "mean of means", "mean std", "constant"), rows))
    if out is not None:
        profile.save(out)
        print(f"\nwrote {out} (weights sha256 {profile.model_hash[:12]}...)")
    return 0


def _cmd_surprise(args) -> int:
    out = declared(outputs(args), "--out")
    device = device_from(args.device)
    prep, x, y, split, _ = _load(args)
    model = prep.to(device).module
    apply_threads(args.threads, [model], device)
    batch_choice(model, x, args)
    t0 = time.perf_counter()
    state = fit_surprise(model, x, y if args.classes == "labels" else None, layers=_layers(args),
                         transform=args.transform or "raw", classes=args.classes,
                         var_threshold=args.var_threshold, max_features=args.max_features,
                         batch_size=args.batch_size, progress=not args.no_progress)
    seconds = time.perf_counter() - t0
    print(f"model {prep.name} · data {split} ({state.num_inputs} inputs) · transform {state.transform} · "
          f"{device}")
    print(f"layers: {_layer_names(state.layout)}; {state.num_neurons} neurons")
    print(_neurons(state.layout, model, _layers(args), deepest=args.layers is None))
    counts = state.class_counts()
    names = list(getattr(prep.data, "class_names", None) or [])
    rows = [(c, names[c] if c < len(names) else "", int(counts[c])) for c in range(state.num_classes)]
    print(f"\ninputs per class (by {state.grouping}; a class with none makes every score inf, one input "
          "gives no LSA)")
    print(table(("class", "name", "inputs"), rows))
    print(f"\nLSA drops neurons of variance < {state.var_threshold} per class"
          + (f", keeps at most {state.max_features}" if state.max_features else "")
          + f"; fitted in {seconds:.2f} s")
    if out is not None:
        save_surprise(state, out)
        print(f"\nwrote {out} ({state.num_inputs} x {state.num_neurons} float32 traces, weights sha256 "
              f"{state.model_hash[:12]}...)")
    return 0


def _cmd_measure(args) -> int:
    opts, profile = _prepare(args)
    opts.update(sa_upper=args.sa_upper, sa_sections=args.sa_sections)
    needs_state = any(n in SCORE_CRITERIA for n in parse_criteria(opts["criteria"]))
    if needs_state and args.surprise:
        load_surprise(args.surprise)  # a bad file fails now, before the data
    out = declared(outputs(args), "--out")
    if args.plot:
        _pyplot()  # fail now, not after the work, when matplotlib is missing
    device = device_from(args.device)
    prep, x, _, split, base = _load(args)
    model = prep.to(device).module
    threads = apply_threads(args.threads, [model], device)
    batch_choice(model, x, args, count=_fit_count(args, x, base, needs_state))
    state, fitted, source = _state(args, model, base) if needs_state else (None, "", {})
    print(fitted, end="")
    report = measure_coverage(model, x, **opts, profile=profile, surprise=state, layers=_layers(args),
                              transform=args.transform, batch_size=args.batch_size,
                              progress=not args.no_progress)
    text = _header(prep, split, len(x), report.layout, report.transform, device, profile)
    if any(r.criterion not in SCORE_CRITERIA for r in report.results):  # neurons were read
        text += _neurons(report.layout, model, _layers(args), profile=profile) + "\n"
    text += "".join(f"\n{t.title}\n{t.text()}\n" for t in layer_tables(report))
    sa = surprise_table(report)
    if sa is not None and report.surprise is not None:
        text += f"\n{sa.title}\n{sa.text()}\n"
        if any(v["upper_from"] == "inputs" for v in report.surprise["criteria"].values()):
            text += ("U: the largest finite score of these inputs, so the coverage is not comparable between "
                     "input sets; give --sa-upper U to compare\n")
    legend = criteria_legend(r.criterion for r in report.results)
    if legend:
        text += f"  ({legend})\n"
    dead = never_activated_line(report)
    if dead:
        text += f"\n{dead}\n"
    text += f"\nmeasured in {report.seconds:.2f} s\n"
    print(text, end="")

    def page(folder):
        return measure_page(report, folder, model_name=prep.name, data_name=split, device=str(device),
                            provenance=provenance(device, argv=args.argv), config=_page_config(args))

    if args.plot:
        shown = page(args.plot)
        html_path = Path(args.plot) / "report.html"
        page_text = render_page(shown["title"], shown["html"], shown["provenance"], config=shown["config"],
                                meta=shown["meta"], nav=shown["nav"])
        html_path.write_text(page_text, encoding="utf-8")
        for path in [*shown["figures"], html_path]:
            print(f"wrote {path}")
    if args.report_dir:
        write_run_report(args, page)
    if out is not None:
        body = report.to_dict()
        if body["surprise"] is not None:
            body["surprise"]["state"].update(source)
        read = any(r.criterion not in SCORE_CRITERIA for r in report.results)
        _write("coverage measure", out, args, device, threads, prep, split,
               {**opts, "surprise": args.surprise}, body,
               _selection(report, model, _layers(args), profile) if read else None)
    return 0


#: The neuron criteria's full names, for the legend under ``coverage measure``'s tables (the
#: surprise coverages' come from :data:`~deepfault.coverage.measure.SCORE_CRITERIA`).
CRITERION_NAMES = {
    "nc": "neuron coverage", "nac": "neuron activation coverage (nc on raw values)",
    "kmnc": "k-multisection neuron coverage", "nbc": "neuron boundary coverage",
    "snac": "strong neuron activation coverage", "tknc": "top-k neuron coverage",
    "tknp": "top-k neuron patterns",
}
#: The legend under ``coverage rank``'s table.
RANK_LEGEND = ("APFD: average percentage of faults detected, 0..1, higher when the misclassified inputs "
               "come earlier in the order")


def criteria_legend(names) -> str:
    """``nc: neuron coverage; kmnc: ...`` for the criteria ``names`` (in their order)."""
    parts = []
    for n in dict.fromkeys(names):
        full = SCORE_CRITERIA.get(n).title if n in SCORE_CRITERIA else CRITERION_NAMES.get(n)
        if full:
            parts.append(f"{n}: {full}")
    return "; ".join(parts)


def _share(v: float) -> str:
    return f"{100 * v:.1f}%"


def _cmd_rank(args) -> int:
    by = parse_by(args.by)
    coverage = any(n in COVERAGE_ORDERS for n in by)
    surprising = any(n in SURPRISE_KINDS for n in by)
    opts, profile = _prepare(args, check=coverage)
    if surprising and args.surprise:
        load_surprise(args.surprise)  # a bad file fails now, before the data
    if args.report_dir:
        _pyplot()
    out = declared(outputs(args), "--out")
    device = device_from(args.device)
    prep, x, y, split, base = _load(args)
    model = prep.to(device).module
    threads = apply_threads(args.threads, [model], device)
    batch_choice(model, x, args, count=_fit_count(args, x, base, surprising))
    state, fitted, source = _state(args, model, base) if surprising else (None, "", {})
    report = rank_inputs(model, x, y, by=by, **opts, profile=profile, surprise=state, layers=_layers(args),
                         transform=args.transform, output_kind=prep.output_kind, batch_size=args.batch_size,
                         progress=not args.no_progress)
    text = f"model {prep.name} · data {split} ({report.num_inputs} inputs) · {device}\n" + fitted
    if report.layout is not None:
        text += (f"cam/ctm: {len(report.layout.layers)} layers, {report.layout.num_neurons} neurons, "
                 "transform "
                 f"{report.transform}\n")
        if profile is not None:
            text += f"profile: {profile.count} inputs, {profile.transform}\n"
        text += _neurons(report.layout, model, _layers(args), profile=profile) + "\n"
    nf, n = report.num_failing, report.num_inputs
    ideal = f", the ideal order {1 - nf / (2 * n):.3f}" if nf else ""
    text += f"{nf} of {n} inputs misclassified; a random order has APFD 0.5 on average{ideal}\n\n"
    tenth = max(1, math.ceil(0.1 * n))

    def f3(v):
        return "-" if v is None else f"{v:.3f}"

    rows = [(r.name, f3(r.apfd), _share(r.found(report.failing)[tenth - 1]) if nf else "-",
             f"{r.seconds:.4f}",
             " ".join(map(str, r.order[:5].tolist())) + (" ..." if n > 5 else "")) for r in report.rankings]
    text += table(("prioritiser", "APFD", f"found in first {tenth}", "seconds", "first inputs"), rows)
    text += f"\n  ({RANK_LEGEND})"
    best = report.best()
    if best is not None:
        text += f"\n\nearliest: {best.name} (APFD {best.apfd:.3f})"
    for r in report.rankings:
        if r.prioritiser == "cam":
            picked = "input covers" if r.greedy == 1 else f"{r.greedy} inputs cover"
            text += (f"\ncam under {r.criterion}: the set covers {_cell(r.covered or 0, r.total)}; "
                     f"cam's first {picked} it all")
    text += (f"\n\nforward pass (shared) {report.forward_seconds:.2f} s; ranked in {report.seconds:.2f} s; "
             "seconds: each prioritiser's own time beyond the forward pass\n")
    print(text, end="")

    def page(folder):
        return rank_page(report, folder, model_name=prep.name, data_name=split, device=str(device),
                         provenance=provenance(device, argv=args.argv), config=_page_config(args),
                         notes=fitted.strip())

    write_run_report(args, page)
    if out is not None:
        body = report.to_dict()
        if body["surprise"] is not None:
            body["surprise"].update(source)
        _write("coverage rank", out, args, device, threads, prep, split,
               {**opts, "by": list(by), "surprise": args.surprise}, body,
               _selection(report, model, _layers(args), profile))
    return 0
