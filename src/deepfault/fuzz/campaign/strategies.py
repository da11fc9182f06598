"""Fuzzing strategies in one loop: DRFuzz and the DeepHunter baseline (spec sections 3 and 10).

A strategy is an object (:class:`FuzzStrategy`) whose methods make the choices that differ
between the two: which inputs are roots, how mutants are made and checked
(:meth:`~FuzzStrategy.generate`), which candidates join the queue, how the rule chooser
learns and when a selected input's counter rises. The loop in :mod:`.campaign` is shared
(queue, selection, batched execution, the oracle, metrics, checkpoints).

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
from dataclasses import dataclass, field

import numpy as np
import torch

from ...core.registry import Registry
from ...errors import DeepFaultError
from ..fidelity.checks import Fidelity
from ..mutation.diversity import DiversityTable

__all__ = [
    "CoverageKeep",
    "DEEPHUNTER_PARAMS",
    "DEEPHUNTER_RULES",
    "DRFUZZ_RULES",
    "DEEPHUNTER_TRIES",
    "DRFuzz",
    "DeepHunter",
    "DiversityKeep",
    "FuzzStrategy",
    "Generated",
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

#: Tries per DeepHunter mutant slot (the published ``for i in range(1, 50)``: 49).
DEEPHUNTER_TRIES = 49

#: DeepHunter's validity: fewer than this share of the elements changed (any amount) ...
VALIDITY_L0 = 0.02
#: ... or every element changed by less than this share of the pixel range.
VALIDITY_LINF = 0.2


@dataclass
class Generated:
    """The mutants of one step, one row per mutant slot (``n`` iterations x ``m`` slots).

    Attributes:
        mutants: ``(n * m, C, H, W)`` on the campaign's device; rows whose ``ok`` is false
            hold whatever the last try made (never executed).
        owner: ``(n * m,)`` the iteration (index into the step's selection) of each row.
        rule: ``(n * m,)`` the rule index that made each row's mutant.
        ok: ``(n * m,)`` bool: passed the strategy's own check and differs from its parent.
        made: Mutants made, retries included (``generated`` in the result).
        affine_params: Per affine rule index, ``(rows, params)``: the sorted rows of ``ok``
            mutants it made and their parameters (rows of ``params`` aligned with ``rows``),
            for DeepHunter's reference ``t(I0)``.
        per_iteration_rule: One rule per iteration (MCMC statistics are then per iteration).
    """

    mutants: torch.Tensor
    owner: np.ndarray
    rule: np.ndarray
    ok: np.ndarray
    made: int
    affine_params: dict = field(default_factory=dict)
    per_iteration_rule: bool = True


class FuzzStrategy(ABC):
    """A fuzzing strategy: what the shared loop in :mod:`.campaign` asks of it.

    The loop owns the queue, selection, execution, the oracle, faults, metrics and
    checkpoints; a strategy says which test inputs are roots (:meth:`roots`), how an
    iteration's mutants are made and checked (:meth:`generate`), which candidates join the
    queue (:meth:`make_keep`), how the rule chooser learns (:meth:`learn`), when a selected
    input's counter rises (:meth:`counts`) and whether to ban (:attr:`ban`). Subclasses are
    registered as instances in :data:`STRATEGIES`.
    """

    name: str = ""
    description: str = ""
    #: Mutation rule names, in the order the chooser indexes them.
    rules: tuple[str, ...] = ()
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

    # --- what the loop asks --------------------------------------------------------------

    def roots(self, m1_right: np.ndarray, m2_right: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the test inputs the campaign starts from (default: those M1 gets right)."""
        return m1_right

    @abstractmethod
    def make_check(self, campaign) -> Fidelity:
        """The strategy's own check of a mutant against its lineage's reference row."""

    @abstractmethod
    def make_keep(self, campaign, queued: np.ndarray) -> KeepRule:
        """The keep rule, set up on the queued seeds (dense root indices ``queued``)."""

    def needs_profile(self, config) -> bool:
        """Whether the keep rule needs M2's coverage profile on the training split."""
        return False

    def tries(self, campaign) -> int:
        """Tries per mutant slot; 0: one rule per iteration, every slot tried once."""
        return 0

    def allowed(self, campaign, lineage_affine: np.ndarray) -> np.ndarray | None:
        """``(n_rules,)`` bool mask of rules allowed for an input (``None``: all)."""
        if self.one_affine_per_lineage and lineage_affine:
            return ~campaign.affine
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

    def trusted(self, campaign, rules: np.ndarray) -> np.ndarray:
        """``(k,)`` bool: mutants that pass the own check without it (DeepHunter's affine ones)."""
        return np.zeros(len(rules), dtype=bool)

    def generate(self, campaign, sel: np.ndarray) -> Generated:
        """Make and check the mutants of the selected queue entries ``sel``."""
        if self.tries(campaign):
            return _generate_with_retries(self, campaign, sel, self.tries(campaign))
        return _generate_per_iteration(self, campaign, sel)

    def learn(self, campaign, gen: Generated, n: int, gained: np.ndarray) -> None:
        """Update the rule chooser after execution; ``gained`` ``(n * m,)`` bool: an executed
        mutant with ``delta > 0`` (section 4). With one rule per iteration, a call is an
        iteration; with retries each try was recorded as a call already (:func:`_generate_with_retries`)
        and a rule gains once per iteration in which one of its mutants gained.
        """
        m = len(gen.owner) // max(n, 1)
        if gen.per_iteration_rule:
            faithful = gen.ok.reshape(n, m).any(axis=1)
            gain = gained.reshape(n, m).any(axis=1)
            rules = gen.rule.reshape(n, m)[:, 0]
            for i in range(n):
                campaign.chooser.update(int(rules[i]), faithful=bool(faithful[i]), gain=bool(gain[i]))
            return
        rows = np.flatnonzero(gained)
        for _, rule in dict.fromkeys(zip(gen.owner[rows].tolist(), gen.rule[rows].tolist(), strict=True)):
            campaign.chooser.gain[rule] += 1

    def to_dict(self) -> dict:
        return {
            "name": self.name, "rules": list(self.rules), "chooser": self.chooser, "mutants": self.mutants,
            "count_selections": self.count_selections, "ban": self.ban, "drop_confident": self.drop_confident,
            "one_affine_per_lineage": self.one_affine_per_lineage,
            "params": {r: {k: list(v) for k, v in p.items()} for r, p in (self.params or {}).items()},
        }


def _generate_per_iteration(strategy: FuzzStrategy, c, sel: np.ndarray) -> Generated:
    """One rule per iteration, ``m`` mutants with fresh parameters, checked once (spec section 3)."""
    n, m = len(sel), c.mutants
    lineage_affine = c.corpus.static["affine"][sel]
    rules = np.empty(n, dtype=np.int64)
    for i in range(n):
        rules[i] = c.chooser.choose(c.rng, strategy.allowed(c, lineage_affine[i]))
    c.tick("select")
    parents = c.corpus.images_of(sel)
    shape = parents.shape[1:]
    mutants = torch.empty((n, m, *shape), dtype=parents.dtype, device=c.device)
    keep_params = strategy.one_affine_per_lineage
    raw_params: dict[int, tuple[np.ndarray, dict]] = {}
    for u in dict.fromkeys(rules.tolist()):
        idx = np.flatnonzero(rules == u)
        idx_t = torch.as_tensor(idx, device=c.device)
        fixed = strategy.draw_params(c.rules[u], len(idx) * m, c.tgen)
        out, params = c.rule_fns[u](parents[idx_t].repeat_interleave(m, 0), generator=c.tgen,
                                    bounds=c.bounds, params=fixed)
        mutants[idx_t] = out.view(len(idx), m, *shape)
        if keep_params and c.affine[u]:
            raw_params[u] = (idx, params)
    mutants = mutants.view(n * m, *shape)
    owner = np.repeat(np.arange(n), m)
    c.tick("mutate")
    changed = (mutants.view(n, m, -1) != parents.view(n, 1, -1)).any(dim=2).view(-1)
    ref_ids = torch.as_tensor(c.corpus.static["ref"][sel][owner], device=c.refs.data.device)
    ok = c.check.passes(mutants, c.refs.data[ref_ids]).to(changed.device)
    mrule = rules[owner]
    trusted = strategy.trusted(c, mrule)
    if trusted.any():
        ok = ok | torch.as_tensor(trusted, device=ok.device)
    ok = (ok & changed).cpu().numpy()
    affine_params = {}
    for u, (idx, params) in raw_params.items():
        rows = (idx[:, None] * m + np.arange(m)[None, :]).reshape(-1)
        good = ok[rows]
        pick = torch.as_tensor(np.flatnonzero(good))
        affine_params[u] = (rows[good], {k: v[pick] for k, v in params.items()})
    return Generated(mutants, owner, mrule, ok, n * m, affine_params, per_iteration_rule=True)


def _generate_with_retries(strategy: FuzzStrategy, c, sel: np.ndarray, tries: int) -> Generated:
    """``m`` slots per iteration, each tried up to ``tries`` times with a fresh rule (and
    parameters) per try until a mutant passes the check and differs from its parent: the
    published code's structure for DeepHunter and for DRFuzz's SSIM path (``ssim-compat``).

    All pending slots of the step are tried together, round by round; each try is one call
    of the chooser (``selected``, and ``faithful`` when it passed), recorded in slot order
    after each round, so the rules of one round are drawn from the statistics as they were
    when the round began.
    """
    n, m = len(sel), c.mutants
    slots = n * m
    owner = np.repeat(np.arange(n), m)
    parents = c.corpus.images_of(sel)
    shape = parents.shape[1:]
    flat_parents = parents.view(n, -1)
    out = torch.empty((slots, *shape), dtype=parents.dtype, device=c.device)
    rule_of = np.full(slots, -1, dtype=np.int64)
    lineage_affine = c.corpus.static["affine"][sel]
    refs = c.corpus.static["ref"][sel]
    pending = np.arange(slots)
    made = 0
    collected: dict[int, list] = {}
    for _ in range(tries):
        if len(pending) == 0:
            break
        masks = [strategy.allowed(c, lineage_affine[owner[s]]) for s in pending]
        if all(mask is None for mask in masks):  # DRFuzz: every rule allowed, the chain in one go
            r = c.chooser.choose_many(c.rng, len(pending))
        else:
            r = np.array([c.chooser.choose(c.rng, mask) for mask in masks], dtype=np.int64)
        c.tick("select")
        cand = torch.empty((len(pending), *shape), dtype=parents.dtype, device=c.device)
        params_of: dict[int, tuple[np.ndarray, dict]] = {}
        for u in dict.fromkeys(r.tolist()):
            j = np.flatnonzero(r == u)
            j_t = torch.as_tensor(j, device=c.device)
            src = parents[torch.as_tensor(owner[pending[j]], device=c.device)]
            fixed = strategy.draw_params(c.rules[u], len(j), c.tgen)
            made_u, params = c.rule_fns[u](src, generator=c.tgen, bounds=c.bounds, params=fixed)
            cand[j_t] = made_u
            if c.affine[u]:
                params_of[u] = (j, params)
        made += len(pending)
        c.tick("mutate")
        own_t = torch.as_tensor(owner[pending], device=c.device)
        changed = (cand.view(len(pending), -1) != flat_parents[own_t]).any(dim=1)
        ref_ids = torch.as_tensor(refs[owner[pending]], device=c.refs.data.device)
        passed = c.check.passes(cand, c.refs.data[ref_ids]).to(changed.device)
        trusted = strategy.trusted(c, r)
        if trusted.any():
            passed = passed | torch.as_tensor(trusted, device=passed.device)
        passed = (passed & changed).cpu().numpy()
        c.chooser.record(r, faithful=passed)
        acc = np.flatnonzero(passed)
        rows = pending[acc]
        out[torch.as_tensor(rows, device=c.device)] = cand[torch.as_tensor(acc, device=c.device)]
        rule_of[rows] = r[acc]
        for u, (j, params) in params_of.items():
            good = passed[j]
            if good.any():
                pick = torch.as_tensor(np.flatnonzero(good))
                sub = {k: v[pick] for k, v in params.items()}
                collected.setdefault(u, []).append((pending[j[good]], sub))
        pending = pending[~passed]
        c.tick("check")
    affine_params = {}
    for u, parts in collected.items():
        rows = np.concatenate([p[0] for p in parts])
        order = np.argsort(rows, kind="stable")
        params = {k: torch.cat([p[1][k] for p in parts])[torch.as_tensor(order)] for k in parts[0][1]}
        affine_params[u] = (rows[order], params)
    ok = rule_of >= 0
    rule_of[~ok] = 0
    return Generated(out, owner, rule_of, ok, made, affine_params, per_iteration_rule=False)


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

    def make_check(self, campaign) -> Fidelity:
        return campaign.fidelity_check()

    def make_keep(self, campaign, queued: np.ndarray) -> KeepRule:
        return DiversityKeep(campaign.table)

    def tries(self, campaign) -> int:
        return int(getattr(campaign.check, "tries", 0) or 0)


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

    def roots(self, m1_right: np.ndarray, m2_right: np.ndarray) -> np.ndarray:
        return m2_right

    def make_check(self, campaign) -> Fidelity:
        return ValidityCheck(bounds=campaign.bounds, device=campaign.device)

    def make_keep(self, campaign, queued: np.ndarray) -> KeepRule:
        seeds = campaign.root_images[torch.as_tensor(queued, device=campaign.device)]
        return CoverageKeep(campaign.coverage_criterion(seeds if len(seeds) else campaign.root_images[:1],
                                                        update=len(seeds) > 0))

    def needs_profile(self, config) -> bool:
        from ...coverage import criterion_params

        return "profile" in criterion_params(config.criterion)

    def tries(self, campaign) -> int:
        return DEEPHUNTER_TRIES

    def trusted(self, campaign, rules: np.ndarray) -> np.ndarray:
        return campaign.affine[rules]


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
