"""A DeepXplore run from files without the command line: the declared sources and files
(:mod:`deepfault.xplore.files`) and :func:`run_sources`."""

from pathlib import Path

import pytest
import torch

from deepfault.core.runtime import Runtime
from deepfault.errors import DeepFaultError
from deepfault.models import ModelFile, build_model, save_model
from deepfault.xplore import XploreConfig
from deepfault.xplore.files import XploreFiles, XploreSources, per_model, run_sources


def _digits_model(path, seed):
    torch.manual_seed(seed)
    model = build_model("digits_mlp")
    save_model(path, ModelFile(model, "digits_mlp", {}, dataset="digits", bounds=(0.0, 1.0)))
    return str(path)


def test_a_per_model_list_skips_dashes_and_empty_entries():
    assert per_model("a.py:A,-,,b") == ("a.py:A", None, None, "b")


def test_the_sources_read_the_texts_as_typed():
    sources = XploreSources(["a.pt", "b.pt"], arch_kwargs='{"num_classes": 10}', fix_features="0-2,5",
                            fix_steps="1")
    assert sources.models == ("a.pt", "b.pt")
    assert sources.arch_kwargs == {"num_classes": 10}
    assert (sources.fix_features, sources.fix_steps) == ((0, 1, 2, 5), (1,))
    assert XploreSources(fix_features=(3, 1)).fix_features == (3, 1)


@pytest.mark.parametrize(("field", "value"), [("models", ""), ("fix_features", "x"), ("fix_steps", "-1"),
                                              ("fix_features", 1.5), ("arch_kwargs", "[1]"),
                                              ("feature_bounds", "")])
def test_the_sources_refuse_what_the_command_line_refuses(field, value):
    with pytest.raises(DeepFaultError):
        XploreSources(**{field: value})


def test_the_files_sit_beside_the_result():
    assert XploreFiles("r/x.json").paths() == (Path("r/x.json"), Path("r/x.npz"), Path("r/x.png"))
    assert XploreFiles("-").paths() == (None, None, None)
    with pytest.raises(DeepFaultError):
        XploreFiles(grid=0)


def test_run_sources_opens_the_models_and_records_the_run(tmp_path):
    models = [_digits_model(tmp_path / f"m{seed}.pt", seed) for seed in (1, 2)]
    sources = XploreSources(models, fix_features="0", no_surprise=True)
    done = run_sources(sources, XploreConfig(seeds=6, iterations=2, seed=0), Runtime(threads=1), grid=3)
    assert done.data.name == "digits"
    assert done.runtime.threads == 1
    assert done.run.result.notes.grid == 3
    assert [r["file"] for r in done.run.records] == models
    assert done.run.result.notes.lines == ("fixed: 64 of 64 elements keep the seed's value",)  # channel 0
    assert "no surprise adequacy" not in done.run.summary()


def test_run_sources_checks_the_target_against_the_models(tmp_path):
    sources = XploreSources(["a.pt", "b.pt"])
    with pytest.raises(DeepFaultError, match="target must be a model index in 0..1"):
        run_sources(sources, XploreConfig(target=2))
