"""The ``deepfault`` command line: a thin layer that parses, calls one function, prints."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import DeepFaultError

__all__ = ["main", "build_parser"]

log = logging.getLogger("deepfault")


def _positive_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _classes(text: str) -> tuple[int, ...] | None:
    if text.strip().lower() == "all":
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a class index, a comma-separated list, or 'all'; got {text!r}"
        ) from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one worth showing and the help does not say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        flag = isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        if flag or action.default is None or action.default is argparse.SUPPRESS or "default" in text:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def _add_data_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", metavar="DIR", default=None,
                   help="data root (default: $DEEPFAULT_DATA, else the user cache directory)")


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default=None, metavar="NAME",
                   help="zoo architecture of a plain state_dict file (see 'deepfault train --help')")
    p.add_argument("--weights", default=None, metavar="FILE",
                   help="Keras weights HDF5 when --model is an architecture JSON")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow loading a pickled whole nn.Module (unpickling can run code: "
                   "only for files you trust)")


def build_parser() -> argparse.ArgumentParser:
    from ..localize.measures import list_measures
    from ..localize.selection import BASELINES

    parser = argparse.ArgumentParser(
        prog="deepfault",
        description="Find the neurons most responsible for a classifier's mistakes and "
        "synthesize inputs that expose them (DeepFault, FASE 2019).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run",
        help="localise suspicious neurons and synthesize inputs from them",
        description="Build each class's hit spectrum on the test split, select the k most "
        "suspicious neurons, synthesize new inputs from correctly classified ones and "
        "evaluate them. With no --model and no --dataset, uses the embedded default "
        "(scikit-learn's 8x8 digits and a small MLP trained on them, cached).",
        formatter_class=_HelpFormatter,
    )
    run.add_argument("--model", metavar="FILE", default=None,
                     help="model file: deepfault .pt, state_dict (with --arch), TorchScript, "
                     "Keras .h5/.json or stem, .onnx (default: the embedded digits model)")
    run.add_argument("--dataset", metavar="NAME", default=None,
                     help="data set name (default: the model file's data set, else 'digits')")
    _add_data_dir(run)
    run.add_argument("--class", dest="classes", metavar="C", type=_classes, default=None,
                     help="class to analyse: an index, a comma-separated list, or 'all' "
                     "(default: all)")
    approaches = list_measures() + list(BASELINES)
    run.add_argument("--approach", "--measure", dest="approach", metavar="NAME",
                     default="tarantula",
                     help="suspiciousness measure or baseline; see 'deepfault measures' "
                     f"({', '.join(approaches)})")
    run.add_argument("-k", "--suspicious-num", dest="k", type=_positive_int, default=10,
                     help="number of suspicious neurons")
    run.add_argument("--step-size", dest="step", type=_float, default=1.0,
                     help="multiplier of the gradient in synthesis")
    run.add_argument("--distance", type=_float, default=0.1,
                     help="largest change of any input element (L_inf bound), in the data "
                     "set's units")
    run.add_argument("--seed", type=_positive_int, default=0, help="seed of every random choice")
    run.add_argument("--star", type=_float, default=3.0, help="exponent of D* (dstar), >= 1")
    run.add_argument("--repeat", type=_positive_int, default=1,
                     help="repetitions (new neurons for random/uniform, new inputs with --inputs)")
    run.add_argument("--layers", type=_names, default=None, metavar="NAMES",
                     help="comma-separated module names to analyse (default: every "
                     "Linear/Conv layer except the logits layer)")
    run.add_argument("--threshold", type=_float, default=0.0,
                     help="a neuron is active when its value is greater than this")
    run.add_argument("--iterations", type=_positive_int, default=1,
                     help="synthesis steps per input (the paper takes one)")
    run.add_argument("--raw-gradients", dest="normalize", action="store_false",
                     help="average raw gradients instead of RMS-normalised ones")
    run.add_argument("--inputs", dest="num_inputs", type=_positive_int, default=None,
                     metavar="N", help="correctly classified inputs per class to synthesize "
                     "from, drawn without replacement (default: all)")
    run.add_argument("--k-prime", dest="k_primes", type=lambda s: tuple(int(v) for v in s.split(",")),
                     default=None, metavar="K1,K2",
                     help="report the share of the top k' neurons that increased "
                     "(default: 2k,5k)")
    run.add_argument("--device", default="auto",
                     help="'cpu', 'cuda', 'cuda:N', or 'auto' (CUDA when available)")
    run.add_argument("--batch-size", type=_positive_int, default=1024, help="inputs per pass")
    run.add_argument("--out", metavar="FILE", default="deepfault-result.json",
                     help="JSON result file, written atomically; '-' writes none")
    run.add_argument("--log", metavar="FILE", default=None,
                     help="also append the printed summary to this file")
    _add_model_options(run)
    run.set_defaults(func=_cmd_run)

    from ..data import list_datasets
    from ..models import list_architectures

    train = sub.add_parser(
        "train", help="train a zoo architecture on a data set and write a model file",
        description="Train with the DeepFault prototype's recipe by default (Adam, batch 32, "
        "10 epochs, 1/6 of the training set held out for validation), with the learning rate "
        "decayed on a cosine unless --schedule constant. Ctrl-C stops after "
        "keeping the last completed epoch, which is then saved.",
        formatter_class=_HelpFormatter,
    )
    train.add_argument("--arch", required=True, choices=list_architectures(), metavar="NAME",
                       help=f"architecture ({', '.join(list_architectures())})")
    train.add_argument("--dataset", required=True, metavar="NAME",
                       help=f"data set ({', '.join(list_datasets())}, or a .npz file)")
    _add_data_dir(train)
    train.add_argument("--epochs", type=_positive_int, default=10, help="passes over the training set")
    train.add_argument("--batch-size", type=_positive_int, default=32, help="inputs per step")
    train.add_argument("--lr", type=_float, default=1e-3, help="Adam learning rate")
    train.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                       help="learning-rate schedule; 'constant' is exactly the prototype's recipe")
    train.add_argument("--val-fraction", type=_float, default=1 / 6,
                       help="share of the training set held out for validation (default: 1/6)")
    train.add_argument("--seed", type=_positive_int, default=0,
                       help="seed of the weights, the split and the shuffling")
    train.add_argument("--scale01", action="store_true",
                       help="scale 0-255 data sets (cifar10, svhn) to [0, 1]")
    train.add_argument("--device", default="auto", help="'cpu', 'cuda', 'cuda:N' or 'auto'")
    train.add_argument("--out", metavar="FILE", default=None,
                       help="model file to write (default: ARCH-DATASET.pt)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_cmd_train)

    data = sub.add_parser("data", help="list or download data sets")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION")
    data_sub.required = True
    dlist = data_sub.add_parser("list", help="each data set and whether its files are here and intact")
    _add_data_dir(dlist)
    dlist.set_defaults(func=_cmd_data_list)
    dl = data_sub.add_parser("download", help="fetch a data set's official files and verify them")
    dl.add_argument("name", help="data set name")
    _add_data_dir(dl)
    dl.add_argument("--force", action="store_true", help="fetch again even when verified")
    dl.set_defaults(func=_cmd_data_download)

    insp = sub.add_parser("inspect", help="show a model's layers, output shapes and neuron counts",
                          formatter_class=_HelpFormatter)
    insp.add_argument("model", metavar="MODEL", help="model file (any format 'run --model' takes)")
    insp.add_argument("--input-shape", default=None, metavar="D1,D2,...",
                      help="per-input shape when the file does not record it (e.g. 1,28,28)")
    insp.add_argument("--dataset", default=None, metavar="NAME",
                      help="take the input shape from this data set")
    _add_data_dir(insp)
    _add_model_options(insp)
    insp.set_defaults(func=_cmd_inspect)

    from ..experiment.grid import PRESETS

    exp = sub.add_parser(
        "experiment", help="run (or resume) an experiment grid into a results store",
        description="Run models x classes x approaches x k x repetitions with the paper's "
        "protocol (spec section 6) and write every cell to an SQLite store as soon as it is "
        "done. Rerunning the same command skips finished cells, also after a crash or kill.",
        formatter_class=_HelpFormatter,
    )
    source = exp.add_mutually_exclusive_group(required=True)
    source.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                        help=f"built-in grid ({', '.join(sorted(PRESETS))})")
    source.add_argument("--config", metavar="FILE", help="TOML experiment file")
    exp.add_argument("--store", metavar="FILE", default=None,
                     help="SQLite results store (default: results/NAME.sqlite)")
    _add_data_dir(exp)
    exp.add_argument("--models-dir", metavar="DIR", default=None,
                     help="where zoo models are kept and trained when missing (default: next to the store)")
    exp.add_argument("--workers", type=_positive_int, default=1, help="local worker processes")
    exp.add_argument("--seed", type=_positive_int, default=None, help="override the grid's seed")
    exp.add_argument("--no-progress", action="store_true", help="no progress bar")
    exp.set_defaults(func=_cmd_experiment)

    rep = sub.add_parser("report", help="tables, figures and an HTML report from a results store",
                         formatter_class=_HelpFormatter)
    rep.add_argument("store", metavar="STORE", help="SQLite results store")
    rep.add_argument("--out", metavar="DIR", default=None, help="output folder (default: STORE-report/)")
    rep.add_argument("--experiment", metavar="HASH", default=None,
                     help="configuration hash (default: the most recent experiment in the store)")
    rep.set_defaults(func=_cmd_report)

    measures = sub.add_parser("measures", help="list the suspiciousness measures and baselines")
    measures.set_defaults(func=_cmd_measures)
    return parser


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeepFaultError(f"unknown device {name!r}; use cpu, cuda, cuda:N or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeepFaultError(f"device {name!r} asked for, but CUDA is not available; use --device cpu")
    return device


def _table(headers: Sequence[str], rows: Sequence[Sequence], indent: str = "  ") -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.ljust(w) if i == 0 or not _numeric(c) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append(indent + "  ".join(parts).rstrip())
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return text in ("inf", "-", "n/a")


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == float("inf"):
            return "inf"
        return f"{value:.{digits}f}"
    return str(value)


def _open_model(args):
    from ..models import open_model

    return open_model(args.model, weights=args.weights, arch=args.arch,
                      trust_pickle=args.trust_pickle)


def _load_inputs(args):
    """The model file and the data set a run uses, the data laid out as the model takes it."""
    from ..data import load_dataset
    from ..models.default import default_model

    if args.model is None:
        name = args.dataset or "digits"
        if name != "digits":
            raise DeepFaultError(
                f"--dataset {name} needs a model trained on it; give one with --model FILE"
            )
        data = load_dataset("digits", data_dir=args.data_dir)
        return default_model(data), data
    mf = _open_model(args)
    name = args.dataset or mf.dataset
    if name is None:
        raise DeepFaultError(f"model file {args.model!r} does not name its data set; add --dataset NAME")
    if mf.dataset and args.dataset and args.dataset != mf.dataset:
        log.warning("the model was trained on %s, not %s; failures may come from the data shift",
                    mf.dataset, args.dataset)
    data = load_dataset(name, data_dir=args.data_dir)
    if mf.bounds is not None and tuple(mf.bounds) != data.bounds:
        if tuple(mf.bounds) == (0.0, 1.0) and data.bounds == (0.0, 255.0):
            data = load_dataset(name, data_dir=args.data_dir, scale01=True)
        else:
            raise DeepFaultError(
                f"the model was trained on inputs in {tuple(mf.bounds)} but {name!r} gives "
                f"{data.bounds}; use the data set the model was trained on"
            )
    shape = mf.meta.get("input_shape")
    if shape:
        data = data.for_input_shape(shape)
    return mf, data


def _summary(result, mf, data, device) -> str:
    cfg = result.config
    acc = mf.meta.get("test_accuracy", result.test_accuracy)
    out = io.StringIO()
    w = out.write
    w(f"model {mf.arch} (test accuracy {acc:.1%}) · data {data.name} "
      f"({len(data.y_test)} test inputs, bounds {data.bounds[0]:g}..{data.bounds[1]:g}) · {device}\n")
    w(f"approach {cfg.approach}, k={cfg.k}, step {cfg.step:g}, distance {cfg.distance:g} (L_inf), "
      f"{'normalised' if cfg.normalize else 'raw'} gradients, {cfg.iterations} iteration(s), "
      f"seed {cfg.seed}\n")
    for cr in result.classes:
        sp = cr.spectrum
        name = data.class_names[cr.target_class]
        label = f"{cr.target_class}" + (f" ({name})" if name != str(cr.target_class) else "")
        w(f"\nclass {label}: {sp.num_inputs} inputs, "
          f"{sp.num_passed} pass, {sp.num_failed} fail · spectrum {sp.seconds * 1e3:.1f} ms\n")
        if cr.no_failures:
            w("  no failing input: every score is 0; neurons follow the tie-breaking order\n")
        for rep in cr.repetitions:
            if cfg.repeat > 1:
                w(f"  repetition {rep.index}\n")
            rows = [(i + 1, n.layer, n.unit, _fmt(n.score), n.a_s, n.a_f, n.n_s, n.n_f)
                    for i, n in enumerate(rep.selection.neurons)]
            w(_table(("rank", "layer", "unit", "score", "as", "af", "ns", "nf"), rows) + "\n")
    w("\nevaluation of synthesized inputs (labels are the originals'; means per input)\n")
    rows = []
    for cr in result.classes:
        for rep in cr.repetitions:
            s = rep.evaluation.summary()
            n = s["inputs"]
            ms = rep.synthesis_seconds / n * 1e3 if n else None
            inc_at = " ".join(f"{k}:{_fmt(v, 2)}" for k, v in s["increased_at"].items())
            label = str(cr.target_class) + (f"/{rep.index}" if cfg.repeat > 1 else "")
            rows.append((label, n, _fmt(s["loss"]), _fmt(s["accuracy"]), _fmt(s["changed"]),
                         _fmt(s["l1"], 2), _fmt(s["l2"], 3), _fmt(s["linf"], 3),
                         _fmt(s["increased"], 2), inc_at or "-", _fmt(ms, 3)))
    w(_table(("class", "inputs", "loss", "accuracy", "changed", "L1", "L2", "Linf",
              "increased", "increased@k'", "ms/input"), rows) + "\n")
    evs = [rep.evaluation for cr in result.classes for rep in cr.repetitions]
    total = sum(e.num_inputs for e in evs)
    if total:
        import numpy as np

        acc_all = float(np.concatenate([e.correct for e in evs]).mean())
        loss_all = float(np.concatenate([e.loss for e in evs]).mean())
        w(f"\nall classes: {total} synthesized inputs, accuracy {acc_all:.3f}, loss {loss_all:.3f}\n")
    none = [str(cr.target_class) for cr in result.classes if cr.no_failures]
    if none:
        w(f"classes with no failing test input: {', '.join(none)}\n")
    return out.getvalue()


def _cmd_run(args) -> int:
    import torch

    from .._io import check_writable, write_json
    from ..localize.protocol import RunConfig, run_deepfault
    from ..provenance import provenance

    out = None if args.out == "-" else check_writable(args.out)
    if args.log:
        check_writable(args.log)
    config = RunConfig(
        approach=args.approach, k=args.k, classes=args.classes, step=args.step,
        distance=args.distance, star=args.star, seed=args.seed, repeat=args.repeat,
        layers=args.layers, threshold=args.threshold, iterations=args.iterations,
        normalize=args.normalize, num_inputs=args.num_inputs, k_primes=args.k_primes,
        batch_size=args.batch_size,
    )
    device = _device(args.device)
    mf, data = _load_inputs(args)
    config.validate(data.bounds)
    model = mf.model.to(device)
    with torch.random.fork_rng(devices=[]):
        result = run_deepfault(model, data, config, output_kind=mf.output_kind)
    text = _summary(result, mf, data, device)
    print(text, end="")
    if out is not None:
        payload = {
            "tool": "deepfault run",
            "provenance": provenance(device, argv=args.argv),
            "model": {"file": args.model, "arch": mf.arch, "arch_kwargs": mf.arch_kwargs,
                      "layout": data.meta.get("layout_to"),
                      "meta": {k: v for k, v in mf.meta.items() if k != "recipe"},
                      "output_kind": mf.output_kind},
            "dataset": {"name": data.name, "data_dir": args.data_dir, "bounds": list(data.bounds),
                        "num_test": len(data.y_test), "class_names": list(data.class_names)},
            **result.to_dict(),
        }
        write_json(out, payload)
        print(f"\nwrote {out}")
    if args.log:
        with open(args.log, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


def _cmd_train(args) -> int:
    from .._io import check_writable
    from ..data import load_dataset
    from ..models import save_model
    from ..models.train import TrainConfig, train_model

    out = check_writable(args.out or f"{args.arch}-{Path(args.dataset).stem}.pt")
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                         val_fraction=args.val_fraction, seed=args.seed, schedule=args.schedule)
    config.validate()
    device = _device(args.device)
    kwargs = {"scale01": True} if args.scale01 else {}
    data = load_dataset(args.dataset, data_dir=args.data_dir, **kwargs)
    print(f"training {args.arch} on {data.name}: {len(data.y_train)} training inputs, "
          f"{len(data.y_test)} test inputs, {device}")
    mf, result = train_model(args.arch, data, config, device=device,
                             arch_kwargs={"num_classes": data.num_classes},
                             progress=not args.no_progress)
    if args.dataset.endswith(".npz"):  # so that 'run --model' finds the same file again
        mf.dataset = str(Path(args.dataset).resolve())
    if result.epochs_completed == 0:
        print("interrupted before the first epoch finished: nothing written", file=sys.stderr)
        return 130
    save_model(out, mf)
    if result.interrupted:
        print(f"interrupted: kept the weights of epoch {result.epochs_completed}")
    val = "-" if result.val_accuracy is None else f"{result.val_accuracy:.4f}"
    print(f"epochs {result.epochs_completed}, {result.seconds:.1f} s; train accuracy "
          f"{result.train_accuracy:.4f}, validation {val}, test {mf.meta['test_accuracy']:.4f}")
    print(f"wrote {out}")
    return 130 if result.interrupted else 0


def _cmd_data_list(args) -> int:
    from ..data import _REGISTRY, default_data_dir, list_datasets
    from ..data.download import SOURCES, dataset_status

    root = default_data_dir(args.data_dir)
    print(f"data root: {root}")
    rows = []
    for name in list_datasets():
        if name in SOURCES:
            status = dataset_status(name, root)
            present = sum(st.present for st in status)
            verified = sum(st.verified for st in status)
            if verified == len(status):
                state = "verified"
            elif present:
                state = f"incomplete: {present}/{len(status)} files, {verified} verified"
            else:
                state = f"missing: deepfault data download {name}"
        else:
            state = "bundled"
        rows.append((name, state, _REGISTRY[name].description))
    print(_table(("name", "status", "what"), rows, indent=""))
    return 0


def _cmd_data_download(args) -> int:
    from ..data import default_data_dir
    from ..data.download import download

    paths = download(args.name, default_data_dir(args.data_dir), force=args.force)
    for path in paths:
        print(f"ok {path}")
    return 0


def _cmd_inspect(args) -> int:
    from ..models.summary import describe_model

    mf = _open_model(args)
    if args.input_shape:
        try:
            shape = tuple(int(v) for v in args.input_shape.split(","))
        except ValueError:
            raise DeepFaultError(
                f"--input-shape must be comma-separated integers, e.g. 1,28,28; got {args.input_shape!r}"
            ) from None
    elif mf.meta.get("input_shape") and None not in mf.meta["input_shape"]:
        shape = tuple(mf.meta["input_shape"])
    elif args.dataset or mf.dataset:
        from ..data import load_dataset

        shape = load_dataset(args.dataset or mf.dataset, data_dir=args.data_dir).input_shape
    else:
        raise DeepFaultError(
            "the model file does not record its input shape; give --input-shape 1,28,28 or --dataset NAME"
        )
    rows, out_shape = describe_model(mf.model, shape)
    total = sum(p.numel() for p in mf.model.parameters())
    print(f"model {args.model} ({mf.arch}); input shape per input {shape}; output {out_shape}, "
          f"{mf.output_kind}; {total:,} parameters")
    table = [(r.name, r.kind, "x".join(map(str, r.output_shape)) if r.output_shape else "-",
              r.units if r.units is not None else "-", f"{r.parameters:,}",
              "yes" if r.default_neuron_layer else "")
             for r in rows]
    print(_table(("layer", "type", "output", "units", "params", "analysed by default"), table))
    neurons = sum(r.units for r in rows if r.default_neuron_layer)
    print(f"{neurons} neurons in the default layers; name others with --layers")
    return 0


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


def _cmd_measures(args) -> int:
    from ..localize.measures import get_measure, list_measures

    rows = [(name, get_measure(name).formula, get_measure(name).reference) for name in list_measures()]
    rows.append(("random", "k neurons none of tarantula/ochiai/dstar chose, spread over layers "
                 "like theirs (the paper's baseline)", "Eniser et al., FASE 2019"))
    rows.append(("uniform", "k neurons drawn uniformly from all analysed neurons", "-"))
    print("as/af: active on passing/failing inputs; ns/nf: not active on passing/failing inputs")
    print(_table(("name", "score", "reference"), rows, indent=""))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 success, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage, 0 on --help
        return int(exc.code or 0)
    args.argv = ["deepfault", *argv]
    logging.basicConfig(level=logging.INFO, format="deepfault: %(message)s")
    try:
        return args.func(args)
    except DeepFaultError as err:
        print(f"deepfault: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("deepfault: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        with contextlib.suppress(Exception):
            sys.stdout = open(Path("/dev/null"), "w")  # noqa: SIM115
        return 0
