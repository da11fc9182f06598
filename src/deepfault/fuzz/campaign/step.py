"""One step of a campaign (spec section 3): ``B`` selected inputs, their mutants made and
checked by the strategy, filtered by the shared check, executed on both models in one pass,
bucketed by the oracle; then the updates, in the order of the draws: the rule statistics,
the selection counters, the keep rule, the unique failures and bans, the faults and the
queue.

With a check that reads M1's activations (:mod:`.late`: the surprise checks) the order of
the middle changes: M1 runs on every mutant that passed the image checks, with the check's
layers captured; the strategy's own check and then the shared filter judge them; M2 runs on
those that passed. A mutant either check rejects is treated as one rejected before
execution: it is no query, not ``passed``, never bucketed, recorded or queued, and a
rejection by the own check makes it unfaithful for the rule chooser.

With an expensive own check in the lazy order (:mod:`.lazy`: the discriminator) both models
run on every changed mutant first and the check judges only the mutants whose verdict can
change the result; the update then sees those known to pass, with the same outcome.

:func:`run_step` takes the campaign's parts (:mod:`.parts`); each function below it takes
only the parts it touches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from ...errors import DeepFaultError
from ..fidelity.checks import ssim
from ..mutation.diversity import ROOT_FAILURE_LIMIT, tendency_of
from ..mutation.mcmc import gain_delta
from .execution import Executed
from .generate import Generated
from .keep import KeepInput
from .lazy import execute_lazy
from .metrics import FAULT_KINDS, FaultTable
from .oracle import Bucket, Classification, classify

if TYPE_CHECKING:
    from ..fidelity.checks import Fidelity
    from .clock import Clock
    from .parts import CampaignParts, Checks, Counters, Faults, Models, Queue, RuleStats
    from .seeds import Seeds
    from .strategies import FuzzStrategy

__all__ = ["Executed", "run_step"]


def run_step(strategy: FuzzStrategy, parts: CampaignParts, k: int) -> bool:
    """Run up to ``k`` iterations; ``False`` when no input can be selected (exhausted)."""
    p = parts
    clock, counters = p.timing.clock, p.counters
    clock.restart_tick()
    sel = p.queue.corpus.select(p.random.rng, k)
    if len(sel) == 0:
        return False
    gen = strategy.generate(p, sel)
    counters.generated += gen.made
    if gen.pending is not None:
        ex = execute_lazy(sel, gen, p, drop_confident=strategy.drop_confident)
    elif p.checks.late is None:
        ok = _shared_filter(sel, gen, p.checks, p.queue, counters)
        clock.tick("check")
        ex = _execute(gen, ok, p.models, counters)
    else:
        ex = _execute_late(sel, gen, p.models, p.checks, p.queue, counters, clock)
    clock.tick("execute")
    _update(strategy, p, sel, gen, ex)
    counters.iterations += len(sel)
    counters.steps += 1
    clock.tick("update")
    return True


def _shared_filter(sel: np.ndarray, gen: Generated, checks: Checks, queue: Queue,
                   counters: Counters) -> np.ndarray:
    """``gen.ok`` less the mutants the shared filter rejects (counted in ``shared_rejected``)."""
    ok = gen.ok
    if checks.shared is None or queue.shared_refs is None or not ok.any():
        return ok
    rows = np.flatnonzero(ok)
    roots = queue.corpus.static["root"][sel][gen.owner[rows]]
    ref = queue.shared_refs.rows(roots)
    passed = checks.shared.passes(gen.mutants[torch.as_tensor(rows, device=queue.device)], ref).cpu().numpy()
    counters.shared_rejected += int((~passed).sum())
    ok = ok.copy()
    ok[rows[~passed]] = False
    return ok


def _execute(gen: Generated, ok: np.ndarray, models: Models, counters: Counters) -> Executed:
    exe = np.flatnonzero(ok)
    xe = gen.mutants[torch.as_tensor(exe, device=models.pair.device)]
    if len(exe):
        p1, p2, values = models.pair.run(xe, models.recorder)
    else:
        p1 = p2 = np.zeros((0, models.num_classes), dtype=np.float32)
        values = None
    ex = Executed(exe, xe, p1, p2, values, counters.queries)
    counters.queries += len(exe)
    counters.passed += len(exe)
    return ex


def _execute_late(sel: np.ndarray, gen: Generated, models: Models, checks: Checks, queue: Queue,
                  counters: Counters, clock: Clock) -> Executed:
    """M1 on the mutants that passed the image checks, the trace checks on its activations (own
    check first, then the shared filter), M2 on those that passed (module docstring).
    """
    late = checks.late
    assert late is not None
    device = models.pair.device
    rows = np.flatnonzero(gen.ok)
    x = gen.mutants[torch.as_tensor(rows, device=device)]
    if len(rows) == 0:
        return _execute(gen, gen.ok, models, counters)
    p1, ats = models.pair.run_m1(x, models.traces, models.recorder)
    clock.tick("execute")
    layout = models.traces.layout if models.traces is not None else None
    if ats is None:
        raise DeepFaultError("the campaign's trace check needs M1's activations; run it with Campaign.run")
    pred = p1.argmax(axis=1)
    keep = np.ones(len(rows), dtype=bool)
    if late.own is not None:
        passed = late.check(late.own, ats, pred, layout).passed.cpu().numpy()
        gen.ok[rows[~passed]] = False  # unfaithful, as if the own check had run before M1
        keep &= passed
    if checks.shared is not None and keep.any():
        r = np.flatnonzero(keep)
        if late.shared is not None:
            r_t = torch.as_tensor(r, device=ats.device)
            passed = late.check(late.shared, ats[r_t], pred[r], layout).passed.cpu().numpy()
        else:
            assert queue.shared_refs is not None
            roots = queue.corpus.static["root"][sel][gen.owner[rows[r]]]
            ref = queue.shared_refs.rows(roots)
            passed = checks.shared.passes(x[torch.as_tensor(r, device=device)], ref).cpu().numpy()
        counters.shared_rejected += int((~passed).sum())
        keep[r[~passed]] = False
    clock.tick("check")
    exe, k_t = rows[keep], torch.as_tensor(np.flatnonzero(keep), device=device)
    xe = x[k_t]
    if len(exe):
        p2, values = models.pair.run_m2(xe, models.recorder, models.traces)
    else:
        p2, values = np.zeros((0, models.num_classes), dtype=np.float32), None
    ex = Executed(exe, xe, p1[keep], p2, values, counters.queries)
    counters.queries += len(exe)
    counters.passed += len(exe)
    return ex


def _update(strategy: FuzzStrategy, p: CampaignParts, sel: np.ndarray, gen: Generated, ex: Executed) -> None:
    corpus, n = p.queue.corpus, len(sel)
    own = gen.owner[ex.rows]
    roots = corpus.static["root"][sel][own]
    labels = p.seeds.label[roots]
    parent_d = corpus.static["d"][sel][own] if strategy.drop_confident else None
    verdict = classify(ex.p1, ex.p2, labels, parent_d)
    rf = verdict.buckets == Bucket.RF
    candidate = np.isin(verdict.buckets, (Bucket.WEAKEN, Bucket.HALF_WEAKEN, Bucket.REST))

    # Rule statistics, in draw order (sums, so the order does not change them).
    rows = np.arange(len(ex.rows))
    delta = gain_delta(corpus.static["p2_label"][sel][own], ex.p1[rows, labels], ex.p2[rows, labels])
    gained = np.zeros(len(gen.owner), dtype=bool)
    gained[ex.rows[(candidate | rf) & (delta > 0)]] = True
    strategy.learn(p.rules, gen, n, gained)  # "faithful": the strategy's own check
    p.queue.count_selections(sel, np.bincount(own[rf], minlength=n) > 0)

    tendency = (ex.p2 - ex.p1).astype(np.float32)
    kept = p.keep.select(KeepInput(own, roots, tendency, verdict.y2, candidate, rf, ex.values))
    if rf.any():
        _failures_and_bans(sel, gen.rule[ex.rows], own, roots, verdict, rf, ban=strategy.ban, faults=p.faults,
                           rules=p.rules, queue=p.queue)
    _record_faults(gen.rule[ex.rows], own, roots, verdict, ex, faults=p.faults, seeds=p.seeds,
                   bounds=p.rules.bounds, clock=p.timing.clock, iterations=p.counters.iterations)
    _enqueue(sel, gen, ex, np.flatnonzero(kept), own, roots, labels, verdict, queue=p.queue, rules=p.rules,
             seeds=p.seeds, check=p.checks.own)


def _failures_and_bans(sel, rules_of, own, roots, verdict: Classification, rf, *, ban: bool, faults: Faults,
                       rules: RuleStats, queue: Queue) -> None:
    """Regression faults: unique failures, saturated roots, banned ancestors (section 7)."""
    faults.failures.add(roots[rf], verdict.y1[rf], verdict.y2[rf])
    rules.record_faults(rules_of[rf])
    if ban:
        queue.corpus.root_banned |= faults.failures.per_root >= ROOT_FAILURE_LIMIT
        for i in np.unique(own[rf]):
            mine = rf & (own == i)
            queue.corpus.ban_chain(int(sel[i]), int(roots[mine][0]), set(verdict.y2[mine].tolist()))


def _record_faults(rules, own, roots, verdict: Classification, ex: Executed, *, faults: Faults, seeds: Seeds,
                   bounds: tuple[float, float], clock: Clock, iterations: int) -> None:
    """The step's regression faults and both-fail inputs, in draw order."""
    rf = verdict.buckets == Bucket.RF
    found = rf | (verdict.buckets == Bucket.BOTH_FAIL)
    if not found.any():
        return
    f = np.flatnonzero(found)
    similarity = np.full(len(f), np.nan, dtype=np.float32)
    r = np.flatnonzero(rf)
    r_t = torch.as_tensor(r, device=ex.inputs.device)
    if len(r) and ex.inputs.ndim == 4:  # the realism yardstick of every strategy: SSIM to the seed (images)
        span = bounds[1] - bounds[0]
        similarity[rf[f]] = ssim(ex.inputs[r_t], seeds.images_at(roots[r]), data_range=span).cpu().numpy()
    table = FaultTable(
        kind=np.where(rf[f], FAULT_KINDS.index("rf"), FAULT_KINDS.index("both_fail")).astype(np.int8),
        root=seeds.index[roots[f]].astype(np.int64), y1=verdict.y1[f], y2=verdict.y2[f],
        initial=np.zeros(len(f), dtype=bool), elapsed=np.full(len(f), clock.now()),
        queries=ex.queries_before + f + 1 if ex.queries_at is None else ex.queries_at[f],
        iteration=iterations + own[f] + 1, ssim=similarity,
        rule=rules[f].astype(np.int16),
    )
    faults.record(table, (ex.inputs[r_t].cpu().numpy(), ex.p1[r], ex.p2[r]) if len(r) else None)


def _enqueue(sel, gen: Generated, ex: Executed, k, own, roots, labels, verdict: Classification, *,
             queue: Queue, rules: RuleStats, seeds: Seeds, check: Fidelity) -> None:
    """The kept candidates join the queue; an affine change gets its own reference (DeepHunter)."""
    if not len(k):
        return
    corpus = queue.corpus
    rules_of = gen.rule[ex.rows]
    parent = sel[own[k]]
    ref = corpus.static["ref"][parent].copy()
    made_affine = rules.affine[rules_of[k]]
    if gen.affine_params and made_affine.any():
        a = k[made_affine]
        ref[made_affine] = _affine_refs(ex.rows[a], rules_of[a], roots[a], gen.affine_params, queue=queue,
                                        rules=rules, seeds=seeds, check=check)
    p1, p2 = ex.p1[k], ex.p2[k]
    corpus.add(
        ex.inputs[torch.as_tensor(k, device=ex.inputs.device)], root=roots[k],
        generation=corpus.static["generation"][parent] + 1, parent=parent, d=verdict.d[k],
        p2_label=p2[np.arange(len(k)), labels[k]], tendency=tendency_of(p1, p2, verdict.y1[k]), ref=ref,
        affine=corpus.static["affine"][parent] | made_affine, rule=rules_of[k],
    )


def _affine_refs(mutant_rows, rules_of, roots, affine_params, *, queue: Queue, rules: RuleStats, seeds: Seeds,
                 check: Fidelity) -> np.ndarray:
    """DeepHunter's reference after an affine change: the same change applied to the root."""
    ids = np.empty(len(mutant_rows), dtype=np.int64)
    for u, (rows, params) in affine_params.items():
        mine = np.flatnonzero(rules_of == u)
        if len(mine) == 0:
            continue
        at = torch.as_tensor(np.searchsorted(rows, mutant_rows[mine]))
        sub = {key: value[at] for key, value in params.items()}
        ref, _ = rules.fns[u](seeds.images_at(roots[mine]), bounds=rules.bounds, params=sub)
        ids[mine] = queue.refs.append(check.reference(ref))
    return ids
