"""The regression fuzzing loop end to end on a tiny problem: reproducibility, the identical-model
and mismatched-model cases, exhaustion, DeepHunter's lineage rule, batched bookkeeping against a
one-by-one loop, and resuming after ``kill -9`` (spec/drfuzz.md sections 3, 7, 10)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from deepfault.errors import DeepFaultError
from deepfault.fuzz.campaign import Campaign, CampaignConfig, run_campaign
from deepfault.fuzz.campaign.keep import DiversityKeep, KeepInput
from deepfault.fuzz.mutation.diversity import DiversityTable
from helpers.fuzz_problems import DH, TINY, AlwaysPass, tiny_model, tiny_problem  # noqa: E402


def _same(a, b):
    fa, fb = a.faults.to_arrays(), b.faults.to_arrays()
    for key in fa:
        if key != "elapsed":
            np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    np.testing.assert_array_equal(a.rf_inputs, b.rf_inputs)
    np.testing.assert_array_equal(a.rf_p2, b.rf_p2)
    assert (a.iterations, a.queries, a.corpus, a.generated, a.passed) == (
        b.iterations, b.queries, b.corpus, b.generated, b.passed)
    assert a.rule_usage == b.rule_usage
    for field in ("rf", "urf", "seeds", "gf", "initial_rf", "queries_to_first_rf"):
        assert getattr(a.metrics, field) == getattr(b.metrics, field)


@pytest.mark.parametrize("settings", [dict(), DH, dict(chooser="uniform", inputs_per_step=1, budget="40it")],
                         ids=["drfuzz", "deephunter", "uniform-b1"])
def test_iteration_budget_campaigns_are_reproducible(settings):
    m1, m2, x, y = tiny_problem()
    kw = dict(bounds=(0.0, 1.0), fidelity=AlwaysPass(), budget="120it", inputs_per_step=6, seed=3) | settings
    a = run_campaign(m1, m2, x, y, **kw)
    b = run_campaign(m1, m2, x, y, **kw)
    _same(a, b)
    assert a.stop_reason == "budget"
    assert a.iterations == int(kw["budget"][:-2])
    assert a.metrics.urf <= a.metrics.rf
    assert a.metrics.seeds <= a.metrics.urf
    if settings is DH:  # DeepHunter's seeds are the inputs M2 gets right (spec section 10)
        assert a.metrics.rf > 0
        assert a.metrics.initial_rf == 0
        assert a.roots == int((m2(x).argmax(1) == y).sum()) == a.queued_seeds
    else:
        assert a.metrics.rf > 0
        assert a.metrics.initial_rf > 0
        assert a.roots == int((m1(x).argmax(1) == y).sum())
        assert a.queued_seeds == a.roots - a.metrics.initial_rf
    c = run_campaign(m1, m2, x, y, **(kw | {"seed": 4}))
    assert not np.array_equal(c.faults.root, a.faults.root) or c.corpus != a.corpus


def test_identical_models_find_no_regression_and_stop_at_the_budget():
    m1, _, x, y = tiny_problem()
    for settings in (dict(), DH):
        r = run_campaign(m1, m1, x, y, bounds=(0.0, 1.0), budget="60it", inputs_per_step=8, seed=0,
                         fidelity="ssim",
                         **settings)
        assert r.stop_reason == "budget"
        assert r.iterations == 60
        assert (r.metrics.rf, r.metrics.urf, r.metrics.seeds, r.metrics.initial_rf) == (0, 0, 0, 0)
        assert r.to_dict()["stop_reason"] == "budget"
    # a copy of the model behaves the same; a time budget ends on time (2,000 seeds, so the
    # queue cannot run dry first: that takes 11 selections of each)
    twin = tiny_model(0)
    _, _, x, y = tiny_problem(n=2000)
    r = run_campaign(m1, twin, x, y, bounds=(0.0, 1.0), budget="0.5s", inputs_per_step=8, seed=0,
                     fidelity="ssim")
    assert r.metrics.rf == 0
    assert r.stop_reason == "budget"
    # (each step is sized to the time left, so it may end up to half a step before the budget)
    assert 0.4 <= r.seconds < 5.0


def test_models_with_other_classes_or_input_shapes_are_refused():
    m1, _, x, y = tiny_problem()
    with pytest.raises(DeepFaultError, match="M1 has 3 classes and M2 4"):
        run_campaign(m1, tiny_model(0, classes=4), x, y, bounds=(0.0, 1.0), budget="5it")
    with pytest.raises(DeepFaultError, match="M2: the model cannot take inputs of shape"):
        run_campaign(m1, tiny_model(0, size=10), x, y, bounds=(0.0, 1.0), budget="5it")
    with pytest.raises(DeepFaultError, match=r"\(N, C, H, W\), sequences \(N, C, L\) or vectors \(N, F\)"):
        run_campaign(m1, m1, x[..., None], y, bounds=(0.0, 1.0), budget="5it")  # rank 5
    with pytest.raises(DeepFaultError, match="unknown campaign setting"):
        run_campaign(m1, m1, x, y, bounds=(0.0, 1.0), budgett="5it")
    with pytest.raises(DeepFaultError, match="strategy must be one of deephunter, drfuzz; got .afl."):
        CampaignConfig(strategy="afl")


def test_models_are_left_as_they_were():
    m1, m2, x, y = tiny_problem()
    m1.train()
    before = {k: v.clone() for k, v in m2.state_dict().items()}
    x0 = x.clone()
    run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), budget="30it", inputs_per_step=5, **DH)
    assert m1.training
    assert not m2.training
    assert all(torch.equal(before[k], v) for k, v in m2.state_dict().items())
    assert torch.equal(x, x0)
    for module in m2.modules():
        assert not module._forward_hooks


def test_a_queue_that_runs_dry_ends_the_campaign_cleanly():
    m1, m2, x, y = tiny_problem(n=6)
    r = run_campaign(m1, m1, x, y, bounds=(0.0, 1.0), budget="100000it", inputs_per_step=4, seed=0,
                     fidelity="ssim",
                     count_selections="every")
    # identical models: no candidate raises the table, each seed is selected 11 times (counting
    # every selection; as published, only selections with a fault count, so it never runs dry)
    assert r.stop_reason == "exhausted"
    assert r.iterations == 11 * r.queued_seeds


def test_deephunter_allows_one_affine_change_per_lineage():
    m1, m2, x, y = tiny_problem()
    # a high NC threshold leaves neurons to cover, so some mutants are kept
    dh = DH | {"criterion_params": {"threshold": 0.95}}
    config = CampaignConfig(budget="300it", inputs_per_step=10, seed=1, **dh)
    c = Campaign(m1, m2, x, y, bounds=(0.0, 1.0), config=config)
    c.run()
    rule = c.parts.queue.corpus.field("rule")
    affine_rules = {i for i, r in enumerate(c.rules) if r in ("translation", "rotation", "scale", "shear")}
    affine_entries = 0
    for i in range(len(c.seeds.queued), len(c.parts.queue.corpus)):
        lineage = [int(rule[j]) for j in c.parts.queue.corpus.ancestors(i) if rule[j] >= 0]
        count = sum(r in affine_rules for r in lineage)
        assert count <= 1
        affine_entries += count == 1
        assert bool(c.parts.queue.corpus.field("affine")[i]) == (count == 1)
        if count == 1:  # the lineage's reference is the root under that affine change
            assert c.parts.queue.corpus.field("ref")[i] >= len(c.seeds.index)
    assert affine_entries > 0
    assert set(c.rules) == {"translation", "rotation", "scale", "shear", "contrast", "brightness", "blur",
                            "gauss_noise"}


def test_diversity_waves_equal_one_iteration_at_a_time():
    rng = np.random.default_rng(0)
    for _ in range(20):
        roots_s = rng.integers(0, 4, size=12)
        labels = rng.integers(0, 3, size=4)
        p = rng.dirichlet(np.ones(3), size=4)
        iteration = np.repeat(np.arange(6), 2)
        roots = roots_s[iteration]
        tend = rng.normal(0, 0.2, size=(12, 3)).astype(np.float32)
        y2 = labels[roots]
        cand = rng.random(12) < 0.8
        rf = ~cand & (rng.random(12) < 0.5)
        a = DiversityKeep(DiversityTable(labels, p, p * 0.9))
        b = DiversityKeep(DiversityTable(labels, p, p * 0.9))
        kept_a = a.select(KeepInput(iteration, roots, tend, y2, cand, rf))
        kept_b = np.concatenate([
            b.select(KeepInput(iteration[s], roots[s], tend[s], y2[s], cand[s], rf[s]))
            for s in (slice(2 * i, 2 * i + 2) for i in range(6))
        ])
        np.testing.assert_array_equal(kept_a, kept_b)
        np.testing.assert_array_equal(a.table.table, b.table.table)


def test_batch_size_changes_the_schedule_not_the_kind_of_result():
    m1, m2, x, y = tiny_problem()
    one = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), budget="60it",
                       inputs_per_step=1)
    many = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), budget="60it",
                        inputs_per_step=16)
    assert one.iterations == many.iterations == 60
    assert one.steps == 60
    assert many.steps == 4  # 16 + 16 + 16 + 12
    assert one.generated == many.generated == 1200


_SCRIPT = TINY + textwrap.dedent('''
    import sys
    import numpy as np
    torch.set_num_threads(1)
    from deepfault.fuzz.campaign import run_campaign
    store, out = sys.argv[1], sys.argv[2]
    m1, m2, x, y = tiny_problem()
    # a queue of 200 images: entries are evicted long before the kill (bounded memory and store)
    r = run_campaign(m1, m2, x, y, bounds=(0.0, 1.0), fidelity=AlwaysPass(), budget="2400it",
                     inputs_per_step=4,
                     seed=5, store=None if store == "-" else store, experiment="e", cell="c",
                     checkpoint_every=0.02, queue_capacity=200)
    np.savez(out, rf_inputs=r.rf_inputs, corpus=r.corpus, resumed=r.resumed, evicted=r.evicted,
             **{k: v for k, v in r.faults.to_arrays().items() if k != "elapsed"},
             usage=np.array([[u[k] for k in ("selected", "faithful", "gain", "rf")]
                             for u in r.rule_usage.values()]))
''')


def _iterations_checkpointed(path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as db:
            row = db.execute("SELECT data FROM cells WHERE cell_id = 'c/checkpoint'").fetchone()
    except sqlite3.Error:
        return 0
    if row is None:
        return 0
    import json

    return json.loads(row[0])["parts"]["counters"]["iterations"]


def test_kill_9_then_resume_with_eviction_equals_an_uninterrupted_run(tmp_path):
    script = tmp_path / "campaign.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, PYTHONHASHSEED="0")
    run = [sys.executable, str(script)]
    subprocess.run([*run, "-", str(tmp_path / "whole.npz")], check=True, env=env, timeout=300)
    store = tmp_path / "store.sqlite"
    proc = subprocess.Popen([*run, str(store), str(tmp_path / "never.npz")], env=env)
    try:
        deadline = time.time() + 240
        while _iterations_checkpointed(store) < 300:
            assert proc.poll() is None, "the campaign ended before it could be killed"
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    killed_at = _iterations_checkpointed(store)
    assert 300 <= killed_at < 2400
    subprocess.run([*run, str(store), str(tmp_path / "resumed.npz")], check=True, env=env, timeout=300)
    whole, resumed = np.load(tmp_path / "whole.npz"), np.load(tmp_path / "resumed.npz")
    assert int(resumed["resumed"]) > 0
    assert int(whole["resumed"]) == 0
    for key in whole.files:
        if key != "resumed":
            np.testing.assert_array_equal(whole[key], resumed[key], err_msg=key)
    assert len(whole["root"]) > 0
    assert int(whole["evicted"]) > 0
    # a finished campaign in the store is returned as it is, not run again
    subprocess.run([*run, str(store), str(tmp_path / "again.npz")], check=True, env=env, timeout=300)
    again = np.load(tmp_path / "again.npz")
    np.testing.assert_array_equal(again["root"], whole["root"])


def _as_version_2(data: dict, arrays: dict) -> tuple[dict, dict]:
    """A checkpoint by part (version 3) in the flat layout of version 2, written out here from
    that layout's keys (the store's old checkpoints)."""
    data = dict(data)
    parts = data.pop("parts")
    timing, queue, faults = parts["timing"], parts["queue"], parts["faults"]
    counters = {k: v for k, v in parts["counters"].items() if k != "resumed"}
    data.update(version=2, resumed=parts["counters"]["resumed"], numpy_rng=parts["random"]["numpy_rng"],
                counters={**counters, "elapsed": timing["elapsed"], "setup_seconds": timing["setup_seconds"],
                          "rf": faults["rf"], "gf": faults["gf"]},
                timeline=timing["timeline"], timings=timing["timings"], corpus_size=queue["size"],
                refs_size=queue["refs_size"], seed_entries=queue["seed_entries"],
                seed_refs=queue["seed_refs"], page_slots=queue["page_slots"],
                rule_rf=arrays["rules.rf"].tolist())
    old = {"random.torch_rng": "torch_rng", "rules.chooser.": "chooser.", "faults.failures.": "failures."}
    out = {}
    for key, value in arrays.items():
        if key != "rules.rf":
            out[next((to + key[len(new):] for new, to in old.items() if key.startswith(new)), key)] = value
    return data, out


def test_a_checkpoint_of_version_2_resumes_as_an_uninterrupted_run(tmp_path):
    """Checkpoints stored before the state was kept by part (version 2, one flat record) still resume."""
    from deepfault.experiment.store import ResultStore
    from deepfault.fuzz.campaign.checkpoint import DRFUZZ_METHOD as METHOD

    m1, m2, x, y = tiny_problem()
    kw = dict(bounds=(0.0, 1.0), budget="60it", inputs_per_step=6, seed=3, checkpoint_every=0,
              fidelity=AlwaysPass(), queue_capacity=150)

    stopped: list[int] = []

    def stop_at_24(p):
        if p.iterations >= 24 and not stopped:
            stopped.append(p.iterations)
            raise KeyboardInterrupt

    path = tmp_path / "store.sqlite"
    first = run_campaign(m1, m2, x, y, store=path, experiment="e", progress=stop_at_24, **kw)
    assert first.stop_reason == "interrupted"
    with ResultStore(path) as store:
        rec = store.get("e", METHOD, "campaign/checkpoint")
        assert rec is not None
        assert rec.data["version"] == 3
        store.put("e", METHOD, "campaign/checkpoint", *_as_version_2(rec.data, rec.arrays), replace=True)
    resumed = run_campaign(m1, m2, x, y, store=path, experiment="e", **kw)
    whole = run_campaign(m1, m2, x, y, **kw)
    assert resumed.resumed > 0
    _same(whole, resumed)
    assert whole.rule_usage == resumed.rule_usage
    assert (whole.queries, whole.corpus, whole.evicted) == (resumed.queries, resumed.corpus, resumed.evicted)
