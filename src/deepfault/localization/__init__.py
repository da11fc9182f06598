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
    texts={
        "run": (
            "localise suspicious neurons and synthesize inputs from them",
            "Build each class's hit spectrum on the test split, select the k most suspicious neurons, "
            "synthesize new inputs from correctly classified ones and evaluate them. With no --model and no "
            "--dataset, uses the embedded default (scikit-learn's 8x8 digits and a small MLP trained on "
            "them, cached)."),
        "measures": (
            "list the suspiciousness measures and baselines",
            "List every approach 'deepfault run --measure' takes: the suspiciousness measures (a score of "
            "the four counts as, af, ns, nf of each neuron) and the baselines."),
    },
    renamed={"run": {"--approach": "--measure", "--suspicious-num": "-k"}},
)
