"""Speed of the DRFuzz mutation rules: one batched call against a loop of one-image calls.

For each rule and batch size, the batched call mutates the whole batch at once; the loop
calls the same function on one image at a time (what a per-image port of the published
OpenCV code does). Both are reported in images per second, with their ratio. The loop's
rate does not depend on the batch size, so it runs on at most ``--loop-images`` images of
the batch and is reported per image (the JSON says how many).

Usage:
    .venv/bin/python benchmarks/bench_mutations.py [--device cpu] [--sizes 10 100 1000]

Inputs are random MNIST-sized images (1 x 28 x 28, range 0..1): speed does not depend on
the content. Torch runs on one CPU thread unless ``--threads`` says otherwise: on a machine
shared with other jobs, two threads waiting for each other made small calls 100x slower.
Writes ``benchmarks/results/bench_mutations.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from deepfault._io import write_json
from deepfault.fuzz.mutation.rules import get_rule, list_rules
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
SHAPE = (1, 28, 28)
BOUNDS = (0.0, 1.0)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_batched(rule, x: torch.Tensor, *, budget_s: float, max_repeats: int) -> float:
    """Median seconds of one batched call (after one warm-up call)."""
    gen = torch.Generator().manual_seed(0)
    rule(x, generator=gen, bounds=BOUNDS)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats and (time.perf_counter() - start < budget_s or len(times) < 3):
        _sync(x.device)
        t0 = time.perf_counter()
        rule(x, generator=gen, bounds=BOUNDS)
        _sync(x.device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_loop(rule, x: torch.Tensor) -> float:
    """Seconds per image of one-image calls over the images of ``x`` (after one warm-up call)."""
    gen = torch.Generator().manual_seed(0)
    rule(x[:1], generator=gen, bounds=BOUNDS)
    _sync(x.device)
    t0 = time.perf_counter()
    for i in range(len(x)):
        rule(x[i : i + 1], generator=gen, bounds=BOUNDS)
    _sync(x.device)
    return (time.perf_counter() - t0) / len(x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--rules", nargs="+", default=None, help="default: every registered rule")
    parser.add_argument("--loop-images", type=int, default=100, help="images timed one at a time")
    parser.add_argument("--budget", type=float, default=0.25, help="seconds of batched repeats per size")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: steadier on a shared machine)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "bench_mutations.json")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    names = args.rules or list_rules()
    data = torch.rand(max(args.sizes), *SHAPE, generator=torch.Generator().manual_seed(0)).to(device)
    results: dict[str, dict[str, dict[str, float | int]]] = {}
    header = f"{'rule':<22}" + "".join(f"{f'N={n} batched':>16}{'loop':>10}{'ratio':>8}" for n in args.sizes)
    print(f"images/s on {device} ({torch.get_num_threads()} threads)")
    print(header)
    for name in names:
        rule = get_rule(name)
        row = f"{name:<22}"
        results[name] = {}
        for n in args.sizes:
            x = data[:n]
            batched = n / time_batched(rule, x, budget_s=args.budget, max_repeats=50)
            loop_n = min(n, args.loop_images)
            loop = 1.0 / time_loop(rule, x[:loop_n])
            results[name][str(n)] = {
                "batched_images_per_s": round(batched, 1),
                "loop_images_per_s": round(loop, 1),
                "ratio": round(batched / loop, 2),
                "loop_images_timed": loop_n,
            }
            row += f"{batched:>16,.0f}{loop:>10,.0f}{batched / loop:>7.1f}x"
        print(row, flush=True)

    write_json(
        args.out,
        {
            "benchmark": "bench_mutations",
            "description": "DRFuzz mutation rules, batched call vs one-image calls, images per second",
            "image_shape": list(SHAPE),
            "bounds": list(BOUNDS),
            "sizes": args.sizes,
            "threads": torch.get_num_threads(),
            "provenance": provenance(device, argv=sys.argv),
            "results": results,
        },
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
