"""What :func:`~deepfault.fuzz.regress.regress` returns: a campaign's outcome, and two strategies'.

Each outcome shows itself (:class:`~deepfault.core.outcome.Outcome`): :meth:`RegressOutcome.summary`
is what ``deepfault regress`` prints (the faults first, the metrics after, the verdict last),
:meth:`RegressOutcome.payload` the body of its result document, and
:meth:`RegressOutcome.outputs` the faults file (``.npz``) and their image grid (``.png``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.outcome import Artifact, Outcome
from ..core.summary import Summarised
from ..corpus import Findings, Provenance
from .campaign.memory import format_size, image_bytes, queue_slots
from .campaign.result import CampaignResult, workers_lines
from .campaign.resume import StoreState

__all__ = ["RegressComparison", "RegressOutcome"]

#: Why a campaign stopped, as the summary says it.
_STOPPED = {"budget": "stopped at the budget ({budget})",
            "exhausted": "stopped early: no queued input can be selected any more (all used or banned)",
            "interrupted": "interrupted; rerun the same command to resume from the last checkpoint"}


@dataclass(frozen=True, repr=False)
class RegressOutcome(Summarised, Outcome):
    """A campaign run on a pair of models.

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
        device: Where it ran.
        notes: What the run says about its models before the metrics (how a black box runs,
            the neurons of M2 that DeepHunter's coverage reads).
        records: The models and the data set as the result document names them
            (:func:`~deepfault.experiment.results.model_record`, ``dataset_record``).
        grid_size: Faults shown in the image grid (:meth:`outputs`).
        threads: The CPU threads it ran with (``None``: not recorded).
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
    device: str = "cpu"
    notes: tuple[str, ...] = ()
    records: dict = field(default_factory=dict)
    grid_size: int = 16
    threads: int | None = None

    @property
    def interrupted(self) -> bool:
        """Whether the campaign was interrupted (rerunning resumes it)."""
        return self.result.stop_reason == "interrupted"

    def headline(self) -> str:
        m = self.result.metrics
        return (f"{m.rf} regression faults of {self.names[1]} ({m.urf} unique, from {m.seeds} seeds) "
                f"in {self.result.iterations} iterations; stopped: {self.result.stop_reason}")

    def setup_line(self) -> str:
        """The campaign's settings in one line: strategy, models, budget, check, queue."""
        c = self.result.config
        shape = tuple(self.seed_inputs.shape[1:])
        slots = queue_slots(shape, c.queue_dtype, memory=c.queue_memory, count=c.queue_capacity)
        return (f"regress: {c.strategy} on {self.names[0]} -> {self.names[1]}, budget {c.budget}, "
                f"{c.inputs_per_step} inputs per step, seed {c.seed}, {c.check_name} check, {self.device}; "
                f"queue up to {slots:,} inputs ({format_size(slots * image_bytes(shape, c.queue_dtype))} in "
                f"{c.queue_dtype})")

    def body(self) -> list[str]:
        """The summary's lines but the verdict: the answer, the settings, the metrics, the files."""
        from .report import METRICS_LEGEND, metrics_table

        r, m = self.result, self.result.metrics
        checks = [f"{'shared filter' if role == 'shared' else 'fidelity'} {check['name']}: a mutant passed "
                  f"when {check['rule']}; {r.generated:,} mutants made, {r.passed:,} ran on both models"
                  for role, check in r.trace_checks.items()]
        resumed = f"; resumed from checkpoint {r.resumed}" if r.resumed else ""
        stopped = (f"{_STOPPED[r.stop_reason].format(budget=r.config.budget)}; {r.roots} seeds, "
                   f"{r.queued_seeds} queued{resumed}; {r.seconds:.1f} s of fuzzing, and "
                   f"{r.setup_seconds:.1f} s before it evaluating the seeds")
        faults = (f"faults: {m.rf:,} generated regression faults (#RF; {m.urf:,} unique, #URF) in the "
                  f"faults file (inputs, seed_index, ...); {m.initial_rf:,} initial faults (test inputs M1 "
                  "gets right and M2 already gets wrong: not generated, in no # column) apart, in its "
                  "initial_* arrays")
        state = [] if self.store_state is None else [self.store_state.line()]
        return [f"regress {self.names[0]} -> {self.names[1]}: {self.headline()}", *self.notes,
                self.setup_line(), *state, metrics_table(r).text(), f"  ({METRICS_LEGEND})", *checks, stopped,
                *workers_lines(r.workers), faults,
                f"store: {self.store or 'none'} (experiment {self.experiment}, campaign {self.cell})"]

    def summary(self) -> str:
        """The faults first (inputs M1 gets right and M2 wrong), the metrics, the verdict last."""
        return "\n".join([*self.body(), self.result.verdict().line()])

    def closing(self) -> str:
        """The last line a front end shows, after the files it wrote: the verdict."""
        return self.result.verdict().line()

    def rows(self) -> list[dict]:
        return [{"m1": self.names[0], "m2": self.names[1], "campaign": self.cell,
                 "iterations": self.result.iterations, **self.result.metrics.to_dict()}]

    def to_dict(self) -> dict:
        state = {} if self.store_state is None else {"store_state": self.store_state.to_dict()}
        return {"experiment": self.experiment, "cell": self.cell, "store": self.store, **state,
                **self.result.to_dict()}

    def payload(self) -> dict:
        """The result document's body: the models and data set, then :meth:`to_dict` but its
        configuration (the document's envelope holds that).
        """
        return {**self.records, **{k: v for k, v in self.to_dict().items() if k != "config"}}

    def findings(self) -> Findings:
        """The regression faults for a corpus (:mod:`deepfault.corpus`): every fault, the test inputs
        M2 already got wrong included, expected to get the label M1 gave (the seed's label, which
        M1 got right).
        """
        arrays = self.result.fault_arrays()
        inputs = np.asarray(arrays["inputs"], dtype=np.float32)
        if inputs.ndim < 2:  # none found: no shape to name
            inputs = np.zeros((0, *np.shape(self.seed_inputs)[1:]), np.float32)
        note = f"{self.result.config.strategy}, experiment {self.experiment}"
        models = self.records.get("models", {})
        prints = tuple(str(models.get(k, {}).get("fingerprint", "")) for k in ("m1", "m2"))
        return Findings(inputs=inputs, labels=np.asarray(arrays["label"], dtype=np.int64),
                        provenance=Provenance("regress", self.cell, tuple(self.names), note=note,
                                              fingerprints=prints if all(prints) else ()),
                        dataset=str(self.records.get("dataset", {}).get("name", "")),
                        num_classes=len(self.class_names) or None)

    def outputs(self) -> tuple[Artifact, ...]:
        """The faults (``.npz``: the generated faults and, apart, the test inputs M2 already gets
        wrong) and their image grid (``.png``, the first :attr:`grid_size`; none without matplotlib).
        """
        return (Artifact("faults", ".npz", self._write_faults), Artifact("grid", ".png", self._write_grid))

    def _write_faults(self, path: Path) -> Path:
        self.result.save_faults(path)
        return Path(path)

    def _write_grid(self, path: Path) -> Path | None:
        from .figures import fault_grid

        r = self.result
        generated = ~r.faults.select(r.faults.kind == 0).initial
        idx = [i for i, g in enumerate(generated) if g][: self.grid_size]
        arrays = r.fault_arrays()
        title = f"regression faults ({r.config.strategy}, seed {r.config.seed}): seed | fault"
        try:
            rows = {key: arrays[key][idx] for key in ("inputs", "label", "m2_pred")}
            return fault_grid(self.seed_inputs[idx], rows, path, bounds=self.bounds,
                              class_names=self.class_names, title=title)
        except ModuleNotFoundError:  # matplotlib is optional: the faults file holds everything
            return None


@dataclass(frozen=True, repr=False)
class RegressComparison(Summarised, Outcome):
    """Both strategies' campaigns on one pair, under one budget and one shared fidelity filter
    (:func:`~deepfault.fuzz.regress.compare_strategies`).

    Attributes:
        outcomes: ``{strategy: RegressOutcome}``, in the order they ran.
    """

    outcomes: dict[str, RegressOutcome]

    @property
    def interrupted(self) -> bool:
        """Whether a campaign was interrupted."""
        return any(o.interrupted for o in self.outcomes.values())

    def comparison(self) -> dict:
        """:func:`~.campaign.metrics.compare_campaigns` of the campaigns."""
        from .campaign.metrics import compare_campaigns

        return compare_campaigns({k: o.result for k, o in self.outcomes.items()})

    def headline(self) -> str:
        return "; ".join(f"{name}: {o.result.metrics.urf} unique regression faults"
                         for name, o in self.outcomes.items())

    def summary(self) -> str:
        """Each campaign's summary, the comparison at equal time and at equal iterations, the verdicts."""
        return "\n".join([*(line for o in self.outcomes.values() for line in o.body()), self.closing()])

    def closing(self) -> str:
        """The comparison at equal time and at equal iterations, then one verdict per strategy."""
        from ..experiment.tables import fmt, text_table
        from .report import METRICS_LEGEND

        cmp = self.comparison()
        rows = [(name, row["at_equal_time"]["rf"], row["at_equal_time"]["urf"],
                 row["at_equal_iterations"]["rf"], row["at_equal_iterations"]["urf"],
                 fmt(row["urf_filtered"]), row["iterations"]) for name, row in cmp["rows"].items()]
        table = text_table(("strategy", "#RF (time)", "#URF (time)", "#RF (iterations)", "#URF (iterations)",
                            "#URF passing the filter", "iterations"), rows)
        verdicts = [o.result.verdict().line().replace("verdict:", f"verdict ({name}):", 1)
                    for name, o in self.outcomes.items()]
        return "\n".join([f"comparison (shared filter: {cmp['filter']}): at equal wall time "
                          f"({cmp['wall_seconds']:.1f} s) and at equal iterations ({cmp['iterations']:,})",
                          table, f"  ({METRICS_LEGEND})", *verdicts])

    def rows(self) -> list[dict]:
        return [row for o in self.outcomes.values() for row in o.rows()]

    def to_dict(self) -> dict:
        return {"campaigns": {name: o.to_dict() for name, o in self.outcomes.items()},
                "comparison": self.comparison()}
