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
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from .checkpoint import METHOD, list_campaigns, load_result

__all__ = ["README_FASHION", "README_MNIST", "collect", "comparison_rows", "render_report"]

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


def collect(store, experiment: str) -> list[dict]:
    """One dict per finished campaign: ``cell``, ``scenario``, ``strategy``, ``seed`` and the
    result (without the faults' inputs).
    """
    rows = []
    for cell in list_campaigns(store, experiment):
        result = load_result(store, experiment, cell, inputs=False)
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
    from .metrics import metrics_until

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
                _pm([x.metrics.urf_ssim for x in results]), _pm([x.iterations for x in results]),
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


def _html_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _write_csv(path: Path, records: list[dict]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        if records:
            writer = csv.DictWriter(fh, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    return path


def render_report(store, experiment_hash: str, out_dir) -> dict:
    """Tables and figures of a DRFuzz experiment (module docstring).

    Args:
        store: An open :class:`~deepfault.experiment.store.ResultStore`.
        experiment_hash: The experiment's key.
        out_dir: Folder for the files (created).

    Returns:
        ``dict(title=..., markdown=..., html=..., files=[...])``.

    Raises:
        DeepFaultError: The experiment has no finished campaign.
    """
    from .figures import fault_grid, plot_rule_usage, plot_timeline

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = collect(store, experiment_hash)
    if not rows:
        pending = sum(1 for r in store.records(experiment_hash, METHOD, arrays=False)
                      if r.cell_id.endswith("/checkpoint"))
        raise DeepFaultError(
            f"experiment {experiment_hash} has no finished DRFuzz campaign ({pending} checkpointed, not "
            "finished); rerun its command to finish them"
        )
    files: list[Path] = []
    title = "DRFuzz: regression faults of M2 against M1"
    md = [f"# {title}", ""]
    parts = [f"<h1>{html.escape(title)}</h1>"]

    config = next((e["config"] for e in store.experiments(METHOD) if e["experiment"] == experiment_hash), {})
    fashion = config.get("dataset") == "fashion-mnist"
    headers, table, records = comparison_rows(rows, README_FASHION if fashion else README_MNIST)
    files.append(_write_csv(out / "comparison.csv", records))
    note = ("Mean ± sd over the seeds of each scenario and approach, under the same budget. #RF: "
            "regression faults generated (M1 right, M2 wrong; seeds M2 already gets wrong are not counted); "
            "#URF: distinct (seed, M1 label, M2 label); #Seed: seeds with a fault; #GF: generated inputs M2 "
            "gets wrong; #URF at SSIM >= 0.99: the unique faults within DRFuzz's SSIM fidelity of their "
            "seed (one realism yardstick for both approaches; DeepHunter checks validity only); #URF at "
            "equal iterations: within the fewest iterations either approach ran on that scenario and seed "
            "(the other columns are at equal wall time); shared filter: the one fidelity filter applied to "
            "every executed mutant of both approaches. The README's "
            + ("FM-AlexNet" if fashion else "MNIST LeNet-5")
            + " rows (24 hours on a 40-core CPU) are beside ours; it has no QUANT rows.")
    (out / "comparison.md").write_text(_md_table(headers, table) + "\n", encoding="utf-8")
    files.append(out / "comparison.md")
    md += ["## DRFuzz against DeepHunter", "", note, "", _md_table(headers, table), ""]
    parts += ["<h2>DRFuzz against DeepHunter</h2>", f"<p>{html.escape(note)}</p>",
              _html_table(headers, table)]

    campaigns = [{"cell": r["cell"], "scenario": r["scenario"], "strategy": r["strategy"], "seed": r["seed"],
                  **r["result"].metrics.to_dict(), "iterations": r["result"].iterations,
                  "steps": r["result"].steps, "generated": r["result"].generated,
                  "queries": r["result"].queries, "seconds": r["result"].seconds,
                  "setup_seconds": r["result"].setup_seconds, "corpus": r["result"].corpus,
                  "stop_reason": r["result"].stop_reason, "batch": r["result"].config.batch,
                  "fidelity": r["result"].config.check_name} for r in rows]
    files.append(_write_csv(out / "campaigns.csv", campaigns))

    def figure(name: str, path: Path, text: str) -> None:
        files.append(path)
        md.extend([f"### {name}", "", f"![{name}]({path.name})", "", text, ""])
        parts.append(f"<h3>{html.escape(name)}</h3><img src='{path.name}' alt='{path.name}'>"
                     f"<p>{html.escape(text)}</p>")

    try:
        first_seed = {}
        for r in rows:
            first_seed.setdefault((r["scenario"], r["strategy"]), r)
        series = {(f"{sc} " if sc != "-" else "") + st: r["result"].timeline
                  for (sc, st), r in first_seed.items()}
        timeline = plot_timeline(series, out / "timeline.png", title="first seed of each")
        figure("#RF and #URF over time", timeline,
               "Regression faults and unique ones against fuzzing time, first seed of each scenario and "
               "approach.")
        usage: dict[str, dict] = {}
        for strategy in dict.fromkeys(r["strategy"] for r in rows):
            total: dict[str, dict] = defaultdict(lambda: {"selected": 0, "rf": 0})
            for r in rows:
                if r["strategy"] == strategy:
                    for rule, u in r["result"].rule_usage.items():
                        total[rule]["selected"] += u["selected"]
                        total[rule]["rf"] += u["rf"]
            usage[strategy] = dict(total)
        figure("Rule usage", plot_rule_usage(usage, out / "rule_usage.png", title="summed over campaigns"),
               "Each mutation rule's share of the selections (MCMC for DRFuzz, uniform for DeepHunter) and "
               "of the regression faults found.")
        usage_rows = [[rule, *(f"{usage[s].get(rule, {}).get(k, 0):,}" for s in usage
                               for k in ("selected", "rf"))]
                      for rule in sorted({r for u in usage.values() for r in u})]
        usage_head = ["rule", *(f"{s} {k}" for s in usage for k in ("selected", "RF"))]
        md += ["### Rule usage (counts)", "", _md_table(usage_head, usage_rows), ""]
        parts.append(_html_table(usage_head, usage_rows))
        shown = 0
        for (scenario, strategy), r in first_seed.items():
            ex = r["result"].examples
            if shown >= 12 or not len(ex.get("faults", [])):
                continue
            stem = f"faults-{scenario}-{strategy}".replace(":", "").replace("/", "-").replace("--", "-")
            n = min(8, len(ex["faults"]))
            path = fault_grid(ex["seeds"][:n], ex["faults"][:n], ex["label"][:n], ex["m2_pred"][:n],
                              out / f"{stem}.png", columns=4,
                              title=f"{scenario} {strategy}: seed | regression fault")
            figure(f"Example faults: {scenario}, {strategy}", path,
                   f"The first regression faults of {r['cell']}, each beside its seed, with the label (M1's "
                   "prediction) and M2's prediction.")
            shown += 1
    except ModuleNotFoundError as err:
        md += [f"(no figures: {err})", ""]
    return {"title": title, "markdown": "\n".join(md), "html": "\n".join(parts),
            "files": [str(p) for p in files]}

