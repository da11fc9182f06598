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

__all__ = ["ALL", "DEEPFAULT", "COVERAGE", "DEEPXPLORE", "DRFUZZ", "REPAIR", "GATE"]

#: Every method, in the order the CLI and the docs list them.
ALL = (DEEPFAULT, COVERAGE, DEEPXPLORE, DRFUZZ, REPAIR, GATE)

for _method in ALL:
    if _method.name not in METHODS:
        register_method(_method)
