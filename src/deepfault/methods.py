"""The one list of method packages.

The engine (``core``, ``models``, ``data``, ``experiment``) knows no method; this module
imports each method package's :class:`~deepfault.experiment.method.Method` record and
registers it, with its presets and its report. Adding a method is adding its package and
one line here (see ``docs/architecture.md``).
"""

from .coverage import METHOD as COVERAGE
from .experiment.method import METHODS, register_method
from .fuzz import METHOD as DRFUZZ
from .gate import METHOD as GATE
from .localization import METHOD as DEEPFAULT
from .repair import METHOD as REPAIR
from .xplore import METHOD as DEEPXPLORE

__all__ = ["ALL", "ABOUT", "DEEPFAULT", "COVERAGE", "DEEPXPLORE", "DRFUZZ", "REPAIR", "GATE"]

#: Every method, in the order the CLI and the docs list them.
ALL = (DEEPFAULT, COVERAGE, DEEPXPLORE, DRFUZZ, REPAIR, GATE)

#: What ``deepfault --help`` says the tool does: each method in a few words.
ABOUT = (
    "Test deep neural networks the way software is tested: localise the neurons behind a classifier's "
    "mistakes and synthesize inputs that expose them (DeepFault), measure coverage, find inputs on which "
    "models disagree (DeepXplore), and fuzz a new version of a model for regressions (DRFuzz), and fine-tune "
    "it on the failing inputs found (repair).")

for _method in ALL:
    if _method.name not in METHODS:
        register_method(_method)
