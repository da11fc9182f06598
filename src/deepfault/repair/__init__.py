"""Repair: fine-tune a model on the failing inputs that testing found, and measure whether they
helped more than any other inputs would (DeepXplore section 7.3, DRFuzz RQ3).

One module per concept: :mod:`.config` (settings), :mod:`.inputs` (reading ``run`` /
``xplore`` / ``regress`` files), :mod:`.labels` (labels and the majority vote),
:mod:`.holdout` (the held-out split by seed), :mod:`.finetune`, :mod:`.baselines`,
:mod:`.protocol` (:func:`repair`), :mod:`.results`, :mod:`.preset` (the two presets),
:mod:`.report` and :mod:`.figures`.
"""


from ..experiment.method import Method
from ..experiment.report import section_report
from .config import BASELINES, TIE_POLICIES, RepairConfig
from .inputs import InputFile, read_inputs
from .labels import Labelled, label_inputs, majority_vote
from .preset import REPAIR_METHOD as _NAME
from .preset import REPAIR_PRESETS
from .protocol import evaluate_model, repair, save_repaired
from .results import ApproachResult, FileSummary, RepairEvaluation, RepairResult

__all__ = [
    "METHOD",
    "BASELINES",
    "TIE_POLICIES",
    "RepairConfig",
    "InputFile",
    "read_inputs",
    "Labelled",
    "label_inputs",
    "majority_vote",
    "repair",
    "evaluate_model",
    "save_repaired",
    "ApproachResult",
    "RepairEvaluation",
    "FileSummary",
    "RepairResult",
]


#: Repair as the engine sees it.
METHOD = Method(
    name=_NAME, title="Repair",
    description="fine-tuning on the failing inputs found, against random and adversarial inputs",
    presets=REPAIR_PRESETS, result_type=RepairResult, report=section_report(f"{__name__}.report"),
    commands=("repair",), entries=(repair,),
    texts={
        "repair": (
            "fine-tune a model on the failing inputs run/xplore/regress found, against baselines",
            "Label the inputs of each file where their labels are defined (the originals' labels for 'run' "
            "and 'regress' files, the models' majority vote for 'xplore' files), hold out part of every file "
            "by seed, fine-tune a copy of the model on the rest mixed with training inputs, and do the same "
            "with as many random or adversarial inputs. Prints test and held-out accuracy before and after "
            "each, ends with a verdict (which fine-tuning fixed the most held-out faults within the "
            "--max-drop budget, and which model was saved), and writes a JSON result and the repaired model "
            "(.pt); --report DIR adds an HTML page."),
    },
)
