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

import hashlib
import json
import logging
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from multiprocessing import get_context
from pathlib import Path

import numpy as np
import torch

from ..core.batches import predict
from ..data import Dataset, load_dataset
from ..errors import DeepFaultError
from ..generate.ascent import check_synthesis_args, synthesize
from ..localize.evaluation import evaluate
from ..localize.measures import check_star
from ..localize.selection import BASELINES, check_k, list_approaches, select
from ..localize.spectrum import compute_spectrum
from .store import Cell, CellKey, ResultStore

__all__ = ["ModelSpec", "ExperimentConfig", "PRESETS", "load_config", "run_experiment"]

log = logging.getLogger(__name__)

#: Original/synthesized pairs kept per cell for the report's Fig. 4.
EXAMPLES_PER_CELL = 2


@dataclass(frozen=True)
class ModelSpec:
    """A model of the grid: a zoo architecture (trained when its file is missing) or a file."""

    name: str
    arch: str | None = None
    file: str | None = None
    weights: str | None = None
    trust_pickle: bool = False


@dataclass(frozen=True)
class ExperimentConfig:
    """The grid and the protocol. Every field is part of the configuration hash."""

    name: str
    dataset: str
    models: tuple[ModelSpec, ...]
    ks: tuple[int, ...]
    approaches: tuple[str, ...] = ("tarantula", "ochiai", "dstar", "random")
    classes: tuple[int, ...] | None = None
    inputs_per_class: int = 10
    random_repetitions: int = 5
    step: float = 1.0
    distance: float = 0.1
    star: float = 3.0
    seed: int = 0
    normalize: bool = True
    threshold: float = 0.0
    iterations: int = 1
    layers: tuple[str, ...] | None = None
    scale01: bool = False
    train_epochs: int = 10
    train_lr: float = 1e-3
    train_schedule: str = "cosine"

    def train_config(self):
        from ..models.train import TrainConfig

        return TrainConfig(epochs=self.train_epochs, lr=self.train_lr, seed=self.seed,
                           schedule=self.train_schedule)

    def zoo_model_path(self, models_dir: str | Path, arch: str) -> Path:
        """Where a zoo model trained with this grid's recipe is kept."""
        return Path(models_dir) / (f"{arch}-{self.dataset}-seed{self.seed}-e{self.train_epochs}"
                                   f"-lr{self.train_lr:g}-{self.train_schedule}.pt")

    def validate(self) -> None:
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
            raise DeepFaultError(f"unknown approach(es) {unknown}; known: {', '.join(list_approaches())}")
        if not self.ks or any(not isinstance(k, int) or k < 1 for k in self.ks):
            raise DeepFaultError(f"ks must be integers >= 1; got {list(self.ks)}")
        for name in ("inputs_per_class", "random_repetitions", "iterations", "train_epochs"):
            if getattr(self, name) < 1:
                raise DeepFaultError(f"{name} must be >= 1; got {getattr(self, name)}")
        check_star(self.star)
        check_synthesis_args(self.step, self.distance, (0.0, 1.0), self.iterations)

    def to_dict(self) -> dict:
        return asdict(self)

    def repetitions(self, approach: str) -> int:
        return self.random_repetitions if approach in BASELINES else 1


def _paper(name, dataset, archs, ks, step, distance) -> ExperimentConfig:
    return ExperimentConfig(name=name, dataset=dataset, ks=ks, step=step, distance=distance,
                            models=tuple(ModelSpec(a, arch=a) for a in archs))


#: Built-in grids: the paper's two experiments and a small one on the embedded digits.
PRESETS: dict[str, ExperimentConfig] = {
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
    except tomllib.TOMLDecodeError as err:
        raise DeepFaultError(f"experiment file {str(path)!r} is not valid TOML: {err}") from err
    known = {f.name for f in fields(ExperimentConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise DeepFaultError(f"unknown key(s) {unknown} in {str(path)!r}; known: {sorted(known)}")
    model_keys = {f.name for f in fields(ModelSpec)}
    try:
        models = tuple(ModelSpec(**m) for m in raw.pop("models", []))
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


# --- models ---------------------------------------------------------------------------


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _resolve_models(config: ExperimentConfig, data: Dataset, models_dir: Path, device):
    from ..models import open_model, save_model
    from ..models.train import train_model

    out = {}
    for spec in config.models:
        if spec.file is not None:
            mf = open_model(spec.file, weights=spec.weights, trust_pickle=spec.trust_pickle)
        else:
            path = config.zoo_model_path(models_dir, spec.arch)
            mf = None
            if path.is_file():
                try:
                    mf = open_model(path)
                except DeepFaultError as err:
                    log.warning("%s unreadable (%s); training again", path, err)
            if mf is None:
                log.info("training %s on %s (no model file at %s)...", spec.arch, config.dataset, path)
                mf, _ = train_model(spec.arch, data, config.train_config(),
                                    arch_kwargs={"num_classes": data.num_classes})
                save_model(path, mf)
        shape = mf.meta.get("input_shape")
        model_data = data.for_input_shape(shape) if shape else data
        out[spec.name] = (mf, model_data)
    return out


# --- one (model, class) group of cells ------------------------------------------------


def _seed(*parts) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def _model_code(name: str) -> int:
    return zlib.crc32(name.encode())


def run_group(model, data: Dataset, config: ExperimentConfig, model_name: str, cls: int,
              keys: Sequence[CellKey], output_kind: str = "logits") -> list[Cell]:
    """Compute the cells ``keys`` of one model and class (all share the spectrum and inputs)."""
    x, y = data.x_test, data.y_test
    spectrum = compute_spectrum(model, x, y, target_class=cls, layers=config.layers,
                                threshold=config.threshold)
    layout = spectrum.layout
    in_class = np.flatnonzero(y == cls)
    predicted = predict(model, x[in_class]).argmax(1).numpy()
    correct = in_class[predicted == cls]
    rng = np.random.default_rng(_seed(config.seed, _model_code(model_name), cls))
    chosen = np.sort(rng.choice(correct, size=min(config.inputs_per_class, len(correct)), replace=False))
    originals = x[chosen]
    cells = []
    for key in keys:
        check_k(key.k, layout.num_neurons)
        seed = _seed(config.seed, _model_code(model_name), cls, key.k, key.repetition)
        selection = select(spectrum, key.approach, key.k, star=config.star, seed=seed)
        start = time.perf_counter()
        new = synthesize(model, originals, selection, step=config.step, distance=config.distance,
                         bounds=data.bounds, normalize=config.normalize, iterations=config.iterations)
        seconds = time.perf_counter() - start
        k_primes = sorted(kp for kp in config.ks if key.k < kp <= layout.num_neurons)
        ranking = None
        if selection.ranking is not None and k_primes:
            ranking = [layout.neuron(int(i)) for i in selection.ranking[: max(k_primes)]]
        ev = evaluate(model, originals, new, y[chosen], selection, ranking=ranking,
                      k_primes=k_primes if ranking else (), output_kind=output_kind)
        cells.append(Cell(
            key=key, seed=seed,
            neurons=[n.to_dict() for n in selection.neurons],
            layer_distribution=selection.layer_distribution(),
            layers=layout.to_dict(),
            num_passed=spectrum.num_passed, num_failed=spectrum.num_failed,
            spectrum_seconds=spectrum.seconds, synthesis_seconds=seconds,
            input_indices=chosen.tolist(),
            loss=ev.loss.tolist(), correct=ev.correct.astype(bool).tolist(),
            pred_original=ev.pred_original.tolist(), pred_synthesized=ev.pred_synthesized.tolist(),
            l1=ev.l1.tolist(), l2=ev.l2.tolist(), linf=ev.linf.tolist(),
            increased=ev.increased.tolist(),
            increased_at={str(kp): v.tolist() for kp, v in ev.increased_at.items()},
            examples={"originals": originals[:EXAMPLES_PER_CELL].astype(np.float32),
                      "synthesized": new[:EXAMPLES_PER_CELL].numpy().astype(np.float32)},
        ))
    return cells


def _worker_init() -> None:
    torch.set_num_threads(1)


def _worker(args):
    return run_group(*args)


@dataclass
class ExperimentSummary:
    config_hash: str
    store: str
    cells_total: int
    cells_run: int
    cells_skipped: int
    seconds: float
    model_accuracy: dict[str, float] = field(default_factory=dict)


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


def run_experiment(
    config: ExperimentConfig,
    store_path: str | Path,
    *,
    data_dir: str | Path | None = None,
    models_dir: str | Path | None = None,
    workers: int = 1,
    progress: bool = False,
    argv: list[str] | None = None,
) -> ExperimentSummary:
    """Run (or resume) the grid, writing each cell to the store as soon as it is done.

    Args:
        config: The grid and the protocol.
        store_path: The SQLite results file; created when missing.
        data_dir: Data root for the data set.
        models_dir: Where zoo models are kept (trained when missing); default: next to the
            store, in ``models/``.
        workers: Local processes. Each cell's result does not depend on which process
            computes it.
        progress: Show a progress bar with cells done, left and the estimated time.

    Returns:
        What was run and skipped, and the configuration hash that keys the cells.
    """
    from ..provenance import provenance

    config.validate()
    if workers < 1:
        raise DeepFaultError(f"workers must be >= 1; got {workers}")
    start = time.perf_counter()
    kwargs = {"scale01": True} if config.scale01 else {}
    data = load_dataset(config.dataset, data_dir=data_dir, **kwargs)
    if config.classes is not None:
        bad = [c for c in config.classes if not 0 <= c < data.num_classes]
        if bad:
            raise DeepFaultError(f"class(es) {bad} outside the {data.num_classes} classes of {data.name!r}")
    store_path = Path(store_path)
    models_dir = Path(models_dir) if models_dir is not None else store_path.parent / "models"
    models = _resolve_models(config, data, models_dir, "cpu")
    record = {**config.to_dict(), "bounds": list(data.bounds), "class_names": list(data.class_names),
              "model_digests": {name: _digest(mf.model) for name, (mf, _) in models.items()}}
    config_hash = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    accuracy = {name: float((predict(mf.model, d.x_test).argmax(1).numpy() == d.y_test).mean())
                for name, (mf, d) in models.items()}
    record["model_accuracy"] = accuracy
    keys = plan(config, data)
    with ResultStore(store_path) as store:
        store.begin(config_hash, config.name, record, provenance("cpu", argv=argv))
        done = store.done(config_hash)
        todo = [k for k in keys if k not in done]
        groups: dict[tuple[str, int], list[CellKey]] = {}
        for key in todo:
            groups.setdefault((key.model, key.cls), []).append(key)
        jobs = [(models[m][0].model, models[m][1], config, m, c, ks, models[m][0].output_kind)
                for (m, c), ks in groups.items()]
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(keys), initial=len(keys) - len(todo), unit="cell", dynamic_ncols=True)
        try:
            if workers == 1:
                results = (run_group(*job) for job in jobs)
                for cells in results:
                    for cell in cells:
                        store.write(config_hash, cell)
                    if bar is not None:
                        bar.update(len(cells))
            else:
                with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                         initializer=_worker_init) as pool:
                    for cells in pool.map(_worker, jobs):
                        for cell in cells:
                            store.write(config_hash, cell)
                        if bar is not None:
                            bar.update(len(cells))
        finally:
            if bar is not None:
                bar.close()
    return ExperimentSummary(config_hash, str(store_path), len(keys), len(todo), len(keys) - len(todo),
                             time.perf_counter() - start, accuracy)


def with_overrides(config: ExperimentConfig, **overrides) -> ExperimentConfig:
    """``config`` with the non-``None`` overrides applied."""
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})
