"""Fuzzing strategies in one loop: DRFuzz and the DeepHunter baseline (spec sections 3 and 10).

A strategy is an object (:class:`FuzzStrategy`) whose methods make the choices that differ
between the two: which inputs are roots, how mutants are made and checked
(:meth:`~FuzzStrategy.generate`), which candidates join the queue, how the rule chooser
learns and when a selected input's counter rises. The loop in :mod:`.loop` is shared
(queue, selection, batched execution, the oracle, metrics, checkpoints). A strategy sees the
campaign it is set up for through :class:`StrategyContext`, and a running campaign through
its parts (:mod:`.parts`): it records what it learns with their methods.

``drfuzz``:
    the 15 rules of section 5 chosen by MCMC (``uniform`` as ablation); mutants checked
    for fidelity (SSIM to the root or the discriminator); a candidate is kept when it
    raises its root's failure tendency (:class:`DiversityKeep`); ancestors with a new
    fault's tendency and roots with 9 unique failures are banned.
``deephunter``:
    roots are the inputs M2 gets right; 20 slots per iteration, each a uniformly random
    transformation (translation, rotation, scale, shear, contrast, brightness, blur, Gaussian
    noise) and parameter, retried up to 49 times until valid; at most one affine rule per
    lineage, with DeepHunter's own parameter lists (:data:`DEEPHUNTER_PARAMS`, as the
    published DRFuzz code runs it); validity against the lineage's reference (< 2% of the
    elements changed, or every element by < 20% of the range); a candidate is kept when it
    raises a coverage criterion of M2 (:class:`CoverageKeep`); no banning.

Strategies are registered in :data:`STRATEGIES`; a new one subclasses :class:`FuzzStrategy`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch

from ...core.registry import Registry
from ..fidelity.checks import Fidelity
from ..fidelity.validity import ValidityCheck
from ..mutation.diversity import DiversityTable
from ..mutation.vectors import SEQUENCE_RULES, VECTOR_RULES
from .generate import Generated, generate_per_iteration, generate_with_retries
from .keep import CoverageKeep, CoverageSettings, DiversityKeep, KeepRule, coverage_criterion

if TYPE_CHECKING:
    from .execution import ModelPair
    from .parts import CampaignParts, RuleStats
    from .seeds import Seeds

__all__ = [
    "DEEPHUNTER_PARAMS",
    "DEEPHUNTER_RULES",
    "DEEPHUNTER_TRIES",
    "DRFUZZ_RULES",
    "STRATEGIES",
    "DRFuzz",
    "StrategyContext",
    "StrategySettings",
    "DeepHunter",
    "FuzzStrategy",
    "Strategy",
    "get_strategy",
    "list_strategies",
]

#: The 15 DRFuzz rules (spec section 5), in the order the chain indexes them.
DRFUZZ_RULES = (
    "translation", "scale", "shear", "rotation", "contrast", "brightness", "blur", "erode", "dilate",
    "reverse_patch", "white_patch", "black_patch", "gauss_noise", "multiplicative_noise", "salt_pepper",
)
#: DeepHunter's transformations (spec section 10): four affine, four pixel-value ones.
DEEPHUNTER_RULES = (
    "translation", "rotation", "scale", "shear", "contrast", "brightness", "blur", "gauss_noise",
)

#: DeepHunter's parameters (DRFuzz's ``params/deephunter.py``), drawn uniformly from these
#: lists instead of the DRFuzz ranges; brightness in 0..255 units. Blur (the same nine
#: filters) and noise keep the rules' own draws.
DEEPHUNTER_PARAMS: dict[str, dict[str, tuple]] = {
    "translation": {"dx,dy": ((-5, -5), (-5, 0), (0, -5), (0, 0), (5, 0), (0, 5), (5, 5))},
    "rotation": {"angle": (-15.0, -12.0, -9.0, -6.0, -3.0, 3.0, 6.0, 9.0, 12.0, 15.0)},
    "scale": {"factor": tuple(round(1 + 0.05 * k, 2) for k in (-5, -4, -3, -2, -1, 1, 2, 3, 4, 5))},
    "shear": {"factor": tuple(round(-0.5 + 0.1 * k, 1) for k in range(10))},
    "contrast": {"alpha": tuple(round(1.2 + 0.2 * k, 1) for k in range(10))},
    "brightness": {"beta": tuple(10.0 + 10 * k for k in range(10))},
}

#: Tries per DeepHunter mutant slot (the published ``for i in range(1, 50)``: 49).
DEEPHUNTER_TRIES = 49


class StrategySettings(CoverageSettings, Protocol):
    """The configuration's fields a strategy reads (:class:`~.config.CampaignConfig` has them)."""

    @property
    def fidelity(self) -> str: ...


class StrategyContext(Protocol):
    """What a strategy reads of the campaign it is set up for (:meth:`FuzzStrategy.make_check`,
    :meth:`FuzzStrategy.make_keep`); the runner, :class:`~.loop.Campaign`, is one.
    """

    @property
    def config(self) -> StrategySettings: ...

    @property
    def bounds(self) -> tuple[float, float]: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def pair(self) -> ModelPair: ...

    @property
    def seeds(self) -> Seeds: ...

    @property
    def profile(self) -> Any: ...

    @property
    def train_inputs(self) -> Any: ...

    def fidelity_check(self) -> Fidelity:
        """The configured fidelity check."""
        ...


class FuzzStrategy(ABC):
    """A fuzzing strategy: what the shared loop in :mod:`.loop` asks of it.

    The loop owns the queue, selection, execution, the oracle, faults, metrics and
    checkpoints; a strategy says which test inputs are roots (:meth:`roots`), how an
    iteration's mutants are made and checked (:meth:`generate`), which candidates join the
    queue (:meth:`make_keep`), how the rule chooser learns (:meth:`learn`), when a selected
    input's counter rises (:meth:`counts`) and whether to ban (:attr:`ban`). Subclasses are
    registered as instances in :data:`STRATEGIES`.
    """

    name: str = ""
    description: str = ""
    #: Mutation rule names for images, in the order the chooser indexes them.
    rules: tuple[str, ...] = ()
    #: Rule names for the other kinds of input (:data:`~deepfault.core.kinds.INPUT_KINDS`).
    other_rules: ClassVar[dict[str, tuple[str, ...]]] = {"vector": VECTOR_RULES, "sequence": SEQUENCE_RULES}
    #: Rule chooser when the configuration names none.
    chooser: str = "mcmc"
    #: Mutant slots per iteration when the configuration names none.
    mutants: int = 20
    #: When a selected input's ``times_selected`` rises: ``"fault"`` (only in iterations where
    #: it produced a regression fault, as published) or ``"every"`` (every selection).
    count_selections: str = "fault"
    #: Ban ancestors and saturated roots after regression faults (section 7).
    ban: bool = False
    #: Drop "rest" mutants on which M2 became more confident (section 1).
    drop_confident: bool = False
    #: Allow an affine rule only on inputs whose lineage had none.
    one_affine_per_lineage: bool = False
    #: Discrete parameter lists drawn uniformly instead of the rules' own ranges.
    params: dict[str, dict[str, tuple]] | None = None
    #: The neuron value transform of a coverage keep rule when the configuration names none.
    transform: str = "raw"
    #: What of M2's insides the keep rule reads (``""``: only its outputs, so M2 may be a black box).
    reads_m2: str = ""

    def rules_for(self, kind: str) -> tuple[str, ...]:
        """The rule names for inputs of ``kind`` (``"image"``: :attr:`rules`), in chooser order."""
        return self.rules if kind == "image" else self.other_rules[kind]

    def check_spec(self, config: StrategySettings) -> str:
        """The spec of the strategy's own check (default: the configured ``fidelity``)."""
        return config.fidelity

    def no_seed_message(self) -> str:
        """Why a campaign cannot start when :meth:`roots` picks no test input."""
        return f"no test input qualifies as a {self.name} seed: there is no seed to fuzz"

    # --- what the loop asks --------------------------------------------------------------

    def roots(self, m1_right: np.ndarray, m2_right: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the test inputs the campaign starts from (default: those M1 gets right)."""
        return m1_right

    @abstractmethod
    def make_check(self, campaign: StrategyContext) -> Fidelity:
        """The strategy's own check of a mutant against its lineage's reference row."""

    @abstractmethod
    def make_keep(self, campaign: StrategyContext, queued: np.ndarray) -> KeepRule:
        """The keep rule, set up on the queued seeds (dense root indices ``queued``)."""

    def needs_profile(self, config) -> bool:
        """Whether the keep rule needs M2's coverage profile on the training split."""
        return False

    def tries(self, check: Fidelity) -> int:
        """Tries per mutant slot with the own check ``check``; 0: one rule per iteration, every
        slot tried once.
        """
        return 0

    def allowed(self, rules: RuleStats, lineage_affine: np.ndarray) -> np.ndarray | None:
        """``(n_rules,)`` bool mask of rules allowed for an input (``None``: all)."""
        if self.one_affine_per_lineage and lineage_affine:
            return ~rules.affine
        return None

    def draw_params(self, rule: str, n: int, generator: torch.Generator) -> dict[str, torch.Tensor] | None:
        """Parameters for ``n`` images of ``rule`` from :attr:`params` (``None``: the rule draws)."""
        space = (self.params or {}).get(rule)
        if not space:
            return None
        out = {}
        for key, values in space.items():
            pick = torch.randint(len(values), (n,), generator=generator)
            table = torch.tensor(values, dtype=torch.float64)
            if "," in key:
                for j, name in enumerate(key.split(",")):
                    out[name] = table[pick, j]
            else:
                out[key] = table[pick]
        return out

    def trusted(self, rules: RuleStats, drawn: np.ndarray) -> np.ndarray:
        """``(k,)`` bool: mutants of the rules ``drawn`` that pass the own check without it
        (DeepHunter's affine ones).
        """
        return np.zeros(len(drawn), dtype=bool)

    def generate(self, parts: CampaignParts, sel: np.ndarray) -> Generated:
        """Make and check the mutants of the selected queue entries ``sel``."""
        p = parts
        tries = self.tries(p.checks.own)
        if tries:
            return generate_with_retries(self, sel, tries, p)
        return generate_per_iteration(self, sel, p)

    def learn(self, rules: RuleStats, gen: Generated, n: int, gained: np.ndarray) -> None:
        """Update the rule chooser after execution; ``gained`` ``(n * m,)`` bool: an executed
        mutant with ``delta > 0`` (section 4). With one rule per iteration, a call is an
        iteration; with retries each try was recorded as a call already
        (:func:`~.generate.generate_with_retries`)
        and a rule gains once per iteration in which one of its mutants gained.
        """
        m = len(gen.owner) // max(n, 1)
        if gen.per_iteration_rule:
            faithful = np.asarray(gen.ok.reshape(n, m).any(axis=1))
            gain = np.asarray(gained.reshape(n, m).any(axis=1))
            drawn = gen.rule.reshape(n, m)[:, 0]
            for i in range(n):
                rules.record_iteration(int(drawn[i]), faithful=bool(faithful[i]), gain=bool(gain[i]))
            return
        rows = np.flatnonzero(gained)
        for _, rule in dict.fromkeys(zip(gen.owner[rows].tolist(), gen.rule[rows].tolist(), strict=True)):
            rules.record_gain(rule)

    def to_dict(self) -> dict:
        return {
            "name": self.name, "rules": list(self.rules), "chooser": self.chooser, "mutants": self.mutants,
            "count_selections": self.count_selections, "ban": self.ban, "drop_confident": self.drop_confident,
            "one_affine_per_lineage": self.one_affine_per_lineage,
            "params": {r: {k: list(v) for k, v in p.items()} for r, p in (self.params or {}).items()},
        }


class DRFuzz(FuzzStrategy):
    """DRFuzz (spec sections 3-7): the 15 rules chosen by MCMC, the fidelity check, the
    diversity keep rule, banning; ``ssim-compat`` fidelity switches to the published SSIM
    path's retry structure (up to 50 tries per slot, a fresh MCMC rule per try).
    """

    name = "drfuzz"
    description = "DRFuzz: MCMC rule choice, fidelity, diversity criterion, banning"
    rules = DRFUZZ_RULES
    chooser = "mcmc"
    mutants = 20
    ban = True
    drop_confident = True

    def make_check(self, campaign: StrategyContext) -> Fidelity:
        return campaign.fidelity_check()

    def make_keep(self, campaign: StrategyContext, queued: np.ndarray) -> KeepRule:
        seeds = campaign.seeds
        return DiversityKeep(DiversityTable(seeds.label, seeds.p1, seeds.p2))

    def no_seed_message(self) -> str:
        return "M1 classifies none of the test inputs correctly: there is no seed to fuzz"

    def tries(self, check: Fidelity) -> int:
        return int(getattr(check, "tries", 0) or 0)


class DeepHunter(FuzzStrategy):
    """DeepHunter as DRFuzz's published ``deephunter.py`` runs it (spec section 10): roots are
    the test inputs M2 gets right; 20 slots per iteration, each a uniformly random
    (transformation, parameter) pair tried up to :data:`DEEPHUNTER_TRIES` times until it is
    valid (affine ones are trusted); at most one affine change per lineage; a candidate joins
    the queue when it raises M2's coverage; no banning.
    """

    name = "deephunter"
    description = ("DeepHunter: random (transformation, parameter) per mutant with retries, one affine "
                   "per lineage, validity, KMNC coverage of M2")
    rules = DEEPHUNTER_RULES
    chooser = "uniform"
    mutants = 20
    one_affine_per_lineage = True
    params = DEEPHUNTER_PARAMS
    transform = "layer-minmax"  # per-input min-max scaled outputs, as published
    reads_m2 = "neurons (its coverage keep rule)"

    def check_spec(self, config: StrategySettings) -> str:
        return "validity"

    def roots(self, m1_right: np.ndarray, m2_right: np.ndarray) -> np.ndarray:
        return m2_right

    def make_check(self, campaign: StrategyContext) -> Fidelity:
        return ValidityCheck(bounds=campaign.bounds, device=campaign.device)

    def make_keep(self, campaign: StrategyContext, queued: np.ndarray) -> KeepRule:
        seeds = campaign.seeds.images_at(queued if len(queued) else [0])
        return CoverageKeep(coverage_criterion(campaign.pair.m2, seeds,
                                               campaign.config, profile=campaign.profile,
                                               train_inputs=campaign.train_inputs, update=len(queued) > 0))

    def needs_profile(self, config) -> bool:
        from ...coverage import criterion_params

        return "profile" in criterion_params(config.criterion)

    def tries(self, check: Fidelity) -> int:
        return DEEPHUNTER_TRIES

    def trusted(self, rules: RuleStats, drawn: np.ndarray) -> np.ndarray:
        return rules.affine[drawn]


#: Every fuzzing strategy, by name (``--strategy``).
STRATEGIES: Registry[FuzzStrategy] = Registry("fuzzing strategy")
STRATEGIES.register("drfuzz", DRFuzz())
STRATEGIES.register("deephunter", DeepHunter())

#: Kept for callers of the old name: a strategy is a :class:`FuzzStrategy`.
Strategy = FuzzStrategy


def get_strategy(name: str) -> FuzzStrategy:
    """The registered fuzzing strategy ``name`` (the message lists the known ones)."""
    return STRATEGIES.get(name)


def list_strategies() -> list[str]:
    """The names of the registered fuzzing strategies."""
    return STRATEGIES.names()

