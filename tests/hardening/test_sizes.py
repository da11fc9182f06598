"""Sizes bounded before memory is taken (issue 43): an ``--arch`` with ``--arch-args`` is built on
the meta device and checked against the state_dict and the memory free before the real build;
a fuzzing step's mutants, ``inspect --input-shape`` and every count option are bounded where
they are declared or checked against the memory free, in one line that gives the size."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from deepfault.checks import MAX_CLASSES, MAX_INPUTS, MAX_MODELS, MAX_MUTANTS
from deepfault.core import memory
from deepfault.core.constraints import Each, Interval, constraints
from deepfault.errors import DeepFaultError
from deepfault.fuzz.campaign import CampaignConfig
from deepfault.fuzz.campaign.memory import check_step_memory
from deepfault.localization.config import RunConfig
from deepfault.models import load as load_module
from deepfault.models import open_model
from deepfault.repair.config import RepairConfig
from deepfault.xplore.config import XploreConfig
from helpers.hardening import cli, package_configs
from helpers.own_models import DIGITS_NET

NET = DIGITS_NET


@pytest.fixture
def net(tmp_path, monkeypatch):
    """A user's class in ``net.py`` and its plain state_dict ``sd.pt`` (hidden 8), in the cwd."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(NET)
    torch.manual_seed(0)
    from deepfault.models import build_model

    torch.save(build_model("net.py:Net").state_dict(), tmp_path / "sd.pt")
    return tmp_path


def _no_real_build(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the architecture was built for real before its shapes were checked")

    monkeypatch.setattr(load_module, "build_model", refuse)


def test_arch_args_that_do_not_fit_the_state_dict_are_refused_before_the_real_build(net, monkeypatch):
    """{"hidden": 30000} grew past 4 GiB before the mismatch was found; 64e9 weights here."""
    _no_real_build(monkeypatch)
    with pytest.raises(DeepFaultError) as err:
        open_model("sd.pt", arch="net.py:Net", arch_kwargs={"hidden": 1_000_000_000})
    assert "does not fit architecture 'net.py:Net'" in str(err.value)
    assert "fc1.weight 8x64 in the file but 1000000000x64 in the model" in str(err.value)


def test_the_cli_refuses_the_mismatch_in_one_line(net):
    status, _, err = cli(["run", "--model", "sd.pt", "--arch", "net.py:Net", "--arch-args",
                             json.dumps({"hidden": 1_000_000_000}), "--dataset", "digits", "--out", "r.json"])
    assert status == 2
    assert err.count("\n") == 1
    assert "1000000000x64 in the model" in err
    assert not (net / "r.json").exists()


def test_an_architecture_larger_than_the_memory_free_is_refused_with_both_sizes(net, monkeypatch):
    monkeypatch.setattr(memory, "free_memory", lambda device="cpu": 1 << 20)
    status, _, err = cli(["train", "--arch", "net.py:Net", "--arch-args", json.dumps({"hidden": 100_000}),
                             "--dataset", "digits", "--epochs", "1", "--out", "t.pt", "--no-progress"])
    assert status == 2
    assert "(7,500,010 weights) needs 28.6 MiB, more than the 1.0 MiB of memory free here" in err
    assert "give smaller --arch-args" in err
    assert not (net / "t.pt").exists()


def test_a_model_file_of_the_users_code_is_checked_on_the_meta_device_too(net, monkeypatch):
    from deepfault.models import ModelFile, build_model, save_model

    save_model(net / "m.pt", ModelFile(build_model("net.py:Net"), "net.py:Net", {}, "digits", (0.0, 1.0)))
    monkeypatch.setattr(memory, "free_memory", lambda device="cpu": 1 << 10)
    with pytest.raises(DeepFaultError, match=r"needs 2\.4 KiB, more than the 1\.0 KiB of memory free"):
        open_model(net / "m.pt", arch="net.py:Net")


def test_a_builder_that_cannot_run_on_the_meta_device_is_built_as_before(net):
    (net / "net.py").write_text(NET + """

class ReadsValues(Net):
    def __init__(self):
        super().__init__()
        if float(self.fc1.weight.abs().sum()) < 0:  # reads a value: impossible on the meta device
            raise RuntimeError("never")
""")
    torch.save(Net_state(net), net / "rv.pt")
    mf = open_model(net / "rv.pt", arch="net.py:ReadsValues")
    assert sum(p.numel() for p in mf.model.parameters()) == 64 * 8 + 8 + 8 * 10 + 10


def Net_state(folder):  # noqa: N802 - the state_dict of the Net class
    from deepfault.models import build_model

    return build_model(f"{folder / 'net.py'}:Net").state_dict()


# --------------------------------------------------------------------------- counts


def test_mutants_are_bounded_where_declared():
    with pytest.raises(DeepFaultError, match=f"mutants must be an integer from 1 to {MAX_MUTANTS:,}"):
        CampaignConfig(mutants=MAX_MUTANTS + 1)
    status, _, err = cli(["regress", "--m1", "a.pt", "--m2", "b.pt", "--mutants", str(MAX_MUTANTS + 1)])
    assert status == 2
    assert f"--mutants must be an integer from 1 to {MAX_MUTANTS:,}" in err


def test_a_step_whose_mutants_cannot_fit_is_refused_with_its_size(monkeypatch):
    monkeypatch.setattr(memory, "free_memory", lambda device="cpu": 1 << 30)
    check_step_memory((3, 32, 32), 64, 20)  # the default step on CIFAR: 45 MiB
    with pytest.raises(DeepFaultError) as err:
        check_step_memory((3, 224, 224), 64, 10_000)
    assert ("one step's 640,000 mutants of shape (3, 224, 224) (--inputs-per-step 64 x --mutants 10000)"
            in str(err.value))
    assert "more than the 1.0 GiB of memory free here" in str(err.value)
    assert "give fewer --mutants or --inputs-per-step" in str(err.value)


def test_regress_refuses_the_step_before_the_store_is_made(pair, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = cli(["regress", "--m1", str(pair / "m1.pt"), "--m2", str(pair / "m2.pt"),
                             "--dataset", str(pair / "data.npz"), "--mutants", "10000",
                             "--inputs-per-step", "1000000", "--budget", "5it", "--store", "s.sqlite"])
    assert status == 2
    assert "one step's 10,000,000,000 mutants of shape (1, 28, 28)" in err
    assert not (tmp_path / "s.sqlite").exists()


def test_inspect_checks_the_input_shape_against_memory_before_the_model_is_opened(monkeypatch, tmp_path):
    from deepfault.models.source import ModelSource

    def refuse(*args, **kwargs):
        raise AssertionError("the model was opened before --input-shape was checked")

    monkeypatch.setattr(ModelSource, "open", refuse)
    status, _, err = cli(["inspect", str(tmp_path / "m.pt"), "--input-shape", "65536,65536,65536"])
    assert status == 2
    assert ("one input of --input-shape 65536,65536,65536 (281,474,976,710,656 values in float32) needs "
            "1.0 PiB") in err


def _unbounded(constraint) -> bool:
    if isinstance(constraint, Each):
        return _unbounded(constraint.item)
    return isinstance(constraint, Interval) and constraint.kind is int and constraint.high is None


def test_no_count_of_any_config_is_unbounded():
    """Every count is bounded where it is declared (the declarations give the CLI its types),
    the surprise fit's max_features included."""
    configs = package_configs()
    assert {c.__name__ for c in configs} >= {"RunConfig", "SurpriseConfig", "CampaignConfig", "XploreConfig"}
    loose = [f"{c.__name__}.{name}" for c in configs for name, k in constraints(c).items() if _unbounded(k)]
    assert not loose


@pytest.mark.parametrize(("config", "field", "value", "limit"), [
    (RunConfig, "k", MAX_INPUTS + 1, f"{MAX_INPUTS:,}"),
    (RunConfig, "num_inputs", MAX_INPUTS + 1, f"{MAX_INPUTS:,}"),
    (RunConfig, "k_primes", (MAX_INPUTS + 1,), f"{MAX_INPUTS:,}"),
    (RunConfig, "classes", (MAX_CLASSES,), f"{MAX_CLASSES - 1:,}"),
    (XploreConfig, "target", MAX_MODELS, f"{MAX_MODELS - 1:,}"),
    (RepairConfig, "vote_model", MAX_MODELS, f"{MAX_MODELS - 1:,}"),
])
def test_counts_beyond_their_limit_are_one_line(config, field, value, limit):
    with pytest.raises(DeepFaultError, match=limit):
        config(**{field: value})
    assert dataclasses.is_dataclass(config)


@pytest.mark.parametrize(("argv", "message"), [
    (["run", "-k", "1000000000000000"], "-k must be an integer from 1 to"),
    (["run", "--inputs", "1000000000000000"], "--inputs must be an integer from 1 to"),
    (["run", "--class", "1000000000000000"], "--class must be"),
    (["xplore", "--target", "1000000000000000"], "--target must be"),
    (["repair", "in.npz", "--vote-model", "1000000000000000"],
     "--vote-model must be a name or an index from 0"),
])
def test_the_cli_refuses_huge_counts_while_parsing(argv, message):
    status, _, err = cli(argv)
    assert status == 2
    assert message in err
