"""``deepfault measures``: the suspiciousness measures and baselines."""

from __future__ import annotations

from ._common import table


def add_parser(sub) -> None:
    measures = sub.add_parser("measures", help="list the suspiciousness measures and baselines")
    measures.set_defaults(func=_cmd_measures)


def _cmd_measures(args) -> int:
    from ..localization.measures import get_measure, list_measures

    rows = [(name, get_measure(name).formula, get_measure(name).reference) for name in list_measures()]
    rows.append(("random", "k neurons none of tarantula/ochiai/dstar chose, spread over layers "
                 "like theirs (the paper's baseline)", "Eniser et al., FASE 2019"))
    rows.append(("uniform", "k neurons drawn uniformly from all analysed neurons", "-"))
    print("as/af: active on passing/failing inputs; ns/nf: not active on passing/failing inputs")
    print(table(("name", "score", "reference"), rows, indent=""))
    return 0


