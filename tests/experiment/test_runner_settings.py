"""RunSettings: the one group of a preset run's settings, and the keyword form beside it."""

from pathlib import Path

import pytest

from deepfault.errors import DeepFaultError
from deepfault.experiment.presets import describe_presets, get_preset
from deepfault.experiment.runner import RunSettings, preset_option


def test_a_preset_checks_the_same_either_way(tmp_path: Path):
    preset = get_preset("digits")
    by_keywords = preset.check_run(tmp_path / "s.sqlite", models_dir=tmp_path / "m", seed=2)
    by_settings = preset.check_run(tmp_path / "s.sqlite", RunSettings(models_dir=tmp_path / "m", seed=2))
    assert by_keywords == by_settings
    assert by_settings.models_dir == tmp_path / "m"
    assert preset.check_run(tmp_path / "s.sqlite").models_dir == tmp_path / "models"


def test_an_unknown_keyword_or_both_forms_are_refused(tmp_path: Path):
    preset = get_preset("digits")
    with pytest.raises(TypeError, match="unexpected keyword argument 'model_dir'"):
        preset.check_run(tmp_path / "s.sqlite", model_dir=tmp_path / "m")
    with pytest.raises(TypeError, match="not both"):
        preset.run(tmp_path / "s.sqlite", RunSettings(), seed=1)
    assert not (tmp_path / "s.sqlite").exists()


def test_a_store_that_is_a_folder_or_a_models_folder_that_is_a_file_is_refused(tmp_path: Path):
    preset = get_preset("digits")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DeepFaultError, match=r"--store '.*' is a directory; give a file name"):
        preset.check_run(tmp_path)
    with pytest.raises(DeepFaultError, match=r"--models-dir '.*file' is a file; give a folder"):
        preset.check_run(tmp_path / "s.sqlite", models_dir=str(tmp_path / "file"))


def test_the_presets_described_in_one_line_each():
    text = describe_presets()
    assert text.count("; digits: ") + text.startswith("digits: ") == 1
    assert f"{get_preset('digits').description}" in text


def test_a_preset_option_is_read_as_typed():
    assert preset_option(" epochs = 3 ") == ("epochs", "3")
    assert preset_option("a=b=c") == ("a", "b=c")
    for bad in ("epochs", "=3"):
        with pytest.raises(DeepFaultError, match="expected KEY=VALUE"):
            preset_option(bad)
