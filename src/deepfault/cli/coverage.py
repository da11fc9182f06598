"""``deepfault coverage profile|measure|rank``: neuron profiles, coverage, prioritisation."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from ..coverage import compute_profile, list_criteria, load_profile, measure_coverage, model_hash, rank_inputs
from ..coverage.figures import _pyplot
from ..coverage.measure import check_params, parse_criteria
from ..coverage.report import layer_tables, measure_page
from ..errors import DeepFaultError
from ..experiment.report import render_page
from ..experiment.results import dataset_record, model_record, result_document, write_result
from ..models.prepare import prepare_model
from ..provenance import provenance
from ._common import (
    HelpFormatter,
    Output,
    add_data_dir,
    add_device,
    add_model_options,
    add_no_progress,
    add_report_option,
    add_threads,
    apply_threads,
    declared,
    device_from,
    load_inputs,
    names,
    number,
    output_path,
    positive_int,
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


def _add_common(p: argparse.ArgumentParser, *, split: str) -> None:
    p.add_argument("--model", metavar="FILE", default=None,
                   help="model file: deepfault .pt, state_dict (with --arch), TorchScript, Keras "
                   ".h5/.json or stem, .onnx (default: the embedded digits model)")
    p.add_argument("--dataset", metavar="NAME", default=None,
                   help="data set name or .npz file (default: the model file's data set)")
    add_data_dir(p)
    p.add_argument("--split", default=split, metavar="SPLIT",
                   help="'test', 'train', or an .npz file whose x (and y) are the inputs")
    p.add_argument("--layers", type=names, default=None, metavar="NAMES",
                   help="comma-separated module names, or a named selection ('deepxplore': "
                   "activated conv/dense outputs, pooling, logits and softmax) (default: every "
                   "Linear/Conv layer except the logits layer, or the profile's layers)")
    p.add_argument("--transform", choices=("raw", "layer-minmax"), default=None,
                   help="neuron values: 'raw', or 'layer-minmax' (each input's layer output scaled "
                   "to [0, 1], DeepXplore's) (default: the profile's, else raw)")
    p.add_argument("--batch-size", type=positive_int, default=1024, help="inputs per pass")
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


def add_parser(sub) -> None:
    """Add ``deepfault coverage`` and its actions profile, measure and rank to ``sub``."""
    cov = sub.add_parser(
        "coverage", help="neuron coverage (NC, KMNC, NBC, SNAC, TKNC, TKNP), profiles, prioritisation",
        description="Structural coverage criteria of DeepXplore and DeepGauge on a model's "
        "neurons: profile the training data, measure coverage of a test set, or order a test "
        "set by additional coverage.",
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

    meas = cov_sub.add_parser(
        "measure", help="coverage of a set of inputs, overall and per layer",
        description="Run the inputs through the model once and print each criterion's coverage "
        "overall and per layer; several thresholds give DeepXplore's coverage-versus-threshold "
        "curve.",
        formatter_class=HelpFormatter,
    )
    _add_common(meas, split="test")
    _add_criteria(meas)
    meas.add_argument("--out", metavar="FILE", default="coverage.json",
                      help="JSON result file, written atomically; '-' writes none")
    meas.add_argument("--plot", metavar="DIR", default=None,
                      help="also write report.html, coverage_threshold.png, coverage_layers.png and "
                      "coverage_growth.png into DIR")
    add_report_option(meas)
    meas.set_defaults(func=_cmd_measure)

    rank = cov_sub.add_parser(
        "rank", help="order inputs by additional coverage and report APFD of the failing ones",
        description="Order the inputs greedily by the coverage each adds to the ones before it "
        "(then by their own coverage) and report APFD of the inputs the model misclassifies "
        "(0.5 is what a random order gets on average).",
        formatter_class=HelpFormatter,
    )
    _add_common(rank, split="test")
    _add_criteria(rank)
    rank.add_argument("--out", metavar="FILE", default="coverage-rank.json",
                      help="JSON result file with each order, written atomically; '-' writes none")
    rank.set_defaults(func=_cmd_rank)


# --------------------------------------------------------------------------- helpers

_PLOTS = ("report.html", "coverage_threshold.png", "coverage_layers.png", "coverage_growth.png")


def outputs(args) -> list[Output]:
    """The files ``coverage profile`` (an .npz), ``measure`` (a JSON result, and ``--plot DIR``'s
    page and figures) and ``rank`` (a JSON result) write.
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
    """``(prepared model, inputs, labels, split description)``."""
    split = str(args.split)
    if split not in ("test", "train") and not split.lower().endswith(".npz"):
        raise DeepFaultError(f"--split must be 'test', 'train' or an .npz file; got {split!r}")
    prep = load_inputs(args)
    if split in ("test", "train"):
        data = prep.data
        assert data is not None  # load_inputs prepares the model on its data set
        x, y = (data.x_test, data.y_test) if split == "test" else (data.x_train, data.y_train)
        return prep, x, y, f"{data.name} {split}"
    prep = prepare_model(prep, split, data_dir=args.data_dir)
    assert prep.data is not None  # prepared on the .npz's data
    return prep, prep.data.x_test, prep.data.y_test, f"{split} (x)"


def _criteria_options(args) -> dict:
    flat = [t for group in (args.threshold or [(0.0,)]) for t in group]
    return {"criteria": args.criteria, "threshold": flat, "sections": args.sections,
            "top_k": args.top_k, "scale": args.scale}


def _prepare(args):
    """Validate the options and load the profile before the data, so bad input costs nothing."""
    opts = _criteria_options(args)
    profile = load_profile(args.profile) if args.profile else None
    check_params(parse_criteria(opts["criteria"]), threshold=opts["threshold"], sections=opts["sections"],
                 top_k=opts["top_k"], scale=opts["scale"], profile=profile)
    return opts, profile


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


def _write(command: str, path, args, device, threads: int, prep, split: str, opts: dict, body: dict) -> None:
    """The JSON result of ``coverage measure`` or ``rank`` (:mod:`deepfault.experiment.results`)."""
    data = prep.data
    mf = prep.model_file
    model = model_record(prep, args.model, label=prep.name,
                         arch_kwargs=None if mf is None else mf.arch_kwargs,
                         weights_sha256=model_hash(prep.module))
    dataset = dataset_record(data, args.data_dir, split=split, layout=prep.layout,
                             input_shape=list(data.input_shape))
    config = {**opts, "layers": None if args.layers is None else list(args.layers),
              "transform": args.transform, "batch_size": args.batch_size, "profile": args.profile}
    write_result(path, result_document(command, {"model": model, "dataset": dataset, **body}, config=config,
                                       device=device, argv=args.argv, threads=threads))
    print(f"wrote {path}")


# --------------------------------------------------------------------------- commands


def _cmd_profile(args) -> int:
    out = declared(outputs(args), "--out")  # '-' writes none, as elsewhere
    device = device_from(args.device)
    prep, x, _, split = _load(args)
    model = prep.to(device).module
    apply_threads(args.threads, [model], device)
    profile = compute_profile(model, x, layers=_layers(args), transform=args.transform or "raw",
                              batch_size=args.batch_size, progress=not args.no_progress)
    print(_header(prep, split, len(x), profile.layout, profile.transform, device, None), end="")
    rows = [(r["layer"], r["units"], f"{r['low']:.4g}", f"{r['high']:.4g}", f"{r['mean']:.4g}",
             f"{r['std']:.4g}", r["constant"]) for r in profile.layer_summary()]
    print(table(("layer", "units", "min", "max", "mean of means", "mean std", "constant"), rows))
    if out is not None:
        profile.save(out)
        print(f"\nwrote {out} (weights sha256 {profile.model_hash[:12]}...)")
    return 0


def _cmd_measure(args) -> int:
    opts, profile = _prepare(args)
    out = declared(outputs(args), "--out")
    if args.plot:
        _pyplot()  # fail now, not after the work, when matplotlib is missing
    device = device_from(args.device)
    prep, x, _, split = _load(args)
    model = prep.to(device).module
    threads = apply_threads(args.threads, [model], device)
    report = measure_coverage(model, x, **opts, profile=profile, layers=_layers(args),
                              transform=args.transform, batch_size=args.batch_size,
                              progress=not args.no_progress)
    text = _header(prep, split, len(x), report.layout, report.transform, device, profile)
    text += "".join(f"\n{t.title}\n{t.text()}\n" for t in layer_tables(report))
    text += f"\nmeasured in {report.seconds:.2f} s\n"
    print(text, end="")

    def page(folder):
        return measure_page(report, folder, model_name=prep.name, data_name=split, device=str(device),
                            provenance=provenance(device, argv=args.argv),
                            config={k: v for k, v in vars(args).items() if k not in ("func", "argv")})

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
        _write("coverage measure", out, args, device, threads, prep, split, opts, report.to_dict())
    return 0


def _cmd_rank(args) -> int:
    opts, profile = _prepare(args)
    out = declared(outputs(args), "--out")
    device = device_from(args.device)
    prep, x, y, split = _load(args)
    model = prep.to(device).module
    threads = apply_threads(args.threads, [model], device)
    report = rank_inputs(model, x, y, **opts, profile=profile, layers=_layers(args),
                         transform=args.transform, batch_size=args.batch_size, progress=not args.no_progress)
    text = _header(prep, split, len(x), report.layout, report.transform, device, profile)
    nf = int(report.failing.sum())
    text += f"{nf} of {report.num_inputs} inputs misclassified; a random order has APFD 0.5 on average\n\n"

    def f3(v):
        return "-" if v is None else f"{v:.3f}"

    rows = [(r.criterion, r.greedy, _cell(r.covered, r.total), f3(r.apfd), f3(r.apfd_total),
             " ".join(map(str, r.order[:5].tolist())) + " ...") for r in report.rankings]
    text += table(("criterion", "greedy", "covered", "APFD additional", "APFD total", "first inputs"), rows)
    text += f"\n\nranked in {report.seconds:.2f} s\n"
    print(text, end="")
    if out is not None:
        _write("coverage rank", out, args, device, threads, prep, split, opts, report.to_dict())
    return 0
