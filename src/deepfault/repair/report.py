"""Reports of repairs: the HTML page of one ``deepfault repair`` run (:func:`run_page`, which
``--report DIR`` writes through the shared page shell) and the section of the two presets
(:func:`render_report`,
``render_report(store, config_hash, out) -> dict(title, markdown, html, files)``), with the
published figures beside ours.
"""

from __future__ import annotations

import html
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DeepFaultError
from ..experiment.tables import Table

__all__ = ["_PAPER", "render_report", "run_page", "_collect", "files_table", "before_after_table",
           "summary_text"]

#: The published yardsticks. DeepXplore section 7.3 / Figure 10: augmenting with 100
#: difference-inducing inputs (majority-vote labels) and retraining 5 epochs gained 1-3
#: points more accuracy than random test or FGSM inputs. DRFuzz README, RQ3 (MNIST LeNet-5):
#: accuracy (%) of M2 fine-tuned on one approach's faults, on each approach's faults, and the
#: test-accuracy change ("Acc Change", %).
_PAPER: dict[str, Any] = {
    "deepxplore": {"gain_over_baselines_points": (1.0, 3.0), "inputs": 100, "epochs": 5},
    "drfuzz": {
        "supply": {
            "drfuzz": {"drfuzz": 84.58, "deephunter": 59.42, "change": 0.78},
            "deephunter": {"drfuzz": 58.99, "deephunter": 80.71, "change": 0.90},
        },
        "adv-bim": {
            "drfuzz": {"drfuzz": 87.69, "deephunter": 73.38, "change": 0.84},
            "deephunter": {"drfuzz": 45.47, "deephunter": 79.42, "change": 0.56},
        },
    },
}

_XP = re.compile(r"deepxplore/repeat=(?P<r>\d+)/(?:model=(?P<model>[^/]+)|found)")
_DR = re.compile(
    r"(?P<scenario>[^/]+)/(?:repair/train=(?P<train>[^/]+)|faults/(?P<strategy>[^/]+))/seed(?P<seed>\d+)"
)


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def _points(v: float) -> str:
    return f"{v:g} point" + ("" if v == 1 else "s")


def _pm(values, scale: float = 100.0, digits: int = 2) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if len(values) == 1:
        return f"{scale * values[0]:.{digits}f}"
    return f"{scale * np.mean(values):.{digits}f} ± {scale * np.std(values, ddof=1):.{digits}f}"


# --- one run of ``deepfault repair`` -------------------------------------------------------------


def files_table(result: dict) -> Table:
    """The input files of a :meth:`~.results.RepairResult.to_dict`: kinds, labels, split."""
    rows = [(f["name"], f["kind"], f["inputs"], f["used"], f["ties"] if f["tie_policy"] else "-",
             f["tie_policy"] or "-", f["train"], f["held_out"], f["source"]) for f in result["files"]]
    headers = ("file", "kind", "inputs", "labelled", "ties", "ties are", "train", "held out", "labels")
    return Table(headers, rows, title="Input files")


def before_after_table(result: dict) -> Table:
    """The before/after table of a :meth:`~.results.RepairResult.to_dict`: one row per model."""
    files = [f["name"] for f in result["files"]]
    rf_files = [f["name"] for f in result["files"] if f["kind"] == "regress"]
    max_drop = result["config"]["max_drop"]
    best = (result.get("verdict") or {}).get("best")
    faults = result.get("held_out_faults")
    headers = ["model", "inputs", "test acc %", f"clean test acc % ({result['clean_test']})", "change (pts)",
               *[f"held-out {n} %" for n in files], *[f"#RF {n}" for n in rf_files],
               "held-out faults fixed", "newly wrong", "verdict"]

    def row(name, inputs, ev, change, fixed, broken, note):
        return [name, inputs, _pct(ev["test_accuracy"]), _pct(ev["clean_test_accuracy"]), change,
                *[_pct(ev["held_out"].get(n)) for n in files], *[ev["rf"].get(n, "-") for n in rf_files],
                fixed, broken, note]

    def note(a):
        if a["flagged"]:
            return f"costs > {max_drop:g} pts"
        return "best" if a["name"] == best else ""

    rows = [row("before", "-", result["before"], "-", "-" if faults is None else f"{faults} faults", "-", "")]
    rows += [row(a["name"], a["inputs"], a["after"], f"{a['test_change']:+.2f}", a.get("fixed", "-"),
                 a.get("broken", "-"), note(a)) for a in result["approaches"]]
    return Table(headers, rows, title="Before and after",
                 note=f"{result['mixed']} training inputs mixed into every fine-tuning; clean test accuracy "
                 f"on the {result['clean_test']} test inputs no approach trained on; changes in points of "
                 f"clean test accuracy; held-out faults: held-out inputs the model got wrong before, fixed: "
                 f"of those, the ones it gets right after, newly wrong: held-out inputs it got right before "
                 f"and wrong after; 'costs' when a repair loses more than {_points(max_drop)} (the budget); "
                 "best: the most faults fixed (net) within the budget.")


def summary_text(result) -> str:
    """What ``deepfault repair`` prints: the settings, the files, one row per model, the verdict."""
    d = result.to_dict()
    cfg = result.config
    lines = [f"model {result.model_name} · data {result.dataset} · {result.device}",
             f"hold out {cfg.holdout:g} of each file's seeds, {result.mixed} training inputs mixed in, "
             f"{cfg.epochs} epochs, lr {cfg.lr:g}, batch {cfg.batch_size}, seed {cfg.seed}", "",
             files_table(d).text(), "", before_after_table(d).text()]
    return "\n".join(lines) + f"\n\nverdict: {result.verdict().text}\n"


def _accuracy_groups(d: dict) -> dict[str, dict]:
    """``{test set: {model: accuracy}}`` of a :meth:`~.results.RepairResult.to_dict`."""
    groups: dict[str, dict] = {"clean test": {"before": d["before"]["clean_test_accuracy"]}}
    for a in d["approaches"]:
        groups["clean test"][a["name"]] = a["after"]["clean_test_accuracy"]
    for f in d["files"]:
        g = groups.setdefault(f"held-out {f['name']}", {"before": d["before"]["held_out"].get(f["name"])})
        for a in d["approaches"]:
            g[a["name"]] = a["after"]["held_out"].get(f["name"])
    return groups


def run_page(result, folder, *, provenance: dict | None = None) -> dict:
    """The page of one ``deepfault repair`` run (``--report DIR``): the verdict first, then the
    accuracies before and after each fine-tuning (one zoomed panel per test set), the
    before/after table and the input files.

    Args:
        result: The :class:`~.results.RepairResult`.
        folder: Where the PNG goes.
        provenance: Where the run came from.

    Returns:
        ``dict(title, html, config, provenance)`` for
        :func:`~deepfault.experiment.report.write_page`.
    """
    from ..experiment.report import image_tag, section
    from .figures import accuracy_bars

    d = result.to_dict()
    cfg = result.config
    ran = ", ".join(a["name"] for a in d["approaches"])
    context = (f"{d['model']} on {d['dataset']}: {len(d['approaches'])} fine-tunings ({ran}) of "
               f"{cfg.epochs} epochs each, {cfg.holdout:g} of each file's seeds held out, budget "
               f"{_points(cfg.max_drop)} of clean test accuracy; "
               f"{d['seconds']:.1f} s on {d['device']}.")
    parts = [f"<p class='verdict'>Verdict: {html.escape(result.verdict().text)}</p>",
             f"<p class='caption'>{html.escape(context)}</p>"]
    png = accuracy_bars(_accuracy_groups(d), Path(folder) / "accuracy.png",
                        title=f"repair of {d['model']}: accuracy before and after each fine-tuning")
    if png is not None:
        parts.append(image_tag(png, "Accuracy before and after each fine-tuning: clean test accuracy and "
                                    "each file's held-out inputs, one panel each. Each panel's y axis is "
                                    "zoomed to its values (range in its title), so that a point or two "
                                    "shows."))
    for anchor, table in (("models", before_after_table(d)), ("files", files_table(d))):
        parts.append(section(anchor, table.title, table.note, table.html()))
    return {"title": f"Repair of {d['model']} on {d['dataset']}", "html": "\n".join(parts),
            "config": d["config"], "provenance": provenance}


# --- the presets -----------------------------------------------------------------------------------


def _collect(store, experiment: str) -> dict:
    """The repair cells: ``{"deepxplore": {model: {repeat: data}}, "found": {repeat: data},
    "drfuzz": {scenario: {train: {seed: data}}}, "faults": {scenario: {strategy: {seed: data}}}}``.
    """
    out: dict[str, dict] = {
        "deepxplore": defaultdict(dict),
        "found": {},
        "drfuzz": defaultdict(lambda: defaultdict(dict)),
        "faults": defaultdict(lambda: defaultdict(dict)),
    }
    out["errors"] = {}
    for rec in store.records(experiment, "repair", arrays=False):
        if "error" in rec.data:
            out["errors"][rec.cell_id] = rec.data["error"]
            continue
        m = _XP.fullmatch(rec.cell_id)
        if m:
            if m["model"]:
                out["deepxplore"][m["model"]][int(m["r"])] = rec.data
            else:
                out["found"][int(m["r"])] = rec.data
            continue
        m = _DR.fullmatch(rec.cell_id)
        if m and m["train"]:
            out["drfuzz"][m["scenario"]][m["train"]][int(m["seed"])] = rec.data
        elif m:
            out["faults"][m["scenario"]][m["strategy"]][int(m["seed"])] = rec.data
    if not (out["deepxplore"] or out["drfuzz"] or out["faults"] or out["found"] or out["errors"]):
        raise DeepFaultError(f"experiment {experiment} has no repair cells; run the preset first")
    return out


def _approach(cell: dict, name: str) -> dict:
    found = next((a for a in cell["approaches"] if a["name"] == name), None)
    if found is None:
        ran = ", ".join(a["name"] for a in cell["approaches"])
        raise DeepFaultError(f"a repair cell has no {name!r} approach (it ran {ran})")
    return found


def _gains_and_tests(change: dict, baselines: list[str], runs: int) -> tuple[list[str], list[str]]:
    """Per baseline: the found inputs' mean gain over it (points) and a one-sided Mann-Whitney U
    test over the repeats, with A12 (``-`` for one repeat or no spread).
    """
    from scipy.stats import mannwhitneyu

    from ..experiment.stats import a12

    gains, tests = [], []
    for b in baselines:
        diff = np.subtract(change["found"], change[b])
        gains.append(f"{np.mean(diff):+.2f}")
        if runs > 1 and np.ptp(np.r_[change["found"], change[b]]) > 0:
            p = float(mannwhitneyu(change["found"], change[b], alternative="greater").pvalue)
            tests.append(f"{p:.3f}, {a12(change['found'], change[b]):.2f}")
        else:
            tests.append("-")
    return gains, tests


def deepxplore_table(cells: dict) -> tuple[list[str], list[list], dict]:
    """Figure 10 as a table: per model, clean test accuracy before and after each approach,
    the found inputs' gain over each baseline and a one-sided Mann-Whitney U test over repeats.
    """
    models = sorted(cells)
    baselines = [a["name"] for a in next(iter(cells[models[0]].values()))["approaches"][1:]] if models else []
    headers = [
        "model",
        "repeats",
        "found inputs (train/held)",
        "before %",
        "found %",
        *[f"{b} %" for b in baselines],
        *[f"gain over {b} (pts)" for b in baselines],
        *[f"p (found > {b}), A12" for b in baselines],
        "held-out before %",
        *[f"held-out after {a} %" for a in ["found", *baselines]],
    ]
    rows: list[list] = []
    data: dict = {}
    for model in models:
        runs = [cells[model][r] for r in sorted(cells[model])]
        before = [c["before"]["clean_test_accuracy"] for c in runs]
        change = {a: [_approach(c, a)["test_change"] for c in runs] for a in ["found", *baselines]}
        after = {
            a: [_approach(c, a)["after"]["clean_test_accuracy"] for c in runs] for a in ["found", *baselines]
        }
        held_b = [next(iter(c["before"]["held_out"].values()), None) for c in runs]
        held_a = {
            a: [next(iter(_approach(c, a)["after"]["held_out"].values()), None) for c in runs]
            for a in ["found", *baselines]
        }
        gains, tests = _gains_and_tests(change, baselines, len(runs))
        files = [c["files"][0] for c in runs]
        rows.append(
            [
                model,
                len(runs),
                f"{np.mean([f['train'] for f in files]):.0f}/{np.mean([f['held_out'] for f in files]):.0f}",
                _pm(before),
                _pm(after["found"]),
                *[_pm(after[b]) for b in baselines],
                *gains,
                *tests,
                _pm(held_b),
                *[_pm(v) for v in held_a.values()],
            ]
        )
        data[model] = {
            "before": before,
            "after": after,
            "change": change,
            "held_out_before": held_b,
            "held_out_after": held_a,
            "ties": [f["ties"] for f in files],
        }
    return headers, rows, data


def drfuzz_table(cells: dict) -> tuple[list[str], list[list], dict]:
    """RQ3's cross table: accuracy (%) of M2 fine-tuned on one strategy's faults, on each
    strategy's held-out faults (mean ± sd over seeds), beside the README's.
    """
    headers = [
        "scenario",
        "train on",
        "seeds",
        "test on",
        "ours %",
        "paper %",
        "clean test change (pts)",
        "paper change %",
        "#RF left / held out",
    ]
    rows: list[list] = []
    data: dict = {}
    for scenario in sorted(cells):
        for train in sorted(cells[scenario]):
            runs = [cells[scenario][train][k] for k in sorted(cells[scenario][train])]
            paper = _PAPER["drfuzz"].get(scenario, {}).get(train, {})
            changes = [_approach(c, "found")["test_change"] / 100 for c in runs]
            for f in runs[0]["files"]:
                test = Path(f["name"]).stem
                accs = [_approach(c, "found")["after"]["held_out"].get(f["name"]) for c in runs]
                rf = [_approach(c, "found")["after"]["rf"].get(f["name"]) for c in runs]
                held = [next(x for x in c["files"] if x["name"] == f["name"])["held_out"] for c in runs]
                rows.append(
                    [
                        scenario,
                        train,
                        len(runs),
                        test,
                        _pm(accs),
                        paper.get(test, "-"),
                        _pm(changes),
                        paper.get("change", "-"),
                        f"{np.mean([r for r in rf if r is not None]):.0f} / {np.mean(held):.0f}"
                        if any(r is not None for r in rf)
                        else "-",
                    ]
                )
                data.setdefault(scenario, {}).setdefault(train, {})[test] = {
                    "accuracy": accs,
                    "paper": paper.get(test),
                    "test_change_points": [100 * c for c in changes],
                    "rf_after": rf,
                    "held_out": held,
                }
    return headers, rows, data


def _deepxplore_part(cells: dict, out: Path, add, figure) -> None:
    """DeepXplore's Figure 10: its table (``add``) and its bars (``figure``)."""
    from .figures import accuracy_bars

    h, r, d = deepxplore_table(cells["deepxplore"])
    found = cells["found"]
    note = (
        f"DeepXplore section 7.3 / Figure 10: each model fine-tuned on difference-inducing inputs "
        f"(majority vote of LeNet-1/4/5; {np.mean([f['kept'] for f in found.values()]):.0f} kept per "
        "repeat, 30% held out by seed) mixed with training inputs, against as many random test inputs "
        "and FGSM inputs. Clean test accuracy (test inputs no approach trained on), mean ± sd over "
        "repeats; held-out: accuracy on the held-out difference-inducing inputs (vote labels); "
        "gain = found's change minus the baseline's, in points; one-sided Mann-Whitney U over "
        "repeats. Paper: found inputs gave 1-3 points more than random or FGSM inputs."
    )
    add("DeepXplore Figure 10: accuracy after augmenting", note, h, r, d, "figure10")
    groups = {m: {a: float(np.mean(v)) for a, v in d[m]["after"].items()} for m in d}
    for m in d:
        groups[m] = {"before": float(np.mean(d[m]["before"])), **groups[m]}
    figure(
        accuracy_bars(groups, out / "figure10.png", title="clean test accuracy after fine-tuning"),
        "Figure 10: clean test accuracy before and after each augmentation (mean over repeats).",
    )


def _drfuzz_part(cells: dict, add) -> None:
    """DRFuzz's RQ3 cross table (``add``)."""
    h, r, d = drfuzz_table(cells["drfuzz"])
    faults = {
        f"{s}/{t}": np.mean([c["faults"] for c in cells["faults"][s][t].values()])
        for s in cells["faults"]
        for t in cells["faults"][s]
    }
    note = (
        "DRFuzz RQ3: M2 fine-tuned on one fuzzer's regression faults (70% of seeds, mixed with as many "
        "training inputs), tested on each fuzzer's held-out faults (the same held-out seeds); faults "
        "per campaign: " + ", ".join(f"{k} {v:.0f}" for k, v in faults.items()) + ". Before "
        "fine-tuning M2 gets every fault wrong (0%)."
    )
    add("DRFuzz RQ3: accuracy on each fuzzer's faults after fine-tuning", note, h, r, d, "rq3")


def render_report(store, config_hash: str, out_dir) -> dict:
    """The section of a ``repair-deepxplore-mnist`` or ``repair-drfuzz-mnist`` experiment.

    Returns:
        ``dict(title=..., markdown=..., html=..., files=[...])``.

    Raises:
        DeepFaultError: The experiment has no repair cells.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = _collect(store, config_hash)
    md, parts, files = ["# Repair with found inputs", ""], [], []
    nav: list[tuple[str, str]] = []

    def add(title, note, headers, rows, data, stem):
        table = Table(headers, rows, title=title, note=note)
        md.extend([f"## {title}", "", note, "", table.markdown(), ""])
        nav.append((stem, title))
        parts.append(f"<h2 id='{html.escape(stem)}'>{html.escape(title)}</h2>"
                     f"<p class='caption'>{html.escape(note)}</p>{table.html()}")
        path = out / f"{stem}.json"
        path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
        files.append(path)

    def figure(path, caption):
        from ..experiment.report import image_tag

        if path is None:
            return
        files.append(path)
        md.extend([f"![{caption}]({path.name})", ""])
        parts.append(image_tag(path, caption))

    if cells["deepxplore"]:
        _deepxplore_part(cells, out, add, figure)
    if cells["drfuzz"]:
        _drfuzz_part(cells, add)
    if cells["errors"]:
        lines = [f"{k}: {v}" for k, v in sorted(cells["errors"].items())]
        md.extend(["## Cells without a repair", "", *[f"- {x}" for x in lines], ""])
        parts.append(
            "<h2>Cells without a repair</h2><ul>"
            + "".join(f"<li>{html.escape(x)}</li>" for x in lines)
            + "</ul>"
        )
    title = "Repair with found inputs"
    return {
        "title": title,
        "markdown": "\n".join(md),
        "html": "\n".join(parts),
        "nav": nav,
        "files": [str(p) for p in files],
    }
