"""Results print short reprs with a summary() and plain-dict exports; entry points take threads=
and progress= as the command line does (issue 27).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from torch import nn

import deepfault as df
from deepfault.xplore import XploreConfig
from helpers.tiny_models import chain_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(n=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def _repair_file(tmp_path, x, y):
    seeds = np.arange(6)
    path = tmp_path / "run.npz"
    np.savez(path, synthesized=np.clip(x.numpy()[seeds] + 0.01, 0, 1), originals=x.numpy()[seeds],
             labels=y.numpy()[seeds], test_index=seeds, pred_original=np.zeros(6, int),
             pred_synthesized=np.zeros(6, int), target_class=y.numpy()[seeds], repetition=np.zeros(6, int))
    return path


def _results(tmp_path):
    x, y = _data()
    m, m2 = chain_model(), chain_model(seed=1)
    return {
        "run": df.run_deepfault(m, (x, y), df.RunConfig(k=2, classes=(0, 1))),
        "coverage": df.measure_coverage(m, x, criteria="nc,tknc"),
        "rank": df.rank_inputs(m, x, y, by="gini,margin"),
        "xplore": df.xplore([m, m2], x, config=XploreConfig(seeds=4, iterations=2), bounds=(0.0, 1.0)),
        "regress": df.regress(m, m2, dataset=(x, y), budget="12it", inputs_per_step=4, fidelity="linf:0.3"),
        "repair": df.repair(m, _repair_file(tmp_path, x, y), dataset=(x, y), epochs=1, baselines=(), mix=4),
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _results(tmp_path_factory.mktemp("results"))


@pytest.mark.parametrize("name", ["run", "coverage", "rank", "xplore", "regress", "repair"])
def test_a_result_prints_one_short_line_and_a_summary(results, name):
    r = results[name]
    text = repr(r)
    assert "\n" not in text
    assert len(text) < 300
    assert "array(" not in text
    assert text.startswith(f"<{type(r).__name__}: ")
    summary = r.summary()
    assert isinstance(summary, str)
    assert 2 <= len(summary.splitlines()) < 40


@pytest.mark.parametrize("name", ["run", "coverage", "rank", "xplore", "regress", "repair"])
def test_a_result_exports_plain_values(results, name):
    r = results[name]
    json.dumps(r.to_dict(), default=str)
    rows = r.rows()
    assert rows
    assert all(isinstance(row, dict) for row in rows)
    json.dumps(rows)
    try:
        import pandas  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(ModuleNotFoundError, match="pip install pandas"):
            r.to_frame()
    else:
        assert len(r.to_frame()) == len(rows)


def test_the_run_summary_leads_with_scored_neurons(results):
    r = results["run"]
    failing = next(c for c in r.classes if not c.no_failures)
    first = failing.repetitions[0].selection.neurons[0]
    assert f"{first.layer}[{first.unit}] {first.score:.3g}" in r.summary()


class _Threads(nn.Module):
    """Records the thread count PyTorch uses while the model runs."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(torch.get_num_threads())
        return self.fc(x)


def test_threads_apply_for_the_call_and_are_restored():
    model, (x, _) = _Threads(), _data()
    torch.set_num_threads(1)
    df.predict(model, x, threads=2)
    assert model.seen[-1] == 2
    assert torch.get_num_threads() == 1


def test_auto_follows_the_clis_rule(monkeypatch):
    import deepfault.core.entry as entry

    monkeypatch.setenv("DEEPFAULT_THREADS", "auto")
    monkeypatch.setattr(entry, "auto_threads", lambda models, device: 2)
    monkeypatch.setattr(entry, "_last_auto", [])
    model, (x, _) = _Threads(), _data()
    df.predict(model, x)
    assert model.seen[-1] == 2
    assert torch.get_num_threads() == 1


def test_bad_threads_are_refused():
    with pytest.raises(df.DeepFaultError, match="threads must be a positive count, 'auto' or None"):
        df.predict(chain_model(), _data()[0], threads=0)


def test_progress_shows_the_clis_lines(caplog):
    x, _ = _data()
    with caplog.at_level(logging.INFO, logger="deepfault.progress"):
        df.measure_coverage(chain_model(), x, criteria="nc", progress=True)
        df.compute_spectrum(chain_model(), *_data(), progress=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "deepfault.progress"]
    assert any(line.startswith("coverage: 30/30 input") for line in lines)
    assert any(line.startswith("spectrum: 30/30 input") for line in lines)
