"""Fuzzing strategies in one loop: DRFuzz and the DeepHunter baseline (spec sections 3 and 10).

A :class:`Strategy` names the choices that differ between the two; the loop in
:mod:`.campaign` is shared (queue, selection, batched mutation and execution, the oracle,
metrics, checkpoints).

``drfuzz``:
    the 15 rules of section 5 chosen by MCMC (``uniform`` as ablation); mutants checked
    for fidelity (SSIM to the root or the discriminator); a candidate is kept when it
    raises its root's failure tendency (:class:`DiversityKeep`); ancestors with a new
    fault's tendency and roots with 9 unique failures are banned.
``deephunter``:
    translation, rotation, scale, shear, contrast, brightness, blur and Gaussian noise,
    uniformly, at most one affine rule per lineage, with DeepHunter's own parameter lists
    (:data:`DEEPHUNTER_PARAMS`, as the published DRFuzz code runs it); validity against
    the lineage's reference (< 2% of the elements changed, or every element by < 20% of the
    range); a candidate is kept when it raises a coverage criterion of M2
    (:class:`CoverageKeep`); no banning.

Strategies are registered in :data:`STRATEGIES`; a new one is a :class:`Strategy` value.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from ..core.registry import Registry
from ..errors import DeepFaultError
from .diversity import DiversityTable
from .fidelity import Fidelity

__all__ = [
    "CoverageKeep",
    "DEEPHUNTER_PARAMS",
    "DEEPHUNTER_RULES",
    "DRFUZZ_RULES",
    "DiversityKeep",
    "KeepInput",
    "KeepRule",
    "STRATEGIES",
    "Strategy",
    "ValidityCheck",
    "get_strategy",
    "list_strategies",
    "occurrence_rank",
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

#: DeepHunter's validity: fewer than this share of the elements changed (any amount) ...
VALIDITY_L0 = 0.02
#: ... or every element changed by less than this share of the pixel range.
VALIDITY_LINF = 0.2


@dataclass(frozen=True)
class Strategy:
    """What a fuzzing strategy chooses (module docstring).

    Attributes:
        name: Registry name.
        rules: Mutation rule names.
        chooser: Default rule chooser (``mcmc`` or ``uniform``).
        check: ``"fidelity"`` (the campaign's fidelity check) or ``"validity"`` (DeepHunter's).
        keep: ``"diversity"`` or ``"coverage"``.
        one_affine_per_lineage: Allow an affine rule only on inputs whose lineage had none.
        ban: Ban ancestors and saturated roots after regression faults (section 7).
        drop_confident: Drop "rest" mutants on which M2 became more confident (section 1).
        description: One line for help texts.
        params: Per rule, discrete parameter lists drawn uniformly instead of the rule's own
            ranges (``{"rotation": {"angle": (...)}}``; a key ``"a,b"`` draws pairs).
    """

    name: str
    rules: tuple[str, ...]
    chooser: str
    check: str
    keep: str
    one_affine_per_lineage: bool
    ban: bool
    drop_confident: bool
    description: str = ""
    params: dict[str, dict[str, tuple]] | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.name, "rules": list(self.rules), "chooser": self.chooser, "check": self.check,
            "keep": self.keep, "one_affine_per_lineage": self.one_affine_per_lineage, "ban": self.ban,
            "drop_confident": self.drop_confident,
            "params": {r: {k: list(v) for k, v in p.items()} for r, p in (self.params or {}).items()},
        }

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


#: Every fuzzing strategy, by name (``--strategy``).
STRATEGIES: Registry[Strategy] = Registry("fuzzing strategy")

STRATEGIES.register("drfuzz", Strategy(
    "drfuzz", DRFUZZ_RULES, "mcmc", "fidelity", "diversity", one_affine_per_lineage=False, ban=True,
    drop_confident=True, description="DRFuzz: MCMC rule choice, fidelity, diversity criterion, banning",
))
STRATEGIES.register("deephunter", Strategy(
    "deephunter", DEEPHUNTER_RULES, "uniform", "validity", "coverage", one_affine_per_lineage=True,
    ban=False, drop_confident=False, params=DEEPHUNTER_PARAMS,
    description="DeepHunter: uniform transformations (one affine per lineage), validity, coverage of M2",
))


def get_strategy(name: str) -> Strategy:
    return STRATEGIES.get(name)


def list_strategies() -> list[str]:
    return STRATEGIES.names()


class ValidityCheck(Fidelity):
    """DeepHunter's validity (spec section 10) as a fidelity check against reference rows.

    A mutant passes when it differs from its reference in fewer than 2% of its elements (by
    any amount), or by less than 20% of the pixel range in every element. The reference is
    the lineage's root, or the root under the lineage's one affine change (DeepHunter's
    ``I0' = t(I0)``); mutants made by an affine rule pass without the check, as in
    DeepHunter (the campaign does that).
    """

    name = "validity"

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return roots.detach().to(self.device, torch.float32).clone()

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        diff = (mutants.to(self.device) - ref_rows.to(self.device)).abs().flatten(1)
        l0 = (diff > 0).sum(dim=1)
        linf = diff.amax(dim=1) if diff.shape[1] else torch.zeros(len(diff), device=diff.device)
        lo, hi = self.bounds
        valid = (l0 < VALIDITY_L0 * diff.shape[1]) | (linf < VALIDITY_LINF * (hi - lo))
        return valid.float()

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(ref_rows), device=self.device)

    def to_dict(self) -> dict:
        return {"name": self.name, "bounds": list(self.bounds), "l0": VALIDITY_L0, "linf": VALIDITY_LINF}


@dataclass(frozen=True)
class KeepInput:
    """The executed mutants of one step, in draw order (every array ``(n,)`` or ``(n, ...)``).

    Attributes:
        iteration: Index of each mutant's iteration within the step (non-decreasing).
        roots: Dense root index of each mutant.
        tendency: ``(n, C)`` ``p2 - p1``.
        y2: M2's predictions.
        candidate: Bool, the mutant is a candidate seed (both models right, not dropped).
        rf: Bool, the mutant is a regression fault.
        values: ``(n, M)`` M2's neuron values (coverage strategies only), else ``None``.
    """

    iteration: np.ndarray
    roots: np.ndarray
    tendency: np.ndarray
    y2: np.ndarray
    candidate: np.ndarray
    rf: np.ndarray
    values: torch.Tensor | None = None


class KeepRule(ABC):
    """Decides which candidate mutants join the queue, updating its own state as it goes.

    Iterations are applied in draw order, so a step of ``B`` iterations gives the same
    answer as ``B`` steps of one.
    """

    needs_values = False

    @abstractmethod
    def select(self, step: KeepInput) -> np.ndarray:
        """``(n,)`` bool: the mutants kept; updates the state."""

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as arrays (checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`."""


def occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """``(n,)`` how many earlier entries have the same key: ``[4, 7, 4, 4] -> [0, 0, 1, 2]``."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.r_[0, np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1]
    run = np.arange(len(keys)) - np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = run
    return out


class DiversityKeep(KeepRule):
    """DRFuzz's keep rule on a :class:`~.diversity.DiversityTable` (spec section 7).

    Within one iteration every mutant is judged against the table as it was before the
    iteration; then the kept candidates and the regression faults raise the table.
    Iterations of different roots touch different rows, so they are applied together in
    *waves* (an iteration's wave is how many earlier iterations of the step share its
    root): the result equals applying them one by one.
    """

    def __init__(self, table: DiversityTable):
        self.table = table

    def select(self, step: KeepInput) -> np.ndarray:
        kept = np.zeros(len(step.roots), dtype=bool)
        if len(kept) == 0:
            return kept
        first = np.r_[True, step.iteration[1:] != step.iteration[:-1]]
        it_rows = np.flatnonzero(first)
        it_wave = occurrence_rank(step.roots[it_rows])
        wave = np.repeat(it_wave, np.diff(np.r_[it_rows, len(kept)]))
        for w in range(int(wave.max()) + 1):
            rows = np.flatnonzero(wave == w)
            cand = rows[step.candidate[rows]]
            if len(cand):
                kept[cand] = self.table.keep(step.roots[cand], step.tendency[cand], step.y2[cand])
            raise_rows = rows[kept[rows] | step.rf[rows]]
            self.table.update(step.roots[raise_rows], step.tendency[raise_rows])
        return kept

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.table.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.table.load_state_dict(state)


class CoverageKeep(KeepRule):
    """DeepHunter's keep rule: a candidate joins the queue when it covers an item of the
    criterion (on M2's neuron values) that nothing covered before, mutants taken one by one
    in draw order (as in DeepHunter, each kept mutant updates the coverage before the next
    is judged).

    Args:
        criterion: A :class:`~deepfault.coverage.criteria.Criterion` already updated with the
            seeds.
    """

    needs_values = True

    def __init__(self, criterion):
        self.criterion = criterion

    def select(self, step: KeepInput) -> np.ndarray:
        kept = np.zeros(len(step.roots), dtype=bool)
        cand = np.flatnonzero(step.candidate)
        if len(cand) == 0:
            return kept
        if step.values is None:
            raise DeepFaultError("the coverage keep rule needs M2's neuron values")
        values = step.values[torch.as_tensor(cand, device=step.values.device)]
        # A mutant that adds nothing now adds nothing after more updates: judge only the others,
        # one at a time (few: coverage saturates quickly).
        maybe = np.flatnonzero(self.criterion.would_increase(values).numpy())
        for j in maybe:
            row = values[j : j + 1]
            if bool(self.criterion.would_increase(row)[0]):
                self.criterion.update(row)
                kept[cand[j]] = True
        return kept

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {}
        for key, value in self.criterion.state_dict().items():
            if not isinstance(value, torch.Tensor):
                raise DeepFaultError(
                    f"coverage criterion {self.criterion.name!r} keeps non-tensor state ({key!r}); "
                    "it cannot guide a checkpointed campaign; choose nc, kmnc, nbc, snac or tknc"
                )
            out[key] = value.numpy()
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.criterion.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})
