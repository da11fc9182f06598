"""DeepFault (Eniser et al., FASE 2019): the method package.

The data's way through it, each arrow a plain function call::

    data set -> model -> activations -> spectrum -> measures -> selection
             -> synthesis -> evaluation -> protocol (one group of cells) -> preset (grids)
             -> analysis -> report, figures

- :mod:`.config`: :class:`RunConfig`, everything that determines a run's result;
- :mod:`.spectrum`: hit spectra per class, as an accumulator; :mod:`.measures`:
  suspiciousness measures (registry); :mod:`.selection`: top-k neurons and the random
  and uniform baselines; :mod:`.synthesis`: the suspiciousness-guided gradient ascent
  (Algorithm 2); :mod:`.evaluation`: loss, accuracy, distances and activation increase of
  the synthesized inputs; :mod:`.protocol`: the paper's protocol for one (model, class);
- :mod:`.results`: the stored cell; :mod:`.preset`: grids (``paper-mnist``, TOML files) on
  the shared experiment runner; :mod:`.analysis`, :mod:`.report`, :mod:`.figures`: the
  paper's tables and figures.
"""

from pathlib import Path

from ..experiment.method import Method
from .preset import GRID_PRESETS
from .protocol import RunResult, run_deepfault
from .results import DEEPFAULT_METHOD as _NAME

__all__ = ["METHOD"]


def _report(store_path: Path, experiment: dict, out: Path):
    from .report import write_deepfault_report

    return write_deepfault_report(store_path, out, config_hash=experiment["config_hash"])


#: DeepFault as the engine sees it.
METHOD = Method(
    name=_NAME, title="DeepFault",
    description="suspicious neurons behind a classifier's mistakes, and inputs synthesized to expose them",
    presets=GRID_PRESETS, result_type=RunResult, report=_report, commands=("run", "measures"),
    entries=(run_deepfault,),
)
