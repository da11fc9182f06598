"""The repair presets (``deepfault experiment --preset NAME``), cells written to the store as
they finish, so a killed run resumes.

``repair-deepxplore-mnist`` (DeepXplore section 7.3, Figure 10): LeNet-1, LeNet-4 and
LeNet-5 (``models_dir``'s ``lenet{1,4,5}-mnist.pt``, as ``deepxplore-mnist`` keeps them,
trained with the zoo's recipe when missing). Per repeat ``R``, one DeepXplore run over the
three models (seed ``R``) gives difference-inducing inputs labelled by the three models'
majority vote (cell ``deepxplore/repeat=R/found``); each model is then fine-tuned on them
and, as baselines, on as many random test inputs and FGSM inputs (cell
``deepxplore/repeat=R/model=M``).

``repair-drfuzz-mnist`` (DRFuzz RQ3): for each scenario (:mod:`deepfault.fuzz.pairs.scenarios`,
pairs kept in ``models_dir`` as ``drfuzz-mnist`` keeps them) and seed, a DRFuzz and a
DeepHunter campaign on M2 (cells ``SCENARIO/faults/STRATEGY/seedS``), then M2 fine-tuned on
one strategy's faults and tested on the held-out faults of each strategy (cells
``SCENARIO/repair/train=STRATEGY/seedS``): the README's second table.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ..checks import MAX_INPUTS, MAX_REPEAT
from ..core.constraints import FieldConstraint, Interval, constraint_of, param, validate
from ..experiment.runner import CellOutput, ExperimentPreset, ExperimentSummary, JobOutput, Plan, RunContext
from ..fuzz.campaign.budget import Budget, parse_budget
from ..fuzz.preset import PresetConfig
from ..xplore.config import XploreConfig
from ..xplore.preset import ARCHS
from .config import RepairConfig

__all__ = [
    "REPAIR_METHOD",
    "DEEPXPLORE_PRESET",
    "DRFUZZ_PRESET",
    "DeepXploreRepairConfig",
    "DRFuzzRepairConfig",
    "run_deepxplore_preset",
    "run_drfuzz_preset",
    "RepairDeepXploreMnist",
    "RepairDRFuzzMnist",
    "REPAIR_PRESETS",
]

log = logging.getLogger(__name__)

REPAIR_METHOD = "repair"
DEEPXPLORE_PRESET = "repair-deepxplore-mnist"
DRFUZZ_PRESET = "repair-drfuzz-mnist"


@dataclass(frozen=True)
class _Instance(FieldConstraint):
    """An instance of ``kind`` (a nested config, checked by its own declarations when made)."""

    kind: type
    none: bool = False
    words: tuple[str, ...] = ()

    def accepts(self, value) -> bool:
        return isinstance(value, self.kind)

    def convert(self, text: str):
        raise ValueError(text)  # no text form: a config object

    def expected(self) -> str:
        return f"a {self.kind.__name__}"

    def hostile(self) -> tuple:
        return ("x", 7)


#: A preset's fine-tuning.
_REPAIR = _Instance(RepairConfig)


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

    repeats: int = param(5, Interval(int, 1, MAX_REPEAT),
                         help="repeats (DeepXplore run seed and fine-tuning seed 0 .. repeats - 1)")
    seeds: int = param(400, constraint_of(XploreConfig, "seeds"), help="seed inputs of each DeepXplore run")
    iterations: int = param(20, constraint_of(XploreConfig, "iterations"), help="DeepXplore's steps per seed")
    found_inputs: int = param(143, Interval(int, 1, MAX_INPUTS),
                              help="difference-inducing inputs kept per repeat")
    repair: RepairConfig = param(RepairConfig(mix=50.0, baselines=("random-test", "fgsm")), _REPAIR,
                                 help="the fine-tuning (mix, epochs, ...)")

    def __post_init__(self):
        validate(self)

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
        budget: Each campaign's budget: a :class:`~deepfault.fuzz.campaign.budget.Budget`, or its
            text (``"60s"``, ``"2000it"``), parsed once, here.
        fidelity, criterion, sections: As in ``drfuzz-mnist``.
        epochs, scenario_seed: The scenarios' training (as ``drfuzz-mnist``).
        max_seeds: Candidate seeds of a campaign (``None``: the whole test split).
        threads: PyTorch threads.
        repair: The fine-tuning; ``mix=1`` (as many training inputs as faults) by default.
    """

    arch: str = param("lenet5", constraint_of(PresetConfig, "arch"), help="M1/M2's architecture")
    scenarios: tuple[str, ...] = param(("supply", "adv-bim"), constraint_of(PresetConfig, "scenarios"),
                                       help="regression scenarios")
    strategies: tuple[str, ...] = param(("drfuzz", "deephunter"), constraint_of(PresetConfig, "strategies"),
                                        help="fuzzers whose faults are crossed")
    seeds: tuple[int, ...] = param((0, 1), constraint_of(PresetConfig, "seeds"),
                                   help="campaign seeds (and fine-tuning seeds)")
    budget: Budget = param(Budget("seconds", 60.0), constraint_of(PresetConfig, "budget"),
                           help="each campaign's budget")
    fidelity: str = param("ssim", constraint_of(PresetConfig, "fidelity"), help="DRFuzz's own check")
    criterion: str = param("kmnc", constraint_of(PresetConfig, "criterion"),
                           help="DeepHunter's coverage criterion of M2")
    sections: int = param(1000, constraint_of(PresetConfig, "sections"), help="KMNC's sections")
    epochs: int = param(3, constraint_of(PresetConfig, "epochs"),
                        help="training epochs of the scenarios' models")
    scenario_seed: int = param(0, constraint_of(PresetConfig, "scenario_seed"),
                               help="seed of the scenarios' training")
    max_seeds: int | None = param(None, constraint_of(PresetConfig, "max_seeds"),
                                  help="candidate seeds of a campaign (default: the whole test split)")
    threads: int | None = param(1, constraint_of(PresetConfig, "threads"), help="PyTorch threads")
    repair: RepairConfig = param(RepairConfig(mix=1.0, baselines=()), _REPAIR,
                                 help="the fine-tuning (mix=1: as many training inputs as faults)")

    def __post_init__(self):
        object.__setattr__(self, "budget", parse_budget(self.budget))  # the one place text is parsed
        validate(self)

    def to_dict(self) -> dict:
        out = _as_dict(self)
        out["budget"] = str(self.budget)  # the text, as the store keys have always hashed it
        out["repair"] = self.repair.to_dict()
        return out

    def campaign(self, strategy: str, seed: int):
        from ..fuzz.campaign import CampaignConfig

        params = (("sections", self.sections),) if self.criterion == "kmnc" else ()
        return CampaignConfig(
            strategy=strategy,
            budget=self.budget,
            seed=seed,
            fidelity=self.fidelity,
            criteria=self.criterion,
            criterion_params=params,
            max_seeds=self.max_seeds,
        )


@functools.lru_cache(maxsize=2)
def _dataset(name: str, data_dir: str | None):
    from ..data import load_dataset

    return load_dataset(name, data_dir=data_dir)


def _mnist(context: RunContext):
    """MNIST from the run's data root, and that root as the jobs take it (a string or ``None``)."""
    data_dir = None if context.data_dir is None else str(context.data_dir)
    return _dataset("mnist", data_dir), data_dir


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
    from dataclasses import replace

    from ..core.runtime import Runtime
    from ..errors import DeepFaultError
    from ..models.prepare import prepare_model
    from .protocol import repair

    data = _dataset("mnist", job["data_dir"])
    try:
        config = replace(job["repair"], train_on=job.get("train_on"))
        result = repair(prepare_model(job["model"], data), job["files"], config,
                        runtime=Runtime(device=str(job["device"])))
    except DeepFaultError as err:  # e.g. a campaign that found no fault: recorded, not fatal
        log.warning("%s: %s", job["cell"], err)
        return {"error": str(err)}, {}
    return result.to_dict(), {}


def _stored(context, experiment: str, cell: str) -> dict:
    """The arrays of a cell an earlier stage of the plan stored (an error when it is missing)."""
    from ..errors import DeepFaultError

    record = None if context.store is None else context.store.get(experiment, REPAIR_METHOD, cell)
    if record is None:
        raise DeepFaultError(f"cell {cell!r} of experiment {experiment} is not in the store; rerun the "
                             "preset")
    return record.arrays


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


def _job(job: dict) -> JobOutput:
    """One job of either repair preset: a search, a campaign or a repair, by ``job["kind"]``."""
    run = {"search": search_job, "campaign": drfuzz_job, "repair": repair_job}[job["kind"]]
    data, arrays = run(job)
    return JobOutput([CellOutput(job["cell"], data, arrays)])


class _RepairPreset(ExperimentPreset):
    """What both repair presets share: the method, the one job function, the configuration.

    Args:
        config: What to run (default: :attr:`config_type`'s defaults; tests use small ones).
    """

    method = REPAIR_METHOD
    job_function = staticmethod(_job)
    uses_seed = False
    #: The configuration's class.
    config_type: type = type(None)

    def __init__(self, config=None):
        self.config = config or self.config_type()

    def check(self, context: RunContext) -> None:
        self.config.repair.validate()


class RepairDeepXploreMnist(_RepairPreset):
    """``repair-deepxplore-mnist``: Figure 10's three approaches on the three LeNets, over repeats.

    Two stages: the DeepXplore runs (``deepxplore/repeat=R/found``), then each model fine-tuned
    on a run's found inputs and the baselines (``deepxplore/repeat=R/model=M``).
    """

    name = DEEPXPLORE_PRESET
    description = (
        "DeepXplore Figure 10: LeNet-1/4/5 fine-tuned on difference-inducing inputs against "
        "random test and FGSM inputs, over repeats"
    )
    config_type = DeepXploreRepairConfig

    def plan(self, context: RunContext) -> Plan:
        from ..models.fingerprint import fingerprint
        from ..models.train import TrainConfig, accuracy, trained_model

        config = self.config
        data, data_dir = _mnist(context)
        models = {
            a: trained_model(
                a,
                data,
                context.models_dir / f"{a}-mnist.pt",
                TrainConfig(),
                device=context.device,
                progress=context.progress,
            )
            .model.cpu()
            .eval()
            for a in ARCHS
        }
        acc = {n: accuracy(m, data.x_test, data.y_test) for n, m in models.items()}
        record = {
            "preset": DEEPXPLORE_PRESET,
            **config.to_dict(),
            "dataset": data.name,
            "model_digests": {n: fingerprint(m) for n, m in models.items()},
        }
        found = [f"deepxplore/repeat={r}/found" for r in range(config.repeats)]
        repaired = [f"deepxplore/repeat={r}/model={n}" for r in range(config.repeats) for n in models]
        return Plan(
            DEEPXPLORE_PRESET,
            record,
            found + repaired,
            {"model_accuracy": acc},
            acc,
            {"data": data, "data_dir": data_dir, "models": models},
            stages=[found, repaired],
        )

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[dict]:
        from ..xplore.search import select_seeds

        config, data, models = self.config, plan.state["data"], plan.state["models"]
        names, wanted, jobs = tuple(models), set(todo), []
        for r in range(config.repeats):
            cell = f"deepxplore/repeat={r}/found"
            if cell in wanted:
                xc = XploreConfig(
                    seeds=config.seeds,
                    lambda1=1.0,
                    lambda2=0.1,
                    step_size=10.0,
                    threshold=0.0,
                    iterations=config.iterations,
                    transform="light",
                    layers="deepxplore",
                    seed=r,
                )
                index = select_seeds(len(data.x_test), xc.seeds, seed=r)
                jobs.append(
                    {
                        "kind": "search",
                        "cell": cell,
                        "models": tuple(models.values()),
                        "names": names,
                        "config": xc,
                        "x": data.x_test[index],
                        "seed_index": index,
                        "bounds": tuple(float(b) for b in data.bounds),
                        "keep": config.found_inputs,
                        "device": context.device,
                        "threads": 1,
                    }
                )
            for n, m in models.items():
                cell = f"deepxplore/repeat={r}/model={n}"
                if cell not in wanted:
                    continue
                found = _stored(context, experiment, f"deepxplore/repeat={r}/found")
                jobs.append(
                    {
                        "kind": "repair",
                        "cell": cell,
                        "model": m,
                        "files": [_xplore_file(found, names, r)],
                        "repair": RepairConfig(**{**asdict(config.repair), "seed": r}),
                        "data_dir": plan.state["data_dir"],
                        "device": context.device,
                        "threads": 1,
                    }
                )
        return jobs


def run_deepxplore_preset(store_path, *, config: DeepXploreRepairConfig | None = None, **run_args: Any
                          ) -> ExperimentSummary:
    """Run (or resume) ``repair-deepxplore-mnist``: ``RepairDeepXploreMnist(config).run(store_path,
    **run_args)``, the arguments :meth:`~deepfault.experiment.runner.ExperimentPreset.run`'s.
    """
    return RepairDeepXploreMnist(config).run(store_path, **run_args)


# --- repair-drfuzz-mnist -------------------------------------------------------------------------


@_one_thread
def drfuzz_job(job: dict) -> tuple[dict, dict]:
    """One fuzzing campaign on M2 (a cell ``SCENARIO/faults/STRATEGY/seedS``); its faults."""
    from ..fuzz.campaign import CampaignConfig, CampaignOptions, run_campaign
    from ..fuzz.regress import cached_profile, load_pair

    config = CampaignConfig.from_dict(job["config"])
    device = torch.device(job["device"])
    mf1, mf2, data = load_pair(job["m1"], job["m2"], dataset=_dataset("mnist", job["data_dir"]))
    m1, m2 = mf1.model.to(device), mf2.model.to(device)
    profile = cached_profile(m2, data, config, job["profile_dir"])
    result = run_campaign(
        m1,
        m2,
        data.x_test,
        data.y_test,
        bounds=data.bounds,
        config=config,
        options=CampaignOptions(train_inputs=data.x_train, dataset=data.name, profile=profile),
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
    from ..fuzz.pairs.scenarios import ScenarioContext, make_scenario
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
        context=ScenarioContext(
            seed=config.scenario_seed,
            epochs=config.epochs,
            device=device,
            progress=progress,
        ),
        out_dir=models_dir,
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


class RepairDRFuzzMnist(_RepairPreset):
    """``repair-drfuzz-mnist``: RQ3's cross table for the scenarios the DRFuzz preset makes.

    Two stages: one campaign per scenario, strategy and seed (``SCENARIO/faults/STRATEGY/seedS``),
    then M2 fine-tuned on each strategy's faults and tested on every strategy's held-out
    faults (``SCENARIO/repair/train=STRATEGY/seedS``).
    """

    name = DRFUZZ_PRESET
    description = (
        "DRFuzz RQ3: M2 fine-tuned on DRFuzz's or DeepHunter's regression faults, tested on "
        "each one's held-out faults"
    )
    config_type = DRFuzzRepairConfig

    def plan(self, context: RunContext) -> Plan:
        from ..models import open_model
        from ..models.fingerprint import fingerprint

        config = self.config
        context.models_dir.mkdir(parents=True, exist_ok=True)
        data, data_dir = _mnist(context)
        threads = torch.get_num_threads()
        if config.threads:
            torch.set_num_threads(config.threads)
        try:
            pairs = {
                name: _pair(name, config, data, context.models_dir, context.device, context.progress)
                for name in config.scenarios
            }
        finally:
            torch.set_num_threads(threads)
        acc = {}
        for name, p in pairs.items():
            acc[f"{name} M1"], acc[f"{name} M2"] = p["m1_accuracy"], p["m2_accuracy"]
        record = {
            "preset": DRFUZZ_PRESET,
            **config.to_dict(),
            "model_digests": {
                n: [fingerprint(open_model(p["m1_path"]).model), fingerprint(open_model(p["m2_path"]).model)]
                for n, p in pairs.items()
            },
        }
        scenarios = {
            n: {k: p[k] for k in ("label", "m1_accuracy", "m2_accuracy", "regressions", "fixes")}
            for n, p in pairs.items()
        }
        faults = [
            f"{n}/faults/{s}/seed{k}"
            for n in config.scenarios
            for s in config.strategies
            for k in config.seeds
        ]
        repairs = [
            f"{n}/repair/train={s}/seed{k}"
            for n in config.scenarios
            for k in config.seeds
            for s in config.strategies
        ]
        return Plan(
            DRFUZZ_PRESET,
            record,
            faults + repairs,
            {"scenarios": scenarios},
            acc,
            {"pairs": pairs, "data_dir": data_dir},
            stages=[faults, repairs],
        )

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[dict]:
        from ..models import open_model

        config, pairs, wanted, jobs = self.config, plan.state["pairs"], set(todo), []
        profile_dir = context.models_dir / "profiles"
        for n in config.scenarios:
            for s in config.strategies:
                for k in config.seeds:
                    if f"{n}/faults/{s}/seed{k}" in wanted:
                        profile_dir.mkdir(parents=True, exist_ok=True)
                        jobs.append(
                            {
                                "kind": "campaign",
                                "cell": f"{n}/faults/{s}/seed{k}",
                                "m1": pairs[n]["m1_path"],
                                "m2": pairs[n]["m2_path"],
                                "config": config.campaign(s, k).to_dict(),
                                "data_dir": plan.state["data_dir"],
                                "device": context.device,
                                "profile_dir": str(profile_dir),
                                "threads": config.threads,
                            }
                        )
            m2 = None
            for k in config.seeds:
                for i, s in enumerate(config.strategies):
                    cell = f"{n}/repair/train={s}/seed{k}"
                    if cell not in wanted:
                        continue
                    m2 = m2 or open_model(pairs[n]["m2_path"]).model
                    files = [
                        _faults_file(_stored(context, experiment, f"{n}/faults/{t}/seed{k}"), t)
                        for t in config.strategies
                    ]
                    jobs.append(
                        {
                            "kind": "repair",
                            "cell": cell,
                            "model": m2,
                            "files": files,
                            "train_on": [i],
                            "repair": RepairConfig(**{**asdict(config.repair), "seed": k}),
                            "data_dir": plan.state["data_dir"],
                            "device": context.device,
                            "threads": config.threads,
                        }
                    )
        return jobs


def run_drfuzz_preset(store_path, *, config: DRFuzzRepairConfig | None = None, **run_args: Any
                      ) -> ExperimentSummary:
    """Run (or resume) ``repair-drfuzz-mnist``: ``RepairDRFuzzMnist(config).run(store_path,
    **run_args)``, the arguments :meth:`~deepfault.experiment.runner.ExperimentPreset.run`'s
    (``models_dir`` holds the scenarios' pairs, made there when missing).
    """
    return RepairDRFuzzMnist(config).run(store_path, **run_args)


#: The presets of this method.
REPAIR_PRESETS = (RepairDeepXploreMnist(), RepairDRFuzzMnist())
