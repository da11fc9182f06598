"""The paper's experiment as a resumable grid (spec section 6).

A grid runs models x classes x approaches x k x repetitions. For each model and class
the spectrum is built once on that class's test inputs and ``inputs_per_class``
correctly classified inputs are drawn (seeded, without replacement); then every
approach and ``k`` selects neurons and synthesizes from those same inputs. The random
baseline is drawn after Tarantula, Ochiai and D* for the same ``k`` (spec section 3) and
repeated ``random_repetitions`` times. Every cell is written to the
:class:`~deepfault.experiment.store.ResultStore` as soon as it is done; rerunning skips the cells
already there.
"""

from __future__ import annotations

import logging
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..checks import MAX_CLASSES, MAX_GRADIENT_ITERATIONS, MAX_INPUTS, MAX_SEED, check_int
from ..core.batches import activations, predict
from ..core.constraints import (
    EPOCHS,
    LEARNING_RATE,
    SEED,
    Checked,
    Each,
    Flag,
    Interval,
    Options,
    Text,
    constraint_of,
    param,
    validate,
)
from ..core.registry import suggestion
from ..data import Dataset, load_dataset
from ..errors import DeepFaultError
from ..experiment.executors import Executor, get_executor
from ..experiment.runner import CellOutput, ExperimentPreset, ExperimentSummary, JobOutput, Plan, RunContext
from ..models.train import TrainConfig
from .config import RunConfig
from .measures import check_star
from .protocol import CellSpec, GroupInputs, run_group
from .results import DEEPFAULT_METHOD, Cell, CellKey
from .selection import get_approach, list_approaches
from .spectrum import check_threshold
from .synthesis import check_synthesis_args

__all__ = ["ModelSpec", "ExperimentConfig", "GRIDS", "GRID_PRESETS", "DeepFaultGrid", "load_config",
           "run_experiment", "run_group_job", "GroupJob", "plan"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """A model of the grid: a zoo architecture (trained when its file is missing) or a file."""

    name: str
    arch: str | None = None
    file: str | None = None
    weights: str | None = None
    trust_pickle: bool = False


def _plain_name(name: str, value) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "/\\") \
            or value.startswith(".") or ".." in value:
        raise DeepFaultError(f"{name} must be a plain name (letters, digits, '-', '_'; no path); "
                             f"got {value!r}")
    return value


def _model_specs(name: str, value) -> tuple:
    if isinstance(value, (tuple, list)) and not value:
        raise DeepFaultError("an experiment needs at least one model")
    if not isinstance(value, (tuple, list)) or not all(isinstance(m, ModelSpec) for m in value):
        raise DeepFaultError(f"{name} must be one or more ModelSpec; got {value!r}")
    return tuple(value)


@dataclass(frozen=True)
class ExperimentConfig:
    """The grid and the protocol. Every field is part of the configuration hash.

    Every field declares what it accepts (:func:`~deepfault.core.constraints.param`), checked
    when the grid is made; :meth:`validate` adds what spans fields (unique model names, one of
    ``arch`` or ``file``, distinct values, the synthesis' float32 range).
    """

    name: str = param(MISSING, Checked(_plain_name, "a plain name (letters, digits, '-', '_'; no path)",
                                       bad=("", "../x", "a/b", ".hidden")),
                      help="the grid's name (it names the store's cells)")
    dataset: str = param(MISSING, Text(), help="a registered data set or an .npz file (checked when loaded)")
    models: tuple[ModelSpec, ...] = param(MISSING,
                                          Checked(_model_specs, "one or more ModelSpec", bad=((), "m")),
                                          help="the grid's models")
    ks: tuple[int, ...] = param(MISSING, Each(Interval(int, 1, MAX_INPUTS)),
                                help="numbers of suspicious neurons")
    approaches: tuple[str, ...] = param(("tarantula", "ochiai", "dstar", "random"),
                                        Each(Options(list_approaches)), help="measures and baselines")
    classes: tuple[int, ...] | None = param(None, Each(Interval(int, 0, MAX_CLASSES - 1), none=True),
                                            help="classes to analyse (default: every class)")
    inputs_per_class: int = param(10, Interval(int, 1, MAX_GRADIENT_ITERATIONS),
                                  help="correctly classified inputs per class to synthesize from")
    random_repetitions: int = param(5, Interval(int, 1, MAX_GRADIENT_ITERATIONS),
                                    help="repetitions of the random baselines")
    step: float = param(1.0, Interval(float, 0.0), help="synthesis step size, in the data's units")
    distance: float = param(0.1, Interval(float, 0.0), help="synthesis L_inf bound, in the data's units")
    star: float = param(3.0, Interval(float, 1.0), help="the D* exponent")
    seed: int = param(0, SEED, help="seed of every random choice and of the zoo models' training")
    normalize: bool = param(True, Flag(), help="RMS-normalise each neuron's gradient (the paper's results)")
    threshold: float = param(0.0, Interval(float), help="activity threshold of the spectrum")
    iterations: int = param(1, Interval(int, 1, MAX_GRADIENT_ITERATIONS), help="synthesis steps per input")
    layers: tuple[str, ...] | None = param(None, Each(Text(), none=True),
                                           help="module names to analyse (default: the default layers)")
    scale01: bool = param(False, Flag(), help="scale the inputs to [0, 1]")
    train_epochs: int = param(10, EPOCHS, help="training epochs of the zoo models")
    train_lr: float = param(1e-3, LEARNING_RATE, help="learning rate of the zoo models' training")
    train_schedule: str = param("cosine", constraint_of(TrainConfig, "schedule"),
                                help="learning-rate schedule of the zoo models' training")

    def __post_init__(self):
        validate(self)

    def train_config(self) -> TrainConfig:
        return TrainConfig(epochs=self.train_epochs, lr=self.train_lr, seed=self.seed,
                           schedule=self.train_schedule)

    def zoo_model_path(self, models_dir: str | Path, arch: str) -> Path:
        """Where a zoo model trained with this grid's recipe is kept."""
        return Path(models_dir) / (f"{arch}-{self.dataset}-seed{self.seed}-e{self.train_epochs}"
                                   f"-lr{self.train_lr:g}-{self.train_schedule}.pt")

    def validate(self) -> None:
        """Check every field that needs no data or model, before anything is created."""
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "/\\") \
                or self.name.startswith(".") or ".." in self.name:
            raise DeepFaultError(
                f"name must be a plain name (letters, digits, '-', '_'; no path); got {self.name!r}"
            )
        if not self.models:
            raise DeepFaultError("an experiment needs at least one model")
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise DeepFaultError(f"model names must be unique; got {names}")
        for m in self.models:
            if (m.arch is None) == (m.file is None):
                raise DeepFaultError(f"model {m.name!r} needs exactly one of 'arch' or 'file'")
        unknown = [a for a in self.approaches if a not in list_approaches()]
        if unknown:
            raise DeepFaultError(f"unknown approach(es) {unknown}"
                                 f"{suggestion(unknown[0], list_approaches())}; "
                                 f"known: {', '.join(list_approaches())}")
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise DeepFaultError(f"ks must be integers >= 1; got {list(self.ks)}")
        for name in ("ks", "approaches", "classes", "layers"):
            values = getattr(self, name)
            if values is not None and len(set(values)) != len(values):
                dupes = sorted({v for v in values if list(values).count(v) > 1}, key=str)
                raise DeepFaultError(f"{name} must be distinct; {dupes} given more than once")
        for name in ("inputs_per_class", "random_repetitions", "iterations", "train_epochs"):
            check_int(name, getattr(self, name), maximum=MAX_GRADIENT_ITERATIONS)
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        if self.classes is not None:
            for c in self.classes:
                check_int("each class", c, minimum=0)
        check_threshold(self.threshold)
        check_star(self.star)
        check_synthesis_args(self.step, self.distance, (0.0, 1.0), self.iterations)

    def to_dict(self) -> dict:
        return asdict(self)

    def repetitions(self, approach: str) -> int:
        return self.random_repetitions if get_approach(approach).baseline else 1

    def protocol(self) -> RunConfig:
        """The synthesis and evaluation settings of :func:`~deepfault.localization.protocol.run_group`.

        An experiment reproduces the paper: its neurons take the paper's threshold everywhere
        (``activity="zero"``), so that the store's results and keys stay as they were.
        """
        return RunConfig(step_size=self.step, distance=self.distance, star=self.star, seed=self.seed,
                         layers=self.layers, threshold=self.threshold, activity="zero",
                         iterations=self.iterations, normalize=self.normalize,
                         num_inputs=self.inputs_per_class)


def _paper(name, dataset, archs, ks, step, distance) -> ExperimentConfig:
    return ExperimentConfig(name=name, dataset=dataset, ks=ks, step=step, distance=distance,
                            models=tuple(ModelSpec(a, arch=a) for a in archs))


#: Built-in grids: the paper's two experiments and a small one on the embedded digits.
GRIDS: dict[str, ExperimentConfig] = {
    "paper-mnist": _paper("paper-mnist", "mnist", ("mnist_1", "mnist_2", "mnist_3"),
                          (1, 2, 3, 5, 10), 1.0, 0.1),
    "paper-cifar": _paper("paper-cifar", "cifar10", ("cifar_1", "cifar_2", "cifar_3"),
                          (10, 20, 30, 40, 50), 10.0, 25.5),
    "digits": ExperimentConfig(name="digits", dataset="digits", ks=(1, 3, 5),
                               models=(ModelSpec("digits_mlp", arch="digits_mlp"),),
                               random_repetitions=3, train_epochs=40, train_lr=3e-3,
                               train_schedule="constant"),
}


def load_config(path: str | Path) -> ExperimentConfig:
    """Read a TOML experiment file. Keys are :class:`ExperimentConfig`'s fields; models are
    ``[[models]]`` tables with ``name`` and ``arch`` or ``file``.

    Example::

        name = "my-grid"
        dataset = "mnist"
        ks = [1, 5, 10]
        [[models]]
        name = "mnist_1"
        arch = "mnist_1"
    """
    import tomllib

    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeepFaultError(f"experiment file {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise DeepFaultError(f"experiment file {str(path)!r} is a directory; give a .toml file") from None
    except UnicodeDecodeError:
        raise DeepFaultError(f"experiment file {str(path)!r} is not a text (UTF-8 TOML) file") from None
    except tomllib.TOMLDecodeError as err:
        raise DeepFaultError(f"experiment file {str(path)!r} is not valid TOML: {err}") from err
    known = {f.name for f in fields(ExperimentConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DeepFaultError(f"unknown key(s) {unknown} in {str(path)!r}"
                             f"{suggestion(unknown[0], sorted(known))}; "
                             f"known: {sorted(known)}")
    for key, value in raw.items():
        _check_toml_type(path, key, value)
    model_keys = {f.name for f in fields(ModelSpec)}
    entries = raw.pop("models", [])
    if not isinstance(entries, list) or not all(isinstance(m, dict) for m in entries):
        raise DeepFaultError(f"'models' in {str(path)!r} must be [[models]] tables")
    for m in entries:
        for key, value in m.items():
            want = bool if key == "trust_pickle" else str
            if key in model_keys and (not isinstance(value, want)):
                raise DeepFaultError(
                    f"[[models]] {key} in {str(path)!r} must be a {want.__name__}; got {value!r}")
    try:
        models = tuple(ModelSpec(**m) for m in entries)
    except TypeError as err:
        raise DeepFaultError(
            f"bad [[models]] entry in {str(path)!r}: {err}; keys: {sorted(model_keys)}"
        ) from None
    for key in ("ks", "approaches", "classes", "layers"):
        if raw.get(key) is not None:
            raw[key] = tuple(raw[key])
    try:
        config = ExperimentConfig(models=models, **raw)
    except TypeError as err:
        raise DeepFaultError(f"incomplete experiment file {str(path)!r}: {err}") from None
    config.validate()
    return config


#: The TOML type of each key of an experiment file: int, float (an int is fine), str, bool,
#: or a list of ints / strs.
_TOML_TYPES: dict[str, type | list[type]] = {
    "name": str, "dataset": str, "ks": [int], "approaches": [str], "classes": [int], "layers": [str],
    "inputs_per_class": int, "random_repetitions": int, "seed": int, "iterations": int, "train_epochs": int,
    "step": float, "distance": float, "star": float, "threshold": float, "train_lr": float,
    "normalize": bool, "scale01": bool, "train_schedule": str,
}


def _check_toml_type(path: Path, key: str, value) -> None:
    want = _TOML_TYPES.get(key)
    if want is None:
        return

    def ok(v, t):
        if t is float:
            return isinstance(v, (int, float)) and not isinstance(v, bool)
        if t is int:
            return isinstance(v, int) and not isinstance(v, bool)
        return isinstance(v, t)

    if isinstance(want, list):
        good = isinstance(value, list) and all(ok(v, want[0]) for v in value)
        what = f"a list of {want[0].__name__}s"
    else:
        good = ok(value, want)
        what = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[want]
    if not good:
        raise DeepFaultError(f"{key} in {str(path)!r} must be {what}; got {value!r}")


# --- models ---------------------------------------------------------------------------


def _check_models_dir(models_dir: Path) -> None:
    if models_dir.exists() and not models_dir.is_dir():
        raise DeepFaultError(f"--models-dir {str(models_dir)!r} is a file; give a folder")


def _resolve_models(config: ExperimentConfig, data: Dataset, models_dir: Path, *, data_dir, device,
                    progress: bool):
    """Each model of the grid, opened or trained, with the data reconciled to it."""
    from ..models import open_model
    from ..models.prepare import prepare_model
    from ..models.train import trained_model

    out = {}
    for spec in config.models:
        if spec.file is not None:
            mf = open_model(spec.file, weights=spec.weights, trust_pickle=spec.trust_pickle)
            label = Path(spec.file).name
        else:
            assert spec.arch is not None  # validate(): a model has exactly one of arch and file
            path = config.zoo_model_path(models_dir, spec.arch)
            label = spec.arch
            if not path.is_file():
                _check_models_dir(models_dir)
                from ..checks import check_writable

                check_writable(path)
            mf = trained_model(spec.arch, data, path, config.train_config(), device=device, progress=progress)
        out[spec.name] = prepare_model(mf, data, data_dir=data_dir, name=label)
    return out


def _check_neurons(config: ExperimentConfig, models) -> None:
    """Check k and layers against every model, before the store is touched."""
    for name, prepared in models.items():
        layout, _ = activations(prepared.module, prepared.data.x_test[:1], layers=config.layers)
        if max(config.ks) > layout.num_neurons:
            raise DeepFaultError(
                f"k={max(config.ks)} is larger than the {layout.num_neurons} analysed neurons of model "
                f"{name!r}; choose ks <= {layout.num_neurons} or analyse more layers"
            )


# --- one (model, class) group of cells: a job -------------------------------------------


#: Original/synthesized pairs kept per cell for the report's Fig. 4.
EXAMPLES_PER_CELL = 2


@dataclass(frozen=True)
class GroupJob:
    """Everything one (model, class) group needs, and nothing more: the class's inputs only."""

    model: torch.nn.Module
    model_name: str
    cls: int
    inputs: np.ndarray
    labels: np.ndarray
    indices: np.ndarray
    keys: tuple[CellKey, ...]
    bounds: tuple[float, float]
    protocol: RunConfig
    ks: tuple[int, ...]
    output_kind: str
    device: str


def run_group_job(job: GroupJob) -> list[Cell]:
    """Compute the cells of one group (module level, so any executor can run it)."""
    model = job.model.to(job.device)
    cells = [CellSpec(k.approach, k.k, k.repetition) for k in job.keys]
    group = run_group(model, GroupInputs(job.inputs, job.labels, job.bounds, job.indices), job.cls, cells,
                      config=job.protocol, output_kind=job.output_kind, ks=job.ks)
    spectrum = group.spectrum
    layers = spectrum.layout.to_dict()
    position = {int(i): n for n, i in enumerate(job.indices)}
    out = []
    for key, (_, rep) in zip(job.keys, group.cells, strict=True):
        ev = rep.evaluation
        rows = [position[int(i)] for i in rep.input_indices[:EXAMPLES_PER_CELL]]
        out.append(Cell(
            key=key, seed=rep.seed,
            neurons=[n.to_dict() for n in rep.selection.neurons],
            layer_distribution=rep.selection.layer_distribution(),
            layers=layers,
            num_passed=spectrum.num_passed, num_failed=spectrum.num_failed,
            spectrum_seconds=spectrum.seconds, synthesis_seconds=rep.synthesis_seconds,
            input_indices=rep.input_indices.tolist(),
            increased_at={str(kp): v.tolist() for kp, v in ev.increased_at.items()},
            examples={"originals": job.inputs[rows].astype(np.float32),
                      "synthesized": rep.synthesized[:EXAMPLES_PER_CELL].astype(np.float32)},
            **ev.to_dict()["per_input"],
        ))
    return out


def plan(config: ExperimentConfig, data: Dataset) -> list[CellKey]:
    """Every cell of the grid, in the order they are computed."""
    classes = range(data.num_classes) if config.classes is None else config.classes
    keys = []
    for spec in config.models:
        for cls in classes:
            for k in config.ks:
                for approach in config.approaches:
                    for rep in range(config.repetitions(approach)):
                        keys.append(CellKey(spec.name, int(cls), approach, int(k), rep))
    return keys


def _group_job(job: GroupJob) -> JobOutput:
    cells = run_group_job(job)
    return JobOutput([CellOutput(c.key.id, c.data(), c.examples) for c in cells])


class DeepFaultGrid(ExperimentPreset):
    """A DeepFault grid as an experiment: one job per (model, class) group of cells.

    Args:
        config: The grid and the protocol.
        description: One line for ``deepfault experiment --help``.
    """

    method = DEEPFAULT_METHOD
    job_function = staticmethod(_group_job)

    def __init__(self, config: ExperimentConfig, description: str = ""):
        self.config = config
        self.name = config.name
        self.description = description or f"DeepFault grid {config.name}"

    def _config(self, context: RunContext) -> ExperimentConfig:
        """The grid with ``--seed`` applied."""
        return with_overrides(self.config, seed=context.seed)

    def check(self, context: RunContext) -> None:
        self._config(context).validate()

    def plan(self, context: RunContext) -> Plan:
        config = self._config(context)
        kwargs = {"scale01": True} if config.scale01 else {}
        data = load_dataset(config.dataset, data_dir=context.data_dir, **kwargs)
        if config.classes is not None:
            bad = [c for c in config.classes if not 0 <= c < data.num_classes]
            if bad:
                raise DeepFaultError(
                    f"class(es) {bad} outside the {data.num_classes} classes of {data.name!r}")
        models = _resolve_models(config, data, context.models_dir, data_dir=context.data_dir,
                                 device=context.device, progress=context.progress)
        _check_neurons(config, models)
        record = {**config.to_dict(), "bounds": list(data.bounds), "class_names": list(data.class_names),
                  "model_digests": {name: p.fingerprint for name, p in models.items()},
                  "models_trained": [m.name for m in config.models if m.arch is not None]}
        if not record["models_trained"]:
            for key in ("train_epochs", "train_lr", "train_schedule"):
                record.pop(key)
        accuracy = {name: float((predict(p.module, p.data.x_test).argmax(1).numpy() == p.data.y_test).mean())
                    for name, p in models.items()}
        return Plan(config.name, record, [k.id for k in plan(config, data)], {"model_accuracy": accuracy},
                    accuracy, models)

    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list[GroupJob]:
        groups: dict[tuple[str, int], list[CellKey]] = {}
        for cell_id in todo:
            key = CellKey.from_id(cell_id)
            groups.setdefault((key.model, key.cls), []).append(key)
        config = self._config(context)
        protocol = config.protocol()
        jobs = []
        for (m, c), group_keys in groups.items():
            prepared = plan.state[m]
            y = prepared.data.y_test
            index = np.flatnonzero(y == c)
            jobs.append(GroupJob(prepared.module, m, c, prepared.data.x_test[index], y[index], index,
                                 tuple(group_keys), tuple(prepared.data.bounds), protocol, tuple(config.ks),
                                 prepared.output_kind, context.device))
        return jobs


def run_experiment(
    config: ExperimentConfig,
    store_path: str | Path,
    *,
    workers: int = 1,
    executor: str | Executor | None = None,
    address: str | None = None,
    **options: Any,
) -> ExperimentSummary:
    """Run (or resume) a DeepFault grid, writing each cell to the store as soon as it is done.

    Args:
        config: The grid and the protocol.
        store_path: The SQLite results file; created when missing.
        workers: Parallel workers of the executor.
        executor: ``"serial"``, ``"process"``, ``"ray"`` or an :class:`Executor`; default
            ``process`` when ``workers > 1``, else ``serial``. Every cell's result is the
            same whichever executor or worker computes it.
        address: Ray cluster address (``executor="ray"``); default: a local instance.
        **options: :meth:`~deepfault.experiment.runner.ExperimentPreset.run`'s: ``data_dir``
            (data root for the data set), ``models_dir`` (where zoo models are kept, trained
            when missing; default: next to the store, in ``models/``), ``device`` (where models
            are trained and cells computed), ``progress`` (progress bars: training, and cells
            done/left with the estimated time) and ``argv`` (the command line, recorded for
            provenance).

    Returns:
        What was run and skipped, and the configuration hash that keys the cells.

    Raises:
        DeepFaultError: Any invalid setting (checked before the store is created), or
            another process writing to the same store.
    """
    config.validate()
    workers = check_int("workers", workers)
    if isinstance(executor, Executor):
        pool = executor
    else:
        pool = get_executor(executor or ("process" if workers > 1 else "serial"), workers=workers,
                            address=address)
    try:
        return DeepFaultGrid(config).run(store_path, executor=pool, **options)
    finally:
        if not isinstance(executor, Executor):
            pool.close()


def with_overrides(config: ExperimentConfig, **overrides) -> ExperimentConfig:
    """``config`` with the non-``None`` overrides applied."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


_DESCRIPTIONS = {
    "paper-mnist": "DeepFault's MNIST experiment (mnist_1..3, k in 1,2,3,5,10), paper Tables 3-10",
    "paper-cifar": "DeepFault's CIFAR-10 experiment (cifar_1..3, k in 10..50)",
    "digits": "a small DeepFault grid on the embedded digits (seconds)",
}


#: The built-in grids as presets.
GRID_PRESETS = tuple(DeepFaultGrid(config, _DESCRIPTIONS.get(name, "")) for name, config in GRIDS.items())
