"""``deepfault experiment --preset drfuzz-mnist``: DRFuzz against DeepHunter on MNIST LeNet-5.

For each regression scenario of the published table (``supply``, ``adv-bim``, ``adv-cw``,
``fixing``, ``prune``; :mod:`.pairs.scenarios`) the ``M1``/``M2`` pair is made once in
``models_dir`` (reused when there), or taken from the user's own files (``pairs_dir``:
``supply-m1.h5``/``supply-m2.h5``, ... in any format ``deepfault run`` opens), then DRFuzz
and DeepHunter each run one campaign per seed under the same wall-clock budget, with one
fidelity filter (the discriminator by default) applied to every executed mutant of both,
on top of each one's own check (spec section 6). ``drfuzz-fashion-mnist`` does the same on
Fashion-MNIST with the AlexNet-style ``alexnet_fm``.

Options (``deepfault experiment --preset drfuzz-mnist --preset-option KEY=VALUE``):
:data:`_OPTIONS`; ``pairs=DIR`` names the folder of the user's own pairs (also read from
``$DEEPFAULT_DRFUZZ_PAIRS``). From Python, ``run_drfuzz_mnist(store, options={"pairs": "my-pairs"})``
or ``config=PresetConfig(pairs_dir="my-pairs")``.

Every campaign is one executor job that checkpoints into the store and writes its result
there, so a killed or interrupted preset resumes where it stopped and finished campaigns are
skipped. ``deepfault report STORE`` then writes the comparison
table with the README's MNIST rows (:mod:`.report`).

Cells: ``SCENARIO/STRATEGY/seedS`` (``.../result``, ``.../checkpoint`` and the chunks).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .._deprecation import moved_names
from ..checks import MAX_REPEAT, MAX_SECTIONS, MAX_THREADS, without_repeats
from ..core.constraints import EPOCHS, SEED, Each, Interval, Options, Text, constraint_of, param, validate
from ..errors import DeepFaultError
from ..experiment.runner import ExperimentPreset, ExperimentSummary, JobOutput, Plan, RunContext
from .campaign import DEFAULT_BATCH, CampaignConfig
from .campaign.budget import Budget, parse_budget
from .campaign.checkpoint import DRFUZZ_METHOD
from .campaign.strategies import STRATEGIES
from .pairs.scenarios import list_scenarios

__all__ = ["FASHION_PRESET", "PAIRS_ENV", "DRFUZZ_MNIST", "DRFUZZ_PRESETS", "DRFuzzFashion", "DRFuzzMnist",
           "PresetConfig", "run_drfuzz_mnist"]

log = logging.getLogger(__name__)

#: The old names, answering with a deprecation warning.
__getattr__ = moved_names(__name__, {"run_preset": "deepfault.fuzz.preset:run_drfuzz_mnist",
                                     "PRESET_NAME": "deepfault.fuzz.preset:DRFUZZ_MNIST"})

DRFUZZ_MNIST = "drfuzz-mnist"
#: The environment variable naming a folder of the user's own M1/M2 pairs.
PAIRS_ENV = "DEEPFAULT_DRFUZZ_PAIRS"

#: The preset's options: key -> help.
_OPTIONS = {
    "pairs": "folder of your own pairs SCENARIO-m1.EXT/SCENARIO-m2.EXT, e.g. supply-m1.h5 and supply-m2.h5 "
             f"(any format 'deepfault run' opens; default: ${PAIRS_ENV}, else the scenarios are made)",
    "scenarios": "comma-separated scenarios (default: supply,adv-bim,adv-cw,fixing,prune)",
    "seeds": "comma-separated campaign seeds (default: 0,1,2)",
    "budget": "each campaign's fuzzing budget, e.g. 50s or 5000it (default: 50s)",
    "max-seeds": "use only the first N test inputs as candidate seeds (default: all)",
    "fidelity": "DRFuzz's own check (default: discriminator; any 'regress --fidelity' spec)",
    "shared-fidelity": "the filter applied to both strategies (default: the fidelity; 'none' for none)",
}


#: The preset's list fields, and why a repeated value is dropped from each.
_LISTS = {"scenarios": "each scenario is run once", "strategies": "each strategy is run once",
          "seeds": "a repeated seed repeats its campaigns exactly"}


@dataclass(frozen=True)
class PresetConfig:
    """What the preset runs (its hash, with the models' weights, keys the store's cells).

    Attributes:
        arch: The zoo architecture of M1 and M2.
        dataset: ``mnist`` or ``fashion-mnist``.
        scenarios: Regression scenarios (:func:`~.pairs.scenarios.list_scenarios`).
        strategies: Fuzzing strategies compared under the same budget.
        seeds: One campaign per seed and strategy.
        budget: Each campaign's budget (fuzzing time; the seeds' evaluation is not counted): a
            :class:`~.campaign.budget.Budget`, or its text (``"50s"``), parsed once, here.
        batch: Selected inputs per step.
        fidelity: DRFuzz's check (``"discriminator"``: the data set's, trained on first use
            and cached; or any ``--fidelity`` spec).
        shared_fidelity: The one filter applied to every executed mutant of both
            strategies (default: the same as ``fidelity``); ``"none"`` for none.
        pairs_dir: A folder with the user's own pairs ``SCENARIO-m1.EXT``/``SCENARIO-m2.EXT``
            (default: ``$DEEPFAULT_DRFUZZ_PAIRS``; without one the scenarios are made).
        criterion, sections: DeepHunter's coverage criterion of M2 (KMNC with 1,000 sections,
            as in DRFuzz's DeepHunter runs) and its parameter.
        epochs: Training epochs of the scenarios' models.
        scenario_seed: Seed of the scenarios' training.
        threads: PyTorch threads per campaign (1 avoids thrashing a busy machine).
    """

    arch: str = param("lenet5", Text(), help="the architecture of M1 and M2 (a zoo name or any --arch form; "
                      "checked when the scenarios are made)")
    dataset: str = param("mnist", Text(), help="the data set the scenarios are made on (a registered name or "
                         "an .npz file; checked when loaded)")
    scenarios: tuple[str, ...] = param(("supply", "adv-bim", "adv-cw", "fixing", "prune"),
                                       Each(Options(list_scenarios)), help="regression scenarios")
    strategies: tuple[str, ...] = param(("drfuzz", "deephunter"), Each(Options(STRATEGIES.names)),
                                        help="fuzzing strategies compared under the same budget")
    seeds: tuple[int, ...] = param((0, 1, 2), Each(SEED, max_items=MAX_REPEAT),
                                   help="campaign seeds: one campaign per seed and strategy")
    budget: Budget = param(Budget("seconds", 50.0), constraint_of(CampaignConfig, "budget"),
                           help="each campaign's fuzzing budget")
    batch: int = param(DEFAULT_BATCH, constraint_of(CampaignConfig, "inputs_per_step"),
                       help="selected inputs per step")
    fidelity: str = param("discriminator", constraint_of(CampaignConfig, "fidelity"),
                          help="DRFuzz's own check (any --fidelity spec)")
    shared_fidelity: str | None = param(None, constraint_of(CampaignConfig, "shared_fidelity"),
                                        help="the filter applied to both strategies (default: the fidelity; "
                                        "'none' for none)")
    pairs_dir: str | None = param(None, Text(none=True), help="folder of the user's own pairs")
    criterion: str = param("kmnc", constraint_of(CampaignConfig, "criteria"),
                           help="DeepHunter's coverage criterion of M2")
    sections: int = param(1000, Interval(int, 1, MAX_SECTIONS), help="KMNC's sections")
    epochs: int = param(3, EPOCHS, help="training epochs of the scenarios' models")
    scenario_seed: int = param(0, SEED, help="seed of the scenarios' training")
    threads: int | None = param(1, Interval(int, 1, MAX_THREADS, none=True),
                                help="PyTorch threads per campaign (None: PyTorch's default)")
    max_seeds: int | None = param(None, constraint_of(CampaignConfig, "max_seeds"),
                                  help="use only the first N test inputs as candidate seeds")

    def __post_init__(self):
        object.__setattr__(self, "budget", parse_budget(self.budget))  # the one place text is parsed
        validate(self)
        for name in _LISTS:  # a repeat ran its campaigns twice and counted them twice (issue 43)
            object.__setattr__(self, name, without_repeats(name, getattr(self, name), why=_LISTS[name]))

    def with_options(self, options: dict[str, str], *, note: bool = True) -> PresetConfig:
        """This configuration with ``--preset-option`` values (keys with ``_``) applied.

        Args:
            options: The options, by name.
            note: Log a warning for each list option with repeated values (dropped either way);
                ``False`` for a second reading of the same options.

        Raises:
            DeepFaultError: A value of the wrong kind.
        """
        from ..checks import MAX_INPUTS, MAX_SEED, check_count_text
        from .pairs.scenarios import SCENARIOS

        def bad(key, want, value):
            return DeepFaultError(f"preset option {key.replace('_', '-')} must be {want}; got {value!r}")

        out: dict = {}
        for key, value in options.items():
            if key == "pairs":
                out["pairs_dir"] = value or None  # empty: not given
            elif key == "scenarios":
                names = tuple(v.strip() for v in value.split(",") if v.strip())
                unknown = [n for n in names if n not in SCENARIOS.names()]
                if not names or unknown:
                    raise bad(key, f"a comma-separated list of {', '.join(SCENARIOS.names())}", value)
                out[key] = names
            elif key == "seeds":
                parts = [v.strip() for v in value.split(",")]
                if not all(p.isdigit() for p in parts):
                    raise bad(key, "comma-separated integers >= 0, e.g. 0,1,2", value)
                if len(parts) > MAX_REPEAT:
                    raise bad(key, f"at most {MAX_REPEAT:,} seeds", len(parts))
                out[key] = tuple(check_count_text("preset option seeds", p, minimum=0, maximum=MAX_SEED)
                                 for p in parts)
            elif key == "budget":
                out[key] = value  # parsed by __post_init__, whose message names the accepted forms
            elif key == "max_seeds":
                out[key] = check_count_text("preset option max-seeds", value, maximum=MAX_INPUTS)
            elif key in ("fidelity", "shared_fidelity"):
                out[key] = value
        for key in [k for k in _LISTS if k in out]:
            out[key] = (without_repeats(f"preset option {key}", out[key], why=_LISTS[key]) if note
                        else tuple(dict.fromkeys(out[key])))
        return replace(self, **out)

    def to_dict(self) -> dict:
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        out["budget"] = str(self.budget)
        out.pop("pairs_dir")  # where the files are does not change a result; their digests are recorded
        return out

    @property
    def shared(self) -> str | None:
        spec = self.shared_fidelity or self.fidelity
        return None if spec == "none" else spec

    def campaign(self, strategy: str, seed: int, fidelity: str) -> CampaignConfig:
        params = (("sections", self.sections),) if self.criterion == "kmnc" else ()
        return CampaignConfig(strategy=strategy, budget=self.budget, inputs_per_step=self.batch, seed=seed,
                              fidelity=fidelity, criteria=self.criterion, criterion_params=params,
                              max_seeds=self.max_seeds, shared_fidelity=self.shared)


def _read_fidelity_file(spec: str | None, dataset: str) -> None:
    """Read the file a ``discriminator:FILE`` or ``dsa:T:FILE`` spec names, so that a file that is
    no discriminator or surprise state is refused before MNIST is loaded or a scenario made (each
    campaign reads it again, in well under a second; its warnings are given then).
    """
    import warnings

    from ..coverage.surprise import SURPRISE_KINDS, load_surprise
    from .fidelity.checks import make_fidelity
    from .fidelity.surprise import parse_surprise_spec

    name, sep, _ = str(spec).partition(":")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "discriminator" and sep:
            make_fidelity(str(spec), bounds=(0.0, 1.0), dataset=dataset)
        elif name in SURPRISE_KINDS:
            file = parse_surprise_spec(str(spec)).file
            if file is not None:
                load_surprise(file)


def _user_pairs(config: PresetConfig) -> dict[str, tuple[str, str]] | None:
    """The user's own pairs in ``pairs_dir`` (or ``$DEEPFAULT_DRFUZZ_PAIRS``), by scenario."""
    import os

    folder = config.pairs_dir or os.environ.get(PAIRS_ENV)
    if not folder:
        return None
    root = Path(folder)
    if not root.is_dir():
        raise DeepFaultError(f"the pairs folder {str(root)!r} does not exist; give a folder with "
                             "SCENARIO-m1.EXT and SCENARIO-m2.EXT model files")
    pairs = {}
    for name in config.scenarios:
        found = []
        for role in ("m1", "m2"):
            files = sorted(p for p in root.glob(f"{name}-{role}.*") if p.suffix != ".json" or
                           not (root / f"{name}-{role}.h5").exists())
            if not files:
                raise DeepFaultError(f"the pairs folder {str(root)!r} has no {name}-{role}.* model file; "
                                     f"scenarios: {', '.join(config.scenarios)}")
            found.append(str(files[0]))
        pairs[name] = (found[0], found[1])
    return pairs


def _plan_jobs(config: PresetConfig, pairs: dict[str, tuple[str, str]], *, store: str, experiment: str,
              data_dir, profile_dir: str, fidelity: str, device: str = "cpu") -> list[dict]:
    """One :func:`~.regress.campaign_job` job per scenario, strategy and seed."""
    jobs = []
    for scenario in config.scenarios:
        m1, m2 = pairs[scenario]
        for strategy in config.strategies:
            for seed in config.seeds:
                jobs.append({
                    "cell": f"{scenario}/{strategy}/seed{seed}", "m1": m1, "m2": m2,
                    "dataset": config.dataset,
                    "data_dir": None if data_dir is None else str(data_dir),
                    "config": config.campaign(strategy, seed, fidelity).to_dict(), "store": store,
                    "experiment": experiment, "profile_dir": profile_dir, "threads": config.threads,
                    "device": device,
                })
    return jobs


def _existing_pair(models_dir: Path, name: str, config: PresetConfig) -> dict | None:
    """The scenario's pair already in ``models_dir`` when it was made with this recipe (else ``None``)."""
    from ..models import load_model

    stem = models_dir / f"{name}-{config.arch}-{config.dataset}"
    paths = [Path(f"{stem}-m1.pt"), Path(f"{stem}-m2.pt"), Path(f"{stem}.json")]
    if not all(p.is_file() for p in paths):
        return None
    try:
        record = json.loads(paths[2].read_text(encoding="utf-8"))
        made = load_model(paths[1]).meta.get("scenario", {})
    except (OSError, ValueError):
        return None
    if (made.get("name"), made.get("seed"), made.get("epochs"), record.get("arch")) != (
            name, config.scenario_seed, config.epochs, config.arch):
        return None
    log.info("%s: reusing the %s pair in %s", DRFUZZ_MNIST, name, models_dir)
    return {**record, "m1_path": str(paths[0]), "m2_path": str(paths[1])}


def _digest(path: str) -> str:
    """The model file's one fingerprint (:func:`~deepfault.models.fingerprint.fingerprint` of its weights)."""
    from ..models import open_model
    from ..models.fingerprint import fingerprint

    return fingerprint(open_model(path).model)


def _campaign_output(job: dict) -> JobOutput:
    """One campaign; it checkpoints and writes its result cell into the store itself."""
    from .regress import campaign_job

    out = campaign_job(job)
    m = out["metrics"]
    log.info("%s: %s: RF %d, URF %d, Seed %d, GF %d (%d iterations, %.0f s)", DRFUZZ_MNIST, job["cell"],
             m["rf"], m["urf"], m["seeds"], m["gf"], out["iterations"], out["seconds"])
    return JobOutput(completed=1, summary={job["cell"]: m})


class DRFuzzMnist(ExperimentPreset):
    """DRFuzz against DeepHunter on MNIST LeNet-5: five regression scenarios, three seeds.

    Args:
        config: What to run (default :class:`PresetConfig`; tests use small ones).
    """

    name = DRFUZZ_MNIST
    method = DRFUZZ_METHOD
    description = ("DRFuzz against DeepHunter on MNIST LeNet-5: five regression scenarios, three seeds, "
                   "the same budget, with the README's MNIST rows")
    job_function = staticmethod(_campaign_output)
    uses_seed = False
    options = _OPTIONS

    def __init__(self, config: PresetConfig | None = None, *, name: str = DRFUZZ_MNIST):
        self.config = config or PresetConfig()
        self.name = name

    def check(self, context: RunContext) -> None:
        """The options, the pairs folder and a ``discriminator:FILE``, before the discriminator is
        trained or any scenario made (minutes of work).
        """
        config = self.config.with_options(dict(context.options))
        _user_pairs(config)
        for spec in (config.fidelity, config.shared):
            name, sep, arg = str(spec).partition(":")
            if name == "discriminator" and sep and not Path(arg).is_file():
                raise DeepFaultError(f"the fidelity {spec!r} names no model file; give discriminator:FILE "
                                     "with an existing file, or plain 'discriminator' for the data set's own")
            _read_fidelity_file(spec, config.dataset)

    def plan(self, context: RunContext) -> Plan:
        import torch

        config = self.config.with_options(dict(context.options), note=False)  # check() noted repeats
        threads = torch.get_num_threads()
        try:
            # The scenarios' training too: two threads on a busy 2-core machine thrash.
            if config.threads:
                torch.set_num_threads(config.threads)
            return self._plan(context, config)
        finally:
            torch.set_num_threads(threads)

    def _plan(self, context: RunContext, config: PresetConfig) -> Plan:
        import torch

        from ..data import load_dataset
        from .pairs.scenarios import SCENARIOS, ScenarioContext, make_scenario

        models_dir = context.models_dir
        data = load_dataset(config.dataset, data_dir=context.data_dir)
        if "discriminator" in (config.fidelity, config.shared):
            from .fidelity.gan import cached_discriminator

            cached_discriminator(data.name, data=data, device=context.device, progress=context.progress)
        own = _user_pairs(config)
        pairs: dict[str, tuple[str, str]] = {}
        accuracy: dict[str, float] = {}
        scenarios: dict[str, dict] = {}
        for name in config.scenarios:
            if own is not None:
                from ..models.prepare import prepare_model
                from ..models.train import accuracy as acc

                m1, m2 = own[name]  # prepared as the campaign will (layout and range of the data)
                prepared = [prepare_model(p, data) for p in (m1, m2)]
                tests = [pm.data if pm.data is not None else data for pm in prepared]
                a1, a2 = (acc(pm.module, d.x_test, d.y_test) for pm, d in zip(prepared, tests, strict=True))
                label = SCENARIOS.get(name).label if name in SCENARIOS.names() else name.upper()
                r: dict | None = {"label": label, "m1_path": m1, "m2_path": m2, "m1_accuracy": a1,
                                  "m2_accuracy": a2, "regressions": None, "fixes": None}
            else:
                r = _existing_pair(models_dir, name, config)
            if r is None:
                recipe = ScenarioContext(seed=config.scenario_seed, epochs=config.epochs,
                                         device=torch.device(context.device), progress=context.progress)
                made = make_scenario(name, config.arch, data, context=recipe, out_dir=models_dir)
                r = {"label": made.label, "m1_path": str(made.m1_path), "m2_path": str(made.m2_path),
                     "m1_accuracy": made.m1_accuracy, "m2_accuracy": made.m2_accuracy,
                     "regressions": made.regressions, "fixes": made.fixes}
            pairs[name] = (r["m1_path"], r["m2_path"])
            accuracy[f"{name} M1"], accuracy[f"{name} M2"] = r["m1_accuracy"], r["m2_accuracy"]
            scenarios[name] = {"label": r["label"], "m1": r["m1_accuracy"], "m2": r["m2_accuracy"],
                               "regressions": r["regressions"], "fixes": r["fixes"]}
            log.info("%s: %s: M1 %.4f, M2 %.4f", self.name, name, r["m1_accuracy"], r["m2_accuracy"])
        record = {"preset": self.name, **config.to_dict(), "fidelity_spec": config.fidelity,
                  "shared_filter": config.shared,
                  "model_digests": {n: [_digest(a), _digest(b)] for n, (a, b) in pairs.items()}}
        for spec in {s for s in (config.fidelity, config.shared) if s is not None}:
            if spec.startswith("discriminator:"):
                record["discriminator_digest"] = _digest(spec.partition(":")[2])
            elif spec == "discriminator":
                from .fidelity.gan import discriminator_cache_path

                record["discriminator_digest"] = _digest(str(discriminator_cache_path(data.name)))
        cells = [f"{scenario}/{strategy}/seed{seed}/result" for scenario in config.scenarios
                 for strategy in config.strategies for seed in config.seeds]
        return Plan(self.name, record, cells, {"scenarios": scenarios}, accuracy,
                    {"pairs": pairs, "fidelity": config.fidelity, "config": config})

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[dict]:
        profile_dir = context.models_dir / "profiles"
        profile_dir.mkdir(parents=True, exist_ok=True)
        jobs = _plan_jobs(plan.state["config"], plan.state["pairs"], store=str(context.store_path),
                         experiment=experiment, data_dir=context.data_dir, profile_dir=str(profile_dir),
                         fidelity=plan.state["fidelity"], device=context.device)
        wanted = set(todo)
        return [j for j in jobs if f"{j['cell']}/result" in wanted]


def run_drfuzz_mnist(store_path, *, config: PresetConfig | None = None, **run_args: Any
                     ) -> ExperimentSummary:
    """Run (or resume) the DRFuzz MNIST reproduction: ``DRFuzzMnist(config).run(store_path,
    **run_args)``.

    ``config`` is what to run (default :class:`PresetConfig`; tests use small ones); ``run_args``
    are :meth:`ExperimentPreset.run <deepfault.experiment.runner.ExperimentPreset.run>`'s
    (``data_dir``, ``models_dir``, ``executor``, ``progress``, ``argv``, ``device``, ``seed``,
    ``options``). The summary's ``results`` holds each campaign's metrics.
    """
    return DRFuzzMnist(config).run(store_path, **run_args)


#: Fashion-MNIST with the AlexNet-style model, as in the published FM rows.
FASHION_PRESET = "drfuzz-fashion-mnist"


class DRFuzzFashion(DRFuzzMnist):
    """DRFuzz against DeepHunter on Fashion-MNIST with ``alexnet_fm`` (the published FM rows)."""

    description = ("DRFuzz against DeepHunter on Fashion-MNIST AlexNet: five regression scenarios, three "
                   "seeds, the same budget, with the README's FM rows")

    def __init__(self, config: PresetConfig | None = None):
        super().__init__(config or PresetConfig(arch="alexnet_fm", dataset="fashion-mnist"),
                         name=FASHION_PRESET)


#: The presets of this method.
DRFUZZ_PRESETS = (DRFuzzMnist(), DRFuzzFashion())
