"""``deepfault xplore``: inputs on which two or more models disagree (DeepXplore)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from ..core.constraints import FilePath
from ..core.executors import Parallel
from ..core.runtime import Runtime
from ..experiment.results import dataset_record
from ..provenance import provenance
from ..xplore.config import PUBLISHED, XploreConfig
from ..xplore.features import read_seed_indices
from ..xplore.files import XploreFiles, XploreSources, run_sources
from ..xplore.report import run_page
from . import _common as c
from .corpus import add_corpus_option, add_to_corpus, check_corpus_option, corpus_output

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


def add_parser(sub) -> None:
    """Add ``deepfault xplore`` to ``sub``."""
    p = c.command(sub, "xplore", *c.text("xplore"))
    _add_models(p)
    c.add_field(p, XploreConfig, "seeds")
    c.add_field(p, XploreConfig, "seed_indices", type=c.FieldType(FilePath("input"), read=read_seed_indices),
              metavar="FILE|I,J,...")
    c.add_field(p, XploreConfig, "seed")
    _add_search(p)
    c.add_fields(p, XploreConfig, "inputs_per_step", "workers")
    c.add_parallel(p, names=c.PARALLEL[1:])  # where --workers run
    p.add_argument("--batch-size", dest="chunk_size", type=c.batch_size_value, default="auto",
                   metavar="C|auto",
                   help="inputs per forward/backward pass, a speed knob only; 'auto' (the default) sizes it "
                   "from the memory one input takes in every model and the memory free (at most 256 on the "
                   "CPU, 1024 on a GPU)")
    c.add_options(p, "device", "threads")
    c.add_fields(p, XploreFiles, "out", "grid")
    c.add_options(p, "no_progress", "report")
    add_corpus_option(p, "the difference-inducing inputs found, each expected to get its seed's true label")
    c.add_fields(p.add_mutually_exclusive_group(), XploreSources, "surprise", "no_surprise")
    p.set_defaults(func=_cmd_xplore)


def _add_models(p) -> None:
    """The models and their data: files or zoo names, their architectures and weights."""
    c.add_field(p, XploreSources, "models", required=True, action="extend")
    c.add_fields(p, XploreSources, "dataset", "data_dir", "models_dir", "arch", "arch_kwargs", "weights",
                 "trust_pickle")


def _add_search(p) -> None:
    """How the search moves: --compat and the settings it sets, the feature constraints, the target."""
    p.add_argument("--compat", "--paper", dest="compat", action="store_true",
                   help="DeepXplore's published MNIST settings: lambda1 1, lambda2 0.1, step 10, 20 "
                   "iterations, t 0, light, --target 0, --neurons per-seed, --layers deepxplore, "
                   "--replace, --no-clip (options given as well take precedence)")
    for name in ("replace", "lambda1", "lambda2", "step_size", "iterations", "threshold", "transform"):
        _tunable(p, name)
    _tunable(p, "clip", action=argparse.BooleanOptionalAction)
    c.add_fields(p, XploreSources, "feature_bounds", "fix_features", "fix_steps")
    c.add_fields(p, XploreConfig, "occlusion", "blackout_size")
    _tunable(p, "target")
    for name in ("neurons", "objective", "layers"):
        _tunable(p, name)


def preflight(args) -> None:
    """What the declarations cannot see, before any work: ``--corpus DIR``."""
    check_corpus_option(args, args.dataset)


def outputs(args) -> list[c.Output]:
    """The files ``deepfault xplore`` writes: the JSON result, the inputs (.npz) and their grid (.png);
    then the corpus folder it adds to.
    """
    out, inputs, grid = c.config_from(args, XploreFiles).paths()
    return [c.Output("--out", out), c.Output("--out (its inputs, .npz)", inputs),
            c.Output("--out (its image grid, .png)", grid), corpus_output(args)]


def _cmd_xplore(args) -> int:
    config = _config(args).validate(len(args.models))
    device = c.device_from(args.device)
    runtime = Runtime(device=str(device), threads=args.threads, batch_size=args.chunk_size,
                      progress=not args.no_progress, parallel=c.config_from(args, Parallel))
    done = run_sources(c.config_from(args, XploreSources), config, runtime, grid=args.grid)
    result = done.run.result
    out, npz, png, _ = (o.path for o in outputs(args))
    c.write_outcome(args, done.run, command="xplore", config=result.config, out=out, runtime=done.runtime,
                    paths={"inputs": npz, "grid": png},
                    records={"models": None, "dataset": dataset_record(done.data, args.data_dir)})
    where = {**provenance(device, argv=args.argv), "threads": done.runtime.threads}
    c.write_run_report(args, lambda folder: run_page(result, result.model_names, done.data, folder,
                                                     provenance=where))
    add_to_corpus(args, result.findings(done.data.name))
    return 0
