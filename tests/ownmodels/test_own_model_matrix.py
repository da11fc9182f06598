"""Your own model, every method (issue 26): a ResNet-like CNN with BasicBlocks and BatchNorm, a
tiny ViT with a class token, a tabular MLP (20 features) and a 1-D conv net on sequences, each
written by the test as a user's ``.py`` class plus a saved ``state_dict`` (``.safetensors`` for
the MLP) and random inputs in the ``.npz`` data format, through every method by the CLI
(``--arch file.py:Class --arch-args JSON``) and by the Python API (``arch=``/``arch_kwargs=``).

The checks are the contract a user relies on, not exact numbers: each command exits 0 and
writes its files, each result has the inputs' shape and counts in range, and the model files
the tool writes read back with the same outputs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import deepfault as df
from deepfault.cli import main
from deepfault.models import open_model
from helpers.own_models import KINDS, write_case

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              # the CLI calls the API by its current names (regress took cell=, repair save_to=)
              pytest.mark.filterwarnings("error::FutureWarning")]

IMAGES = {"resnet", "vit"}


@pytest.fixture(scope="module", params=sorted(KINDS))
def case(request, tmp_path_factory):
    return write_case(request.param, tmp_path_factory.mktemp(request.param))


def _fidelity(case) -> str:
    """Random images have no discriminator; vectors and sequences take their default (mdsa)."""
    return "ssim:0.5" if case.kind in IMAGES else "mdsa"


def _cli(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _common(case):
    return ["--dataset", case.data, "--device", "cpu", "--threads", "1", *case.arch_args()]


def _prepared(case, path=None):
    return df.prepare_model(path or case.m1, str(case.data), arch=case.arch, arch_kwargs=case.arch_kwargs)


def _x(case, key="x"):
    with np.load(case.data) as f:
        return f[key], f["y"]


# --------------------------------------------------------------------------- CLI


def test_cli_inspect(case, capsys):
    out = _cli(capsys, "inspect", case.m1, *case.arch_args(), "--dataset", case.data)
    assert "neurons: " in out
    assert "name others with --layers" in out
    assert KINDS[case.kind].cls in out  # how the file was read: the user's class


def test_cli_run_and_repair(case, tmp_path, capsys):
    run_json = tmp_path / "run.json"
    _cli(capsys, "run", "--model", case.m1, *_common(case), "--class", "0", "--inputs", "4", "-k", "3",
         "--out", run_json, "--no-progress", "--no-baseline", "--no-surprise")
    result = json.loads(run_json.read_text())
    assert result["classes"][0]["class"] == 0
    with np.load(tmp_path / "run.npz") as f:
        assert f["synthesized"].shape[1:] == KINDS[case.kind].input_shape
    saved = tmp_path / "repaired.pt"
    _cli(capsys, "repair", "--model", case.m1, *_common(case), tmp_path / "run.npz", "--epochs", "1",
         "--baselines", "random-train", "--out", tmp_path / "repair.json", "--save-model", saved,
         "--no-progress")
    assert json.loads((tmp_path / "repair.json").read_text())["config"]["epochs"] == 1
    # the repaired model reads back without --trust-pickle, and records its input shape
    out = _cli(capsys, "inspect", saved, "--arch", case.arch)
    assert "neurons: " in out
    assert "name others with --layers" in out


def test_cli_coverage_profile_measure_rank(case, tmp_path, capsys):
    common = [*_common(case), "--no-progress"]
    _cli(capsys, "coverage", "profile", "--model", case.m1, *common, "--out", tmp_path / "p.npz")
    _cli(capsys, "coverage", "measure", "--model", case.m1, *common, "--profile", tmp_path / "p.npz",
         "--criteria", "nc,kmnc,nbc", "--out", tmp_path / "m.json")
    measured = json.loads((tmp_path / "m.json").read_text())
    assert {"nc", "kmnc", "nbc"} <= set(json.dumps(measured).split('"'))
    _cli(capsys, "coverage", "rank", "--model", case.m1, *common, "--by", "gini,cam", "--out",
         tmp_path / "r.json")
    assert (tmp_path / "r.json").is_file()


def test_cli_xplore(case, tmp_path, capsys):
    out = _cli(capsys, "xplore", "--model", f"{case.m1},{case.m2}", "--arch", f"{case.arch},{case.arch}",
               "--arch-args", json.dumps(case.arch_kwargs), "--dataset", case.data, "--device", "cpu",
               "--threads", "1", "--num-seeds", "6", "--iterations", "3", "--out", tmp_path / "x.json",
               "--no-progress", "--no-surprise")
    assert "neuron coverage" in out
    with np.load(tmp_path / "x.npz") as f:
        assert f["inputs"].shape[1:] == KINDS[case.kind].input_shape


def test_cli_regress(case, tmp_path, capsys):
    _cli(capsys, "regress", "--m1", case.m1, "--m2", case.m2, *_common(case), "--budget", "8it",
         "--inputs-per-step", "4", "--fidelity", _fidelity(case), "--store", tmp_path / "r.sqlite",
         "--out", tmp_path / "faults.npz", "--no-progress")
    result = json.loads((tmp_path / "faults.json").read_text())
    assert result["iterations"] == 8
    with np.load(tmp_path / "faults.npz") as f:
        assert f["inputs"].shape[1:] == KINDS[case.kind].input_shape


# --------------------------------------------------------------------------- Python API


def test_api_opens_the_users_class(case):
    mf = open_model(case.m1, arch=case.arch, arch_kwargs=case.arch_kwargs)
    assert mf.read["format"] == ("safetensors" if case.m1.suffix == ".safetensors" else "torch")
    pm = _prepared(case)
    assert pm.input_shape == KINDS[case.kind].input_shape
    from deepfault.core.capture import default_layers
    from deepfault.models.summary import describe_model

    rows, out_shape = describe_model(pm.module, pm.input_shape)
    assert out_shape[-1] == 3
    if default_layers(pm.module) == "blocks":  # deep networks: their blocks' outputs
        assert case.kind in ("resnet", "vit")
    else:
        assert sum(r.units or 0 for r in rows if r.default_neuron_layer) > 0


def test_api_run_and_repair(case, tmp_path):
    pm = _prepared(case)
    config = df.RunConfig(k=3, classes=(0,), num_inputs=4)
    result = df.run_deepfault(pm, pm.data, config, runtime=df.Runtime(threads=1))
    (cls,) = result.classes
    assert cls.target_class == 0
    # repair the inputs of the run, in the file the CLI writes
    from deepfault.localization.outputs import save_synthesized

    save_synthesized(result, pm.data, tmp_path / "run.npz")
    from deepfault.repair import RepairConfig

    r = df.repair(pm, tmp_path / "run.npz", RepairConfig(epochs=1, baselines=("random-train",)),
                  runtime=df.Runtime(threads=1))
    (model,) = r.outputs()
    model.write(tmp_path / "repaired.pt")
    again = _prepared(case, tmp_path / "repaired.pt")
    x = torch.from_numpy(_x(case)[0][:5])
    with torch.no_grad():
        torch.testing.assert_close(again.module(x), r.model.eval()(x))


def test_api_coverage(case):
    pm = _prepared(case)
    x_train, _ = _x(case, "x_train")
    x, y = _x(case)
    runtime = df.Runtime(batch_size=32, threads=1)
    profile = df.compute_profile(pm, x_train, runtime=runtime)
    report = df.measure_coverage(pm, x, df.CoverageConfig(criteria=("nc", "kmnc", "nbc"), profile=profile),
                                 runtime=runtime)
    assert {r.criterion for r in report.results} == {"nc", "kmnc", "nbc"}
    assert all(0.0 <= r.ratio <= 1.0 and r.total > 0 for r in report.results)
    ranked = df.rank_inputs(pm, (x, y), df.CoverageConfig(by=("gini", "cam"), profile=profile),
                            runtime=runtime)
    assert len(ranked.rankings) == 2
    for r in ranked.rankings:
        assert sorted(r.order.tolist()) == list(range(len(x)))


def test_api_xplore(case):
    m1, m2 = _prepared(case), _prepared(case, case.m2)
    from deepfault.xplore import XploreConfig

    result = df.xplore([m1, m2], m1.data.x_test, XploreConfig(seeds=6, iterations=3),
                       runtime=df.Runtime(threads=1))
    assert result.found.inputs.shape[1:] == KINDS[case.kind].input_shape
    assert min(result.num_neurons) > 0


def test_api_regress(case, tmp_path):
    from deepfault.core.runtime import Runtime
    from deepfault.fuzz import CampaignConfig, Versions

    out = df.regress(Versions(case.m1, case.m2, arch=case.arch, arch_kwargs=case.arch_kwargs), case.data,
                     CampaignConfig(budget="8it", inputs_per_step=4, fidelity=_fidelity(case)),
                     runtime=Runtime(store=tmp_path / "r.sqlite", threads=1))
    assert out.result.iterations == 8
    assert out.result.rf_inputs.shape[1:] == KINDS[case.kind].input_shape
