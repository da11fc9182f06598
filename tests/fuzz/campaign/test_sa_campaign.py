"""A campaign with a surprise-adequacy filter (``fidelity="dsa:T"``, or as the shared filter):
M1 runs once per mutant, the filter's verdicts are those of the check on its own, and every
fault and queued mutant passes it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deepfault.fuzz.campaign import Campaign, CampaignConfig, run_campaign
from deepfault.fuzz.campaign.execution import ModelPair
from deepfault.fuzz.fidelity import SurpriseFidelity, make_fidelity
from helpers.sa_fuzz import band_problem

DH = dict(strategy="deephunter", criteria="nc", criterion_params={"threshold": 0.5})


@pytest.fixture(scope="module")
def problem():
    return band_problem()


def _check(m1, x_train, x, spec="dsa:p90"):
    fid = make_fidelity(spec, bounds=(0.0, 1.0), model=m1, train_inputs=x_train, test_inputs=x)
    assert isinstance(fid, SurpriseFidelity)
    return fid


def _campaign(problem, **settings):
    m1, m2, x, y, x_train = problem
    config = CampaignConfig(**({"budget": "40it", "inputs_per_step": 4, "seed": 1,
                                "fidelity": "dsa:p90"} | settings))
    return Campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config, train_inputs=x_train)


class Counter:
    """Counts a model's forward calls and the inputs they took (a forward pre-hook)."""

    def __init__(self, model):
        self.calls = self.inputs = 0
        self.handle = model.register_forward_pre_hook(self)

    def __call__(self, module, args):
        self.calls += 1
        self.inputs += len(args[0])


def test_m1_runs_once_per_step_and_m2_only_on_the_mutants_that_pass(problem):
    m1, m2 = problem[0], problem[1]
    c = _campaign(problem)
    c.setup()
    n1, n2 = Counter(m1), Counter(m2)
    try:
        c.run()
    finally:
        n1.handle.remove()
        n2.handle.remove()
    r = c.result()
    assert r.iterations == 40
    assert n1.calls == r.steps == 10  # one forward pass of M1 per step: the filter adds none
    assert n2.inputs == r.queries == r.passed  # M2 sees only the mutants that passed
    assert n1.inputs > n2.inputs  # the filter rejected some, after M1 and before M2
    assert n1.inputs <= r.generated
    assert r.trace_checks["own"]["name"] == "dsa"
    assert r.to_dict()["trace_checks"]["own"]["threshold"] == c.parts.checks.late.own.threshold


def test_the_verdicts_are_the_checks_own_whatever_the_batch(problem, monkeypatch):
    """Record what M1 ran in the campaign and what the filter said; the check run on its own,
    with any batch size, says the same of the same mutants."""
    m1, _, x, _, x_train = problem
    seen, said = [], []
    run_m1 = ModelPair.run_m1

    def spy_run(self, xs, traces=None, recorder=None):
        seen.append(xs.clone())
        return run_m1(self, xs, traces, recorder)

    check_traces = SurpriseFidelity.check_traces

    def spy_check(self, ats, classes):
        out = check_traces(self, ats, classes)
        said.append(out.passed.clone())
        return out

    monkeypatch.setattr(ModelPair, "run_m1", spy_run)
    monkeypatch.setattr(SurpriseFidelity, "check_traces", spy_check)
    c = _campaign(problem, inputs_per_step=8)
    c.run()
    mutants, verdicts = torch.cat(seen), torch.cat(said)
    assert len(mutants) == len(verdicts) > 0
    assert 0 < int(verdicts.sum()) < len(verdicts)
    fid = _check(m1, x_train, x)
    for batch_size in (1, 64):
        fid.batch_size = batch_size
        alone = fid.check(mutants)
        near = (alone.scores - fid.threshold).abs() < 1e-6  # float rounding may decide these
        assert alone.passed[~near].tolist() == verdicts[~near].tolist()


@pytest.mark.parametrize("batch", [1, 8])
def test_every_fault_and_queued_mutant_passes_the_filter(problem, batch):
    m1, _, x, _, x_train = problem
    c = _campaign(problem, inputs_per_step=batch, budget="60it")
    c.run()
    r = c.result()
    fid = _check(m1, x_train, x)
    generated = ~r.faults.select(r.faults.kind == 0).initial
    assert generated.sum() > 0
    faults = torch.from_numpy(r.rf_inputs[generated])
    assert (fid.check(faults).scores <= fid.threshold + 1e-6).all()
    n = len(c.parts.queue.corpus)
    mutated = np.flatnonzero(c.parts.queue.corpus.static["generation"][:n] > 0)
    assert len(mutated) > 0
    queued = c.parts.queue.corpus.images_of(mutated)
    assert (fid.check(queued).scores <= fid.threshold + 1e-6).all()


def test_a_filter_nothing_passes_leaves_only_the_seeds(problem):
    r = run_campaign(*problem[:4], bounds=(0.0, 1.0), train_inputs=problem[4], fidelity="dsa:0",
                     budget="20it", inputs_per_step=4, seed=0)
    assert r.passed == r.queries == 0
    assert r.metrics.rf == r.metrics.urf == 0 < r.metrics.initial_rf
    assert r.corpus == r.queued_seeds
    assert all(u["faithful"] == 0 for u in r.rule_usage.values())  # unfaithful to the chooser


@pytest.mark.parametrize("same_model", [False, True], ids=["pair", "m1-is-m2"])
def test_as_the_shared_filter_of_deephunter(problem, same_model):
    """DeepHunter's own check (validity) runs before the models, the shared dsa after M1; with
    M1 and M2 one model, its coverage capture and M1's trace capture share the hooks."""
    m1, m2, x, y, x_train = problem
    r = run_campaign(m1, m1 if same_model else m2, x, y, bounds=(0.0, 1.0), train_inputs=x_train,
                     shared_fidelity="dsa:p90", budget="40it", inputs_per_step=4, seed=2, **DH)
    assert r.shared_rejected > 0
    assert r.trace_checks["shared"]["name"] == "dsa"
    assert "own" not in r.trace_checks
    fid = _check(m1, x_train, x)
    generated = ~r.faults.select(r.faults.kind == 0).initial
    if same_model:
        assert r.metrics.rf == 0
    else:
        assert (fid.check(torch.from_numpy(r.rf_inputs[generated])).scores <= fid.threshold + 1e-6).all()


def test_own_dsa_with_a_shared_image_filter_and_both_surprise(problem):
    m1, m2, x, y, x_train = problem
    own_then_ssim = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), train_inputs=x_train, fidelity="dsa:p90",
                                 shared_fidelity="ssim:0.9", budget="40it", inputs_per_step=4, seed=0)
    assert own_then_ssim.shared_rejected > 0
    assert own_then_ssim.passed == own_then_ssim.queries
    both = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), train_inputs=x_train, fidelity="mdsa:p95",
                        shared_fidelity="dsa:p80", budget="40it", inputs_per_step=4, seed=0)
    assert set(both.trace_checks) == {"own", "shared"}
    assert both.shared_rejected > 0


def test_the_result_keeps_the_threshold_through_the_store(problem, tmp_path):
    kw = dict(bounds=(0.0, 1.0), train_inputs=problem[4], fidelity="dsa:p90", budget="12it",
              inputs_per_step=4, seed=0,
              store=tmp_path / "s.sqlite", experiment="e", cell="c")
    first = run_campaign(*problem[:4], **kw)
    again = run_campaign(*problem[:4], **kw)  # finished: read back from the store
    assert again.trace_checks == first.trace_checks
    assert again.trace_checks["own"]["threshold"] > 0
