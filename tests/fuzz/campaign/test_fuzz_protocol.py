"""Issue 17: DRFuzz as published and the fair comparison (spec/drfuzz.md sections 3, 6, 10).

Strategy objects, ``Campaign.state_dict``, the published bookkeeping (the counter rule, 20
mutants), ``ssim-compat`` (window, range, retry structure), the shared filter on both
strategies, and the discriminator made on first use. Tiny models, no data files.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.fuzz.campaign import Campaign, CampaignConfig, run_campaign
from deepfault.fuzz.campaign.generate import Generated
from deepfault.fuzz.campaign.metrics import FAULT_KINDS, compare_campaigns, metrics_until
from deepfault.fuzz.campaign.strategies import STRATEGIES, FuzzStrategy
from deepfault.fuzz.fidelity import SSIMCompatFidelity, make_fidelity, ssim
from helpers.fuzz_problems import DH, AlwaysPass, tiny_problem


class NeverPass:
    """A check nothing passes, with an optional retry count."""

    def __init__(self, tries: int = 0):
        self.tries = tries

    def reference(self, roots):
        return roots

    def passes(self, mutants, ref_rows):
        return torch.zeros(len(mutants), dtype=torch.bool)


class RetryingAlwaysPass(AlwaysPass):
    tries = 7


def _digest(r) -> tuple:
    """Bytes of one run's faults, for comparing two runs made in the same test on this machine."""
    h = hashlib.sha256()
    fa = r.faults.to_arrays()
    for k in sorted(fa):
        if k != "elapsed":
            h.update(k.encode())
            h.update(np.ascontiguousarray(fa[k]).tobytes())
    h.update(np.ascontiguousarray(r.rf_inputs).tobytes())
    return h.hexdigest()[:16], (r.iterations, r.queries, r.corpus, r.generated, r.passed, r.metrics.rf,
                                r.metrics.urf)


# Taken from the loop before the strategies became objects (commit bf7e22c), on the same
# problem: where the protocol did not change (10 mutants, every selection counted), the
# results must not change. Recorded on one machine, so only counts and integer identities
# compare exactly; floats compare with a tolerance (docs/decisions.md, "What is bit-identical").
_BEFORE = json.loads((Path(__file__).parent / "before_refactor.json").read_text())
_IDENTITIES = ("kind", "root", "y1", "y2", "iteration", "queries")


@pytest.mark.parametrize("name", ["always", "ssim", "uniform-b1"])
def test_results_are_those_of_the_loop_before_the_refactor(name):
    m1, m2, x, y = tiny_problem()
    kw = dict(bounds=(0.0, 1.0), budget="120it", inputs_per_step=6, seed=3, mutants=10,
              count_selections="every")
    if name == "ssim":
        kw["config"] = CampaignConfig(fidelity="ssim:0.9")
    else:
        kw["fidelity"] = AlwaysPass()
    if name == "uniform-b1":
        kw |= {"chooser": "uniform", "inputs_per_step": 1}
    r = run_campaign(m1, m2, x, y, **kw)
    want = _BEFORE[name]
    counts = (r.iterations, r.queries, r.corpus, r.generated, r.passed, r.metrics.rf, r.metrics.urf)
    assert dict(zip(want["counts"], counts, strict=True)) == want["counts"]
    faults = r.faults.to_arrays()
    assert {k: np.asarray(faults[k]).astype(int).tolist() for k in _IDENTITIES} == want["faults"]
    assert list(r.rf_inputs.shape) == want["rf_inputs_shape"]
    rf_sum = float(np.asarray(r.rf_inputs, dtype=np.float64).sum())
    assert rf_sum == pytest.approx(want["rf_inputs_sum"], rel=1e-5)
    assert float(np.nansum(faults["ssim"].astype(np.float64))) == pytest.approx(want["ssim_sum"], rel=1e-5)


def test_a_campaign_is_bit_identical_when_repeated_with_the_same_seed_and_threads(one_torch_thread):
    m1, m2, x, y = tiny_problem()
    kw = dict(bounds=(0.0, 1.0), budget="40it", inputs_per_step=6, seed=3,
              config=CampaignConfig(fidelity="ssim:0.9"))
    assert _digest(run_campaign(m1, m2, x, y, **kw)) == _digest(run_campaign(m1, m2, x, y, **kw))


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_every_strategy_is_an_object_with_the_loops_methods(name):
    strategy = STRATEGIES.get(name)
    assert isinstance(strategy, FuzzStrategy)
    assert strategy.name == name
    assert strategy.mutants == 20
    assert strategy.count_selections == "fault"
    m1, m2, x, y = tiny_problem()
    settings = DH if name == "deephunter" else {}
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(),
                 config=CampaignConfig(budget="10it", inputs_per_step=3, seed=0, **settings))
    c.setup()
    sel = c.parts.queue.corpus.select(c.parts.random.rng, 3)
    gen = strategy.generate(c.parts, sel)
    assert isinstance(gen, Generated)
    assert gen.mutants.shape == (3 * 20, 1, 8, 8)
    assert gen.owner.tolist() == np.repeat(np.arange(3), 20).tolist()
    assert gen.rule.shape == gen.ok.shape == (60,)
    assert gen.made >= 60
    assert (gen.rule >= 0).all()
    assert (gen.rule < len(strategy.rules)).all()
    right1, right2 = np.array([True, False, True]), np.array([True, True, False])
    assert strategy.roots(right1, right2).tolist() == (right2 if name == "deephunter" else right1).tolist()
    assert strategy.to_dict()["name"] == name


def test_deephunter_tries_each_slot_up_to_49_times_with_a_fresh_transformation():
    m1, m2, x, y = tiny_problem()
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=CampaignConfig(budget="10it", inputs_per_step=2,
                                                                        seed=0, **DH))
    c.setup()
    # nothing valid: only affine mutants (trusted) are accepted, others use all tries
    c.parts.checks.own = NeverPass()
    gen = c.strategy.generate(c.parts, c.parts.queue.corpus.select(c.parts.random.rng, 2))
    affine = c.parts.rules.affine[gen.rule] & gen.ok
    assert gen.ok.tolist() == affine.tolist()
    assert gen.made == int(c.parts.rules.chooser.selected.sum())  # every try is one uniform draw
    # each slot is retried with a fresh transformation until it draws an affine one (half of
    # the eight), so all 40 get there, after about two tries each
    assert gen.ok.all()
    assert c.parts.rules.affine[gen.rule].all()
    assert 40 < gen.made < 49 * 40
    c.strategy.tries = lambda check: 1  # one try: the pixel rules' slots stay empty
    one = c.strategy.generate(c.parts, c.parts.queue.corpus.select(c.parts.random.rng, 2))
    del c.strategy.tries
    assert one.made == 40
    assert 0 < one.ok.sum() < 40
    assert c.parts.rules.affine[one.rule[one.ok]].all()


def test_retry_structure_counts_every_try_as_a_call():
    m1, m2, x, y = tiny_problem()
    never = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=NeverPass(tries=7), budget="12it",
                         inputs_per_step=4)
    # every slot tried 7 times, nothing executed, each try one call of the chain
    assert never.generated == 12 * 20 * 7
    assert never.queries == 0
    assert sum(u["selected"] for u in never.rule_usage.values()) == never.generated
    assert sum(u["faithful"] for u in never.rule_usage.values()) == 0
    once = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=RetryingAlwaysPass(), budget="12it",
                        inputs_per_step=4)
    # every try passes (and changes its parent, up to the rare no-op): one try per slot
    assert 12 * 20 <= once.generated <= 12 * 20 * 1.1
    assert sum(u["selected"] for u in once.rule_usage.values()) == once.generated


def _naive_skimage_ssim(a: np.ndarray, b: np.ndarray, data_range: float) -> float:
    """scikit-image's default structural_similarity, written from its formulas."""
    win, pad = 7, 3
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    norm = win * win / (win * win - 1)
    vals = []
    for i in range(pad, a.shape[0] - pad):
        for j in range(pad, a.shape[1] - pad):
            pa = a[i - pad : i + pad + 1, j - pad : j + pad + 1].astype(np.float64)
            pb = b[i - pad : i + pad + 1, j - pad : j + pad + 1].astype(np.float64)
            ux, uy = pa.mean(), pb.mean()
            vx = norm * ((pa * pa).mean() - ux * ux)
            vy = norm * ((pb * pb).mean() - uy * uy)
            vxy = norm * ((pa * pb).mean() - ux * uy)
            vals.append((2 * ux * uy + c1) * (2 * vxy + c2) / ((ux * ux + uy * uy + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_compat_ssim_is_the_published_window_and_range():
    g = torch.Generator().manual_seed(0)
    a = torch.randint(0, 256, (3, 1, 12, 12), generator=g).float()
    b = (a + torch.randint(-60, 61, a.shape, generator=g)).clamp(0, 255)
    fid = SSIMCompatFidelity(bounds=(0.0, 255.0))
    assert fid.data_range == 65535.0
    assert fid.tries == 50
    assert fid.threshold == 0.99
    got = fid.scores(b, a)
    want = [_naive_skimage_ssim(a[i, 0].numpy(), b[i, 0].numpy(), 65535.0) for i in range(3)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    # the same pixels on a 0..1 scale give the same SSIM (range 257)
    unit = SSIMCompatFidelity(bounds=(0.0, 1.0))
    assert unit.data_range == pytest.approx(257.0)
    np.testing.assert_allclose(unit.scores(b / 255, a / 255).numpy(), got.numpy(), rtol=1e-5)
    # and it barely filters: what the true range rejects, the published one passes
    strict = ssim(b, a, data_range=255.0)
    assert (strict < 0.99).all()
    assert (got >= 0.99).all()
    assert make_fidelity("ssim-compat", bounds=(0.0, 255.0)).to_dict()["compatibility_mode"] is True


def test_times_selected_rises_only_in_iterations_with_a_regression_fault():
    m1, m2, x, y = tiny_problem()
    for rule in ("fault", "every"):
        c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(),
                     config=CampaignConfig(budget="100it", inputs_per_step=8, seed=1, count_selections=rule))
        c.setup()
        seen_rf = False
        with torch.no_grad():
            for _ in range(12):
                before = c.parts.queue.corpus.times_selected[: len(c.parts.queue.corpus)].copy()
                state = c.parts.random.rng.bit_generator.state
                sel = c.parts.queue.corpus.select(c.parts.random.rng, 8)
                c.parts.random.rng.bit_generator.state = state  # step() draws the same selection again
                parts = len(c.parts.faults.log.parts)
                start = c.parts.counters.iterations
                c.step(8)
                rf_iters = set()
                for table in c.parts.faults.log.parts[parts:]:
                    rf = table.kind == FAULT_KINDS.index("rf")
                    rf_iters |= set((table.iteration[rf] - start - 1).tolist())
                seen_rf |= bool(rf_iters)
                delta = c.parts.queue.corpus.times_selected[: len(before)] - before
                want = np.zeros(len(before), dtype=np.int64)
                for i, entry in enumerate(sel):
                    want[entry] = 1 if rule == "every" or i in rf_iters else 0
                np.testing.assert_array_equal(delta, want)
        assert seen_rf


def test_one_shared_filter_applies_to_every_executed_mutant_of_both_strategies():
    m1, m2, x, y = tiny_problem()
    for settings in ({}, DH):
        kw = dict(bounds=(0.0, 1.0), budget="30it", inputs_per_step=5, seed=2) | settings
        if not settings:
            kw["fidelity"] = AlwaysPass()
        free = run_campaign(m1, m2, x, y, **kw)
        # a filter that passes everything changes nothing
        c = Campaign(m1, m2, x, y, config=CampaignConfig(**{k: v for k, v in kw.items()
                                                            if k not in ("bounds", "fidelity")}),
                     bounds=(0.0, 1.0), fidelity=kw.get("fidelity"), shared_fidelity=AlwaysPass())
        c.run()
        assert _digest(c.result()) == _digest(free)
        # one that passes nothing stops every mutant, DeepHunter's trusted affine ones included
        c = Campaign(m1, m2, x, y, config=CampaignConfig(**{k: v for k, v in kw.items()
                                                            if k not in ("bounds", "fidelity")}),
                     bounds=(0.0, 1.0), fidelity=kw.get("fidelity"), shared_fidelity=NeverPass())
        c.run()
        r = c.result()
        assert r.queries == 0
        assert r.metrics.rf == 0
        assert r.shared_rejected > 0


def test_shared_filter_by_name_and_the_comparison_at_equal_time_and_iterations():
    m1, m2, x, y = tiny_problem()
    results = {s: run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget=b, inputs_per_step=4, seed=0,
                               fidelity="ssim:0.5",
                               shared_fidelity="ssim:0.5", **(DH if s == "deephunter" else {}))
               for s, b in (("drfuzz", "40it"), ("deephunter", "24it"))}
    assert all(r.config.shared_fidelity == "ssim:0.5" for r in results.values())
    cmp = compare_campaigns(results)
    assert cmp["iterations"] == 24
    assert cmp["filter"] == "ssim:0.5"
    d = results["drfuzz"]
    assert cmp["rows"]["drfuzz"]["at_equal_iterations"] == metrics_until(d.faults, iterations=24).to_dict()
    assert cmp["rows"]["drfuzz"]["urf_filtered"] == d.metrics.urf
    assert metrics_until(d.faults, iterations=40).urf == d.metrics.urf


def test_state_dict_round_trip_continues_exactly():
    m1, m2, x, y = tiny_problem()
    config = CampaignConfig(budget="90it", inputs_per_step=5, seed=4, queue_capacity=150)
    whole = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), config=config)
    whole.run()
    first = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(),
                     config=CampaignConfig(budget="45it", inputs_per_step=5, seed=4, queue_capacity=150))
    first.run()
    state = first.state_dict()
    pages = first.parts.queue.corpus.take_dirty_pages()
    assert first.parts.queue.corpus.evicted > 0
    second = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), config=config)
    second.setup()
    second.parts.queue.add_chunk(first.parts.queue.chunk(len(first.seeds.queued), len(first.seeds.index)))
    second.parts.faults.add_chunk(*first.parts.faults.chunk(0, 0))
    second.load_state_dict(state)
    for index, images in pages.items():
        second.parts.queue.corpus.load_page(index, images)
    second.run()
    a, b = whole.result(), second.result()
    assert _digest(a) == _digest(b)
    assert a.rule_usage == b.rule_usage
    assert a.evicted == b.evicted > 0


def test_eviction_keeps_the_queue_bounded_and_evicts_the_least_likely_first():
    m1, m2, x, y = tiny_problem()
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(),
                 config=CampaignConfig(budget="200it", inputs_per_step=5, seed=0, queue_capacity=150))
    c.run()
    q = c.parts.queue.corpus
    assert q.evicted > 0
    assert len(q) > 150
    assert q.resident() <= 150
    assert len(q.images) <= 150
    w = q.weights()
    assert (w[q.slot[: len(q)] < 0] == 0).all()  # an evicted entry is never selected again


def test_the_discriminator_is_trained_on_first_use_and_cached(tmp_path, monkeypatch):
    from deepfault.fuzz.fidelity import gan

    monkeypatch.setenv("DEEPFAULT_CACHE", str(tmp_path / "cache"))
    recipe = gan.GanConfig(epochs=1, batch_size=16, images_per_epoch=32, seed=0)
    monkeypatch.setattr(gan, "AUTO_RECIPE", recipe)
    rng = np.random.default_rng(0)
    tiny = Dataset("mnist", rng.random((64, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 64),
                   rng.random((20, 1, 16, 16), dtype=np.float32), rng.integers(0, 2, 20), (0.0, 1.0),
                   ("a", "b"))
    path = gan.cached_discriminator("mnist", data=tiny, progress=False)
    assert path.is_file()
    assert path.is_relative_to(tmp_path / "cache")
    from deepfault.models import open_model

    quality = open_model(path).meta["gan"]
    assert {"test_real_score", "noise_score", "mutated_score"} <= set(quality)

    def no_training(*args, **kwargs):
        raise AssertionError("trained again although cached")

    monkeypatch.setattr(gan, "train_gan", no_training)
    assert gan.cached_discriminator("mnist") == path
    fid = make_fidelity("discriminator", bounds=(0.0, 1.0), dataset="mnist")
    assert fid.passes(torch.as_tensor(tiny.x_test[:3]), fid.reference(torch.as_tensor(tiny.x_test[:3]))).all()
    with pytest.raises(DeepFaultError, match=r"no discriminator for data set 'digits'.*deepfault gan train"
                                             r".*--fidelity discriminator:FILE.*ssim"):
        gan.cached_discriminator("digits")
