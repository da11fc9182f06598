"""Regression fuzzing of a pair of models: what ``deepfault regress`` and the preset call.

:func:`regress` takes the pair (files, modules, prepared models or black boxes; a
:class:`~.pair.Versions` adds the options of their files), the data, a
:class:`~.campaign.CampaignConfig` and a :class:`~deepfault.core.runtime.Runtime` (device,
threads, progress, and the results store a campaign checkpoints into and resumes from). It
prepares the pair once, refuses before any work what cannot run, runs (or resumes) the campaign
and returns a :class:`~.results.RegressOutcome` that shows itself (``summary()``, ``payload()``,
``outputs()``). :func:`compare_strategies` runs DRFuzz and DeepHunter on one pair under one
budget and one shared filter. :func:`campaign_job` runs one job of an executor (a module-level
function of a plain dict), so campaigns run in worker processes or on Ray.

Examples:
    >>> from deepfault.core.runtime import Runtime  # doctest: +SKIP
    >>> from deepfault.fuzz import CampaignConfig, regress  # doctest: +SKIP
    >>> out = regress(("m1.pt", "m2.pt"), "mnist", CampaignConfig(budget="5000it"),
    ...               runtime=Runtime(store="runs.sqlite"))  # doctest: +SKIP
    >>> out.result.metrics.urf  # doctest: +SKIP
    1234
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..checks import check_device, check_outputs
from ..core.capture import default_layers
from ..core.entry import default_threads, entry, split_arguments, use_threads
from ..core.inputs import InputData
from ..core.runtime import RUNTIME_FIELDS, Runtime
from ..coverage import ProfileConfig, compute_profile, load_profile, model_hash
from ..data import Dataset
from ..data.dataset import as_dataset
from ..experiment.store import ResultStore
from .campaign import CampaignConfig, CampaignOptions, CampaignProgress, CampaignResult, run_campaign
from .campaign.checkpoint import DRFUZZ_METHOD
from .campaign.config import RENAMED as CAMPAIGN_RENAMED
from .campaign.resume import StoreState, store_state
from .campaign.workers import run_workers
from .mutation.rules import rule_kind
from .pair import Pair, Versions, check_black_box, check_pair, load_pair, open_pair
from .progress import PROGRESS_LEGEND, display_for, progress_line
from .results import RegressComparison, RegressOutcome

__all__ = ["PROGRESS_LEGEND", "RegressComparison", "RegressOutcome", "Versions", "cached_profile",
           "campaign_cell", "campaign_job", "check_black_box", "check_pair", "compare_strategies",
           "experiment_key", "faults_paths", "load_pair", "progress_line", "regress"]

log = logging.getLogger(__name__)


def experiment_key(config: CampaignConfig, m1, m2, data_name: str, n_inputs: int) -> str:
    """The store key of a campaign: the configuration, both models' weights, the data (16 hex)."""
    return _key(config, _pair_identity(m1, m2, data_name, n_inputs))


def _pair_identity(m1, m2, data_name: str, n_inputs: int) -> dict:
    """What a campaign ran on, apart from its options: both models' weights and the data."""
    return {"m1": model_hash(m1), "m2": model_hash(m2), "data": data_name, "n": n_inputs}


def _key(config: CampaignConfig, identity: dict) -> str:
    text = json.dumps({"config": config.to_dict(), **identity}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


#: The old form's keywords that say how the models' files are opened (now :class:`~.pair.Versions`').
_OPENING = ("arch", "arch_kwargs", "trust_pickle", "data_dir", "model_runtime")


def _legacy(name: str, fields: set, args: tuple, kwargs: dict):
    """The old form ``regress(m1, m2, dataset=..., store=..., arch=..., **settings)`` in the one
    shape, with a :class:`FutureWarning`; the one shape's own call goes to
    :func:`~deepfault.core.entry.split_arguments`.
    """
    if args and (isinstance(args[0], (tuple, list, Versions)) or (len(args) < 2 and "m2" not in kwargs)):
        return split_arguments(name, fields, args, kwargs)
    warnings.warn(f"{name}(m1, m2, dataset=..., ...) is deprecated: pass {name}((m1, m2), data, "
                  "CampaignConfig(...), runtime=Runtime(store=..., progress=...)); the options of model "
                  "files go in Versions(m1, m2, arch=..., runtime=...)", FutureWarning, stacklevel=4)
    m1, m2 = args[0], (args[1] if len(args) > 1 else kwargs.pop("m2"))
    opening = {("runtime" if k == "model_runtime" else k): kwargs.pop(k) for k in _OPENING if k in kwargs}
    data = kwargs.pop("dataset", None)
    labels, bounds = kwargs.pop("labels", None), kwargs.pop("bounds", None)
    if labels is not None or bounds is not None:
        data = as_dataset(data, labels, bounds=bounds, what="dataset")
    if "cell" in kwargs:  # its older name
        kwargs["campaign"] = kwargs.pop("cell")
    on_store = kwargs.pop("on_store", None)
    progress = kwargs.pop("progress", None)
    if callable(progress) or on_store is not None:  # the old callable saw the progress only
        kwargs["progress"] = _old_progress(progress, on_store)
    elif progress:
        kwargs["progress"] = True
    config_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in fields or k in CAMPAIGN_RENAMED}
    runtime_kw = {k: kwargs.pop(k) for k in list(kwargs) if k in RUNTIME_FIELDS}
    if kwargs:
        raise TypeError(f"{name}() got unexpected keyword arguments: {', '.join(sorted(kwargs))}")
    return Versions(m1, m2, **opening), data, config_kw, runtime_kw


def _old_progress(progress, on_store):
    """The old ``progress=`` callable (or ``True``) and ``on_store=`` as one progress callable."""
    show = display_for(progress)

    def report(record) -> None:
        if isinstance(record, StoreState):
            (on_store or _log_state)(record)
        elif show is not None:
            show(record)
    return report


def _data(obj):
    """The data in one of the forms the pair is prepared with: a name or path (text), a
    :class:`~deepfault.data.Dataset`, ``None`` (the one the model files name); inputs (a tensor,
    array, ``(inputs, labels)`` pair, torch ``Dataset`` or ``DataLoader``) as a ``Dataset``.
    """
    if obj is None or isinstance(obj, (str, Dataset)):
        return obj
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return as_dataset(obj, what="data")


def _one(models, data, config: CampaignConfig, *, runtime: Runtime) -> RegressOutcome:
    device = _check_where(config, runtime)
    pair = open_pair(models, data)
    return _campaign(pair, config, runtime, device)


_one.__name__ = _one.__qualname__ = "regress"  # how the entry's messages name it
_regress = entry(CampaignConfig, data=_data, legacy=_legacy)(_one)


def regress(models: Versions | tuple, data: str | Dataset | InputData | None = None,
            config: CampaignConfig | None = None, *, runtime: Runtime | None = None,
            **old: object) -> RegressOutcome:
    """Fuzz the model M2 for regressions against M1 on the data's test split (DRFuzz, or DeepHunter).

    Args:
        models: The pair ``(m1, m2)``: each a model file (any format ``deepfault run --model``
            opens), :class:`~deepfault.models.ModelFile`, module,
            :class:`~deepfault.models.prepare.PreparedModel` or a plain callable from a NumPy
            batch to logits (a black box: DRFuzz reads M2's outputs only); or a
            :class:`~.pair.Versions`, which adds how their files are opened (``arch``,
            ``trust_pickle``, ``runtime="onnxruntime"``, the data root). The campaign works in the
            data set's native layout whatever layout the files take.
        data: Data set name, ``.npz`` file or :class:`~deepfault.data.Dataset` (``None``: the one
            the model files name); or the seed inputs as a tensor, array, ``(inputs, labels)``
            pair, torch ``Dataset`` or ``DataLoader`` (:func:`~deepfault.data.as_dataset`), read
            whole and serving as the training split too (give a ``Dataset`` to keep them apart).
        config: A :class:`~.campaign.CampaignConfig` (``None``: the default). A fidelity left at
            its default is the data's kind's (:meth:`~.campaign.CampaignConfig.for_inputs`: the
            discriminator for images, ``mdsa`` for vectors and sequences). Its ``campaign``,
            ``fresh`` and ``experiment`` say where in the store the campaign goes.
        runtime: :class:`~deepfault.core.runtime.Runtime`: ``device`` (default: where M1 is),
            ``threads`` (applied once the models' size is known, the command line's rule),
            ``progress`` (``True``: the progress line on standard error; a callable is called with
            the :class:`~.campaign.resume.StoreState` before any work, then a
            :class:`~.campaign.CampaignProgress` after every step), ``store`` (the results store:
            checkpoints go there and rerunning resumes; a finished campaign found there is returned
            without fuzzing).
        **old: The old form's keywords: ``regress(m1, m2, dataset=..., store=..., budget=..., ...)``
            still works for one release and warns (:class:`FutureWarning`).

    Returns:
        A :class:`~.results.RegressOutcome`.

    Raises:
        DeepFaultError: Before any work: a bad setting, files that are not two versions of one
            classifier, a check the inputs or a black box cannot take, a store that is no store.
    """
    if isinstance(runtime, str):  # the old form's runtime=: how .onnx files run
        old["model_runtime"], runtime = runtime, None
    given = (models, data, config)[:3 if config is not None else 2 if data is not None else 1]
    return _regress(*given, runtime=runtime, **old)


regress.__entry__ = _regress.__entry__  # type: ignore[attr-defined]


@entry(CampaignConfig, data=_data)
def compare_strategies(models: Versions | tuple, data: str | Dataset | InputData | None,
                       config: CampaignConfig, *, runtime: Runtime) -> RegressComparison:
    """DRFuzz and DeepHunter on one pair, one after the other, under ``config``'s budget and one
    shared fidelity filter (``config.shared_fidelity``, else DRFuzz's check), each its own
    campaign ``STRATEGY-seedS`` in the store; the arguments are :func:`regress`'s.

    Returns:
        A :class:`~.results.RegressComparison`.
    """
    device = _check_where(config, runtime)
    pair = open_pair(models, data)
    config = config.for_inputs(rule_kind(pair.data.input_shape))
    shared = config.shared_fidelity or config.fidelity
    configs = [replace(config, strategy=s, shared_fidelity=shared, campaign=None)
               for s in ("drfuzz", "deephunter")]
    for c in configs:  # what a black box cannot give, refused before the first campaign
        check_black_box(pair.p1, pair.p2, c)
    return RegressComparison({c.strategy: _campaign(pair, c, runtime, device) for c in configs})


def _check_where(config: CampaignConfig, runtime: Runtime) -> torch.device | None:
    """The device and the store refused before anything is loaded (the settings were, by the config)."""
    surprise_specs(config)  # a bad 'dsa:...' spec
    if runtime.store is not None:
        check_outputs(("store", runtime.store))
        ResultStore.check(runtime.store)
    return None if runtime.device is None else check_device(runtime.device)


def _device_of(pair: Pair) -> torch.device:
    p = next(pair.p1.module.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def _campaign(pair: Pair, config: CampaignConfig, runtime: Runtime,
              device: torch.device | None) -> RegressOutcome:
    """One campaign on a prepared pair, under ``runtime.threads`` (the models' size known: the
    command line's ``--threads auto``; inside an entry that applied them already, as they are).
    """
    device = device or _device_of(pair)
    if config.output_kinds == ("logits", "logits"):
        config = replace(config, output_kinds=(pair.p1.output_kind, pair.p2.output_kind))
    config = config.for_inputs(rule_kind(pair.data.input_shape))
    check_black_box(pair.p1, pair.p2, config)  # before the discriminator, the surprise fit and the store
    m1, m2 = pair.p1.to(device).module, pair.p2.to(device).module
    threads = default_threads() if runtime.threads == "auto" else runtime.threads
    with use_threads(threads, [m1, m2], device) as count:
        return replace(_checked_run(pair, (m1, m2), config, runtime, device), threads=count)


def _checked_run(pair: Pair, models, config: CampaignConfig, runtime: Runtime, device) -> RegressOutcome:
    """Refuse what cannot run, say what the store holds, then run (or resume, or read back) the campaign."""
    m1, m2 = models
    data = pair.data
    check_pair(m1, m2, data, config)  # before the store is opened or created
    neurons = pair.m2_neurons(config)
    n_inputs = len(data.x_test) if config.max_seeds is None else min(len(data.x_test), config.max_seeds)
    identity = _pair_identity(m1, m2, data.name, n_inputs)
    experiment = config.experiment or _key(config, identity)
    cell = campaign_cell(config.strategy, config.seed, config.campaign)
    # the report names the models by their files; the store line compares campaigns of this pair only
    record = {"m1": pair.names[0], "m2": pair.names[1], "pair": identity}
    show = display_for(runtime.progress)
    state = None
    if runtime.store is not None:  # said before any work (the discriminator's first training included)
        state = store_state(runtime.store, experiment, cell, config, fresh=config.fresh, models=record)
        (show or _log_state)(state)
    _prepare_discriminators(config, data, device, progress=None if show else False)  # before the store
    _prepare_surprise(config, m1, data, device)  # likewise
    try:
        result = _in_store(pair, models, config, runtime.store, (experiment, cell, record), show)
    finally:
        getattr(show, "close", lambda: None)()
    rf = result.faults.kind == 0
    seeds = data.x_test[result.faults.root[rf]] if rf.any() else np.zeros((0, *data.input_shape), np.float32)
    notes = (*pair.notes(), *(() if neurons is None else (neurons[0],)))
    store = None if runtime.store is None else str(runtime.store)
    records = pair.records(pair.names, None if neurons is None else neurons[1])
    bounds = (float(data.bounds[0]), float(data.bounds[1]))
    return RegressOutcome(result, experiment, cell, store, seeds, tuple(data.class_names), bounds, pair.names,
                          state, str(device), notes, records)


def _in_store(pair: Pair, models, config: CampaignConfig, store, keys: tuple[str, str, dict],
              show) -> CampaignResult:
    """The campaign run in ``store`` (its checkpoints, a fresh start, the models' record) or without one."""
    experiment, cell, record = keys
    m1, m2 = models
    progress = None if show is None else (lambda p: show(p) if isinstance(p, CampaignProgress) else None)
    if store is None:
        return _run(m1, m2, pair.data, config, None, experiment, cell, progress)
    with ResultStore(store) as opened, opened.writer():
        if config.fresh:
            opened.delete_cells(experiment, DRFUZZ_METHOD, cell)
        # the models' names and identity, before the first checkpoint: an interrupted campaign has them
        opened.put(experiment, DRFUZZ_METHOD, "models", record, replace=True)
        result = _run(m1, m2, pair.data, config, opened, experiment, cell, progress)
    return result


def _log_state(state: StoreState) -> None:
    log.info("%s", state.line())



def _prepare_discriminators(config: CampaignConfig, data, device, *, progress: bool | None = False) -> None:
    """Train (once, cached) the data set's default discriminator when the campaign uses it,
    from the data already loaded (so ``--data-dir`` is respected); a data set without one is
    refused here, before anything is written.
    """
    specs = [config.shared_fidelity, config.strategy_spec.check_spec(config)]
    if "discriminator" in specs:
        from .fidelity.gan import cached_discriminator

        cached_discriminator(data.name, data=data, device=device, progress=progress)
    for spec in dict.fromkeys(s for s in specs if isinstance(s, str) and s.startswith("discriminator:")):
        from .fidelity.checks import make_fidelity

        # a file that is no discriminator is refused here, before the store is made (loaded again
        # by the campaign: a model file is read in well under a second)
        make_fidelity(spec, bounds=(float(data.bounds[0]), float(data.bounds[1])), device=device,
                      dataset=data.name)


def surprise_specs(config: CampaignConfig) -> list[str]:
    """The surprise checks (``dsa``, ``lsa``, ``mdsa`` specs) the campaign uses, each parsed
    (:func:`~.fidelity.surprise.parse_surprise_spec` raises for a bad one).
    """
    from ..coverage.surprise import SURPRISE_KINDS
    from .fidelity.surprise import parse_surprise_spec

    specs = [config.strategy_spec.check_spec(config), config.shared_fidelity]
    out = [s for s in specs if s and s.partition(":")[0].strip().lower() in SURPRISE_KINDS]
    for spec in out:
        parse_surprise_spec(spec)
    return list(dict.fromkeys(out))


def _prepare_surprise(config: CampaignConfig, m1, data, device) -> None:
    """Fit (once, cached) M1's surprise state on the training split and score the test split
    for a percentile threshold, when the campaign uses a surprise check: a data set without a
    training split is refused here, before anything is written (the campaign then reads the cache).
    """
    from .fidelity.surprise import make_surprise_fidelity

    for spec in surprise_specs(config):
        fid = make_surprise_fidelity(spec, model=m1, train_inputs=data.x_train, test_inputs=data.x_test,
                                     bounds=data.bounds, device=device)
        log.info("fidelity %s: %s", spec, fid.rule)


def _run(m1, m2, data, config, store, experiment, cell, progress, profile=None) -> CampaignResult:
    _prepare_discriminators(config, data, next(m1.parameters()).device if any(True for _ in m1.parameters())
                            else "cpu")
    options = CampaignOptions(train_inputs=data.x_train, dataset=data.name, profile=profile, store=store,
                              experiment=experiment, cell=cell, progress=progress)
    run = run_campaign if config.workers == 1 else run_workers  # many workers: one campaign, merged
    return run(m1, m2, data.x_test, data.y_test, bounds=data.bounds, config=config, options=options)


def cached_profile(m2, data, config: CampaignConfig, folder: str | os.PathLike):
    """M2's coverage profile on the training split, cached in ``folder`` by the weights' hash
    (DeepHunter's KMNC/NBC/SNAC; campaigns of the same M2 share it). ``None`` when the
    campaign's criterion needs none.
    """
    if not config.strategy_spec.needs_profile(config):
        return None
    layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
    # a deep network's default became its blocks (issue 26): keyed apart from profiles cached before
    keyed = "blocks" if layers is None and default_layers(m2) == "blocks" else layers
    key = hashlib.sha256(json.dumps([model_hash(m2), data.name, len(data.x_train), keyed,
                                     config.transform_name], default=str).encode()).hexdigest()[:16]
    path = Path(folder) / f"profile-{key}.npz"
    if path.is_file():
        return load_profile(path)
    profile = compute_profile(m2, data.x_train, ProfileConfig(layers=layers, transform=config.transform_name))
    profile.save(path)
    return profile


def campaign_job(job: dict) -> dict:
    """Run one campaign of an executor's job list; returns the result's dict.

    ``job`` holds ``m1``, ``m2`` (paths), ``runtime`` (optional), ``dataset``, ``data_dir``, ``config`` (a
    :meth:`~.campaign.CampaignConfig.to_dict`), ``store``, ``experiment``, ``cell`` and
    ``device``. The campaign checkpoints into ``store`` (which workers must reach: a local
    path, or a shared file system for a cluster) and resumes from it.
    """
    config = CampaignConfig.from_dict(job["config"])
    device = torch.device(job.get("device", "cpu"))
    p1, p2, data, _ = open_pair(Versions(job["m1"], job["m2"], runtime=job.get("runtime", "auto"),
                                         data_dir=job.get("data_dir")), job.get("dataset"))
    check_black_box(p1, p2, config)
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    if config.output_kinds == ("logits", "logits"):
        config = replace(config, output_kinds=(p1.output_kind, p2.output_kind))
    m1, m2 = p1.to(device).module, p2.to(device).module
    profile = cached_profile(m2, data, config, job["profile_dir"]) if job.get("profile_dir") else None
    with ResultStore(job["store"]) as store:
        result = _run(m1, m2, data, config, store, job["experiment"], job["cell"], None, profile)
    return {"cell": job["cell"], **result.to_dict()}


def campaign_cell(strategy: str, seed: int, campaign: str | None = None) -> str:
    """The campaign's id in the store: ``campaign`` when given, else ``STRATEGY-seedS``."""
    return campaign or f"{strategy}-seed{seed}"


def faults_paths(store: str | os.PathLike | None, cell: str, out: str | os.PathLike | None = None):
    """Where ``deepfault regress`` writes the faults: ``(npz, png)``."""
    if out is not None:
        base = Path(out)
        base = base.with_suffix("") if base.suffix in (".npz", ".png") else base
    elif store is not None:
        base = Path(store).with_name(f"{Path(store).stem}-{cell}-faults")
    else:
        base = Path(f"regress-{cell}-faults")
    return base.with_name(base.name + ".npz"), base.with_name(base.name + ".png")
