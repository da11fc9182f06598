"""Speed of regression fuzzing on MNIST LeNet-5: the batched loop against one input at a time.

Measures, in one run:

- **throughput**: mutants generated (each one checked for fidelity and, when it passes,
  executed on both models) per second by :func:`deepfault.fuzz.run_campaign` at the default
  ``B``, per fidelity mode (``none``, ``ssim``, ``ssim-compat`` with its retry structure, and
  the DCGAN discriminator: the cached default one, or ``--discriminator FILE``), and by the
  one-input-at-a-time loop
  :func:`deepfault.testing.fuzz_reference.drfuzz_reference` (a rule call, a fidelity call and
  a forward pass of each model per mutant); their ratio;
- **B**: the same for several ``B`` (SSIM), to show what the default buys;
- **where the time goes**: the campaign's seconds per phase (select, mutate, check,
  execute, update) and each mutation rule's cost on a typical group of 40 images;
- optionally (``--urf-minutes 10``) **#URF after 10 minutes** of DRFuzz on a scenario pair
  (``--m1``/``--m2``, e.g. SUPPLY from ``deepfault scenario supply``), the README's SUPPLY
  figure being 8,767 after 24 hours on 40 cores.

Usage:
    .venv/bin/python benchmarks/bench_fuzz.py [--seconds 20] [--threads 1] [--m1 A --m2 B]
        [--discriminator FILE] [--urf-minutes 10]

Without ``--m1``/``--m2`` the pair is ``benchmarks/models/lenet5-mnist.pt`` and a copy with
seeded weight noise (the speed does not depend on which LeNet-5 pair). Torch runs on one
thread unless ``--threads`` says otherwise: on a machine shared with other jobs two threads
waiting for each other made small calls many times slower. Writes
``benchmarks/results/bench_fuzz.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

import numpy as np
import torch

from deepfault._io import write_json
from deepfault.data import load_dataset
from deepfault.fuzz.campaign import DEFAULT_BATCH, CampaignConfig, run_campaign
from deepfault.fuzz.campaign.strategies import DRFUZZ_RULES
from deepfault.fuzz.fidelity import make_fidelity
from deepfault.fuzz.mutation.rules import apply_rule
from deepfault.models import open_model
from deepfault.provenance import provenance
from deepfault.testing.fuzz_reference import ReferenceSettings, drfuzz_reference

REPO = Path(__file__).resolve().parents[1]


def _pair(args):
    import deepfault.fuzz.fidelity.gan  # noqa: F401  (registers the discriminator's architecture)

    if args.m1 and args.m2:
        return open_model(args.m1).model.eval(), open_model(args.m2).model.eval(), f"{args.m1} -> {args.m2}"
    m1 = open_model(REPO / "benchmarks/models/lenet5-mnist.pt").model.eval()
    m2 = copy.deepcopy(m1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return m1, m2, "lenet5-mnist.pt -> the same with N(0, 0.02^2) weight noise"


def campaign_speed(m1, m2, data, *, fidelity: str, batch: int, seconds: float,
                   strategy: str = "drfuzz") -> dict:
    r = run_campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                     config=CampaignConfig(strategy=strategy, budget=f"{seconds}s", batch=batch, seed=0,
                                           fidelity=fidelity, criterion="nc"))
    return {"strategy": strategy, "fidelity": fidelity.split(":")[0], "batch": batch, "seconds": r.seconds,
            "passed_share": r.queries / max(r.generated, 1),
            "iterations": r.iterations, "generated": r.generated, "executed": r.queries,
            "generated_per_second": r.generated / r.seconds, "executed_per_second": r.queries / r.seconds,
            "rf": r.metrics.rf, "urf": r.metrics.urf,
            "phases": {k: round(v, 3) for k, v in r.timings.items()},
            "phase_shares": {k: round(v / max(sum(r.timings.values()), 1e-9), 3)
                             for k, v in r.timings.items()}}


def reference_speed(m1, m2, data, *, fidelity: str, seconds: float) -> dict:
    fid = make_fidelity(fidelity, bounds=data.bounds, dataset=data.name)
    out = drfuzz_reference(m1, m2, data.x_test[:2000], data.y_test[:2000], bounds=data.bounds, fidelity=fid,
                           settings=ReferenceSettings(seconds=seconds, seed=0))
    return {"fidelity": fidelity.split(":")[0], **out, "generated_per_second": out["mutants_per_second"]}


def rule_costs(data, *, images: int = 40, repeats: int = 5) -> dict:
    x = torch.as_tensor(data.x_test[:images])
    gen = torch.Generator().manual_seed(0)
    out = {}
    for rule in DRFUZZ_RULES:
        apply_rule(rule, x, generator=gen, bounds=data.bounds)
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            apply_rule(rule, x, generator=gen, bounds=data.bounds)
            best = min(best, time.perf_counter() - t)
        out[rule] = round(best * 1000, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per batched measurement")
    ap.add_argument("--reference-seconds", type=float, default=10.0, help="seconds of the one-at-a-time loop")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, DEFAULT_BATCH])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--m1", default=None)
    ap.add_argument("--m2", default=None)
    ap.add_argument("--discriminator", default=None,
                    help="discriminator file (default: the cached default one, when it exists)")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--urf-minutes", type=float, default=0.0,
                    help="also run DRFuzz this long and report #URF")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/bench_fuzz.json"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    data = load_dataset("mnist", data_dir=args.data_dir)
    m1, m2, pair = _pair(args)
    from deepfault.fuzz.fidelity.gan import discriminator_cache_path

    fidelities = ["none", "ssim", "ssim-compat"]
    if args.discriminator:
        fidelities.append(f"discriminator:{args.discriminator}")
    elif discriminator_cache_path(data.name).is_file():
        fidelities.append("discriminator")
    load_before = os.getloadavg()
    result: dict = {"pair": pair, "default_batch": DEFAULT_BATCH, "threads": args.threads, "throughput": {}}
    for fid in fidelities:
        name = fid.split(":")[0]
        batched = campaign_speed(m1, m2, data, fidelity=fid, batch=DEFAULT_BATCH, seconds=args.seconds)
        ref = reference_speed(m1, m2, data, fidelity=fid, seconds=args.reference_seconds)
        result["throughput"][name] = {"batched": batched, "one_at_a_time": ref,
                                      "ratio": batched["generated_per_second"] / ref["generated_per_second"]}
        print(f"{name:14s} batched B={DEFAULT_BATCH}: {batched['generated_per_second']:8.0f} mutants/s "
              f"({batched['executed_per_second']:.0f} executed/s, {batched['passed_share']:.0%} pass); "
              f"one at a time: "
              f"{ref['generated_per_second']:6.0f}/s; ratio {result['throughput'][name]['ratio']:.1f}x")
        print(f"{'':14s} phases (s): {batched['phases']}")
    result["batch_sweep"] = []
    for b in args.batches:
        row = campaign_speed(m1, m2, data, fidelity="ssim", batch=b, seconds=args.seconds / 2)
        result["batch_sweep"].append(row)
        print(f"ssim B={b:4d}: {row['generated_per_second']:8.0f} mutants/s, {row['iterations']} iterations")
    dh = campaign_speed(m1, m2, data, fidelity="ssim", batch=DEFAULT_BATCH, seconds=args.seconds / 2,
                        strategy="deephunter")
    result["deephunter"] = dh
    print(f"deephunter (validity, NC) B={DEFAULT_BATCH}: {dh['generated_per_second']:8.0f} mutants/s")
    result["rule_ms_per_40_images"] = rule_costs(data)
    print("rule cost, ms per call on 40 images:", result["rule_ms_per_40_images"])
    if args.urf_minutes > 0:
        t = time.perf_counter()
        r = run_campaign(m1, m2, data.x_test, data.y_test, bounds=data.bounds, dataset=data.name,
                         config=CampaignConfig(budget=f"{args.urf_minutes}m", seed=0, fidelity="ssim"))
        readme = {"rf": 36293, "urf": 8767, "seeds": 4345, "gf": 68451}
        result["urf_run"] = {"pair": pair, "minutes": args.urf_minutes, **r.metrics.to_dict(),
                             "iterations": r.iterations, "generated": r.generated,
                             "wall_s": time.perf_counter() - t, "readme_supply_24h_40_cores": readme,
                             "timeline": list(r.timeline)}
        m = r.metrics
        print(f"DRFuzz {args.urf_minutes:g} min: RF {m.rf}, URF {m.urf}, Seed {m.seeds}, GF {m.gf} "
              "(README SUPPLY after 24 h on 40 cores: URF 8,767)")
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    result["provenance"] = provenance("cpu")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
