"""Making and checking one step's mutants: one rule per iteration (DRFuzz as published), or
fresh rules per try until a mutant passes (DeepHunter, and DRFuzz's ``ssim-compat`` path).

Both take the strategy's mutation policy (:class:`MutationPolicy`: its rule mask, parameter
lists and trusted rules) and the campaign's parts (:mod:`.parts`), of which they touch the rules
and their chooser, the generators, the queue and its reference rows, the checks, the counters
and the clock, and return a :class:`Generated`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from .clock import Clock
    from .parts import CampaignParts, Checks, Counters, Queue, Randomness, RuleStats

__all__ = ["Generated", "MutationPolicy", "generate_per_iteration", "generate_with_retries"]


class MutationPolicy(Protocol):
    """What the mutant makers ask of a strategy (:class:`~.strategies.FuzzStrategy` is one)."""

    @property
    def one_affine_per_lineage(self) -> bool: ...

    def allowed(self, rules: RuleStats, lineage_affine: np.ndarray) -> np.ndarray | None: ...

    def draw_params(self, rule: str, n: int,
                    generator: torch.Generator) -> dict[str, torch.Tensor] | None: ...

    def trusted(self, rules: RuleStats, drawn: np.ndarray) -> np.ndarray: ...


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
        pending: ``(n * m,)`` bool, in the lazy order of checks (:mod:`.lazy`): changed mutants
            the own check has not judged yet (``ok`` then holds only those that pass without
            it); ``None`` once every verdict is in ``ok``.
    """

    mutants: torch.Tensor
    owner: np.ndarray
    rule: np.ndarray
    ok: np.ndarray
    made: int
    affine_params: dict = field(default_factory=dict)
    per_iteration_rule: bool = True
    pending: np.ndarray | None = None


def generate_per_iteration(strategy: MutationPolicy, sel: np.ndarray, parts: CampaignParts) -> Generated:
    """One rule per iteration, ``m`` mutants with fresh parameters, checked once (spec section 3).

    Of ``parts`` it touches the rules, the generators, the queue, the checks, the counters and
    the clock.
    """
    rules, random, queue, checks, counters, clock = _touched(parts)
    n, m = len(sel), rules.mutants
    corpus, device = queue.corpus, queue.corpus.device
    lineage_affine = corpus.static["affine"][sel]
    drawn = np.empty(n, dtype=np.int64)
    for i in range(n):
        drawn[i] = rules.chooser.choose(random.rng, strategy.allowed(rules, lineage_affine[i]))
    clock.tick("select")
    parents = corpus.images_of(sel)
    shape = parents.shape[1:]
    mutants = torch.empty((n, m, *shape), dtype=parents.dtype, device=device)
    keep_params = strategy.one_affine_per_lineage
    raw_params: dict[int, tuple[np.ndarray, dict]] = {}
    for u in dict.fromkeys(drawn.tolist()):
        idx = np.flatnonzero(drawn == u)
        idx_t = torch.as_tensor(idx, device=device)
        fixed = strategy.draw_params(rules.names[u], len(idx) * m, random.tgen)
        out, params = rules.fns[u](parents[idx_t].repeat_interleave(m, 0), generator=random.tgen,
                                   bounds=rules.bounds, params=fixed)
        mutants[idx_t] = out.view(len(idx), m, *shape)
        if keep_params and rules.affine[u]:
            raw_params[u] = (idx, params)
    mutants = mutants.view(n * m, *shape)
    owner = np.repeat(np.arange(n), m)
    clock.tick("mutate")
    changed = (mutants.view(n, m, -1) != parents.view(n, 1, -1)).any(dim=2).view(-1)
    mrule = drawn[owner]
    trusted = strategy.trusted(rules, mrule)
    if checks.lazy:  # the check runs after the models, on the mutants whose verdict matters (.lazy)
        changed_np = changed.cpu().numpy()
        return Generated(mutants, owner, mrule, changed_np & trusted, n * m,
                         per_iteration_rule=True, pending=changed_np & ~trusted)
    # an unchanged mutant is dropped whatever its verdict, so only the changed ones are judged
    # (the check scores each input alike in any company: .execution.fixed_passes)
    judged = torch.nonzero(changed).view(-1)
    judged_np = judged.cpu().numpy()
    passed = torch.zeros(n * m, dtype=torch.bool, device=changed.device)
    if len(judged_np):
        refs = queue.refs.rows(corpus.static["ref"][sel][owner[judged_np]])
        passed[judged] = checks.own.passes(mutants[judged], refs).to(changed.device)
    counters.scored += len(judged_np)
    if trusted.any():
        passed = passed | torch.as_tensor(trusted, device=passed.device)
    ok = (passed & changed).cpu().numpy()
    affine_params = {}
    for u, (idx, params) in raw_params.items():
        rows = (idx[:, None] * m + np.arange(m)[None, :]).reshape(-1)
        good = ok[rows]
        pick = torch.as_tensor(np.flatnonzero(good))
        affine_params[u] = (rows[good], {k: v[pick] for k, v in params.items()})
    return Generated(mutants, owner, mrule, ok, n * m, affine_params, per_iteration_rule=True)


def _touched(parts: CampaignParts) -> tuple[RuleStats, Randomness, Queue, Checks, Counters, Clock]:
    """The parts the mutant makers touch: the rules, the generators, the queue, the checks, the
    counters and the clock.
    """
    return parts.rules, parts.random, parts.queue, parts.checks, parts.counters, parts.timing.clock


def generate_with_retries(strategy: MutationPolicy, sel: np.ndarray, tries: int,
                          parts: CampaignParts) -> Generated:
    """``m`` slots per iteration, each tried up to ``tries`` times with a fresh rule (and
    parameters) per try until a mutant passes the check and differs from its parent: the
    published code's structure for DeepHunter and for DRFuzz's SSIM path (``ssim-compat``).

    All pending slots of the step are tried together, round by round; each try is one call
    of the chooser (``selected``, and ``faithful`` when it passed), recorded in slot order
    after each round, so the rules of one round are drawn from the statistics as they were
    when the round began. Of ``parts`` it touches what :func:`generate_per_iteration` does.
    """
    n, m = len(sel), parts.rules.mutants
    corpus = parts.queue.corpus
    parents = corpus.images_of(sel)
    slots = _Slots(np.repeat(np.arange(n), m), parents,
                   torch.empty((n * m, *parents.shape[1:]), dtype=parents.dtype, device=corpus.device),
                   np.full(n * m, -1, dtype=np.int64))
    pending = np.arange(n * m)
    made = 0
    for _ in range(tries):
        if len(pending) == 0:
            break
        made += len(pending)
        pending = _try_round(strategy, sel, pending, slots, parts)
    ok = slots.rule >= 0
    slots.rule[~ok] = 0
    return Generated(slots.out, slots.owner, slots.rule, ok, made, _affine_params(slots.collected),
                     per_iteration_rule=False)


@dataclass
class _Slots:
    """The slots of :func:`generate_with_retries`: each one's iteration, the parents, the
    accepted mutants and their rules (``-1``: none yet), the accepted affine parameters.
    """

    owner: np.ndarray
    parents: torch.Tensor
    out: torch.Tensor
    rule: np.ndarray
    collected: dict[int, list] = field(default_factory=dict)


def _try_round(strategy: MutationPolicy, sel: np.ndarray, pending: np.ndarray, slots: _Slots,
               parts: CampaignParts) -> np.ndarray:
    """One try of every pending slot: a rule each, the mutants, the check; the accepted ones go
    into ``slots``; returns the slots still pending.
    """
    rules, random, queue, checks, counters, clock = _touched(parts)
    corpus, device = queue.corpus, queue.corpus.device
    owner, parents = slots.owner, slots.parents
    lineage_affine = corpus.static["affine"][sel]
    masks = [strategy.allowed(rules, lineage_affine[owner[s]]) for s in pending]
    if all(mask is None for mask in masks):  # DRFuzz: every rule allowed, the chain in one go
        r = rules.chooser.choose_many(random.rng, len(pending))
    else:
        r = np.array([rules.chooser.choose(random.rng, mask) for mask in masks], dtype=np.int64)
    clock.tick("select")
    cand = torch.empty((len(pending), *parents.shape[1:]), dtype=parents.dtype, device=device)
    params_of: dict[int, tuple[np.ndarray, dict]] = {}
    for u in dict.fromkeys(r.tolist()):
        j = np.flatnonzero(r == u)
        j_t = torch.as_tensor(j, device=device)
        src = parents[torch.as_tensor(owner[pending[j]], device=device)]
        fixed = strategy.draw_params(rules.names[u], len(j), random.tgen)
        made_u, params = rules.fns[u](src, generator=random.tgen, bounds=rules.bounds, params=fixed)
        cand[j_t] = made_u
        if rules.affine[u]:
            params_of[u] = (j, params)
    clock.tick("mutate")
    own_t = torch.as_tensor(owner[pending], device=device)
    changed = (cand.view(len(pending), -1) != parents.view(len(sel), -1)[own_t]).any(dim=1)
    passes = checks.own.passes(cand, queue.refs.rows(corpus.static["ref"][sel][owner[pending]]))
    passes = passes.to(changed.device)
    counters.scored += len(cand)
    trusted = strategy.trusted(rules, r)
    if trusted.any():
        passes = passes | torch.as_tensor(trusted, device=passes.device)
    passed = (passes & changed).cpu().numpy()
    rules.record_tries(r, faithful=passed)
    acc = np.flatnonzero(passed)
    rows = pending[acc]
    slots.out[torch.as_tensor(rows, device=device)] = cand[torch.as_tensor(acc, device=device)]
    slots.rule[rows] = r[acc]
    for u, (j, params) in params_of.items():
        good = passed[j]
        if good.any():
            pick = torch.as_tensor(np.flatnonzero(good))
            sub = {k: v[pick] for k, v in params.items()}
            slots.collected.setdefault(u, []).append((pending[j[good]], sub))
    clock.tick("check")
    return pending[~passed]


def _affine_params(collected: dict[int, list]) -> dict:
    """Per affine rule, the accepted slots (sorted) and their parameters, from the rounds' pieces."""
    affine_params = {}
    for u, pieces in collected.items():
        rows = np.concatenate([p[0] for p in pieces])
        order = np.argsort(rows, kind="stable")
        params = {k: torch.cat([p[1][k] for p in pieces])[torch.as_tensor(order)] for k in pieces[0][1]}
        affine_params[u] = (rows[order], params)
    return affine_params
