"""Regression fuzzing from model files: what ``deepfault regress`` and the preset call.

:func:`regress` prepares the two models (files, modules or prepared models) and the data set,
checks that the models are
two versions of one classifier (same classes, same input shape), runs (or resumes) a
campaign into a results store and returns its :class:`~.campaign.result.CampaignResult` with
the keys it was stored under. :func:`campaign_job` does the same for one job of an
executor (a module-level function of a plain dict), so campaigns run in worker processes
or on Ray.

Examples:
    >>> from deepfault.fuzz import regress  # doctest: +SKIP
    >>> out = regress("m1.pt", "m2.pt", budget="5000it", store="runs.sqlite")  # doctest: +SKIP
    >>> out.result.metrics.urf  # doctest: +SKIP
    1234
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import check_device, check_finite_outputs, check_name, check_outputs
from ..core.batches import iterate_batches
from ..core.capture import default_layers, resolve_layers
from ..core.entry import _translate, applies_threads, renamed
from ..core.inputs import InputData, LabelData
from ..core.summary import Summarised
from ..coverage import compute_profile, load_profile, model_hash
from ..data import Dataset
from ..data.dataset import as_dataset
from ..errors import DeepFaultError
from ..experiment.store import ResultStore
from ..models import ModelFile, open_model
from ..models.blackbox import outputs_only
from ..models.prepare import PreparedModel, model_label, native_shape, prepare_model
from .campaign import CampaignConfig, CampaignProgress, CampaignResult, run_campaign
from .campaign.checkpoint import DRFUZZ_METHOD
from .campaign.config import RENAMED as CAMPAIGN_RENAMED
from .campaign.resume import StoreState, store_state
from .campaign.seeds import test_inputs
from .fidelity.checks import check_fidelity_inputs, default_fidelity
from .mutation.rules import rule_kind

__all__ = ["RegressOutcome", "campaign_job", "check_black_box", "experiment_key", "load_pair", "regress"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, repr=False)
class RegressOutcome(Summarised):
    """A campaign run from model files.

    Attributes:
        result: The :class:`~.campaign.result.CampaignResult`.
        experiment: The store's experiment key (hash of the configuration, both models' weights
            and the data).
        cell: The campaign's id in the store.
        store: The store's path (``None`` without one).
        seed_inputs: ``(R, *input_shape)`` the root seed of each regression fault (for figures).
        class_names: The data set's class names.
        bounds: The data's range.
        names: How reports name M1 and M2 (their file names, else ``M1``, ``M2``).
        store_state: What the run did with the campaign it found in the store (new, resumed,
            finished: :class:`~.campaign.resume.StoreState`; ``None`` without a store).
    """

    result: CampaignResult
    experiment: str
    cell: str
    store: str | None
    seed_inputs: np.ndarray
    class_names: tuple[str, ...]
    bounds: tuple[float, float]
    names: tuple[str, str] = ("M1", "M2")
    store_state: StoreState | None = None

    def headline(self) -> str:
        m = self.result.metrics
        return (f"{m.rf} regression faults of {self.names[1]} ({m.urf} unique, from {m.seeds} seeds) "
                f"in {self.result.iterations} iterations; stopped: {self.result.stop_reason}")

    def summary(self) -> str:
        """The faults first (inputs M1 gets right and M2 wrong), then the campaign's counts."""
        m = self.result.metrics
        first = "none" if m.seconds_to_first_rf is None else f"after {m.seconds_to_first_rf:.1f} s"
        return "\n".join([
            f"regress {self.names[0]} -> {self.names[1]}: {self.headline()}",
            f"  first fault {first}; {m.gf} failures of both models; "
            f"{m.initial_rf} seeds already wrong in M2",
            f"  store: {self.store or 'none'}, campaign {self.cell}",
        ])

    def rows(self) -> list[dict]:
        return [{"m1": self.names[0], "m2": self.names[1], "campaign": self.cell,
                 "iterations": self.result.iterations, **self.result.metrics.to_dict()}]

    def to_dict(self) -> dict:
        state = {} if self.store_state is None else {"store_state": self.store_state.to_dict()}
        return {"experiment": self.experiment, "cell": self.cell, "store": self.store, **state,
                **self.result.to_dict()}


def _open(m, *, arch, trust_pickle, runtime="auto", arch_kwargs=None):
    """A path opened as a model file (with its file name as label), a plain callable as a black
    box (:func:`~deepfault.models.blackbox.black_box`); anything else as it is.
    """
    if isinstance(m, (str, os.PathLike)):
        mf = open_model(m, arch=arch, arch_kwargs=arch_kwargs, trust_pickle=trust_pickle, runtime=runtime)
        return mf, model_label(m, mf)
    if callable(m) and not isinstance(m, (torch.nn.Module, PreparedModel)):
        from ..models.blackbox import black_box

        mf = black_box(m)
        return mf, mf.meta["source"]
    if isinstance(m, ModelFile) and m.meta.get("runtime") == "callable":  # black_box(f, name=...)
        return m, m.meta["source"]
    return m, None


def _native_shape(m) -> tuple | None:
    if isinstance(m, PreparedModel):
        return m.input_shape
    if isinstance(m, ModelFile) and m.meta.get("input_shape"):
        return native_shape(m.meta["input_shape"], channels_last=m.meta.get("data_format") == "channels_last")
    return None


def load_pair(m1, m2, *, dataset: str | Dataset | None = None, data_dir: str | os.PathLike | None = None,
              arch: str | None = None, trust_pickle: bool = False, runtime: str = "auto",
              arch_kwargs: dict | None = None):
    """Prepare two models and their data set (:func:`~deepfault.models.prepare.prepare_model`).

    Args:
        m1: The original model: a model file (``.onnx`` and ``.tflite`` included), a
            :class:`~deepfault.models.ModelFile` (a :func:`~deepfault.models.blackbox.black_box`
            included), module, :class:`~deepfault.models.prepare.PreparedModel`, or a plain
            callable from a NumPy batch to logits (a black box; wrap it with
            :func:`~deepfault.models.blackbox.black_box` for probabilities).
        m2: The new model, in any form ``m1`` takes.
        dataset: Data set name, ``.npz`` file or :class:`~deepfault.data.Dataset` (default:
            the one the model files name).
        data_dir: Data root.
        arch: Architecture of plain ``state_dict`` files (any form of
            :func:`~deepfault.models.build_model`).
        trust_pickle: Allow unpickling a whole pickled ``nn.Module``; only for trusted files.
        runtime: How ``.onnx`` files run (:data:`~deepfault.models.blackbox.RUNTIMES`).
        arch_kwargs: The arguments of ``arch``.

    Returns:
        ``(p1, p2, data)``: two :class:`~deepfault.models.prepare.PreparedModel` taking the
        data set's native layout, and the :class:`~deepfault.data.Dataset` in their range.

    Raises:
        DeepFaultError: Unreadable files, no data set named, models that take inputs of
            different shapes, or a data range that a model was not trained on.
    """
    (o1, label1), (o2, label2) = (_open(m, arch=arch, trust_pickle=trust_pickle, runtime=runtime,
                                        arch_kwargs=arch_kwargs) for m in (m1, m2))
    s1, s2 = _native_shape(o1), _native_shape(o2)
    if s1 and s2 and tuple(s1) != tuple(s2):
        raise DeepFaultError(
            f"M1 takes inputs of shape {tuple(s1)} and M2 {tuple(s2)}; regression fuzzing compares two "
            "versions of one classifier, with the same inputs"
        )

    def named(o):
        if isinstance(o, PreparedModel):
            return o.data
        return getattr(o, "dataset", None)

    data = dataset if dataset is not None else named(o1) if named(o1) is not None else named(o2)
    if data is None:
        raise DeepFaultError(f"model file {str(m1)!r} does not name its data set; add --dataset NAME")
    p1 = prepare_model(o1, data, data_dir=data_dir, name=label1)
    p2 = prepare_model(o2, p1.data, data_dir=data_dir, name=label2)
    if p1.bounds is not None and p2.bounds is not None and tuple(p1.bounds) != tuple(p2.bounds):
        raise DeepFaultError(
            f"M1 takes inputs in {tuple(p1.bounds)} and M2 in {tuple(p2.bounds)}; regression fuzzing feeds "
            "the same inputs to both: give two versions of one classifier, with the same input range"
        )
    return p1, p2, p1.data


def experiment_key(config: CampaignConfig, m1, m2, data_name: str, n_inputs: int) -> str:
    """The store key of a campaign: the configuration, both models' weights, the data (16 hex)."""
    text = json.dumps({"config": config.to_dict(), "m1": model_hash(m1), "m2": model_hash(m2),
                       "data": data_name, "n": n_inputs}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@renamed(cell="campaign")
@applies_threads
def regress(
    m1: str | os.PathLike | torch.nn.Module | ModelFile | PreparedModel,
    m2: str | os.PathLike | torch.nn.Module | ModelFile | PreparedModel,
    *,
    dataset: str | os.PathLike | Dataset | InputData | None = None,
    data_dir: str | os.PathLike | None = None,
    labels: LabelData | None = None,
    bounds: tuple[float, float] | None = None,
    store: str | os.PathLike | None = None,
    campaign: str | None = None,
    experiment: str | None = None,
    device: torch.device | str = "cpu",
    progress: Callable[[CampaignProgress], None] | bool | None = None,
    threads: int | str | None = "auto",
    arch: str | None = None,
    arch_kwargs: dict | None = None,
    trust_pickle: bool = False,
    runtime: str = "auto",
    config: CampaignConfig | None = None,
    fresh: bool = False,
    on_store: Callable[[StoreState], None] | None = None,
    **settings: Any,
) -> RegressOutcome:
    """Fuzz the model ``m2`` for regressions against ``m1`` on ``dataset``'s test split.

    Args:
        m1: The original model: a model file (any format ``deepfault run --model`` opens),
            :class:`~deepfault.models.ModelFile`, module or
            :class:`~deepfault.models.prepare.PreparedModel` (see :func:`load_pair`); the
            campaign works in the data set's native layout whatever layout the files take.
        m2: The new model, fuzzed for regressions; in any form ``m1`` takes.
        dataset: Data set name, ``.npz`` file or :class:`~deepfault.data.Dataset` (default:
            the one the model files name); or the seed inputs as a tensor, array,
            ``(inputs, labels)`` pair, torch ``Dataset`` or ``DataLoader``
            (:func:`~deepfault.data.as_dataset`). Those are read whole into memory
            (the campaign draws its seeds from all of them) and serve as the training
            split too: a fidelity check fitted on training inputs (the discriminator,
            ``mdsa``) is fitted on them; give a deepfault ``Dataset`` to keep them apart.
        data_dir: Data root.
        labels: The seed inputs' labels, when ``dataset`` is inputs that do not carry them.
        bounds: ``(lo, hi)``, the inputs' valid range, when ``dataset`` is inputs (default:
            :func:`~deepfault.core.inputs.default_bounds`).
        store: Results store: checkpoints go there and rerunning resumes (``None``: none);
            a finished campaign found there is returned without fuzzing.
        campaign: The campaign's id in the store (default ``STRATEGY-seedS``; ``--campaign``,
            formerly ``cell``).
        experiment: The store's experiment key (default :func:`experiment_key`).
        device: Where the models, mutations and checks run.
        progress: ``True``: a progress line as the command line shows it (redrawn on a
            terminal, logged every 10 s elsewhere); or a callable, called with a
            :class:`~.campaign.CampaignProgress` after every step.
        threads: PyTorch CPU threads for the call, restored afterwards: ``"auto"`` (the
            command line's rule: the free cores for small models on the CPU; the
            ``DEEPFAULT_THREADS`` environment variable sets another default), a count, or
            ``None`` (PyTorch's setting).
        arch: Architecture of plain ``state_dict`` files (:func:`deepfault.models.open_model`).
        arch_kwargs: Its keyword arguments.
        trust_pickle: Allow unpickling a whole pickled ``nn.Module``; only for trusted files.
        runtime: How ``.onnx`` files run (:data:`~deepfault.models.blackbox.RUNTIMES`): ``auto``
            (onnx2torch, or ONNX Runtime for a graph it cannot convert), ``torch``, ``onnxruntime``.
            A black box (ONNX Runtime, LiteRT, a callable) runs DRFuzz; what needs its insides
            is refused first (:func:`check_black_box`).
        fresh: Start the campaign again from the start even when ``store`` holds it (its
            checkpoint or finished result of this configuration is deleted first).
        on_store: Called, before any work, with what the run will do with the store
            (:class:`~.campaign.resume.StoreState`; default: logged at INFO).
        config: A :class:`~.campaign.CampaignConfig`; ``settings`` (``budget``, ``strategy``,
            ``batch``, ``seed``, ``fidelity``, ...) replace its fields. Without either ``config``
            or a ``fidelity`` setting, vectors and sequences get their default check
            (:func:`~.fidelity.checks.default_fidelity`: ``mdsa``), images the discriminator.
        **settings: :class:`~.campaign.CampaignConfig` fields that replace ``config``'s.

    Returns:
        A :class:`RegressOutcome`.
    """
    cell = campaign
    if progress is True:
        progress = _progress_printer()
    elif progress is False:
        progress = None
    settings = _translate("regress", CAMPAIGN_RENAMED, settings)  # before replace() sees both names
    auto_fidelity = config is None and "fidelity" not in settings  # the default of the data's kind
    config = replace(config or CampaignConfig(), **settings) if settings or config is None else config
    surprise_specs(config)  # a bad 'dsa:...' spec is refused before anything is loaded
    device = check_device(device)
    data_arg: str | Dataset | None
    if dataset is None or isinstance(dataset, str):
        data_arg = dataset
    elif isinstance(dataset, os.PathLike):
        data_arg = os.fspath(dataset)
    else:
        data_arg = as_dataset(dataset, labels, bounds=bounds, what="dataset")
    if store is not None:
        check_outputs(("store", store))
    if cell is not None:
        check_name("cell", cell)

    if (isinstance(m1, PreparedModel) and isinstance(m2, PreparedModel) and m1.data is not None
            and m2.data is m1.data and data_arg in (None, m1.data.name)):
        p1, p2, data = m1, m2, m1.data  # a pair load_pair prepared: not again
    else:
        p1, p2, data = load_pair(m1, m2, dataset=data_arg, data_dir=data_dir, arch=arch,
                                 arch_kwargs=arch_kwargs, trust_pickle=trust_pickle, runtime=runtime)
    if config.output_kinds == ("logits", "logits"):
        config = replace(config, output_kinds=(p1.output_kind, p2.output_kind))
    kind = rule_kind(data.input_shape)
    if auto_fidelity and kind != "image":  # no discriminator for vectors and sequences
        config = replace(config, fidelity=default_fidelity(kind))
    names = (p1.name or "M1", p2.name or "M2")
    check_black_box(p1, p2, config)  # before the discriminator, the surprise fit and the store
    model1, model2 = p1.to(device).module, p2.to(device).module
    check_pair(model1, model2, data, config)  # before the store is opened or created
    n_inputs = len(data.x_test) if config.max_seeds is None else min(len(data.x_test), config.max_seeds)
    experiment = experiment or experiment_key(config, model1, model2, data.name, n_inputs)
    cell = cell or f"{config.strategy}-seed{config.seed}"
    state = None
    if store is not None:  # said before any work (the discriminator's first training included)
        state = store_state(store, experiment, cell, config, fresh=fresh)
        (on_store or _log_state)(state)
    _prepare_discriminators(config, data, device, progress=None if progress else False)  # before the store
    _prepare_surprise(config, model1, data, device)  # likewise
    if store is not None:
        with ResultStore(store) as opened, opened.writer():
            if fresh:
                opened.delete_cells(experiment, DRFUZZ_METHOD, cell)
            result = _run(model1, model2, data, config, opened, experiment, cell, progress)
            # the report names the models by their files (the experiment key holds their weights)
            opened.put(experiment, DRFUZZ_METHOD, "models", {"m1": names[0], "m2": names[1]}, replace=True)
    else:
        result = _run(model1, model2, data, config, None, experiment, cell, progress)
    rf = result.faults.kind == 0
    seeds = data.x_test[result.faults.root[rf]] if rf.any() else np.zeros((0, *data.input_shape), np.float32)
    return RegressOutcome(result, experiment, cell, None if store is None else str(store), seeds,
                          tuple(data.class_names), (float(data.bounds[0]), float(data.bounds[1])), names,
                          state)


def _progress_printer() -> Callable[[CampaignProgress], None]:
    """``progress=True``: the command line's progress line, redrawn at most every 0.5 s on a
    terminal, else logged at most every 10 s.
    """
    import sys
    import time

    live = sys.stderr.isatty()
    last = [0.0]

    def show(p: CampaignProgress) -> None:
        now = time.monotonic()
        if now - last[0] >= (0.5 if live else 10.0):
            last[0] = now
            if live:
                print("\r" + progress_line(p).ljust(110)[:160], end="", file=sys.stderr, flush=True)
            else:
                log.info("%s", progress_line(p))
    return show


def _log_state(state: StoreState) -> None:
    log.info("%s", state.line())


def check_pair(m1, m2, data, config: CampaignConfig) -> None:
    """Refuse, on a few test inputs, inputs that are not images, sequences or vectors (the
    mutation rules need them), an image-only check for other inputs, models that compute NaN
    or infinite outputs, that have different numbers of classes, or
    whose layers the criterion cannot read.
    """
    sample = data.x_test[:8]
    x, _ = test_inputs(sample, data.y_test[:8])  # images, sequences or vectors: before the store, too
    kind = rule_kind(x.shape[1:])
    check_fidelity_inputs(config.strategy_spec.check_spec(config), kind)  # SSIM, the GAN: images only
    check_fidelity_inputs(config.shared_fidelity, kind, option="shared fidelity")
    c1, c2 = check_finite_outputs([m1, m2], sample, names=["M1 (--m1)", "M2 (--m2)"])
    if c1 != c2:  # the campaign says the same, but only after the store is opened
        raise DeepFaultError(f"M1 has {c1} classes and M2 {c2}; regression fuzzing compares two versions of "
                             "one classifier")
    layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
    if not config.strategy_spec.reads_m2:
        # DRFuzz reads M2's outputs only: no pass of M2's to check its layers (issue 26), but
        # layers a user names are still checked by name, so a typo is refused before the store
        if layers is not None and not outputs_only(m2):
            resolve_layers(m2, layers)
        return
    for _ in iterate_batches(m2, sample[:2], layers=layers, batch_size=2):
        break


def check_black_box(m1, m2, config: CampaignConfig, *, strategy_option: str = "strategy",
                    fidelity_option: str = "fidelity") -> None:
    """Refuse, before any work, a campaign that needs the insides of a black-box model (an ONNX
    Runtime or LiteRT file, a callable): DeepHunter's coverage keep rule reads M2's neurons, and
    a surprise check (``dsa``, ``lsa``, ``mdsa``) M1's activations. Names what works instead.

    Args:
        m1: M1 (a module, prepared model or model file).
        m2: M2, likewise.
        config: The campaign's configuration.
        strategy_option: How messages name the strategy setting (``--strategy``).
        fidelity_option: How messages name the fidelity setting (``--fidelity``).

    Raises:
        DeepFaultError: One line: which model, what it lacks, and the options that work.
    """
    from ..coverage.surprise import SURPRISE_KINDS
    from ..models.blackbox import outputs_only as black

    reads = config.strategy_spec.reads_m2
    if reads and black(m2):
        raise DeepFaultError(
            f"M2 is a black box (ONNX Runtime, LiteRT, a callable, or compiled TorchScript): "
            f"{config.strategy} needs M2's {reads}, "
            f"which a black box does not have; use {strategy_option} drfuzz, which reads M2's outputs only, "
            "or give M2 as a torch model (a .pt file, or an .onnx file with --runtime torch)")
    surprise = [s for s in (config.strategy_spec.check_spec(config), config.shared_fidelity)
                if s and s.partition(":")[0].strip().lower() in SURPRISE_KINDS]
    if surprise and black(m1):
        raise DeepFaultError(
            f"M1 is a black box (ONNX Runtime, LiteRT, a callable, or compiled TorchScript): it has no "
            f"activations for the surprise "
            f"check {surprise[0]!r}; use {fidelity_option} linf:T, ssim, discriminator (images) or none, or "
            "give M1 as a torch model")


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
    return run_campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, config=config,
                        train_inputs=data.x_train, dataset=data.name, store=store, experiment=experiment,
                        cell=cell, progress=progress, profile=profile)


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
    profile = compute_profile(m2, data.x_train, layers=layers, transform=config.transform_name)
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
    p1, p2, data = load_pair(job["m1"], job["m2"], dataset=job.get("dataset"), data_dir=job.get("data_dir"),
                             runtime=job.get("runtime", "auto"))
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


def progress_line(p: CampaignProgress, *, top: int = 4) -> str:
    """One line for a terminal: elapsed, iterations, #RF, #URF, #Seed, #GF and the busiest rules."""
    shares = sorted(p.rule_shares.items(), key=lambda kv: -kv[1])[:top]
    rules = " ".join(f"{name} {share:.0%}" for name, share in shares if share > 0)
    return (f"{p.elapsed:7.1f}s  it {p.iterations:,}  RF {p.rf:,}  URF {p.urf:,}  Seed {p.seeds:,}  "
            f"GF {p.gf:,}  queue {p.corpus:,}  [{rules}]")


#: The legend of :func:`progress_line`'s abbreviations (``deepfault regress`` prints it once, above them).
PROGRESS_LEGEND = ("it: iterations; RF: generated inputs M1 gets right and M2 wrong; URF: distinct (seed, "
                   "M1 label, M2 label) among them; Seed: seeds with an RF; GF: generated inputs M2 gets "
                   "wrong; queue: inputs kept for mutation; [...]: the most chosen mutation rules")


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
