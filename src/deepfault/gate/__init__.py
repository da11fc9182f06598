"""The gate: may a new version of a model (the challenger M2) replace the one in production
(the champion M1)? A verdict, its reasons and an exit status for CI (issue 41).

One module per concept: :mod:`.config` (stages and policy), :mod:`.policy` (the TOML file),
:mod:`.stats` (intervals, the McNemar test, the streaming tally), :mod:`.heldout` (stage 1),
:mod:`.replay` (stage 2, the corpus), :mod:`.fuzzing` (stage 3), :mod:`.verdict` (stage 4),
:mod:`.protocol` (:func:`gate`), :mod:`.outcome`, and the writers :mod:`.junit`,
:mod:`.markdown` and :mod:`.report` (the HTML page).
"""

from ..experiment.method import Method
from .config import THRESHOLDS, GateConfig
from .heldout import ClassFlips, HeldOutResult
from .outcome import FuzzResult, GateOutcome
from .policy import policy_config, read_policy
from .protocol import HeldOut, gate
from .replay import ReplayResult
from .verdict import EXIT_STATUS, Check, Verdict

__all__ = [
    "METHOD",
    "gate",
    "GateConfig",
    "THRESHOLDS",
    "HeldOut",
    "GateOutcome",
    "HeldOutResult",
    "ClassFlips",
    "ReplayResult",
    "FuzzResult",
    "Check",
    "Verdict",
    "EXIT_STATUS",
    "read_policy",
    "policy_config",
]

#: ``deepfault gate``'s exit statuses, as its description lists them.
_STATUS = ", ".join(f"{v} {k}" for k, v in EXIT_STATUS.items())

#: The gate as the engine sees it.
METHOD = Method(
    name="gate",
    title="Gate",
    description="may the challenger replace the champion: flips, corpus replay, a short fuzz and a verdict",
    result_type=GateOutcome,
    commands=("gate",),
    entries=(gate,),
    texts={
        "gate": (
            "may a new version of a model (M2) replace the one in production (M1)? A verdict for CI",
            "Compare the challenger M2 with the champion M1 on a held-out split (accuracies with intervals, "
            "an exact McNemar test, negative and positive flips per class, the disagreement), replay the "
            "regression corpus (--corpus), fuzz briefly (--budget; 0 skips) and judge by the policy (the "
            "threshold options, or --policy FILE.toml; options given win over the file). Prints the verdict "
            f"and its reasons first. Exit status: {_STATUS}; 2 bad usage; 130 interrupted (docs/gate.md)."),
    },
)
