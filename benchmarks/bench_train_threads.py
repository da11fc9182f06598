"""Training speed at the default threads against each fixed count (issue 44: on a busy
2-core machine ``train --arch lenet1`` ran 26x slower at PyTorch's default threads than with
``--threads 1``).

Trains lenet1 on the first ``--batches`` x 32 MNIST training images for one epoch with
:func:`deepfault.models.train.fit`, the loop of ``deepfault train``, first-use zoo training,
the scenarios and repair's fine-tuning, once per setting after an untimed warm-up: ``auto``
(every command's default: the cores no other process is using,
:func:`deepfault.core.threads.auto_threads`) and each count of ``--threads``, in ``--rounds``
rounds whose order is rotated. The weights are reseeded for every run, so each run does the
same work.

The machine may be shared: the load average and the share of CPU busy from other processes
are recorded beside every timing, and the count ``auto`` chose.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_train_threads.py [--batches 300] [--threads 1,2]

Writes ``benchmarks/results/bench_train_threads.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.core.entry import THREADS_ENV
from deepfault.data import load_dataset
from deepfault.models import build_model
from deepfault.models.train import TrainConfig, fit
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
BATCH = 32


def one_run(x, y, threads: int | str) -> dict:
    """One epoch of lenet1 over ``x`` at ``threads``: seconds, batches per second, threads used."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model("lenet1", num_classes=10)
    config = TrainConfig(epochs=1, batch_size=BATCH, val_fraction=0.0, seed=0)
    load = os.getloadavg()
    busy = busy_fraction()
    t0 = time.perf_counter()
    result = fit(model, x, y, config, threads=threads)
    seconds = time.perf_counter() - t0
    batches = -(-len(y) // BATCH)
    return {"setting": str(threads), "threads_used": result.threads, "seconds": round(seconds, 2),
            "batches_per_second": round(batches / seconds, 1), "load_average_before": load,
            "load_average_after": os.getloadavg(), "background_cpu_busy_fraction": busy}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--batches", type=int, default=300, help="training batches of 32 per run")
    ap.add_argument("--threads", default="1,2", help="comma-separated fixed counts beside 'auto'")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all settings, order rotated")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/bench_train_threads.json"))
    args = ap.parse_args(argv)
    os.environ.pop(THREADS_ENV, None)  # 'auto' as a user gets it
    data = load_dataset("mnist", data_dir=args.data_dir)
    n = args.batches * BATCH
    x, y = data.x_train[:n], data.y_train[:n]
    settings: list[int | str] = ["auto", *(int(t) for t in args.threads.split(","))]
    one_run(x[: 20 * BATCH], y[: 20 * BATCH], 1)  # untimed: the first call's set-up
    runs = []
    for r in range(args.rounds):
        order = settings[r % len(settings):] + settings[: r % len(settings)]
        for threads in order:
            run = one_run(x, y, threads)
            runs.append(run)
            print(f"round {r + 1}, threads {run['setting']} (used {run['threads_used']}): "
                  f"{run['batches_per_second']:.1f} batch/s; load {run['load_average_before'][0]:.2f}, "
                  f"busy {run['background_cpu_busy_fraction']}")
    median = {str(s): statistics.median(r["batches_per_second"] for r in runs if r["setting"] == str(s))
              for s in settings}
    best = max(v for k, v in median.items() if k != "auto")
    # the load drifts from round to round: each round's best fixed count against auto in that round
    per_round = [max(r["batches_per_second"] for r in runs[i:i + len(settings)] if r["setting"] != "auto")
                 / next(r["batches_per_second"] for r in runs[i:i + len(settings)] if r["setting"] == "auto")
                 for i in range(0, len(runs), len(settings))]
    result = {
        "what": "one epoch of lenet1 on MNIST (deepfault.models.train.fit) at threads auto and fixed counts",
        "command": f"PYTHONPATH=src python benchmarks/bench_train_threads.py --batches {args.batches} "
                   f"--threads {args.threads} --rounds {args.rounds}",
        "batches": args.batches, "batch_size": BATCH, "cpus": os.cpu_count(),
        "median_batches_per_second": median, "best_fixed_over_auto": round(best / median["auto"], 2),
        "best_fixed_over_auto_per_round": [round(v, 2) for v in per_round],
        "median_per_round_ratio": round(statistics.median(per_round), 2),
        "auto_chose": sorted({r["threads_used"] for r in runs if r["setting"] == "auto"}),
        "runs": runs, "provenance": provenance(),
    }
    write_json(args.out, result)
    print(f"median batch/s: {median}; best fixed count / auto: {result['best_fixed_over_auto']} (of the "
          f"medians), {result['median_per_round_ratio']} (median of the rounds); auto chose "
          f"{result['auto_chose']}")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
