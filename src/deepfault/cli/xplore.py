"""``deepfault xplore``: inputs on which two or more models disagree (DeepXplore)."""

from __future__ import annotations

import argparse
import warnings
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from .._io import atomic_paths
from ..checks import check_finite_outputs
from ..core.capture import layer_selection, neurons_line, selection_source
from ..errors import DeepFaultError
from ..experiment.results import dataset_record, model_record, result_document, write_result
from ..models.several import load_xplore_inputs
from ..provenance import provenance
from ..xplore import save_inputs, xplore
from ..xplore.config import LAYER_CHOICES, NEURON_CHOICES, OBJECTIVES, PUBLISHED, XploreConfig
from ..xplore.constraints import list_constraints
from ..xplore.features import feature_constraints, parse_indices
from ..xplore.figures import image_grid
from ..xplore.report import run_page, summary_text
from ..xplore.results import add_surprise
from . import _surprise
from ._common import (
    HelpFormatter,
    Output,
    add_data_dir,
    add_device,
    add_no_progress,
    add_report_option,
    add_seed,
    add_threads,
    batch_size_value,
    device_from,
    json_object,
    names,
    number,
    output_path,
    positive_int,
    sibling,
    thread_count,
    write_run_report,
)


def _occlusion(text: str) -> tuple[int, int, int, int]:
    try:
        parts = tuple(int(p) for p in text.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 4 or min(parts) < 0:
        raise argparse.ArgumentTypeError(f"expected x,y,h,w (four integers >= 0); got {text!r}")
    return parts[0], parts[1], parts[2], parts[3]


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
    path = Path(text)
    try:
        is_file = path.is_file()
    except OSError:  # a name too long for a file (a long comma list) or one that cannot be a file
        is_file = False
    if is_file:
        if path.suffix == ".npy":
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
    values.update({"step_size" if name == "step" else name: getattr(args, name) for name in _TUNABLE
                   if hasattr(args, name)})
    if args.replace:
        values["replace"] = True
    if args.clip is not None:
        values["clip"] = args.clip
    return XploreConfig(
        seeds=args.seeds, seed=args.seed, seed_indices=args.seed_indices, occlusion=args.occlusion,
        blackout_size=args.blackout_size, inputs_per_step=args.inputs_per_step, **values,
    )


def _indices(what: str):
    """``--fix-features`` / ``--fix-steps``: ``0,3,7``, ranges ``2-5``, or both."""
    def parse(text: str) -> tuple[int, ...]:
        try:
            return parse_indices(text, what)
        except DeepFaultError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    return parse


def _per_model(text: str) -> tuple[str | None, ...]:
    """A comma-separated list aligned with --model; '-' or an empty entry skips a model."""
    return tuple(p.strip() if p.strip() not in ("", "-") else None for p in text.split(","))


def add_parser(sub) -> None:
    """Add ``deepfault xplore`` to ``sub``."""
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
                   "to NAME-DATASET.pt in --models-dir, as 'deepfault train' names it; without that file "
                   "it is trained on first use, 10 epochs, and cached in the user cache directory)")
    p.add_argument("--dataset", metavar="NAME", default=None,
                   help="data set of the seeds (default: the one the first model file names)")
    add_data_dir(p)
    p.add_argument("--models-dir", metavar="DIR", default=".", help="where zoo names are looked up first")
    p.add_argument("--arch", type=_per_model, default=None, metavar="A1,A2,...",
                   help="architecture per model, for plain state_dicts, .safetensors and Keras save_weights "
                   ".h5 files: file.py:Class (runs that file), package.module:factory, torchvision:NAME, "
                   "timm:NAME or a zoo name ('-' skips a model; one applies to all)")
    p.add_argument("--arch-args", type=json_object, default=None, metavar="JSON",
                   help="keyword arguments of every model's --arch, a JSON object, e.g. "
                   "'{\"num_classes\": 10}'")
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
                   help=f"step size s, in the data set's units (default: {_DEFAULT.step_size:g}; the "
                   "paper's 10 turns most MNIST seeds into flat squares)")
    p.add_argument("--iterations", type=positive_int, default=_UNSET,
                   help=f"largest number of steps per seed (default: {_DEFAULT.iterations})")
    p.add_argument("--threshold", type=number, default=_UNSET,
                   help="neuron-coverage threshold t on layer-minmax values (default: 0)")
    p.add_argument("--constraint", dest="transform", choices=list_constraints(), default=_UNSET,
                   help=f"domain constraint on the gradient (default: {_DEFAULT.transform}; light, occl and "
                   "blackout change images only)")
    p.add_argument("--clip", action=argparse.BooleanOptionalAction, default=None,
                   help="clip every step to the data's bounds (default: clip; --compat: --no-clip, as the "
                   "published code, whose inputs then leave the valid range)")
    p.add_argument("--feature-bounds", default="auto", metavar="auto|observed|dataset|FILE",
                   help="range of each feature every step is clipped to: auto (the data set's per-feature "
                   "bounds if it has them, else for vectors and sequences the data's min and max per feature "
                   "or channel, for images the data set's range), observed, dataset, or a file (.npz with "
                   "arrays lo and hi, or JSON {\"lo\": [...], \"hi\": [...]})")
    p.add_argument("--fix-features", type=_indices("feature"), default=None, metavar="I,J,A-B",
                   help="features (of a vector; channels of a sequence) that keep the seed's value: indices "
                   "and ranges, e.g. 0,3,7 or 2-5")
    p.add_argument("--fix-steps", type=_indices("step"), default=None, metavar="I,J,A-B",
                   help="time steps of a sequence (every channel) that keep the seed's value, e.g. 0-9")
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
                   help="neuron layers of coverage and objective: 'default', the neurons every command "
                   "counts ('blocks' for a network with residual/transformer blocks, else 'linear-conv': "
                   "every Linear/Conv but the logits layer); 'deepxplore', DeepXplore's (every layer but "
                   "input and flatten, activated, poolings, logits and softmax; --compat's); or 'blocks' or "
                   "'linear-conv' for every model")
    p.add_argument("--inputs-per-step", dest="inputs_per_step", type=positive_int, default=None, metavar="B",
                   help="seeds advanced together, group after group (default: all)")
    p.add_argument("--batch-size", dest="chunk_size", type=batch_size_value, default="auto", metavar="C|auto",
                   help="inputs per forward/backward pass, a speed knob only; 'auto' (the default) sizes it "
                   "from the memory one input takes in every model and the memory free (at most 256 on the "
                   "CPU, 1024 on a GPU)")
    add_device(p)
    add_threads(p)
    p.add_argument("--out", metavar="FILE", default="xplore-result.json",
                   help="JSON result; the inputs go to the same name with .npz and the image grid with "
                   ".png; '-' writes none")
    p.add_argument("--grid", type=positive_int, default=8, metavar="N",
                   help="inputs in the image grid and in the printed table of inputs")
    add_no_progress(p)
    add_report_option(p)
    _surprise.add_surprise_options(p, per_model=True)
    p.set_defaults(func=_cmd_xplore)


def outputs(args) -> list[Output]:
    """The files ``deepfault xplore`` writes: the JSON result, the inputs (.npz) and their grid (.png)."""
    out = output_path(args.out)
    return [Output("--out", out), Output("--out (its inputs, .npz)", sibling(out, ".npz")),
            Output("--out (its image grid, .png)", sibling(out, ".png"))]


def _batch_line(prepared, data, config, value) -> int | str:
    """Print the batch ``--batch-size auto`` picks (one line) and return it."""
    if value != "auto":
        return value
    from ..core.memory import choose_batch_size
    from ..xplore.search import CPU_CHUNK

    choice = choose_batch_size([p.module for p in prepared], data.x_test, "auto", backward=True,
                               count=config.num_seeds)
    size = min(choice.size, CPU_CHUNK) if choice.device == "cpu" else choice.size
    print(replace(choice, size=size).describe())
    return size


def _cmd_xplore(args) -> int:
    out, npz, png = (o.path for o in outputs(args))
    config = _config(args).validate(len(args.models))
    device = device_from(args.device)
    prepared, data = load_xplore_inputs(args.models, dataset=args.dataset, data_dir=args.data_dir,
                                        models_dir=args.models_dir, archs=args.arch, weights=args.weights,
                                        trust_pickle=args.trust_pickle, arch_kwargs=args.arch_args,
                                        progress=not args.no_progress)
    bounds, fixed, held = feature_constraints(args.feature_bounds, data, features=args.fix_features,
                                              steps=args.fix_steps, constraint=config.constraint())
    labels = [p.name for p in prepared]
    for p in prepared:
        p.to(device)
    check_finite_outputs([p.module for p in prepared], data.x_test, names=labels)  # NaN weights, 10 vs 5
    threads = thread_count(args.threads, [p.module for p in prepared], device)
    fits, no_fit = _surprise_states(args, prepared, data, threads)
    chunk = _batch_line(prepared, data, config, args.chunk_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the saturation warning is printed below
        result = xplore(prepared, data.x_test, config=config, bounds=bounds, fixed=fixed,
                        progress=not args.no_progress, batch_size=chunk, threads=threads,
                        labels=data.y_test)
    if fits is not None:  # after the search, from what it found: nothing it found changes
        with _using_threads(threads):
            scorers = [_surprise.scorer(p.module, f) for p, f in zip(prepared, fits, strict=True)]
            result = add_surprise(result, scorers)
    for line in _neuron_lines(args, config, prepared, result):
        print(line)
    print(summary_text(result, labels, data, device, rows=args.grid), end="")
    if held:
        print(held)
    for name, fit in zip(labels, fits or (), strict=False):
        print(f"{name}: {_surprise.describe(fit)}")
    if no_fit is not None:
        print(f"no surprise adequacy: {no_fit}")
    if args.report_dir is not None:
        where = {**provenance(device, argv=args.argv), "threads": threads}
        write_run_report(args, lambda folder: run_page(result, labels, data, folder, provenance=where))
    if out is None or npz is None or png is None:
        return 0
    with atomic_paths(npz, png, out) as (npz_tmp, png_tmp, out_tmp):  # one unit, the .json last
        _write_outputs(args, result, labels, data, prepared, fits, config, device, threads,
                       (out, npz, png), (out_tmp, npz_tmp, png_tmp))
    return 0


def _neuron_lines(args, config, prepared, result) -> list[str]:
    """One neuron line per model (:func:`~deepfault.core.capture.neurons_line`)."""
    layers = config.layer_selection()
    named_by = "--layers" if hasattr(args, "layers") else "--compat"
    return [neurons_line(count, len(names), selection_source(p.module, layers, named_by=named_by), of=p.name)
            for p, count, names in zip(prepared, result.num_neurons, result.layer_names, strict=True)]


def _write_outputs(args, result, labels, data, prepared, fits, config, device, threads, finals,
                   temps) -> None:
    """The inputs ``.npz``, the grid ``.png`` and the result ``.json`` into their temporaries
    (``temps``), named in the result by their final names (``finals``).
    """
    out, npz, png = finals
    out_tmp, npz_tmp, png_tmp = temps
    save_inputs(npz_tmp, result)
    wrote = [str(out), str(npz)]
    grid: str | None = png.name
    try:
        image_grid(result.found, labels, png_tmp, rows=args.grid, bounds=data.bounds,
                   class_names=list(data.class_names),
                   title=f"DeepXplore: {result.num_found} difference-inducing inputs from "
                   f"{result.num_seeds} seeds", true_labels=result.true_labels)
        wrote.append(str(png))
    except ModuleNotFoundError as err:
        grid = None
        png_tmp.unlink()
        print(f"no image grid: {err}")
    payload = result.to_dict()
    body = {k: v for k, v in payload.items() if k not in ("config", "device")}  # the envelope has them
    files = [model_record(p, entry, layout=p.layout, meta={k: v for k, v in p.model_file.meta.items()
                                                           if k != "recipe"} if p.model_file else {})
             for entry, p in zip(args.models, prepared, strict=True)]
    models = [{**f, **m, "layer_selection": layer_selection(p.module, config.layer_selection())}
              for f, m, p in zip(files, body.pop("models"), prepared, strict=True)]
    for m, fit in zip(models, fits or (), strict=False):
        m["surprise_state"] = fit.to_dict()
    dataset = dataset_record(data, args.data_dir)
    write_result(out_tmp, result_document(
        "xplore", {"models": models, "dataset": dataset, **body},
        config=payload["config"], seed=config.seed, device=device, argv=args.argv, threads=threads,
        outputs={"inputs": npz.name, "grid": grid}))
    print(f"wrote {', '.join(wrote)}")


def _surprise_states(args, prepared, data, threads: int):
    """``(states, None)``: one surprise state per model (``--surprise`` files, else fitted on the
    training split and cached); ``(None, why)`` when one cannot be fitted; ``(None, None)`` with
    ``--no-surprise``.
    """
    if args.no_surprise:
        return None, None
    files = _per_model(args.surprise) if args.surprise else ()
    if len(files) not in (0, len(prepared)):
        raise DeepFaultError(f"--surprise names {len(files)} files for {len(prepared)} models; give one per "
                             "--model ('-' to fit one)")
    fits = []
    with _using_threads(threads):
        for i, p in enumerate(prepared):
            fit, why = _surprise.prepare(p.module, data, files[i] if files else None,
                                         progress=not args.no_progress)
            if fit is None:
                return None, f"{p.name}: {why}"
            fits.append(fit)
    return fits, None


@contextmanager
def _using_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
