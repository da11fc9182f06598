"""The verdict: a model against itself passes with zero flips, a damaged one fails naming the
class, each reason names its number and threshold; the policy file and its refusals."""

from __future__ import annotations

import pytest
import torch

from deepfault import DeepFaultError
from deepfault.data import as_dataset
from deepfault.gate import EXIT_STATUS, GateConfig, gate, policy_config, read_policy
from helpers.gate_models import linear, split


@pytest.fixture(scope="module")
def data():
    return as_dataset(*split())


def test_a_model_against_itself_passes_with_zero_flips(data):
    o = gate((linear(), linear()), data, GateConfig(budget="0"))
    assert o.passed
    assert o.verdict == "pass"
    assert o.exit_status == 0
    assert o.heldout.negative_flips == 0
    assert o.heldout.positive_flips == 0
    assert o.heldout.disagree == 0
    assert o.heldout.mcnemar_p == 1.0


def test_a_damaged_challenger_fails_with_the_damaged_class_named(data):
    o = gate((linear(), linear(0.5)), data, GateConfig(budget="0", max_negative_flip_rate="off"))
    assert o.verdict == "fail"
    assert not o.passed
    assert o.exit_status == EXIT_STATUS["fail"] == 1
    failing = [c for c in o.judgement.checks if c.status == "fail"]
    assert "class_flip_rate[2]" in [c.name for c in failing]
    assert not any(c.name in ("class_flip_rate[0]", "class_flip_rate[1]") for c in failing)
    reason = next(c.reason for c in failing if c.name == "class_flip_rate[2]")
    assert "class 2 ('2')" in reason
    assert "> 5.00% allowed (max_class_flip_rate)" in reason


def test_critical_classes_have_their_own_limit(data):
    o = gate(
        (linear(), linear(0.5)),
        data,
        GateConfig(
            budget="0",
            critical_classes=(2,),
            max_critical_flip_rate=0.9,
            max_class_flip_rate=0.01,
            max_negative_flip_rate="off",
            not_significantly_worse=False,
        ),
    )
    names = {c.name: c.status for c in o.judgement.checks}
    assert names["critical_flip_rate[2]"] == "pass"
    assert "class_flip_rate[2]" not in names


def test_least_accuracy_delta_and_significance(data):
    loose = GateConfig(
        budget="0",
        max_negative_flip_rate="off",
        max_class_flip_rate="off",
        not_significantly_worse=False,
        min_accuracy_delta=-0.5,
    )
    assert gate((linear(), linear(0.5)), data, loose).passed
    strict = GateConfig(
        budget="0",
        max_negative_flip_rate="off",
        max_class_flip_rate="off",
        not_significantly_worse=False,
        min_accuracy_delta=-0.1,
    )
    o = gate((linear(), linear(0.5)), data, strict)
    assert o.verdict == "fail"
    assert "< -0.1000 required (min_accuracy_delta)" in o.reasons[0]
    sig = GateConfig(budget="0", max_negative_flip_rate="off", max_class_flip_rate="off")
    assert "significantly worse" in gate((linear(), linear(0.5)), data, sig).reasons[0]


def test_no_check_holds():
    x, _ = split()
    o = gate(
        (linear(), linear()),
        x,
        GateConfig(
            budget="0", max_negative_flip_rate="off", max_class_flip_rate="off", not_significantly_worse=False
        ),
    )
    assert o.verdict == "hold"
    assert o.exit_status == 3
    assert "no check to judge" in o.reasons[0]


def test_a_split_without_labels_is_refused_when_the_policy_needs_them():
    x, _ = split()
    with pytest.raises(DeepFaultError, match="no labels, and the policy needs them"):
        gate((linear(), linear()), x, GateConfig(budget="0"))


def test_a_critical_class_the_models_lack_is_refused(data):
    with pytest.raises(DeepFaultError, match="critical_classes must be classes 0 to 2; got 7"):
        gate((linear(), linear()), data, GateConfig(budget="0", critical_classes=(7,)))


def test_policy_file(tmp_path):
    p = tmp_path / "policy.toml"
    p.write_text("max_negative_flip_rate = 0.02\ncritical_classes = [1]\nmax_new_faults = 'off'\n")
    assert read_policy(p) == {
        "max_negative_flip_rate": 0.02,
        "critical_classes": [1],
        "max_new_faults": "off",
    }
    config = policy_config(p, GateConfig(budget="0"), max_negative_flip_rate=0.5)
    assert config.max_negative_flip_rate == 0.5
    assert config.critical_classes == (1,)
    assert config.budget == "0"


@pytest.mark.parametrize(("text", "message"), [
    ("max_negative_flip_rte = 0.02\n",
     "unknown key 'max_negative_flip_rte' \\(did you mean 'max_negative_flip_rate'"),
    ("max_negative_flip_rate = 1.5\n", "max_negative_flip_rate must be .* from 0 to 1.*got 1.5"),
    ("max_corpus_failures = -1\n", "max_corpus_failures"),
    ("critical_classes = [1]\nmax_critical_flip_rate = 'off'\n",
     "critical_classes needs max_critical_flip_rate"),
    ("not toml [", "is not TOML"),
])
def test_policy_file_refusals(tmp_path, text, message):
    p = tmp_path / "policy.toml"
    p.write_text(text)
    with pytest.raises(DeepFaultError, match=message):
        read_policy(p)


def test_models_of_another_input_shape_are_refused(data):
    with pytest.raises(DeepFaultError, match="shape"):
        gate((linear(), torch.nn.Linear(5, 3)), data, GateConfig(budget="0"))


def test_a_fuzz_stage_that_cannot_run_is_refused_before_the_held_out_stage(data, tmp_path, monkeypatch):
    """The default check for vectors (mdsa) reads M1's layer before the logits, which a one-layer
    model lacks: refused before any stage runs, and nothing is added to the corpus."""
    from deepfault.gate import heldout, protocol

    called = []
    monkeypatch.setattr(protocol, "compare_heldout",
                        lambda *a, **k: called.append(1) or heldout.compare_heldout(*a, **k))
    with pytest.raises(DeepFaultError, match="fewer than two Linear/Conv layers"):
        gate((linear(), linear(0.5)), data, GateConfig(budget="20it", corpus=str(tmp_path / "c")))
    assert not called
    assert not (tmp_path / "c").exists()
    o = gate((linear(), linear(0.5)), data, GateConfig(budget="20it", fidelity="linf:0.2",
                                                       max_negative_flip_rate="off"))
    assert o.fuzz is not None  # a check the model can take: the stage runs
