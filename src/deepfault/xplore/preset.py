"""``deepfault experiment --preset deepxplore-mnist``: DeepXplore's MNIST results (spec section 6).

Cells (each one DeepXplore run, written to the store as soon as it is done):

- ``table2/target=J/seed=S``: the Table 2 parameters (lambda1 1, lambda2 0.1, s 10, t 0),
  ``light``, 20 iterations, 2,000 seeds, model ``J`` the target of every seed;
- ``table5/lambda2=L/seed=S``: lambda2 0 against 1 at t 0.25, random targets;
- ``figure9/t=T``: a run at threshold ``T`` whose first 100 difference-inducing inputs
  (1% of the test set, as the paper's Figure 9) are compared with 100 random test inputs
  and with FGSM inputs made from those random inputs, by each model's neuron coverage.

Models are LeNet-1, LeNet-4 and LeNet-5 from ``models_dir`` (``lenet1-mnist.pt`` ...),
trained with the zoo's default recipe when missing. Neurons are DeepXplore's layer set
(52, 148 and 268 neurons). Every job carries only its seeds, so any executor runs it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..experiment.runner import CellOutput, ExperimentPreset, ExperimentSummary, JobOutput, Plan, RunContext
from ..models.fingerprint import fingerprint
from .config import XploreConfig

__all__ = ["PRESET_NAME", "PRESETS", "DeepXploreMnist", "PresetConfig", "XploreJob", "run_job", "run_preset",
           "plan_jobs"]

log = logging.getLogger(__name__)

PRESET_NAME = "deepxplore-mnist"
METHOD = "deepxplore"
ARCHS = ("lenet1", "lenet4", "lenet5")


@dataclass(frozen=True)
class PresetConfig:
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
    """

    seeds: int = 2000
    repeats: int = 5
    iterations: int = 20
    figure9_inputs: int = 100
    figure9_seeds: int = 400
    thresholds: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    fgsm_eps: float = 0.3
    layers: str = "deepxplore"

    def base(self) -> XploreConfig:
        return XploreConfig(seeds=self.seeds, lambda1=1.0, lambda2=0.1, step=10.0, threshold=0.0,
                            iterations=self.iterations, transform="light", layers=self.layers)

    def to_dict(self) -> dict:
        return {**self.__dict__, "thresholds": list(self.thresholds)}


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


def _coverage(model: nn.Module, x, layers: str, threshold: float) -> dict:
    from ..core.batches import activations
    from ..coverage.criteria import NeuronCoverage

    layout, values = activations(model, x, layers=layers, transform="layer-minmax")
    nc = NeuronCoverage(layout, threshold=threshold)
    nc.update(values)
    return nc.compute().to_dict()


def run_job(job: XploreJob) -> tuple[dict, dict[str, np.ndarray]]:
    """Run one cell on one CPU thread, as the executors' workers do; returns its JSON data and
    arrays (module level: any executor can call it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_job(job)
    finally:
        torch.set_num_threads(threads)


def _run_job(job: XploreJob) -> tuple[dict, dict[str, np.ndarray]]:
    from .fgsm import fgsm
    from .search import search

    models = [m.to(job.device) for m in job.models]
    result = search(models, job.seeds, config=job.config, bounds=job.bounds, seed_index=job.seed_index,
                    names=job.names)
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


def _models(models_dir: Path, data, *, progress: bool, device: str) -> dict[str, object]:
    """LeNet-1/4/5 model files from ``models_dir``, trained (and saved) when missing."""
    from ..models.train import TrainConfig, trained_model

    out = {}
    for arch in ARCHS:
        mf = trained_model(arch, data, models_dir / f"{arch}-mnist.pt", TrainConfig(), device=device,
                           progress=progress)
        out[arch] = mf
    return out


def plan_jobs(config: PresetConfig, data, models: dict, device: str = "cpu") -> list[XploreJob]:
    """Every cell of the preset, in order."""
    from .search import select_seeds

    names = tuple(models)
    modules = tuple(mf.model.cpu() for mf in models.values())
    bounds = tuple(float(b) for b in data.bounds)
    jobs = []

    def seeds_for(cfg: XploreConfig):
        index = select_seeds(len(data.x_test), cfg.seeds, seed=cfg.seed)
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
        config: What to run (default :class:`PresetConfig`; tests use small ones).
    """

    name = PRESET_NAME
    method = METHOD
    description = "DeepXplore's MNIST results (Tables 2 and 5, Figure 9) with LeNet-1/4/5"
    job_function = _job_output

    def __init__(self, config: PresetConfig | None = None):
        self.config = config or PresetConfig()

    def plan(self, context: RunContext) -> Plan:
        from ..core.batches import predict
        from ..data import load_dataset

        config = self.config
        if context.seed is not None:
            log.warning("--seed is ignored by %s: its seeds are fixed (0..%d)", PRESET_NAME,
                        config.repeats - 1)
        data = load_dataset("mnist", data_dir=context.data_dir)
        models = _models(context.models_dir, data, progress=context.progress, device=context.device)
        accuracy = {n: float((predict(mf.model, data.x_test).argmax(1).numpy() == data.y_test).mean())
                    for n, mf in models.items()}
        record = {"preset": PRESET_NAME, **config.to_dict(), "base": config.base().to_dict(),
                  "dataset": data.name, "bounds": list(data.bounds),
                  "model_digests": {n: fingerprint(mf.model) for n, mf in models.items()}}
        jobs = plan_jobs(config, data, models, context.device)
        return Plan(PRESET_NAME, record, [j.cell_id for j in jobs], {"model_accuracy": accuracy}, accuracy,
                    jobs)

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[XploreJob]:
        wanted = set(todo)
        return [j for j in plan.state if j.cell_id in wanted]


def run_preset(store_path, *, data_dir=None, models_dir=None, executor=None, progress: bool = False,
               argv=None, device: str = "cpu", seed: int | None = None,
               config: PresetConfig | None = None) -> ExperimentSummary:
    """Run (or resume) the DeepXplore MNIST reproduction; see :meth:`ExperimentPreset.run
    <deepfault.experiment.runner.ExperimentPreset.run>` for the arguments.

    Args:
        config: What to run (default :class:`PresetConfig`; tests use small ones).
    """
    return DeepXploreMnist(config).run(store_path, data_dir=data_dir, models_dir=models_dir,
                                       executor=executor, progress=progress, argv=argv, device=device,
                                       seed=seed)


#: The presets of this method.
PRESETS = (DeepXploreMnist(),)
