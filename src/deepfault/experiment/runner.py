"""The experiment loop, written once: a preset plans its cells and runs one job; this owns the rest.

:meth:`ExperimentPreset.run` is final (foolbox's ``Attack.__call__``): it checks the store
path, asks the preset for its :class:`Plan`, hashes the configuration, records the
experiment with its provenance, skips the cells already in the store, maps the preset's
jobs over an executor, writes every cell as soon as its job returns, shows progress and
returns an :class:`ExperimentSummary`. A preset implements three things:

- :meth:`~ExperimentPreset.plan`: load data and models, and say which cells exist and what
  configuration identifies them (everything that changes a result goes into the hash);
- :meth:`~ExperimentPreset.jobs`: the jobs that compute the cells not yet in the store
  (a preset whose later cells need earlier ones lists its cells in :attr:`Plan.stages`:
  each stage's jobs are made once the stages before it are stored, and can read them
  through ``context.store``);
- :attr:`~ExperimentPreset.job_function`: a module-level function ``job -> JobOutput``
  (picklable, so any executor can run it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, final

import numpy as np

from .._deprecation import grouped
from ..core.executors import Executor, get_executor
from ..core.registry import suggestion
from ..errors import DeepFaultError
from .store import ResultStore

log = logging.getLogger(__name__)

__all__ = ["RunContext", "RunSettings", "Plan", "CellOutput", "JobOutput", "ExperimentSummary",
           "ExperimentPreset", "config_hash", "preset_option"]


@dataclass(frozen=True)
class RunContext:
    """Where and how one run of a preset happens (the same for every preset)."""

    store_path: Path
    models_dir: Path
    data_dir: str | Path | None = None
    device: str = "cpu"
    progress: bool = False
    seed: int | None = None
    argv: list[str] | None = None
    #: The open results store while jobs are made (for stages that read earlier cells).
    store: ResultStore | None = None
    #: The preset's own options (``--preset-option KEY=VALUE``), keys with ``_`` for ``-``,
    #: checked against :attr:`ExperimentPreset.options` before :meth:`~ExperimentPreset.plan`.
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSettings:
    """How one run of a preset is asked for, beside its store (what :meth:`ExperimentPreset.run`
    and :meth:`ExperimentPreset.check_run` both take; the CLI builds it once for both).

    Attributes:
        data_dir: Data root.
        models_dir: Where models are kept (made there when missing); ``None``: ``models/``
            beside the store.
        progress: Progress bars.
        argv: The command line, for provenance.
        device: Where models are trained and cells computed.
        seed: Overrides the preset's seed where it has one.
        options: The preset's own options (keys of :attr:`ExperimentPreset.options`; ``-`` and
            ``_`` are the same), as strings.
    """

    data_dir: str | Path | None = None
    models_dir: str | Path | None = None
    progress: bool = False
    argv: list[str] | None = None
    device: str = "cpu"
    seed: int | None = None
    options: Mapping[str, str] | None = None


def preset_option(text: str) -> tuple[str, str]:
    """One of :attr:`RunSettings.options` as typed (``deepfault experiment --preset-option``):
    ``KEY=VALUE`` as ``(key, value)``.

    Raises:
        DeepFaultError: No ``=``, or no key before it.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise DeepFaultError(f"expected KEY=VALUE; got {text!r}")
    return key.strip(), value.strip()


def _option_key(key: str) -> str:
    return key.strip().replace("-", "_")


@dataclass
class Plan:
    """What a preset will compute.

    Attributes:
        name: The experiment's name in the store and in reports.
        record: The configuration: everything that changes a result. Its hash keys the cells.
        cells: Every cell id, in the order they are computed.
        extra: Recorded with the configuration but not hashed (test accuracies, ...).
        model_accuracy: Test accuracy of each model, for the summary.
        state: The preset's own objects (data, models) for :meth:`ExperimentPreset.jobs`.
        stages: ``cells`` split into stages run in order (default: one stage).
    """

    name: str
    record: dict
    cells: list[str]
    extra: dict = field(default_factory=dict)
    model_accuracy: dict[str, float] = field(default_factory=dict)
    state: Any = None
    stages: list[list[str]] | None = None


@dataclass
class CellOutput:
    """One computed cell: its id, its JSON fields and its arrays."""

    cell_id: str
    data: dict
    arrays: dict[str, np.ndarray] | None = None


@dataclass
class JobOutput:
    """What one job returns: the cells to store (empty when the job stored its own, as a
    checkpointing fuzz campaign does), the number of cells it completed, and a summary.
    """

    cells: list[CellOutput] = field(default_factory=list)
    completed: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExperimentSummary:
    """What a run did: cells run and skipped, time, accuracies and the preset's results."""

    name: str
    method: str
    config_hash: str
    store: str
    cells_total: int
    cells_run: int
    cells_skipped: int
    seconds: float
    model_accuracy: dict[str, float] = field(default_factory=dict)
    executor: dict = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """What ``deepfault experiment`` prints: the cells run and kept, the time, the test
        accuracies and the next step.
        """
        where = f"{self.executor.get('executor')}, {self.executor.get('workers')} worker(s)"
        accuracy = ", ".join(f"{m} {a:.2%}" for m, a in self.model_accuracy.items())
        head = (f"experiment {self.name} ({self.config_hash}): {self.cells_total} cells, {self.cells_run} "
                f"run now, {self.cells_skipped} already in the store; {self.seconds:.1f} s ({where})")
        return "\n".join([head, *([f"test accuracy: {accuracy}"] if accuracy else []),
                          f"store: {self.store}; next: deepfault report {self.store}"])


def config_hash(record: dict) -> str:
    """The 16-hex-digit key of a configuration (SHA-256 of its sorted JSON)."""
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


class ExperimentPreset(ABC):
    """A built-in experiment of one method. Subclasses set :attr:`name`, :attr:`method`,
    :attr:`description` and :attr:`job_function`, and implement :meth:`plan` and :meth:`jobs`.
    """

    name: str
    method: str
    description: str
    #: ``job -> JobOutput``, a module-level function so that worker processes can run it.
    job_function: Callable[[Any], JobOutput]
    #: The options the preset takes (``--preset-option KEY=VALUE``): key -> one line of help.
    #: The values reach :meth:`plan` as strings in ``context.options``; the preset parses them.
    options: Mapping[str, str] = {}
    #: Whether ``--seed`` changes the run; a preset whose seeds are part of its configuration
    #: sets ``False``, and the runner says that ``--seed`` is ignored.
    uses_seed: bool = True

    def check(self, context: RunContext) -> None:  # noqa: B027 - optional hook
        """Refuse bad settings before anything is loaded or created (default: nothing)."""

    @abstractmethod
    def plan(self, context: RunContext) -> Plan:
        """Load what the experiment needs and list its cells."""

    @abstractmethod
    def jobs(self, plan: Plan, todo: list[str], context: RunContext, experiment: str) -> list:
        """The jobs that compute the cells ``todo`` (a subset of ``plan.cells``, in order)."""

    def default_store(self) -> Path:
        """Where the results go when no store is given: ``results/NAME.sqlite``."""
        return Path("results") / f"{self.name}.sqlite"

    def default_models_dir(self, store_path: Path) -> Path:
        """Where models are kept when no folder is given: ``models/`` beside the store."""
        return store_path.parent / "models"

    @final
    def check_run(self, store_path: str | Path, settings: RunSettings | None = None, **keywords: Any
                  ) -> RunContext:
        """Every check :meth:`run` makes before its work (the store, the models folder, the
        preset's options and its own :meth:`check`), without creating, loading or starting
        anything; the CLI calls it before it starts an executor (a Ray cluster). Returns the
        run's context.

        ``settings`` (or its fields as keywords: ``data_dir=``, ``models_dir=``, ...) as :meth:`run`'s.
        """
        from ..checks import check_output_dir, check_outputs

        settings = grouped("run", "settings", RunSettings, settings, keywords, warn=None)
        store_path, models_dir = Path(store_path), settings.models_dir
        if store_path.is_dir():
            raise DeepFaultError(f"--store {str(store_path)!r} is a directory; give a file name")
        if models_dir and Path(models_dir).exists() and not Path(models_dir).is_dir():
            raise DeepFaultError(f"--models-dir {models_dir!r} is a file; give a folder")
        check_outputs(("--store", store_path))
        ResultStore.check(store_path)
        folder = Path(models_dir) if models_dir is not None else self.default_models_dir(store_path)
        check_output_dir("--models-dir", folder)
        opts = {_option_key(k): str(v) for k, v in (settings.options or {}).items()}
        known = {_option_key(k) for k in self.options}
        unknown = sorted(set(opts) - known)
        if unknown:
            what = f"its options: {', '.join(sorted(self.options))}" if self.options else "it takes none"
            bad = unknown[0].replace("_", "-")
            hint = suggestion(bad, [k.replace("_", "-") for k in sorted(known)])
            raise DeepFaultError(f"preset {self.name!r} has no option {bad!r}{hint}; {what}")
        context = RunContext(store_path, folder, settings.data_dir, str(settings.device), settings.progress,
                             settings.seed, settings.argv, options=opts)
        self.check(context)
        return context

    @final
    def run(self, store_path: str | Path, settings: RunSettings | None = None, *,
            executor: Executor | None = None, **keywords: Any) -> ExperimentSummary:
        """Run (or resume) the experiment into the store at ``store_path``.

        Args:
            store_path: The SQLite results store (created when missing).
            settings: How the run is asked for (:class:`RunSettings`: data root, models folder,
                progress, command line, device, seed, the preset's options); default
                ``RunSettings()``.
            executor: An :class:`~deepfault.experiment.executors.Executor` (default: serial,
                closed at the end; one given here is left open).
            **keywords: ``settings``' fields one by one instead (``data_dir=``, ``models_dir=``,
                ``progress=``, ``argv=``, ``device=``, ``seed=``, ``options=``).

        Returns:
            The summary of what ran and what was already in the store.

        Raises:
            DeepFaultError: Any invalid setting (checked before the store is created), or
                another process writing to the same store.
            TypeError: An unknown keyword, or ``settings`` and keywords both.
        """
        start = time.perf_counter()
        settings = grouped("run", "settings", RunSettings, settings, keywords, warn=None)
        if settings.seed is not None and not self.uses_seed:
            log.warning("--seed is ignored by %s: its seeds are fixed by its configuration (recorded in "
                        "the store)", self.name)
        # Everything the run will create is checked before the plan trains or loads anything.
        context = self.check_run(store_path, settings)
        plan = self.plan(context)
        key = config_hash(plan.record)
        pool = executor or get_executor("serial")
        try:
            todo, results = self._run_cells(plan, key, context, pool)
        finally:
            if executor is None:
                pool.close()
        return ExperimentSummary(plan.name, self.method, key, str(context.store_path), len(plan.cells),
                                 len(todo), len(plan.cells) - len(todo), time.perf_counter() - start,
                                 plan.model_accuracy, pool.describe(), results)

    def _run_cells(self, plan: Plan, key: str, context: RunContext, pool: Executor
                   ) -> tuple[list[str], dict[str, Any]]:
        """Record the experiment and compute the cells not yet in the store, stage by stage,
        each cell written as soon as its job returns: ``(the cells run, the jobs' summaries)``.
        """
        from ..provenance import provenance

        results: dict[str, Any] = {}
        with ResultStore(context.store_path) as store, store.writer():
            store.begin(key, plan.name, {**plan.record, **plan.extra},
                        provenance(context.device, argv=context.argv), method=self.method)
            done = store.done(key, self.method)
            todo = [c for c in plan.cells if c not in done]
            context = replace(context, store=store)
            bar = _bar(context.progress, len(plan.cells), len(plan.cells) - len(todo))
            try:
                for stage in plan.stages or [plan.cells]:
                    jobs = self.jobs(plan, [c for c in stage if c not in done], context, key)
                    for _, out in pool.map(type(self).job_function, jobs):
                        for cell in out.cells:
                            store.put(key, self.method, cell.cell_id, cell.data, cell.arrays)
                        results.update(out.summary)
                        if bar is not None:
                            bar.update(out.completed or len(out.cells))
            finally:
                if bar is not None:
                    bar.close()
        return todo, results


def _bar(progress: bool, total: int, initial: int):
    if not progress:
        return None
    from ..core.progress import progress_bar

    return progress_bar(total, desc="experiment", unit="cell", initial=initial)
