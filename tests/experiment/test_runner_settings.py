"""RunSettings: the one group of a preset run's settings, and the keyword form beside it."""

from pathlib import Path

import pytest

from deepfault.experiment.runner import RunSettings


def test_the_keyword_form_makes_the_same_settings():
    given = RunSettings(models_dir="m", seed=3, options={"a": "1"})
    assert RunSettings.of(None, {"models_dir": "m", "seed": 3, "options": {"a": "1"}}) == given
    assert RunSettings.of(given, {}) is given
    assert RunSettings.of(None, {}) == RunSettings()


def test_an_unknown_keyword_or_both_forms_are_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'model_dir'"):
        RunSettings.of(None, {"model_dir": "m"})
    with pytest.raises(TypeError, match="not both"):
        RunSettings.of(RunSettings(), {"seed": 1})


def test_a_preset_checks_the_same_either_way(tmp_path: Path):
    from deepfault.experiment.presets import get_preset

    preset = get_preset("digits")
    by_keywords = preset.check_run(tmp_path / "s.sqlite", models_dir=tmp_path / "m", seed=2)
    by_settings = preset.check_run(tmp_path / "s.sqlite", RunSettings(models_dir=tmp_path / "m", seed=2))
    assert by_keywords == by_settings
