"""difference_grid: the captions as one GridCaptions, and the old keywords beside it."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from deepfault.experiment.figures import GridCaptions, difference_grid  # noqa: E402


def _pairs():
    before = np.zeros((3, 1, 4, 4))
    after = before.copy()
    after[:, 0, 1, 1] = 0.5
    return before, after


def test_the_grid_is_written_with_captions_and_refuses_what_it_cannot_draw(tmp_path):
    before, after = _pairs()
    captions = GridCaptions(before=["a", "b", "c"], after=["x", "y", "z"], highlight=[True, False, True],
                            labels=("seed", "fault"))
    path = difference_grid(before, after, tmp_path / "g.png", captions=captions, columns=2, title="t")
    assert path == tmp_path / "g.png"
    assert path.stat().st_size > 0
    assert difference_grid(before[:0], after[:0], tmp_path / "none.png") is None
    assert difference_grid(np.zeros((2, 10)), np.zeros((2, 10)), tmp_path / "v.png") is None


def test_the_old_keywords_warn_and_unknown_ones_are_refused(tmp_path):
    before, after = _pairs()
    with pytest.warns(FutureWarning, match="captions=GridCaptions"):
        assert difference_grid(before, after, tmp_path / "old.png", before_titles=["a"], labels=("s", "f"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'titles'"):
        difference_grid(before, after, tmp_path / "bad.png", titles=["a"])
    with pytest.raises(TypeError, match="not both"):
        difference_grid(before, after, tmp_path / "bad.png", captions=GridCaptions(), highlight=[True])
