"""A DeepXplore run from files, as ``deepfault xplore`` starts one.

:class:`XploreSources` declares where the run's models, data, feature constraints and surprise
states come from, each field with its constraint, help and file role
(:mod:`deepfault.core.constraints`): the command line builds its options from these
declarations, and a Python caller gets the same checks. :func:`run_sources` opens them, runs
the search (:func:`~.search.xplore`), scores its finds' surprise adequacy and returns what the
command prints and writes::

    sources = XploreSources(("a.pt", "b.pt"), fix_features="0-2")
    done = run_sources(sources, XploreConfig(seeds=20), Runtime(threads=1))
    print(done.run.summary())
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from ..checks import check_finite_outputs
from ..core.constraints import (
    GRID,
    Checked,
    Declared,
    FilePath,
    Flag,
    constraint_of,
    file_param,
    param,
    param_of,
    validate,
)
from ..core.entry import thread_count
from ..core.guard import output_path, sibling
from ..core.runtime import Runtime
from ..data import Dataset
from ..errors import DeepFaultError
from ..models._api import arch_files
from ..models.io import model_reads
from ..models.several import load_xplore_inputs
from ..models.source import ModelSource
from .config import XploreConfig
from .features import feature_constraints, parse_indices
from .recorded import RecordedRun, recorded_run, surprise_states_for, with_surprise
from .search import xplore

__all__ = ["XploreSources", "XploreFiles", "SourcesRun", "run_sources", "per_model"]


def per_model(text: str) -> tuple[str | None, ...]:
    """A comma-separated list aligned with the models (``--arch``, ``--weights``, ``--surprise``):
    one entry per model, ``None`` where it is ``-`` or empty (that model is skipped).
    """
    return tuple(p.strip() if p.strip() not in ("", "-") else None for p in text.split(","))


def _listed(text: str) -> list[str]:
    """The files of a per-model list."""
    return [p for p in per_model(text) if p is not None]


def _arch_files(text: str) -> list[str]:
    """The files the architectures of a per-model ``--arch`` list read."""
    return [f for spec in _listed(text) for f in arch_files(spec)]


def _indices(what: str):
    """The check of ``--fix-features`` (``what``: ``feature``) and ``--fix-steps`` (``step``):
    indices and ranges as typed (:func:`~.features.parse_indices`), or a sequence of indices.
    """

    def test(name: str, value):
        if isinstance(value, str):
            return parse_indices(value, what)
        if isinstance(value, (tuple, list)) and value and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return tuple(value)
        raise DeepFaultError(f"{name} must be {what} indices >= 0 or ranges such as 2-5; got {value!r}")

    return Checked(test, f"{what} indices and ranges such as 0,3,7 or 2-5", bad=("x", "-1", 1.5), none=True)


@dataclass(frozen=True)
class XploreSources:
    """Where a DeepXplore run's models and their data come from, what of the inputs it may
    change, and the surprise states it scores its finds with.

    Attributes:
        models: Two or more model files or zoo names (:func:`~deepfault.models.several.load_xplore_inputs`).
        dataset: The seeds' data set (``None``: the one the first model file names).
        data_dir: The data root.
        models_dir: Where zoo names are looked up first.
        arch: Architecture per model, a comma list (``-`` skips a model; one applies to all).
        arch_kwargs: Keyword arguments of every model's ``arch`` (a JSON object's text or a mapping).
        weights: Keras weights per model, a comma list like ``arch``.
        trust_pickle: Allow unpickling whole pickled modules (only for trusted files).
        feature_bounds: ``auto``, ``observed``, ``dataset`` or a file of per-feature bounds
            (:func:`~.features.resolve_bounds`).
        fix_features: Features (of a vector; channels of a sequence) that keep the seed's value.
        fix_steps: Time steps of a sequence that keep the seed's value.
        surprise: Fitted surprise states, one per model, a comma list (``-``: fit that one);
            ``None``: every one fitted on the training split and cached.
        no_surprise: Score no surprise adequacy.
    """

    models: tuple[str, ...] | None = param(
        None, FilePath("input", many=True, names=model_reads), option="--model", metavar="FILE",
        plain_help=True,
        help="a model, repeatable (--model a.h5 --model b.h5), each value also a comma list; two or more in "
        "all: files in any format 'deepfault run' takes, or zoo names (NAME resolves to NAME-DATASET.pt in "
        "--models-dir, as 'deepfault train' names it; without that file it is trained on first use, 10 "
        "epochs, and cached in the user cache directory)")
    dataset: str | os.PathLike | None = param_of(
        ModelSource, "dataset", help="data set of the seeds (default: the one the first model file names)")
    data_dir: str | os.PathLike | None = param_of(ModelSource, "data_dir")
    models_dir: str | os.PathLike = file_param(".", "where zoo names are looked up first", role="input",
                                               metavar="DIR", folder=True)
    arch: str | None = file_param(
        None, "architecture per model, for plain state_dicts, .safetensors and Keras save_weights .h5 files: "
        "file.py:Class (runs that file), package.module:factory, torchvision:NAME, timm:NAME or a zoo name "
        "('-' skips a model; one applies to all)", role="input", metavar="A1,A2,...", names=_arch_files)
    arch_kwargs: dict | None = param_of(
        ModelSource, "arch_kwargs",
        help="keyword arguments of every model's --arch, a JSON object, e.g. '{\"num_classes\": 10}'")
    weights: str | None = file_param(
        None,
        "Keras weights per model: with --arch (or a zoo name in --model) a save_weights .h5 file loaded into "
        "the zoo architecture, else the weights of a Keras JSON model",
        role="input", metavar="W1,W2,...", names=_listed)
    trust_pickle: bool = param_of(ModelSource, "trust_pickle")
    feature_bounds: str | os.PathLike = param(
        "auto", FilePath("input", words=("auto", "observed", "dataset")),
        metavar="auto|observed|dataset|FILE", plain_help=True,
        help="range of each feature every step is clipped to: auto (the data set's per-feature bounds if it "
        "has them, else for vectors and sequences the data's min and max per feature or channel, for images "
        "the data set's range), observed, dataset, or a file (.npz with arrays lo and hi, or JSON {\"lo\": "
        "[...], \"hi\": [...]})")
    fix_features: tuple[int, ...] | None = param(
        None, _indices("feature"), metavar="I,J,A-B", plain_help=True,
        help="features (of a vector; channels of a sequence) that keep the seed's value: indices and ranges, "
        "e.g. 0,3,7 or 2-5")
    fix_steps: tuple[int, ...] | None = param(
        None, _indices("step"), metavar="I,J,A-B", plain_help=True,
        help="time steps of a sequence (every channel) that keep the seed's value, e.g. 0-9")
    surprise: str | None = file_param(
        None,
        "DSA and LSA of every generated input against the training data (at the layer before the logits), "
        "beside its L1/L_inf distance: fitted states (.npz from fit_surprise/save_surprise), one per --model "
        "('-' skips one: fitted on the training split and cached); default: all fitted and cached",
        role="input", metavar="F1,F2,...", names=_listed)
    no_surprise: bool = param(
        False, Flag(), help="do not compute the generated inputs' surprise adequacy (saves one pass over the "
        "training split the first time a model is seen)")

    def __post_init__(self):
        if isinstance(self.models, list):
            object.__setattr__(self, "models", tuple(self.models))
        validate(self)
        for name in ("arch_kwargs", "fix_features", "fix_steps"):  # as typed: the dict, the indices
            object.__setattr__(self, name, constraint_of(self, name).check(name, getattr(self, name)))

    def open(self, *, progress: bool = False, threads: int | str | None = "auto"):
        """The prepared models and their data set (:func:`~deepfault.models.several.load_xplore_inputs`)."""
        dataset = None if self.dataset is None else os.fspath(self.dataset)
        return load_xplore_inputs(self.models or (), dataset=dataset, data_dir=self.data_dir,
                                  models_dir=self.models_dir, trust_pickle=self.trust_pickle,
                                  archs=per_model(self.arch) if self.arch else None,
                                  weights=per_model(self.weights) if self.weights else None,
                                  arch_kwargs=self.arch_kwargs, progress=progress, threads=threads)


@dataclass(frozen=True)
class XploreFiles(Declared):
    """Where a run's files go: its JSON result and, beside it, the inputs it found (``.npz``) and
    their image grid (``.png``), of ``grid`` inputs (as many in the printed table).

    Attributes:
        out: The JSON result (``None`` or ``'-'``: none written).
        grid: Inputs in the image grid and the printed table of inputs.
    """

    out: str | os.PathLike | None = file_param(
        "xplore-result.json",
        "JSON result; the inputs go to the same name with .npz and the image grid with .png; '-' writes none")
    grid: int = param(8, GRID, metavar="N", plain_help=True,
                      help="inputs in the image grid and in the printed table of inputs")

    def paths(self) -> tuple[Path | None, Path | None, Path | None]:
        """``(result, inputs, image grid)``, ``None`` for each not written.

        Raises:
            DeepFaultError: ``out`` names a folder (``m/``).
        """
        out = output_path(self.out, "--out")
        return out, sibling(out, ".npz"), sibling(out, ".png")


class SourcesRun(NamedTuple):
    """What :func:`run_sources` returns: the recorded run, the data set its seeds came from and
    the runtime it ran under (its thread count resolved).
    """

    run: RecordedRun
    data: Dataset
    runtime: Runtime


def run_sources(sources: XploreSources, config: XploreConfig, runtime: Runtime | None = None, *,
                grid: int = 8) -> SourcesRun:
    """DeepXplore on the models of ``sources``: opened and checked (finite outputs on the data),
    the feature constraints resolved, on ``runtime``'s device and threads, the finds scored under
    each model's surprise state (unless ``sources.no_surprise``), recorded with ``grid`` inputs
    in the image grid and the printed table (:func:`~.recorded.recorded_run`).

    Raises:
        DeepFaultError: A bad config for the models given, models that cannot be opened or
            compared, bad feature constraints or surprise states.
    """
    runtime = runtime or Runtime()
    config = config.validate(len(sources.models or ()))
    progress = bool(runtime.progress)
    prepared, data = sources.open(progress=progress, threads=runtime.threads)
    bounds, fixed, held = feature_constraints(os.fspath(sources.feature_bounds), data,
                                              features=sources.fix_features, steps=sources.fix_steps,
                                              constraint=config.constraint())
    device = runtime.torch_device()
    for p in prepared:
        p.to(device)
    modules = [p.module for p in prepared]
    check_finite_outputs(modules, data.x_test, names=[p.name for p in prepared])
    threads = thread_count(runtime.threads, modules, device)
    runtime = runtime.with_(threads=threads)
    files = per_model(sources.surprise) if sources.surprise else ()
    fits, no_fit = (None, None) if sources.no_surprise else surprise_states_for(
        prepared, data.x_train, files, threads=threads, progress=progress)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the saturation warning is in the summary
        result = xplore(prepared, data, replace(config, bounds=bounds, fixed=fixed), runtime=runtime)
    if fits is not None:
        result = with_surprise(result, prepared, fits, threads=threads)
    result = replace(result, notes=replace(result.notes, grid=grid))
    run = recorded_run(result, prepared, sources.models or (), fits, notes=[held] if held else [], why=no_fit)
    return SourcesRun(run, data, runtime)
