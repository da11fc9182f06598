"""Yield of this project's DRFuzz: new unique regression faults per minute and per 1,000 model queries.

The published figure (spec/drfuzz.md section 11): the published DRFuzz code, its SSIM path
(range 65535), on its own MNIST LeNet-5 SUPPLY pair, 2 minutes, seed 0, on this 2-core
machine while quiet: 583 new #URF, about 291 per minute. The goal of issue 17 is ten times
that with ``--fidelity ssim-compat`` (the same filter, the same loop structure, batched).

Measured in one run, one after the other, on the same pair and the same thread budget:

1. DRFuzz, ``ssim-compat``, ``B = 64`` (the batched loop);
2. DRFuzz, ``ssim-compat``, ``B = 1`` (one input per step: the published algorithm's
   schedule in this implementation; the same-run reference, since the published code
   cannot run here);
3. DRFuzz with the default fidelity, the data set's discriminator, ``B = 64``.

The published code's pair is not available offline, so the pair is the user's (default: the
SUPPLY pair ``deepfault scenario supply --arch lenet5 --dataset mnist`` writes); its M1 is
far more accurate (98.8% against the published 85.9%), so it has fewer faults to find:
the ratio to 291 per minute is a lower bound of the speed-up, not a like-for-like figure.

Usage:
    .venv/bin/python benchmarks/bench_drfuzz_yield.py --m1 M1 --m2 M2 [--minutes 2] [--threads 1]

Writes ``benchmarks/results/bench_drfuzz_yield.json`` and prints a table.

``--check-order`` (issue 29) measures instead the default fidelity (the discriminator, B = 64)
three ways (``VARIANTS``): the published order of checks scoring every row (``every-row``:
every changed mutant judged before execution, as before duplicates were scored once), the
published order with each distinct mutant scored once (``before``: the default), and the
lazy order (``lazy``: the models first, the discriminator only where its verdict matters),
side by side, on one and on two threads, at the same iteration budget and seed, each
``--repeats`` times (3) in a rotated order, reporting the median run: mutants per
second, #URF per minute, the ratios, how many mutants the discriminator judged and ran, and
where the time went; and it checks that all three found the same faults, queue and rule
statistics. Then (``--needed``, 6,400 iterations by default, 0 to skip) it counts, in a
longer lazy campaign, the verdicts against the changed mutants in each fifth of the run: what
the lazy order, which skips only verdicts that provably change nothing, still has to judge.
``--quick`` runs 128 iterations instead of 1,280. Writes
``benchmarks/results/bench_drfuzz_check_order.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from deepfault._io import write_json
from deepfault.data import load_dataset
from deepfault.fuzz.campaign import CampaignConfig, run_campaign
from deepfault.models import open_model
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
#: Spec section 11: the published code on its SUPPLY pair, 2 minutes: 583 new #URF.
PUBLISHED_URF_PER_MINUTE = 583 / 2.0


def measure(m1, m2, data, *, fidelity: str, batch: int, minutes: float) -> dict:
    t = time.perf_counter()
    r = run_campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                     config=CampaignConfig(budget=f"{minutes * 60:g}s", batch=batch, seed=0,
                                           fidelity=fidelity))
    m, minutes_run = r.metrics, r.seconds / 60
    return {"fidelity": fidelity, "batch": batch, "seconds": r.seconds, "setup_seconds": r.setup_seconds,
            "wall_seconds": time.perf_counter() - t, "iterations": r.iterations, "generated": r.generated,
            "queries": r.queries, "new_rf": m.rf, "new_urf": m.urf, "initial_rf": m.initial_rf,
            "urf_per_minute": m.urf / minutes_run, "urf_per_1000_queries": 1000 * m.urf / max(r.queries, 1),
            "mutants_per_second": r.generated / r.seconds, "executed_per_second": r.queries / r.seconds}


def _same(a, b) -> dict[str, bool]:
    """Which parts of two campaigns (the same budget and seed) are identical."""
    import numpy as np

    ra, rb = a.result(), b.result()
    fa, fb = ra.faults.to_arrays(), rb.faults.to_arrays()
    qa, qb = a.parts.queue.corpus, b.parts.queue.corpus
    n = len(qa)
    fault_keys = [k for k in fa if k not in ("elapsed", "queries")]  # wall time; model executions
    queue_same = len(qa) == len(qb) and all(
        np.array_equal(qa.static[k][:n], qb.static[k][:n], equal_nan=True) for k in qa.static)
    return {
        "faults": all(np.array_equal(fa[k], fb[k], equal_nan=True) for k in fault_keys),
        "rf_data": all(np.array_equal(getattr(ra, k), getattr(rb, k))
                       for k in ("rf_inputs", "rf_p1", "rf_p2")),
        "queue": queue_same,
        "rule_usage": ra.rule_usage == rb.rule_usage,
        "diversity_table": bool(np.array_equal(a.parts.keep.table.table, b.parts.keep.table.table)),
        "bans": bool(np.array_equal(qa.banned[:n], qb.banned[:n])),
    }


#: The variants ``--check-order`` runs: (name, order of checks, the discriminator's ``dedupe``).
#: ``every-row`` is the published order as it was before duplicates were scored once (it
#: skips the unchanged mutants already: those were judged before too, 7.4% of the mutants).
VARIANTS = (("every-row", "before", False), ("before", "before", True), ("lazy", "lazy", True))


def check_order_runs(m1, m2, data, *, iterations: int, threads: int, repeats: int) -> dict:
    """The orders of checks at one thread budget (module docstring), each run ``repeats``
    times, the variants' order rotated from one repeat to the next; a variant's figures are
    those of its median run.
    """
    from deepfault.fuzz.campaign import Campaign

    def campaign(order: str, dedupe: bool, budget: str, seed: int) -> Campaign:
        c = Campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                     config=CampaignConfig(budget=budget, inputs_per_step=64, seed=seed, check_order=order))
        c.setup()  # scores the seeds (not part of the campaign's time), makes the check
        c.parts.checks.own.dedupe = dedupe
        return c

    torch.set_num_threads(threads)
    for _, order, dedupe in VARIANTS:  # warm-up: oneDNN builds its kernels on the first calls
        campaign(order, dedupe, "64it", 1).run()
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in VARIANTS}
    first: dict = {}  # each variant's first campaign, compared with every-row's
    for rep in range(repeats):
        for name, order, dedupe in VARIANTS[rep % 3:] + VARIANTS[:rep % 3]:
            load = os.getloadavg()
            c = campaign(order, dedupe, f"{iterations}it", 0)
            check, counters = c.parts.checks.own, c.parts.counters
            evaluated_before = check.evaluated  # the seeds' scores, taken when the campaign is set up
            c.run()
            r = c.result()
            row = {
                "order": order, "dedupe": dedupe, "repeat": rep,
                "seconds": r.seconds, "iterations": r.iterations, "generated": r.generated,
                "queries": r.queries,
                "judged_by_discriminator": counters.scored,
                "run_through_discriminator": check.evaluated - evaluated_before,
                "new_urf": r.metrics.urf, "new_rf": r.metrics.rf,
                "mutants_per_second": r.generated / r.seconds,
                "urf_per_minute": r.metrics.urf / (r.seconds / 60),
                "timings": {k: round(v, 3) for k, v in r.timings.items()},
                "load_average": [load, os.getloadavg()],
            }
            runs[name].append(row)
            first.setdefault(name, c)
            print(f"threads {threads} repeat {rep} {name:9s}: {row['mutants_per_second']:7.0f} mutants/s, "
                  f"{row['urf_per_minute']:7.1f} #URF/min ({r.metrics.urf} in {r.seconds:.1f} s), "
                  f"{counters.scored} judged, {row['run_through_discriminator']} run through the "
                  "discriminator, "
                  f"check {row['timings'].get('check', 0):.2f} s", flush=True)
    rows = {name: sorted(rs, key=lambda row: row["seconds"])[len(rs) // 2] for name, rs in runs.items()}
    base = rows["every-row"]
    same = {name: _same(first["every-row"], first[name]) for name in rows if name != "every-row"}
    speed = {name: base["seconds"] / rows[name]["seconds"] for name in rows}
    ratio = {name: rows[name]["urf_per_minute"] / max(base["urf_per_minute"], 1e-9) for name in rows}
    repeatable = all(len({(row["new_urf"], row["new_rf"], row["run_through_discriminator"])
                          for row in rs}) == 1 for rs in runs.values())
    print(f"threads {threads}: median speed against every-row "
          f"{', '.join(f'{k} {v:.2f}x' for k, v in speed.items())}; identical: {same}; "
          f"repeats alike: {repeatable}", flush=True)
    return {"threads": threads, "runs": rows, "all_runs": runs, "identical": same,
            "repeats_alike": repeatable, "urf_per_minute_ratio": ratio, "speed_ratio": speed}


def verdicts_needed(m1, m2, data, *, iterations: int, parts: int = 5) -> dict:
    """The lazy order's verdicts against the changed mutants, per part of a long campaign."""
    from deepfault.fuzz.campaign import Campaign

    c = Campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                 config=CampaignConfig(budget=f"{iterations}it", inputs_per_step=64, seed=0,
                                       check_order="lazy"))
    c.setup()
    steps = [(0, 0, 0)]  # (iterations, verdicts, changed mutants) after each step
    counters = c.parts.counters
    c.run(progress=lambda p: steps.append((counters.iterations, counters.scored, counters.queries)))
    rows = []
    for i in range(parts):
        lo = next(s for s in reversed(steps) if s[0] <= iterations * i // parts)
        hi = next(s for s in reversed(steps) if s[0] <= iterations * (i + 1) // parts)
        rows.append({"iterations": [lo[0], hi[0]], "judged": hi[1] - lo[1], "changed": hi[2] - lo[2],
                     "share": (hi[1] - lo[1]) / max(hi[2] - lo[2], 1)})
        print(f"iterations {lo[0]:6d}-{hi[0]:6d}: judged {rows[-1]['judged']:7d} of {rows[-1]['changed']:7d} "
              f"changed mutants ({100 * rows[-1]['share']:.0f}%)", flush=True)
    total = {"judged": counters.scored, "changed": counters.queries,
             "share": counters.scored / max(counters.queries, 1)}
    print(f"all: judged {counters.scored} of {counters.queries} changed mutants "
          f"({100 * total['share']:.0f}%), "
          f"{counters.generated} generated", flush=True)
    return {"iterations": iterations, "generated": counters.generated, "parts": rows, "total": total}


def main_check_order(args) -> None:
    data = load_dataset("mnist", data_dir=args.data_dir)
    m1, m2 = open_model(args.m1).model.eval(), open_model(args.m2).model.eval()
    iterations = 128 if args.quick else args.iterations
    load_before = os.getloadavg()
    results = [check_order_runs(m1, m2, data, iterations=iterations, threads=t, repeats=args.repeats)
               for t in (1, 2)]
    needed = None if args.needed == 0 else verdicts_needed(m1, m2, data, iterations=args.needed)
    out = {"pair": f"{args.m1} -> {args.m2}", "iterations": iterations, "batch": 64, "seed": 0,
           "fidelity": "discriminator", "results": results, "verdicts_needed": needed,
           "all_identical": all(all(v.values()) for r in results for v in r["identical"].values())
           and all(r["repeats_alike"] for r in results), "repeats": args.repeats,
           "load_average": {"before": load_before, "after": os.getloadavg()}, "cpus": os.cpu_count(),
           "provenance": provenance("cpu")}
    path = args.out or str(REPO / "benchmarks/results/bench_drfuzz_check_order.json")
    write_json(path, out)
    print(f"identical in every run: {out['all_identical']}; load average {load_before[0]:.1f} -> "
          f"{out['load_average']['after'][0]:.1f} on {os.cpu_count()} CPUs; wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m1", default="scenarios/supply-lenet5-mnist-m1.pt")
    ap.add_argument("--m2", default="scenarios/supply-lenet5-mnist-m2.pt")
    ap.add_argument("--minutes", type=float, default=2.0, help="fuzzing minutes per run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--skip-discriminator", action="store_true")
    ap.add_argument("--skip-b1", action="store_true", help="leave out the B = 1 run")
    ap.add_argument("--out", default=None, help="the JSON file (default: benchmarks/results/...)")
    ap.add_argument("--check-order", action="store_true",
                    help="the discriminator in the published and the lazy order of checks, side by side")
    ap.add_argument("--iterations", type=int, default=1280, help="--check-order: iterations per run")
    ap.add_argument("--quick", action="store_true", help="--check-order: 128 iterations per run")
    ap.add_argument("--repeats", type=int, default=3,
                    help="--check-order: runs of each variant (rotated order; the median is reported)")
    ap.add_argument("--needed", type=int, default=6400,
                    help="--check-order: iterations of a lazy campaign whose verdicts per changed mutant "
                         "are counted per fifth (0: skip)")
    args = ap.parse_args()
    if args.check_order:
        main_check_order(args)
        return
    args.out = args.out or str(REPO / "benchmarks/results/bench_drfuzz_yield.json")
    torch.set_num_threads(args.threads)
    data = load_dataset("mnist", data_dir=args.data_dir)
    m1, m2 = open_model(args.m1).model.eval(), open_model(args.m2).model.eval()
    load_before = os.getloadavg()
    runs = [("ssim-compat", 64)] + ([] if args.skip_b1 else [("ssim-compat", 1)])
    if not args.skip_discriminator:
        runs.append(("discriminator", 64))
    rows = []
    for fidelity, batch in runs:
        row = measure(m1, m2, data, fidelity=fidelity, batch=batch, minutes=args.minutes)
        rows.append(row)
        print(f"{fidelity:14s} B={batch:3d}: new #URF {row['new_urf']:6d} ({row['urf_per_minute']:8.1f}/min, "
              f"{row['urf_per_1000_queries']:6.2f} per 1,000 queries), new #RF {row['new_rf']}, "
              f"{row['iterations']} iterations, {row['mutants_per_second']:.0f} mutants/s", flush=True)
    compat = rows[0]
    result = {
        "pair": f"{args.m1} -> {args.m2}", "minutes": args.minutes, "threads": args.threads,
        "published_urf_per_minute": PUBLISHED_URF_PER_MINUTE, "runs": rows,
        "ratio_to_published": compat["urf_per_minute"] / PUBLISHED_URF_PER_MINUTE,
        "ratio_batched_to_b1_same_run": (None if args.skip_b1 else
                                         compat["urf_per_minute"] / max(rows[1]["urf_per_minute"], 1e-9)),
        "load_average": {"before": load_before, "after": os.getloadavg()}, "cpus": os.cpu_count(),
        "provenance": provenance("cpu"),
    }
    b1 = result["ratio_batched_to_b1_same_run"]
    print(f"ssim-compat B=64: {result['ratio_to_published']:.1f}x the published "
          f"{PUBLISHED_URF_PER_MINUTE:.0f} "
          f"#URF/min; {'-' if b1 is None else f'{b1:.1f}x'} B=1 in this run; load average "
          f"{load_before[0]:.1f} -> {result['load_average']['after'][0]:.1f} on {os.cpu_count()} CPUs")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
