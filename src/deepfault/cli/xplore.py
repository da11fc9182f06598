"""``deepfault xplore``: inputs on which two or more models disagree (DeepXplore)."""

from __future__ import annotations

import argparse
import warnings
from dataclasses import fields, replace
from typing import cast

from ..checks import check_finite_outputs
from ..core.constraints import GRID, FilePath, constraint_of
from ..core.runtime import Runtime
from ..experiment.results import dataset_record
from ..models.several import load_xplore_inputs
from ..models.source import ModelSource
from ..provenance import provenance
from ..xplore import xplore
from ..xplore.config import PUBLISHED, XploreConfig
from ..xplore.features import feature_constraints, parse_indices, read_seed_indices
from ..xplore.recorded import recorded_run, surprise_states_for, with_surprise
from ..xplore.report import run_page
from . import _common as c
from .corpus import add_corpus_option, add_to_corpus, check_corpus_option, corpus_output

#: ``--model``: model files (or zoo names), a comma list, repeatable.
MODELS = c.FieldType(replace(cast(FilePath, constraint_of(ModelSource, "model")), many=True))  # as a list
#: The config's fields this command sets (bounds and fixed come from --feature-bounds and --fix-*).
_FIELDS = tuple(f.name for f in fields(XploreConfig) if f.name not in ("bounds", "fixed"))


def _config(args) -> XploreConfig:
    """The run's configuration: the options given, over --compat's settings or the library's."""
    given = {name: getattr(args, name) for name in _FIELDS if hasattr(args, name)}
    return XploreConfig.published(**given) if args.compat else XploreConfig(**given)


def _tunable(p, name: str, **overrides) -> None:
    """An option --compat sets unless it is given (left unset, the library's default holds)."""
    action = c.add_field(p, XploreConfig, name, default=argparse.SUPPRESS, **overrides)
    default, compat = (getattr(XploreConfig(), name), PUBLISHED[name])
    action.help = f"{action.help} (default: {'random' if default is None else default}; --compat: {compat})"


def _per_model(text: str) -> tuple[str | None, ...]:
    """A comma-separated list aligned with --model; '-' or an empty entry skips a model."""
    return tuple(p.strip() if p.strip() not in ("", "-") else None for p in text.split(","))


def _listed(text: str) -> list[str]:
    """The files of a per-model list."""
    return [p for p in _per_model(text) if p is not None]


def add_parser(sub) -> None:
    """Add ``deepfault xplore`` to ``sub``."""
    p = c.command(sub, "xplore", "find inputs on which two or more models disagree (DeepXplore)",
                "Differential testing by joint gradient ascent (Pei et al., SOSP 2017): from seed test "
                "inputs on which all models agree, push one target model away from the common class while "
                "the others keep it and each model's neuron coverage rises, until the models disagree. All "
                "seeds advance together in one batch. Prints the counts, coverage and times; writes a JSON "
                "result, the inputs (.npz) and an image grid (.png).")
    _add_models(p)
    c.add_field(p, XploreConfig, "seeds", metavar="N")
    c.add_field(p, XploreConfig, "seed_indices", type=c.FieldType(FilePath("input"), read=read_seed_indices),
              metavar="FILE|I,J,...")
    c.add_field(p, XploreConfig, "seed", metavar="S")
    _add_search(p)
    c.add_field(p, XploreConfig, "inputs_per_step", metavar="B")
    c.add_field(p, XploreConfig, "workers", metavar="N")
    p.add_argument("--batch-size", dest="chunk_size", type=c.batch_size_value, default="auto",
                   metavar="C|auto",
                   help="inputs per forward/backward pass, a speed knob only; 'auto' (the default) sizes it "
                   "from the memory one input takes in every model and the memory free (at most 256 on the "
                   "CPU, 1024 on a GPU)")
    c.add_options(p, "device", "threads")
    p.add_argument("--out", type=c.WRITES, metavar="FILE", default="xplore-result.json",
                   help="JSON result; the inputs go to the same name with .npz and the image grid with "
                   ".png; '-' writes none")
    p.add_argument("--grid", type=c.FieldType(GRID), default=8, metavar="N",
                   help="inputs in the image grid and in the printed table of inputs")
    c.add_options(p, "no_progress", "report")
    add_corpus_option(p, "the difference-inducing inputs found, each expected to get its seed's true label")
    surprise = p.add_mutually_exclusive_group()
    states = c.FieldType(FilePath("input", names=_listed))
    surprise.add_argument("--surprise", type=states, metavar="F1,F2,...", default=None,
                          help="DSA and LSA of every generated input against the training data (at the layer "
                          "before the logits), beside its L1/L_inf distance: fitted states (.npz from "
                          "fit_surprise/save_surprise), one per --model ('-' skips one: fitted on the "
                          "training split and cached); default: all fitted and cached")
    surprise.add_argument("--no-surprise", action="store_true",
                          help="do not compute the generated inputs' surprise adequacy (saves one pass over "
                          "the training split the first time a model is seen)")
    p.set_defaults(func=_cmd_xplore)


def _add_models(p) -> None:
    """The models and their data: files or zoo names, their architectures and weights."""
    p.add_argument("--model", dest="models", required=True, type=MODELS, action="extend", metavar="FILE",
                   help="a model, repeatable (--model a.h5 --model b.h5), each value also a comma list; two "
                   "or more in all: files in any format 'deepfault run' takes, or zoo names (NAME resolves "
                   "to NAME-DATASET.pt in --models-dir, as 'deepfault train' names it; without that file "
                   "it is trained on first use, 10 epochs, and cached in the user cache directory)")
    c.add_options(p, "dataset", "data_dir",
                dataset="data set of the seeds (default: the one the first model file names)")
    p.add_argument("--models-dir", type=c.READS_FOLDER, metavar="DIR", default=".",
                   help="where zoo names are looked up first")
    p.add_argument("--arch", type=c.FieldType(c.ARCH_FILE.constraint, read=_per_model), default=None,
                   metavar="A1,A2,...",
                   help="architecture per model, for plain state_dicts, .safetensors and Keras save_weights "
                   ".h5 files: file.py:Class (runs that file), package.module:factory, torchvision:NAME, "
                   "timm:NAME or a zoo name ('-' skips a model; one applies to all)")
    c.add_options(p, "arch_args", arch_args="keyword arguments of every model's --arch, a JSON object, e.g. "
                "'{\"num_classes\": 10}'")
    p.add_argument("--weights", type=c.FieldType(FilePath("input"), read=_per_model), default=None,
                   metavar="W1,W2,...",
                   help="Keras weights per model: with --arch (or a zoo name in --model) a save_weights "
                   ".h5 file loaded into the zoo architecture, else the weights of a Keras JSON model")
    c.add_options(p, "trust_pickle")


def _add_search(p) -> None:
    """How the search moves: --compat and the settings it sets, the feature constraints, the target."""
    p.add_argument("--compat", "--paper", dest="compat", action="store_true",
                   help="DeepXplore's published MNIST settings: lambda1 1, lambda2 0.1, step 10, 20 "
                   "iterations, t 0, light, --target 0, --neurons per-seed, --layers deepxplore, "
                   "--replace, --no-clip (options given as well take precedence)")
    for name in ("replace", "lambda1", "lambda2", "step_size", "iterations", "threshold", "transform"):
        _tunable(p, name)
    _tunable(p, "clip", action=argparse.BooleanOptionalAction)
    bounds = FilePath("input", words=("auto", "observed", "dataset"))
    p.add_argument("--feature-bounds", type=c.FieldType(bounds), default="auto",
                   metavar="auto|observed|dataset|FILE",
                   help="range of each feature every step is clipped to: auto (the data set's per-feature "
                   "bounds if it has them, else for vectors and sequences the data's min and max per feature "
                   "or channel, for images the data set's range), observed, dataset, or a file (.npz with "
                   "arrays lo and hi, or JSON {\"lo\": [...], \"hi\": [...]})")
    p.add_argument("--fix-features", type=c.argument_type(parse_indices, "feature"), default=None,
                   metavar="I,J,A-B",
                   help="features (of a vector; channels of a sequence) that keep the seed's value: indices "
                   "and ranges, e.g. 0,3,7 or 2-5")
    p.add_argument("--fix-steps", type=c.argument_type(parse_indices, "step"), default=None,
                   metavar="I,J,A-B",
                   help="time steps of a sequence (every channel) that keep the seed's value, e.g. 0-9")
    c.add_field(p, XploreConfig, "occlusion", metavar="X,Y,H,W")
    c.add_field(p, XploreConfig, "blackout_size", metavar="M")
    _tunable(p, "target", metavar="J|random")
    for name in ("neurons", "objective", "layers"):
        _tunable(p, name)


def preflight(args) -> None:
    """What the declarations cannot see, before any work: ``--corpus DIR``."""
    check_corpus_option(args, args.dataset)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault xplore`` writes: the JSON result, the inputs (.npz) and their grid (.png);
    then the corpus folder it adds to.
    """
    out = c.output_path(args.out, "--out")
    return [c.Output("--out", out), c.Output("--out (its inputs, .npz)", c.sibling(out, ".npz")),
            c.Output("--out (its image grid, .png)", c.sibling(out, ".png")), corpus_output(args)]


def _cmd_xplore(args) -> int:
    config = _config(args).validate(len(args.models))
    device = c.device_from(args.device)
    prepared, data = load_xplore_inputs(args.models, dataset=args.dataset, data_dir=args.data_dir,
                                        models_dir=args.models_dir, archs=args.arch, weights=args.weights,
                                        trust_pickle=args.trust_pickle, arch_kwargs=args.arch_args,
                                        progress=not args.no_progress, threads=args.threads)
    bounds, fixed, held = feature_constraints(args.feature_bounds, data, features=args.fix_features,
                                              steps=args.fix_steps, constraint=config.constraint())
    for p in prepared:
        p.to(device)
    check_finite_outputs([p.module for p in prepared], data.x_test, names=[p.name for p in prepared])
    threads = c.thread_count(args.threads, [p.module for p in prepared], device)
    files = _per_model(args.surprise) if args.surprise else ()
    fits, no_fit = (None, None) if args.no_surprise else surprise_states_for(
        prepared, data.x_train, files, threads=threads, progress=not args.no_progress)
    runtime = Runtime(device=str(device), threads=threads, batch_size=args.chunk_size,
                      progress=not args.no_progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the saturation warning is in the summary
        result = xplore(prepared, data, replace(config, bounds=bounds, fixed=fixed), runtime=runtime)
    if fits is not None:
        result = with_surprise(result, prepared, fits, threads=threads)
    result = replace(result, notes=replace(result.notes, grid=args.grid))
    run = recorded_run(result, prepared, args.models, fits, notes=[held] if held else [], why=no_fit)
    result = run.result
    out, npz, png, _ = (o.path for o in outputs(args))
    c.write_outcome(args, run, command="xplore", config=result.config, out=out,
                  runtime=runtime.with_(threads=threads), paths={"inputs": npz, "grid": png},
                  records={"models": None, "dataset": dataset_record(data, args.data_dir)})
    where = {**provenance(device, argv=args.argv), "threads": threads}
    c.write_run_report(args, lambda folder: run_page(result, result.model_names, data, folder,
                                                   provenance=where))
    add_to_corpus(args, result.findings(data.name))
    return 0
