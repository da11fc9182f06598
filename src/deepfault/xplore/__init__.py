"""DeepXplore: differential testing of several models by joint gradient ascent.

Given two or more models of the same task, :func:`xplore` searches near real seed inputs
for inputs on which the models disagree, while pushing each model's neuron coverage up
(Pei, Cao, Yang, Jana, SOSP 2017; ``spec/deepxplore.md``).

Examples:
    >>> from deepfault.xplore import XploreConfig, xplore
    >>> result = xplore(models, data, XploreConfig(seeds=200))  # doctest: +SKIP
    >>> print(result.summary())  # doctest: +SKIP
"""


from ..experiment.method import Method
from ..experiment.report import section_report
from .config import LAYER_CHOICES, NEURON_CHOICES, OBJECTIVES, XploreConfig
from .constraints import CONSTRAINTS, Constraint, list_constraints, make_constraint
from .features import InputBounds, fixed_mask, observed_bounds
from .preset import DEEPXPLORE_METHOD as _NAME
from .preset import DEEPXPLORE_PRESETS
from .results import (
    FoundInputs,
    RunNotes,
    TargetSummary,
    TracePoint,
    XploreResult,
    load_inputs,
    replay,
    save_inputs,
)
from .search import search, select_seeds, xplore

__all__ = [
    "METHOD",
    "CONSTRAINTS",
    "Constraint",
    "FoundInputs",
    "InputBounds",
    "LAYER_CHOICES",
    "NEURON_CHOICES",
    "OBJECTIVES",
    "RunNotes",
    "TargetSummary",
    "TracePoint",
    "XploreConfig",
    "XploreResult",
    "fixed_mask",
    "list_constraints",
    "load_inputs",
    "make_constraint",
    "observed_bounds",
    "replay",
    "save_inputs",
    "search",
    "select_seeds",
    "xplore",
]


#: DeepXplore as the engine sees it.
METHOD = Method(
    name=_NAME, title="DeepXplore",
    description="inputs on which several models disagree, found by joint gradient ascent",
    presets=DEEPXPLORE_PRESETS, result_type=XploreResult, report=section_report(f"{__name__}.report"),
    commands=("xplore",), entries=(xplore,),
    texts={
        "xplore": (
            "find inputs on which two or more models disagree (DeepXplore)",
            "Differential testing by joint gradient ascent (Pei et al., SOSP 2017): from seed test inputs on "
            "which all models agree, push one target model away from the common class while the others keep "
            "it and each model's neuron coverage rises, until the models disagree. All seeds advance "
            "together in one batch. Prints the counts, coverage and times; writes a JSON result, the inputs "
            "(.npz) and an image grid (.png)."),
    },
    renamed={"xplore": {"--models": "--model", "--step": "--step-size", "--seeds": "--num-seeds",
                        "--chunk-size": "--batch-size", "--transform": "--constraint"}},
)
