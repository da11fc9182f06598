"""A criterion that saturates because its neurons never vary says so (issue 44)."""

from __future__ import annotations

import torch
from torch import nn

from deepfault.coverage import CoverageConfig, measure_coverage


class PlusOneBlock(nn.Module):
    """relu(x + 1) on inputs in [0, 1]: every channel mean is above 0 on every input."""

    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(x + 1.0)


def _net() -> nn.Module:
    return nn.Sequential(PlusOneBlock(), nn.Flatten(), nn.Linear(12, 2))


def test_nc_saturated_by_neurons_above_zero_on_every_input_is_named():
    torch.set_num_threads(1)
    x = torch.rand(10, 3, 2, 2, generator=torch.Generator().manual_seed(0))
    report = measure_coverage(_net(), x, CoverageConfig(criteria="nc", threshold=[0.0, 1.5], layers=["0"]))
    assert report.always_active is not None
    assert report.always_active.all()
    note = report.saturation_note()
    assert note is not None
    assert note.startswith("saturated: 3 of 3 neurons are above 0 on every input")
    assert "nc(threshold=0)" in note
    assert "threshold=1.5" not in note
    assert report.summary().splitlines()[1] == note  # said right after the answer line
    # the same neurons read at a threshold above their values: nothing to name
    high = measure_coverage(_net(), x, CoverageConfig(criteria="nc", threshold=1.5, layers=["0"]))
    assert high.saturation_note() is None


def test_neurons_that_vary_give_no_note():
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0]]))
        model[0].bias.zero_()
    x = torch.randn(20, 3, generator=torch.Generator().manual_seed(1))
    report = measure_coverage(model, x, CoverageConfig(criteria="nc"))
    assert report.saturation_note() is None


def test_the_summary_leads_with_the_answer():
    """``coverage measure`` prints each criterion's overall coverage first, the tables after."""
    import torch

    from deepfault.coverage import CoverageConfig, measure_coverage

    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    x = torch.linspace(-1, 1, 20).reshape(10, 2)
    report = measure_coverage(model, x, CoverageConfig(criteria=("nc", "tknc")))
    nc, tknc = report.results
    first = report.summary().splitlines()[0]
    assert first == (f"coverage of 10 inputs: {nc.label} {nc.ratio:.1%} ({nc.covered} of {nc.total}), "
                     f"{tknc.label} {tknc.ratio:.1%} ({tknc.covered} of {tknc.total})")
