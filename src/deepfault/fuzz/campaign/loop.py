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

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from torch import nn

from ..._deprecation import grouped
from ...core.capture import capture
from ...core.entry import _translate
from ...core.registry import suggestion
from ...errors import DeepFaultError
from ..fidelity.checks import Fidelity, check_fidelity_inputs, default_fidelity, make_fidelity
from ..mutation.diversity import FailureSet
from ..mutation.rules import rule_kind
from .checkpoint import CampaignStore
from .clock import StepCost
from .config import CHECKPOINT_EVERY, DEFAULT_BATCH, RENAMED, CampaignConfig, CampaignProgress
from .execution import ModelPair, pass_rows
from .faults import FaultLog
from .metrics import FaultTable, compute_metrics
from .parts import CampaignParts, Checks, Counters, Faults, Models, Queue, Randomness, RuleStats, Timing
from .result import CampaignResult, examples
from .seeds import evaluate_seeds, select_roots, test_inputs
from .step import run_step

if TYPE_CHECKING:
    import os

    from ...core.inputs import InputData, LabelData
    from ...coverage.profile import Profile
    from ...experiment.store import ResultStore
    from .keep import KeepRule
    from .seeds import Seeds
    from .strategies import FuzzStrategy

__all__ = ["CHECKPOINT_EVERY", "DEFAULT_BATCH", "Campaign", "CampaignConfig", "CampaignOptions",
           "CampaignProgress", "CampaignResult", "WorkerHooks", "restored_result", "run_campaign"]


class Campaign:
    """One campaign: its parts (:mod:`.parts`, made by :meth:`setup`) and the loop that steps
    them; :func:`run_campaign` is the usual entry point.

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

    parts: CampaignParts
    seeds: Seeds

    def __init__(self, m1: nn.Module, m2: nn.Module, inputs, labels, *, bounds: tuple[float, float],
                 config: CampaignConfig, fidelity: Fidelity | None = None, train_inputs=None,
                 dataset: str | None = None, profile=None, shared_fidelity: Fidelity | None = None):
        self.config, self.strategy = config, config.strategy_spec
        self.pair = ModelPair(m1, m2, config.output_kinds)
        self.m1 = m1  # the user's M1: a surprise check is fitted for its weights
        self.device = self.pair.device
        self.x, self.y = test_inputs(inputs, labels)
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.dataset, self.train_inputs, self.profile = dataset, train_inputs, profile
        # fewer rows for large inputs and for steps of few mutant slots (issue 26)
        slots = config.inputs_per_step * config.mutants_per_input
        self.pair.rows = pass_rows(tuple(self.x.shape[1:]), slots=slots)
        self.kind = rule_kind(self.x.shape[1:])  # image, sequence or vector: which rules apply
        self.rules = list(self.strategy.rules_for(self.kind))
        if fidelity is None:  # SSIM and the discriminator judge images only
            check_fidelity_inputs(self.strategy.check_spec(config), self.kind)
        if shared_fidelity is None:
            check_fidelity_inputs(config.shared_fidelity, self.kind, option="shared fidelity")
        self._fidelity, self._shared = fidelity, shared_fidelity
        self.stop_reason: str | None = None
        self.between_steps = True  # False while a step runs: a checkpoint then would be torn

    def fidelity_check(self) -> Fidelity:
        """The configured fidelity check (the one given to the constructor, else ``config.fidelity``)."""
        return self._fidelity if self._fidelity is not None else self._make_fidelity(self.config.fidelity)

    def _make_fidelity(self, spec: str) -> Fidelity:
        return make_fidelity(spec, bounds=self.bounds, device=self.device, dataset=self.dataset,
                             train_inputs=self.train_inputs, model=self.m1, test_inputs=self.x)

    def setup(self) -> None:
        """Evaluate the seeds and make the parts: the queue, the checks, the tables (spec section 2)."""
        t0, cfg, timing = time.perf_counter(), self.config, Timing()
        with self.pair.evaluating():
            evaluation = evaluate_seeds(self.pair, self.x, self.y, cfg.max_seeds)
            # both models' forward pass per input: the first estimate of a step's cost (.clock.StepCost)
            timing.seconds_per_input = (time.perf_counter() - t0) / max(1, len(evaluation.y))
            own = self.strategy.make_check(self)
            shared = self._shared
            if shared is None and cfg.shared_fidelity is not None and not (
                    self._fidelity is None and self.strategy.check_spec(cfg) == cfg.shared_fidelity):
                # (a strategy whose own check is the shared filter has applied it already)
                shared = self._make_fidelity(cfg.shared_fidelity)
            checks = Checks.of(own, shared)
            self.seeds = seeds = select_roots(evaluation, self.strategy, self.device)
            queue = Queue.of_seeds(seeds, checks.own, checks.shared, shape=tuple(self.x.shape[1:]),
                                   config=cfg, device=self.device)
            faults = Faults(FaultLog(*seeds.initial_faults()), FailureSet(len(seeds.index)))
            keep = self.strategy.make_keep(self, seeds.queued)
            keep.state_dict()  # fail now, not at the first checkpoint, on state it cannot save
            checks.lazy = _lazy_order(cfg, self.strategy, checks, keep)
            rules = RuleStats(self.rules, cfg.chooser_name, bounds=self.bounds, mutants=cfg.mutants_per_input)
            self.parts = CampaignParts(
                counters=Counters(), random=Randomness(cfg.seed), rules=rules, timing=timing, queue=queue,
                faults=faults, keep=keep, checks=checks, models=Models(self.pair, evaluation.num_classes),
                seeds=seeds)
        timing.setup_seconds = time.perf_counter() - t0

    def step(self, k: int) -> bool:
        """Run up to ``k`` iterations; ``False`` when no input can be selected (exhausted)."""
        return run_step(self.strategy, self.parts, k)

    def run(self, *, progress: Callable[[CampaignProgress], None] | None = None,
            checkpoint: Callable[[Campaign], None] | None = None) -> str:
        """Step until the budget is spent or no input is left; returns the stop reason.

        Args:
            progress: Called with a :class:`~.config.CampaignProgress` after every step.
            checkpoint: Called every ``config.checkpoint_every`` seconds and at the end.
        """
        if not hasattr(self, "parts"):  # not set up yet
            self.setup()
        p, cfg, budget = self.parts, self.config, self.config.budget
        clock, counters = p.timing.clock, p.counters
        last_checkpoint = clock.start()
        # a time budget sizes each step to the time left: a step cannot be interrupted (.clock.StepCost)
        per_input = p.timing.seconds_per_input
        cost = StepCost(None if per_input is None else per_input * self.pair.rows)
        checkpoint_seconds = 0.0
        layers = list(cfg.layers) if isinstance(cfg.layers, tuple) else cfg.layers
        hooks = capture(self.pair.m2, layers, transform=cfg.transform_name) if p.keep.needs_values else None
        reason = "budget"
        try:
            with self.pair.evaluating(), p.models.capturing(hooks, p.checks.late):
                while not budget.exhausted(iterations=counters.iterations, seconds=clock.now()):
                    left = budget.remaining_iterations(counters.iterations)
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
                    p.timing.timeline.sample(clock.now(), self.progress, counters.queries)
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
            clock.stop()
        self.stop_reason = reason
        p.timing.timeline.sample(clock.now(), self.progress, counters.queries, force=True)
        if progress is not None:
            progress(self.progress())
        return reason

    def step_passes(self, k: int) -> float:
        """The forward passes of :attr:`~.execution.ModelPair.rows` rows (a part pass counting as one)
        a step of ``k`` iterations is expected to run: its mutants times the share executed so far
        (all, before the first step). What a step costs on a slow model (.clock.StepCost).
        """
        c = self.parts.counters
        executed = k * self.config.mutants_per_input * (c.passed / c.generated if c.generated else 1.0)
        return float(max(1, math.ceil(executed / self.pair.rows - 1e-9)))

    def progress(self) -> CampaignProgress:
        p = self.parts
        failures = p.faults.failures
        return CampaignProgress(
            elapsed=p.timing.clock.now(), iterations=p.counters.iterations, rf=p.faults.log.counts["rf"],
            urf=len(failures), seeds=int(np.count_nonzero(failures.per_root)), gf=p.faults.log.counts["gf"],
            corpus=len(p.queue.corpus), rule_shares=p.rules.shares(), budget=str(self.config.budget),
        )

    def state_dict(self) -> dict:
        """The parts' state (:meth:`.parts.CampaignParts.state_dict`) under ``data["parts"]``; the
        queue's fixed fields and images and the faults go to a checkpoint as chunks (:mod:`.checkpoint`).
        """
        state = self.parts.state_dict()
        return {"data": {"parts": state["data"]}, "arrays": state["arrays"]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` into a set-up campaign whose queue entries and faults were
        restored already (:meth:`.parts.Queue.add_chunk`, :meth:`.parts.Faults.add_chunk`).
        """
        self.parts.load_state_dict({"data": state["data"]["parts"], "arrays": state["arrays"]})

    def faults(self) -> FaultTable:
        """Every fault found, the initial ones first."""
        return self.parts.faults.log.table()

    def result(self) -> CampaignResult:
        p, faults = self.parts, self.faults()
        rf_inputs, rf_p1, rf_p2 = p.faults.log.rf_data()
        c, late = p.counters, p.checks.late
        return CampaignResult(
            config=self.config, metrics=compute_metrics(faults), stop_reason=self.stop_reason or "budget",
            iterations=c.iterations, steps=c.steps, queries=c.queries, generated=c.generated, passed=c.passed,
            seconds=p.timing.clock.elapsed, setup_seconds=p.timing.setup_seconds, roots=len(p.seeds.index),
            queued_seeds=len(p.seeds.queued), corpus=len(p.queue.corpus), rule_usage=p.rules.usage(),
            timeline=tuple(p.timing.timeline.samples), timings=dict(p.timing.clock.timings), faults=faults,
            rf_inputs=rf_inputs, rf_p1=rf_p1, rf_p2=rf_p2, resumed=c.resumed,
            examples=examples(faults, rf_inputs, self.x, self.rules), evicted=p.queue.corpus.evicted,
            shared_rejected=c.shared_rejected, trace_checks=late.to_dict() if late else {},
        )


def _lazy_order(cfg: CampaignConfig, strategy: FuzzStrategy, checks: Checks, keep: KeepRule) -> bool:
    """Whether the own check runs in the lazy order (:mod:`.lazy`): when asked, with one rule per
    iteration, an expensive own check, no other check and a keep rule that reads no neuron values.
    """
    return bool(cfg.check_order == "lazy" and getattr(checks.own, "expensive", False)
                and checks.shared is None and checks.late is None and not strategy.tries(checks.own)
                and not strategy.one_affine_per_lineage and not keep.needs_values)


@dataclass(frozen=True)
class CampaignOptions:
    """What :func:`run_campaign` may be given beside the models, the seeds and the configuration,
    and where the campaign is kept: the values that travel together from :func:`~..regress.regress`
    (or a test) to the :class:`Campaign` and its store.

    Attributes:
        fidelity: A :class:`~..fidelity.checks.Fidelity` object instead of ``config.fidelity``
            (tests, custom checks; a string is taken as ``config.fidelity``). Without a
            configuration or a fidelity, the default of the inputs' kind
            (:func:`~..fidelity.checks.default_fidelity`: the discriminator for images, ``mdsa``
            for vectors and sequences).
        train_inputs: Training inputs (the coverage profile of DeepHunter's KMNC/NBC/SNAC).
        dataset: The data set's name.
        profile: M2's coverage profile, instead of computing it from ``train_inputs``.
        store: A :class:`~deepfault.experiment.store.ResultStore` or its path: checkpoints are
            written there and a campaign found there resumes (or, finished, is returned as it is).
        experiment: The store's experiment key (default: ``config.key()``).
        cell: The campaign's id in the store.
        progress: Called with a :class:`CampaignProgress` after every step.
        worker: One worker of a many-worker campaign (:class:`WorkerHooks`; made by
            :mod:`.workers`): its rule-chooser prior, set before a checkpoint is restored, and
            its sync after every checkpoint. ``None``: a one-process campaign.
    """

    fidelity: Fidelity | str | None = None
    train_inputs: InputData | None = None
    dataset: str | None = None
    profile: Profile | None = None
    store: ResultStore | str | os.PathLike | None = None
    experiment: str | None = None
    cell: str = "campaign"
    progress: Callable[[CampaignProgress], None] | None = None
    worker: WorkerHooks | None = None


class WorkerHooks(Protocol):
    """What a worker of a many-worker campaign adds to the loop (:class:`~.workers.WorkerLink` is one)."""

    def prepare(self, campaign: Campaign) -> None:
        """Called once the campaign is set up, before its checkpoint is restored."""

    def checkpointing(self, save: Callable[[Campaign], None], store: Any) -> Callable[[Campaign], None]:
        """The checkpoint to run instead of ``save`` (``store``: the open results store)."""


#: The old form's keywords of :func:`run_campaign` that are :class:`CampaignOptions`' fields now.
_OPTION_FIELDS = ("fidelity", "train_inputs", "dataset", "profile", "store", "experiment", "cell", "progress")


def run_campaign(
    m1: nn.Module,
    m2: nn.Module,
    inputs: InputData,
    labels: LabelData,
    *,
    bounds: tuple[float, float],
    config: CampaignConfig | None = None,
    options: CampaignOptions | None = None,
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
            ``strategy="deephunter"``, ``inputs_per_step=1``, ``seed=3``, ``fidelity="ssim"``, ...)
            replace its fields.
        options: :class:`CampaignOptions`: a fidelity object, the training inputs, the data set's
            name, a coverage profile, the store and the campaign's place in it, a progress callable.
        **overrides: :class:`CampaignConfig` fields that replace ``config``'s. The old form's
            keywords ``fidelity`` (an object), ``train_inputs``, ``dataset``, ``profile``,
            ``store``, ``experiment``, ``cell`` and ``progress`` still work and warn
            (:class:`FutureWarning`): they are :class:`CampaignOptions`' fields.

    Returns:
        A :class:`CampaignResult`.

    Raises:
        DeepFaultError: Models with different classes or input shapes, inputs that are not
            images, sequences or vectors, an image-only check (SSIM, the discriminator) for
            inputs that are not images, a bad configuration, or a checkpoint made with another
            configuration.
    """
    options = _options(options, overrides)
    config = _configured(config, options, inputs, labels, overrides)
    if config.workers > 1 and options.worker is None:
        raise DeepFaultError(f"run_campaign runs one worker; a campaign of workers={config.workers} runs "
                             "through regress(...) or deepfault.fuzz.campaign.workers.run_workers(...)")
    campaign = _campaign_of(m1, m2, inputs, labels, bounds, config, options)
    if options.store is None:
        campaign.run(progress=options.progress)
        return campaign.result()
    return _run_in_store(campaign, options)


def _campaign_of(m1, m2, inputs, labels, bounds, config: CampaignConfig,
                 options: CampaignOptions) -> Campaign:
    fidelity = None if isinstance(options.fidelity, str) else options.fidelity
    return Campaign(m1, m2, inputs, labels, bounds=bounds, config=config, fidelity=fidelity,
                    train_inputs=options.train_inputs, dataset=options.dataset, profile=options.profile)


def restored_result(m1: nn.Module, m2: nn.Module, inputs: InputData, labels: LabelData, *,
                    bounds: tuple[float, float], config: CampaignConfig, options: CampaignOptions,
                    stop_reason: str) -> CampaignResult | None:
    """The result of the campaign ``options.cell`` as its last checkpoint in ``options.store``
    left it, without running it (a lost worker's: :mod:`.workers`); ``None`` without one.

    Args:
        m1: As :func:`run_campaign`'s.
        m2: As :func:`run_campaign`'s.
        inputs: As :func:`run_campaign`'s.
        labels: As :func:`run_campaign`'s.
        bounds: As :func:`run_campaign`'s.
        config: The campaign's configuration (the one its checkpoint was written with).
        options: As :func:`run_campaign`'s (``options.store`` required).
        stop_reason: The result's stop reason (``lost``).
    """
    campaign = _campaign_of(m1, m2, inputs, labels, bounds, config, options)
    with CampaignStore.open(options.store, options.experiment or config.key(), options.cell, config) as cs:
        campaign.setup()
        if options.worker is not None:
            options.worker.prepare(campaign)
        if not cs.restore(campaign):
            return None
    campaign.stop_reason = stop_reason
    return campaign.result()


def _options(options: CampaignOptions | None, overrides: dict[str, Any]) -> CampaignOptions:
    """``options`` with the old form's keywords taken out of ``overrides`` (a fidelity spec, text,
    stays there: it is the configuration's field).
    """
    spec = isinstance(overrides.get("fidelity"), str)
    old = {k: overrides.pop(k) for k in _OPTION_FIELDS if k in overrides and not (k == "fidelity" and spec)}
    return grouped("run_campaign", "options", CampaignOptions, options, old, warn=4)


def _configured(config: CampaignConfig | None, options: CampaignOptions, inputs: InputData, labels: LabelData,
                overrides: dict[str, Any]) -> CampaignConfig:
    """The campaign's configuration: ``config`` (or the default, with the inputs' kind's fidelity)
    with ``overrides`` (a fidelity spec given in ``options`` among them) checked and applied.
    """
    if config is None and options.fidelity is None and "fidelity" not in overrides:
        kind = rule_kind(test_inputs(inputs, labels)[0].shape[1:])
        if kind != "image":  # (images keep CampaignConfig's default, the discriminator)
            overrides["fidelity"] = default_fidelity(kind)
    config = config or CampaignConfig()
    if isinstance(options.fidelity, str):  # a spec: the configuration's field
        overrides["fidelity"] = options.fidelity
    if not overrides:
        return config
    overrides = _translate("run_campaign", RENAMED, dict(overrides))
    known = [f.name for f in fields(CampaignConfig)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise DeepFaultError(f"unknown campaign setting(s) {', '.join(unknown)}"
                             f"{suggestion(unknown[0], known)}; known: {', '.join(known)}")
    return replace(config, **overrides)


def _run_in_store(campaign: Campaign, options: CampaignOptions) -> CampaignResult:
    """Run (or resume, or read back) ``campaign`` in ``options.store``, checkpointing as it goes."""
    config = campaign.config
    with CampaignStore.open(options.store, options.experiment or config.key(), options.cell, config) as cs:
        done = cs.load_result()
        if done is not None:
            return done
        campaign.setup()
        worker = options.worker
        if worker is not None:
            worker.prepare(campaign)
        cs.restore(campaign)
        save = cs.save if worker is None else worker.checkpointing(cs.save, cs.store)
        campaign.run(progress=options.progress, checkpoint=save)
        if worker is None:
            save(campaign)
        else:  # a worker's last checkpoint (and sync) is charged as its others are
            campaign.parts.timing.clock.timed("checkpoint", save, campaign)
        result = campaign.result()
        if result.stop_reason != "interrupted":
            cs.save_result(result)
        return result
