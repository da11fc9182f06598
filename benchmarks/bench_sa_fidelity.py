"""The surprise-adequacy fidelity filter (``regress --fidelity dsa``) against the default DCGAN
discriminator, on an MNIST SUPPLY pair (issue 28, "a realism check that costs nothing").

Measured in one run:

1. **The threshold.** M1's surprise state fitted on the 60,000 training images (timed, cold),
   and the distribution of DSA, LSA and MDSA over the 10,000 test images (realistic by
   definition): the percentiles the ``dsa:pQ`` rule reads, and how many test images each
   keeps.
2. **Agreement on one set of mutants.** From the first ``--seeds`` test images M1 gets
   right, one mutant per seed and DRFuzz rule (15 per seed), each the last of a chain of 1 to
   3 random rules (seeded), as a campaign's queue holds mutants of mutants. Each filter judges
   every mutant: DSA (and LSA, MDSA) ``<=`` the 99th percentile of the test images' scores,
   and the discriminator's "scores at least its seed". Both accept / both reject / each alone,
   Cohen's kappa, acceptance per rule and per chain length, and, for the threshold choice,
   the share of mutants DSA keeps at other percentiles.
3. **A grid** (PNG) of mutants DSA accepts and the discriminator rejects, and the reverse,
   each under its seed.
4. **Yield.** ``run_campaign`` (DRFuzz, ``B = 64``, seed 0, all test images as candidate
   seeds) for ``--seconds`` each with ``fidelity="dsa"``, ``"discriminator"``, ``"mdsa"``,
   ``"lsa"``, ``"dsa:p99"`` and ``"none"`` (``--fidelities``): #URF, #URF per minute, per
   1,000 queries, mutants per second, the time per phase, and how many of its generated
   faults (and unique ones) the default dsa and the discriminator would have passed.

The mutant set also says how often each filter passes the mutants that are regression faults
(M1 right, M2 wrong) against all mutants.

The machine may be shared: the load average is recorded before and after each part; the
two campaigns run one after the other (compare them within one run).

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_sa_fidelity.py --m1 M1.pt --m2 M2.pt [--quick]

Writes ``benchmarks/results/bench_sa_fidelity.json`` and ``docs/results/sa-fidelity/disagreement.png``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch

from deepfault._io import write_json
from deepfault.coverage.surprise import SURPRISE_KINDS, fit_surprise, surprise_scores
from deepfault.data import load_dataset
from deepfault.fuzz.campaign import CampaignConfig, run_campaign
from deepfault.fuzz.campaign.strategies import DRFUZZ_RULES
from deepfault.fuzz.fidelity import make_fidelity
from deepfault.fuzz.fidelity.surprise import DEFAULT_PERCENTILE, percentile_threshold
from deepfault.fuzz.mutation.rules import get_rule
from deepfault.models import open_model
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
PERCENTILES = (50.0, 70.0, 80.0, 85.0, 90.0, 95.0, 97.5, 99.0, 99.9, 100.0)


def load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def mutant_set(x: torch.Tensor, *, seed: int, bounds):
    """One mutant per (seed image, rule): a chain of 0-2 random rules, then that rule.

    Returns ``(mutants, seed_row, rule, depth)``.
    """
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    n, k = len(x), len(DRFUZZ_RULES)
    base = x.repeat_interleave(k, 0)
    last = np.tile(np.arange(k), n)
    depth = rng.integers(1, 4, size=n * k)
    cur = base.clone()
    for step in range(3):  # a chain of d rules: random ones at steps 3 - d .. 1, the named one at step 2
        if step < 2:
            todo = np.flatnonzero(depth >= 3 - step)
            rules = rng.integers(0, k, size=len(todo))
        else:
            todo, rules = np.arange(n * k), last
        for u in np.unique(rules):
            rows = torch.as_tensor(todo[rules == u])
            cur[rows], _ = get_rule(DRFUZZ_RULES[u])(cur[rows], generator=g, bounds=bounds)
    return cur, np.repeat(np.arange(n), k), last, depth


def kept(scores: np.ndarray, rf: np.ndarray, t: float) -> dict:
    """The share of all mutants, and of the regression faults among them, with a score ``<= t``."""
    faults = float((scores[rf] <= t).mean()) if rf.any() else None
    return {"all": float((scores <= t).mean()), "faults": faults}


def youden(real: np.ndarray, unreal: np.ndarray, t: float) -> float:
    """Share of the unrealistic inputs rejected at ``t`` minus that of the real ones."""
    return float((unreal > t).mean() - (real > t).mean())


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    n = len(a)
    both, neither = int((a & b).sum()), int((~a & ~b).sum())
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    po = (both + neither) / n
    pe = (a.mean() * b.mean()) + ((1 - a.mean()) * (1 - b.mean()))
    return {"both_accept": both, "both_reject": neither, "first_only": only_a, "second_only": only_b,
            "agree_share": po, "cohen_kappa": (po - pe) / (1 - pe) if pe < 1 else 1.0}


def grid(path: Path, seeds_a, muts_a, notes_a, seeds_b, muts_b, notes_b) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = max(len(muts_a), len(muts_b), 1)
    fig, axes = plt.subplots(4, cols, figsize=(1.1 * cols, 5.4), squeeze=False)
    rows = ((seeds_a, None), (muts_a, notes_a), (seeds_b, None), (muts_b, notes_b))
    for r, (imgs, notes) in enumerate(rows):
        for c in range(cols):
            ax = axes[r][c]
            ax.axis("off")
            if c < len(imgs):
                ax.imshow(imgs[c][0], cmap="gray", vmin=0, vmax=1)
                if notes is not None:
                    ax.set_title(notes[c], fontsize=5)
    fig.text(0.01, 0.97, "top: DSA accepts, discriminator rejects (seed above mutant)", fontsize=7)
    fig.text(0.01, 0.49, "bottom: discriminator accepts, DSA rejects (seed above mutant)", fontsize=7)
    fig.subplots_adjust(left=0.01, right=0.99, top=0.93, bottom=0.01, hspace=0.45, wspace=0.05)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def yield_run(m1, m2, data, fidelity: str, seconds: float, judges: dict) -> dict:
    before = load()
    t = time.perf_counter()
    r = run_campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                     train_inputs=data.x_train,
                     config=CampaignConfig(budget=f"{seconds:g}s", batch=64, seed=0, fidelity=fidelity))
    m, minutes = r.metrics, r.seconds / 60
    rf = r.faults.select(r.faults.kind == 0)
    gen = ~rf.initial
    inputs = torch.from_numpy(r.rf_inputs[gen])
    seeds = torch.as_tensor(data.x_test[rf.root[gen]])
    other = {}
    for name, judge in judges.items():  # the generated faults that each filter would have passed
        if len(inputs) == 0:
            other[name] = None
            continue
        ok = judge(inputs, seeds).numpy()
        key = np.stack([rf.root[gen], rf.y1[gen], rf.y2[gen]], axis=1)[ok]
        other[name] = {"rf_share": float(ok.mean()), "urf": len({tuple(k) for k in key.tolist()})}
    return {"fidelity": fidelity, "seconds": r.seconds, "setup_seconds": r.setup_seconds,
            "wall_seconds": time.perf_counter() - t, "iterations": r.iterations, "generated": r.generated,
            "passed": r.passed, "pass_share": r.passed / max(r.generated, 1), "queries": r.queries,
            "new_rf": m.rf, "new_urf": m.urf, "urf_per_minute": m.urf / minutes,
            "urf_per_1000_queries": 1000 * m.urf / max(r.queries, 1),
            "mutants_per_second": r.generated / r.seconds, "timings": r.timings,
            "faults_passing": other, "trace_checks": r.trace_checks,
            "load_average": {"before": before, "after": load()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m1", default="scenarios/supply-lenet5-mnist-m1.pt")
    ap.add_argument("--m2", default="scenarios/supply-lenet5-mnist-m2.pt")
    ap.add_argument("--seconds", type=float, default=90.0, help="fuzzing seconds per campaign")
    ap.add_argument("--seeds", type=int, default=None,
                    help="seed images of the common mutant set, x 15 rules (default 400; --quick 100)")
    ap.add_argument("--quick", action="store_true", help="20 s campaigns, 100 seeds")
    ap.add_argument("--skip-yield", action="store_true", help="leave out the campaigns")
    ap.add_argument("--fidelities", default="dsa,discriminator,mdsa,lsa,dsa:p99,none",
                    help="the campaigns' --fidelity specs, one after the other")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/bench_sa_fidelity.json"))
    ap.add_argument("--png", default=str(REPO / "docs/results/sa-fidelity/disagreement.png"))
    args = ap.parse_args()
    if args.quick:
        args.seconds = 20.0
    args.seeds = args.seeds or (100 if args.quick else 400)
    torch.set_num_threads(args.threads)
    data = load_dataset("mnist", data_dir=args.data_dir)
    m1, m2 = open_model(args.m1).model.eval(), open_model(args.m2).model.eval()
    out: dict = {"pair": f"{args.m1} -> {args.m2}", "threads": args.threads, "quick": args.quick,
                 "cpus": os.cpu_count(), "load_average": {"start": load()}}

    # 1. the threshold: the test images' scores
    t = time.perf_counter()
    state = fit_surprise(m1, data.x_train)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    test = surprise_scores(m1, data.x_test, state, kinds=SURPRISE_KINDS)
    score_s = time.perf_counter() - t
    thresholds = {k: percentile_threshold(test[k], DEFAULT_PERCENTILE) for k in SURPRISE_KINDS}
    # known unrealistic inputs, as the discriminator's quality report makes them: uniform noise,
    # and test images with 30% (and 10%) of their pixels replaced by noise
    qgen = torch.Generator().manual_seed(0)
    real = torch.as_tensor(data.x_test[:1000])
    lo, hi = data.bounds
    noise = torch.rand(real.shape, generator=qgen) * (hi - lo) + lo
    unreal = {"uniform noise": noise}
    for share in (0.3, 0.1):
        mask = torch.rand(real.shape, generator=qgen) < share
        unreal[f"{share:.0%} pixels noise"] = torch.where(mask, noise, real)
    unreal_scores = {name: surprise_scores(m1, v, state, kinds=SURPRISE_KINDS) for name, v in unreal.items()}
    out["threshold"] = {
        "layers": list(state.layers), "neurons": state.num_neurons, "train_inputs": state.num_inputs,
        "fit_seconds": fit_s, "test_scoring_seconds_all_three": score_s,
        "test_percentiles": {k: {f"p{q:g}": percentile_threshold(test[k], q) for q in PERCENTILES}
                             for k in SURPRISE_KINDS},
        "default_percentile": DEFAULT_PERCENTILE, "default_threshold": thresholds,
        "unrealistic_rejected_share": {
            name: {k: {f"p{q:g}": float((sc[k] > percentile_threshold(test[k], q)).mean())
                       for q in PERCENTILES[:-1]} for k in SURPRISE_KINDS}
            for name, sc in unreal_scores.items()},
        # Youden's J of "reject" between real test images and 30%-noise ones: rejected share of
        # the noisy ones minus that of the real ones
        "youden_j_30pct_noise": {
            k: {f"p{q:g}": youden(test[k], unreal_scores["30% pixels noise"][k],
                                  percentile_threshold(test[k], q))
                for q in PERCENTILES[:-1]} for k in SURPRISE_KINDS},
        "load_average": load(),
    }
    pct = out["threshold"]["test_percentiles"]["dsa"]
    print(f"fit {fit_s:.1f} s on {state.num_inputs} training images ({state.layers}, {state.num_neurons} "
          f"neurons); test scores {score_s:.1f} s; DSA test percentiles "
          + ", ".join(f"{q}: {v:.3f}" for q, v in pct.items()), flush=True)

    # 2. one set of mutants, both filters
    with torch.no_grad():
        right = np.flatnonzero(m1(torch.as_tensor(data.x_test)).argmax(1).numpy() == data.y_test)
    seeds = torch.as_tensor(data.x_test[right[: args.seeds]])
    muts, owner, rule, depth = mutant_set(seeds, seed=0, bounds=data.bounds)
    t = time.perf_counter()
    sa = surprise_scores(m1, muts, state, kinds=SURPRISE_KINDS)
    sa_s = time.perf_counter() - t
    accept = {k: sa[k] <= thresholds[k] for k in SURPRISE_KINDS}
    t = time.perf_counter()
    disc = make_fidelity("discriminator", bounds=data.bounds, dataset="mnist")
    ref = disc.reference(seeds)
    dcheck = disc.check(muts, ref[torch.as_tensor(owner)])
    disc_s = time.perf_counter() - t
    accept["discriminator"] = dcheck.passed.numpy()
    with torch.no_grad():  # which mutants are regression faults (M1 right, M2 wrong)?
        label = torch.as_tensor(data.y_test[right[: args.seeds]])[torch.as_tensor(owner)]
        y1 = torch.cat([m1(muts[i : i + 2048]).argmax(1) for i in range(0, len(muts), 2048)])
        y2 = torch.cat([m2(muts[i : i + 2048]).argmax(1) for i in range(0, len(muts), 2048)])
    rf = ((y1 == label) & (y2 != label)).numpy()
    dsa_test = test["dsa"]
    out["agreement"] = {
        "mutants": len(muts), "seeds": len(seeds),
        "seconds": {"surprise_all_three": sa_s, "discriminator": disc_s},
        "accept_share": {k: float(v.mean()) for k, v in accept.items()},
        "dsa_vs_discriminator": agreement(accept["dsa"], accept["discriminator"]),
        "lsa_vs_discriminator": agreement(accept["lsa"], accept["discriminator"]),
        "mdsa_vs_discriminator": agreement(accept["mdsa"], accept["discriminator"]),
        "dsa_vs_mdsa": agreement(accept["dsa"], accept["mdsa"]),
        "regression_faults": int(rf.sum()),
        "accept_share_of_faults": {k: float(v[rf].mean()) if rf.any() else None for k, v in accept.items()},
        "median_dsa": {"faults": float(np.median(sa["dsa"][rf])) if rf.any() else None,
                       "other_mutants": float(np.median(sa["dsa"][~rf]))},
        # the trade-off of the threshold: the share of all mutants, and of the faults among
        # them, that each surprise kind keeps at a percentile of the test images' scores
        "accept_share_at": {k: {f"p{q:g}": kept(sa[k], rf, percentile_threshold(test[k], q))
                                for q in (85.0, 90.0, 95.0, 97.5, 99.0, 99.9)} for k in SURPRISE_KINDS},
        "per_rule": {r: {k: float(v[rule == i].mean()) for k, v in accept.items()}
                     for i, r in enumerate(DRFUZZ_RULES)},
        "per_depth": {int(d): {k: float(v[depth == d].mean()) for k, v in accept.items()} for d in (1, 2, 3)},
        "dsa_accept_share_at": {f"p{q:g}": float((sa["dsa"] <= percentile_threshold(dsa_test, q)).mean())
                                for q in PERCENTILES[:-1]},
        "mutant_dsa_percentiles": {f"p{q:g}": float(np.percentile(sa["dsa"], q)) for q in (10, 50, 90)},
        "load_average": load(),
    }
    a = out["agreement"]["dsa_vs_discriminator"]
    print(f"{len(muts)} mutants: DSA accepts {accept['dsa'].mean():.1%}, discriminator "
          f"{accept['discriminator'].mean():.1%}; "
          f"both {a['both_accept']}, neither {a['both_reject']}, DSA only {a['first_only']}, "
          f"discriminator only {a['second_only']}; kappa {a['cohen_kappa']:.2f}", flush=True)

    # 3. the grid: random examples of each disagreement (seeded)
    rng = np.random.default_rng(1)
    picks = []
    for mask in (accept["dsa"] & ~accept["discriminator"], ~accept["dsa"] & accept["discriminator"]):
        rows = np.flatnonzero(mask)
        rows = np.sort(rng.choice(rows, size=min(10, len(rows)), replace=False)) if len(rows) else rows
        notes = [f"{DRFUZZ_RULES[rule[i]]}\nDSA {sa['dsa'][i]:.2f}\nD {dcheck.scores[i]:.2f}"
                 f"{'>=' if accept['discriminator'][i] else '<'}{ref[owner[i]]:.2f}" for i in rows]
        picks.append((seeds[owner[rows]].numpy(), muts[rows].numpy(), notes))
        out.setdefault("grid_examples", []).append([{"rule": DRFUZZ_RULES[rule[i]], "depth": int(depth[i]),
                                                     "dsa": float(sa["dsa"][i]),
                                                     "disc": float(dcheck.scores[i]),
                                                     "disc_seed": float(ref[owner[i]])} for i in rows])
    grid(Path(args.png), *picks[0], *picks[1])
    out["grid"] = str(Path(args.png).relative_to(REPO)) if Path(args.png).is_relative_to(REPO) else args.png

    # 4. yield
    if not args.skip_yield:
        sa_check = make_fidelity("dsa", bounds=data.bounds, model=m1, train_inputs=data.x_train,
                                 test_inputs=data.x_test)
        judges = {"dsa": lambda x, s: sa_check.check(x).passed,
                  "discriminator": lambda x, s: disc.check(x, disc.reference(s)).passed}
        out["yield"] = [yield_run(m1, m2, data, f, args.seconds, judges) for f in args.fidelities.split(",")]
        for row in out["yield"]:
            print(f"{row['fidelity']:14s}: new #URF {row['new_urf']:5d} ({row['urf_per_minute']:7.1f}/min, "
                  f"{row['urf_per_1000_queries']:5.2f} per 1,000 queries), {row['iterations']} iterations, "
                  f"{row['pass_share']:.0%} of {row['generated']} mutants passed, "
                  f"load {row['load_average']['before'][0]} -> {row['load_average']['after'][0]}", flush=True)
        rate = {row["fidelity"]: row["urf_per_minute"] for row in out["yield"]}
        if {"dsa", "discriminator"} <= set(rate):
            out["dsa_over_discriminator_urf_per_minute"] = rate["dsa"] / max(rate["discriminator"], 1e-9)
    out["load_average"]["end"] = load()
    out["provenance"] = provenance("cpu")
    write_json(args.out, out)
    print(f"wrote {args.out} and {args.png}")


if __name__ == "__main__":
    main()
