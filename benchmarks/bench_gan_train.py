"""How long the first ``deepfault regress`` on MNIST spends training its default discriminator
(issue 29: the README's statement of that time).

The first ``regress`` with the default ``--fidelity discriminator`` on MNIST or Fashion-MNIST
trains the DCGAN once (:data:`~deepfault.fuzz.fidelity.gan.AUTO_RECIPE`: 2 epochs of 12,000
training images, batches of 128) and caches it. This script times exactly that call,
:func:`~deepfault.fuzz.fidelity.gan.cached_discriminator`, into an empty temporary cache,
after the data set is loaded (not timed), under each ``--threads`` count: ``regress --threads
auto`` picks 1 for LeNet-5 on a CPU, and the training runs under the command's setting.

``--quick`` trains a tenth of the images per epoch (the same batches, the same networks) and
scales the training loop's time up by the number of batches (the set-up, quality report and
saving are counted once, as measured): a rough figure for a smoke run; quote the full run's.

The machine may be shared: the load average and the share of CPU busy from other processes
are recorded beside every timing; quote times measured on an idle machine.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_gan_train.py [--quick] [--threads 1,2]

Writes ``benchmarks/results/bench_gan_train.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

import torch
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.data import load_dataset
from deepfault.fuzz.fidelity import gan
from deepfault.models import open_model
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]


def _batches(recipe: gan.GanConfig, n_train: int) -> int:
    per_epoch = n_train if recipe.images_per_epoch is None else min(recipe.images_per_epoch, n_train)
    return recipe.epochs * -(-per_epoch // recipe.batch_size)


def time_first_training(data, recipe: gan.GanConfig, threads: int) -> dict:
    """Seconds of :func:`gan.cached_discriminator` training ``recipe`` into an empty cache."""
    torch.set_num_threads(threads)
    saved, saved_env = gan.AUTO_RECIPE, os.environ.get("DEEPFAULT_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["DEEPFAULT_CACHE"] = cache
        gan.AUTO_RECIPE = recipe
        load = os.getloadavg()
        busy = busy_fraction()
        try:
            t0 = time.perf_counter()
            path = gan.cached_discriminator(data.name, data=data, progress=False)
            seconds = time.perf_counter() - t0
            training = float(open_model(path).meta["gan"]["seconds"])  # the adversarial loop alone
        finally:
            gan.AUTO_RECIPE = saved
            if saved_env is None:
                os.environ.pop("DEEPFAULT_CACHE", None)
            else:
                os.environ["DEEPFAULT_CACHE"] = saved_env
    return {"threads": threads, "seconds": round(seconds, 1), "training_seconds": round(training, 1),
            "batches": _batches(recipe, len(data.x_train)),
            "load_average_before": load, "load_average_after": os.getloadavg(),
            "background_cpu_busy_fraction": busy}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="mnist", choices=gan.AUTO_DATASETS)
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--threads", default="1", help="comma-separated torch thread counts (default 1: what "
                    "regress --threads auto sets for LeNet-5 on a CPU)")
    ap.add_argument("--quick", action="store_true", help="a tenth of the images per epoch, time scaled up")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/bench_gan_train.json"))
    args = ap.parse_args(argv)
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    full = gan.AUTO_RECIPE
    recipe = dataclasses.replace(full, images_per_epoch=full.images_per_epoch // 10) if args.quick else full
    scale = _batches(full, len(data.x_train)) / _batches(recipe, len(data.x_train))
    runs = []
    for threads in (int(t) for t in args.threads.split(",")):
        run = time_first_training(data, recipe, threads)
        # scaled: the training loop by its batches; the rest (set-up, quality report, saving) as it was
        scaled = run["seconds"] + run["training_seconds"] * (scale - 1)
        run["full_recipe_seconds"] = round(scaled, 1) if args.quick else run["seconds"]
        runs.append(run)
        print(f"{args.dataset}, {threads} thread(s): {run['seconds']:.1f} s for {run['batches']} batches"
              + (f" (full recipe, scaled: about {run['full_recipe_seconds']:.0f} s)" if args.quick else "")
              + f"; load {run['load_average_before'][0]:.2f}")
    result = {
        "what": "the first regress's discriminator training: cached_discriminator into an empty cache",
        "command": "PYTHONPATH=src python benchmarks/bench_gan_train.py" + (" --quick" if args.quick else "")
                   + f" --threads {args.threads}",
        "dataset": args.dataset, "quick": args.quick, "recipe": recipe.to_dict(),
        "full_recipe": full.to_dict(), "cpus": os.cpu_count(), "runs": runs, "provenance": provenance(),
    }
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
