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

Example:
    >>> import torch
    >>> from torch import nn
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> m1 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> m2 = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    >>> x = torch.rand(30, 1, 8, 8)
    >>> y = m1(x).argmax(1)
    >>> result = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget="20it", batch=4, seed=0,
    ...                       fidelity="ssim")
    >>> result.iterations, result.stop_reason
    (20, 'budget')
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from ...core.batches import iterate_batches
from ...core.capture import as_tensor, capture, eval_mode, forward, model_device
from ...errors import DeepFaultError, check_int
from ..fidelity.checks import ssim
from ..mutation.diversity import ROOT_FAILURE_LIMIT, DiversityTable, FailureSet, tendency_of
from ..mutation.mcmc import CHOOSERS, gain_delta, make_chooser
from ..mutation.rules import get_rule
from .budget import Budget, parse_budget
from .corpus import Corpus
from .metrics import FAULT_KINDS, FaultTable, Metrics, compute_metrics
from .oracle import OUTPUT_KINDS, Bucket, classify, to_probabilities
from .strategies import STRATEGIES, FuzzStrategy, Generated, KeepInput

__all__ = [
    "DEFAULT_BATCH",
    "Campaign",
    "CampaignConfig",
    "CampaignProgress",
    "CampaignResult",
    "run_campaign",
]

log = logging.getLogger(__name__)

#: Selected inputs per step by default (``--inputs-per-step``): 640 mutants per forward pass.
DEFAULT_BATCH = 64
#: Mutants per selected input, as published (20; the strategies' default).
MUTANTS_PER_INPUT = 20
#: Queue images kept in memory by default; beyond it the least likely to be selected are
#: evicted (their bookkeeping stays; :mod:`.corpus`).
QUEUE_CAPACITY = 65_536
#: Seconds between checkpoints by default.
CHECKPOINT_EVERY = 5.0
#: DeepHunter's KMNC sections (``k``), the default of the ``kmnc`` criterion here.
KMNC_SECTIONS = 1000
#: Regression faults kept beside their seeds in a result, for figures.
EXAMPLES = 16
#: Inputs per forward pass while evaluating the seeds.
_SEED_BATCH = 1024

STOP_REASONS = ("budget", "exhausted", "interrupted")


@dataclass(frozen=True)
class CampaignConfig:
    """Everything that defines a campaign's result (the checkpoint interval excepted).

    Attributes:
        strategy: ``drfuzz`` or ``deephunter`` (:data:`~.strategies.STRATEGIES`).
        budget: ``"10m"``, ``"300s"``, ``"5000it"`` (:func:`~.budget.parse_budget`).
        batch: Selected inputs per step ``B`` (1 is the published algorithm).
        seed: Seed of every random choice.
        chooser: Rule chooser (``mcmc``, ``uniform``); ``None``: the strategy's.
        mutants: Mutant slots per selected input; ``None``: the strategy's (20, as published).
        fidelity: Fidelity check of DRFuzz: ``discriminator`` (the default: the data set's
            cached discriminator, trained on first use for MNIST and Fashion-MNIST),
            ``discriminator:FILE``, ``ssim``/``ssim:T`` (true pixel range), ``ssim-compat``
            (the published SSIM path, with its retry structure) or ``none``. DeepHunter uses
            its validity rule instead.
        shared_fidelity: One filter applied on top of the strategy's own check to every
            executed mutant (affine ones included), for a fair comparison of strategies
            (same specs as ``fidelity``); ``None``: none.
        count_selections: ``fault`` (an input's ``times_selected`` rises only in iterations
            where it produced a regression fault, as published) or ``every``; ``None``: the
            strategy's (``fault``).
        queue_capacity: Queue images held at once (``None``: :data:`QUEUE_CAPACITY`).
        criterion: DeepHunter's coverage criterion (``kmnc``, ``nc``, ``nbc``, ``snac``, ``tknc``).
        criterion_params: Its parameters (``sections``, ``threshold``, ``top_k``, ``scale``); KMNC
            takes DeepHunter's 1,000 sections unless told otherwise.
        layers: Layers of M2 the criterion reads (``None``: every Linear/Conv but the logits).
        transform: Neuron value transform for the criterion (``raw`` or ``layer-minmax``);
            ``None``: ``layer-minmax`` for DeepHunter (per-input min-max scaled outputs, as
            published), ``raw`` otherwise.
        max_seeds: Use only the first ``max_seeds`` test inputs as candidate seeds.
        output_kinds: What M1 and M2 output (``logits`` or ``probabilities``).
        checkpoint_every: Seconds between checkpoints (0: after every step).
    """

    strategy: str = "drfuzz"
    budget: str = "5000it"
    batch: int = DEFAULT_BATCH
    seed: int = 0
    chooser: str | None = None
    mutants: int | None = None
    fidelity: str = "discriminator"
    criterion: str = "kmnc"
    criterion_params: tuple[tuple[str, Any], ...] = ()
    layers: tuple[str, ...] | None = None
    transform: str | None = None
    max_seeds: int | None = None
    shared_fidelity: str | None = None
    count_selections: str | None = None
    queue_capacity: int | None = None
    output_kinds: tuple[str, str] = ("logits", "logits")
    checkpoint_every: float = field(default=CHECKPOINT_EVERY, compare=False)

    def __post_init__(self):
        STRATEGIES.get(self.strategy)
        object.__setattr__(self, "budget", str(parse_budget(self.budget)))
        check_int("batch", self.batch)
        check_int("seed", self.seed, minimum=0)
        if self.mutants is not None:
            check_int("mutants", self.mutants)
        if self.count_selections not in (None, "fault", "every"):
            raise DeepFaultError(
                f"count_selections must be 'fault' or 'every'; got {self.count_selections!r}"
            )
        if self.queue_capacity is not None:
            check_int("queue_capacity", self.queue_capacity)
        if self.chooser is not None:
            CHOOSERS.get(self.chooser)
        if self.max_seeds is not None:
            check_int("max_seeds", self.max_seeds)
        if isinstance(self.criterion_params, dict):
            object.__setattr__(self, "criterion_params", tuple(sorted(self.criterion_params.items())))
        if self.layers is not None and not isinstance(self.layers, str):
            object.__setattr__(self, "layers", tuple(self.layers))
        kinds = tuple(self.output_kinds)
        if len(kinds) != 2 or any(k not in OUTPUT_KINDS for k in kinds):
            raise DeepFaultError(
                f"output_kinds must be two of {', '.join(OUTPUT_KINDS)}; got {self.output_kinds!r}"
            )
        object.__setattr__(self, "output_kinds", kinds)
        if not (isinstance(self.checkpoint_every, (int, float)) and self.checkpoint_every >= 0):
            raise DeepFaultError(
                f"checkpoint_every must be a number of seconds >= 0; got {self.checkpoint_every!r}"
            )

    @property
    def strategy_spec(self) -> FuzzStrategy:
        return STRATEGIES.get(self.strategy)

    @property
    def chooser_name(self) -> str:
        return self.chooser or self.strategy_spec.chooser

    @property
    def mutants_per_input(self) -> int:
        return self.mutants or self.strategy_spec.mutants

    @property
    def count_rule(self) -> str:
        return self.count_selections or self.strategy_spec.count_selections

    @property
    def transform_name(self) -> str:
        if self.transform is not None:
            return self.transform
        return "layer-minmax" if self.strategy == "deephunter" else "raw"

    @property
    def check_name(self) -> str:
        own = self.fidelity if self.strategy_spec.name == "drfuzz" else "validity"
        return own if self.shared_fidelity is None else f"{own} + shared {self.shared_fidelity}"

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "checkpoint_every"}
        out["criterion_params"] = dict(self.criterion_params)
        out["layers"] = list(self.layers) if isinstance(self.layers, tuple) else self.layers
        out["output_kinds"] = list(self.output_kinds)
        out["chooser"] = self.chooser_name
        out["mutants"] = self.mutants_per_input
        out["count_selections"] = self.count_rule
        out["transform"] = self.transform_name
        return out

    @classmethod
    def from_dict(cls, data: dict) -> CampaignConfig:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        if "criterion_params" in kwargs:
            kwargs["criterion_params"] = tuple(sorted(dict(kwargs["criterion_params"]).items()))
        for key in ("layers", "output_kinds"):
            if isinstance(kwargs.get(key), list):
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)

    def key(self) -> str:
        """A hash of the fields that define the result (12 hex digits)."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class CampaignProgress:
    """A snapshot for progress lines, after each step."""

    elapsed: float
    iterations: int
    rf: int
    urf: int
    seeds: int
    gf: int
    corpus: int
    rule_shares: dict[str, float]
    budget: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign found and how it ran.

    Attributes:
        config: The :class:`CampaignConfig`.
        metrics: #RF, #URF, #Seed, #GF and the first fault (:class:`~.metrics.Metrics`).
        stop_reason: ``budget`` (reached), ``exhausted`` (no input could be selected any more)
            or ``interrupted``.
        iterations, steps: Selected inputs and steps processed.
        queries: Inputs run through each model (the executed mutants).
        generated: Mutants made; ``passed``: those that passed the check and changed.
        seconds: Fuzzing wall time (summed over resumes); ``setup_seconds``: seed evaluation.
        roots: Test inputs M1 classifies correctly; ``queued_seeds``: those M2 does too.
        corpus: Queue size at the end.
        rule_usage: Per rule: selected, faithful, gain, score and regression faults found.
        timeline: ``{elapsed, iterations, queries, rf, urf, seeds, gf, corpus}`` samples.
        timings: Seconds spent per phase (select, mutate, check, execute, update, checkpoint).
        faults: Every fault (:class:`~.metrics.FaultTable`), initial ones flagged.
        rf_inputs: ``(R, C, H, W)`` the regression faults' inputs, rows aligned with the
            ``rf`` rows of ``faults`` (initial ones are the seeds themselves).
        rf_p1, rf_p2: ``(R, classes)`` the two models' probabilities on them.
        resumed: Checkpoints this run resumed from (0 for a fresh run).
        evicted: Queue entries whose images were evicted (the queue's capacity was reached).
        shared_rejected: Mutants that passed their strategy's own check and failed the shared filter.
        examples: The first generated regression faults beside their seeds, for figures:
            ``seeds``, ``faults`` ``(E, C, H, W)``, ``seed_index``, ``label``, ``m2_pred``.
    """

    config: CampaignConfig
    metrics: Metrics
    stop_reason: str
    iterations: int
    steps: int
    queries: int
    generated: int
    passed: int
    seconds: float
    setup_seconds: float
    roots: int
    queued_seeds: int
    corpus: int
    rule_usage: dict[str, dict]
    timeline: tuple[dict, ...]
    timings: dict[str, float]
    faults: FaultTable = field(repr=False)
    rf_inputs: np.ndarray = field(repr=False)
    rf_p1: np.ndarray = field(repr=False)
    rf_p2: np.ndarray = field(repr=False)
    resumed: int = 0
    examples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    evicted: int = 0
    shared_rejected: int = 0

    def to_dict(self) -> dict:
        """Everything but the arrays, JSON-ready."""
        return {
            "config": self.config.to_dict(),
            "metrics": self.metrics.to_dict(),
            "stop_reason": self.stop_reason,
            "iterations": self.iterations,
            "steps": self.steps,
            "queries": self.queries,
            "generated": self.generated,
            "passed": self.passed,
            "seconds": self.seconds,
            "setup_seconds": self.setup_seconds,
            "mutants_per_second": self.generated / self.seconds if self.seconds > 0 else None,
            "roots": self.roots,
            "queued_seeds": self.queued_seeds,
            "corpus": self.corpus,
            "rule_usage": self.rule_usage,
            "timeline": list(self.timeline),
            "timings": self.timings,
            "resumed": self.resumed,
            "evicted": self.evicted,
            "shared_rejected": self.shared_rejected,
        }

    def fault_arrays(self) -> dict[str, np.ndarray]:
        """The regression faults as named arrays (the ``.npz`` that :meth:`save_faults` writes).

        ``inputs`` ``(R, C, H, W)``, ``seed_index`` (the root's index in the test split),
        ``label``, ``m1_pred``, ``m2_pred``, ``m1_prob``/``m2_prob`` ``(R, classes)``,
        ``initial`` (a seed M2 already got wrong), ``elapsed``, ``iteration``.
        """
        rf = self.faults.kind == FAULT_KINDS.index("rf")
        f = self.faults.select(rf)
        return {
            "inputs": self.rf_inputs, "seed_index": f.root, "label": f.y1, "m1_pred": f.y1, "m2_pred": f.y2,
            "m1_prob": self.rf_p1, "m2_prob": self.rf_p2, "initial": f.initial, "elapsed": f.elapsed,
            "iteration": f.iteration,
        }

    def save_faults(self, path) -> None:
        """Write :meth:`fault_arrays` to ``path`` (``.npz``, atomically)."""
        from ..._io import atomic_path

        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, **self.fault_arrays())


class _Rows:
    """A tensor that grows along its first axis by doubling (the fidelity references)."""

    def __init__(self, first: torch.Tensor):
        self.data = first
        self.size = len(first)

    def append(self, rows: torch.Tensor) -> np.ndarray:
        n = len(rows)
        if self.size + n > len(self.data):
            grown = torch.empty((max(self.size + n, 2 * len(self.data)), *self.data.shape[1:]),
                                dtype=self.data.dtype, device=self.data.device)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : self.size + n] = rows.to(self.data.device, self.data.dtype)
        ids = np.arange(self.size, self.size + n)
        self.size += n
        return ids

    def view(self) -> torch.Tensor:
        return self.data[: self.size]


def _execution_copy(model: nn.Module, device: torch.device) -> nn.Module:
    """The model the campaign runs: on the CPU, a copy of a convolutional network with its
    weights in channels-last memory format, which oneDNN runs 2-3x faster on batches of
    mutants (LeNet-5, 1,280 images, one thread: 105 -> 41 us per image;
    ``benchmarks/bench_drfuzz_yield.py``). The caller's model is never changed; the outputs
    equal the original's up to float rounding. Anything else, or a model that cannot be
    copied, runs as given.
    """
    if device.type != "cpu" or not any(isinstance(m, nn.Conv2d) for m in model.modules()):
        return model
    import copy

    try:
        fast = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - an uncopyable model still runs, only slower
        return model
    return fast.to(memory_format=torch.channels_last)


def _probabilities(model: nn.Module, x: torch.Tensor, kind: str, which: str) -> torch.Tensor:
    try:
        out = forward(model, x)
    except DeepFaultError as err:
        raise DeepFaultError(f"{which}: {err}") from err
    if out.ndim != 2:
        raise DeepFaultError(f"{which}'s output must be (N, classes); got shape {tuple(out.shape)}")
    return to_probabilities(out, kind)


class Campaign:
    """One campaign's state and loop; :func:`run_campaign` is the usual entry point.

    Args:
        m1, m2: The original and the new model (same device, same input shape and classes).
            Used in ``eval()`` mode (restored afterwards), never modified.
        inputs: ``(N, C, H, W)`` test inputs, in the data's range ``bounds``.
        labels: ``(N,)`` their labels.
        bounds: The data's pixel range ``(lo, hi)``.
        config: The :class:`CampaignConfig`.
        fidelity: A :class:`~.fidelity.Fidelity` to use instead of ``config.fidelity`` (tests,
            custom checks); ignored by strategies with their own check.
        train_inputs: Training inputs for the coverage profile (KMNC/NBC/SNAC; DeepHunter).
        dataset: The data set's name (recorded; warns about a discriminator trained on another).
        profile: M2's :class:`~deepfault.coverage.Profile` (instead of computing it from
            ``train_inputs``).
    """

    def __init__(
        self,
        m1: nn.Module,
        m2: nn.Module,
        inputs,
        labels,
        *,
        bounds: tuple[float, float],
        config: CampaignConfig,
        fidelity=None,
        train_inputs=None,
        dataset: str | None = None,
        profile=None,
        shared_fidelity=None,
    ):
        if not isinstance(m1, nn.Module) or not isinstance(m2, nn.Module):
            raise DeepFaultError("m1 and m2 must be torch.nn.Module models")
        self.config = config
        self.strategy = config.strategy_spec
        self.device = model_device(m1)
        if model_device(m2) != self.device:
            raise DeepFaultError(
                f"M1 is on {self.device} and M2 on {model_device(m2)}; put both models on the same device"
            )
        self.m1 = _execution_copy(m1, self.device)
        self.m2 = self.m1 if m2 is m1 else _execution_copy(m2, self.device)
        self.x = as_tensor(inputs)
        if self.x.ndim != 4:
            raise DeepFaultError(
                "regression fuzzing mutates images: inputs must have shape (N, C, H, W); "
                f"got shape {tuple(self.x.shape)}"
            )
        self.y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels).astype(np.int64)
        if self.y.shape != (len(self.x),):
            raise DeepFaultError(f"labels must be (N,) with N = {len(self.x)}; got shape {self.y.shape}")
        self.bounds = (float(bounds[0]), float(bounds[1]))
        self.budget: Budget = parse_budget(config.budget)
        self.dataset = dataset
        self.train_inputs = train_inputs
        self.profile = profile
        self.mutants = config.mutants_per_input
        self.rules = list(self.strategy.rules)
        self.rule_fns = [get_rule(r) for r in self.rules]
        self.affine = np.array([r.family == "affine" for r in self.rule_fns])
        self._fidelity = fidelity
        self._shared = shared_fidelity
        self.check = self.shared = None  # made in setup(), once the models are known to fit
        seq = np.random.SeedSequence(config.seed)
        np_seed, torch_seed = seq.spawn(2)
        self.rng = np.random.default_rng(np_seed)
        self.tgen = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] >> 1))
        self.chooser = make_chooser(config.chooser_name, self.rules)
        self.iterations = self.steps = self.queries = self.generated = self.passed = 0
        self.shared_rejected = 0
        self.elapsed = 0.0
        self.setup_seconds = 0.0
        self.rule_rf = np.zeros(len(self.rules), dtype=np.int64)
        self.timeline: list[dict] = []
        self.timings = dict.fromkeys(("select", "mutate", "check", "execute", "update", "checkpoint"), 0.0)
        self._fault_parts: list[FaultTable] = []
        self._rf_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._counts = {"rf": 0, "gf": 0}
        self.stop_reason: str | None = None
        self.resumed = 0
        self._recorder = None
        self._ready = False
        self._session_start: float | None = None
        self._consistent = True
        self._t = time.perf_counter()

    def fidelity_check(self):
        """DRFuzz's fidelity check: the one given to the constructor, else ``config.fidelity``."""
        if self._fidelity is not None:
            return self._fidelity
        from ..fidelity.checks import make_fidelity

        return make_fidelity(self.config.fidelity, bounds=self.bounds, device=self.device,
                             dataset=self.dataset, train_inputs=self.train_inputs)

    # --- setup ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Evaluate the seeds, fill the queue and the tables (spec section 2)."""
        t0 = time.perf_counter()
        with eval_mode(self.m1), eval_mode(self.m2), torch.no_grad():
            self._setup()
        self.setup_seconds = time.perf_counter() - t0
        self._ready = True

    def _setup(self) -> None:
        n = len(self.x) if self.config.max_seeds is None else min(len(self.x), self.config.max_seeds)
        if n == 0:
            raise DeepFaultError("no test inputs to fuzz from: the input set is empty")
        x, y = self.x[:n], self.y[:n]
        kinds = self.config.output_kinds
        p1, p2 = [], []
        for start in range(0, n, _SEED_BATCH):
            xb = x[start : start + _SEED_BATCH].to(self.device)
            p1.append(_probabilities(self.m1, xb, kinds[0], "M1").cpu())
            p2.append(_probabilities(self.m2, xb, kinds[1], "M2").cpu())
        p1n, p2n = torch.cat(p1).numpy(), torch.cat(p2).numpy()
        if p1n.shape[1] != p2n.shape[1]:
            raise DeepFaultError(
                f"M1 has {p1n.shape[1]} classes and M2 {p2n.shape[1]}; regression fuzzing compares two "
                "versions of one classifier, with the same classes"
            )
        if y.max(initial=0) >= p1n.shape[1] or y.min(initial=0) < 0:
            raise DeepFaultError(
                f"labels must lie in 0..{p1n.shape[1] - 1} (the models' classes); got {y.min()}..{y.max()}"
            )
        self.num_classes = p1n.shape[1]
        self.check = self.strategy.make_check(self)
        self.shared = self._shared
        same = (self.config.shared_fidelity == self.config.fidelity and self._fidelity is None
                and self.strategy.name == "drfuzz")
        if self.shared is None and self.config.shared_fidelity is not None and not same:
            # (DRFuzz's own check is the shared filter itself, against the same roots: already applied)
            from ..fidelity.checks import make_fidelity

            self.shared = make_fidelity(self.config.shared_fidelity, bounds=self.bounds, device=self.device,
                                        dataset=self.dataset, train_inputs=self.train_inputs)
        y1, y2 = p1n.argmax(1), p2n.argmax(1)
        roots = np.flatnonzero(self.strategy.roots(y1 == y, y2 == y))
        if len(roots) == 0:
            raise DeepFaultError(
                "M1 classifies none of the test inputs correctly: there is no seed to fuzz"
                if self.strategy.name == "drfuzz" else
                f"no test input qualifies as a {self.strategy.name} seed: there is no seed to fuzz"
            )
        self.root_index = roots  # dense root -> test index
        self.root_label = y[roots]
        rp1, rp2 = p1n[roots], p2n[roots]
        initial = (y1[roots] == y[roots]) & (y2[roots] != y[roots])
        self.initial_rf = np.flatnonzero(initial)
        self.root_images = x[roots].to(self.device)
        self.refs = _Rows(self.check.reference(self.root_images))
        self.shared_refs = None if self.shared is None else self.shared.reference(self.root_images)
        self.table = DiversityTable(self.root_label, rp1, rp2)
        self.failures = FailureSet(len(roots))
        capacity = self.config.queue_capacity or QUEUE_CAPACITY
        self.corpus = Corpus(tuple(x.shape[1:]), len(roots), device=self.device,
                             capacity=max(capacity, len(roots)))
        queued = np.flatnonzero(~initial)
        rows = np.arange(len(roots))
        d = rp1[rows, y1[roots]] - rp2[rows, y1[roots]]
        self.corpus.add(
            self.root_images[torch.as_tensor(queued, device=self.device)],
            root=queued, generation=np.zeros(len(queued)), parent=np.full(len(queued), -1),
            d=d[queued], p2_label=rp2[queued, self.root_label[queued]],
            tendency=tendency_of(rp1[queued], rp2[queued], self.root_label[queued]),
            ref=queued, affine=np.zeros(len(queued), dtype=bool), rule=np.full(len(queued), -1),
        )
        self.num_seed_entries = len(queued)
        self.initial_faults = FaultTable(
            kind=np.full(len(self.initial_rf), FAULT_KINDS.index("rf"), dtype=np.int8),
            root=roots[self.initial_rf].astype(np.int64), y1=y1[roots][self.initial_rf].astype(np.int64),
            y2=y2[roots][self.initial_rf].astype(np.int64), initial=np.ones(len(self.initial_rf), dtype=bool),
            elapsed=np.zeros(len(self.initial_rf)), queries=np.zeros(len(self.initial_rf), dtype=np.int64),
            iteration=np.zeros(len(self.initial_rf), dtype=np.int64),
            ssim=np.ones(len(self.initial_rf), dtype=np.float32),
            rule=np.full(len(self.initial_rf), -1, dtype=np.int16),
        )
        self.initial_rf_data = (
            self.root_images[torch.as_tensor(self.initial_rf, device=self.device)].cpu().numpy(),
            rp1[self.initial_rf], rp2[self.initial_rf],
        )
        self.keep = self.strategy.make_keep(self, queued)
        self.keep.state_dict()  # fail now, not at the first checkpoint, on state it cannot save

    def coverage_criterion(self, seeds: torch.Tensor, *, update: bool = True):
        """The configured coverage criterion of M2, updated with ``seeds`` (DeepHunter's keep rule)."""
        from ...coverage import compute_profile, criterion_params, make_criterion

        cfg = self.config
        params = dict(cfg.criterion_params)
        if cfg.criterion == "kmnc":
            params.setdefault("sections", KMNC_SECTIONS)
        layers = list(cfg.layers) if isinstance(cfg.layers, tuple) else cfg.layers
        if "profile" in criterion_params(cfg.criterion) and self.profile is not None:
            params["profile"] = self.profile
        elif "profile" in criterion_params(cfg.criterion):
            if self.train_inputs is None or len(self.train_inputs) == 0:
                raise DeepFaultError(
                    f"coverage criterion {cfg.criterion!r} needs M2's profile on training inputs, and the "
                    "data set has no training split; choose criterion 'nc' or 'tknc'"
                )
            params["profile"] = compute_profile(self.m2, self.train_inputs, layers=layers,
                                                transform=cfg.transform_name)
        criterion = None
        for batch in iterate_batches(self.m2, seeds, layers=layers, transform=cfg.transform_name,
                                     batch_size=_SEED_BATCH):
            if criterion is None:
                criterion = make_criterion(cfg.criterion, batch.layout, **params)
            if update:
                criterion.update(batch.values)
        # the batch loop runs under inference mode: copy the state into ordinary tensors that
        # the loop (under no_grad) may update in place
        criterion.load_state_dict(criterion.state_dict())
        return criterion

    # --- one step -------------------------------------------------------------------------

    def tick(self, phase: str) -> None:
        """Charge the time since the last tick to ``phase`` (:attr:`timings`)."""
        now = time.perf_counter()
        self.timings[phase] += now - self._t
        self._t = now

    def step(self, k: int) -> bool:
        """Run up to ``k`` iterations; ``False`` when no input can be selected (exhausted)."""
        self._t = time.perf_counter()
        sel = self.corpus.select(self.rng, k)
        n = len(sel)
        if n == 0:
            return False
        gen = self.strategy.generate(self, sel)
        self.generated += gen.made
        ok = gen.ok
        if self.shared is not None and ok.any():
            rows = np.flatnonzero(ok)
            roots = self.corpus.static["root"][sel][gen.owner[rows]]
            ref = self.shared_refs[torch.as_tensor(roots, device=self.shared_refs.device)]
            passed = self.shared.passes(gen.mutants[torch.as_tensor(rows, device=self.device)], ref)
            passed = passed.cpu().numpy()
            self.shared_rejected += int((~passed).sum())
            ok = ok.copy()
            ok[rows[~passed]] = False
        exe = np.flatnonzero(ok)
        self.tick("check")

        xe = gen.mutants[torch.as_tensor(exe, device=self.device)]
        kinds = self.config.output_kinds
        if len(exe):
            p2 = _probabilities(self.m2, xe, kinds[1], "M2")
            values = self._recorder.collect() if self._recorder is not None else None
            p1 = _probabilities(self.m1, xe, kinds[0], "M1")
            if self._recorder is not None and self.m1 is self.m2:
                self._recorder.collect()  # the same model: drop the values its second pass recorded
            p1, p2 = p1.cpu().numpy(), p2.cpu().numpy()
        else:
            p1 = p2 = np.zeros((0, self.num_classes), dtype=np.float32)
            values = None
        queries_before = self.queries
        self.queries += len(exe)
        self.passed += len(exe)
        self.tick("execute")

        self._update(sel, gen, ok, exe, xe, p1, p2, values, queries_before)
        self.iterations += n
        self.steps += 1
        self.tick("update")
        return True

    def _update(self, sel, gen: Generated, ok, exe, xe, p1, p2, values, queries_before) -> None:
        corpus, n = self.corpus, len(sel)
        own = gen.owner[exe]
        rules = gen.rule[exe]
        roots = corpus.static["root"][sel][own]
        labels = self.root_label[roots]
        parent_d = corpus.static["d"][sel][own] if self.strategy.drop_confident else None
        verdict = classify(p1, p2, labels, parent_d)
        b = verdict.buckets
        rf = b == Bucket.RF
        both = b == Bucket.BOTH_FAIL
        candidate = np.isin(b, (Bucket.WEAKEN, Bucket.HALF_WEAKEN, Bucket.REST))
        rows = np.arange(len(exe))

        # Rule statistics, in draw order (sums, so the order does not change them).
        delta = gain_delta(corpus.static["p2_label"][sel][own], p1[rows, labels], p2[rows, labels])
        gained = np.zeros(len(gen.owner), dtype=bool)
        gained[exe[(candidate | rf) & (delta > 0)]] = True
        self.strategy.learn(self, gen, n, gained)  # "faithful": the strategy's own check
        if self.config.count_rule == "every":
            corpus.times_selected[sel] += 1
        else:  # as published: only the inputs that produced a regression fault this iteration
            corpus.times_selected[sel[np.bincount(own[rf], minlength=n) > 0]] += 1

        tendency = (p2 - p1).astype(np.float32)
        kept = self.keep.select(KeepInput(own, roots, tendency, verdict.y2, candidate, rf, values))

        # Regression faults: unique failures, saturated roots, banned ancestors.
        if rf.any():
            self.failures.add(roots[rf], verdict.y1[rf], verdict.y2[rf])
            np.add.at(self.rule_rf, rules[rf], 1)
            if self.strategy.ban:
                corpus.root_banned |= self.failures.per_root >= ROOT_FAILURE_LIMIT
                for i in np.unique(own[rf]):
                    mine = rf & (own == i)
                    corpus.ban_chain(int(sel[i]), int(roots[mine][0]), set(verdict.y2[mine].tolist()))

        # Faults, in draw order.
        found = rf | both
        if found.any():
            f = np.flatnonzero(found)
            similarity = np.full(len(f), np.nan, dtype=np.float32)
            r = np.flatnonzero(rf)
            if len(r):  # the realism yardstick of every strategy: SSIM to the seed
                seeds = self.root_images[torch.as_tensor(roots[r], device=self.device)]
                similarity[rf[f]] = ssim(xe[torch.as_tensor(r, device=xe.device)], seeds,
                                         data_range=self.bounds[1] - self.bounds[0]).cpu().numpy()
            self._fault_parts.append(FaultTable(
                kind=np.where(rf[f], FAULT_KINDS.index("rf"), FAULT_KINDS.index("both_fail")).astype(np.int8),
                root=self.root_index[roots[f]].astype(np.int64), y1=verdict.y1[f], y2=verdict.y2[f],
                initial=np.zeros(len(f), dtype=bool), elapsed=np.full(len(f), self._now()),
                queries=queries_before + f + 1, iteration=self.iterations + own[f] + 1, ssim=similarity,
                rule=rules[f].astype(np.int16),
            ))
            if len(r):
                self._rf_parts.append((xe[torch.as_tensor(r, device=xe.device)].cpu().numpy(), p1[r], p2[r]))
            self._counts["rf"] += int(rf.sum())
            self._counts["gf"] += int(found.sum())

        # The kept candidates join the queue.
        k = np.flatnonzero(kept)
        if len(k):
            parent = sel[own[k]]
            ref = corpus.static["ref"][parent].copy()
            made_affine = self.affine[rules[k]]
            if gen.affine_params and made_affine.any():
                ref[made_affine] = self._affine_refs(exe[k[made_affine]], rules[k[made_affine]],
                                                     roots[k[made_affine]], gen.affine_params)
            corpus.add(
                xe[torch.as_tensor(k, device=xe.device)], root=roots[k],
                generation=corpus.static["generation"][parent] + 1, parent=parent, d=verdict.d[k],
                p2_label=p2[k, labels[k]], tendency=tendency_of(p1[k], p2[k], verdict.y1[k]), ref=ref,
                affine=corpus.static["affine"][parent] | made_affine, rule=rules[k],
            )

    def _affine_refs(self, mutant_rows, rules, roots, affine_params) -> np.ndarray:
        """DeepHunter's reference after an affine change: the same change applied to the root."""
        ids = np.empty(len(mutant_rows), dtype=np.int64)
        for u, (rows, params) in affine_params.items():
            mine = np.flatnonzero(rules == u)
            if len(mine) == 0:
                continue
            at = torch.as_tensor(np.searchsorted(rows, mutant_rows[mine]))
            sub = {key: value[at] for key, value in params.items()}
            root_imgs = self.root_images[torch.as_tensor(roots[mine], device=self.device)]
            ref, _ = self.rule_fns[u](root_imgs, bounds=self.bounds, params=sub)
            ids[mine] = self.refs.append(self.check.reference(ref))
        return ids

    # --- state ----------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything that changes while the campaign runs, except the queue entries' fixed
        fields, images and the faults (which a checkpoint stores incrementally: :meth:`queue_part`,
        :meth:`fault_parts`): ``{"data": JSON-ready, "arrays": {name: ndarray}}``.
        """
        data = {
            "counters": {"iterations": self.iterations, "steps": self.steps, "queries": self.queries,
                         "generated": self.generated, "passed": self.passed, "elapsed": self._now(),
                         "setup_seconds": self.setup_seconds, "shared_rejected": self.shared_rejected,
                         **self._counts},
            "numpy_rng": self.rng.bit_generator.state,
            "timeline": list(self.timeline),
            "timings": dict(self.timings),
            "corpus_size": len(self.corpus),
            "refs_size": self.refs.size,
            "rule_rf": self.rule_rf.tolist(),
            "resumed": self.resumed,
        }
        arrays = {"torch_rng": self.tgen.get_state().numpy()}
        for prefix, part in (("chooser", self.chooser), ("queue", self.corpus), ("keep", self.keep),
                             ("failures", self.failures)):
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
        for name in ("iterations", "steps", "queries", "generated", "passed"):
            setattr(self, name, int(counters[name]))
        self.shared_rejected = int(counters.get("shared_rejected", 0))
        self.elapsed = float(counters["elapsed"])
        self._counts = {"rf": int(counters["rf"]), "gf": int(counters["gf"])}
        self.rng.bit_generator.state = data["numpy_rng"]
        self.tgen.set_state(torch.from_numpy(np.asarray(arrays["torch_rng"], dtype=np.uint8)))

        def part(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix) + 1 :]: v for k, v in arrays.items() if k.startswith(prefix + ".")}

        self.chooser.load_state_dict(part("chooser"))
        self.corpus.load_state_dict(part("queue"))
        self.keep.load_state_dict(part("keep"))
        self.failures.load_state_dict(part("failures"))
        self.timeline = list(data["timeline"])
        self.timings = dict(data["timings"])
        self.rule_rf = np.asarray(data["rule_rf"], dtype=np.int64)

    def queue_part(self, start: int, rstart: int) -> dict[str, np.ndarray]:
        """The fixed fields of queue entries ``start..`` and reference rows ``rstart..``."""
        arrays = self.corpus.static_slice(start, len(self.corpus))
        arrays["refs"] = self.refs.data[rstart : self.refs.size].detach().cpu().numpy()
        return arrays

    def add_queue_part(self, arrays: dict[str, np.ndarray]) -> None:
        """Append what :meth:`queue_part` returned (resuming)."""
        from .corpus import STATIC_FIELDS

        self.corpus.add_entries(**{f: arrays[f] for f in STATIC_FIELDS})
        if len(arrays["refs"]):
            self.refs.append(torch.from_numpy(arrays["refs"]))

    def queue_pages(self) -> dict[int, np.ndarray]:
        """The queue's image pages changed since the last call (:meth:`.corpus.Corpus.take_dirty_pages`)."""
        return self.corpus.take_dirty_pages()

    def load_queue_page(self, index: int, images: np.ndarray) -> None:
        """Restore one page of :meth:`queue_pages` (after :meth:`load_state_dict`)."""
        self.corpus.load_page(index, images)

    def fault_parts(self, start: int, rf_start: int) -> tuple[FaultTable | None, tuple | None]:
        """The faults found since part ``start`` (and regression-fault inputs since ``rf_start``),
        merged into one part each, which from now on replaces them in memory.
        """
        parts, rf_parts = self._fault_parts[start:], self._rf_parts[rf_start:]
        table = FaultTable.concat(parts) if parts else None
        rf = tuple(np.concatenate([p[i] for p in rf_parts]) for i in range(3)) if rf_parts else None
        if parts:
            self._fault_parts[start:] = [table]
        if rf_parts:
            self._rf_parts[rf_start:] = [rf]
        return table, rf

    def add_fault_part(self, table: FaultTable, rf: tuple | None) -> None:
        """Append a part that :meth:`fault_parts` returned (resuming)."""
        self._fault_parts.append(table)
        if rf is not None:
            self._rf_parts.append(rf)

    # --- running --------------------------------------------------------------------------

    def _now(self) -> float:
        if self._session_start is None:
            return self.elapsed
        return self.elapsed + (time.perf_counter() - self._session_start)

    def metrics(self) -> Metrics:
        return compute_metrics(self.faults())

    def faults(self) -> FaultTable:
        return FaultTable.concat([self.initial_faults, *self._fault_parts])

    def progress(self) -> CampaignProgress:
        total = max(1, int(self.chooser.selected.sum()))
        shares = {r: float(self.chooser.selected[i]) / total for i, r in enumerate(self.rules)}
        return CampaignProgress(
            elapsed=self._now(), iterations=self.iterations, rf=self._counts["rf"], urf=len(self.failures),
            seeds=int(np.count_nonzero(self.failures.per_root)), gf=self._counts["gf"],
            corpus=len(self.corpus), rule_shares=shares, budget=str(self.budget),
        )

    def _sample(self, force: bool = False) -> None:
        now = self._now()
        last = self.timeline[-1]["elapsed"] if self.timeline else -math.inf
        if force or now - last >= max(1.0, 0.01 * now):
            p = self.progress()
            self.timeline.append({
                "elapsed": round(now, 3), "iterations": self.iterations, "queries": self.queries,
                "rf": p.rf, "urf": p.urf, "seeds": p.seeds, "gf": p.gf, "corpus": p.corpus,
            })

    def run(
        self,
        *,
        progress: Callable[[CampaignProgress], None] | None = None,
        checkpoint: Callable[[Campaign], None] | None = None,
    ) -> str:
        """Step until the budget is spent or no input is left; returns the stop reason.

        Args:
            progress: Called with a :class:`CampaignProgress` after every step.
            checkpoint: Called every ``config.checkpoint_every`` seconds and at the end.
        """
        if not self._ready:
            self.setup()
        self._session_start = time.perf_counter()
        last_checkpoint = time.perf_counter()
        layers = list(self.config.layers) if isinstance(self.config.layers, tuple) else self.config.layers
        hooks = (capture(self.m2, layers, transform=self.config.transform_name) if self.keep.needs_values
                 else None)
        reason = "budget"
        try:
            with eval_mode(self.m1), eval_mode(self.m2), torch.no_grad():
                if hooks is not None:
                    self._recorder = hooks.__enter__()
                while not self.budget.exhausted(iterations=self.iterations, seconds=self._now()):
                    left = self.budget.remaining_iterations(self.iterations)
                    k = self.config.batch if left is None else min(self.config.batch, left)
                    self._consistent = False
                    more = self.step(k)
                    self._consistent = True
                    if not more:
                        reason = "exhausted"
                        break
                    self._sample()
                    if progress is not None:
                        progress(self.progress())
                    due = time.perf_counter() - last_checkpoint >= self.config.checkpoint_every
                    if checkpoint is not None and due:
                        t = time.perf_counter()
                        checkpoint(self)
                        last_checkpoint = time.perf_counter()
                        self.timings["checkpoint"] += last_checkpoint - t
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            if hooks is not None:
                hooks.__exit__(None, None, None)
                self._recorder = None
            self.elapsed = self._now()
            self._session_start = time.perf_counter()
        self.stop_reason = reason
        self._sample(force=True)
        if progress is not None:
            progress(self.progress())
        return reason

    def result(self) -> CampaignResult:
        faults = self.faults()
        rf_inputs = [self.initial_rf_data[0]] + [p[0] for p in self._rf_parts]
        rf_p1 = [self.initial_rf_data[1]] + [p[1] for p in self._rf_parts]
        rf_p2 = [self.initial_rf_data[2]] + [p[2] for p in self._rf_parts]
        # initial faults come first in ``faults``; generated RF rows follow in order
        usage = self.chooser.to_dict()
        for i, rule in enumerate(self.rules):
            usage[rule]["rf"] = int(self.rule_rf[i])
        rf_rows = faults.select(faults.kind == FAULT_KINDS.index("rf"))
        first = np.flatnonzero(~rf_rows.initial)[:EXAMPLES]
        all_inputs = np.concatenate(rf_inputs)
        examples = {
            "seeds": self.x[torch.as_tensor(rf_rows.root[first])].numpy(), "faults": all_inputs[first],
            "seed_index": rf_rows.root[first], "label": rf_rows.y1[first], "m2_pred": rf_rows.y2[first],
            "rule": np.array([self.rules[i] if i >= 0 else "" for i in rf_rows.rule[first]], dtype=str),
        }
        return CampaignResult(
            config=self.config, metrics=compute_metrics(faults), stop_reason=self.stop_reason or "budget",
            iterations=self.iterations, steps=self.steps, queries=self.queries, generated=self.generated,
            passed=self.passed, seconds=self.elapsed, setup_seconds=self.setup_seconds,
            roots=len(self.root_index), queued_seeds=self.num_seed_entries, corpus=len(self.corpus),
            rule_usage=usage, timeline=tuple(self.timeline), timings=dict(self.timings), faults=faults,
            rf_inputs=all_inputs, rf_p1=np.concatenate(rf_p1), rf_p2=np.concatenate(rf_p2),
            resumed=self.resumed, examples=examples, evicted=self.corpus.evicted,
            shared_rejected=self.shared_rejected,
        )


def run_campaign(
    m1: nn.Module,
    m2: nn.Module,
    inputs,
    labels,
    *,
    bounds: tuple[float, float],
    config: CampaignConfig | None = None,
    fidelity=None,
    train_inputs=None,
    dataset: str | None = None,
    profile=None,
    store=None,
    experiment: str | None = None,
    cell: str = "campaign",
    progress: Callable[[CampaignProgress], None] | None = None,
    **overrides,
) -> CampaignResult:
    """Fuzz ``m2`` for regressions against ``m1`` from the test inputs ``inputs``.

    Args:
        m1: The original version of a classifier.
        m2: The new version, fuzzed for regressions against ``m1``.
        inputs: ``(N, C, H, W)`` test inputs (the seeds are those M1 gets right).
        labels: ``(N,)`` their labels.
        bounds: The data's pixel range.
        config: A :class:`CampaignConfig`; keyword ``overrides`` (``budget="10m"``,
            ``strategy="deephunter"``, ``batch=1``, ``seed=3``, ...) replace its fields.
        fidelity: A fidelity object instead of ``config.fidelity`` (a string is taken as
            ``config.fidelity``).
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
            images, a bad configuration, or a checkpoint made with another configuration.
    """
    config = config or CampaignConfig()
    if isinstance(fidelity, str):  # a spec: the configuration's field
        overrides["fidelity"], fidelity = fidelity, None
    if overrides:
        unknown = sorted(set(overrides) - {f.name for f in fields(CampaignConfig)})
        if unknown:
            raise DeepFaultError(
                f"unknown campaign setting(s) {', '.join(unknown)}; known: "
                f"{', '.join(f.name for f in fields(CampaignConfig))}"
            )
        config = replace(config, **overrides)
    campaign = Campaign(m1, m2, inputs, labels, bounds=bounds, config=config, fidelity=fidelity,
                        train_inputs=train_inputs, dataset=dataset, profile=profile)
    if store is None:
        campaign.run(progress=progress)
        return campaign.result()
    from .checkpoint import CampaignStore

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

