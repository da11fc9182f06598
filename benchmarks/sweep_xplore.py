"""How much DeepXplore changes MNIST seeds against how many differences it finds: a sweep
of step size, constraint and iterations (the table of ``docs/xplore.md`` that chose the
library's defaults).

For each setting, one run of :func:`deepfault.xplore.search` on the same ``--num-seeds`` test
seeds (seed 0) with LeNet-1, LeNet-4 and LeNet-5, DeepXplore's layers, random targets,
clipped to [0, 1]; plus the published code's settings (``compat``). Recorded per run: the
share of searched seeds that gave a difference, mean L1 and L_inf to the seed, the share
of found inputs that saturate, mean steps, pooled coverage and time.

Usage:
    .venv/bin/python benchmarks/sweep_xplore.py [--num-seeds 300]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.data import load_dataset
from deepfault.models import open_model
from deepfault.provenance import provenance
from deepfault.xplore import XploreConfig, search, select_seeds

REPO = Path(__file__).resolve().parents[1]
NAMES = ("lenet1", "lenet4", "lenet5")
#: (constraint, step, iterations); "compat" is XploreConfig.published().
GRID = [("compat", 10, 20), ("light", 10, 20), ("light", 1, 20), ("none", 1, 20), ("none", 0.05, 20),
        ("none", 0.05, 50), ("none", 0.3, 20), ("none", 0.1, 20), ("none", 0.03, 20), ("none", 0.03, 50),
        ("none", 0.01, 50), ("none", 0.02, 50)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    p.add_argument("--models-dir", default=str(REPO / "benchmarks" / "models"))
    p.add_argument("--num-seeds", dest="seeds", type=int, default=300)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sweep_xplore.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    background = busy_fraction()
    data = load_dataset("mnist", data_dir=args.data_dir)
    models = [open_model(Path(args.models_dir) / f"{n}-mnist.pt").model for n in NAMES]
    index = select_seeds(len(data.x_test), args.seeds, seed=0)
    rows = []
    for transform, step, iterations in GRID:
        config = (XploreConfig.published(seeds=args.seeds) if transform == "compat" else
                  XploreConfig(seeds=args.seeds, step=step, iterations=iterations, transform=transform,
                               layers="deepxplore"))  # the layers the docs' table was measured with
        seeds = index if transform != "compat" else select_seeds(len(data.x_test), args.seeds, seed=0,
                                                                 replace=True)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            r = search(models, data.x_test[seeds], replace(config, bounds=data.bounds), seed_index=seeds)
        searched = int((~r.already_differ).sum())
        row = {"transform": transform, "step": step, "iterations": iterations, "searched": searched,
               "found": r.num_found, "found_ratio": r.num_found / max(searched, 1),
               **{k: v for k, v in r.realism.to_dict().items() if k != "found"},
               "mean_steps": float(r.found.iteration.mean()) if r.num_found else None,
               "coverage": r.pooled_coverage, "seconds": time.perf_counter() - start}
        rows.append(row)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    write_json(args.out, {"benchmark": "sweep_xplore", "seeds": args.seeds, "models": list(NAMES),
                          "provenance": {**provenance("cpu", argv=[sys.executable, *sys.argv]), "threads": 1,
                                         "background_cpu_busy_fraction": background},
                          "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
