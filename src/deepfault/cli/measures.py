"""``deepfault measures``: the suspiciousness measures and baselines."""

from __future__ import annotations

from ..localization.selection import approach_rows
from . import _common as c


def add_parser(sub) -> None:
    """Add ``deepfault measures`` to ``sub``."""
    help, description = c.text("measures")
    measures = sub.add_parser("measures", help=help, description=description)
    measures.set_defaults(func=_cmd_measures)


def _cmd_measures(args) -> int:
    print("as/af: active on passing/failing inputs; ns/nf: not active on passing/failing inputs")
    print(c.table(("name", "score", "reference"), approach_rows(), indent=""))
    return 0
