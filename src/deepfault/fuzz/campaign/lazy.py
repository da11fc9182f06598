"""The lazy order of checks: the models first, an expensive check only where its verdict matters.

In the published order every mutant is judged by the strategy's own check before either
model runs. The discriminator costs about ten times both LeNet-5 models together, and some
of its verdicts change nothing (17% of them on DRFuzz's SUPPLY pair, where the diversity keep
rule could keep most candidates): a mutant that the models put in no bucket that is recorded
or queued, and whose iteration's rule statistics are settled by another mutant, leaves
the campaign as it would have been had the check rejected it. So with one rule per
iteration (DRFuzz) and an expensive own check (:attr:`~..fidelity.checks.Fidelity.expensive`),
a step runs both models on every changed mutant, buckets them, and asks the check only:

1. every mutant that would be a fault (``RF``, ``BOTH_FAIL``) or could join the queue
   (:meth:`~.keep.KeepRule.could_keep`: for DRFuzz, a candidate that raises its root's row
   of the diversity table as it stands at the start of the step; the table only rises, so
   no other candidate is kept later in the step);
2. then, in rounds, a few more mutants of each iteration whose rule statistics are still
   open: ``faithful`` (some mutant of the iteration passes) and ``gain`` (some passing
   candidate or fault has ``delta > 0``) each need one passing mutant, or all of them
   failing. A round takes up to ``k`` unjudged mutants per open iteration (the ones that
   could settle ``gain`` first), ``k`` doubling each round.

The mutants known to pass then go through :func:`~.step._update` exactly as the executed
mutants of the published order do. They hold every mutant that is a fault, every one the
keep rule keeps, and a passing witness for every iteration that is faithful or gained; the
mutants they lack are not candidates and not faults, or candidates that the keep rule
rejects, and those change no state (the keep rule only reads candidates and faults, and an
iteration's place in the keep rule's waves only orders iterations of the same root). So the
faults, the queue, the diversity table, the unique failures, the bans, the selection
counters and the rule chooser's ``selected``/``faithful``/``gain`` are those of the
published order, at every step, and so is everything drawn from the random generators.

Two things differ. ``queries`` counts the mutants run through the models, which is every
changed mutant here (and a fault records that count when it was found); ``passed`` counts
the same. And the verdicts and model outputs must not depend on which mutants run
together: both orders run the models and the discriminator in passes of a fixed size
(:func:`~.execution.fixed_passes`), which makes an input's outputs the same whatever its
batch on this project's CPU kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..mutation.mcmc import gain_delta
from .execution import Executed
from .keep import KeepInput, occurrence_rank
from .oracle import CANDIDATE_BUCKETS, Bucket, classify

if TYPE_CHECKING:
    from .generate import Generated
    from .keep import KeepRule
    from .parts import CampaignParts, Checks, Counters, Queue
    from .seeds import Seeds

__all__ = ["FIRST_ROUND", "execute_lazy"]

#: Unjudged mutants per open iteration in the first round of the rule statistics; doubles.
FIRST_ROUND = 2


def execute_lazy(sel: np.ndarray, gen: Generated, parts: CampaignParts, *, drop_confident: bool) -> Executed:
    """Run both models on every changed mutant of ``gen``, check the ones whose verdict
    matters (module docstring) and return those known to pass as the step's executed mutants;
    ``gen.ok`` becomes the known verdicts.

    Of ``parts`` it reads the models, the checks, the queue, the keep rule and the roots, and
    counts in the counters and the clock.
    """
    assert gen.pending is not None
    p = parts
    rows = np.flatnonzero(gen.ok | gen.pending)
    x = gen.mutants[torch.as_tensor(rows, device=p.models.pair.device)]
    if len(rows):
        p1, p2, values = p.models.pair.run(x, p.models.recorder)
    else:
        p1 = p2 = np.zeros((0, p.models.num_classes), dtype=np.float32)
        values = None
    p.timing.clock.tick("execute")
    it = gen.owner[rows]
    lazy = _bucketed(sel, it, (p1, p2, values), p.queue, p.seeds, p.keep, drop_confident=drop_confident)
    state = np.where(gen.ok[rows], 1, 0).astype(np.int8)  # 1 passes, -1 fails, 0 not judged
    judge = _Judge(x, p.queue.corpus.static["ref"][sel][it], state, p.queue, p.checks, p.counters)
    judge(np.flatnonzero((state == 0) & lazy.needed))
    _settle_statistics(judge, it, lazy.gaining, len(sel))
    p.timing.clock.tick("check")
    return _executed(gen, rows, x, (p1, p2, values), state, p.counters)


@dataclass(frozen=True)
class _Bucketed:
    """What the models' outputs say of each executed row: whether its verdict is needed at once
    (a fault, or a candidate the keep rule could keep), and whether it would gain (``delta > 0``).
    """

    needed: np.ndarray
    gaining: np.ndarray


def _bucketed(sel: np.ndarray, it: np.ndarray, outputs: tuple, queue: Queue, seeds: Seeds, keep: KeepRule, *,
              drop_confident: bool) -> _Bucketed:
    """The oracle's buckets of the rows owned by iterations ``it``, as :class:`_Bucketed`."""
    p1, p2, values = outputs
    corpus = queue.corpus
    roots = corpus.static["root"][sel][it]
    labels = seeds.label[roots]
    parent_d = corpus.static["d"][sel][it] if drop_confident else None
    verdict = classify(p1, p2, labels, parent_d)
    rf = verdict.buckets == Bucket.RF
    found = rf | (verdict.buckets == Bucket.BOTH_FAIL)
    candidate = np.isin(verdict.buckets, CANDIDATE_BUCKETS)
    r = np.arange(len(it))
    delta = gain_delta(corpus.static["p2_label"][sel][it], p1[r, labels], p2[r, labels])
    tendency = (p2 - p1).astype(np.float32)
    may_keep = keep.could_keep(KeepInput(it, roots, tendency, verdict.y2, candidate, rf, values))
    return _Bucketed(needed=found | may_keep, gaining=(candidate | rf) & (delta > 0))


class _Judge:
    """The own check asked about some executed rows at a time; ``state`` holds every verdict so far."""

    def __init__(self, x: torch.Tensor, ref_ids: np.ndarray, state: np.ndarray, queue: Queue, checks: Checks,
                 counters: Counters):
        self.x, self.ref_ids, self.state = x, ref_ids, state
        self.queue, self.checks, self.counters = queue, checks, counters

    def __call__(self, idx: np.ndarray) -> None:
        if len(idx) == 0:
            return
        ref = self.queue.refs.rows(self.ref_ids[idx])
        passed = self.checks.own.passes(self.x[torch.as_tensor(idx, device=self.x.device)], ref).cpu().numpy()
        self.state[idx] = np.where(passed, 1, -1)
        self.counters.scored += len(idx)


def _settle_statistics(judge: _Judge, it: np.ndarray, gaining: np.ndarray, n: int) -> None:
    """Judge, in rounds of ``k`` (doubling) per open iteration, until every iteration's
    ``faithful`` and ``gain`` are settled (module docstring, 2).
    """
    state = judge.state
    k = FIRST_ROUND
    while True:
        known, open_ = state == 1, state == 0
        faithful = np.bincount(it[known], minlength=n) > 0
        gain = np.bincount(it[known & gaining], minlength=n) > 0
        need_gain = ~gain & (np.bincount(it[open_ & gaining], minlength=n) > 0)
        need_faithful = ~faithful & (np.bincount(it[open_], minlength=n) > 0)
        eligible = np.flatnonzero(open_ & ((need_gain[it] & gaining) | (need_faithful[it] & ~need_gain[it])))
        if len(eligible) == 0:
            return
        judge(eligible[occurrence_rank(it[eligible]) < k])
        k *= 2


def _executed(gen: Generated, rows: np.ndarray, x: torch.Tensor, outputs: tuple, state: np.ndarray,
              counters: Counters) -> Executed:
    """The rows known to pass as the step's executed mutants; ``gen.ok`` set to them."""
    p1, p2, values = outputs
    exe = np.flatnonzero(state == 1)
    gen.ok[:] = False
    gen.ok[rows[exe]] = True
    gen.pending = None
    exe_t = torch.as_tensor(exe, device=x.device)
    ex = Executed(rows[exe], x[exe_t], p1[exe], p2[exe], None if values is None else values[exe_t],
                  counters.queries, queries_at=counters.queries + exe + 1)
    counters.queries += len(rows)
    counters.passed += len(rows)
    return ex
