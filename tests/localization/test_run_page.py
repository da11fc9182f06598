"""``deepfault run --report DIR`` leads with the answer (issue 27): the suspicious neurons with
their scores, all k of each class, the neurons that recur across classes and the flipped inputs
come before the comparison with the random baseline; the counts equal naive loops over the run
(tiny seeded models, no data files, except the CLI check on the embedded digits).
"""

from __future__ import annotations

from html import unescape
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

from deepfault.cli import main
from deepfault.core.batches import predict
from deepfault.data import Dataset
from deepfault.experiment.report import write_page
from deepfault.localization.protocol import RunConfig, run_deepfault
from deepfault.localization.report import (
    BaselineComparison,
    chance_recurrence,
    flip_counts,
    recurring_neurons,
    run_page,
)
from helpers.tiny_models import chain_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Page(HTMLParser):
    """The ``<h2 id>`` order and every table's rows of cell texts, in page order."""

    def __init__(self):
        super().__init__()
        self.order: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._section = ""
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._seen_table = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "h2":
            self._section = attrs.get("id") or ""
            self.order.append(self._section)
            self._seen_table = False
        elif tag == "table" and self._section and not self._seen_table:
            self._seen_table = True
            self.tables[self._section] = []
        elif tag == "tr" and self._section in self.tables:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._section].append(self._row)
            self._row = None
        elif tag == "main":
            self._section = ""

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _data(model, n_test=90, seed=0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    x_train, x_test = torch.rand(30, 4, generator=g), torch.rand(n_test, 4, generator=g)
    y_train, y_test = (predict(model, x).argmax(1).numpy() for x in (x_train, x_test))
    y_test[::5] = (y_test[::5] + 1) % 3  # a few failing inputs in every class
    return Dataset("tiny", x_train.numpy(), y_train, x_test.numpy(), y_test, (0.0, 1.0), ("a", "b", "c"))


@pytest.fixture(scope="module")
def run():
    torch.set_num_threads(1)
    model = chain_model(seed=3).eval()
    data = _data(model)
    config = RunConfig(measure="ochiai", k=4, classes=(0, 1, 2), seed=0, distance=0.3)
    result = run_deepfault(model, data, config)
    baseline = run_deepfault(model, data, RunConfig(measure="random", k=4, classes=(0, 1, 2), seed=0,
                                                    distance=0.3))
    return result, baseline, data


def test_flip_counts_equal_a_naive_loop(run):
    result, _, _ = run
    flips = flip_counts(result)
    total = inputs = 0
    for cr in result.classes:
        f = n = 0
        for rep in cr.repetitions:
            for before, after in zip(rep.evaluation.pred_original, rep.evaluation.pred_synthesized,
                                     strict=True):
                f += int(before != after)
                n += 1
        assert flips[cr.target_class] == (f, n)
        total, inputs = total + f, inputs + n
    assert flips["all"] == (total, inputs)
    assert 0 < total < inputs  # the tiny run flips some inputs and not all: the count means something


def test_recurring_neurons_equal_a_naive_count(run):
    result, _, _ = run
    naive: dict[tuple[str, int], list[int]] = {}
    for cr in result.classes:
        if cr.spectrum.num_failed == 0:
            continue
        for rep in cr.repetitions:
            for n in rep.selection.neurons:
                tied = rep.selection.runner_up is not None and n.score <= rep.selection.runner_up
                if tied:  # in the top-k by index order alone: no recurrence counted
                    continue
                classes = naive.setdefault((n.layer, n.unit), [])
                if cr.target_class not in classes:
                    classes.append(cr.target_class)
    expected = {key: tuple(sorted(cs)) for key, cs in naive.items() if len(cs) >= 2}
    got = recurring_neurons(result)
    assert {(layer, unit): cs for layer, unit, cs in got} == expected
    # This tiny net's top-4 all tie at the best score with neurons left out (Ochiai 1.0): the
    # tie-breaking order alone, so no recurrence is counted (test_activity.py counts real ones).
    assert not expected
    counts = [len(cs) for _, _, cs in got]
    assert counts == sorted(counts, reverse=True)  # the most classes first


def test_chance_recurrence_equals_a_simulation():
    rng = np.random.default_rng(0)
    m, k, c, trials = 15, 4, 3, 20000
    # each trial: every class draws k of the m neurons without replacement (the first k of a shuffle)
    drawn = np.argsort(rng.random((trials, c, m)), axis=2)[:, :, :k]
    times = np.zeros((trials, m), int)
    for j in range(c):
        np.add.at(times, (np.arange(trials)[:, None], drawn[:, j]), 1)
    at_least_2 = int((times >= 2).sum())
    assert chance_recurrence(m, k, c, 2) == pytest.approx(at_least_2 / trials, rel=0.03)
    assert chance_recurrence(m, k, c, 1) == pytest.approx(m * (1 - (1 - k / m) ** c))
    assert chance_recurrence(m, k, c, c + 1) == 0


def test_the_page_leads_with_the_neurons_and_the_baseline_follows(run, tmp_path):
    result, baseline, data = run
    html = write_page(tmp_path / "rep", lambda folder: run_page(
        result, data, folder, model_name="tiny", comparison=BaselineComparison(baseline, 2.0, 1.5),
        grid_rows=1)).read_text(encoding="utf-8")
    page = parse(html)
    assert page.order[:2] == ["neurons", "recurring"]
    assert page.order.index("inputs") < page.order.index("baseline") < page.order.index("distances")
    # the first table: a row per class with all k neurons and their scores, then the total
    rows = page.tables["neurons"][1:]
    assert [r[0] for r in rows] == ["0 (a)", "1 (b)", "2 (c)", "all classes"]
    recurring = {(layer, unit): cs for layer, unit, cs in recurring_neurons(result)}
    flips = flip_counts(result)
    for row, cr in zip(rows, result.classes, strict=False):
        neurons = cr.repetitions[0].selection.neurons
        assert len(neurons) == result.config.k
        for cell, n in zip(row[3:], neurons, strict=True):
            name, score = cell.split("\n")
            times = len(recurring.get((n.layer, n.unit), ()))
            assert name == f"{n.layer}[{n.unit}]" + (f"\u00a0×{times}" if times else "")
            assert float(score) == pytest.approx(n.score, abs=5e-4)
        f, total = flips[cr.target_class]
        assert row[2].split("\n")[0] == f"{f}\u00a0of\u00a0{total}"
    assert rows[-1][2].split("\n")[0] == f"{flips['all'][0]}\u00a0of\u00a0{flips['all'][1]}"
    assert "..." not in html.split("id='recurring'")[0]
    # the recurrence table: neuron, classes, which
    table = page.tables.get("recurring", [[]])[1:]  # none: every top-k ties (no recurrence counted)
    assert [(r[0], int(r[1].split(" of ")[0])) for r in table] == [
        (f"{layer}[{unit}]", len(cs)) for layer, unit, cs in recurring_neurons(result)]
    # the verdict counts the flips; the baseline says what it cost
    text = unescape(html).replace("\u00a0", " ")
    assert f"{flips['all'][0]} of {flips['all'][1]} synthesized inputs" in text.split('id="recurring"')[0]
    assert "The baseline cost 1.5 s, beside the run's 2.0 s" in text


def test_a_page_without_a_baseline_says_why(run, tmp_path):
    result, _, data = run
    with pytest.warns(FutureWarning, match="comparison=BaselineComparison"):  # the old keyword form
        html = write_page(tmp_path / "rep", lambda folder: run_page(
            result, data, folder, model_name="tiny", no_baseline="No random baseline: --no-baseline.",
            grid_rows=0)
        ).read_text(encoding="utf-8")
    assert "No random baseline: --no-baseline." in html
    assert parse(html).order[0] == "neurons"


def test_cli_says_what_the_baseline_cost_and_no_baseline_skips_it(tmp_path, capsys, monkeypatch):
    import deepfault.experiment.figures as figures

    monkeypatch.setattr(figures, "difference_grid", lambda *a, **k: None)  # the slow grid: tested elsewhere
    common = ["run", "--class", "0,1", "--inputs", "4", "-k", "3", "--out", "-", "--no-save-inputs",
              "--no-progress", "--no-surprise", "--threads", "1"]
    assert main([*common, "--report", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    took = out.index("--report: the random baseline (the same run from random neurons) took")
    assert out.index("evaluation of synthesized inputs") < took
    page = (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    assert "The baseline cost" in page
    assert "random accuracy" in page
    assert main([*common, "--report", str(tmp_path / "b"), "--no-baseline"]) == 0
    out = capsys.readouterr().out
    assert "random baseline" not in out
    assert "baseline took" not in out
    page = (tmp_path / "b" / "report.html").read_text(encoding="utf-8")
    assert "--no-baseline" in page
    assert "random accuracy" in page
    assert "The baseline cost" not in page
