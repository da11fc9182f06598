"""Structural coverage of a network by a set of inputs (coverage spec).

- :mod:`.criteria`: NC, NAC, KMNC, NBC, SNAC, TKNC, TKNP as mergeable accumulators
  (``update`` / ``compute`` / ``merge`` / ``would_increase``), registered by name.
- :mod:`.profile`: each neuron's range on the training data, streamed, saved as ``.npz``.
- :mod:`.measure`: :func:`measure_coverage`, coverage of a set of inputs in one pass.
- :mod:`.rank`: :func:`rank_inputs`, test prioritisation by additional coverage, with APFD.
- :mod:`.uncertainty`: max-softmax, margin, entropy and DeepGini of each input's outputs.
- :mod:`.surprise`: surprise adequacy (LSA, DSA, MDSA) fitted on the training split, and
  surprise coverage.
- :mod:`.results`: :class:`CoverageResult`, :class:`CoverageReport`, :class:`Ranking` and
  :class:`RankReport`, the frozen results of the above.
- :mod:`.report`: the HTML page of one ``coverage measure --report DIR``.
- :mod:`.figures`: coverage-versus-threshold, per-layer and growth plots (matplotlib).
- :mod:`.reference`: the criteria as naive per-input, per-neuron loops (for checks).
"""

from ..experiment.method import Method
from .criteria import (
    CRITERIA,
    BitSetCriterion,
    Criterion,
    KMultisectionCoverage,
    NeuronActivationCoverage,
    NeuronBoundaryCoverage,
    NeuronCoverage,
    StrongNeuronActivationCoverage,
    TopKNeuronCoverage,
    TopKPatternCoverage,
    criterion_params,
    list_criteria,
    make_criterion,
)
from .measure import build_criteria, measure_coverage
from .profile import Profile, ProfileAccumulator, compute_profile, load_profile, model_hash
from .rank import apfd, prioritize, rank_inputs
from .results import CoverageReport, CoverageResult, Ranking, RankReport
from .surprise import (
    SURPRISE_KINDS,
    Surprise,
    fit_surprise,
    load_surprise,
    save_surprise,
    surprise_coverage,
    surprise_scores,
)
from .uncertainty import UNCERTAINTY, list_uncertainty, priority_order, uncertainty_scores

__all__ = [
    "METHOD",
    "CRITERIA",
    "SURPRISE_KINDS",
    "UNCERTAINTY",
    "BitSetCriterion",
    "CoverageReport",
    "CoverageResult",
    "Criterion",
    "KMultisectionCoverage",
    "NeuronActivationCoverage",
    "NeuronBoundaryCoverage",
    "NeuronCoverage",
    "Profile",
    "ProfileAccumulator",
    "RankReport",
    "Ranking",
    "StrongNeuronActivationCoverage",
    "Surprise",
    "TopKNeuronCoverage",
    "TopKPatternCoverage",
    "apfd",
    "build_criteria",
    "compute_profile",
    "criterion_params",
    "fit_surprise",
    "list_criteria",
    "list_uncertainty",
    "load_profile",
    "load_surprise",
    "make_criterion",
    "measure_coverage",
    "model_hash",
    "prioritize",
    "priority_order",
    "rank_inputs",
    "save_surprise",
    "surprise_coverage",
    "surprise_scores",
    "uncertainty_scores",
]


#: Coverage as the engine sees it (no stored experiments, so no presets or report).
METHOD = Method(
    name="coverage", title="Coverage",
    description="how much of a network a set of inputs exercises (DeepXplore's and DeepGauge's criteria)",
    result_type=CoverageReport, commands=("coverage",),
)
