"""``deepfault measures``: the suspiciousness measures and baselines."""

from __future__ import annotations

from ..localization.selection import approach_rows
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault measures`` to ``sub``."""
    measures = sub.add_parser(
        "measures", help="list the suspiciousness measures and baselines",
        description="List every approach 'deepfault run --measure' takes: the suspiciousness "
        "measures (a score of the four counts as, af, ns, nf of each neuron) and the baselines.")
    measures.set_defaults(func=_cmd_measures)


def _cmd_measures(args) -> int:
    print("as/af: active on passing/failing inputs; ns/nf: not active on passing/failing inputs")
    print(c.table(("name", "score", "reference"), approach_rows(), indent=""))
    return 0
