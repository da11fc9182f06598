"""One regress campaign over 1 and 2 workers (issue 42): mutants per second and #URF per minute.

The SUPPLY pair (``deepfault scenario supply --arch lenet5 --dataset mnist`` writes it), the
default fidelity (the data set's discriminator), ``B = 64``, seed 0, the same fuzzing time for
every worker count; each worker runs on one thread (so 2 workers use the 2 cores of this
machine, 1 worker one of them). Throughput is the workers' mutants together over the fuzzing
seconds (the longest worker's), #URF the merged campaign's (each unique fault counted once).
The sync's share of the workers' fuzzing time is reported beside it (goal: under 5% at the
default interval). The goal on an idle 2-core machine: 2 workers >= 1.7x 1 worker, both figures.

:func:`scale_out_campaign` is what ``benchmarks/bench_scale_out.py`` imports; run alone:

    PYTHONPATH=src .venv/bin/python benchmarks/_scale_out_campaign.py --m1 M1.pt --m2 M2.pt [--seconds 60]

writes ``benchmarks/results/scale_out_campaign.json`` with the machine's load (``uptime``) before
and after; rerun it on an idle machine for the figures that count.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {os.getloadavg()}"


def one_run(m1: str, m2: str, *, workers: int, seconds: float, data_dir: str | None = None,
            dataset: str = "mnist", fidelity: str | None = None, sync_every: float | None = None,
            executor: str = "process") -> dict:
    """One campaign of ``seconds`` on ``workers`` workers (one thread each) on ``executor`` (``ray``:
    a local Ray, the workers syncing through the served store); its throughput.
    """
    from deepfault.core.runtime import Runtime
    from deepfault.fuzz import Versions, regress
    from deepfault.fuzz.campaign import CampaignConfig

    config = CampaignConfig(budget=f"{seconds:g}s", seed=0, workers=workers,
                            executor=executor if workers > 1 else "process")
    if fidelity is not None:
        config = replace(config, fidelity=fidelity)
    if sync_every is not None:
        config = replace(config, sync_every=sync_every)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="scale-out-") as tmp:
        started = time.perf_counter()
        out = regress(Versions(m1, m2, data_dir=data_dir), dataset, config,
                      runtime=Runtime(store=str(Path(tmp) / "s.sqlite"), threads=1))
        wall = time.perf_counter() - started
    r = out.result
    minutes = r.seconds / 60
    return {"workers": workers, "executor": config.executor if workers > 1 else None,
            "sync_point": r.workers.get("sync_point"), "seconds": r.seconds, "wall_seconds": wall,
            "iterations": r.iterations,
            "generated": r.generated, "urf": r.metrics.urf, "rf": r.metrics.rf,
            "mutants_per_second": r.generated / r.seconds if r.seconds else None,
            "urf_per_minute": r.metrics.urf / minutes if minutes else None,
            "sync_share": r.workers.get("sync_share"), "checkpoint_share": r.workers.get("checkpoint_share"),
            "lost": r.workers.get("lost", [])}


def scale_out_campaign(m1: str, m2: str, *, workers: tuple[int, ...] = (1, 2), seconds: float = 60.0,
                       data_dir: str | None = None, dataset: str = "mnist",
                       executor: str = "process") -> dict:
    """The SUPPLY pair's campaign at each worker count; the ratios against the first.

    Args:
        m1, m2: The pair's model files.
        workers: The worker counts, the reference first.
        seconds: Fuzzing seconds of every run.
        data_dir: The data root (``None``: the default).
        dataset: The pair's data set.
        executor: Where the many-worker runs run (``process``, or ``ray``: a local Ray).

    Returns:
        ``{"runs": [...], "ratios": {N: {"mutants_per_second": x, "urf_per_minute": y}}, "uptime": ...}``.
    """
    before = _uptime()
    runs = [one_run(m1, m2, workers=n, seconds=seconds, data_dir=data_dir, dataset=dataset, executor=executor)
            for n in workers]
    ref = runs[0]
    ratios = {str(r["workers"]): {k: (r[k] / ref[k] if ref[k] else None)
                                  for k in ("mutants_per_second", "urf_per_minute")} for r in runs}
    return {"pair": f"{m1} -> {m2}", "dataset": dataset, "seconds": seconds, "fidelity": "default",
            "executor": executor,
            "threads_per_worker": 1, "runs": runs, "ratios": ratios, "goal": 1.7,
            "uptime": {"before": before, "after": _uptime()}, "cpus": os.cpu_count()}


def campaign(args) -> dict:
    """The campaign part of ``bench_scale_out.py``: 1 worker, then each of ``args.workers``."""
    counts = (1, *(n for n in args.workers if n != 1))
    return scale_out_campaign(args.m1, args.m2, workers=counts, seconds=args.seconds, data_dir=args.data_dir,
                              executor=getattr(args, "executor", "process"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m1", default="scenarios/supply-lenet5-mnist-m1.pt")
    ap.add_argument("--m2", default="scenarios/supply-lenet5-mnist-m2.pt")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts, the reference first")
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--executor", choices=("process", "ray"), default="process",
                    help="where the many-worker runs run (ray: a local Ray, through the served store)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/scale_out_campaign.json"))
    args = ap.parse_args()
    from deepfault._io import write_json

    result = scale_out_campaign(args.m1, args.m2, workers=tuple(int(w) for w in args.workers.split(",")),
                                seconds=args.seconds, data_dir=args.data_dir, executor=args.executor)
    for r in result["runs"]:
        ratio = result["ratios"][str(r["workers"])]
        print(f"{r['workers']} worker(s): {r['mutants_per_second']:.0f} mutants/s "
              f"({ratio['mutants_per_second']:.2f}x), "
              f"{r['urf_per_minute']:.1f} #URF/min ({ratio['urf_per_minute']:.2f}x), sync "
              f"{100 * (r['sync_share'] or 0):.1f}% of fuzzing time", flush=True)
    print(f"load: {result['uptime']['before']} -> {result['uptime']['after']}")
    write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
