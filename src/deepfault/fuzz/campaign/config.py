"""What defines a campaign (:class:`CampaignConfig`) and the progress it reports (:class:`CampaignProgress`).

The configuration is parsed once, here: a budget given as text (``"10m"``) becomes a
:class:`~.budget.Budget`, and every other field is checked, so everything downstream takes
the typed values as they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ...checks import MAX_BUDGET_SECONDS, MAX_INPUTS, MAX_MUTANTS, MAX_SEED, check_name
from ...core.capture import TRANSFORMS
from ...core.constraints import (
    WORKERS,
    Checked,
    Flag,
    Interval,
    Options,
    Text,
    constraint_of,
    param,
    validate,
)
from ...core.entry import renamed_fields
from ...core.executors import Parallel, check_ray_only
from ...core.kinds import OUTPUT_KINDS
from ...coverage import list_criteria
from ...errors import DeepFaultError
from ..fidelity.checks import check_spec, default_fidelity, fidelity_files
from ..mutation.mcmc import CHOOSERS
from .budget import Budget, parse_budget
from .memory import DEFAULT_QUEUE_IMAGES, QUEUE_DTYPES, parse_size
from .strategies import STRATEGIES, FuzzStrategy

__all__ = ["CAMPAIGN_EXECUTORS", "CHECKPOINT_EVERY", "CHECK_ORDERS", "DEFAULT_BATCH", "INPUTS_DEFAULT",
           "MAX_SYNC_EVERY", "QUEUE_CAPACITY", "SYNC_EVERY",
           "CampaignConfig", "CampaignProgress",
           "criterion_settings"]

#: Selected inputs per step by default (``--inputs-per-step``): 640 mutants per forward pass.
DEFAULT_BATCH = 64
#: The most queue images kept in memory by default (the default budget in bytes,
#: :data:`~.memory.DEFAULT_QUEUE_MEMORY`, holds fewer of large inputs); beyond it the least
#: likely to be selected are evicted (their bookkeeping stays; :mod:`.corpus`, :mod:`.memory`).
QUEUE_CAPACITY = DEFAULT_QUEUE_IMAGES
#: Seconds between checkpoints by default.
CHECKPOINT_EVERY = 5.0
#: Seconds between a many-worker campaign's syncs by default (:mod:`.workers`).
SYNC_EVERY = 5.0
#: The longest interval between syncs (a worker lost loses at most this much of its work).
MAX_SYNC_EVERY = 600.0
#: Where a many-worker campaign's workers run (:mod:`.workers`).
CAMPAIGN_EXECUTORS = ("process", "ray")
#: When an expensive own check runs (:attr:`CampaignConfig.check_order`).
CHECK_ORDERS = ("lazy", "before")


#: Result files' and store keys of the fields renamed after the CLI's options (unchanged, so
#: the experiment keys and checkpoints of older campaigns stay valid).
_FILE_KEYS = {"inputs_per_step": "batch", "criteria": "criterion"}


#: The fields' old names (still accepted, with a FutureWarning).
RENAMED = {"batch": "inputs_per_step", "criterion": "criteria"}

#: Fields that say how a campaign is run and stored, not what it computes: left out of
#: :meth:`CampaignConfig.to_dict` and :meth:`CampaignConfig.key` (and of equality).
RUN_FIELDS = ("checkpoint_every", "campaign", "fresh", "experiment", "executor", "address", "sync_every",
              "gpus_per_worker")


class _InputsDefault(str):
    """``fidelity``'s default, ``"discriminator"``, marked as not chosen: a campaign on vectors or
    sequences gets its kind's default instead (:meth:`CampaignConfig.for_inputs`). It equals,
    hashes and serialises as the plain text, so keys and files are those of ``"discriminator"``.
    """

    __slots__ = ()

    def __reduce__(self):
        return (_InputsDefault, (str(self),))


#: :attr:`CampaignConfig.fidelity`'s default (see :class:`_InputsDefault`).
INPUTS_DEFAULT = _InputsDefault("discriminator")


def _named(name: str, fn: Callable[[Any], Any], value):
    """``fn(value)``, its error's leading field word replaced by ``name`` (a command line's empty
    name: the parser puts the option in front).
    """
    try:
        return fn(value)
    except DeepFaultError as err:
        text = str(err)
        for word in ("budget", "queue_memory"):
            if text.startswith(word + " "):
                text = text[len(word) + 1:]
                break
        else:
            raise DeepFaultError(f"{name}: {text}" if name else text) from None
        raise DeepFaultError(f"{name} {text}".strip()) from None


def _run_only(field):
    """A :data:`RUN_FIELDS` field: not compared (two configurations that compute the same are equal)."""
    field.compare = False
    return field


def _budget(name: str, value) -> Budget:
    return _named(name, parse_budget, value)


def _size(name: str, value) -> int:
    return _named(name, lambda v: parse_size(v, "queue_memory"), value)


def _campaign_name(name: str, value) -> str:
    return check_name(name, value)


def _layers(name: str, value):
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise DeepFaultError(f"{name} must be comma-separated layer names; got {value!r}".strip())


def _output_kinds(name: str, value) -> tuple[str, str]:
    kinds = tuple(value) if isinstance(value, (list, tuple)) else ()
    if len(kinds) != 2 or any(k not in OUTPUT_KINDS for k in kinds):
        raise DeepFaultError(f"{name} must be two of {', '.join(OUTPUT_KINDS)}; got {value!r}".strip())
    return kinds


def _params(name: str, value) -> tuple[tuple[str, Any], ...]:
    items = value.items() if isinstance(value, dict) else value
    try:
        return tuple(sorted((str(k), v) for k, v in items))
    except (TypeError, ValueError):
        raise DeepFaultError(f"{name} must be a dict of the criterion's parameters; got {value!r}") from None




def criterion_settings(criteria: str, sections: int | None = None,
                     threshold: float | None = None) -> tuple[tuple[str, Any], ...]:
    """:attr:`CampaignConfig.criterion_params` from the command line's ``--sections`` (KMNC's) and
    ``--threshold`` (NC's and NAC's, when given); the other criteria take neither.
    """
    if criteria == "kmnc" and sections is not None:
        return (("sections", sections),)
    if criteria in ("nc", "nac") and threshold is not None:
        return (("threshold", threshold),)
    return ()


#: What a fidelity spec is, in words.
_SPEC = "a fidelity spec (ssim:T, discriminator:FILE, dsa:T, linf:T, none, ...)"

_FIDELITY_HELP = (
    "DRFuzz's fidelity check (default: 'discriminator' for images, 'mdsa' for vectors (N, F) and sequences "
    "(N, C, L)): 'discriminator' (the data set's, trained on first use for mnist and fashion-mnist and "
    "cached), 'discriminator:FILE' ('deepfault gan train'), 'ssim' or 'ssim:T' (SSIM >= T, default 0.99, "
    "with the data's true range), 'ssim-compat' (a compatibility mode: the published code's SSIM path, "
    "uniform 7x7 window, int16 range 65535, up to 20 accepted mutants per iteration, 50 tries each), 'none' "
    "(measurement), or M1's surprise adequacy against the training split: 'dsa' (DSA <= the 90th percentile "
    "of the test inputs' DSA), 'dsa:T' (DSA <= T), 'dsa:pQ' (the Q-th percentile), 'dsa:T:FILE' or "
    "'dsa::FILE' (a saved surprise state instead of the cached fit), and the same with 'lsa' or 'mdsa'; "
    "scored from M1's forward pass of each mutant, no extra model; or 'linf:T' (every element within T of "
    "the seed, in the data's units; default a tenth of the range). SSIM and the discriminator take images "
    "only")


@renamed_fields(**RENAMED)
@dataclass(frozen=True)
class CampaignConfig:
    """Everything that defines a campaign's result (the checkpoint interval excepted).

    The fields take the names of ``deepfault regress``'s options (``inputs_per_step``,
    ``criteria``); the old names ``batch=`` and ``criterion=`` still work with a
    ``FutureWarning``, and result files and store keys keep them.

    Attributes:
        strategy: ``drfuzz`` or ``deephunter`` (:data:`~.strategies.STRATEGIES`).
        budget: A :class:`~.budget.Budget`; text (``"10m"``, ``"300s"``, ``"5000it"``) is parsed
            once, here (:func:`~.budget.parse_budget`).
        inputs_per_step: Selected inputs per step ``B`` (1 is the published algorithm;
            ``--inputs-per-step``, formerly ``batch``).
        seed: Seed of every random choice.
        chooser: Rule chooser (``mcmc``, ``uniform``); ``None``: the strategy's.
        mutants: Mutant slots per selected input; ``None``: the strategy's (20, as published).
        fidelity: Fidelity check of DRFuzz: ``discriminator`` (the default for images: the data
            set's cached discriminator, trained on first use for MNIST and Fashion-MNIST; left at
            its default, vectors and sequences get ``mdsa``, :meth:`for_inputs`),
            ``discriminator:FILE``, ``ssim``/``ssim:T`` (true pixel range), ``ssim-compat``
            (the published SSIM path, with its retry structure) or ``none``. DeepHunter uses
            its validity rule instead.
        shared_fidelity: One filter applied on top of the strategy's own check to every
            executed mutant (affine ones included), for a fair comparison of strategies
            (same specs as ``fidelity``); ``None``: none.
        count_selections: ``fault`` (an input's ``times_selected`` rises only in iterations
            where it produced a regression fault, as published) or ``every``; ``None``: the
            strategy's (``fault``).
        queue_memory: The queue's images' budget in bytes (an int, or text such as ``"512MiB"``,
            ``"2GiB"``, parsed here); the capacity in images is the budget over the bytes of
            one image in ``queue_dtype`` (:func:`~.memory.queue_slots`). ``None``: 1 GiB, at
            most 65,536 images (so small inputs keep the campaign they had before budgets
            were in bytes).
        queue_dtype: What the queue keeps its images in: ``float32`` (the campaign's own,
            lossless; the default) or ``float16`` (half the bytes; each queued image is
            rounded, so the campaign differs from the float32 one).
        queue_capacity: A count capacity instead of (or, with ``queue_memory``, beside) the
            bytes: exactly this many images, whatever their size (tests, reproducing a
            campaign of an older version). ``None``: from the bytes.
        criteria: DeepHunter's coverage criterion (``kmnc``, ``nc``, ``nbc``, ``snac``, ``tknc``;
            ``--criteria``, formerly ``criterion``).
        criterion_params: Its parameters (``sections``, ``threshold``, ``top_k``, ``scale``); KMNC
            takes DeepHunter's 1,000 sections unless told otherwise.
        layers: Layers of M2 the criterion reads (``None``: the default of
            :func:`~deepfault.core.capture.default_layers`).
        transform: Neuron value transform for the criterion (``raw`` or ``layer-minmax``);
            ``None``: ``layer-minmax`` for DeepHunter (per-input min-max scaled outputs, as
            published), ``raw`` otherwise.
        max_seeds: Use only the first ``max_seeds`` test inputs as candidate seeds.
        output_kinds: What M1 and M2 output (``logits`` or ``probabilities``).
        check_order: When an expensive own check (the discriminator) judges DRFuzz's mutants:
            ``before`` (the default and the published order: every mutant checked before
            execution) or ``lazy`` (both models run on every changed mutant first and the check
            scores only those whose verdict can change the result, :mod:`.lazy`). The faults,
            queue, rule statistics and bans are the same; ``queries`` counts the mutants run
            through the models, so it is larger in the lazy order. On DRFuzz's SUPPLY pair the
            lazy order skips 17% of the verdicts but runs 0.85-0.89x as fast on an idle CPU
            (``docs/performance.md``), so it is not the default.
        workers: Fuzzers on this one campaign (:mod:`.workers`): each with its own random
            stream and rule-chooser prior, sharing their unique failures and diversity state
            every ``sync_every`` seconds through the store. 1 (the default) is the one-process
            campaign, unchanged.
        checkpoint_every: Seconds between checkpoints (0: after every step).
        campaign: The campaign's id in the store (default ``STRATEGY-seedS``).
        fresh: Start the campaign again even when the store holds it (its checkpoint or
            finished result of this configuration is deleted first); without it a rerun resumes,
            or returns the finished result.
        experiment: The store's experiment key (default: a hash of the configuration, both
            models' weights and the data).
        executor: Where the workers run: ``process`` (local processes) or ``ray``.
        address: A Ray cluster to join (``ray`` only; ``None``: a local one).
        sync_every: Seconds between the workers' syncs (each one also a checkpoint).
        gpus_per_worker: GPUs each Ray worker reserves (``ray`` only; ``0.25`` puts four workers
            on one GPU); a worker with a GPU runs its models there (:mod:`.workers`). 0: none.

    Every field declares what it accepts (:func:`~deepfault.core.constraints.param`); the last
    eight say how the campaign is run and stored, not what it computes (:data:`RUN_FIELDS`).
    """

    strategy: str = param("drfuzz", Options(STRATEGIES.names), help="fuzzing strategy")
    budget: Budget = param(
        Budget("iterations", 5000),
        Checked(_budget, "a number with a unit: seconds ('300s'), minutes ('10m'), hours ('1h') or "
                 "iterations ('5000it')", bad=("ten minutes", "-5s", "99999h", "0.5it")),
        metavar="B",
        help="how long to fuzz, in wall time or iterations (iterations are reproducible with --seed)")
    inputs_per_step: int = param(DEFAULT_BATCH, Interval(int, 1, MAX_INPUTS),
                                 metavar="B",
                                 help="selected inputs per step (B; 1 is the published algorithm)")
    seed: int = param(0, Interval(int, 0, MAX_SEED), metavar="S", help="seed of every random choice")
    chooser: str | None = param(None, Options(CHOOSERS.names, none=True),
                                help="rule choice (default: the strategy's: mcmc for drfuzz, uniform for "
                                "deephunter)")
    mutants: int | None = param(None, Interval(int, 1, MAX_MUTANTS, none=True),
                                metavar="N", help="mutants per selected input (default: 20, as published)")
    fidelity: str = param(INPUTS_DEFAULT, Checked(check_spec, _SPEC, bad=("bogus", "ssim:2", "dsa:abc", ""),
                                                                  role="input", names=fidelity_files),
                          metavar="SPEC", help=_FIDELITY_HELP)
    criteria: str = param("kmnc", Options(list_criteria), option="--criteria",
                          metavar="NAME",
                          help="DeepHunter's coverage criterion of M2, one name (kmnc, nbc, snac need the "
                          "training split)")
    criterion_params: tuple[tuple[str, Any], ...] = param(
        (), Checked(_params, "a dict of the criterion's parameters", bad=(3,)),
        help="the criterion's parameters (sections, threshold, top_k, scale)")
    layers: tuple[str, ...] | str | None = param(
        None, Checked(_layers, "comma-separated layer names", bad=("", ()), none=True),
        metavar="NAMES",
        help="M2's layers the criterion reads: names, globs, type:CLASS, 'blocks' or 'linear-conv' (default: "
        "'blocks' for a network with residual/transformer blocks, else 'linear-conv', every Linear/Conv but "
        "the logits)")
    transform: str | None = param(None, Options(TRANSFORMS, none=True), help="neuron value transform")
    max_seeds: int | None = param(None, Interval(int, 1, MAX_INPUTS, none=True),
                                  metavar="N", help="use only the first N test inputs as candidate seeds")
    shared_fidelity: str | None = param(
        None, Checked(check_spec, _SPEC, bad=("bogus",), none=True, role="input", names=fidelity_files),
        metavar="SPEC",
        help="one filter applied on top of each strategy's own check to every executed mutant (DeepHunter's "
        "affine ones included), same specs as --fidelity (default: none; with --strategy both: the "
        "--fidelity check)")
    count_selections: str | None = param(
        None, Options(("fault", "every"), none=True),
        help="when a selected input's times_selected rises: only in iterations where it produced a "
        "regression fault (fault, as published; the default) or at every selection")
    queue_capacity: int | None = param(None, Interval(int, 1, MAX_INPUTS, none=True),
                                       metavar="N",
                                       help="a count instead of --queue-memory: exactly N queue images, "
                                       "whatever their size (with --queue-memory: the smaller)")
    queue_memory: int | None = param(
        None, Checked(_size, "a size such as 512MiB, 2GiB or 1.5GB", bad=("lots", "0", "-1GiB"), none=True),
        metavar="SIZE",
        help="memory for the queue's images ('512MiB', '2GiB', '1.5GB'); the least likely to be selected are "
        "evicted beyond it (default 1GiB, at most 65536 images: a 3x224x224 float32 image takes 588 KiB, so "
        "1,783 of them)")
    queue_dtype: str = param("float32", Options(tuple(QUEUE_DTYPES)),
                             help="what the queue keeps its images in: float32 (the data's own, lossless) or "
                             "float16 (twice the images in the same memory; each queued image rounded, so "
                             "the campaign differs)")
    output_kinds: tuple[str, str] = param(
        ("logits", "logits"), Checked(_output_kinds, "two of logits, probabilities", bad=(("logits",),)),
        help="what M1 and M2 output")
    check_order: str = param("before", Options(CHECK_ORDERS), help="when an expensive own check runs")
    workers: int = param(1, WORKERS, metavar="N",
    help="fuzzers on one campaign, each with its own random stream and "
                         "rule prior, sharing their faults and diversity state through the store every "
                         "--sync-every seconds (1: the one-process campaign)")
    checkpoint_every: float = _run_only(param(CHECKPOINT_EVERY, Interval(float, 0, MAX_BUDGET_SECONDS),
                                              metavar="S", help="seconds between checkpoints"))
    campaign: str | None = _run_only(param(
        None, Checked(_campaign_name, "a plain name", bad=("a/b", ".."), none=True),
        metavar="ID", help="the campaign's id in the store (default: STRATEGY-seedS)"))
    fresh: bool = _run_only(param(
        False, Flag(),
        help="start the campaign from the start even when --store holds it (its checkpoint or finished "
        "result with these options is deleted); without it a rerun with the same options resumes, or prints "
        "the finished result; other options start a new campaign beside it"))
    experiment: str | None = _run_only(param(
        None, Text(max_length=200, none=True),
        help="the store's experiment key (default: a hash of the configuration, both models' weights and the "
        "data)"))
    executor: str = _run_only(param("process", Options(CAMPAIGN_EXECUTORS),
                                    help="where a many-worker campaign's workers run"))
    address: str | None = _run_only(param(None, constraint_of(Parallel, "address"),  # the one declaration
                                          metavar="ADDRESS",
                                          help="the Ray cluster to join (--executor ray; default: a local "
                                          "one)"))
    sync_every: float = _run_only(param(SYNC_EVERY, Interval(float, 0.5, MAX_SYNC_EVERY),
                                        metavar="S",
                                        help="seconds between the workers' syncs (each also a checkpoint)"))
    gpus_per_worker: float = _run_only(param(0.0, constraint_of(Parallel, "gpus_per_worker"),  # likewise
                                             help="GPUs each Ray worker reserves, its models run there; "
                                             "fractions share one GPU (0.5: two workers on a GPU); 0: CPU "
                                             "only"))

    def __post_init__(self):
        validate(self)
        check_ray_only(self.executor, gpus_per_worker=self.gpus_per_worker)  # (its address: not checked here)
        for name in ("budget", "criterion_params", "layers", "output_kinds", "queue_memory"):
            value = getattr(self, name)
            if value is not None:  # each in its one form (parsed once, here)
                object.__setattr__(self, name, constraint_of(self, name).check(name, value))

    def for_inputs(self, kind: str) -> CampaignConfig:
        """The configuration for inputs of ``kind`` (``image``, ``sequence``, ``vector``): a
        fidelity left at its default becomes the kind's (:func:`~..fidelity.checks.default_fidelity`:
        the discriminator for images, ``mdsa`` for vectors and sequences); a chosen one stays.
        """
        if type(self.fidelity) is _InputsDefault:
            return replace(self, fidelity=default_fidelity(kind))
        return self

    @property
    def batch(self) -> int:
        """The deprecated name of :attr:`inputs_per_step`."""
        return self.inputs_per_step

    @property
    def criterion(self) -> str:
        """The deprecated name of :attr:`criteria`."""
        return self.criteria

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
        return self.transform if self.transform is not None else self.strategy_spec.transform

    @property
    def check_name(self) -> str:
        own = self.strategy_spec.check_spec(self)
        return own if self.shared_fidelity is None else f"{own} + shared {self.shared_fidelity}"

    def to_dict(self) -> dict:
        out = {_FILE_KEYS.get(f.name, f.name): getattr(self, f.name) for f in fields(self)
               if f.name not in RUN_FIELDS}
        out["fidelity"] = str(self.fidelity)
        out["criterion_params"] = dict(self.criterion_params)
        out["layers"] = list(self.layers) if isinstance(self.layers, tuple) else self.layers
        out["output_kinds"] = list(self.output_kinds)
        out["budget"] = str(self.budget)
        out["chooser"] = self.chooser_name
        out["mutants"] = self.mutants_per_input
        out["count_selections"] = self.count_rule
        out["transform"] = self.transform_name
        if self.check_order == "before":  # configurations from before the field hash as they did
            del out["check_order"]
        for name, default in (("queue_memory", None), ("queue_dtype", "float32"), ("workers", 1)):  # likewise
            if out[name] == default:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> CampaignConfig:
        known = {f.name for f in fields(cls)}
        back = {v: k for k, v in _FILE_KEYS.items()}
        kwargs = {back.get(k, k): v for k, v in data.items() if back.get(k, k) in known}
        kwargs.setdefault("check_order", "before")  # written before the field existed, or 'before
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


