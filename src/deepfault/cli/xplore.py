"""``deepfault xplore``: inputs on which two or more models disagree (DeepXplore)."""

from __future__ import annotations

import argparse
import io
import warnings
from pathlib import Path

from ..errors import DeepFaultError
from ..xplore.config import PUBLISHED, XploreConfig
from ._common import (
    HelpFormatter,
    add_data_dir,
    add_device,
    add_no_progress,
    add_report_option,
    add_seed,
    add_threads,
    device_from,
    fmt,
    names,
    number,
    positive_int,
    resolve_threads,
    table,
    write_run_report,
)


def _occlusion(text: str) -> tuple[int, int, int, int]:
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 4 or min(parts) < 0:
        raise argparse.ArgumentTypeError(f"expected x,y,h,w (four integers >= 0); got {text!r}")
    return parts  # type: ignore[return-value]


def _target(text: str) -> int | None:
    if text == "random":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a model index (0, 1, ...) or 'random'; got {text!r}")
    return value


def _seed_indices(text: str) -> tuple[int, ...]:
    """``--seed-indices``: a comma list (``3,17,42``) or a file of integers (whitespace,
    commas or newlines between them; ``#`` starts a comment; or a ``.npy`` array).
    """
    from pathlib import Path

    path = Path(text)
    if path.is_file():
        if path.suffix == ".npy":
            import numpy as np

            try:
                values = np.load(path, allow_pickle=False).ravel().tolist()
            except (OSError, ValueError) as err:
                raise argparse.ArgumentTypeError(f"cannot read {text!r} as a .npy array: {err}") from None
            parts = [str(v) for v in values]
        else:
            try:
                body = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise argparse.ArgumentTypeError(f"cannot read {text!r}: {err}") from None
            lines = (line.split("#", 1)[0] for line in body.splitlines())
            parts = " ".join(lines).replace(",", " ").split()
        where = f"file {text!r}"
    elif set(text) <= set("0123456789, "):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        where = f"{text!r}"
    else:
        raise argparse.ArgumentTypeError(
            f"expected a file of seed indices or a comma list such as 3,17,42; got {text!r} "
            "(no such file, and not a list of integers)")
    out = []
    for part in parts:
        if not part.isdigit():
            raise argparse.ArgumentTypeError(f"seed indices must be integers >= 0; {where} holds {part!r}")
        if int(part) >= 2**62:  # no data set is that large; numpy cannot even index with it
            shown = part[:20] + ("..." if len(part) > 20 else "")
            raise argparse.ArgumentTypeError(
                f"seed indices must be test-split indices; {where} holds {shown}, beyond any data set")
        out.append(int(part))
    if not out:
        raise argparse.ArgumentTypeError(f"no seed index in {where}")
    return tuple(out)


#: Marks an option left unset, so that --compat or the library's default fills it.
_UNSET = argparse.SUPPRESS
_DEFAULT = XploreConfig()
#: Options that --compat sets unless given.
_TUNABLE = ("lambda1", "lambda2", "step", "iterations", "threshold", "transform", "target", "neurons",
            "objective", "layers")


def _config(args) -> XploreConfig:
    """The run's configuration: library defaults, then --compat's settings, then what was given."""
    values: dict = dict(PUBLISHED) if args.compat else {}
    values.update({name: getattr(args, name) for name in _TUNABLE if hasattr(args, name)})
    if args.replace:
        values["replace"] = True
    if args.clip is not None:
        values["clip"] = args.clip
    return XploreConfig(
        seeds=args.seeds, seed=args.seed, seed_indices=args.seed_indices, occlusion=args.occlusion,
        blackout_size=args.blackout_size, batch_size=args.inputs_per_step, **values,
    )


def _per_model(text: str) -> tuple[str | None, ...]:
    """A comma-separated list aligned with --model; '-' or an empty entry skips a model."""
    return tuple(p.strip() if p.strip() not in ("", "-") else None for p in text.split(","))


def add_parser(sub) -> None:
    """Add ``deepfault xplore`` to ``sub``."""
    from ..xplore.config import LAYER_CHOICES, NEURON_CHOICES, OBJECTIVES
    from ..xplore.constraints import list_constraints

    p = sub.add_parser(
        "xplore",
        help="find inputs on which two or more models disagree (DeepXplore)",
        description="Differential testing by joint gradient ascent (Pei et al., SOSP 2017): from "
        "seed test inputs on which all models agree, push one target model away from the common "
        "class while the others keep it and each model's neuron coverage rises, until the models "
        "disagree. All seeds advance together in one batch. Prints the counts, coverage and times; "
        "writes a JSON result, the inputs (.npz) and an image grid (.png).",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", dest="models", required=True, type=names, action="extend", metavar="FILE",
                   help="a model, repeatable (--model a.h5 --model b.h5), each value also a comma list; two "
                   "or more in all: files in any format 'deepfault run' takes, or zoo names (NAME resolves "
                   "to NAME-DATASET.pt in --models-dir, as 'deepfault train' names it)")
    p.add_argument("--dataset", metavar="NAME", default=None,
                   help="data set of the seeds (default: the one the first model file names)")
    add_data_dir(p)
    p.add_argument("--models-dir", metavar="DIR", default=".", help="where zoo names are looked up")
    p.add_argument("--arch", type=_per_model, default=None, metavar="A1,A2,...",
                   help="zoo architecture per model, for plain state_dicts and Keras save_weights .h5 "
                   "files ('-' skips a model; one name applies to all)")
    p.add_argument("--weights", type=_per_model, default=None, metavar="W1,W2,...",
                   help="Keras weights per model: with --arch (or a zoo name in --model) a save_weights "
                   ".h5 file loaded into the zoo architecture, else the weights of a Keras JSON model")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow loading pickled whole nn.Modules (only for files you trust)")
    p.add_argument("--num-seeds", dest="seeds", type=positive_int, default=2000, metavar="N",
                   help="seed inputs drawn")
    p.add_argument("--seed-indices", type=_seed_indices, default=None, metavar="FILE|I,J,...",
                   help="explicit seeds: test-set indices as a comma list or a file of integers (text or "
                   ".npy), in place of --num-seeds drawn ones")
    add_seed(p, "seed of every random draw")
    p.add_argument("--replace", action="store_true",
                   help="draw seeds with replacement (as DeepXplore's code did); default without")
    p.add_argument("--compat", "--paper", dest="compat", action="store_true",
                   help="DeepXplore's published MNIST settings: lambda1 1, lambda2 0.1, step 10, 20 "
                   "iterations, t 0, light, --target 0, --neurons per-seed, --layers deepxplore, "
                   "--replace, --no-clip (options given as well take precedence)")
    p.add_argument("--lambda1", type=number, default=_UNSET, help="weight of the target model's score "
                   "(default: 1)")
    p.add_argument("--lambda2", type=number, default=_UNSET, help="weight of the neuron-coverage term "
                   "(default: 0.1)")
    p.add_argument("--step-size", dest="step", type=number, default=_UNSET,
                   help=f"step size s, in the data set's units (default: {_DEFAULT.step:g}; the paper's 10 "
                   "turns most MNIST seeds into flat squares)")
    p.add_argument("--iterations", type=positive_int, default=_UNSET,
                   help=f"largest number of steps per seed (default: {_DEFAULT.iterations})")
    p.add_argument("--threshold", type=number, default=_UNSET,
                   help="neuron-coverage threshold t on layer-minmax values (default: 0)")
    p.add_argument("--constraint", dest="transform", choices=list_constraints(), default=_UNSET,
                   help=f"domain constraint on the gradient (default: {_DEFAULT.transform})")
    p.add_argument("--clip", action=argparse.BooleanOptionalAction, default=None,
                   help="clip every step to the data's bounds (default: clip; --compat: --no-clip, as the "
                   "published code, whose inputs then leave the valid range)")
    p.add_argument("--occlusion", type=_occlusion, default=(0, 0, 10, 10), metavar="X,Y,H,W",
                   help="rectangle of --constraint occl: first column, first row, height, width")
    p.add_argument("--blackout-size", type=positive_int, default=6, metavar="M",
                   help="side of the patches of --constraint blackout")
    p.add_argument("--target", type=_target, default=_UNSET, metavar="J|random",
                   help="index of the model pushed away from the common class (default: random per seed; "
                   "--compat: 0)")
    p.add_argument("--neurons", choices=NEURON_CHOICES, default=_UNSET,
                   help="draw each model's coverage neuron at every step (the paper; the default) or once "
                   "per seed (DeepXplore's code)")
    p.add_argument("--objective", choices=OBJECTIVES, default=_UNSET,
                   help="F_k(x)[c] is the logit (DeepXplore's MNIST code; the default) or the probability "
                   "(the paper)")
    p.add_argument("--layers", choices=LAYER_CHOICES, default=_UNSET,
                   help="neuron layers of coverage and objective: DeepXplore's (every layer but input and "
                   "flatten, activated, poolings, logits and softmax; the default) or every Linear/Conv "
                   "but the logits layer")
    p.add_argument("--inputs-per-step", dest="inputs_per_step", type=positive_int, default=None, metavar="B",
                   help="seeds advanced together, group after group (default: all)")
    p.add_argument("--batch-size", dest="chunk_size", type=positive_int, default=None, metavar="C",
                   help="inputs per forward/backward pass, a speed knob only (default: 256 on the CPU, "
                   "all on a GPU)")
    add_device(p)
    add_threads(p)
    p.add_argument("--out", metavar="FILE", default="xplore-result.json",
                   help="JSON result; the inputs go to the same name with .npz and the image grid with "
                   ".png; '-' writes none")
    p.add_argument("--grid", type=positive_int, default=8, metavar="N", help="inputs in the image grid")
    add_no_progress(p)
    add_report_option(p)
    p.set_defaults(func=_cmd_xplore)


def _aligned(values, count: int, option: str) -> list:
    if values is None:
        return [None] * count
    if len(values) == 1:
        return list(values) * count
    if len(values) != count:
        raise DeepFaultError(f"{option} gives {len(values)} entries for {count} models; give one per model "
                             "(or one for all)")
    return list(values)


def open_xplore_model(entry: str, *, arch: str | None, weights: str | None, models_dir: str | Path,
                      dataset: str | None, trust_pickle: bool, input_shape=None):
    """One model of ``--model`` opened (not prepared): a file, a zoo name, or a Keras weights
    file into a zoo architecture.
    """
    from ..models import list_architectures, open_model
    from ..models.keras_weights import is_weights_only, open_keras_weights

    path = Path(entry)
    zoo = entry in list_architectures() and not path.exists()
    h5 = next((f for f in (weights, None if zoo else entry) if f and is_weights_only(f)), None)
    if h5 is not None and (arch or zoo):
        return open_keras_weights(h5, arch=arch or entry, input_shape=input_shape, dataset=dataset)
    if zoo:
        if dataset is None:
            raise DeepFaultError(f"zoo name {entry!r} needs --dataset to find its trained file")
        path = Path(models_dir) / f"{entry}-{dataset}.pt"
        if not path.is_file():
            raise DeepFaultError(
                f"no trained {entry} for {dataset} at {str(path)!r}; train it with 'deepfault train --arch "
                f"{entry} --dataset {dataset} --out {path}' or give the model file"
            )
    if h5 is not None:
        raise DeepFaultError(f"{h5!r} holds Keras weights without an architecture; name it with --arch "
                             "(lenet1, lenet4, lenet5 for DeepXplore's MNIST models)")
    return open_model(path, weights=weights, arch=arch, trust_pickle=trust_pickle)


def load_xplore_inputs(args):
    """The models, prepared (:func:`~deepfault.models.prepare.prepare_model`) with one data set,
    and the data.
    """
    from ..data import load_dataset
    from ..models.prepare import model_label, prepare_model

    entries = list(args.models)
    if len(entries) < 2:
        raise DeepFaultError(f"DeepXplore compares two or more models; got {len(entries)}: "
                             "give at least two: --model A --model B (or --model A,B)")
    archs = _aligned(args.arch, len(entries), "--arch")
    weights = _aligned(args.weights, len(entries), "--weights")
    dataset = args.dataset
    data = load_dataset(dataset, data_dir=args.data_dir) if dataset else None
    prepared = []
    for entry, arch, w in zip(entries, archs, weights, strict=True):
        mf = open_xplore_model(entry, arch=arch, weights=w, models_dir=args.models_dir, dataset=dataset,
                               trust_pickle=args.trust_pickle,
                               input_shape=data.input_shape if data is not None else None)
        if data is None:
            if mf.dataset is None:
                raise DeepFaultError(f"model {entry!r} does not name its data set; add --dataset NAME")
            dataset = mf.dataset
            data = load_dataset(dataset, data_dir=args.data_dir)
        label = model_label(entry, mf)
        if label in [p.name for p in prepared]:
            label = f"{label}#{len(prepared)}"
        prepared.append(prepare_model(mf, data, data_dir=args.data_dir, name=label))
    bounds = {tuple(p.data.bounds) for p in prepared}
    if len(bounds) > 1:
        raise DeepFaultError(f"the models take inputs in different ranges ({sorted(bounds)}); DeepXplore "
                             "feeds the same inputs to every model")
    return prepared, prepared[0].data


def _summary(result, labels, data, device) -> str:
    out = io.StringIO()
    w = out.write
    cfg = result.config
    con = result.config.constraint().to_dict()
    constraint = " ".join([con.pop("name"), *(f"{k}={v}" for k, v in con.items())])
    w(f"models {', '.join(f'{n} ({m} neurons)' for n, m in zip(labels, result.num_neurons, strict=True))}\n")
    picked = "given indices" if cfg.seed_indices is not None else f"seed {cfg.seed}"
    w(f"data {data.name}: {result.num_seeds} seeds of {len(data.y_test)} test inputs ({picked}), "
      f"bounds {data.bounds[0]:g}..{data.bounds[1]:g} · {device}\n")
    w(f"lambda1 {cfg.lambda1:g}, lambda2 {cfg.lambda2:g}, step {cfg.step:g}, {cfg.iterations} iterations, "
      f"t {cfg.threshold:g}, constraint {constraint}, target "
      f"{'random' if cfg.target is None else labels[cfg.target]}, neurons {cfg.neurons}, "
      f"objective {cfg.objective}, layers {cfg.layers}, "
      f"{'clipped to the bounds' if cfg.clip else 'no clipping'}"
      f"{', seeds with replacement' if cfg.replace else ''}\n\n")
    rows = []
    for s in result.summaries():
        name = "all" if s.target is None else labels[s.target]
        rows.append((name, s.seeds, s.already_differ if s.target is None else "-", s.searched, s.found,
                     fmt(s.found_ratio), fmt(s.mean_iterations, 2), fmt(s.mean_l1, 1)))
    w(table(("target", "seeds", "already differ", "searched", "found", "found/searched", "mean steps",
             "mean L1"), rows) + "\n\n")
    cov = result.coverage
    rows = [(n, c.covered, c.total, fmt(100 * c.ratio, 1)) for n, c in zip(labels, cov, strict=True)]
    rows.append(("pooled", sum(c.covered for c in cov), sum(c.total for c in cov),
                 fmt(100 * result.pooled_coverage, 1)))
    w(f"neuron coverage (layer-minmax, t = {cfg.threshold:g})\n")
    w(table(("model", "covered", "neurons", "%"), rows) + "\n\n")
    w(f"time {result.seconds:.2f} s; {fmt(result.seconds_per_found, 4)} s per difference-inducing input; "
      f"first after {fmt(result.first_found_seconds, 3)} s\n")
    r = result.realism
    if r is not None and r.found:
        w(f"change: mean L1 {r.mean_l1:.1f}, mean L_inf {r.mean_linf:.3f} (data units); "
          f"{100 * r.saturated:.1f}% saturate")
        if r.still_differ_clipped is not None:
            w(f"; {100 * r.outside_bounds:.1f}% leave the bounds, {100 * r.still_differ_clipped:.1f}% still "
              "differ once clipped")
        w("\n")
        from ..xplore.results import saturation_warning

        message = saturation_warning(r, cfg)
        if message:
            w(f"warning: {message}\n")
    if result.num_found == 0:
        w(f"no difference-inducing input found in {result.num_seeds} seeds"
          + (" (the models agree on every input tried)\n" if result.num_already_differ == 0 else "\n"))
    return out.getvalue()


def _cmd_xplore(args) -> int:

    from .._io import check_writable, write_json
    from ..checks import check_finite_outputs
    from ..provenance import provenance
    from ..xplore import save_inputs, xplore

    out = None if args.out == "-" else check_writable(args.out)
    config = _config(args).validate(len(args.models))
    device = device_from(args.device)
    prepared, data = load_xplore_inputs(args)
    labels = [p.name for p in prepared]
    for p in prepared:
        p.to(device)
    check_finite_outputs([p.module for p in prepared], data.x_test, names=labels)  # NaN weights, 10 vs 5
    threads = resolve_threads(args.threads, [p.module for p in prepared], device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the saturation warning is printed below
        result = xplore(prepared, data.x_test, config=config, bounds=data.bounds,
                        progress=not args.no_progress, chunk_size=args.chunk_size, threads=threads)
    print(_summary(result, labels, data, device), end="")
    if args.report_dir is not None:
        from ..xplore.report import run_page

        where = {**provenance(device, argv=args.argv), "threads": threads}
        write_run_report(args, lambda folder: run_page(result, labels, data, folder, provenance=where))
    if out is None:
        return 0
    npz, png = out.with_suffix(".npz"), out.with_suffix(".png")
    payload = {
        "tool": "deepfault xplore",
        "provenance": {**provenance(device, argv=args.argv), "threads": threads},
        "models": [{"name": p.name, "file": entry, "arch": p.arch, "output_kind": p.output_kind,
                    "fingerprint": p.fingerprint, "layout": p.layout,
                    "meta": {k: v for k, v in p.model_file.meta.items() if k != "recipe"}}
                   for entry, p in zip(args.models, prepared, strict=True)],
        "dataset": {"name": data.name, "data_dir": args.data_dir, "bounds": list(data.bounds),
                    "num_test": len(data.y_test), "class_names": list(data.class_names)},
        "files": {"inputs": npz.name, "grid": png.name},
        **result.to_dict(),
    }
    save_inputs(npz, result)
    wrote = [str(out), str(npz)]
    try:
        from ..xplore.figures import image_grid

        image_grid(result.found, labels, png, rows=args.grid, bounds=data.bounds,
                   class_names=list(data.class_names),
                   title=f"DeepXplore: {result.num_found} difference-inducing inputs from "
                   f"{result.num_seeds} seeds")
        wrote.append(str(png))
    except ModuleNotFoundError as err:
        payload["files"]["grid"] = None
        print(f"no image grid: {err}")
    write_json(out, payload)
    print(f"wrote {', '.join(wrote)}")
    return 0
