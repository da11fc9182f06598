"""Which model agrees with the true label on each difference-inducing input, and the SSIM of
each input to its seed (mean and share below the threshold), against naive loops."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deepfault.data import Dataset
from deepfault.errors import DeepFaultError
from deepfault.experiment.report import write_page
from deepfault.xplore import XploreConfig, load_inputs, save_inputs, search, xplore
from deepfault.xplore.report import agreement_table, inputs_table, run_page, summary_text
from deepfault.xplore.results import VISIBLE_CHANGE_SSIM, add_labels, input_ssim, measure_realism
from helpers.xplore_models import conv

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore:.*hardly images:UserWarning")]

NAMES = ["a", "b", "c"]


def naive_ssim(a: np.ndarray, b: np.ndarray, data_range: float) -> float:
    """SSIM of two ``(C, H, W)`` images straight from Wang et al. (2004): a Gaussian window
    (sigma 1.5, 11 taps or the largest odd number that fits), over every 'valid' position."""
    _, h, w = a.shape
    taps = min(11, h, w)
    taps -= 1 - taps % 2
    t = np.arange(taps) - (taps - 1) / 2
    g = np.exp(-(t**2) / (2 * 1.5**2))
    win = np.outer(g, g) / g.sum() ** 2
    c1, c2 = 0.01**2, 0.03**2
    values = []
    for c in range(a.shape[0]):
        x, y = a[c] / data_range, b[c] / data_range
        for i in range(h - taps + 1):
            for j in range(w - taps + 1):
                px, py = x[i:i + taps, j:j + taps], y[i:i + taps, j:j + taps]
                mx, my = (win * px).sum(), (win * py).sum()
                vx, vy = (win * px * px).sum() - mx * mx, (win * py * py).sum() - my * my
                cov = (win * px * py).sum() - mx * my
                num = (2 * mx * my + c1) * (2 * cov + c2)
                values.append(num / ((mx * mx + my * my + c1) * (vx + vy + c2)))
    return float(np.mean(values))


@pytest.fixture(scope="module")
def run():
    rng = np.random.default_rng(0)
    pool = rng.uniform(0, 1, (40, 1, 6, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 40)  # random true labels: some inputs have no model right
    models = [conv(0.0), conv(0.02), conv(-0.02)]
    config = XploreConfig(seeds=32, step_size=0.3, iterations=12, lambda1=2, lambda2=0.5)
    result = xplore(models, pool, config=config, bounds=(0.0, 1.0), names=NAMES, labels=labels)
    assert result.num_found > 5
    return models, pool, labels, config, result


def test_true_labels_and_agreement_equal_a_naive_loop(run):
    _, _, labels, _, result = run
    f = result.found
    assert result.true_labels.tolist() == [int(labels[s]) for s in f.seed_index]
    agrees = result.agreement()
    for i in range(len(f)):
        for j in range(len(NAMES)):
            assert agrees[i, j] == (int(f.predictions[i, j]) == int(labels[f.seed_index[i]]))
    summary = result.agreement_summary()
    for j, m in enumerate(summary["models"]):
        count = sum(int(f.predictions[i, j]) == int(labels[f.seed_index[i]]) for i in range(len(f)))
        assert (m["model"], m["agrees"]) == (NAMES[j], count)
        assert m["share"] == pytest.approx(count / len(f))
    none = sum(all(int(p) != int(labels[s]) for p in row) for row, s in zip(f.predictions, f.seed_index,
                                                                            strict=True))
    assert summary["none"] == none
    assert 0 < none < len(f)  # both cases occur
    doc = result.to_dict()
    json.dumps(doc, allow_nan=False)
    assert doc["true_label_agreement"] == summary


def test_the_tables_show_each_inputs_true_label_and_who_agrees(run):
    _, _, labels, _, result = run
    f = result.found
    table = inputs_table(result, NAMES)
    assert len(table.rows) == len(f)
    for i, cells in enumerate(table.rows):
        row = list(cells)
        truth = int(labels[f.seed_index[i]])
        assert row[:3] == [i, int(f.seed_index[i]), str(truth)]
        assert row[4:4 + len(NAMES)] == [str(int(p)) for p in f.predictions[i]]
        right = [n for n, p in zip(NAMES, f.predictions[i], strict=True) if int(p) == truth]
        assert row[4 + len(NAMES)] == (", ".join(right) or "none")
        assert float(row[-1]) == pytest.approx(naive_ssim(f.inputs[i], f.seeds[i], 1.0), abs=0.0051)
    assert len(inputs_table(result, NAMES, rows=3).rows) == 3
    agree = agreement_table(result, NAMES)
    assert [r[0] for r in agree.rows] == [*NAMES, "none of them"]
    text = summary_text(result, NAMES, _Data(), "cpu", rows=4)
    assert "Which model is right on the" in text
    assert f"Difference-inducing inputs (first 4 of {len(f)})" in text
    assert "realism: mean SSIM to the seed" in text


def test_ssim_mean_and_share_equal_a_naive_loop(run):
    _, _, _, _, result = run
    f = result.found
    naive = np.array([naive_ssim(np.clip(x, 0, 1), s, 1.0) for x, s in zip(f.inputs, f.seeds, strict=True)])
    np.testing.assert_allclose(input_ssim(f.inputs, f.seeds, (0.0, 1.0)), naive, atol=1e-5)
    r = result.realism
    assert r.mean_ssim == pytest.approx(naive.mean(), abs=1e-5)
    assert r.ssim_threshold == VISIBLE_CHANGE_SSIM
    if np.min(np.abs(naive - VISIBLE_CHANGE_SSIM)) > 1e-4:
        assert r.low_ssim == pytest.approx(np.mean(naive < VISIBLE_CHANGE_SSIM))
    ordered = np.sort(naive)
    mid = len(ordered) // 2
    threshold = float(ordered[mid - 1] + ordered[mid]) / 2  # between two values: no rounding tie
    again = measure_realism(f.inputs, f.seeds, (0.0, 1.0), ssim_threshold=threshold)
    assert again.low_ssim == pytest.approx(np.mean(naive < threshold))
    assert 0 < again.low_ssim < 1


def test_ssim_reads_channels_last_and_skips_non_images():
    rng = np.random.default_rng(1)
    x, s = rng.uniform(0, 1, (5, 1, 7, 7)), rng.uniform(0, 1, (5, 1, 7, 7))
    first = input_ssim(x, s, (0.0, 1.0))
    last = input_ssim(x.transpose(0, 2, 3, 1), s.transpose(0, 2, 3, 1), (0.0, 1.0))
    np.testing.assert_allclose(last, first)
    np.testing.assert_allclose(first, [naive_ssim(a, b, 1.0) for a, b in zip(x, s, strict=True)], atol=1e-5)
    assert input_ssim(x.reshape(5, -1), s.reshape(5, -1), (0.0, 1.0)) is None
    r = measure_realism(x.reshape(5, -1), s.reshape(5, -1), (0.0, 1.0))
    assert (r.mean_ssim, r.low_ssim) == (None, None)
    assert measure_realism(s, s, (0.0, 1.0)).mean_ssim == pytest.approx(1.0)


def test_noise_that_does_not_saturate_counts_as_far():
    """The issue's case: noise that keeps the seed's contrast reads 0% saturated, but SSIM sees it."""
    rng = np.random.default_rng(2)
    seeds = np.zeros((20, 1, 28, 28), np.float32)
    seeds[:, :, 5:23, 12:16] = 1.0  # a bar: a "1"
    noisy = np.clip(seeds + rng.normal(0, 0.3, seeds.shape), 0, 1).astype(np.float32)
    r = measure_realism(noisy, seeds, (0.0, 1.0))
    assert r.mean_linf > 0.9
    assert r.saturated == 0.0
    assert r.low_ssim == 1.0


def test_labels_given_later_and_errors(run):
    models, pool, labels, config, result = run
    plain = xplore(models, pool, config=config, bounds=(0.0, 1.0), names=NAMES)
    assert plain.true_labels is None
    assert plain.agreement() is None
    assert "true_label_agreement" not in plain.to_dict()
    assert inputs_table(plain, NAMES) is None
    assert np.array_equal(add_labels(plain, labels).true_labels, result.true_labels)
    with pytest.raises(DeepFaultError, match="one label per input of the pool"):
        add_labels(plain, labels[:3])
    with pytest.raises(DeepFaultError, match=r"labels must be one integer label per seed, shape \(5,\)"):
        search(models, pool[:5], labels=np.zeros(4, int))


def test_saved_inputs_carry_the_true_label(run, tmp_path):
    *_, result = run
    save_inputs(tmp_path / "x.npz", result)
    assert np.array_equal(load_inputs(tmp_path / "x.npz")["true_label"], result.true_labels)


def test_page_leads_with_who_is_right_and_the_ssim(run, tmp_path):
    _, pool, labels, _, result = run
    data = Dataset("pool", pool, labels, pool, labels, (0.0, 1.0), ("0", "1", "2"))
    path = write_page(tmp_path / "rep", lambda folder: run_page(result, NAMES, data, folder))
    page = path.read_text(encoding="utf-8")
    meta = page[page.index("<p class=\"meta\">"):page.index("</p>", page.index("<p class=\"meta\">"))]
    assert "Agreeing with the true label on them: a " in meta
    assert "Realism: mean SSIM to the seed" in meta
    body = page[page.index("<main>"):]
    assert body.index("Which model is right") < body.index("Found inputs") < body.index("Realism") \
        < body.index("Seeds and difference-inducing inputs")


class _Data:
    name = "pool"
    y_test = np.zeros(40)
    bounds = (0.0, 1.0)
