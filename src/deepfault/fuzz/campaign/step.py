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
from .oracle import Bucket, Verdict, classify

if TYPE_CHECKING:
    from .loop import Campaign

__all__ = ["Executed", "run_step"]


def run_step(c: Campaign, k: int) -> bool:
    """Run up to ``k`` iterations of ``c``; ``False`` when no input can be selected (exhausted)."""
    c.clock.restart_tick()
    sel = c.corpus.select(c.rng, k)
    if len(sel) == 0:
        return False
    gen = c.strategy.generate(c, sel)
    c.generated += gen.made
    if gen.pending is not None:
        ex = execute_lazy(c, sel, gen)
    elif c.late is None:
        ok = _shared_filter(c, sel, gen)
        c.clock.tick("check")
        ex = _execute(c, gen, ok)
    else:
        ex = _execute_late(c, sel, gen)
    c.clock.tick("execute")
    _update(c, sel, gen, ex)
    c.iterations += len(sel)
    c.steps += 1
    c.clock.tick("update")
    return True


def _shared_filter(c: Campaign, sel: np.ndarray, gen: Generated) -> np.ndarray:
    """``gen.ok`` less the mutants the shared filter rejects (counted in ``shared_rejected``)."""
    ok = gen.ok
    if c.shared is None or c.shared_refs is None or not ok.any():
        return ok
    rows = np.flatnonzero(ok)
    roots = c.corpus.static["root"][sel][gen.owner[rows]]
    ref = c.shared_refs.rows(roots)
    passed = c.shared.passes(gen.mutants[torch.as_tensor(rows, device=c.device)], ref).cpu().numpy()
    c.shared_rejected += int((~passed).sum())
    ok = ok.copy()
    ok[rows[~passed]] = False
    return ok


def _execute(c: Campaign, gen: Generated, ok: np.ndarray) -> Executed:
    exe = np.flatnonzero(ok)
    xe = gen.mutants[torch.as_tensor(exe, device=c.device)]
    if len(exe):
        p1, p2, values = c.pair.run(xe, c.recorder)
    else:
        p1 = p2 = np.zeros((0, c.num_classes), dtype=np.float32)
        values = None
    ex = Executed(exe, xe, p1, p2, values, c.queries)
    c.queries += len(exe)
    c.passed += len(exe)
    return ex


def _execute_late(c: Campaign, sel: np.ndarray, gen: Generated) -> Executed:
    """M1 on the mutants that passed the image checks, the trace checks on its activations (own
    check first, then the shared filter), M2 on those that passed (module docstring).
    """
    late = c.late
    assert late is not None
    rows = np.flatnonzero(gen.ok)
    x = gen.mutants[torch.as_tensor(rows, device=c.device)]
    if len(rows) == 0:
        return _execute(c, gen, gen.ok)
    p1, ats = c.pair.run_m1(x, c.traces, c.recorder)
    c.clock.tick("execute")
    layout = c.traces.layout if c.traces is not None else None
    if ats is None:
        raise DeepFaultError("the campaign's trace check needs M1's activations; run it with Campaign.run")
    pred = p1.argmax(axis=1)
    keep = np.ones(len(rows), dtype=bool)
    if late.own is not None:
        passed = late.check(late.own, ats, pred, layout).passed.cpu().numpy()
        gen.ok[rows[~passed]] = False  # unfaithful, as if the own check had run before M1
        keep &= passed
    if c.shared is not None and keep.any():
        r = np.flatnonzero(keep)
        if late.shared is not None:
            r_t = torch.as_tensor(r, device=ats.device)
            passed = late.check(late.shared, ats[r_t], pred[r], layout).passed.cpu().numpy()
        else:
            assert c.shared_refs is not None
            roots = c.corpus.static["root"][sel][gen.owner[rows[r]]]
            ref = c.shared_refs.rows(roots)
            passed = c.shared.passes(x[torch.as_tensor(r, device=c.device)], ref).cpu().numpy()
        c.shared_rejected += int((~passed).sum())
        keep[r[~passed]] = False
    c.clock.tick("check")
    exe, k_t = rows[keep], torch.as_tensor(np.flatnonzero(keep), device=c.device)
    xe = x[k_t]
    if len(exe):
        p2, values = c.pair.run_m2(xe, c.recorder, c.traces)
    else:
        p2, values = np.zeros((0, c.num_classes), dtype=np.float32), None
    ex = Executed(exe, xe, p1[keep], p2, values, c.queries)
    c.queries += len(exe)
    c.passed += len(exe)
    return ex


def _update(c: Campaign, sel: np.ndarray, gen: Generated, ex: Executed) -> None:
    corpus, n = c.corpus, len(sel)
    own = gen.owner[ex.rows]
    roots = corpus.static["root"][sel][own]
    labels = c.seeds.label[roots]
    parent_d = corpus.static["d"][sel][own] if c.strategy.drop_confident else None
    verdict = classify(ex.p1, ex.p2, labels, parent_d)
    rf = verdict.buckets == Bucket.RF
    candidate = np.isin(verdict.buckets, (Bucket.WEAKEN, Bucket.HALF_WEAKEN, Bucket.REST))

    # Rule statistics, in draw order (sums, so the order does not change them).
    rows = np.arange(len(ex.rows))
    delta = gain_delta(corpus.static["p2_label"][sel][own], ex.p1[rows, labels], ex.p2[rows, labels])
    gained = np.zeros(len(gen.owner), dtype=bool)
    gained[ex.rows[(candidate | rf) & (delta > 0)]] = True
    c.strategy.learn(c, gen, n, gained)  # "faithful": the strategy's own check
    if c.config.count_rule == "every":
        corpus.times_selected[sel] += 1
    else:  # as published: only the inputs that produced a regression fault this iteration
        corpus.times_selected[sel[np.bincount(own[rf], minlength=n) > 0]] += 1

    tendency = (ex.p2 - ex.p1).astype(np.float32)
    kept = c.keep.select(KeepInput(own, roots, tendency, verdict.y2, candidate, rf, ex.values))
    if rf.any():
        _failures_and_bans(c, sel, gen.rule[ex.rows], own, roots, verdict, rf)
    _record_faults(c, gen.rule[ex.rows], own, roots, verdict, ex)
    _enqueue(c, sel, gen, ex, np.flatnonzero(kept), own, roots, labels, verdict)


def _failures_and_bans(c: Campaign, sel, rules, own, roots, verdict: Verdict, rf) -> None:
    """Regression faults: unique failures, saturated roots, banned ancestors (section 7)."""
    c.failures.add(roots[rf], verdict.y1[rf], verdict.y2[rf])
    np.add.at(c.rule_rf, rules[rf], 1)
    if c.strategy.ban:
        c.corpus.root_banned |= c.failures.per_root >= ROOT_FAILURE_LIMIT
        for i in np.unique(own[rf]):
            mine = rf & (own == i)
            c.corpus.ban_chain(int(sel[i]), int(roots[mine][0]), set(verdict.y2[mine].tolist()))


def _record_faults(c: Campaign, rules, own, roots, verdict: Verdict, ex: Executed) -> None:
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
        seeds = c.seeds.images_at(roots[r])
        span = c.bounds[1] - c.bounds[0]
        similarity[rf[f]] = ssim(ex.inputs[r_t], seeds, data_range=span).cpu().numpy()
    table = FaultTable(
        kind=np.where(rf[f], FAULT_KINDS.index("rf"), FAULT_KINDS.index("both_fail")).astype(np.int8),
        root=c.seeds.index[roots[f]].astype(np.int64), y1=verdict.y1[f], y2=verdict.y2[f],
        initial=np.zeros(len(f), dtype=bool), elapsed=np.full(len(f), c.clock.now()),
        queries=ex.queries_before + f + 1 if ex.queries_at is None else ex.queries_at[f],
        iteration=c.iterations + own[f] + 1, ssim=similarity,
        rule=rules[f].astype(np.int16),
    )
    c.fault_log.record(table, (ex.inputs[r_t].cpu().numpy(), ex.p1[r], ex.p2[r]) if len(r) else None)


def _enqueue(c: Campaign, sel, gen: Generated, ex: Executed, k, own, roots, labels, verdict: Verdict) -> None:
    """The kept candidates join the queue; an affine change gets its own reference (DeepHunter)."""
    if not len(k):
        return
    corpus = c.corpus
    rules = gen.rule[ex.rows]
    parent = sel[own[k]]
    ref = corpus.static["ref"][parent].copy()
    made_affine = c.affine[rules[k]]
    if gen.affine_params and made_affine.any():
        ref[made_affine] = _affine_refs(c, ex.rows[k[made_affine]], rules[k[made_affine]],
                                        roots[k[made_affine]], gen.affine_params)
    p1, p2 = ex.p1[k], ex.p2[k]
    corpus.add(
        ex.inputs[torch.as_tensor(k, device=ex.inputs.device)], root=roots[k],
        generation=corpus.static["generation"][parent] + 1, parent=parent, d=verdict.d[k],
        p2_label=p2[np.arange(len(k)), labels[k]], tendency=tendency_of(p1, p2, verdict.y1[k]), ref=ref,
        affine=corpus.static["affine"][parent] | made_affine, rule=rules[k],
    )


def _affine_refs(c: Campaign, mutant_rows, rules, roots, affine_params) -> np.ndarray:
    """DeepHunter's reference after an affine change: the same change applied to the root."""
    ids = np.empty(len(mutant_rows), dtype=np.int64)
    for u, (rows, params) in affine_params.items():
        mine = np.flatnonzero(rules == u)
        if len(mine) == 0:
            continue
        at = torch.as_tensor(np.searchsorted(rows, mutant_rows[mine]))
        sub = {key: value[at] for key, value in params.items()}
        root_imgs = c.seeds.images_at(roots[mine])
        ref, _ = c.rule_fns[u](root_imgs, bounds=c.bounds, params=sub)
        ids[mine] = c.refs.append(c.check.reference(ref))
    return ids
