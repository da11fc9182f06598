"""``deepfault regress`` on a tabular data set (issue 28, "Done when": ``--fidelity dsa:T`` on a
tabular data set): scikit-learn's bundled breast-cancer data (569 x 30, 2 classes, offline).

1. **The data.** The 569 rows split (seeded, stratified by nothing: a permutation) into 300
   training rows, 119 held-out rows and 150 test rows; every feature min-max scaled by the
   training rows into ``[0, 1]`` (test and held-out rows clipped), written as an ``.npz`` data
   set (``x``, ``y``, ``x_train``, ``y_train``, ``bounds``, ``class_names``).
2. **The pair.** M1: a ``digits_mlp`` (30 -> 16 -> 16 -> 2) trained on the training rows; M2:
   M1 trained further on the held-out rows (SUPPLY-like), both saved as model files.
3. **Campaigns.** ``deepfault regress`` through :func:`deepfault.cli.main` (DRFuzz, seed 0,
   ``--inputs-per-step 16``) for ``--seconds`` each with ``--fidelity dsa:p90``, ``mdsa``
   (the default for vectors) and ``none``: #RF, #URF, #URF per minute, mutants per second,
   and the rule usage.
4. **Acceptance.** The generated faults of the ``none`` campaign judged by the dsa:p90 and
   mdsa filters (M1's surprise state fitted on the training rows): how many would pass.

The machine may be shared: the load average is recorded before and after each campaign;
compare campaigns within one run.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_regress_tabular.py [--seconds 60] [--quick]

Writes ``benchmarks/results/bench_regress_tabular.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from deepfault._io import write_json
from deepfault.cli import main
from deepfault.fuzz.fidelity import make_fidelity
from deepfault.models import ModelFile, save_model
from deepfault.models.zoo import digits_mlp

REPO = Path(__file__).resolve().parents[1]
HIDDEN = (16, 16)
FIDELITIES = ("dsa:p90", "mdsa", "none")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def write_data(folder: Path, seed: int) -> dict:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer()
    x, y = bunch.data.astype(np.float64), bunch.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    train, held, test = order[:300], order[300:419], order[419:]
    lo, hi = x[train].min(0), x[train].max(0)
    scaled = np.clip((x - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0).astype(np.float32)
    np.savez(folder / "cancer.npz", x=scaled[test], y=y[test], x_train=scaled[train], y_train=y[train],
             bounds=np.array([0.0, 1.0]), class_names=np.array([str(n) for n in bunch.target_names]))
    return {"train": scaled[train], "y_train": y[train], "held": scaled[held], "y_held": y[held],
            "test": scaled[test], "y_test": y[test]}


def _fit(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float, seed: int) -> None:
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    model.train()
    for _ in range(epochs):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()
    model.eval()


def _accuracy(model, x, y) -> float:
    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def train_pair(folder: Path, d: dict, seed: int) -> dict:
    kwargs = {"hidden": list(HIDDEN), "in_features": 30, "num_classes": 2}
    torch.manual_seed(seed)
    m1 = digits_mlp(hidden=HIDDEN, in_features=30, num_classes=2)
    _fit(m1, d["train"], d["y_train"], epochs=300, lr=1e-2, seed=seed)
    m2 = digits_mlp(hidden=HIDDEN, in_features=30, num_classes=2)
    m2.load_state_dict(m1.state_dict())
    _fit(m2, d["held"], d["y_held"], epochs=100, lr=1e-2, seed=seed + 1)  # SUPPLY: trained further
    for name, m in (("m1", m1), ("m2", m2)):
        save_model(folder / f"{name}.pt", ModelFile(m, "digits_mlp", kwargs, "cancer", (0.0, 1.0),
                                                    meta={"input_shape": [30]}))
    return {name: {"train": _accuracy(m, d["train"], d["y_train"]),
                   "test": _accuracy(m, d["test"], d["y_test"])} for name, m in (("m1", m1), ("m2", m2))}


def _seconds_to(timeline: list, final: int) -> dict:
    """Elapsed seconds at which #URF first reached 50%, 90% and 100% of its final value (with two
    classes each seed has at most one unique fault, so #URF saturates: time to it is the yield)."""
    out = {}
    for share in (0.5, 0.9, 1.0):
        hit = [t["elapsed"] for t in timeline if t["urf"] >= share * final]
        out[f"{share:.0%}"] = round(hit[0], 2) if hit and final else None
    return out


def campaign(folder: Path, fidelity: str, seconds: float) -> dict:
    stem = "c-" + fidelity.replace(":", "_")
    argv = ["regress", "--m1", str(folder / "m1.pt"), "--m2", str(folder / "m2.pt"),
            "--dataset", str(folder / "cancer.npz"), "--budget", f"{seconds:g}s", "--inputs-per-step", "16",
            "--store", str(folder / f"{stem}.sqlite"), "--no-progress", "--device", "cpu",
            "--fidelity", fidelity]
    before = _load()
    t0 = time.perf_counter()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv)
    wall = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"regress --fidelity {fidelity} exited {rc}:\n{out.getvalue()}")
    result = json.loads((folder / f"{stem}-drfuzz-seed0-faults.json").read_text())
    with np.load(folder / f"{stem}-drfuzz-seed0-faults.npz", allow_pickle=False) as f:
        faults = f["inputs"]  # the generated faults (initial ones: initial_inputs)
    m, secs = result["metrics"], result["seconds"]
    return {
        "command": "deepfault " + " ".join(argv).replace(str(folder), "DIR"),
        "fidelity": fidelity, "seconds": secs, "wall_seconds": round(wall, 1), "load_before": before,
        "load_after": _load(), "iterations": result["iterations"], "generated": result["generated"],
        "executed": result["queries"], "rf": m["rf"], "urf": m["urf"], "seeds_with_fault": m["seeds"],
        "urf_per_min": round(60 * m["urf"] / secs, 1) if secs else None,
        "seconds_to_first_rf": m.get("seconds_to_first_rf"),
        "seconds_to_urf": _seconds_to(result.get("timeline", []), m["urf"]),
        "rf_per_min": round(60 * m["rf"] / secs, 1) if secs else None,
        "mutants_per_second": round(result["generated"] / secs, 0) if secs else None,
        "rule_usage": {r: u["selected"] for r, u in result["rule_usage"].items()},
        "rule_rf": {r: u["rf"] for r, u in result["rule_usage"].items()},
        "threshold": result.get("trace_checks", {}).get("own", {}).get("threshold"),
        "_faults": faults,
    }


def acceptance(folder: Path, faults: np.ndarray, d: dict) -> dict:
    """How many of the unfiltered campaign's faults each surprise filter would pass."""
    from deepfault.models import open_model

    m1 = open_model(folder / "m1.pt").model
    out = {"faults": len(faults)}
    for spec in ("dsa:p90", "mdsa"):
        fid = make_fidelity(spec, bounds=(0.0, 1.0), model=m1, train_inputs=d["train"], test_inputs=d["test"])
        passed = fid.check(torch.from_numpy(faults)).passed.numpy() if len(faults) else np.zeros(0, bool)
        share = round(float(passed.mean()), 3) if len(faults) else None
        out[spec] = {"passed": int(passed.sum()), "share": share, "threshold": fid.threshold}
    return out


def run(seconds: float, seed: int, folder: Path) -> dict:
    d = write_data(folder, seed)
    accuracy = train_pair(folder, d, seed)
    rows = [campaign(folder, f, seconds) for f in FIDELITIES]
    none = next(r for r in rows if r["fidelity"] == "none")
    accept = acceptance(folder, none["_faults"], d)
    for r in rows:
        r.pop("_faults")
    return {"data": {"name": "sklearn load_breast_cancer, min-max scaled by the training rows",
                     "features": 30, "train": len(d["train"]), "held_out": len(d["held"]),
                     "test": len(d["test"])},
            "models": {"arch": "digits_mlp", "hidden": list(HIDDEN), "accuracy": accuracy,
                       "m2": "M1 trained 100 more epochs on the held-out rows (SUPPLY-like)"},
            "campaigns": rows, "acceptance_of_unfiltered_faults": accept}


def main_cli(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=60.0, help="budget of each campaign")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="10 s campaigns")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bench_regress_tabular.json"))
    args = p.parse_args(argv)
    seconds = 10.0 if args.quick else args.seconds
    with tempfile.TemporaryDirectory() as tmp:
        report = run(seconds, args.seed, Path(tmp))
    report.update({"seconds_per_campaign": seconds, "quick": args.quick,
                   "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count()})
    write_json(args.out, report)
    for r in report["campaigns"]:
        print(f"{r['fidelity']:>8}: {r['urf']} URF ({r['urf_per_min']}/min), {r['rf']} RF, "
              f"{r['iterations']} it, {r['mutants_per_second']} mutants/s, "
              f"load {r['load_before']} -> {r['load_after']}")
    print("accuracy:", report["models"]["accuracy"])
    print("acceptance of the unfiltered faults:", report["acceptance_of_unfiltered_faults"])
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main_cli())
