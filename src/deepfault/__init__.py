"""deepfault: test deep neural networks the way software is tested.

Five methods on one engine (capture, batch loop, accumulators, registries, store):

- DeepFault (fault localisation and suspiciousness-guided synthesis)::

    data set -> model -> activations -> compute_spectrum -> suspiciousness / localize
             -> synthesize -> evaluate -> results (JSON / store)

- coverage criteria, surprise adequacy and test prioritisation (``measure_coverage``,
  ``compute_profile``, ``fit_surprise``, ``rank_inputs``);
- DeepXplore's differential testing (``xplore``);
- DRFuzz's regression fuzzing of a model's new version (``regress``);
- repair: fine-tuning a model on the failing inputs found (``repair``).
- gate: may a new version replace the model in production: flips, corpus, verdict (``gate``).

See the README for worked examples.
"""

from . import _signals as _signals  # noqa: I001  (first: guards the CLI's start-up against Ctrl-C)
from . import methods  # noqa: E402,F401,I001  (registers every method with the engine)
from .core.batches import activations, iterate_batches, predict
from .core.capture import Layer, NeuronLayout, capture
from .core.runtime import Runtime
from .core.executors import Parallel
from .core.batches import correct_inputs
from .core.inputs import inputs_and_labels
from .coverage import (
    CoverageConfig,
    ProfileConfig,
    SurpriseConfig,
    compute_profile,
    fit_surprise,
    list_criteria,
    list_prioritisers,
    load_profile,
    load_surprise,
    make_criterion,
    measure_coverage,
    rank_inputs,
    save_surprise,
    surprise_scores,
    uncertainty_scores,
)
from .data import Dataset, list_datasets, load_dataset
from ._version import __version__
from .errors import DeepFaultError
from .fuzz import regress
from .localization.evaluation import Evaluation, TopRanked, evaluate
from .localization.measures import get_measure, list_measures, register_measure, suspiciousness
from .localization.config import RunConfig
from .localization.protocol import RunResult, run_deepfault
from .localization.selection import (
    Neuron,
    Selection,
    list_approaches,
    localize,
    random_baseline,
    rank,
    select,
    select_neurons,
    uniform_baseline,
)
from .localization.spectrum import Spectrum, compute_class_spectra, compute_spectrum
from .localization.synthesis import synthesize
from .models.fingerprint import fingerprint
from .models.prepare import PreparedModel, prepare_model
from .xplore import XploreConfig, xplore
from .repair import repair
from .gate import GateConfig, gate


__all__ = [
    "Runtime",
    "Parallel",
    "correct_inputs",
    "inputs_and_labels",
    "PreparedModel",
    "prepare_model",
    "fingerprint",
    "compute_profile",
    "list_criteria",
    "load_profile",
    "make_criterion",
    "measure_coverage",
    "rank_inputs",
    "fit_surprise",
    "load_surprise",
    "save_surprise",
    "surprise_scores",
    "uncertainty_scores",
    "list_prioritisers",
    "xplore",
    "XploreConfig",
    "regress",
    "repair",
    "gate",
    "GateConfig",
    "DeepFaultError",
    "Dataset",
    "Evaluation",
    "Layer",
    "Neuron",
    "NeuronLayout",
    "Selection",
    "Spectrum",
    "TopRanked",
    "activations",
    "capture",
    "compute_class_spectra",
    "compute_spectrum",
    "evaluate",
    "get_measure",
    "iterate_batches",
    "list_approaches",
    "list_datasets",
    "list_measures",
    "load_dataset",
    "localize",
    "predict",
    "random_baseline",
    "rank",
    "register_measure",
    "RunConfig",
    "RunResult",
    "CoverageConfig",
    "ProfileConfig",
    "SurpriseConfig",
    "run_deepfault",
    "select",
    "select_neurons",
    "suspiciousness",
    "synthesize",
    "uniform_baseline",
    "__version__",
]
