"""The repair presets (``deepfault experiment --preset NAME``), cells written to the store as
they finish, so a killed run resumes.

``repair-deepxplore-mnist`` (DeepXplore section 7.3, Figure 10): LeNet-1, LeNet-4 and
LeNet-5 (``models_dir``'s ``lenet{1,4,5}-mnist.pt``, as ``deepxplore-mnist`` keeps them,
trained with the zoo's recipe when missing). Per repeat ``R``, one DeepXplore run over the
three models (seed ``R``) gives difference-inducing inputs labelled by the three models'
majority vote (cell ``deepxplore/repeat=R/found``); each model is then fine-tuned on them
and, as baselines, on as many random test inputs and FGSM inputs (cell
``deepxplore/repeat=R/model=M``).

``repair-drfuzz-mnist`` (DRFuzz RQ3): for each scenario (:mod:`deepfault.fuzz.scenarios`,
pairs kept in ``models_dir`` as ``drfuzz-mnist`` keeps them) and seed, a DRFuzz and a
DeepHunter campaign on M2 (cells ``SCENARIO/faults/STRATEGY/seedS``), then M2 fine-tuned on
one strategy's faults and tested on the held-out faults of each strategy (cells
``SCENARIO/repair/train=STRATEGY/seedS``): the README's second table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .config import RepairConfig

__all__ = [
    "METHOD",
    "DEEPXPLORE_PRESET",
    "DRFUZZ_PRESET",
    "DeepXploreRepairConfig",
    "DRFuzzRepairConfig",
    "run_deepxplore_preset",
    "run_drfuzz_preset",
]

log = logging.getLogger(__name__)

METHOD = "repair"
DEEPXPLORE_PRESET = "repair-deepxplore-mnist"
DRFUZZ_PRESET = "repair-drfuzz-mnist"
ARCHS = ("lenet1", "lenet4", "lenet5")


def _as_dict(obj) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(obj).items()}


@dataclass(frozen=True)
class DeepXploreRepairConfig:
    """What ``repair-deepxplore-mnist`` runs (its hash, with the models' weights, keys the cells).

    Attributes:
        repeats: Repeats (DeepXplore run seed and fine-tuning seed ``0 .. repeats - 1``).
        seeds: Seed inputs of each DeepXplore run.
        iterations: Its steps per seed (the published command's 20).
        found_inputs: Difference-inducing inputs kept per repeat (about 100 are fine-tuned on
            after the 30% hold-out, as in Figure 10).
        repair: The fine-tuning (mix, epochs, ...); baselines random test inputs and FGSM.
    """

    repeats: int = 5
    seeds: int = 400
    iterations: int = 20
    found_inputs: int = 143
    repair: RepairConfig = RepairConfig(mix=50.0, baselines=("random-test", "fgsm"))

    def to_dict(self) -> dict:
        return {
            "repeats": self.repeats,
            "seeds": self.seeds,
            "iterations": self.iterations,
            "found_inputs": self.found_inputs,
            "repair": self.repair.to_dict(),
        }


@dataclass(frozen=True)
class DRFuzzRepairConfig:
    """What ``repair-drfuzz-mnist`` runs.

    Attributes:
        arch: M1/M2's architecture.
        scenarios: Regression scenarios.
        strategies: Fuzzers whose faults are crossed.
        seeds: Campaign seeds (and fine-tuning seeds).
        budget: Each campaign's budget (``"60s"``, ``"2000it"``).
        fidelity, criterion, sections: As in ``drfuzz-mnist``.
        epochs, scenario_seed: The scenarios' training (as ``drfuzz-mnist``).
        max_seeds: Candidate seeds of a campaign (``None``: the whole test split).
        threads: PyTorch threads.
        repair: The fine-tuning; ``mix=1`` (as many training inputs as faults) by default.
    """

    arch: str = "lenet5"
    scenarios: tuple[str, ...] = ("supply", "adv-bim")
    strategies: tuple[str, ...] = ("drfuzz", "deephunter")
    seeds: tuple[int, ...] = (0, 1)
    budget: str = "60s"
    fidelity: str = "ssim"
    criterion: str = "kmnc"
    sections: int = 1000
    epochs: int = 3
    scenario_seed: int = 0
    max_seeds: int | None = None
    threads: int | None = 1
    repair: RepairConfig = RepairConfig(mix=1.0, baselines=())

    def to_dict(self) -> dict:
        out = _as_dict(self)
        out["repair"] = self.repair.to_dict()
        return out

    def campaign(self, strategy: str, seed: int):
        from ..fuzz.campaign import CampaignConfig

        params = {"sections": self.sections} if self.criterion == "kmnc" else {}
        return CampaignConfig(
            strategy=strategy,
            budget=self.budget,
            seed=seed,
            fidelity=self.fidelity,
            criterion=self.criterion,
            criterion_params=params,
            max_seeds=self.max_seeds,
        )


@functools.lru_cache(maxsize=2)
def _dataset(name: str, data_dir: str | None):
    from ..data import load_dataset

    return load_dataset(name, data_dir=data_dir)


def _digest(model) -> str:
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _hash(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _run_cells(store, config_hash, jobs, fn, pool, progress: bool, what: str) -> dict:
    """Run the jobs whose cells are not done; put each as it finishes. ``{cell: data}`` of the new ones."""
    done = store.done(config_hash, METHOD)
    todo = [j for j in jobs if j["cell"] not in done]
    out = {}
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), unit=what, dynamic_ncols=True)
    try:
        for index, (data, arrays) in pool.map(fn, todo):
            cell = todo[index]["cell"]
            store.put(config_hash, METHOD, cell, data, arrays)
            out[cell] = data
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return out


def _one_thread(fn):
    @functools.wraps(fn)
    def run(job):
        threads = torch.get_num_threads()
        torch.set_num_threads(job.get("threads") or threads)
        try:
            return fn(job)
        finally:
            torch.set_num_threads(threads)

    return run


# --- repair-deepxplore-mnist ---------------------------------------------------------------------


@_one_thread
def search_job(job: dict) -> tuple[dict, dict]:
    """One DeepXplore run over the three models (a cell ``deepxplore/repeat=R/found``)."""
    from ..xplore.search import search

    models = [m.to(job["device"]) for m in job["models"]]
    r = search(
        models,
        job["x"],
        config=job["config"],
        bounds=job["bounds"],
        seed_index=job["seed_index"],
        names=job["names"],
    )
    f = r.found
    k = job["keep"]
    arrays = {
        "inputs": f.inputs[:k],
        "seed_index": f.seed_index[:k],
        "predictions": f.predictions[:k],
        "common_class": f.common_class[:k],
    }
    data = {
        "seeds": r.num_seeds,
        "already_differ": r.num_already_differ,
        "found": r.num_found,
        "kept": len(f.inputs[:k]),
        "seconds": r.seconds,
        "names": list(job["names"]),
    }
    return data, arrays


@_one_thread
def repair_job(job: dict) -> tuple[dict, dict]:
    """One model fine-tuned on the found inputs and the baselines (a repair cell)."""
    from ..errors import DeepFaultError
    from .protocol import repair

    data = _dataset("mnist", job["data_dir"])
    try:
        result = repair(
            job["model"],
            job["files"],
            dataset=data,
            config=job["repair"],
            device=job["device"],
            train_on=job.get("train_on"),
        )
    except DeepFaultError as err:  # e.g. a campaign that found no fault: recorded, not fatal
        log.warning("%s: %s", job["cell"], err)
        return {"error": str(err)}, {}
    return result.to_dict(), {}


def _xplore_file(arrays: dict, names, repeat: int):
    from .inputs import InputFile

    return InputFile(
        Path(f"deepxplore-repeat{repeat}.npz"),
        "xplore",
        arrays["inputs"],
        arrays["seed_index"],
        predictions=arrays["predictions"],
        model_names=tuple(names),
        common_class=arrays["common_class"],
    )


def run_deepxplore_preset(
    store_path,
    *,
    data_dir=None,
    models_dir=None,
    executor=None,
    progress: bool = False,
    argv=None,
    device: str = "cpu",
    seed: int | None = None,
    config: DeepXploreRepairConfig | None = None,
) -> dict:
    """Run (or resume) ``repair-deepxplore-mnist`` into the store at ``store_path``.

    Args:
        store_path: The SQLite results store (created when missing).
        data_dir: Data root holding MNIST.
        models_dir: Where ``lenet{1,4,5}-mnist.pt`` are (trained there when missing); default
            ``models/`` next to the store.
        executor: An :class:`~deepfault.experiment.executors.Executor` (default serial).
        progress: Progress bars.
        argv: The command line, for provenance.
        device: Where the models run.
        seed: Not used (the repeats' seeds are fixed); accepted for the CLI.
        config: What to run (default :class:`DeepXploreRepairConfig`; tests use small ones).

    Returns:
        ``config_hash``, ``cells_total``, ``cells_run``, ``cells_skipped``, ``seconds``,
        ``model_accuracy``.
    """
    from ..experiment.executors import get_executor
    from ..experiment.store import ResultStore
    from ..models.train import TrainConfig, accuracy, trained_model
    from ..provenance import provenance
    from ..xplore.config import XploreConfig
    from ..xplore.search import select_seeds

    config = config or DeepXploreRepairConfig()
    config.repair.validate()
    if seed is not None:
        log.warning(
            "--seed is ignored by %s: its seeds are fixed (0..%d)", DEEPXPLORE_PRESET, config.repeats - 1
        )
    start = time.perf_counter()
    store_path = Path(store_path)
    models_dir = Path(models_dir) if models_dir is not None else store_path.parent / "models"
    data_dir = None if data_dir is None else str(data_dir)
    data = _dataset("mnist", data_dir)
    models = {
        a: trained_model(
            a, data, models_dir / f"{a}-mnist.pt", TrainConfig(), device=device, progress=progress
        )
        .model.cpu()
        .eval()
        for a in ARCHS
    }
    names = tuple(models)
    acc = {n: accuracy(m, data.x_test, data.y_test) for n, m in models.items()}
    record = {
        "preset": DEEPXPLORE_PRESET,
        **config.to_dict(),
        "dataset": data.name,
        "model_digests": {n: _digest(m) for n, m in models.items()},
    }
    config_hash = _hash(record)
    record["model_accuracy"] = acc
    bounds = tuple(float(b) for b in data.bounds)
    threads = 1
    pool = executor or get_executor("serial")
    search_jobs = []
    for r in range(config.repeats):
        xc = XploreConfig(
            seeds=config.seeds,
            lambda1=1.0,
            lambda2=0.1,
            step=10.0,
            threshold=0.0,
            iterations=config.iterations,
            transform="light",
            layers="deepxplore",
            seed=r,
        )
        index = select_seeds(len(data.x_test), xc.seeds, seed=r)
        search_jobs.append(
            {
                "cell": f"deepxplore/repeat={r}/found",
                "models": tuple(models.values()),
                "names": names,
                "config": xc,
                "x": data.x_test[index],
                "seed_index": index,
                "bounds": bounds,
                "keep": config.found_inputs,
                "device": device,
                "threads": threads,
            }
        )
    try:
        with ResultStore(store_path) as store, store.writer():
            store.begin(config_hash, DEEPXPLORE_PRESET, record, provenance(device, argv=argv), method=METHOD)
            ran = _run_cells(store, config_hash, search_jobs, search_job, pool, progress, "search")
            repair_jobs = []
            for r in range(config.repeats):
                found = store.get(config_hash, METHOD, f"deepxplore/repeat={r}/found")
                file = _xplore_file(found.arrays, names, r)
                for n, m in models.items():
                    repair_jobs.append(
                        {
                            "cell": f"deepxplore/repeat={r}/model={n}",
                            "model": m,
                            "files": [file],
                            "repair": RepairConfig(**{**asdict(config.repair), "seed": r}),
                            "data_dir": data_dir,
                            "device": device,
                            "threads": threads,
                        }
                    )
            ran.update(_run_cells(store, config_hash, repair_jobs, repair_job, pool, progress, "repair"))
    finally:
        if executor is None:
            pool.close()
    total = len(search_jobs) + len(repair_jobs)
    return {
        "config_hash": config_hash,
        "cells_total": total,
        "cells_run": len(ran),
        "cells_skipped": total - len(ran),
        "seconds": time.perf_counter() - start,
        "model_accuracy": acc,
    }


# --- repair-drfuzz-mnist -------------------------------------------------------------------------


@_one_thread
def campaign_job(job: dict) -> tuple[dict, dict]:
    """One fuzzing campaign on M2 (a cell ``SCENARIO/faults/STRATEGY/seedS``); its faults."""
    from ..fuzz.campaign import CampaignConfig, run_campaign
    from ..fuzz.regress import cached_profile, load_pair

    config = CampaignConfig.from_dict(job["config"])
    device = torch.device(job["device"])
    mf1, mf2, data = load_pair(job["m1"], job["m2"], dataset="mnist", data_dir=job["data_dir"])
    m1, m2 = mf1.model.to(device), mf2.model.to(device)
    profile = cached_profile(m2, data, config, job["profile_dir"])
    result = run_campaign(
        m1,
        m2,
        data.x_test,
        data.y_test,
        bounds=data.bounds,
        config=config,
        train_inputs=data.x_train,
        dataset=data.name,
        profile=profile,
    )
    arrays = {
        k: v
        for k, v in result.fault_arrays().items()
        if k in ("inputs", "seed_index", "label", "m1_pred", "m2_pred", "initial")
    }
    return {
        "metrics": result.metrics.to_dict(),
        "iterations": result.iterations,
        "seconds": result.seconds,
        "stop_reason": result.stop_reason,
        "faults": len(arrays["inputs"]),
    }, arrays


def _pair(name: str, config: DRFuzzRepairConfig, data, models_dir: Path, device, progress) -> dict:
    """The scenario's M1/M2 files: reused from ``models_dir`` when made with this recipe."""
    from ..fuzz.scenarios import make_scenario
    from ..models import load_model

    stem = models_dir / f"{name}-{config.arch}-mnist"
    paths = [Path(f"{stem}-m1.pt"), Path(f"{stem}-m2.pt"), Path(f"{stem}.json")]
    if all(p.is_file() for p in paths):
        try:
            record = json.loads(paths[2].read_text(encoding="utf-8"))
            made = load_model(paths[1]).meta.get("scenario", {})
        except (OSError, ValueError):
            made, record = {}, {}
        if (made.get("name"), made.get("seed"), made.get("epochs"), record.get("arch")) == (
            name,
            config.scenario_seed,
            config.epochs,
            config.arch,
        ):
            return {**record, "m1_path": str(paths[0]), "m2_path": str(paths[1])}
    return make_scenario(
        name,
        config.arch,
        data,
        seed=config.scenario_seed,
        epochs=config.epochs,
        out_dir=models_dir,
        device=device,
        progress=progress,
    ).to_dict()


def _faults_file(arrays: dict, strategy: str):
    from .inputs import InputFile

    return InputFile(
        Path(f"{strategy}.npz"),
        "regress",
        arrays["inputs"],
        arrays["seed_index"],
        labels=arrays["label"],
        m1_pred=arrays["m1_pred"],
    )


def run_drfuzz_preset(
    store_path,
    *,
    data_dir=None,
    models_dir=None,
    executor=None,
    progress: bool = False,
    argv=None,
    device: str = "cpu",
    seed: int | None = None,
    config: DRFuzzRepairConfig | None = None,
) -> dict:
    """Run (or resume) ``repair-drfuzz-mnist`` into the store at ``store_path``.

    Args: as :func:`run_deepxplore_preset` (``models_dir`` holds the scenarios' pairs, made
        there when missing), with ``config`` a :class:`DRFuzzRepairConfig`.

    Returns:
        ``config_hash``, ``cells_total``, ``cells_run``, ``cells_skipped``, ``seconds``,
        ``model_accuracy`` (M1 and M2 of each scenario).
    """
    from ..experiment.executors import get_executor
    from ..experiment.store import ResultStore
    from ..models import open_model
    from ..provenance import provenance

    config = config or DRFuzzRepairConfig()
    config.repair.validate()
    if seed is not None:
        log.warning(
            "--seed is ignored by %s: its seeds are fixed (%s)",
            DRFUZZ_PRESET,
            ", ".join(map(str, config.seeds)),
        )
    start = time.perf_counter()
    store_path = Path(store_path)
    models_dir = Path(models_dir) if models_dir is not None else store_path.parent / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    data_dir = None if data_dir is None else str(data_dir)
    data = _dataset("mnist", data_dir)
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    try:
        pairs = {name: _pair(name, config, data, models_dir, device, progress) for name in config.scenarios}
    finally:
        torch.set_num_threads(threads)
    acc = {}
    for name, p in pairs.items():
        acc[f"{name} M1"], acc[f"{name} M2"] = p["m1_accuracy"], p["m2_accuracy"]
    record = {
        "preset": DRFUZZ_PRESET,
        **config.to_dict(),
        "model_digests": {
            n: [_digest(open_model(p["m1_path"]).model), _digest(open_model(p["m2_path"]).model)]
            for n, p in pairs.items()
        },
    }
    config_hash = _hash(record)
    record["scenarios"] = {
        n: {k: p[k] for k in ("label", "m1_accuracy", "m2_accuracy", "regressions", "fixes")}
        for n, p in pairs.items()
    }
    profile_dir = models_dir / "profiles"
    profile_dir.mkdir(parents=True, exist_ok=True)
    campaigns = [
        {
            "cell": f"{n}/faults/{s}/seed{k}",
            "m1": pairs[n]["m1_path"],
            "m2": pairs[n]["m2_path"],
            "config": config.campaign(s, k).to_dict(),
            "data_dir": data_dir,
            "device": device,
            "profile_dir": str(profile_dir),
            "threads": config.threads,
        }
        for n in config.scenarios
        for s in config.strategies
        for k in config.seeds
    ]
    pool = executor or get_executor("serial")
    try:
        with ResultStore(store_path) as store, store.writer():
            store.begin(config_hash, DRFUZZ_PRESET, record, provenance(device, argv=argv), method=METHOD)
            ran = _run_cells(store, config_hash, campaigns, campaign_job, pool, progress, "campaign")
            repairs = []
            for n in config.scenarios:
                m2 = open_model(pairs[n]["m2_path"]).model
                for k in config.seeds:
                    files = [
                        _faults_file(store.get(config_hash, METHOD, f"{n}/faults/{s}/seed{k}").arrays, s)
                        for s in config.strategies
                    ]
                    for i, s in enumerate(config.strategies):
                        repairs.append(
                            {
                                "cell": f"{n}/repair/train={s}/seed{k}",
                                "model": m2,
                                "files": files,
                                "train_on": [i],
                                "repair": RepairConfig(**{**asdict(config.repair), "seed": k}),
                                "data_dir": data_dir,
                                "device": device,
                                "threads": config.threads,
                            }
                        )
            ran.update(_run_cells(store, config_hash, repairs, repair_job, pool, progress, "repair"))
    finally:
        if executor is None:
            pool.close()
    total = len(campaigns) + len(repairs)
    return {
        "config_hash": config_hash,
        "cells_total": total,
        "cells_run": len(ran),
        "cells_skipped": total - len(ran),
        "seconds": time.perf_counter() - start,
        "model_accuracy": acc,
    }


def _register() -> None:
    from ..experiment.presets import PRESETS, register_preset

    if DEEPXPLORE_PRESET not in PRESETS:
        register_preset(
            DEEPXPLORE_PRESET,
            method=METHOD,
            runner=run_deepxplore_preset,
            description="DeepXplore Figure 10: LeNet-1/4/5 fine-tuned on difference-inducing "
            "inputs against random test and FGSM inputs, over repeats",
        )
    if DRFUZZ_PRESET not in PRESETS:
        register_preset(
            DRFUZZ_PRESET,
            method=METHOD,
            runner=run_drfuzz_preset,
            description="DRFuzz RQ3: M2 fine-tuned on DRFuzz's or DeepHunter's regression faults, "
            "tested on each one's held-out faults",
        )


_register()
