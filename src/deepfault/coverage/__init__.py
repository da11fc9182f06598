"""Structural coverage of a network by a set of inputs (coverage spec).

- :mod:`.config`: :class:`CoverageConfig` (measure, rank), :class:`ProfileConfig` and
  :class:`SurpriseConfig` (the two fits): every field declared once with its constraint.
- :mod:`.criteria`: NC, NAC, KMNC, NBC, SNAC, TKNC, TKNP as mergeable accumulators
  (``update`` / ``compute`` / ``merge`` / ``would_increase``), registered by name.
- :mod:`.profile`: each neuron's range on the training data, streamed, saved as ``.npz``.
- :mod:`.measure`: :func:`measure_coverage`, coverage of a set of inputs in one pass.
- :mod:`.scored`: the surprise coverages (``lsc``, ``dsc``, ``mdsc``) of
  :data:`SCORE_CRITERIA`, criteria that read one score per input (buckets of it).
- :mod:`.rank`: :func:`rank_inputs`, test prioritisation by uncertainty, surprise adequacy or
  coverage (CAM/CTM), with APFD.
- :mod:`.uncertainty`: max-softmax, margin, entropy and DeepGini of each input's outputs.
- :mod:`.surprise`: surprise adequacy (LSA, DSA, MDSA) fitted on the training split, and
  surprise coverage.
- :mod:`.results`: :class:`CoverageResult`, :class:`CoverageReport`, :class:`Ranking` and
  :class:`RankReport`, the frozen results of the above.
- :mod:`.text`: the outcomes' terminal text (``summary()``).
- :mod:`.report`: the HTML pages of ``coverage measure --report DIR`` and ``coverage rank
  --report DIR``.
- :mod:`.figures`: coverage-versus-threshold, per-layer, growth and surprise plots, ranking
  curves and score distributions (matplotlib).
- :mod:`.reference`: the criteria as naive per-input, per-neuron loops (for checks).
"""

from ..experiment.method import Method
from .config import CoverageConfig, ProfileConfig, SurpriseConfig
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
from .measure import SCORE_CRITERIA, SurpriseCoverage, build_criteria, measure_coverage
from .profile import Profile, ProfileAccumulator, compute_profile, load_profile, model_hash
from .rank import DEFAULT_BY, apfd, list_prioritisers, parse_by, prioritize, rank_inputs
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
    "DEFAULT_BY",
    "SCORE_CRITERIA",
    "SURPRISE_KINDS",
    "UNCERTAINTY",
    "BitSetCriterion",
    "CoverageConfig",
    "CoverageReport",
    "CoverageResult",
    "Criterion",
    "KMultisectionCoverage",
    "NeuronActivationCoverage",
    "NeuronBoundaryCoverage",
    "NeuronCoverage",
    "Profile",
    "ProfileAccumulator",
    "ProfileConfig",
    "RankReport",
    "Ranking",
    "StrongNeuronActivationCoverage",
    "Surprise",
    "SurpriseConfig",
    "SurpriseCoverage",
    "TopKNeuronCoverage",
    "TopKPatternCoverage",
    "apfd",
    "build_criteria",
    "compute_profile",
    "criterion_params",
    "fit_surprise",
    "list_criteria",
    "list_prioritisers",
    "list_uncertainty",
    "load_profile",
    "load_surprise",
    "make_criterion",
    "measure_coverage",
    "model_hash",
    "parse_by",
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
    description="how much of a network a set of inputs exercises (DeepXplore's and DeepGauge's criteria), "
                "how surprising each input is, and which inputs to look at first",
    result_type=CoverageReport, commands=("coverage",),
    entries=(measure_coverage, rank_inputs, compute_profile, fit_surprise),
    texts={
        "coverage profile": (
            "each neuron's min, max, mean and std on the training split",
            "Stream the training split once and write each neuron's min, max, mean and standard deviation, "
            "with the layers, the transform and a hash of the model's weights, to an .npz file (for kmnc, "
            "nbc and snac)."),
        "coverage surprise": (
            "fit surprise adequacy (LSA, DSA, MDSA) on the training split",
            "Stream the training split once and keep each input's activation trace of the chosen layers with "
            "its class, with the transform and a hash of the model's weights, in an .npz file (for 'rank "
            "--by lsa,dsa,mdsa' and 'measure --criteria lsc,dsc,mdsc')."),
        "coverage measure": (
            "coverage of a set of inputs, overall and per layer",
            "Run the inputs through the model once and print each criterion's coverage overall and per "
            "layer; several thresholds give DeepXplore's coverage-versus-threshold curve."),
        "coverage rank": (
            "order inputs by uncertainty, surprise or coverage; APFD of the failing ones",
            "Order the inputs by each prioritiser (uncertainty of the outputs, surprise adequacy, or "
            "coverage: additional (cam) or total (ctm) under each --criteria) and report APFD of the inputs "
            "the model misclassifies (0.5 is what a random order gets on average), each prioritiser's time "
            "and its first inputs."),
    },
)
