"""The report section of DRFuzz experiments (``deepfault report STORE``).

For every finished campaign of an experiment (one ``deepfault regress`` run, or the
``drfuzz-mnist`` preset's scenarios x strategies x seeds) it writes:

- ``campaigns.csv``: one row per campaign with the metrics and how it ran;
- ``comparison.md`` / ``.csv``: mean ± sd of #RF, #URF, #Seed and #GF per scenario and
  strategy, the DRFuzz/DeepHunter ratio of #URF, and the README's MNIST LeNet-5 rows
  beside ours (24 hours on 40 cores there);
- ``timeline.png``: #RF and #URF over fuzzing time;
- ``rule_usage.png``: each rule's share of the selections and of the regression faults;
- ``faults-*.png``: example regression faults beside their seeds.
"""

from __future__ import annotations

import csv
import html
import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from ..experiment.tables import Table, fmt
from .campaign.checkpoint import DRFUZZ_METHOD, list_campaigns, load_result

__all__ = ["METRICS_LEGEND", "README_FASHION", "README_MNIST", "_collect", "comparison_rows", "metrics_table",
           "render_report"]

#: The README's MNIST-LeNet5 rows (RQ1, 24 hours on a 40-core CPU): #RF, #URF, #Seed, #GF.
README_MNIST = {
    "SUPPLY": {"deephunter": (4837, 2701, 2127, 49003), "drfuzz": (36293, 8767, 4345, 68451)},
    "ADV:BIM": {"deephunter": (19588, 8670, 4760, 61871), "drfuzz": (41376, 13342, 5948, 82377)},
    "ADV:CW": {"deephunter": (3799, 2408, 1791, 53178), "drfuzz": (25727, 7996, 3972, 117329)},
    "FIXING": {"deephunter": (2760, 2279, 1906, 35139), "drfuzz": (32858, 11075, 4990, 116021)},
    "PRUNE": {"deephunter": (6763, 3689, 2547, 68281), "drfuzz": (26470, 9071, 4571, 100967)},
}
#: The README's FM-AlexNet rows (RQ1, the same setting).
README_FASHION = {
    "SUPPLY": {"deephunter": (6248, 2872, 2088, 39535), "drfuzz": (63981, 12711, 5743, 260899)},
    "ADV:BIM": {"deephunter": (6130, 2886, 1875, 26690), "drfuzz": (114729, 17886, 6806, 382470)},
    "ADV:CW": {"deephunter": (2178, 1473, 1191, 33401), "drfuzz": (50801, 13803, 5759, 389195)},
    "FIXING": {"deephunter": (9574, 5225, 3044, 25493), "drfuzz": (176104, 27352, 7999, 377966)},
    "PRUNE": {"deephunter": (17302, 8150, 3963, 35696), "drfuzz": (168029, 26229, 7885, 306389)},
}
_README_KEYS = {"supply": "SUPPLY", "adv-bim": "ADV:BIM", "adv-cw": "ADV:CW", "fixing": "FIXING",
                "prune": "PRUNE"}
_METRICS = ("rf", "urf", "seeds", "gf")
#: Scenarios in the README's order first, then the others alphabetically.
_ORDER = ("supply", "adv-bim", "adv-cw", "fixing", "prune", "quant-fp16", "quant-int8")
_HEADS = {"rf": "#RF", "urf": "#URF", "seeds": "#Seed", "gf": "#GF"}


def _split(cell: str) -> tuple[str, str, str]:
    """``(scenario, strategy, seed)`` of a cell id: ``SCEN/STRATEGY/seedS`` or ``STRATEGY-seedS``."""
    parts = cell.split("/")
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    strategy, _, seed = cell.rpartition("-")
    return "-", strategy or cell, seed


def _collect(store, experiment: str) -> list[dict]:
    """One dict per finished campaign: ``cell``, ``scenario``, ``strategy``, ``seed`` and the
    result (without the faults' inputs).
    """
    rows = []
    for cell in list_campaigns(store, experiment):
        result = load_result(store, experiment, cell, inputs=False)
        if result is None:  # listed as finished, so its result cell is there
            raise DeepFaultError(f"campaign {cell!r} of experiment {experiment} has no result; "
                                 "the store is corrupt")
        scenario, strategy, seed = _split(cell)
        rows.append({"cell": cell, "scenario": scenario, "strategy": result.config.strategy, "seed": seed,
                     "result": result})

    def order(row: dict) -> tuple:
        sc = row["scenario"]
        return (_ORDER.index(sc) if sc in _ORDER else len(_ORDER), sc,
                ("drfuzz", "deephunter").index(row["strategy"]) if row["strategy"] in ("drfuzz", "deephunter")
                else 2, row["seed"])

    return sorted(rows, key=order)


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0


def _pm(values: Sequence[float]) -> str:
    mean, sd = _mean_sd(values)
    return f"{mean:,.0f} ± {sd:,.0f}" if len(values) > 1 else f"{mean:,.0f}"


def _urf_at_equal_iterations(rows: list[dict]) -> dict[str, int]:
    """Per campaign cell: its #URF within the fewest iterations any strategy ran on the same
    scenario and seed (the comparison at equal iterations; spec section 6).
    """
    from .campaign.metrics import metrics_until

    fewest: dict[tuple, int] = {}
    for r in rows:
        key = (r["scenario"], r["seed"])
        fewest[key] = min(fewest.get(key, r["result"].iterations), r["result"].iterations)
    return {r["cell"]: metrics_until(r["result"].faults, iterations=fewest[(r["scenario"], r["seed"])]).urf
            for r in rows}


def comparison_rows(rows: list[dict],
                    published: dict | None = None) -> tuple[list[str], list[list], list[dict]]:
    """The comparison table: per scenario and strategy, mean ± sd over seeds, and the README's row
    (``published``: :data:`README_MNIST` by default, or :data:`README_FASHION`).

    Returns:
        ``(headers, rows, records)``: Markdown rows and tidy records (full precision).
    """
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        groups[(r["scenario"], r["strategy"])].append(r["result"])
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    headers = ["scenario", "approach", "runs", "budget", *(_HEADS[m] for m in _METRICS),
               "#URF DRFuzz/DeepHunter", "#URF at equal iterations", "shared filter",
               "#URF at SSIM >= 0.99", "iterations", "mutants/s", "first RF (s)",
               "README #RF", "README #URF", "README #Seed", "README #GF"]
    table, records = [], []
    published = README_MNIST if published is None else published
    at_n = _urf_at_equal_iterations(rows)
    for scenario in scenarios:
        urf = {s: _mean_sd([x.metrics.urf for x in groups[(scenario, s)]])[0]
               for s in ("drfuzz", "deephunter") if groups.get((scenario, s))}
        for strategy in ("drfuzz", "deephunter", *sorted({s for sc, s in groups if sc == scenario}
                                                         - {"drfuzz", "deephunter"})):
            results = groups.get((scenario, strategy))
            if not results:
                continue
            ratio = ""
            if strategy == "drfuzz" and urf.get("deephunter"):
                ratio = f"{urf['drfuzz'] / urf['deephunter']:.2f}"
            elif strategy == "drfuzz" and "deephunter" in urf:
                ratio = "inf"
            readme = published.get(_README_KEYS.get(scenario, ""), {}).get(strategy)
            firsts = [x.metrics.seconds_to_first_rf for x in results
                      if x.metrics.seconds_to_first_rf is not None]
            speed = [x.generated / x.seconds for x in results if x.seconds > 0]
            label = {"drfuzz": "DRFuzz", "deephunter": "DeepHunter"}.get(strategy, strategy)
            table.append([
                scenario, label, len(results), results[0].config.budget,
                *(_pm([getattr(x.metrics, m) for x in results]) for m in _METRICS), ratio,
                _pm([at_n[r["cell"]] for r in rows
                     if (r["scenario"], r["strategy"]) == (scenario, strategy)]),
                results[0].config.shared_fidelity or "-",
                _urf_ssim(results), _pm([x.iterations for x in results]),
                _pm(speed) if speed else "-",
                f"{_mean_sd(firsts)[0]:.1f}" if firsts else "-",
                *((f"{v:,}" for v in readme) if readme else ("-",) * 4),
            ])
            mine = [r for r in rows if (r["scenario"], r["strategy"]) == (scenario, strategy)]
            for x, r in zip(results, mine, strict=True):
                records.append({"scenario": scenario, "strategy": strategy, "seed": r["seed"],
                                **x.metrics.to_dict(), "urf_equal_iterations": at_n[r["cell"]],
                                "shared_filter": x.config.shared_fidelity, "iterations": x.iterations,
                                "seconds": x.seconds,
                                "generated": x.generated, "queries": x.queries, "budget": x.config.budget,
                                "stop_reason": x.stop_reason})
    return headers, table, records


def _md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def _write_csv(path: Path, records: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if records:
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    return path


#: The presets that reproduce the paper: only their reports show the README's numbers.
_REPRODUCTIONS = ("drfuzz-mnist", "drfuzz-fashion-mnist")
_LABELS = {"drfuzz": "DRFuzz", "deephunter": "DeepHunter"}


def _label(strategy: str) -> str:
    return _LABELS.get(strategy, strategy)


def _stem(*parts: str) -> str:
    """A file-name stem from words (``faults-adv-bim-drfuzz``): no empty parts, no ``--``."""
    words = [re.sub(r"[^A-Za-z0-9_.]+", "-", p).strip("-.") for p in parts]
    return "-".join(w for w in words if w)


def _results_table(rows: list[dict]) -> tuple[list[str], list[list]]:
    """Per scenario and strategy: the metrics, mean ± sd over seeds."""
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        groups[(r["scenario"], r["strategy"])].append(r["result"])
    scenarios = any(sc != "-" for sc, _ in groups)
    headers = [*(["scenario"] if scenarios else []), "approach", "runs", "budget", "#RF", "#URF", "#Seed",
               "#GF", "#URF at SSIM >= 0.99", "iterations", "mutants/s", "first RF (s)", "stopped"]
    table = []
    for (scenario, strategy), results in groups.items():
        firsts = [x.metrics.seconds_to_first_rf for x in results if x.metrics.seconds_to_first_rf is not None]
        speed = [x.generated / x.seconds for x in results if x.seconds > 0]
        table.append([*([scenario] if scenarios else []), _label(strategy), len(results),
                      results[0].config.budget,
                      *(_pm([getattr(x.metrics, m) for x in results]) for m in _METRICS),
                      _urf_ssim(results), _pm([x.iterations for x in results]),
                      _pm(speed) if speed else "-", f"{_mean_sd(firsts)[0]:.1f}" if firsts else "-",
                      ", ".join(sorted({x.stop_reason for x in results}))])
    return headers, table


def _head_to_head(headers: list[str], table: list[list]) -> tuple[list[str], list[list]]:
    """The comparison columns of :func:`comparison_rows`, for scenarios where both strategies ran."""
    keep = ["scenario", "approach", "#URF", "#URF DRFuzz/DeepHunter", "#URF at equal iterations",
            "shared filter", "#URF at SSIM >= 0.99", "iterations"]
    both = {r[0] for r in table if r[1] == "DRFuzz"} & {r[0] for r in table if r[1] == "DeepHunter"}
    if both == {"-"}:  # one regress run, no scenarios
        keep = keep[1:]
    idx = [headers.index(h) for h in keep]
    return keep, [[r[i] for i in idx] for r in table if r[0] in both and r[1] in ("DRFuzz", "DeepHunter")]


def _published_table(headers: list[str], table: list[list]) -> tuple[list[str], list[list]]:
    keep = ["scenario", "approach", "#RF", "README #RF", "#URF", "README #URF", "#Seed", "README #Seed",
            "#GF", "README #GF"]
    idx = [headers.index(h) for h in keep]
    return keep, [[r[i] for i in idx] for r in table]


def _rule_usage(rows: list[dict]) -> dict[str, dict]:
    usage: dict[str, dict] = {}
    for strategy in dict.fromkeys(r["strategy"] for r in rows):
        total: dict[str, dict] = defaultdict(lambda: {"selected": 0, "rf": 0})
        for r in rows:
            if r["strategy"] == strategy:
                for rule, u in r["result"].rule_usage.items():
                    total[rule]["selected"] += u["selected"]
                    total[rule]["rf"] += u["rf"]
        usage[_label(strategy)] = dict(total)
    return usage


class _Sections:
    """The sections of one page as they are added: HTML parts, Markdown lines, the contents and
    the files written.
    """

    def __init__(self, out: Path):
        self.out = out
        self.md: list[str] = []
        self.parts: list[str] = []
        self.nav: list[tuple[str, str]] = []
        self.files: list[Path] = []

    def add(self, anchor: str, title: str, note: str, *html_parts: str, md_parts: tuple = ()) -> None:
        from ..experiment.report import section

        self.nav.append((anchor, title))
        self.parts.append(section(anchor, title, note, *html_parts))
        self.md.extend([f"## {title}", "", note, "", *md_parts, ""])

    def to_dict(self) -> dict:
        return {"markdown": self.md, "html": self.parts, "nav": self.nav, "files": self.files}


def campaign_sections(rows: list[dict], out: Path, *, names: tuple[str, str] = ("M1", "M2"),
                      published: dict | None = None, class_names=None, bounds=(0.0, 1.0)) -> dict:
    """The DRFuzz section of a page: tables and figures of finished campaigns.

    Args:
        rows: :func:`_collect`'s rows (``cell``, ``scenario``, ``strategy``, ``seed``, ``result``).
        out: Folder for the PNGs and CSVs.
        names: How the page names M1 and M2 (their file names).
        published: The README's rows to show beside ours (only the reproduction presets).
        class_names: The data set's class names (default: indices).
        bounds: The data's pixel range.

    Returns:
        ``dict(markdown=[...], html=[...], nav=[...], files=[...])``.
    """
    page = _Sections(out)
    _table_sections(page, rows, names, published)
    first_seed: dict[tuple[str, str], dict] = {}
    for r in rows:
        first_seed.setdefault((r["scenario"], r["strategy"]), r)
    _timeline_section(page, first_seed, several=len(rows) > len(first_seed))
    _rules_section(page, rows)
    label = (lambda c: class_names[int(c)]) if class_names is not None else (lambda c: str(int(c)))
    _examples_section(page, first_seed, names, label, bounds)
    return page.to_dict()


def _table_sections(page: _Sections, rows: list[dict], names: tuple[str, str],
                    published: dict | None) -> None:
    """The results table, DRFuzz against DeepHunter and (reproductions) the published numbers."""
    from ..experiment.report import html_table

    m1, m2 = names
    h, t = _results_table(rows)
    page.add("faults", "Regression faults found",
             "Per approach (mean ± sd over seeds where several ran): #RF, regression faults, inputs "
             f"{m1} (M1) classifies right and {m2} (M2) wrong, not counting seeds M2 already gets wrong; "
             "#URF, the distinct (seed, M1 label, M2 label) among them; #Seed, seeds with a fault; #GF, "
             "generated inputs M2 gets wrong; #URF at SSIM >= 0.99, the unique faults within DRFuzz's "
             "fidelity of their seed.", html_table(h, t), md_parts=(_md_table(h, t),))
    headers, table, records = comparison_rows(rows, published or {})
    page.files.append(_write_csv(page.out / "comparison.csv", records))
    shown = len(headers) if published else len(headers) - 4  # the README's columns: reproductions only
    (page.out / "comparison.md").write_text(_md_table(headers[:shown], [r[:shown] for r in table]) + "\n",
                                            encoding="utf-8")
    page.files.append(page.out / "comparison.md")
    hh, th = _head_to_head(headers, table)
    if th:
        page.add("versus", "DRFuzz against DeepHunter",
                 "Both approaches on the same scenario, seed and budget. #URF at equal iterations: within "
                 "the fewest iterations either ran (the other columns are at equal wall time); shared "
                 "filter: the one fidelity filter applied to every executed mutant of both.",
                 html_table(hh, th), md_parts=(_md_table(hh, th),))
    if published:
        hp, tp = _published_table(headers, table)
        page.add("published", "Beside the published numbers",
                 "The DRFuzz README's rows (RQ1, 24 hours on a 40-core CPU; it has no QUANT rows) beside "
                 "ours, which ran under a far smaller budget: compare the ordering, not the counts.",
                 html_table(hp, tp), md_parts=(_md_table(hp, tp),))


def _timeline_section(page: _Sections, first_seed: dict, *, several: bool) -> None:
    """#RF and #URF over fuzzing time, the first seed of each scenario and approach."""
    from ..experiment.report import image_tag
    from .figures import plot_timeline

    series = {(f"{sc} " if sc != "-" else "") + _label(st): r["result"].timeline
              for (sc, st), r in first_seed.items()}
    path = plot_timeline(series, page.out / "timeline.png", title="first seed of each" if several else None)
    page.files.append(path)
    page.add("timeline", "#RF and #URF over time",
             "Regression faults and unique ones against fuzzing time"
             + (", first seed of each scenario and approach." if several else "."),
             image_tag(path, path.name), md_parts=(f"![timeline]({path.name})",))


def _rules_section(page: _Sections, rows: list[dict]) -> None:
    """Each mutation rule's selections and regression faults, as a figure and a table."""
    from ..experiment.report import html_table, image_tag
    from .figures import plot_rule_usage

    usage = _rule_usage(rows)
    path = plot_rule_usage(usage, page.out / "rule_usage.png")
    page.files.append(path)
    every_rule = sorted({r for u in usage.values() for r in u})
    usage_rows = [[rule, *(f"{u.get(rule, {}).get(k, 0):,}" for u in usage.values()
                           for k in ("selected", "rf"))]
                  for rule in every_rule]
    usage_head = ["rule", *(f"{s} {k}" for s in usage for k in ("selected", "RF"))]
    choosers = {"DRFuzz": "MCMC for DRFuzz", "DeepHunter": "uniform for DeepHunter"}
    how = ", ".join(choosers.get(s, s) for s in usage)
    page.add("rules", "Regression faults by mutation rule",
             f"Each rule's share of the selections ({how}) and of the regression faults it made, summed over "
             "campaigns; the counts below.",
             image_tag(path, path.name), html_table(usage_head, usage_rows),
             md_parts=(f"![rule usage]({path.name})", "", _md_table(usage_head, usage_rows)))


def _examples_section(page: _Sections, first_seed: dict, names: tuple[str, str], label, bounds) -> None:
    """Up to six grids of early faults (seed | fault | difference), one per campaign."""
    from ..experiment.report import image_tag

    m1, m2 = names
    grids: list[str] = []
    for (scenario, strategy), r in first_seed.items():
        ex = r["result"].examples
        if len(grids) >= 6 or not len(ex.get("faults", [])):
            continue
        n = min(8, len(ex["faults"]))
        rules = ex.get("rule", [])
        stem = _stem("faults", "" if scenario == "-" else scenario, strategy)
        grid = fault_grid_png(ex, n, page.out / f"{stem}.png", names=names, label=label, rules=rules,
                              bounds=bounds)
        if grid is None:
            continue
        page.files.append(grid)
        where = f"{scenario}, {_label(strategy)}" if scenario != "-" else _label(strategy)
        grids.append(image_tag(grid, f"{where}: {grid.name}"))
        page.md.extend([f"![{where}]({grid.name})", ""])
    if grids:
        page.add("examples", "Example regression faults",
                 f"Early regression faults of each campaign, distinct (seed, M2 label) first: the seed (what "
                 f"{m1} predicts), the fault ({m2}'s prediction in red, and the mutation rule that made it) "
                 "and their difference (blue: darker, red: brighter; one colour scale per figure).", *grids)


def fault_grid_png(ex: dict, n: int, path: Path, *, names, label, rules, bounds) -> Path | None:
    """Seed | fault | difference for ``n`` examples (unique faults first), titled by models and rule."""
    from ..experiment.figures import GridCaptions, difference_grid

    m1, m2 = names
    # unique faults (seed, M2 label) first: the first faults found often share one seed
    keys = list(zip(np.asarray(ex["seed_index"]).tolist(), np.asarray(ex["m2_pred"]).tolist(), strict=True))
    first = [keys.index(k) for k in dict.fromkeys(keys)]
    rows = (first + [i for i in range(len(keys)) if i not in first])[:n]
    rules = np.asarray(list(rules) + [""] * len(keys))[rows]
    seeds = zip(np.asarray(ex["seed_index"])[rows], np.asarray(ex["label"])[rows], strict=True)
    faults = zip(np.asarray(ex["m2_pred"])[rows], rules, strict=True)
    if np.asarray(ex["faults"]).ndim != 4:  # vectors and sequences: seed and fault as lines
        from .figures import seed_fault_lines

        return seed_fault_lines(
            np.asarray(ex["seeds"])[rows], np.asarray(ex["faults"])[rows], path, bounds=bounds, columns=2,
            titles=[f"seed #{int(i)} {m1}: {label(c)}; {m2}: {label(d)} ({r or 'rule unknown'})"
                    for (i, c), (d, r) in zip(seeds, faults, strict=True)])
    return difference_grid(
        np.asarray(ex["seeds"])[rows], np.asarray(ex["faults"])[rows], path, bounds=bounds, columns=2,
        captions=GridCaptions(before=[f"seed #{int(i)}\n{m1}: {label(c)}" for i, c in seeds],
                              after=[f"{m2}: {label(c)}\n{r or 'rule unknown'}" for c, r in faults],
                              highlight=[True] * n, labels=("seed", "fault")))


def model_names(store, experiment: str) -> tuple[str, str]:
    """M1's and M2's names as ``deepfault regress`` recorded them (their file names), else M1, M2."""
    record = store.get(experiment, DRFUZZ_METHOD, "models")
    if record is None:
        return "M1", "M2"
    return str(record.data.get("m1", "M1")), str(record.data.get("m2", "M2"))


def render_report(store, experiment_hash: str, out_dir) -> dict:
    """Tables and figures of a DRFuzz experiment (module docstring).

    Args:
        store: An open :class:`~deepfault.experiment.store.ResultStore`.
        experiment_hash: The experiment's key.
        out_dir: Folder for the files (created).

    Returns:
        ``dict(title=..., markdown=..., html=..., nav=..., files=[...])``.

    Raises:
        DeepFaultError: The experiment has no finished campaign.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = _collect(store, experiment_hash)
    if not rows:
        pending = sum(1 for r in store.records(experiment_hash, DRFUZZ_METHOD, arrays=False)
                      if r.cell_id.endswith("/checkpoint"))
        raise DeepFaultError(
            f"experiment {experiment_hash} has no finished DRFuzz campaign ({pending} checkpointed, not "
            "finished); rerun its command to finish them"
        )
    experiment: dict = next(
        (e for e in store.experiments(DRFUZZ_METHOD) if e["experiment"] == experiment_hash), {})
    config = experiment.get("config", {})
    published = None
    if experiment.get("name") in _REPRODUCTIONS:
        published = README_FASHION if config.get("dataset") == "fashion-mnist" else README_MNIST
    names = model_names(store, experiment_hash)
    strategies = " and ".join(dict.fromkeys(_label(r["strategy"]) for r in rows))
    title = f"DRFuzz: regression faults of {names[1]} against {names[0]}"
    if experiment.get("name") in _REPRODUCTIONS:
        title = f"DRFuzz reproduction ({experiment['name']}): regression faults of M2 against M1"
    body = campaign_sections(rows, out, names=names, published=published)
    campaigns = [{"cell": r["cell"], "scenario": r["scenario"], "strategy": r["strategy"], "seed": r["seed"],
                  **r["result"].metrics.to_dict(), "iterations": r["result"].iterations,
                  "steps": r["result"].steps, "generated": r["result"].generated,
                  "queries": r["result"].queries, "seconds": r["result"].seconds,
                  "setup_seconds": r["result"].setup_seconds, "corpus": r["result"].corpus,
                  "stop_reason": r["result"].stop_reason, "batch": r["result"].config.batch,
                  "fidelity": r["result"].config.check_name} for r in rows]
    files = [*body["files"], _write_csv(out / "campaigns.csv", campaigns)]
    meta = (f"{len(rows)} finished campaign{'s' if len(rows) != 1 else ''} of {strategies}, experiment "
            f"{experiment_hash}.")
    markdown = "\n".join([f"# {title}", "", meta, "", *body["markdown"]])
    return {"title": title, "meta": meta, "markdown": markdown,
            "html": "\n".join(body["html"]), "nav": body["nav"], "files": [str(p) for p in files]}


#: What the metrics' columns mean, and their names in DRFuzz's paper and README (one line under
#: every table of them).
METRICS_LEGEND = (
    "#RF: generated inputs M1 gets right and M2 wrong; #URF: distinct (seed, M1 label, M2 label) among them, "
    "the DRFuzz paper's #RF (#URF in its repository's table); #Seed: seeds with a #RF; #GF: generated "
    "inputs M2 gets wrong (#RF + both wrong); none counts the initial faults"
)


def _images(result) -> bool:
    """Whether a campaign fuzzed images (SSIM, and so #URF at SSIM >= 0.99, exists for images only)."""
    return result.rf_inputs is None or np.asarray(result.rf_inputs).ndim == 4


def _urf_ssim(results: list) -> str:
    """#URF at SSIM >= 0.99 over ``results`` (mean ± sd), ``n/a`` where they are not images."""
    if not all(_images(x) for x in results):
        return "n/a"
    return _pm([x.metrics.urf_ssim for x in results])


def metrics_table(result) -> Table:
    """One campaign's metrics, one per row: what ``deepfault regress`` prints and its page shows."""
    r, m = result, result.metrics
    images = _images(r)
    rows = [
        ("#RF (generated regression faults)", m.rf), ("#URF (unique: seed, M1 label, M2 label)", m.urf),
        ("#Seed (seeds with a fault)", m.seeds), ("#GF (M2 wrong: RF + both fail)", m.gf),
        ("#URF with SSIM to the seed >= 0.99", m.urf_ssim if images else "n/a (images only)"),
        ("initial faults: test inputs M2 already gets wrong (apart, in no # column)", m.initial_rf),
        ("time to first RF (s)", fmt(m.seconds_to_first_rf, 2)),
        ("queries to first RF", fmt(m.queries_to_first_rf)),
        ("iterations", r.iterations), ("mutants generated", r.generated), ("mutants executed", r.queries),
        ("mutants per second", fmt(r.generated / r.seconds if r.seconds else None, 0)),
        ("#URF per minute", fmt(60 * m.urf / r.seconds if r.seconds else None, 1)),
        ("#URF per 1,000 model queries", fmt(1000 * m.urf / r.queries if r.queries else None, 2)),
        ("fuzzing time (s)", fmt(r.seconds, 1)), ("queue at the end", r.corpus),
    ]
    return Table(("metric", "value"), rows, title=f"{_label(r.config.strategy)}, seed {r.config.seed}",
                 note=METRICS_LEGEND)


def campaign_page(outcomes: dict, folder) -> dict:
    """The page of one ``deepfault regress`` (one campaign, or both strategies' with ``--strategy both``).

    Args:
        outcomes: ``{strategy: RegressOutcome}`` (:func:`~deepfault.fuzz.regress.regress`'s).
        folder: Where the PNGs and CSVs go (the report folder being written).

    Returns:
        ``dict(title, html, meta, nav, config, provenance)`` for
        :func:`~deepfault.experiment.report.write_page`.
    """
    from ..provenance import provenance
    from .campaign.result import workers_lines

    first = next(iter(outcomes.values()))
    rows = [{"cell": o.cell, "scenario": "-", "strategy": o.result.config.strategy,
             "seed": str(o.result.config.seed), "result": o.result} for o in outcomes.values()]
    body = campaign_sections(rows, Path(folder), names=first.names, class_names=first.class_names,
                             bounds=first.bounds)
    from ..experiment.report import section

    tables = [metrics_table(o.result) for o in outcomes.values()]
    body["nav"].append(("metrics", "Every metric"))
    body["html"].append(section("metrics", "Every metric",
                                "What 'deepfault regress' printed for each campaign.",
                                *[f"<h3>{html.escape(t.title)}</h3>{t.html()}<p>{html.escape(t.note)}</p>"
                                  for t in tables]))
    m1, m2 = first.names
    r = first.result
    lines = {s: o.result.verdict().line() for s, o in outcomes.items()}  # the answer first: long enough?
    verdicts = " ".join((f"{_label(s)}, " if len(lines) > 1 else "") + line[0].upper() + line[1:] + "."
                        for s, line in lines.items())
    meta = (f"{verdicts} {' and '.join(_label(s) for s in outcomes)}, budget {r.config.budget}, "
            f"seed {r.config.seed}, "
            f"{r.config.check_name} check; {r.roots} seeds {m1} classifies right. Store {first.store}, "
            f"experiment {first.experiment}.")
    meta += "".join(f" {line[0].upper()}{line[1:]}." for line in workers_lines(r.workers))  # where they ran
    config = {s: o.result.config.to_dict() for s, o in outcomes.items()}
    return {"title": f"DRFuzz: regression faults of {m2} against {m1}", "meta": meta,
            "html": "\n".join(body["html"]), "nav": body["nav"],
            "config": config if len(config) > 1 else next(iter(config.values())),
            "provenance": provenance()}
