"""The report: tables against hand-computed values, escaping, self-containment, errors."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from deepfault.errors import DeepFaultError
from deepfault.experiment.report import write_report
from deepfault.experiment.store import ResultStore
from deepfault.localization.results import Cell, CellKey, write_cell

MODELS = ["m1", "<b>m</b>"]
CLASSES = [0, 1]
KS = [1, 2]
MEASURES = ["tarantula", "ochiai", "dstar"]
REPS = 2
N = 5  # inputs per cell
LAYERS = [{"name": "fc1", "size": 4, "depth": 0}, {"name": "fc2", "size": 4, "depth": 1}]


def _keys():
    for model in MODELS:
        for cls in CLASSES:
            for k in KS:
                for approach in MEASURES:
                    yield CellKey(model, cls, approach, k, 0)
                for rep in range(REPS):
                    yield CellKey(model, cls, "random", k, rep)


def _cell(key: CellKey, rng: np.random.Generator) -> Cell:
    # Measures make the model worse than random, so that some tests are significant.
    worse = key.approach != "random"
    loss = rng.uniform(2, 5, N) if worse else rng.uniform(0, 2.5, N)
    correct = rng.random(N) < (0.2 if worse else 0.8)
    originals = rng.uniform(0, 1, (2, 1, 8, 8)).astype(np.float32)
    synthesized = np.clip(originals + rng.uniform(-0.1, 0.1, originals.shape), 0, 1).astype(np.float32)
    kps = [kp for kp in KS if kp > key.k]
    return Cell(
        key=key, seed=int(rng.integers(1 << 30)),
        neurons=[{"layer": "fc2", "unit": u, "index": 4 + u, "score": 1.0, "as": 1, "af": 2, "ns": 3,
                  "nf": 4} for u in range(key.k)],
        layer_distribution={"fc2": key.k} if worse else {"fc1": 1, "fc2": key.k - 1},
        layers=LAYERS, num_passed=8, num_failed=2, spectrum_seconds=0.5,
        synthesis_seconds=0.01 * N, input_indices=list(range(N)),
        loss=loss.tolist(), correct=correct.tolist(),
        pred_original=[key.cls] * N,
        pred_synthesized=[key.cls if c else 1 - key.cls for c in correct],
        l1=rng.uniform(1, 3, N).tolist(), l2=rng.uniform(0.2, 0.5, N).tolist(),
        linf=[0.1] * N, increased=rng.uniform(0.5, 1, N).tolist(),
        increased_at={str(kp): rng.uniform(0, 1, N).tolist() for kp in kps} if worse else {},
        examples={"originals": originals, "synthesized": synthesized},
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "results.sqlite"
    rng = np.random.default_rng(0)
    config = {
        "name": "toy", "dataset": "toy8x8", "bounds": [0.0, 1.0], "class_names": ["zero", "one"],
        "models": [{"name": m, "arch": "mlp"} for m in MODELS], "approaches": [*MEASURES, "random"],
        "ks": KS, "inputs_per_class": N, "random_repetitions": REPS, "step": 1.0, "distance": 0.1,
        "star": 3.0, "seed": 0, "normalize": True, "threshold": 0.0,
    }
    cells = [_cell(key, rng) for key in _keys()]
    with ResultStore(path) as s:
        s.begin("abc123", "toy", config, {"deepfault": "test", "python": "3"})
        for cell in cells:
            write_cell(s, "abc123", cell)
    return path, cells


@pytest.fixture(scope="module")
def report(store, tmp_path_factory):
    """One report of the store, shared by the tests that only read it."""
    return write_report(store[0], tmp_path_factory.mktemp("report"))


def _read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _pooled(cells, model, k, approach, attr):
    return [v for c in cells if (c.key.model, c.key.k, c.key.approach) == (model, k, approach)
            for v in getattr(c, attr)]


def test_files_exist(report):
    paths = report
    assert paths.config_hash == "abc123"
    assert paths.html.is_file()
    assert paths.tables_md.is_file()
    names = {"table3_loss_accuracy", "table4_distances", "table5_increase", "table6_increase_kprime",
             "table8_significance", "table10_timing", "summary_accuracy_vs_random"}
    assert set(paths.tables) == names == set(paths.csvs)
    for p in [*paths.tables.values(), *paths.csvs.values(), *paths.figures.values()]:
        assert p.is_file()
        assert p.stat().st_size > 0
    assert {"fig3_layers_m1", "fig3_layers_b_m_b", "fig4_examples"} == set(paths.figures)
    assert paths.figures["fig4_examples"].read_bytes()[:4] == b"\x89PNG"


def test_table3_means(store, report):
    _, cells = store
    paths = report
    rows = _read_csv(paths.csvs["table3_loss_accuracy"])
    assert len(rows) == len(MODELS) * len(KS) * (len(MEASURES) + 1)
    for row in rows:
        model, k, a = row["model"], int(row["k"]), row["approach"]
        loss = _pooled(cells, model, k, a, "loss")
        correct = _pooled(cells, model, k, a, "correct")
        assert int(row["inputs"]) == len(loss) == len(CLASSES) * N * (REPS if a == "random" else 1)
        assert float(row["loss"]) == pytest.approx(sum(loss) / len(loss), abs=1e-12)
        assert float(row["accuracy"]) == pytest.approx(sum(correct) / len(correct), abs=1e-12)
    # The markdown bolds the highest loss of each model and k.
    md = paths.tables["table3_loss_accuracy"].read_text()
    m1_k1 = {a: sum(_pooled(cells, "m1", 1, a, "loss")) / (len(CLASSES) * N * (REPS if a == "random" else 1))
             for a in [*MEASURES, "random"]}
    best = max(m1_k1.values())
    assert f"**{best:.2f}**" in md


def test_significance_matches_scipy(store, report):
    _, cells = store
    rows = _read_csv(report.csvs["table8_significance"])
    pairs = {(r["model"], int(r["k"]), r["approach"], r["versus"], r["metric"]): r for r in rows}
    # each measure vs random, and the measures pairwise in both directions, on two metrics
    assert len(pairs) == len(MODELS) * len(KS) * (len(MEASURES) * len(MEASURES)) * 2
    for (model, k, a, b, metric), row in pairs.items():
        x = np.asarray(_pooled(cells, model, k, a, metric), dtype=float)
        y = np.asarray(_pooled(cells, model, k, b, metric), dtype=float)
        alternative = "greater" if metric == "loss" else "less"
        if np.ptp(np.concatenate([x, y])) == 0:
            expected = 1.0
        else:
            expected = mannwhitneyu(x, y, alternative=alternative).pvalue
        assert float(row["p_value"]) == pytest.approx(expected, rel=1e-12)
        assert row["significant"] == str(expected < 0.05)
    summary = _read_csv(report.csvs["summary_accuracy_vs_random"])
    for row in summary:
        assert float(row["p_value"]) == float(pairs[(row["model"], int(row["k"]), row["approach"],
                                                     "random", "correct")]["p_value"])


def test_html_is_escaped_and_self_contained(report):
    html = report.html.read_text(encoding="utf-8")
    assert "<b>m</b>" not in html
    assert "&lt;b&gt;m&lt;/b&gt;" in html
    srcs = re.findall(r'src="([^"]*)"', html)
    assert len(srcs) == 3
    assert all(s.startswith("data:image/png;base64,") for s in srcs)
    text = re.sub(r'src="data:image/png;base64,[A-Za-z0-9+/=]*"', "", html)
    assert not re.search(r"(https?:|ftp:)?//[a-z0-9]", text, flags=re.IGNORECASE)
    assert not re.search(r"<(link|script|iframe|object|embed)\b|url\(|@import", text, flags=re.IGNORECASE)
    links = re.findall(r'href="([^"]*)"', text)
    assert links
    assert all(h.startswith("#") for h in links)


def test_unknown_hash_lists_available(store, tmp_path):
    path, _ = store
    with pytest.raises(DeepFaultError, match="abc123 \\(toy"):
        write_report(path, tmp_path / "out", config_hash="nope")


def test_missing_or_empty_store(tmp_path):
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(DeepFaultError, match="does not exist"):
        write_report(missing, tmp_path / "out")
    assert not missing.exists()
    empty = tmp_path / "empty.sqlite"
    ResultStore(empty).close()
    with pytest.raises(DeepFaultError, match="no experiment"):
        write_report(empty, tmp_path / "out")


def test_import_does_not_load_plotting():
    import subprocess
    import sys

    code = ("import sys, deepfault, deepfault.experiment.report; "
            "print(any(m.split('.')[0] in ('matplotlib', 'jinja2') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_report_is_written_whole_or_not_at_all(store, tmp_path, monkeypatch):
    import deepfault.localization.report as report

    path, _ = store
    out = tmp_path / "rep"
    first = write_report(path, out)
    assert first.html == out / "report.html"
    assert first.html.is_file()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "fig4_examples", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_report(path, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no partial folder left
    assert (out / "report.html").read_bytes() == first.html.read_bytes()
    monkeypatch.undo()
    (tmp_path / "file").write_text("x")
    with pytest.raises(DeepFaultError, match="is an existing file"):
        write_report(path, tmp_path / "file")
