"""DRFuzz's building blocks on hand-set values: oracle buckets, MCMC, selection, banning,
the diversity table, metrics and budgets (spec/drfuzz.md sections 1-4, 7, 8)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.fuzz.campaign.budget import Budget, parse_budget
from deepfault.fuzz.campaign.corpus import DECAY, MAX_SELECTIONS, Corpus, selection_weights
from deepfault.fuzz.campaign.keep import DiversityKeep, KeepInput, occurrence_rank
from deepfault.fuzz.campaign.metrics import FaultTable, compute_metrics
from deepfault.fuzz.campaign.oracle import Bucket, classify, to_probabilities
from deepfault.fuzz.fidelity.validity import ValidityCheck
from deepfault.fuzz.mutation.diversity import DiversityTable, FailureSet, raises_tendency, tendency_of
from deepfault.fuzz.mutation.mcmc import (
    MCMCChooser,
    UniformChooser,
    gain_delta,
    mcmc_scores,
    rank_probabilities,
)

# --- oracle ------------------------------------------------------------------------------------


def test_oracle_buckets_on_hand_set_vectors():
    # label 0 everywhere; rows: RF, both fail, fix, weaken, half-weaken, rest, rest (d < 0, kept),
    # rest dropped (M2 more confident by > 0.15 relative to the parent)
    p1 = np.array([
        [0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.2, 0.8, 0.0], [0.9, 0.1, 0.0], [0.9, 0.1, 0.0],
        [0.9, 0.1, 0.0], [0.6, 0.4, 0.0], [0.6, 0.4, 0.0],
    ])
    p2 = np.array([
        [0.3, 0.7, 0.0], [0.1, 0.1, 0.8], [0.7, 0.3, 0.0], [0.55, 0.45, 0.0], [0.7, 0.3, 0.0],
        [0.85, 0.15, 0.0], [0.64, 0.36, 0.0], [0.9, 0.1, 0.0],
    ])
    parent_d = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.1, 0.1])
    v = classify(p1, p2, np.zeros(8, dtype=int), parent_d)
    assert v.buckets.tolist() == [
        Bucket.RF, Bucket.BOTH_FAIL, Bucket.FIX, Bucket.WEAKEN, Bucket.HALF_WEAKEN, Bucket.REST,
        Bucket.REST, Bucket.REST_DROPPED,
    ]
    np.testing.assert_allclose(v.d, [0.6, 0.7, 0.5, 0.35, 0.2, 0.05, -0.04, -0.3])
    assert v.y1.tolist() == [0, 1, 1, 0, 0, 0, 0, 0]
    assert v.y2.tolist() == [1, 2, 0, 0, 0, 0, 0, 0]
    # without the parent's d nothing is dropped; the boundaries are strict as in the spec
    assert classify(p1, p2, np.zeros(8, dtype=int)).buckets[-1] == Bucket.REST
    eps = 1e-9  # d just at the thresholds (0.3 and 0.15 are not > themselves)
    edge = classify(np.array([[0.8, 0.2], [0.8, 0.2]]),
                    np.array([[0.5 + eps, 0.5 - eps], [0.65 + eps, 0.35 - eps]]), np.array([0, 0]))
    assert edge.buckets.tolist() == [Bucket.HALF_WEAKEN, Bucket.REST]


def test_oracle_rejects_mismatched_shapes_and_softmax_of_logits():
    with pytest.raises(DeepFaultError, match="p1, p2 must be"):
        classify(np.zeros((2, 3)), np.zeros((2, 4)), np.zeros(2, dtype=int))
    p = to_probabilities(torch.tensor([[0.0, math.log(3.0)]]), "logits")
    torch.testing.assert_close(p, torch.tensor([[0.25, 0.75]]))
    with pytest.raises(DeepFaultError, match="output kind"):
        to_probabilities(torch.zeros(1, 2), "scores")


# --- MCMC --------------------------------------------------------------------------------------


def test_mcmc_scores_and_gain_delta():
    np.testing.assert_allclose(mcmc_scores([0, 2, 4], [0, 2, 1], [0, 1, 4]), [0.0, 0.5, 0.25])
    np.testing.assert_allclose(gain_delta(np.array([0.9]), np.array([0.8]), np.array([0.5])),
                               [(2 / 3) * 0.4 + (1 / 3) * 0.3])


def test_rank_probabilities_formula():
    n, k1 = 5, 2
    accept = np.array([1, 1, 1, (4 / 5), (4 / 5) ** 2])
    np.testing.assert_allclose(rank_probabilities(k1, n), accept / accept.sum())


def test_mcmc_acceptance_gives_the_stated_probabilities():
    """The chain's choices on a hand-set score table match min(1, (1-p)^(k2-k1)) / sum."""
    rules = [f"r{i}" for i in range(6)]
    chooser = MCMCChooser(rules)
    # distinct scores gain * faithful / selected**2: r3 > r0 > r5 > r1 > r4 > r2 (ranks 0..5)
    chooser.selected[:] = 10
    chooser.faithful[:] = 10
    chooser.gain[:] = [6, 3, 1, 9, 2, 5]
    scores = chooser.scores()
    order = np.argsort(-scores, kind="stable")
    assert len(set(scores.tolist())) == 6
    assert order.tolist() == [3, 0, 5, 1, 4, 2]
    rng = np.random.default_rng(12345)
    draws = 30000
    counts = np.zeros(6)
    for _ in range(draws):
        chooser.previous = 5  # rank 2
        counts[chooser.choose(rng)] += 1
    expected = rank_probabilities(2, 6)[np.argsort(order)] * draws
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 20.5  # chi-square, 5 degrees of freedom, p = 0.001
    assert counts[3] > counts[2]  # better ranks are preferred


def test_mcmc_first_choice_uniform_and_ties_broken_at_random():
    chooser = MCMCChooser(["a", "b", "c", "d"])
    rng = np.random.default_rng(0)
    firsts = np.bincount([MCMCChooser(["a", "b", "c", "d"]).choose(rng) for _ in range(4000)], minlength=4)
    assert firsts.min() > 850
    # all scores 0: every order is a shuffle, so from any previous rule all rules get chosen
    chooser.previous = 0
    picks = {chooser.choose(rng) for _ in range(200)}
    assert picks == {0, 1, 2, 3}


def test_choosers_respect_allowed_and_state_round_trip():
    rng = np.random.default_rng(1)
    allowed = np.array([False, True, False, True])
    for cls in (MCMCChooser, UniformChooser):
        c = cls(["a", "b", "c", "d"])
        for _ in range(50):
            assert c.choose(rng, allowed) in (1, 3)
            c.update(1, faithful=True, gain=False)
        state = c.state_dict()
        d = cls(["a", "b", "c", "d"]).load_state_dict(state)
        assert d.previous == c.previous
        assert d.selected.tolist() == c.selected.tolist()
    with pytest.raises(DeepFaultError, match="no mutation rule is allowed"):
        UniformChooser(["a"]).choose(rng, np.array([False]))


# --- selection and banning -------------------------------------------------------------------


def test_selection_probability_decays_as_specified():
    a = math.log(20) / 20
    assert a == pytest.approx(DECAY)
    w = selection_weights(np.array([0, 1, 20, 0, 0, 0]), np.array([0, 0, 0, 2, 10, 11]))
    np.testing.assert_allclose(w[:5], [1.0, math.exp(-a), 1 / 20, math.exp(-a), math.exp(-5 * a)])
    assert w[5] == 0.0
    assert MAX_SELECTIONS == 10
    assert selection_weights(np.zeros(2), np.zeros(2), np.array([True, False])).tolist() == [0.0, 1.0]


def _corpus(generations, roots=None, tendency=None, parents=None):
    n = len(generations)
    c = Corpus((1, 2, 2), num_roots=3)
    c.add(torch.zeros(n, 1, 2, 2), root=np.zeros(n) if roots is None else roots, generation=generations,
          parent=np.full(n, -1) if parents is None else parents, d=np.zeros(n), p2_label=np.zeros(n),
          tendency=np.zeros(n) if tendency is None else tendency, ref=np.zeros(n),
          affine=np.zeros(n, dtype=bool), rule=np.full(n, -1))
    return c


def test_corpus_selection_frequencies_follow_the_weights():
    c = _corpus(np.array([0, 2, 6]))
    c.times_selected[:3] = [4, 0, 0]
    w = c.weights()
    rng = np.random.default_rng(3)
    counts = np.bincount([int(c.select(rng, 1)[0]) for _ in range(20000)], minlength=3)
    np.testing.assert_allclose(counts / 20000, w / w.sum(), atol=0.015)
    picked = c.select(rng, 5)
    assert sorted(picked.tolist()) == [0, 1, 2]  # B larger than the queue: each at most once
    c.times_selected[:3] = MAX_SELECTIONS + 1
    assert len(c.select(rng, 2)) == 0  # exhausted


def test_banning_of_ancestor_chain_and_roots():
    # chain 0 (seed) -> 1 -> 2 -> 3 of root 0; entry 4 is another branch of root 0; 5 of root 1
    c = _corpus(np.array([0, 1, 2, 3, 1, 0]), roots=np.array([0, 0, 0, 0, 0, 1]),
                tendency=np.array([7, 4, 7, 7, 7, 7]), parents=np.array([-1, 0, 1, 2, 0, -1]))
    assert c.ancestors(3) == [3, 2, 1, 0]
    assert c.ban_chain(3, 0, {7}) == 3  # 3, 2 and 0 have tendency 7; 1 (tendency 4) is kept
    assert c.banned[:6].tolist() == [True, False, True, True, False, False]
    assert c.weights()[[0, 2, 3]].tolist() == [0, 0, 0]
    assert c.weights()[4] > 0
    c.root_banned[1] = True
    assert c.weights()[5] == 0.0


# --- diversity ---------------------------------------------------------------------------------


def test_diversity_keep_rule_on_hand_set_tables():
    # two roots, labels 0 and 2; p2 - p1 of the seeds: [., .1, -.1] and [.2, .0, .]
    p1 = np.array([[0.8, 0.1, 0.1], [0.1, 0.2, 0.7]])
    p2 = np.array([[0.8, 0.2, 0.0], [0.3, 0.2, 0.5]])
    table = DiversityTable(np.array([0, 2]), p1, p2)
    np.testing.assert_allclose(table.table, [[-np.inf, 0.1, -0.1], [0.2, 0.0, -np.inf]], atol=1e-7)
    tend = np.array([[-0.3, 0.05, 0.0],  # root 0: class 2 rises from -0.1 to 0.0 -> kept
                     [-0.3, 0.1, -0.2],   # root 0: nothing exceeds -> dropped
                     [0.1, 0.05, -0.3]])  # root 1: class 1 rises from 0 to 0.05 -> kept
    roots, y2 = np.array([0, 0, 1]), np.array([0, 0, 2])
    assert table.keep(roots, tend, y2).tolist() == [True, False, True]
    # k == y2 does not count: the same row with M2 predicting class 2 (a regression fault)
    assert raises_tendency(table.table[[0]], tend[[0]], np.array([2])).tolist() == [False]
    table.update(roots[[0, 2]], tend[[0, 2]])
    np.testing.assert_allclose(table.table, [[-np.inf, 0.1, 0.0], [0.2, 0.05, -np.inf]], atol=1e-7)
    assert tendency_of(p1, p2, np.array([0, 2])).tolist() == [1, 0]


def test_diversity_keep_judges_an_iteration_against_its_pre_state_and_orders_iterations():
    p = np.array([[0.9, 0.1]])
    table = DiversityTable(np.array([0]), p, p)  # T[0, 1] = 0
    keep = DiversityKeep(table)
    t = np.array([[-0.2, 0.2], [-0.1, 0.1], [-0.15, 0.15]])
    # iteration 0 has two mutants (both judged against T = 0: both kept); iteration 1 follows
    step = KeepInput(iteration=np.array([0, 0, 1]), roots=np.zeros(3, dtype=int), tendency=t,
                     y2=np.zeros(3, dtype=int), candidate=np.ones(3, dtype=bool), rf=np.zeros(3, dtype=bool))
    assert keep.select(step).tolist() == [True, True, False]  # 0.15 < 0.2 after iteration 0
    assert table.table[0, 1] == pytest.approx(0.2)
    assert occurrence_rank(np.array([4, 7, 4, 4, 7])).tolist() == [0, 0, 1, 2, 1]


def test_failure_set_counts_unique_keys_per_root():
    fs = FailureSet(3)
    assert fs.add(np.array([0, 0, 0, 2]), np.array([1, 1, 1, 0]), np.array([5, 5, 6, 1])).tolist() == [
        True, False, True, True]
    assert len(fs) == 3
    assert fs.per_root.tolist() == [2, 0, 1]
    fs2 = FailureSet(3)
    fs2.load_state_dict(fs.state_dict())
    assert fs2.keys == fs.keys
    assert fs2.per_root.tolist() == [2, 0, 1]


def test_validity_rule():
    check = ValidityCheck(bounds=(0.0, 1.0))
    ref = torch.zeros(3, 1, 10, 10)
    few = ref[0].clone()
    few[0, 0, 0] = 1.0  # 1% of the pixels, by the whole range: valid
    small = ref[1] + 0.19  # every pixel by 19%: valid
    big = ref[2].clone()
    big[0, :3, :] = 0.5  # 30% of the pixels by 50%: invalid
    assert check.passes(torch.stack([few, small, big]), ref).tolist() == [True, True, False]


# --- metrics and budgets -----------------------------------------------------------------------


def test_metrics_from_a_hand_made_fault_list():
    faults = FaultTable.from_rows([
        dict(kind="rf", root=10, y1=1, y2=7, elapsed=3.0, queries=40, ssim=0.95),
        dict(kind="rf", root=10, y1=1, y2=7, elapsed=4.0, queries=50, ssim=0.995),  # same key: not unique
        dict(kind="rf", root=10, y1=1, y2=3, elapsed=5.0, queries=60, ssim=0.5),
        dict(kind="rf", root=11, y1=2, y2=7, elapsed=2.5, queries=30, ssim=0.99),  # first by queries
        dict(kind="both_fail", root=12, y1=4, y2=5),
        dict(kind="both_fail", root=12, y1=4, y2=5),
        dict(kind="rf", root=13, y1=0, y2=6, initial=True),  # a seed M2 already gets wrong
    ])
    m = compute_metrics(faults)
    assert (m.rf, m.urf, m.seeds, m.gf, m.initial_rf, m.both_fail) == (4, 3, 2, 6, 1, 2)
    assert (m.seconds_to_first_rf, m.queries_to_first_rf) == (2.5, 30)
    assert m.urf_ssim == 2  # (10, 1, 7) through its second fault, (11, 2, 7); not (10, 1, 3)
    empty = compute_metrics(FaultTable.empty())
    assert (empty.rf, empty.urf, empty.seconds_to_first_rf) == (0, 0, None)
    assert set(m.to_dict()) >= {"rf", "urf", "seeds", "gf"}
    with pytest.raises(DeepFaultError, match="fault kind"):
        FaultTable.from_rows([dict(kind="oops", root=0, y1=0, y2=0)])


@pytest.mark.parametrize(("text", "kind", "value"), [
    ("10m", "seconds", 600.0), ("300s", "seconds", 300.0), ("1.5h", "seconds", 5400.0),
    ("5000it", "iterations", 5000),
])
def test_budgets(text, kind, value):
    b = parse_budget(text)
    assert (b.kind, b.value) == (kind, value)
    assert parse_budget(str(b)) == b


def test_bad_budgets():
    for bad in ("10", "m", "5.5it", "-3s", "0it"):
        with pytest.raises(DeepFaultError, match="budget"):
            parse_budget(bad)
    assert Budget("iterations", 10).exhausted(iterations=10, seconds=0.0)
    assert not Budget("seconds", 10.0).exhausted(iterations=10**9, seconds=9.9)
