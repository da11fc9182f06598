"""The lazy order of checks (``check_order="lazy"``, :mod:`deepfault.fuzz.campaign.lazy`) finds what
the published order finds: at a fixed iteration budget and seed, the same faults, queue, rule
statistics, diversity table, unique failures, bans and metrics; only ``queries`` (model
executions) differs. Tiny seeded models and a tiny seeded discriminator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from deepfault.fuzz.campaign import Campaign, CampaignConfig, run_campaign
from deepfault.fuzz.campaign.execution import fixed_passes
from deepfault.fuzz.fidelity.checks import DiscriminatorFidelity
from helpers.fuzz_problems import tiny_model, tiny_problem

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _discriminator(seed: int = 7) -> DiscriminatorFidelity:
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 64, 1),
                          nn.Sigmoid())
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    # passes of 16: several per step, the last one padded
    return DiscriminatorFidelity(model, bounds=(0.0, 1.0), input_range=(-1.0, 1.0), batch_size=16)


def _problem(classes: int = 3):
    if classes == 3:
        return tiny_problem()
    m1, m2 = tiny_model(0, classes=classes), tiny_model(0, noise=0.25, classes=classes)
    x = torch.rand(150, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y = m1(x).argmax(1)
    return m1, m2, x, y


def _campaign(order: str, problem, **settings) -> Campaign:
    m1, m2, x, y = problem
    dedupe = settings.pop("dedupe", True)
    config = CampaignConfig(**({"budget": "150it", "inputs_per_step": 6, "seed": 3} | settings
                               | {"check_order": order}))
    check = _discriminator()
    check.dedupe = dedupe
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config, fidelity=check)
    c.run()
    return c


def assert_same_campaign(a: Campaign, b: Campaign) -> None:
    """Everything ``a`` and ``b`` found and hold is the same, but the wall times and the queries."""
    ra, rb = a.result(), b.result()
    fa, fb = ra.faults.to_arrays(), rb.faults.to_arrays()
    assert fa.keys() == fb.keys()
    for key in fa:
        if key not in ("elapsed", "queries"):
            np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    for key in ("rf_inputs", "rf_p1", "rf_p2"):
        np.testing.assert_array_equal(getattr(ra, key), getattr(rb, key), err_msg=key)
    for key, value in ra.metrics.to_dict().items():
        if key not in ("seconds_to_first_rf", "queries_to_first_rf"):
            assert value == getattr(rb.metrics, key), key
    assert ra.rule_usage == rb.rule_usage  # selected, faithful, gain, score, rf per rule
    assert (ra.iterations, ra.steps, ra.generated, ra.corpus, ra.evicted, ra.stop_reason) == (
        rb.iterations, rb.steps, rb.generated, rb.corpus, rb.evicted, rb.stop_reason)
    pa, pb = a.parts, b.parts
    qa, qb = pa.queue.corpus, pb.queue.corpus
    n = len(qa)
    for key in qa.static:
        np.testing.assert_array_equal(qa.static[key][:n], qb.static[key][:n], err_msg=key)
    for key, value in qa.state_dict().items():
        np.testing.assert_array_equal(value, qb.state_dict()[key], err_msg=key)
    held = np.flatnonzero(qa.slot[:n] >= 0)
    np.testing.assert_array_equal(qa.images_of(held).numpy(), qb.images_of(held).numpy())
    np.testing.assert_array_equal(pa.queue.refs.view().numpy(), pb.queue.refs.view().numpy())
    np.testing.assert_array_equal(pa.keep.table.table, pb.keep.table.table)
    assert pa.faults.failures.keys == pb.faults.failures.keys
    np.testing.assert_array_equal(pa.rules.rf, pb.rules.rf)
    assert pa.random.rng.bit_generator.state == pb.random.rng.bit_generator.state
    assert torch.equal(pa.random.tgen.get_state(), pb.random.tgen.get_state())


@pytest.mark.parametrize("settings", [dict(), dict(inputs_per_step=1, budget="60it"),
                                      dict(queue_capacity=150),
                                      dict(classes=10, budget="240it", inputs_per_step=8)],
                         ids=["b6", "b1", "evicting", "ten-classes"])
def test_lazy_order_finds_what_checking_before_execution_finds(settings):
    classes = settings.pop("classes", 3)
    problem = _problem(classes)
    before, lazy = _campaign("before", problem, **settings), _campaign("lazy", problem, **settings)
    assert lazy.parts.checks.lazy
    assert not before.parts.checks.lazy
    assert_same_campaign(before, lazy)
    r = lazy.result()
    # the campaign did something worth comparing: faults, a growing queue, bans
    assert r.metrics.rf > 0
    assert r.corpus > r.queued_seeds
    assert lazy.parts.queue.corpus.banned.any()
    most_used = max(r.rule_usage.values(), key=lambda u: u["selected"])
    assert most_used["faithful"] > 0
    # the published order judged every changed mutant, which the lazy order ran through the
    # models; the lazy order judged fewer
    assert before.parts.counters.scored == r.queries < before.parts.counters.generated
    assert lazy.parts.counters.scored < before.parts.counters.scored
    assert r.queries >= before.result().queries
    q = r.faults.queries[~r.faults.initial]
    assert (np.diff(q) > 0).all()
    assert (q <= r.queries).all()


@pytest.mark.parametrize("order", ["before", "lazy"])
def test_scoring_each_distinct_mutant_once_changes_nothing_found(order):
    problem = tiny_problem()
    every_row = _campaign(order, problem, dedupe=False)
    deduped = _campaign(order, problem)
    assert_same_campaign(every_row, deduped)
    assert every_row.result().metrics.rf > 0
    # discrete rules (translation, erosion, the blurs) make repeats: fewer rows ran
    assert deduped.parts.counters.scored == every_row.parts.counters.scored
    assert deduped.parts.checks.own.evaluated < every_row.parts.checks.own.evaluated


def test_distinct_rows_groups_bit_identical_rows():
    from deepfault.fuzz.fidelity.checks import distinct_rows

    g = torch.Generator().manual_seed(0)
    base = torch.rand(5, 1, 4, 4, generator=g)
    pick = torch.randint(0, 5, (40,), generator=g)
    x = base[pick].clone()
    x[3, 0, 0, 0] = -0.0  # bits, not values: -0.0 is its own row
    x[4] = x[3]
    x[4, 0, 0, 0] = 0.0
    first, inverse = distinct_rows(x)
    assert torch.equal(x[first][inverse], x)
    # naive oracle: a row's group is that of the first row with the same bytes
    keys = [row.numpy().tobytes() for row in x]
    assert len(first) == len(set(keys))
    for i, key in enumerate(keys):
        assert int(first[inverse[i]]) == keys.index(key)


def test_lazy_order_with_a_check_that_is_not_expensive_is_the_published_order():
    problem = tiny_problem()
    m1, m2, x, y = problem
    r = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity="ssim", budget="30it", inputs_per_step=6,
                     seed=1,
                     check_order="lazy")
    assert r.config.check_order == "lazy"
    assert r.passed == r.queries  # checked before execution: only passing mutants ran


def test_lazy_campaign_resumed_from_a_checkpoint_equals_an_uninterrupted_one(tmp_path):
    problem = tiny_problem()
    m1, m2, x, y = problem
    kw = dict(bounds=(0.0, 1.0), budget="120it", inputs_per_step=6, seed=3, check_order="lazy",
              checkpoint_every=0)

    stopped = []

    def stop_at_48(p):
        if p.iterations >= 48 and not stopped:
            stopped.append(p.iterations)
            raise KeyboardInterrupt

    store = tmp_path / "store.sqlite"
    first = run_campaign(m1, m2, x, y, fidelity=_discriminator(), store=store, experiment="e",
                         progress=stop_at_48, **kw)
    assert first.stop_reason == "interrupted"
    assert first.iterations == 48
    resumed = run_campaign(m1, m2, x, y, fidelity=_discriminator(), store=store, experiment="e", **kw)
    whole = run_campaign(m1, m2, x, y, fidelity=_discriminator(), **kw)
    assert resumed.resumed > 0
    fa, fb = whole.faults.to_arrays(), resumed.faults.to_arrays()
    for key in fa:
        if key != "elapsed":  # queries too: the lazy order's count is restored with the checkpoint
            np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    assert (whole.queries, whole.corpus) == (resumed.queries, resumed.corpus)
    assert whole.rule_usage == resumed.rule_usage
    before = run_campaign(m1, m2, x, y, fidelity=_discriminator(), **(kw | {"check_order": "before"}))
    np.testing.assert_array_equal(before.faults.root, resumed.faults.root)
    np.testing.assert_array_equal(before.rf_inputs, resumed.rf_inputs)
    assert before.rule_usage == resumed.rule_usage


def test_fixed_passes_give_an_input_the_same_output_whatever_runs_beside_it():
    model = tiny_model(0, classes=10).to(memory_format=torch.channels_last)
    x = torch.rand(300, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        whole = fixed_passes(model, x, 32)
        g = torch.Generator().manual_seed(1)
        for _ in range(10):
            idx = torch.randperm(300, generator=g)[: int(torch.randint(1, 300, (1,), generator=g))]
            assert torch.equal(fixed_passes(model, x[idx], 32), whole[idx])
    assert fixed_passes(model, x[:0], 32).shape[0] == 0


def test_check_order_is_validated_and_hashed_only_when_lazy():
    with pytest.raises(Exception, match="check_order must be one of"):
        CampaignConfig(check_order="after")
    before = CampaignConfig(check_order="before")
    assert "check_order" not in before.to_dict()  # configurations from before the field: same key
    assert CampaignConfig.from_dict(before.to_dict()).check_order == "before"
    assert CampaignConfig().check_order == "before"  # the default: lazy was slower on an idle CPU
    lazy = CampaignConfig(check_order="lazy")
    assert lazy.key() != before.key()
    assert CampaignConfig.from_dict(lazy.to_dict()).key() == lazy.key()
