"""The terminal text of coverage's outcomes: what ``summary()`` returns and every front end
prints (``deepfault coverage measure|rank|profile|surprise``), the answer's tables first built
by :mod:`.report`'s table functions (the same tables the pages show).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..core.capture import NeuronLayout, neurons_line, selection_source
from ..experiment.tables import Table, text_table

__all__ = ["CRITERION_NAMES", "RANK_LEGEND", "criteria_legend", "layer_tables", "measure_text",
           "never_activated_line", "neurons_text", "profile_text", "rank_text", "surprise_table",
           "surprise_text"]

#: The criteria's full names, for the legend under ``coverage measure``'s tables (the surprise
#: coverages' are also their titles in :data:`~deepfault.coverage.scored.SCORE_CRITERIA`).
CRITERION_NAMES = {
    "nc": "neuron coverage", "nac": "neuron activation coverage (nc on raw values)",
    "kmnc": "k-multisection neuron coverage", "nbc": "neuron boundary coverage",
    "snac": "strong neuron activation coverage", "tknc": "top-k neuron coverage",
    "tknp": "top-k neuron patterns",
    "lsc": "likelihood-based surprise coverage (LSA buckets)",
    "dsc": "distance-based surprise coverage (DSA buckets)",
    "mdsc": "Mahalanobis-distance surprise coverage (MDSA buckets)",
}
#: The legend under ``coverage rank``'s table.
RANK_LEGEND = ("APFD: average percentage of faults detected, 0..1, higher when the misclassified inputs "
               "come earlier in the order")


def criteria_legend(names: Iterable[str]) -> str:
    """``nc: neuron coverage; kmnc: ...`` for the criteria ``names`` (in their order)."""
    parts = []
    for n in dict.fromkeys(names):
        full = CRITERION_NAMES.get(n)
        if full:
            parts.append(f"{n}: {full}")
    return "; ".join(parts)


def neurons_text(layout: NeuronLayout, model, layers, *, profile=None, deepest: bool = False) -> str:
    """The neuron line (:func:`~deepfault.core.capture.neurons_line`): ``layers`` as given, the
    profile's when none are given, or the deepest default layer (a surprise state's default).
    """
    if layers is None and profile is not None:
        named = selection_source(model, profile.selection, named_by="the profile's --layers")
        source = f"the profile's, {named}"
    elif deepest:
        source = f"the deepest of {selection_source(model, None)}"
    else:
        source = selection_source(model, layers)
    return neurons_line(layout.num_neurons, len(layout.layers), source)


def never_activated_line(report, *, shown: int = 8) -> str:
    """The never-activated neurons in one terminal line (``coverage measure`` prints it)."""
    dead = report.never_activated()
    if dead is None:
        return ""
    total = sum(len(u) for u in dead.values())
    parts = [f"{name}: " + ", ".join(map(str, u[:shown])) + (f" and {len(u) - shown} more" if len(u) > shown
                                                             else "") for name, u in dead.items() if u]
    return (f"never activated (no value above 0): {total} of {report.layout.num_neurons} neurons"
            + (f" ({'; '.join(parts)})" if parts else ""))


def _cell(covered: int, total: int | None) -> str:
    if total is None:
        return str(covered)
    return f"{covered}/{total} {100 * covered / total:.1f}%" if total else "0/0"


def layer_tables(report) -> list[Table]:
    """One table per criterion: a row per layer and the total, a column per parameter setting
    (what ``coverage measure`` prints and its page shows).
    """
    groups: dict[str, list] = {}
    for r in report.results:
        if r.per_layer:  # the surprise coverages bucket one score per input: surprise_table
            groups.setdefault(r.criterion, []).append(r)
    tables = []
    for name, results in groups.items():
        heads = [", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.params.items())
                 or name for r in results]
        unit = "distinct top-k sets per layer; total: patterns" if name == "tknp" else "covered/items"
        rows = [(la.name, la.size, *[_cell(*r.per_layer[la.name]) for r in results])
                for la in report.layout.layers]
        rows.append(("all", report.layout.num_neurons, *[_cell(r.covered, r.total) for r in results]))
        tables.append(Table(("layer", "units", *heads), rows, title=f"{name} ({unit})"))
    return tables


def surprise_table(report) -> Table | None:
    """The surprise coverages of a measurement: buckets covered, the bound ``U`` and where it
    came from, and how many scores fell outside ``[0, U)`` (``None`` without them).
    """
    if not report.surprise:
        return None
    rows = []
    for r in report.results:
        v = report.surprise["criteria"].get(r.criterion)
        if v is None:
            continue
        upper = "-" if v["upper"] is None else f"{v['upper']:.6g}"
        rows.append((r.criterion, v["score"], f"{r.covered}/{r.total} {100 * r.ratio:.1f}%", upper,
                     "largest score here" if v["upper_from"] == "inputs" else "given", v["negative"],
                     v["at_or_above_upper"], v["not_finite"]))
    return Table(("criterion", "score", "buckets covered", "U", "U is", "scores < 0", "scores >= U",
                  "not finite"), rows, title="surprise coverage (equal buckets of [0, U))")


def _source(outcome, n: int) -> str:
    """``model M · data D (N inputs)``, with what is known of the model and the data."""
    parts = [] if not outcome.about.model_name else [f"model {outcome.about.model_name}"]
    parts.append(f"data {outcome.about.data_name} ({n} inputs)" if outcome.about.data_name else f"{n} inputs")
    return " · ".join(parts)


def _header(outcome, n: int, layout: NeuronLayout, transform: str, profile: dict | None) -> str:
    device = f" · {outcome.about.device}" if outcome.about.device else ""
    text = (f"{_source(outcome, n)} · {len(layout.layers)} layers, {layout.num_neurons} neurons · transform "
            f"{transform}{device}\n")
    if profile is not None:
        text += (f"profile: {profile['count']} inputs, {profile['transform']}, weights sha256 "
                 f"{profile['model_sha256'][:12]}...\n")
    return text


def _answer(report) -> str:
    """The answer first: each criterion's coverage over all neurons, in one line."""
    parts = [f"{r.label} {r.ratio:.1%} ({r.covered:,} of {r.total:,})" if r.ratio is not None
             else f"{r.label} {r.covered:,} patterns" for r in report.results]
    return f"coverage of {report.num_inputs:,} inputs: {', '.join(parts)}\n" if parts else ""


def measure_text(report) -> str:
    """``coverage measure``'s text: the run, the neurons, a table per criterion, the surprise
    coverages, the never-activated neurons and the time.
    """
    saturated = report.saturation_note()
    text = _answer(report)
    text += "".join(f"{note}\n" for note in (*report.about.notes, *([saturated] if saturated else [])))
    text += _header(report, report.num_inputs, report.layout, report.transform, report.profile)
    if report.about.neurons:
        text += report.about.neurons + "\n"
    text += "".join(f"\n{t.title}\n{t.text()}\n" for t in layer_tables(report))
    sa = surprise_table(report)
    if sa is not None and report.surprise is not None:
        text += f"\n{sa.title}\n{sa.text()}\n"
        if any(v["upper_from"] == "inputs" for v in report.surprise["criteria"].values()):
            text += ("U: the largest finite score of these inputs, so the coverage is not comparable between "
                     "input sets; give --sa-upper U to compare\n")
    legend = criteria_legend(r.criterion for r in report.results)
    if legend:
        text += f"  ({legend})\n"
    dead = never_activated_line(report)
    if dead:
        text += f"\n{dead}\n"
    return text + f"\nmeasured in {report.seconds:.2f} s\n"


def _f3(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def rank_text(report) -> str:
    """``coverage rank``'s text: the run, APFD of every prioritiser (the earliest named), cam's
    greedy part and the times.
    """
    device = f" · {report.about.device}" if report.about.device else ""
    text = f"{_source(report, report.num_inputs)}{device}\n" + "".join(f"{n}\n" for n in report.about.notes)
    if report.layout is not None:
        text += (f"cam/ctm: {len(report.layout.layers)} layers, {report.layout.num_neurons} neurons, "
                 f"transform {report.transform}\n")
        if report.profile is not None:
            text += f"profile: {report.profile['count']} inputs, {report.profile['transform']}\n"
        if report.about.neurons:
            text += report.about.neurons + "\n"
    nf, n = report.num_failing, report.num_inputs
    ideal = f", the ideal order {1 - nf / (2 * n):.3f}" if nf else ""
    text += f"{nf} of {n} inputs misclassified; a random order has APFD 0.5 on average{ideal}\n\n"
    tenth = max(1, math.ceil(0.1 * n))
    rows = [(r.name, _f3(r.apfd), f"{100 * r.found(report.failing)[tenth - 1]:.1f}%" if nf else "-",
             f"{r.seconds:.4f}", " ".join(map(str, r.order[:5].tolist())) + (" ..." if n > 5 else ""))
            for r in report.rankings]
    text += text_table(("prioritiser", "APFD", f"found in first {tenth}", "seconds", "first inputs"), rows)
    text += f"\n  ({RANK_LEGEND})"
    best = report.best()
    if best is not None:
        text += f"\n\nearliest: {best.name} (APFD {best.apfd:.3f})"
    for r in report.rankings:
        if r.prioritiser == "cam":
            picked = "input covers" if r.greedy == 1 else f"{r.greedy} inputs cover"
            text += (f"\ncam under {r.criterion}: the set covers {_cell(r.covered or 0, r.total)}; "
                     f"cam's first {picked} it all")
    return text + (f"\n\nforward pass (shared) {report.forward_seconds:.2f} s; ranked in "
                   f"{report.seconds:.2f} s; seconds: each prioritiser's own time beyond the forward pass\n")


def profile_text(profile) -> str:
    """``coverage profile``'s text: the run, the neurons and each layer's range."""
    text = _header(profile, profile.count, profile.layout, profile.transform, None)
    if profile.about.neurons:
        text += profile.about.neurons + "\n"
    rows = [(r["layer"], r["units"], f"{r['low']:.4g}", f"{r['high']:.4g}", f"{r['mean']:.4g}",
             f"{r['std']:.4g}", r["constant"]) for r in profile.layer_summary()]
    return text + text_table(("layer", "units", "min", "max", "mean of means", "mean std", "constant"), rows)


def surprise_text(state) -> str:
    """``coverage surprise``'s text: the run, the layers, the inputs per class and the LSA
    settings.
    """
    device = f" · {state.about.device}" if state.about.device else ""
    layers = ", ".join(f"{la.name} ({la.size})" for la in state.layout.layers)
    text = f"{_source(state, state.num_inputs)} · transform {state.transform}{device}\n"
    text += f"layers: {layers}; {state.num_neurons} neurons\n"
    if state.about.neurons:
        text += state.about.neurons + "\n"
    counts = state.class_counts()
    names = list(state.about.class_names or ())
    rows = [(c, names[c] if c < len(names) else "", int(counts[c])) for c in range(state.num_classes)]
    text += (f"\ninputs per class (by {state.grouping}; a class with none makes every score inf, one input "
             "gives no LSA)\n")
    text += text_table(("class", "name", "inputs"), rows) + "\n"
    return text + (f"\nLSA drops neurons of variance < {state.var_threshold} per class"
                   + (f", keeps at most {state.max_features}" if state.max_features else "")
                   + f"; fitted in {state.about.seconds:.2f} s\n")
