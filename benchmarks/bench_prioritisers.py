"""Which inputs to look at first: APFD of every prioritiser on a trained MNIST LeNet-5, on the
test set and on the inputs ``run``, ``xplore`` and ``regress`` generate, with the time each takes
per 10,000 inputs (Weiss and Tonella, ISSTA 2022, reproduced on our own model; issue 28).

Prioritisers: the uncertainty scores (confidence, margin, entropy, DeepGini:
``deepfault.coverage.uncertainty``), surprise adequacy (LSA, DSA, MDSA at the layer before the
logits, fitted on the 60,000 training inputs: ``deepfault.coverage.surprise``), and the
coverage-additional (CAM) and coverage-total (CTM) orders of ``deepfault.coverage.rank`` under
NC (t = 0 and 0.5), KMNC (10 sections), NBC and SNAC (profiled on the training split), all on
raw values of the default layers. A seeded random order and the best possible order are the
two ends of the scale.

The input sets and what "failing" means in each:

- ``test``: the 10,000 MNIST test inputs; failing: LeNet-5's prediction differs from the label.
- ``run``: DeepFault's synthesized inputs (``run_deepfault``, Ochiai, k = 10, step 1, L_inf
  distance 0.1, ``--inputs-per-class`` correctly classified inputs of each class); failing: the
  prediction on the synthesized input differs from its original's label.
- ``xplore``: DeepXplore's difference-inducing inputs for LeNet-1 and LeNet-5 (the library's
  defaults: step 0.03, 50 iterations, clipped); failing: LeNet-5's prediction differs from the
  seed's label.
- ``regress``: every mutant DRFuzz executed (recorded as it ran them through M2, the seeds'
  evaluation left out) for M1 = LeNet-5 and M2 = LeNet-5 with 60% of each layer's weights
  pruned by magnitude (no fine-tuning); ranked under M2, the version under test; failing: M2's
  prediction differs from M1's (the regression oracle, M1 standing in for the label: the seeds
  are inputs M1 classifies correctly and the mutants passed DRFuzz's fidelity check).

Timing (on the 10,000 test inputs, the best of ``--repeats``; the three forward passes
interleaved, at least three times each): "scores" is the prioritiser
alone on outputs or activations already computed (for CAM/CTM: the criterion's covered sets
and the greedy order); "with forward" adds the pass that yields them (logits only for the
uncertainty scores; logits and the captured layers for the others). One-off costs (the
surprise fit and the profile over the training split, LSA's per-class KDE, MDSA's covariance)
are reported apart.

Usage:
    .venv/bin/python benchmarks/bench_prioritisers.py [--data-dir ../shared/datasets] [--quick]

Models: ``lenet5-mnist.pt`` and ``lenet1-mnist.pt`` in ``--models-dir`` (default: the user
cache's ``models/``), trained with the zoo recipe when missing. Writes
``benchmarks/results/bench_prioritisers.json`` and prints the table of ``docs/prioritisation.md``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script
from torch import nn

from deepfault._io import user_cache_dir, write_json
from deepfault.core.batches import activations, iterate_batches, predict
from deepfault.coverage import compute_profile
from deepfault.coverage.measure import build_criteria
from deepfault.coverage.rank import apfd, rank_criterion
from deepfault.coverage.surprise import SURPRISE_KINDS, Surprise, fit_surprise
from deepfault.coverage.uncertainty import UNCERTAINTY, list_uncertainty, priority_order, uncertainty_scores
from deepfault.data import load_dataset
from deepfault.fuzz import CampaignConfig, run_campaign
from deepfault.localization.protocol import RunConfig, run_deepfault
from deepfault.models.deploy import prune_weights
from deepfault.models.train import TrainConfig, trained_model
from deepfault.provenance import provenance
from deepfault.xplore import XploreConfig, xplore

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "bench_prioritisers.json"
#: (label, criterion, parameters); every criterion on raw values of the default layers.
COVERAGE = (("NC t=0", "nc", {"threshold": 0.0}), ("NC t=0.5", "nc", {"threshold": 0.5}),
            ("KMNC k=10", "kmnc", {"sections": 10}), ("NBC", "nbc", {}), ("SNAC", "snac", {}))
SETS = ("test", "run", "xplore", "regress")
#: Share of each layer's weights M2 loses (PRUNE without fine-tuning).
PRUNE = 0.6
#: (inputs per class of run, xplore seeds, DRFuzz budget, DRFuzz candidate seeds): full and --quick.
SIZES = {False: (100, 2000, "2000it", 3000), True: (20, 300, "500it", 1000)}


# --------------------------------------------------------------------------- the input sets


def _model(arch: str, data, models_dir: Path) -> nn.Module:
    mf = trained_model(arch, data, models_dir / f"{arch}-mnist.pt", TrainConfig())
    return mf.model.eval()


def run_set(model, data, per_class: int) -> dict:
    config = RunConfig(approach="ochiai", k=10, num_inputs=per_class, seed=0)
    t = time.perf_counter()
    result = run_deepfault(model, data, config)
    reps = [rep for cr in result.classes for rep in cr.repetitions]
    x = np.concatenate([rep.synthesized for rep in reps]).astype(np.float32)
    y = np.concatenate([data.y_test[rep.input_indices] for rep in reps])
    return {"x": x, "labels": y, "seconds": time.perf_counter() - t,
            "how": f"run_deepfault ochiai k=10, {per_class} correctly classified inputs per class, step 1, "
                   "L_inf 0.1, seed 0"}


def xplore_set(lenet1, lenet5, data, seeds: int) -> dict:
    t = time.perf_counter()
    result = xplore([lenet1, lenet5], data.x_test, config=XploreConfig(seeds=seeds, seed=0),
                    bounds=data.bounds, names=["lenet1", "lenet5"], threads=torch.get_num_threads())
    found = result.found
    return {"x": found.inputs.astype(np.float32), "labels": data.y_test[found.seed_index],
            "seconds": time.perf_counter() - t,
            "how": f"xplore lenet1+lenet5, {seeds} seeds, library defaults (step 0.03, 50 iterations, "
                   f"clipped), seed 0: {result.num_found} found"}


#: Inputs M2 received while the campaign ran (a module-level list: the campaign deep-copies M2).
_SEEN: list[torch.Tensor] = []


class _Recording(nn.Module):
    """M2 as the campaign runs it, keeping a copy of every input it is given."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        _SEEN.append(x.detach().contiguous().cpu().clone())
        return self.inner(x)


def _row_keys(x: np.ndarray) -> list[bytes]:
    return [hashlib.sha1(np.ascontiguousarray(r).tobytes()).digest() for r in x]


def regress_set(m1, m2, data, budget: str, max_seeds: int) -> dict:
    _SEEN.clear()
    config = CampaignConfig(strategy="drfuzz", budget=budget, batch=64, seed=0, fidelity="ssim",
                            max_seeds=max_seeds)
    t = time.perf_counter()
    result = run_campaign(m1, _Recording(m2), data.x_test, data.y_test, bounds=data.bounds, config=config)
    seconds = time.perf_counter() - t
    seen = torch.cat(_SEEN).numpy().astype(np.float32)
    _SEEN.clear()
    tests = set(_row_keys(data.x_test.astype(np.float32)))
    keep = np.array([k not in tests for k in _row_keys(seen)], dtype=bool)  # drop the seeds' evaluation
    x = seen[keep]
    labels = predict(m1, x).argmax(1).numpy()  # the oracle: M1's prediction
    m = result.metrics
    return {"x": x, "labels": labels, "seconds": seconds, "queries": result.queries,
            "recorded": int(len(x)), "rf": m.rf, "urf": m.urf,
            "how": f"DRFuzz {budget}, B=64, fidelity ssim (>= 0.99), seed 0, M2 = M1 with {PRUNE:.0%} of "
                   f"each layer's weights pruned, first {max_seeds} test inputs as candidate seeds: "
                   f"{result.queries} executed mutants, #RF {m.rf}, #URF {m.urf}"}


# --------------------------------------------------------------------------- the prioritisers


def _fresh(state: Surprise) -> Surprise:
    """The same fitted state without its caches (KDEs, nearest-neighbour distances)."""
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name != "_cache"}
    return Surprise(**fields)


def _best(fn, repeats: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _forward(model, x, layers):
    """``(logits, values)`` of one pass capturing ``layers``."""
    outs, vals = [], []
    for batch in iterate_batches(model, x, layers=list(layers), transform="raw", batch_size=1024):
        outs.append(batch.outputs.cpu())
        vals.append(batch.values.cpu())
    return torch.cat(outs), torch.cat(vals)


def score_set(model, x, labels, state: Surprise, profile, *, seed: int = 0) -> dict:
    """APFD of every prioritiser on one input set (``model`` judges, ``labels`` are the oracle)."""
    logits, ats = _forward(model, x, state.layers)
    pred = logits.argmax(1).numpy()
    failing = pred != np.asarray(labels)
    out: dict = {"inputs": int(len(x)), "failing": int(failing.sum()), "apfd": {}}
    if not failing.any():
        return out
    n, k = len(x), int(failing.sum())
    out["apfd"]["optimal"] = 1.0 - k / (2 * n)
    rng = np.random.default_rng(seed)
    out["apfd"]["random"] = float(np.mean([apfd(rng.permutation(n), failing) for _ in range(20)]))
    for name in list_uncertainty():
        s = uncertainty_scores(logits, name)
        out["apfd"][name] = apfd(priority_order(s, ascending=UNCERTAINTY.get(name).ascending), failing)
    for kind in SURPRISE_KINDS:
        s = state.score(kind, ats, pred)
        out["apfd"][kind] = apfd(priority_order(s, ascending=False), failing)
    layout, values = activations(model, x, layers=list(profile.layers))
    for label, name, params in COVERAGE:
        crit = build_criteria([name], layout, profile=profile, **params)[0]
        r = rank_criterion(crit, values, failing)
        out["apfd"][f"CAM {label}"] = r.apfd
        out["apfd"][f"CTM {label}"] = r.apfd_total
    return out


def timings(model, x, state: Surprise, profile, repeats: int) -> dict:
    """Seconds per 10,000 inputs: each prioritiser alone, and with the forward pass it needs."""
    scale = 10_000 / len(x)
    t_logits = t_ats = t_values = float("inf")
    for _ in range(max(repeats, 3)):  # interleaved, so that a burst of load hits each pass alike
        t, logits = _best(lambda: predict(model, x, batch_size=1024), 1)
        t_logits = min(t_logits, t)
        t, (_, ats) = _best(lambda: _forward(model, x, state.layers), 1)
        t_ats = min(t_ats, t)
        t, (layout, values) = _best(lambda: activations(model, x, layers=list(profile.layers)), 1)
        t_values = min(t_values, t)
    pred = logits.argmax(1)
    rows: dict = {}
    for name in list_uncertainty():
        t, _ = _best(lambda name=name: priority_order(uncertainty_scores(logits, name),
                                                      ascending=UNCERTAINTY.get(name).ascending), repeats)
        rows[name] = {"scores_s": t * scale, "with_forward_s": (t + t_logits) * scale}
    one_off = {}
    for kind in SURPRISE_KINDS:
        best = float("inf")
        for _ in range(repeats):  # a fresh state each time: nothing cached from an earlier call
            st = _fresh(state)
            t0 = time.perf_counter()
            st.score(kind, ats[:10], pred[:10])  # per-class KDE / covariance: fitted once, not per input
            one_off[kind] = time.perf_counter() - t0
            t0 = time.perf_counter()
            priority_order(st.score(kind, ats, pred), ascending=False)
            best = min(best, time.perf_counter() - t0)
        rows[kind] = {"scores_s": best * scale, "with_forward_s": (best + t_ats) * scale}
    for label, name, params in COVERAGE:
        crit = build_criteria([name], layout, profile=profile, **params)[0]
        failing = np.zeros(len(x), dtype=bool)
        t, _ = _best(lambda crit=crit, failing=failing: rank_criterion(crit, values, failing), repeats)
        row = {"scores_s": t * scale, "with_forward_s": (t + t_values) * scale}
        rows[f"CAM {label}"] = row
        rows[f"CTM {label}"] = row  # one call computes both orders
    return {"per_10k": rows, "forward_logits_s": t_logits * scale,
            "forward_with_penultimate_s": t_ats * scale,
            "forward_with_default_layers_s": t_values * scale, "one_off_s": one_off}


# --------------------------------------------------------------------------- the table


def table(result: dict) -> str:
    sets = [s for s in SETS if s in result["sets"]]
    head = ["prioritiser", *(f"APFD {s}" for s in sets), "s / 10k (scores)", "s / 10k (with forward)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    counts = [f"{result['sets'][s]['failing']} of {result['sets'][s]['inputs']} fail" for s in sets]
    sizes = ["", *counts, "", ""]
    lines.append("| " + " | ".join(sizes) + " |")
    names = list(result["sets"]["test"]["apfd"])
    for name in names:
        cells = [name]
        for s in sets:
            v = result["sets"][s]["apfd"].get(name)
            cells.append("-" if v is None else f"{v:.3f}")
        t = result["timing"]["per_10k"].get(name)
        cells += ["-", "-"] if t is None else [f"{t['scores_s']:.3g}", f"{t['with_forward_s']:.3g}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    ap.add_argument("--models-dir", default=None, help="default: the user cache's models/")
    ap.add_argument("--quick", action="store_true", help="smaller generated sets and one repeat")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    repeats = args.repeats or (1 if args.quick else 3)
    per_class, seeds, budget, max_seeds = SIZES[args.quick]
    busy = busy_fraction()
    load0 = os.getloadavg()
    t_all = time.perf_counter()
    data = load_dataset("mnist", data_dir=args.data_dir)
    models_dir = Path(args.models_dir) if args.models_dir else user_cache_dir() / "models"
    lenet5, lenet1 = _model("lenet5", data, models_dir), _model("lenet1", data, models_dir)
    pruned = prune_weights(copy.deepcopy(lenet5), amount=PRUNE).eval()

    fits = {}
    for name, m in (("lenet5", lenet5), ("pruned", pruned)):
        t = time.perf_counter()
        state = fit_surprise(m, data.x_train)
        t_fit = time.perf_counter() - t
        t = time.perf_counter()
        profile = compute_profile(m, data.x_train)
        t_profile = time.perf_counter() - t
        fits[name] = (state, profile, {"surprise_fit_s": t_fit, "profile_s": t_profile})
        print(f"{name}: surprise fit {t_fit:.1f} s (layer {state.layers}), profile {t_profile:.1f} s",
              flush=True)

    generated = {"test": {"x": data.x_test, "labels": data.y_test, "seconds": 0.0, "how": "MNIST test split"}}
    generated["run"] = run_set(lenet5, data, per_class)
    generated["xplore"] = xplore_set(lenet1, lenet5, data, seeds)
    generated["regress"] = regress_set(lenet5, pruned, data, budget, max_seeds)
    for name in ("run", "xplore", "regress"):
        g = generated[name]
        print(f"{name}: {len(g['x'])} inputs in {g['seconds']:.1f} s ({g['how']})", flush=True)

    sets = {}
    for name, g in generated.items():
        judge = "pruned" if name == "regress" else "lenet5"
        state, profile, _ = fits[judge]
        model = pruned if judge == "pruned" else lenet5
        sets[name] = {**score_set(model, g["x"], g["labels"], state, profile), "model": judge,
                      "how": g["how"], "generation_s": g["seconds"],
                      **{k: g[k] for k in ("queries", "recorded", "rf", "urf") if k in g}}
        print(f"{name}: {sets[name]['failing']} of {sets[name]['inputs']} fail", flush=True)
    state, profile, _ = fits["lenet5"]
    timing = timings(lenet5, data.x_test, state, profile, repeats)
    result = {
        "provenance": {**provenance("cpu", argv=sys.argv), "threads": torch.get_num_threads(),
                       "background_cpu_busy_fraction": busy, "loadavg_start": load0,
                       "loadavg_end": os.getloadavg()},
        "quick": args.quick, "repeats": repeats,
        "models": {"lenet5_test_accuracy": float((predict(lenet5, data.x_test).argmax(1).numpy()
                                                  == data.y_test).mean()),
                   "pruned_test_accuracy": float((predict(pruned, data.x_test).argmax(1).numpy()
                                                  == data.y_test).mean())},
        "fits": {k: v[2] for k, v in fits.items()},
        "sets": sets, "timing": timing, "seconds": time.perf_counter() - t_all,
    }
    result["table"] = table(result)
    write_json(args.out, result)
    print(result["table"])
    print(f"wrote {args.out} ({result['seconds']:.0f} s; load average {load0} -> {os.getloadavg()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
