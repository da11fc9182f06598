"""A regression fuzzing campaign: DRFuzz's loop with ``B`` inputs per step (spec section 3).

One *iteration* selects a queued input, draws a mutation rule, makes ``mutants`` (10)
mutants of it with fresh parameters, keeps those that pass the check (fidelity or
validity) and differ from their parent, runs them through M1 and M2, buckets them with
the oracle, lets the strategy's keep rule decide which candidates join the queue, records
the faults, and updates the rule statistics, the input's counters and the bans.

A *step* runs ``B`` iterations at once: ``B`` distinct inputs are drawn, each gets its own
rule draw from the chain (in order), all ``mutants * B`` mutants are made with one call per
distinct rule, checked in one call and executed in one forward pass per model; then the
updates are applied in the order of the draws. ``B = 1`` is the published algorithm.

Randomness: a :class:`numpy.random.Generator` (selection, rule choice) and a CPU
:class:`torch.Generator` (mutation parameters), both seeded from ``seed`` and saved in
every checkpoint, so a campaign with an iteration budget is reproducible exactly and a
resumed campaign continues as if it had not stopped.

Checkpoints (:mod:`.checkpoint`) go to a :class:`~deepfault.experiment.store.ResultStore`
every ``checkpoint_every`` seconds; :func:`run_campaign` resumes from the last one.

Examples:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> m1 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> m2 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> x = torch.rand(30, 1, 8, 8)
    >>> y = m1(x).argmax(1)
    >>> result = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget="20it", inputs_per_step=4, seed=0,
    ...                       fidelity="ssim")
    >>> result.iterations, result.stop_reason
    (20, 'budget')
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ...core.capture import capture
from ...core.entry import _translate
from ...core.registry import suggestion
from ...errors import DeepFaultError
from ..fidelity.checks import Fidelity, TraceFidelity, check_fidelity_inputs, default_fidelity, make_fidelity
from ..mutation.diversity import DiversityTable, FailureSet
from ..mutation.mcmc import make_chooser
from ..mutation.rules import get_rule, rule_kind
from .checkpoint import CampaignStore
from .clock import Clock, StepCost, Timeline
from .config import CHECKPOINT_EVERY, DEFAULT_BATCH, RENAMED, CampaignConfig, CampaignProgress
from .corpus import PAGE_SLOTS, STATIC_FIELDS, Corpus, ReferenceRows, page_slots
from .execution import ModelPair, pass_rows
from .faults import FaultLog, RFData
from .late import Deferred, LateChecks
from .memory import DEFAULT_QUEUE_MEMORY, format_size, image_bytes, queue_slots, torch_dtype
from .metrics import FaultTable, compute_metrics
from .result import CampaignResult, examples
from .seeds import SEED_BATCH, evaluate_seeds, select_roots, test_inputs
from .step import run_step

if TYPE_CHECKING:
    import os

    from ...core.inputs import InputData, LabelData
    from ...coverage.profile import Profile
    from ...experiment.store import ResultStore

__all__ = ["CHECKPOINT_EVERY", "DEFAULT_BATCH", "Campaign", "CampaignConfig", "CampaignProgress",
           "CampaignResult", "run_campaign"]


class Campaign:
    """One campaign's state and loop; :func:`run_campaign` is the usual entry point.

    Args:
        m1, m2: The original and the new model (same device, same input shape and classes).
            Used in ``eval()`` mode (restored afterwards), never modified.
        inputs: Test inputs in the data's range ``bounds``: images ``(N, C, H, W)``, sequences
            ``(N, C, L)`` or vectors ``(N, F)`` (each kind has its own mutation rules).
        labels: ``(N,)`` their labels.
        bounds: The data's pixel range ``(lo, hi)``.
        config: The :class:`~.config.CampaignConfig`.
        fidelity: A :class:`~..fidelity.checks.Fidelity` to use instead of ``config.fidelity``
            (tests, custom checks); ignored by strategies with their own check.
        train_inputs: Training inputs for the coverage profile (KMNC/NBC/SNAC; DeepHunter).
        dataset: The data set's name (recorded; warns about a discriminator trained on another).
        profile: M2's :class:`~deepfault.coverage.Profile` (instead of computing it from
            ``train_inputs``).
        shared_fidelity: A check applied to every executed mutant on top of the strategy's own,
            instead of ``config.shared_fidelity``.
    """

    def __init__(self, m1: nn.Module, m2: nn.Module, inputs, labels, *, bounds: tuple[float, float],
                 config: CampaignConfig, fidelity: Fidelity | None = None, train_inputs=None,
                 dataset: str | None = None, profile=None, shared_fidelity: Fidelity | None = None):
        self.config = config
        self.strategy = config.strategy_spec
        self.pair = ModelPair(m1, m2, config.output_kinds)
        self.m1 = m1  # the user's M1: a surprise check is fitted for its weights
        self.device = self.pair.device
        self.x, self.y = test_inputs(inputs, labels)
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.dataset, self.train_inputs, self.profile = dataset, train_inputs, profile
        self.mutants = config.mutants_per_input
        # fewer rows for large inputs and for steps of few mutant slots (issue 26)
        self.pair.rows = pass_rows(tuple(self.x.shape[1:]), slots=config.inputs_per_step * self.mutants)
        self.kind = rule_kind(self.x.shape[1:])  # image, sequence or vector: which rules apply
        self.rules = list(self.strategy.rules_for(self.kind))
        if fidelity is None:  # SSIM and the discriminator judge images only
            check_fidelity_inputs(self.strategy.check_spec(config), self.kind)
        if shared_fidelity is None:
            check_fidelity_inputs(config.shared_fidelity, self.kind, option="shared fidelity")
        self.rule_fns = [get_rule(r) for r in self.rules]
        self.affine = np.array([r.family == "affine" for r in self.rule_fns])
        self._fidelity, self._shared = fidelity, shared_fidelity
        np_seed, torch_seed = np.random.SeedSequence(config.seed).spawn(2)
        self.rng = np.random.default_rng(np_seed)
        self.tgen = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] >> 1))
        self.chooser = make_chooser(config.chooser_name, self.rules)
        self.iterations = self.steps = self.queries = self.generated = self.passed = self.shared_rejected = 0
        self.scored = 0  # mutants the own check scored (all changed ones, unless the order is lazy)
        self.lazy = False  # the lazy order of checks (.lazy), decided in setup
        self.setup_seconds, self.resumed = 0.0, 0  # resumed: checkpoints of the run resumed from
        self.rule_rf = np.zeros(len(self.rules), dtype=np.int64)
        self.clock, self.timeline = Clock(), Timeline()
        self.stop_reason: str | None = None
        self.recorder: Any = None  # captures M2's neuron values while a coverage keep rule runs
        self.late: LateChecks | None = None  # checks scored from M1's activations (.late)
        self.traces: Any = None  # captures M1's activations for them while the campaign runs
        self.between_steps = True  # False while a step runs: a checkpoint then would be torn
        self.seconds_per_input: float | None = None  # both models on one input, from the seeds (setup)

    def fidelity_check(self) -> Fidelity:
        """The configured fidelity check (the one given to the constructor, else ``config.fidelity``)."""
        return self._fidelity if self._fidelity is not None else self._make_fidelity(self.config.fidelity)

    def _make_fidelity(self, spec: str) -> Fidelity:
        return make_fidelity(spec, bounds=self.bounds, device=self.device, dataset=self.dataset,
                             train_inputs=self.train_inputs, model=self.m1, test_inputs=self.x)

    # --- setup ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Evaluate the seeds, fill the queue and the tables (spec section 2)."""
        t0 = time.perf_counter()
        with self.pair.evaluating():
            evaluation = evaluate_seeds(self.pair, self.x, self.y, self.config.max_seeds)
            # both models' forward pass per input: the first estimate of a step's cost (.clock.StepCost)
            self.seconds_per_input = (time.perf_counter() - t0) / max(1, len(evaluation.y))
            self.num_classes = evaluation.num_classes
            self.check = self.strategy.make_check(self)
            self.shared = self._shared
            cfg = self.config
            own = self._fidelity is None and self.strategy.check_spec(cfg) == cfg.shared_fidelity
            if self.shared is None and cfg.shared_fidelity is not None and not own:
                # (a strategy whose own check is the shared filter has applied it already)
                self.shared = self._make_fidelity(cfg.shared_fidelity)
            own_late = self.check if isinstance(self.check, TraceFidelity) else None
            shared_late = self.shared if isinstance(self.shared, TraceFidelity) else None
            if own_late is not None or shared_late is not None:
                # scored from M1's forward pass of the mutants, between the two models (.late)
                self.late = LateChecks(own_late, shared_late)
                if self.late.own is not None:
                    self.check = Deferred(self.late.own)
            self.seeds = seeds = select_roots(evaluation, self.strategy, self.device)
            # the roots' images are read from the test inputs when needed, never copied whole
            # (the queue holds the one copy of the seeds: docs/drfuzz.md, "Queue memory")
            roots = len(seeds.index)
            self.refs = ReferenceRows.of_roots(self.check, seeds.images_at, roots)
            self.shared_refs = None if self.shared is None else ReferenceRows.of_roots(
                self.shared, seeds.images_at, roots)
            self.table = DiversityTable(seeds.label, seeds.p1, seeds.p2)
            self.failures = FailureSet(len(seeds.index))
            self.corpus = _make_corpus(tuple(self.x.shape[1:]), len(seeds.index), len(seeds.queued), cfg,
                                       self.device)
            queued = seeds.queued
            fields = seeds.queue_fields()
            # into the pool a page's bytes at a time (a copy of a whole batch of large images
            # would be as large as a page of 1,024 of them)
            rows = min(SEED_BATCH, page_slots(image_bytes(tuple(self.x.shape[1:]), "float32")))
            for start in range(0, len(queued), rows):
                part = slice(start, start + rows)
                self.corpus.add(seeds.images_at(queued[part]), **{k: v[part] for k, v in fields.items()})
            self.fault_log = FaultLog(*seeds.initial_faults())
            self.keep = self.strategy.make_keep(self, queued)
            self.keep.state_dict()  # fail now, not at the first checkpoint, on state it cannot save
            # the lazy order of checks (.lazy): one rule per iteration, an expensive own check,
            # no other check and a keep rule that reads no neuron values
            self.lazy = (cfg.check_order == "lazy" and getattr(self.check, "expensive", False)
                         and self.shared is None and self.late is None and not self.strategy.tries(self)
                         and not self.strategy.one_affine_per_lineage and not self.keep.needs_values)
        self.setup_seconds = time.perf_counter() - t0

    # --- running --------------------------------------------------------------------------

    def step(self, k: int) -> bool:
        """Run up to ``k`` iterations; ``False`` when no input can be selected (exhausted)."""
        return run_step(self, k)

    def run(self, *, progress: Callable[[CampaignProgress], None] | None = None,
            checkpoint: Callable[[Campaign], None] | None = None) -> str:
        """Step until the budget is spent or no input is left; returns the stop reason.

        Args:
            progress: Called with a :class:`~.config.CampaignProgress` after every step.
            checkpoint: Called every ``config.checkpoint_every`` seconds and at the end.
        """
        if not hasattr(self, "keep"):  # not set up yet
            self.setup()
        cfg, budget, clock = self.config, self.config.budget, self.clock
        last_checkpoint = clock.start()
        # a time budget sizes each step to the time left: a step cannot be interrupted (.clock.StepCost)
        per_input = self.seconds_per_input
        cost = StepCost(None if per_input is None else per_input * self.pair.rows)
        checkpoint_seconds = 0.0
        layers = list(cfg.layers) if isinstance(cfg.layers, tuple) else cfg.layers
        values = self.keep.needs_values
        hooks = capture(self.pair.m2, layers, transform=cfg.transform_name) if values else None
        reason = "budget"
        try:
            with self.pair.evaluating(), contextlib.ExitStack() as stack:
                if hooks is not None:
                    self.recorder = stack.enter_context(hooks)
                if self.late is not None:
                    self.traces = stack.enter_context(self.late.capturing(self.pair.m1))
                while not budget.exhausted(iterations=self.iterations, seconds=clock.now()):
                    left = budget.remaining_iterations(self.iterations)
                    k = cfg.batch if left is None else min(cfg.batch, left)
                    started = time.perf_counter()
                    if left is None:  # seconds: a step that ends by the budget, or none
                        seconds_left = budget.value - clock.now()
                        ahead = started - last_checkpoint + (cost.estimate(self.step_passes(k)) or 0.0)
                        if checkpoint is not None and ahead >= cfg.checkpoint_every:
                            seconds_left -= checkpoint_seconds  # the checkpoint after it counts too
                        k = cost.fit(k, seconds_left, self.step_passes)
                        if k == 0:
                            break
                    self.between_steps = False
                    more = self.step(k)
                    self.between_steps = True
                    if not more:
                        reason = "exhausted"
                        break
                    self.timeline.sample(clock.now(), self.progress, self.queries)
                    if progress is not None:
                        progress(self.progress())
                    cost.add(self.step_passes(k), time.perf_counter() - started)
                    due = time.perf_counter() - last_checkpoint >= cfg.checkpoint_every
                    if checkpoint is not None and due:
                        before = time.perf_counter()
                        last_checkpoint = clock.timed("checkpoint", checkpoint, self)
                        checkpoint_seconds = last_checkpoint - before
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            self.recorder = self.traces = None
            clock.stop()
        self.stop_reason = reason
        self.timeline.sample(clock.now(), self.progress, self.queries, force=True)
        if progress is not None:
            progress(self.progress())
        return reason

    def step_passes(self, k: int) -> float:
        """The forward passes (of :attr:`~.execution.ModelPair.rows` rows, the last one padded) that
        a step of ``k`` iterations is expected to run: its mutants times the share of the
        mutants executed so far (all, before the first step), a fraction of a pass past the
        last full one counting as a whole. What a step costs on a slow model (.clock.StepCost).
        """
        executed = k * self.mutants * (self.passed / self.generated if self.generated else 1.0)
        return float(max(1, math.ceil(executed / self.pair.rows - 1e-9)))

    def progress(self) -> CampaignProgress:
        total = max(1, int(self.chooser.selected.sum()))
        shares = {r: float(self.chooser.selected[i]) / total for i, r in enumerate(self.rules)}
        counts = self.fault_log.counts
        return CampaignProgress(
            elapsed=self.clock.now(), iterations=self.iterations, rf=counts["rf"], urf=len(self.failures),
            seeds=int(np.count_nonzero(self.failures.per_root)), gf=counts["gf"], corpus=len(self.corpus),
            rule_shares=shares, budget=str(self.config.budget),
        )

    # --- state (checkpoints: :mod:`.checkpoint`) ------------------------------------------

    def state_dict(self) -> dict:
        """Everything that changes while the campaign runs, except the queue entries' fixed
        fields, images and the faults (which a checkpoint stores incrementally: :meth:`queue_part`,
        :meth:`queue_pages`, :meth:`fault_parts`): ``{"data": JSON-ready, "arrays": {name: ndarray}}``.
        """
        counters = {name: getattr(self, name) for name in _COUNTERS}
        data = {
            "counters": {**counters, "elapsed": self.clock.now(), "setup_seconds": self.setup_seconds,
                         **self.fault_log.counts},
            "numpy_rng": self.rng.bit_generator.state, "timeline": list(self.timeline.samples),
            "timings": dict(self.clock.timings), "corpus_size": len(self.corpus), "refs_size": self.refs.size,
            "seed_entries": len(self.seeds.queued), "seed_refs": len(self.seeds.index),
            "rule_rf": self.rule_rf.tolist(), "resumed": self.resumed, "page_slots": self.corpus.page,
        }
        arrays = {"torch_rng": self.tgen.get_state().numpy()}
        for prefix, part in self._parts():
            arrays.update({f"{prefix}.{k}": v for k, v in part.state_dict().items()})
        return {"data": data, "arrays": arrays}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` into a set-up campaign whose queue entries and faults
        were restored already (:meth:`add_queue_part`, :meth:`add_fault_part`).
        """
        data, arrays = state["data"], state["arrays"]
        if len(self.corpus) != data["corpus_size"] or self.refs.size != data["refs_size"]:
            raise DeepFaultError("the campaign's state does not match its queue entries; "
                                 "the checkpoint is corrupt")
        counters = data["counters"]
        for name in _COUNTERS:
            setattr(self, name, int(counters.get(name, 0)))
        self.clock.elapsed = float(counters["elapsed"])
        self.fault_log.counts = {"rf": int(counters["rf"]), "gf": int(counters["gf"])}
        self.rng.bit_generator.state = data["numpy_rng"]
        self.tgen.set_state(torch.from_numpy(np.asarray(arrays["torch_rng"], dtype=np.uint8)))
        self.corpus.page = int(data.get("page_slots", PAGE_SLOTS))  # the pages' layout it was saved with
        for prefix, part in self._parts():
            n = len(prefix) + 1
            part.load_state_dict({k[n:]: v for k, v in arrays.items() if k.startswith(prefix + ".")})
        self.timeline.samples = list(data["timeline"])
        self.clock.timings = dict(data["timings"])
        self.rule_rf = np.asarray(data["rule_rf"], dtype=np.int64)
        self.resumed = int(data.get("resumed", 0))

    def _parts(self):
        return (("chooser", self.chooser), ("queue", self.corpus), ("keep", self.keep),
                ("failures", self.failures))

    def queue_part(self, start: int, rstart: int) -> dict[str, np.ndarray]:
        """The fixed fields of queue entries ``start..`` and reference rows ``rstart..``."""
        arrays = self.corpus.static_slice(start, len(self.corpus))
        arrays["refs"] = self.refs.stored_from(rstart)
        return arrays

    def queue_sizes(self) -> tuple[int, int]:
        """``(queue entries, reference rows)`` held now."""
        return len(self.corpus), self.refs.size

    def add_queue_part(self, arrays: dict[str, np.ndarray]) -> None:
        """Append what :meth:`queue_part` returned (resuming)."""
        self.corpus.add_entries(**{f: arrays[f] for f in STATIC_FIELDS})
        if len(arrays["refs"]):
            self.refs.append(torch.from_numpy(arrays["refs"]))

    def queue_pages(self) -> dict[int, np.ndarray]:
        """The queue's image pages changed since the last call (:meth:`.corpus.Corpus.take_dirty_pages`)."""
        return self.corpus.take_dirty_pages()

    def queue_page_items(self) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`queue_pages` one page at a time (:meth:`.corpus.Corpus.iter_dirty_pages`)."""
        return self.corpus.iter_dirty_pages()

    def load_queue_page(self, index: int, images: np.ndarray) -> None:
        """Restore one page of :meth:`queue_pages` (after :meth:`load_state_dict`)."""
        self.corpus.load_page(index, images)

    def fault_parts(self, start: int, rf_start: int) -> tuple[FaultTable | None, RFData | None]:
        """The faults since part ``start`` (rf data since ``rf_start``): :meth:`.faults.FaultLog.take`."""
        return self.fault_log.take(start, rf_start)

    def add_fault_part(self, table: FaultTable, rf: RFData | None) -> None:
        """Append a part that :meth:`fault_parts` returned (resuming)."""
        self.fault_log.add(table, rf)

    # --- results --------------------------------------------------------------------------

    def faults(self) -> FaultTable:
        """Every fault found, the initial ones first."""
        return self.fault_log.table()

    def result(self) -> CampaignResult:
        faults = self.faults()
        rf_inputs, rf_p1, rf_p2 = self.fault_log.rf_data()
        usage = self.chooser.to_dict()
        for i, rule in enumerate(self.rules):
            usage[rule]["rf"] = int(self.rule_rf[i])
        return CampaignResult(
            config=self.config, metrics=compute_metrics(faults), stop_reason=self.stop_reason or "budget",
            iterations=self.iterations, steps=self.steps, queries=self.queries, generated=self.generated,
            passed=self.passed, seconds=self.clock.elapsed, setup_seconds=self.setup_seconds,
            roots=len(self.seeds.index), queued_seeds=len(self.seeds.queued), corpus=len(self.corpus),
            rule_usage=usage, timeline=tuple(self.timeline.samples), timings=dict(self.clock.timings),
            faults=faults, rf_inputs=rf_inputs, rf_p1=rf_p1, rf_p2=rf_p2, resumed=self.resumed,
            examples=examples(faults, rf_inputs, self.x, self.rules), evicted=self.corpus.evicted,
            shared_rejected=self.shared_rejected, trace_checks=self.late.to_dict() if self.late else {},
        )


def _make_corpus(shape: tuple[int, ...], roots: int, queued: int, cfg: CampaignConfig,
                 device: torch.device) -> Corpus:
    """The queue, its capacity in images from the configuration's bytes (:func:`.memory.queue_slots`).

    The queued seeds are always held (they start the campaign): when they alone take more than
    the budget, the capacity is raised to them, with a warning naming ``max_seeds``.
    """
    slots = queue_slots(shape, cfg.queue_dtype, memory=cfg.queue_memory, count=cfg.queue_capacity)
    per = image_bytes(shape, cfg.queue_dtype)
    if queued > slots and cfg.queue_capacity is None:
        warnings.warn(
            f"the {queued:,} queued seeds take {format_size(queued * per)} in {cfg.queue_dtype}, more "
            f"than the queue's {format_size(cfg.queue_memory or DEFAULT_QUEUE_MEMORY)} (queue_memory, "
            "--queue-memory): the queue holds them all and evicts beyond them; fewer seeds (max_seeds, "
            "--max-seeds) or queue_dtype float16 hold less", stacklevel=3)
    # (a count capacity is raised to the seeds silently, as it always was)
    capacity = max(slots, roots)
    # the pool is made for the seeds at once (growing it while they join would hold two copies);
    # when the seeds set the capacity, for all of it (only the initial faults are not queued)
    reserve = capacity if slots < roots else queued
    return Corpus(shape, roots, device=device, capacity=capacity, dtype=torch_dtype(cfg.queue_dtype),
                  page=page_slots(per), reserve=reserve)


#: The counters :meth:`Campaign.state_dict` saves.
_COUNTERS = ("iterations", "steps", "queries", "generated", "passed", "shared_rejected", "scored")


def run_campaign(
    m1: nn.Module,
    m2: nn.Module,
    inputs: InputData,
    labels: LabelData,
    *,
    bounds: tuple[float, float],
    config: CampaignConfig | None = None,
    fidelity: Fidelity | str | None = None,
    train_inputs: InputData | None = None,
    dataset: str | None = None,
    profile: Profile | None = None,
    store: ResultStore | str | os.PathLike | None = None,
    experiment: str | None = None,
    cell: str = "campaign",
    progress: Callable[[CampaignProgress], None] | None = None,
    **overrides: Any,
) -> CampaignResult:
    """Fuzz ``m2`` for regressions against ``m1`` from the test inputs ``inputs``.

    Args:
        m1: The original version of a classifier.
        m2: The new version, fuzzed for regressions against ``m1``.
        inputs: Test inputs, images ``(N, C, H, W)``, sequences ``(N, C, L)`` or vectors ``(N, F)``
            (the seeds are those M1 gets right).
        labels: ``(N,)`` their labels.
        bounds: The data's pixel range.
        config: A :class:`CampaignConfig`; keyword ``overrides`` (``budget="10m"``,
            ``strategy="deephunter"``, ``inputs_per_step=1``, ``seed=3``, ...) replace its fields.
        fidelity: A fidelity object instead of ``config.fidelity`` (a string is taken as
            ``config.fidelity``). Without ``config`` or a fidelity, the default of the inputs'
            kind (:func:`~..fidelity.checks.default_fidelity`: the discriminator for images,
            ``mdsa`` for vectors and sequences).
        train_inputs: Training inputs (the coverage profile of DeepHunter's KMNC/NBC/SNAC).
        dataset: The data set's name.
        profile: M2's coverage profile, instead of computing it from ``train_inputs``.
        store: A :class:`~deepfault.experiment.store.ResultStore` or its path: checkpoints are
            written there and a campaign found there resumes (or, finished, is returned as it is).
        experiment: The store's experiment key (default: ``config.key()``).
        cell: The campaign's id in the store.
        progress: Called with a :class:`CampaignProgress` after every step.
        **overrides: :class:`CampaignConfig` fields that replace ``config``'s.

    Returns:
        A :class:`CampaignResult`.

    Raises:
        DeepFaultError: Models with different classes or input shapes, inputs that are not
            images, sequences or vectors, an image-only check (SSIM, the discriminator) for
            inputs that are not images, a bad configuration, or a checkpoint made with another
            configuration.
    """
    if config is None and fidelity is None and "fidelity" not in overrides:  # the default of the inputs' kind
        kind = rule_kind(test_inputs(inputs, labels)[0].shape[1:])
        if kind != "image":  # (images keep CampaignConfig's default, the discriminator)
            overrides["fidelity"] = default_fidelity(kind)
    config = config or CampaignConfig()
    if isinstance(fidelity, str):  # a spec: the configuration's field
        overrides["fidelity"], fidelity = fidelity, None
    if overrides:
        overrides = _translate("run_campaign", RENAMED, dict(overrides))
        unknown = sorted(set(overrides) - {f.name for f in fields(CampaignConfig)})
        if unknown:
            raise DeepFaultError(
                f"unknown campaign setting(s) {', '.join(unknown)}"
                f"{suggestion(unknown[0], [f.name for f in fields(CampaignConfig)])}; known: "
                f"{', '.join(f.name for f in fields(CampaignConfig))}"
            )
        config = replace(config, **overrides)
    campaign = Campaign(m1, m2, inputs, labels, bounds=bounds, config=config, fidelity=fidelity,
                        train_inputs=train_inputs, dataset=dataset, profile=profile)
    if store is None:
        campaign.run(progress=progress)
        return campaign.result()

    with CampaignStore.open(store, experiment or config.key(), cell, config) as cs:
        done = cs.load_result()
        if done is not None:
            return done
        campaign.setup()
        cs.restore(campaign)
        campaign.run(progress=progress, checkpoint=cs.save)
        cs.save(campaign)
        result = campaign.result()
        if result.stop_reason != "interrupted":
            cs.save_result(result)
        return result

