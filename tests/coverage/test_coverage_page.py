"""``coverage measure --report DIR`` (issue 27): the criteria explained one line each, the
never-activated neurons listed per layer (equal to a naive loop, the page's list bounded with an
honest "N more", the JSON result complete), and curves that stay apart when two are equal.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from html.parser import HTMLParser

import pytest
import torch
from torch import nn

from deepfault.coverage.figures import _line_style, _same_as
from deepfault.coverage.measure import measure_coverage
from deepfault.coverage.report import CRITERION_LINES, never_activated_table
from deepfault.experiment.report import write_page

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model() -> nn.Sequential:
    """fc1: 40 units, 30 of them dead (weights 0, bias -1: value -1 on every input) and the others
    alive on inputs in [0, 1]^2 (weights 1, bias 0.5); fc2: 3 units, unit 1 dead the same way.
    """
    fc1, fc2, out = nn.Linear(2, 40), nn.Linear(40, 3), nn.Linear(3, 2)
    dead1 = [i for i in range(40) if i % 4 != 1]  # 30 dead, 10 alive
    with torch.no_grad():
        fc1.weight.fill_(1.0)
        fc1.bias.fill_(0.5)
        fc1.weight[dead1] = 0.0
        fc1.bias[dead1] = -1.0
        fc2.weight.fill_(0.1)
        fc2.bias.fill_(0.0)
        fc2.weight[1] = 0.0
        fc2.bias[1] = -2.0
        out.weight.fill_(0.3)
        out.bias.zero_()
    return nn.Sequential(OrderedDict(fc1=fc1, act1=nn.ReLU(), fc2=fc2, act2=nn.ReLU(), out=out)).eval()


def _inputs(n=50):
    return torch.rand(n, 2, generator=torch.Generator().manual_seed(0))


def _naive_dead(model, x) -> dict[str, list[int]]:
    """Neurons whose value (the Linear's output) is never above 0, by a loop over inputs and units."""
    fc1, fc2 = model.fc1, model.fc2
    out: dict[str, list[int]] = {}
    with torch.no_grad():
        for name, layer, before in (("fc1", fc1, lambda v: v), ("fc2", fc2, lambda v: torch.relu(fc1(v)))):
            dead = []
            for unit in range(layer.out_features):
                if not any(float(layer(before(x[i : i + 1]))[0, unit]) > 0 for i in range(len(x))):
                    dead.append(unit)
            out[name] = dead
    return out


def test_never_activated_equals_a_naive_loop_and_the_json_lists_them_all():
    model, x = _model(), _inputs()
    report = measure_coverage(model, x, criteria="nc,tknc", layers=["fc1", "fc2"], batch_size=7)
    expected = _naive_dead(model, x)
    assert report.never_activated() == expected
    assert len(expected["fc1"]) == 30
    assert expected["fc2"] == [1]
    # NC at t = 0 leaves exactly these neurons uncovered
    nc = report.result("nc")
    assert nc.total - nc.covered == 31
    body = report.to_dict()["never_activated"]
    assert body["count"] == 31
    assert body["per_layer"]["fc1"] == {"count": 30, "size": 40, "units": expected["fc1"]}
    json.dumps(body)  # plain JSON
    # the result does not depend on the batch size
    assert measure_coverage(model, x, criteria="nc", layers=["fc1", "fc2"], batch_size=50).never_activated() \
        == expected


def test_the_page_lists_a_bounded_number_and_says_honestly_how_many_more():
    model, x = _model(), _inputs()
    report = measure_coverage(model, x, criteria="nc", layers=["fc1", "fc2"])
    table = never_activated_table(report, shown=24)
    fc1 = next(r for r in table.rows if r[0] == "fc1")
    dead = report.never_activated()["fc1"]
    assert fc1[2].startswith("30 ")
    assert fc1[3] == ", ".join(map(str, dead[:24])) + " and 6 more"
    short = never_activated_table(report, shown=100)
    assert next(r for r in short.rows if r[0] == "fc1")[3] == ", ".join(map(str, dead))
    assert table.rows[-1][:3] == ("all", 43, "31 (72.1%)")


def test_a_report_without_neuron_values_has_no_list():
    # no neuron captured (surprise coverage alone): never_activated is None and the JSON says so
    from deepfault.coverage.results import CoverageReport

    report = measure_coverage(_model(), _inputs(), criteria="nc", layers=["fc1"])
    bare = CoverageReport(results=report.results, layout=report.layout, transform="raw", num_inputs=50)
    assert bare.never_activated() is None
    assert bare.to_dict()["never_activated"] is None
    assert never_activated_table(bare) is None


class _Sections(HTMLParser):
    def __init__(self):
        super().__init__()
        self.order: list[str] = []
        self.items: list[str] = []
        self._li: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self.order.append(dict(attrs).get("id") or "")
        elif tag == "li" and self.order:
            self._li = []

    def handle_endtag(self, tag):
        if tag == "li" and self._li is not None:
            self.items.append("".join(self._li))
            self._li = None

    def handle_data(self, data):
        if self._li is not None:
            self._li.append(data)


def test_the_page_explains_each_criterion_and_lists_dead_neurons_before_the_details(tmp_path):
    from deepfault.coverage.report import measure_page

    report = measure_coverage(_model(), _inputs(), criteria="nc,nac,tknc", threshold=[0, 0.5],
                              layers=["fc1", "fc2"])
    html = write_page(tmp_path / "rep", lambda folder: measure_page(
        report, folder, model_name="tiny", data_name="rand")).read_text(encoding="utf-8")
    page = _Sections()
    page.feed(html)
    assert page.order[:3] == ["summary", "never-activated", "layers"]
    assert page.order.index("layers") < page.order.index("figure-growth")
    # one line per measured criterion, each once, in the summary before the dead neurons
    lines = [i for i in page.items if i.split(":")[0] in ("nc", "nac", "tknc")]
    assert [i.split(":")[0] for i in lines] == ["nc", "nac", "tknc"]
    assert all(i == f"{n}: {CRITERION_LINES[n]}" for i, n in zip(lines, ("nc", "nac", "tknc"), strict=True))
    assert html.index("<ul class='criteria'>") < html.index("id='never-activated'")
    assert "31 of the 43 neurons (72.1%) are never activated by these 50 inputs: fc1 (30), fc2 (1)." in html


def test_equal_curves_are_named_and_every_line_looks_different():
    looks = [(_line_style(i)["color"], _line_style(i)["marker"]) for i in range(90)]
    assert len(set(looks)) == 90  # colour and marker together tell any two of 90 lines apart
    assert all(_line_style(i)["markerfacecolor"] == "none" for i in range(3))  # hollow: overlaps show
    same = _same_as({"nc(threshold=0)": [(1, 0.5), (2, 0.7)], "nac(threshold=0)": [(1, 0.5), (2, 0.7)],
                     "tknc(top_k=1)": [(1, 0.2), (2, 0.3)]})
    assert same == {"nac(threshold=0)": "nc(threshold=0)"}
