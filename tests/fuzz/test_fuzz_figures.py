"""The fault grid: a result's fault rows in one record; the old five-argument form warns and draws alike."""

import numpy as np
import pytest


def _rows(n: int, shape: tuple[int, ...]) -> tuple[np.ndarray, dict]:
    rng = np.random.default_rng(0)
    seeds = rng.random((n, *shape), dtype=np.float32)
    labels = np.arange(n) % 3
    faults = {"inputs": np.clip(seeds + 0.1, 0, 1), "label": labels, "m2_pred": (labels + 1) % 3}
    return seeds, faults


@pytest.mark.parametrize("shape", [(1, 8, 8), (6,)])
def test_fault_grid_takes_the_fault_rows_and_the_old_form_warns(tmp_path, shape):
    pytest.importorskip("matplotlib")
    from deepfault.fuzz.figures import fault_grid

    seeds, faults = _rows(4, shape)
    new = fault_grid(seeds, faults, tmp_path / "new.png", class_names=["a", "b", "c"], title="t")
    with pytest.warns(FutureWarning, match="fault_grid"):
        old = fault_grid(seeds, faults["inputs"], faults["label"], faults["m2_pred"], tmp_path / "old.png",
                         class_names=["a", "b", "c"], title="t")
    assert new == tmp_path / "new.png"
    assert old == tmp_path / "old.png"
    assert new.stat().st_size > 0
    assert old.stat().st_size > 0
    with pytest.raises(TypeError, match="positional arguments"):
        fault_grid(seeds, faults["inputs"], faults["label"], tmp_path / "x.png")


def test_fault_grid_without_faults_says_so(tmp_path):
    pytest.importorskip("matplotlib")
    from deepfault.fuzz.figures import fault_grid

    seeds, faults = _rows(0, (1, 8, 8))
    assert fault_grid(seeds, faults, tmp_path / "none.png").is_file()


@pytest.mark.parametrize("shape", [(1, 8, 8), (6,)])
def test_fault_grid_titles_a_label_as_a_label(tmp_path, shape, monkeypatch):
    """A seed's caption names what the number is (its label, by class name), never 'seed: 4'."""
    pytest.importorskip("matplotlib")
    import deepfault.experiment.figures as shared
    from deepfault.fuzz import figures

    seen = []
    monkeypatch.setattr(shared, "difference_grid", lambda *a, captions, **k: seen.extend(captions.before))
    monkeypatch.setattr(figures, "seed_fault_lines", lambda *a, titles, **k: seen.extend(titles))
    seeds, faults = _rows(2, shape)
    figures.fault_grid(seeds, faults, tmp_path / "x.png", class_names=["cat", "dog", "owl"])
    assert seen
    assert all(t.startswith("label ") for t in seen)
    assert not [t for t in seen if "seed:" in t]
    assert seen[1].startswith("label dog")
