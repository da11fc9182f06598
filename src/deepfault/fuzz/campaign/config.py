"""What defines a campaign (:class:`CampaignConfig`) and the progress it reports (:class:`CampaignProgress`).

The configuration is parsed once, here: a budget given as text (``"10m"``) becomes a
:class:`~.budget.Budget`, and every other field is checked, so everything downstream takes
the typed values as they are.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ...checks import check_int
from ...core.entry import renamed_fields
from ...core.kinds import OUTPUT_KINDS
from ...errors import DeepFaultError
from ..mutation.mcmc import CHOOSERS
from .budget import Budget, parse_budget
from .memory import DEFAULT_QUEUE_IMAGES, QUEUE_DTYPES, parse_size
from .strategies import STRATEGIES, FuzzStrategy

__all__ = ["CHECKPOINT_EVERY", "CHECK_ORDERS", "DEFAULT_BATCH", "QUEUE_CAPACITY", "CampaignConfig",
           "CampaignProgress"]

#: Selected inputs per step by default (``--inputs-per-step``): 640 mutants per forward pass.
DEFAULT_BATCH = 64
#: The most queue images kept in memory by default (the default budget in bytes,
#: :data:`~.memory.DEFAULT_QUEUE_MEMORY`, holds fewer of large inputs); beyond it the least
#: likely to be selected are evicted (their bookkeeping stays; :mod:`.corpus`, :mod:`.memory`).
QUEUE_CAPACITY = DEFAULT_QUEUE_IMAGES
#: Seconds between checkpoints by default.
CHECKPOINT_EVERY = 5.0
#: When an expensive own check runs (:attr:`CampaignConfig.check_order`).
CHECK_ORDERS = ("lazy", "before")


#: Result files' and store keys of the fields renamed after the CLI's options (unchanged, so
#: the experiment keys and checkpoints of older campaigns stay valid).
_FILE_KEYS = {"inputs_per_step": "batch", "criteria": "criterion"}


#: The fields' old names (still accepted, with a FutureWarning).
RENAMED = {"batch": "inputs_per_step", "criterion": "criteria"}


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
        checkpoint_every: Seconds between checkpoints (0: after every step).
    """

    strategy: str = "drfuzz"
    budget: Budget = Budget("iterations", 5000)
    inputs_per_step: int = DEFAULT_BATCH
    seed: int = 0
    chooser: str | None = None
    mutants: int | None = None
    fidelity: str = "discriminator"
    criteria: str = "kmnc"
    criterion_params: tuple[tuple[str, Any], ...] = ()
    layers: tuple[str, ...] | None = None
    transform: str | None = None
    max_seeds: int | None = None
    shared_fidelity: str | None = None
    count_selections: str | None = None
    queue_capacity: int | None = None
    queue_memory: int | None = None
    queue_dtype: str = "float32"
    output_kinds: tuple[str, str] = ("logits", "logits")
    check_order: str = "before"
    checkpoint_every: float = field(default=CHECKPOINT_EVERY, compare=False)

    def __post_init__(self):
        STRATEGIES.get(self.strategy)
        object.__setattr__(self, "budget", parse_budget(self.budget))  # the one place text is parsed
        check_int("inputs_per_step", self.inputs_per_step)
        check_int("seed", self.seed, minimum=0)
        if self.mutants is not None:
            check_int("mutants", self.mutants)
        if self.count_selections not in (None, "fault", "every"):
            raise DeepFaultError(
                f"count_selections must be 'fault' or 'every'; got {self.count_selections!r}"
            )
        if self.check_order not in CHECK_ORDERS:
            raise DeepFaultError(f"check_order must be one of {', '.join(CHECK_ORDERS)}; "
                                 f"got {self.check_order!r}")
        if self.queue_capacity is not None:
            check_int("queue_capacity", self.queue_capacity)
        if self.queue_memory is not None:
            object.__setattr__(self, "queue_memory", parse_size(self.queue_memory, "queue_memory"))
        if self.queue_dtype not in QUEUE_DTYPES:
            raise DeepFaultError(f"queue_dtype must be one of {', '.join(QUEUE_DTYPES)}; "
                                 f"got {self.queue_dtype!r}")
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
               if f.name != "checkpoint_every"}
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
        for name, default in (("queue_memory", None), ("queue_dtype", "float32")):  # likewise
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


