"""Issue 30: every count bounded where it is read, preset options and repair's options included,
and a request that needs more memory than the machine has refused before it starts.

Each case is refused before any work: the preset's plan (data, models, the discriminator) is
replaced by a function that fails the test when called.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from deepfault import DeepFaultError, checks
from deepfault.repair import RepairConfig
from helpers.hardening import (
    assert_refused,
    pair,  # noqa: F401  (the shared files, as a fixture)
)


@pytest.fixture
def no_plan(monkeypatch):
    """Every preset's ``plan`` fails the test: the refusal must come first."""
    from deepfault.fuzz.preset import DRFuzzMnist
    from deepfault.xplore.preset import DeepXploreMnist

    def plan(self, context):
        raise AssertionError("the preset started its work before refusing its options")

    monkeypatch.setattr(DeepXploreMnist, "plan", plan)
    monkeypatch.setattr(DRFuzzMnist, "plan", plan)


@pytest.mark.parametrize(
    ("preset", "option", "needles"),
    [
        ("deepxplore-mnist", "repeats=1000000000", ("repeats", "at most 10,000")),
        ("deepxplore-mnist", "seeds=99999999999", ("seeds", "at most")),
        ("deepxplore-mnist", "iterations=1000000000", ("iterations", "at most 100,000")),
        ("deepxplore-mnist", "iterations=1e9", ("iterations", "an integer >= 1")),
        ("deepxplore-mnist", "repeats=" + "9" * 5000, ("repeats", "5000 digits")),
        ("drfuzz-mnist", "max-seeds=99999999999", ("max-seeds", "at most")),
        ("drfuzz-mnist", "seeds=" + ",".join(["1"] * 20000), ("seeds", "at most 10,000 seeds")),
        ("drfuzz-mnist", "seeds=99999999999999999999", ("seeds", "at most")),
    ],
    ids=["xplore-repeats", "xplore-seeds", "xplore-iterations", "xplore-iterations-float", "xplore-digits",
         "drfuzz-max-seeds", "drfuzz-seed-count", "drfuzz-seed-value"],
)
def test_preset_options_are_bounded_before_the_plan(no_plan, tmp_path, preset, option, needles):
    assert_refused(["experiment", "--preset", preset, "--preset-option", option, "--store", "s.sqlite",
                    "--no-progress"], tmp_path, "preset option", *needles)


def test_seeds_that_need_more_memory_than_the_machine_has_are_refused_saying_how_much(
        no_plan, tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "memory_bytes", lambda: 1 << 30)  # a 1 GiB machine
    line = assert_refused(["experiment", "--preset", "deepxplore-mnist", "--preset-option", "seeds=1000000",
                           "--store", "s.sqlite", "--no-progress"], tmp_path, "seeds", "memory (1.0 GiB)")
    assert "would need at least 8.8 GiB" in line, line  # 10^6 seeds x 3 x 28 x 28 x 4 bytes


def test_xplore_seeds_that_need_more_memory_than_the_machine_has_are_refused_before_the_search(
        pair, tmp_path, monkeypatch):  # noqa: F811
    import importlib

    search = importlib.import_module("deepfault.xplore.search")  # the module (the package exports a function)

    for name in ("m1.pt", "m2.pt", "data.npz"):
        shutil.copy(pair / name, tmp_path / name)
    monkeypatch.setattr(checks, "memory_bytes", lambda: 1 << 30)  # a 1 GiB machine
    monkeypatch.setattr(search, "search", lambda *a, **k: pytest.fail("the search started"))
    argv = ["xplore", "--model", "m1.pt,m2.pt", "--dataset", "data.npz", "--num-seeds", "1000000", "--out",
            "x.json", "--no-surprise", "--no-progress"]
    line = assert_refused(argv, tmp_path, "seeds", "memory (1.0 GiB)")
    assert "would need at least 8.8 GiB" in line, line  # 10^6 x 3 x 1 x 28 x 28 x 4 bytes


def test_memory_of_this_machine_is_read():
    total = checks.memory_bytes()
    with open("/proc/meminfo") as fh:  # Linux: the same figure, within rounding to pages
        kib = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1])
    assert total is not None
    assert abs(total - kib * 1024) < 1 << 22


@pytest.mark.parametrize(("option", "value", "needle"), [
    ("--bim-steps", "2000000000", "from 1 to 100,000"),
    ("--bim-steps", "2e9", "an integer"),
    ("--epochs", "1000000000", "from 1 to 100,000"),
    ("--batch-size", "99999999999", "from 1 to 16,777,216"),
    ("--lr", "1e300", "<= 10"),
    ("--seed", "1e30", "integer"),
])
def test_repair_options_are_bounded_before_work(pair, tmp_path, option, value, needle):  # noqa: F811
    shutil.copy(pair / "m1.pt", tmp_path / "m.pt")
    np.savez(tmp_path / "f.npz", x=np.zeros((2, 1, 28, 28), np.float32))
    assert_refused(["repair", "f.npz", "--model", "m.pt", "--out", "r.json", option, value], tmp_path,
                   option, needle)


@pytest.mark.parametrize("field", [{"bim_steps": 2_000_000_000}, {"batch_size": 1 << 40}, {"lr": 1e300},
                                   {"seed": 1 << 70}])
def test_repair_config_is_bounded_from_python_too(field):
    with pytest.raises(DeepFaultError, match=next(iter(field))):
        RepairConfig(**field)
