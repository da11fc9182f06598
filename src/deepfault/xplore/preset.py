"""``deepfault experiment --preset deepxplore-mnist``: DeepXplore's MNIST results (spec section 6).

Every run uses the published MNIST code's settings (``settings=compat``, the default:
:data:`~deepfault.xplore.config.PUBLISHED`: the Table 2 parameters, ``light``, 20
iterations, neurons once per seed, DeepXplore's layers, seeds with replacement, no
clipping), so that its figures compare with what the published code does on the same
models (spec section 6); ``settings=default`` uses this library's defaults instead.

Cells (each one DeepXplore run, written to the store as soon as it is done):

- ``table2/target=J/seed=S``: 2,000 seeds, model ``J`` the target of every seed;
- ``table5/lambda2=L/seed=S``: lambda2 0 against 1 at t 0.25 (target 0 with ``compat``,
  as the published code always fixes one);
- ``figure9/t=T``: a run at threshold ``T`` whose first 100 difference-inducing inputs
  (1% of the test set, as the paper's Figure 9) are compared with 100 random test inputs
  and with FGSM inputs made from those random inputs, by each model's neuron coverage.

Models are DeepXplore's published Keras weights when ``weights_dir`` is given
(``Model1.h5``, ``Model2.h5``, ``Model3.h5`` loaded into the zoo's LeNet-1, LeNet-4 and
LeNet-5), else LeNet-1/4/5 from ``models_dir`` (``lenet1-mnist.pt`` ...), trained with
the zoo's default recipe when missing. Neurons are DeepXplore's layer set (52, 148 and
268 neurons). Every job carries only its seeds, so any executor runs it.

Options (``deepfault experiment --preset deepxplore-mnist --preset-option KEY=VALUE``):
:data:`_OPTIONS`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .._deprecation import moved_names
from ..checks import MAX_INPUTS, MAX_REPEAT
from ..core.constraints import Each, Interval, Options, Text, constraint_of, param, validate
from ..core.runtime import Runtime
from ..experiment.runner import CellOutput, ExperimentPreset, ExperimentSummary, JobOutput, Plan, RunContext
from ..models.fingerprint import fingerprint
from .config import XploreConfig

if TYPE_CHECKING:
    from ..models.io import ModelFile

__all__ = ["DEEPXPLORE_MNIST", "DEEPXPLORE_PRESETS", "DeepXploreMnist", "XplorePresetConfig", "XploreJob",
           "run_job", "run_deepxplore_mnist"]

#: The old names, answering with a deprecation warning.
__getattr__ = moved_names(__name__, {"run_preset": "deepfault.xplore.preset:run_deepxplore_mnist",
                                     "PRESET_NAME": "deepfault.xplore.preset:DEEPXPLORE_MNIST"})


DEEPXPLORE_MNIST = "deepxplore-mnist"
DEEPXPLORE_METHOD = "deepxplore"
ARCHS = ("lenet1", "lenet4", "lenet5")
#: The published weight files, in ``ARCHS`` order.
WEIGHT_FILES = ("Model1.h5", "Model2.h5", "Model3.h5")
SETTINGS = ("compat", "default")
#: Memory one seed of a run takes at least: the seed, its search copy and its gradient, as 28x28
#: float32 images (the models' activations come on top).
SEED_BYTES = 3 * 28 * 28 * 4

#: The preset's options: key -> help.
_OPTIONS = {
    "weights-dir": "folder with DeepXplore's published Model1.h5, Model2.h5, Model3.h5 (LeNet-1/4/5); "
                   "default: trained zoo LeNets",
    "settings": "compat (the published code's, default) or default (this library's defaults)",
    "seeds": "seeds per run (default 2000)",
    "repeats": "runs of Tables 2 and 5 (default 5)",
    "iterations": "steps per seed (default 20)",
}


@dataclass(frozen=True)
class XplorePresetConfig:
    """What the preset runs (recorded in the store; its hash keys the cells).

    Attributes:
        seeds: Seeds per run (the paper's 2,000).
        repeats: Runs of Tables 2 and 5 with different seeds (seed = 0, 1, ...).
        iterations: Steps per seed (the published command's 20).
        figure9_inputs: Inputs per method in Figure 9 (1% of the test set).
        figure9_seeds: Seeds of each Figure 9 run (enough to find ``figure9_inputs``).
        thresholds: The ``t`` of Figure 9.
        fgsm_eps: FGSM step in [0, 1] pixel units (our choice; the paper does not give it).
        layers: Neuron layers (DeepXplore's).
        settings: ``"compat"`` (the published code's) or ``"default"`` (the library's).
        weights_dir: Folder of the published ``Model1.h5`` ... (``None``: trained LeNets).
    """

    seeds: int = param(2000, constraint_of(XploreConfig, "seeds"), help="seeds per run")
    repeats: int = param(5, Interval(int, 1, MAX_REPEAT), help="runs of Tables 2 and 5 (seed = 0, 1, ...)")
    iterations: int = param(20, constraint_of(XploreConfig, "iterations"), help="steps per seed")
    figure9_inputs: int = param(100, Interval(int, 1, MAX_INPUTS), help="inputs per method in Figure 9")
    figure9_seeds: int = param(400, constraint_of(XploreConfig, "seeds"), help="seeds of each Figure 9 run")
    thresholds: tuple[float, ...] = param((0.0, 0.25, 0.5, 0.75),
                                          Each(constraint_of(XploreConfig, "threshold")),
                                          help="the neuron-coverage thresholds t of Figure 9")
    fgsm_eps: float = param(0.3, Interval(float, 0.0), help="FGSM step in [0, 1] pixel units")
    layers: str = param("deepxplore", constraint_of(XploreConfig, "layers"), help="neuron layers")
    settings: str = param("compat", Options(SETTINGS),
                          help="compat (the published code's) or default (this library's defaults)")
    weights_dir: str | None = param(None, Text(none=True),
                                    help="folder of the published Model1.h5 ... (default: trained LeNets)")

    def __post_init__(self):
        validate(self)

    def base(self) -> XploreConfig:
        if self.settings == "compat":
            return XploreConfig.published(seeds=self.seeds, iterations=self.iterations, layers=self.layers)
        return XploreConfig(seeds=self.seeds, iterations=self.iterations, layers=self.layers)

    def with_options(self, options: dict[str, str]) -> XplorePresetConfig:
        """This configuration with ``--preset-option`` values (keys with ``_``) applied.

        Raises:
            DeepFaultError: A value of the wrong kind.
        """
        from ..checks import MAX_GRADIENT_ITERATIONS, check_count_text, check_memory
        from ..errors import DeepFaultError

        limits = {"seeds": MAX_INPUTS, "repeats": MAX_REPEAT, "iterations": MAX_GRADIENT_ITERATIONS}
        counts: dict[str, int] = {}
        settings, weights_dir = self.settings, self.weights_dir
        for key, value in options.items():
            if key in limits:
                counts[key] = check_count_text(f"preset option {key}", value, maximum=limits[key])
                if key == "seeds":  # every run holds its seeds, their found inputs and gradients
                    check_memory("preset option seeds", value, counts[key] * SEED_BYTES,
                                 f"{counts[key]:,} MNIST seeds (with their search state)")
            elif key == "settings":
                if value not in SETTINGS:
                    raise DeepFaultError(f"preset option settings must be one of {', '.join(SETTINGS)}; "
                                         f"got {value!r}")
                settings = value
            elif key == "weights_dir":
                weights_dir = value or None  # empty: not given (trained LeNets)
        return replace(self, seeds=counts.get("seeds", self.seeds),
                       repeats=counts.get("repeats", self.repeats),
                       iterations=counts.get("iterations", self.iterations),
                       settings=settings, weights_dir=weights_dir)

    def to_dict(self) -> dict:
        out = {**self.__dict__, "thresholds": list(self.thresholds)}
        del out["weights_dir"]  # the models' digests identify the weights, wherever they lie
        return out


@dataclass(frozen=True, eq=False)
class XploreJob:
    """One cell: the models, the run's parameters and only the arrays it needs.

    Attributes:
        cell_id: The store key.
        models: The models (picklable modules, moved to ``device`` in the worker).
        names: Their names.
        config: The run's parameters.
        seeds: ``(N, *input)`` seed inputs; ``seed_index`` their test-set indices.
        bounds: Valid input range.
        extra: ``figure9`` cells: ``random`` ``(K, *input)`` inputs, ``labels`` ``(K,)``,
            ``eps`` and ``count``.
    """

    cell_id: str
    models: tuple[nn.Module, ...]
    names: tuple[str, ...]
    config: XploreConfig
    seeds: np.ndarray
    seed_index: np.ndarray
    bounds: tuple[float, float]
    device: str = "cpu"
    extra: dict = field(default_factory=dict)


def _coverage(model: nn.Module, x, layers: str | None, threshold: float) -> dict:
    from ..core.batches import activations
    from ..coverage.criteria import NeuronCoverage

    layout, values = activations(model, x, layers=layers, transform="layer-minmax")
    nc = NeuronCoverage(layout, threshold=threshold)
    nc.update(values)
    return nc.compute().to_dict()


def run_job(job: XploreJob) -> tuple[dict, dict[str, np.ndarray]]:
    """Run one cell on one CPU thread, as the executors' workers do; returns its JSON data and
    arrays (module level: any executor can call it).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_job(job)
    finally:
        torch.set_num_threads(threads)


def _run_job(job: XploreJob) -> tuple[dict, dict[str, np.ndarray]]:
    from ..core.attacks import fgsm
    from .search import search

    models = [m.to(job.device) for m in job.models]
    with warnings.catch_warnings():  # saturation is expected with the published settings; it is recorded
        warnings.simplefilter("ignore", UserWarning)
        result = search(dict(zip(job.names, models, strict=True)), job.seeds,
                        replace(job.config, bounds=job.bounds), seed_index=job.seed_index,
                        runtime=Runtime(threads=None))
    data = result.to_dict()
    f = result.found
    arrays = {"seed_index": f.seed_index, "iteration": f.iteration, "predictions": f.predictions,
              "common_class": f.common_class, "target": f.target, "l1": f.l1, "inputs": f.inputs,
              "seeds": f.seeds, "already_differ_index": result.seed_index[result.already_differ]}
    if job.extra:
        k = job.extra["count"]
        t = job.config.threshold
        gen = f.inputs[:k]
        fig = {"inputs": len(gen), "threshold": t, "eps": job.extra["eps"], "methods": {}}
        random = job.extra["random"][: max(len(gen), 1)]
        labels = job.extra["labels"][: len(random)]
        for name, model in zip(job.names, models, strict=True):
            adv = fgsm(model, random, labels, eps=job.extra["eps"], bounds=job.bounds)
            for method, x in (("deepxplore", gen), ("random", random), ("fgsm", adv)):
                cov = _coverage(model, x, job.config.layers if job.config.layers != "default" else None, t) \
                    if len(x) else {"covered": 0, "total": None, "ratio": 0.0}
                fig["methods"].setdefault(method, {})[name] = cov
        data["figure9"] = fig
        arrays["figure9_random_index"] = job.extra["random_index"][: len(random)]
    return data, arrays


def _weights_folder(weights_dir: str) -> Path:
    """The ``weights-dir`` option's folder, holding the three published weight files."""
    from ..errors import DeepFaultError

    folder = Path(weights_dir)
    missing = [f for f in WEIGHT_FILES if not (folder / f).is_file()]
    if missing:
        raise DeepFaultError(f"weights-dir {str(folder)!r} lacks {', '.join(missing)}; it must hold "
                             f"DeepXplore's {', '.join(WEIGHT_FILES)} (LeNet-1, LeNet-4, LeNet-5)")
    return folder


def _models(models_dir: Path, data, *, progress: bool, device: str,
            weights_dir: str | None = None) -> dict[str, ModelFile]:
    """LeNet-1/4/5: the published weights from ``weights_dir``, else model files from
    ``models_dir``, trained (and saved) when missing.
    """
    from ..models.train import TrainConfig, trained_model

    if weights_dir is not None:
        from ..models.keras_weights import open_keras_weights

        folder = _weights_folder(weights_dir)
        return {arch: open_keras_weights(folder / f, arch=arch, input_shape=tuple(data.input_shape),
                                         dataset="mnist", bounds=tuple(data.bounds))
                for arch, f in zip(ARCHS, WEIGHT_FILES, strict=True)}
    out = {}
    for arch in ARCHS:
        mf = trained_model(arch, data, models_dir / f"{arch}-mnist.pt", TrainConfig(), device=device,
                           progress=progress)
        out[arch] = mf
    return out


def _plan_jobs(config: XplorePresetConfig, data, models: dict, device: str = "cpu") -> list[XploreJob]:
    """Every cell of the preset, in order."""
    from .search import select_seeds

    names = tuple(models)
    modules = tuple(mf.model.cpu() for mf in models.values())
    bounds = (float(data.bounds[0]), float(data.bounds[1]))
    jobs = []

    def seeds_for(cfg: XploreConfig):
        index = select_seeds(len(data.x_test), cfg.seeds, seed=cfg.seed, replace=cfg.replace)
        return data.x_test[index], index

    for s in range(config.repeats):
        for j, name in enumerate(names):
            cfg = replace(config.base(), target=j, seed=s)
            x, idx = seeds_for(cfg)
            jobs.append(XploreJob(f"table2/target={name}/seed={s}", modules, names, cfg, x, idx, bounds,
                                  device))
    for s in range(config.repeats):
        for lam in (0.0, 1.0):
            cfg = replace(config.base(), lambda2=lam, threshold=0.25, seed=s)
            x, idx = seeds_for(cfg)
            jobs.append(XploreJob(f"table5/lambda2={lam:g}/seed={s}", modules, names, cfg, x, idx, bounds,
                                  device))
    rng = np.random.default_rng(np.random.SeedSequence(0, spawn_key=(9,)))
    random_index = rng.choice(len(data.x_test), size=config.figure9_inputs, replace=False)
    for t in config.thresholds:
        cfg = replace(config.base(), threshold=t, seeds=config.figure9_seeds)
        x, idx = seeds_for(cfg)
        extra = {"count": config.figure9_inputs, "eps": config.fgsm_eps, "random": data.x_test[random_index],
                 "labels": data.y_test[random_index], "random_index": random_index}
        jobs.append(XploreJob(f"figure9/t={t:g}", modules, names, cfg, x, idx, bounds, device, extra))
    return jobs


def _job_output(job: XploreJob) -> JobOutput:
    data, arrays = run_job(job)
    return JobOutput([CellOutput(job.cell_id, data, arrays)])


class DeepXploreMnist(ExperimentPreset):
    """DeepXplore's MNIST reproduction (Tables 2 and 5, Figure 9) with LeNet-1/4/5.

    Args:
        config: What to run (default :class:`XplorePresetConfig`; tests use small ones).
    """

    name = DEEPXPLORE_MNIST
    method = DEEPXPLORE_METHOD
    description = ("DeepXplore's MNIST results (Tables 2 and 5, Figure 9) with LeNet-1/4/5, the published "
                   "code's settings")
    job_function = staticmethod(_job_output)
    uses_seed = False
    options = _OPTIONS

    def __init__(self, config: XplorePresetConfig | None = None):
        self.config = config or XplorePresetConfig()

    def check(self, context: RunContext) -> None:
        """The options (bounded counts, the memory the seeds need, the weights folder) before
        the data is loaded or any model is trained.
        """
        config = self.config.with_options(dict(context.options))
        if config.weights_dir is not None:
            _weights_folder(config.weights_dir)

    def plan(self, context: RunContext) -> Plan:
        from ..core.batches import predict
        from ..data import load_dataset

        config = self.config.with_options(dict(context.options))
        data = load_dataset("mnist", data_dir=context.data_dir)
        models = _models(context.models_dir, data, progress=context.progress, device=context.device,
                         weights_dir=config.weights_dir)
        accuracy = {n: float((predict(mf.model, data.x_test).argmax(1).numpy() == data.y_test).mean())
                    for n, mf in models.items()}
        record = {"preset": DEEPXPLORE_MNIST, **config.to_dict(), "base": config.base().to_dict(),
                  "weights": "published" if config.weights_dir else "trained",
                  "dataset": data.name, "bounds": list(data.bounds),
                  "model_digests": {n: fingerprint(mf.model) for n, mf in models.items()}}
        jobs = _plan_jobs(config, data, models, context.device)
        return Plan(DEEPXPLORE_MNIST, record, [j.cell_id for j in jobs], {"model_accuracy": accuracy},
                    accuracy, jobs)

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[XploreJob]:
        wanted = set(todo)
        return [j for j in plan.state if j.cell_id in wanted]


def run_deepxplore_mnist(store_path, *, config: XplorePresetConfig | None = None, **run_args: Any
                         ) -> ExperimentSummary:
    """Run (or resume) the DeepXplore MNIST reproduction: ``DeepXploreMnist(config).run(store_path,
    **run_args)``.

    ``config`` is what to run (default :class:`XplorePresetConfig`; tests use small ones);
    ``run_args`` are :meth:`ExperimentPreset.run <deepfault.experiment.runner.ExperimentPreset.run>`'s
    (``data_dir``, ``models_dir``, ``executor``, ``progress``, ``argv``, ``device``, ``seed``,
    ``options``).
    """
    return DeepXploreMnist(config).run(store_path, **run_args)


#: The presets of this method.
DEEPXPLORE_PRESETS = (DeepXploreMnist(),)
