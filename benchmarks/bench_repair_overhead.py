"""The overhead of repair's fine-tuning against the bare passes it needs (issue 26).

``deepfault repair`` fine-tunes a copy of the model once per approach (the found inputs and
each baseline) with :func:`deepfault.repair.finetune.finetune`. This script times one such
fine-tuning of a LeNet-5 on 2,750 inputs (250 found inputs and 2,500 mixed-in training
inputs, repair's default ``mix=10``) for the default 5 epochs, beside a bare loop written
here: the same shuffled batches, forward, cross-entropy, backward and Adam step, nothing
else. Both start from the same weights, and the bare loop must end on the same weights
(checked: the comparison is of the same work). The one-off cost of a process's first
optimizer (PyTorch imports ``torch._dynamo`` there) is paid before either is timed and
reported apart, as is the evaluation pass repair makes after each fine-tuning (one forward
pass over a 10,000-input test split).

Usage:
    .venv/bin/python benchmarks/bench_repair_overhead.py [--quick] [--repeats 3] [--threads 1]

Weights are random (seeded) and the inputs random arrays of MNIST's shape: the speed of a
training step does not depend on what the model has learned. The JSON goes to
benchmarks/results/bench_repair_overhead.json, with the machine's load beside the timings.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.core.batches import predict
from deepfault.models.zoo import build_model
from deepfault.provenance import provenance
from deepfault.repair.finetune import finetune

REPO = Path(__file__).resolve().parents[1]
#: (full, quick): inputs fine-tuned on, epochs, test inputs evaluated after each fine-tuning.
SIZES = {"inputs": (2750, 550), "epochs": (5, 1), "test": (10_000, 2_000)}
GOAL = 2.0  # issue 26: repair's fine-tuning within 2x the bare passes


def bare_loop(model: torch.nn.Module, x: np.ndarray, y: np.ndarray, *, epochs: int, lr: float,
              batch_size: int, seed: int) -> torch.nn.Module:
    """The passes and steps a fine-tuning needs, nothing more: ``fit``'s shuffling (a numpy
    generator seeded by ``seed``: one permutation for the empty validation split, which orders
    the inputs, then one per epoch), forward, cross-entropy, backward and Adam at a constant rate.
    """
    net = copy.deepcopy(model)
    for p in net.parameters():
        p.requires_grad_(True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))  # fit's validation split (empty): the rest, in this order
    xt, yt = torch.as_tensor(x[order]), torch.as_tensor(y[order])
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    torch.manual_seed(seed)
    net.train()
    for _ in range(epochs):
        perm = torch.as_tensor(rng.permutation(len(xt)))
        for i in range(0, len(xt), batch_size):
            idx = perm[i : i + batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(xt[idx]), yt[idx]).backward()
            opt.step()
    return net.eval()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer inputs and one epoch")
    parser.add_argument("--repeats", type=int, default=3, help="timings of each, median reported")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch CPU threads for both")
    parser.add_argument("--out", default=str(REPO / "benchmarks/results/bench_repair_overhead.json"))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    which = 1 if args.quick else 0
    n, epochs, n_test = (SIZES[k][which] for k in ("inputs", "epochs", "test"))
    lr, batch_size, seed = 1e-3, 32, 0  # RepairConfig's defaults
    load_before = os.getloadavg()
    busy = busy_fraction()
    torch.manual_seed(0)
    model = build_model("lenet5").eval()
    rng = np.random.default_rng(0)
    x = rng.random((n, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    x_test = rng.random((n_test, 1, 28, 28), dtype=np.float32)

    t0 = time.perf_counter()
    torch.optim.Adam(model.parameters())  # a process's first optimizer imports torch._dynamo
    first_optimizer = time.perf_counter() - t0
    finetune(model, x[:64], y[:64], epochs=1, lr=lr, batch_size=batch_size, seed=seed)  # warm-up
    bare_loop(model, x[:64], y[:64], epochs=1, lr=lr, batch_size=batch_size, seed=seed)

    tuned_s, bare_s, eval_s = [], [], []
    same = True
    for _ in range(args.repeats):  # interleaved, so that a change of load hits both
        t0 = time.perf_counter()
        tuned, _ = finetune(model, x, y, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)
        tuned_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        bare = bare_loop(model, x, y, epochs=epochs, lr=lr, batch_size=batch_size, seed=seed)
        bare_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        predict(tuned, x_test)
        eval_s.append(time.perf_counter() - t0)
        same &= all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), bare.state_dict().values(),
                                                       strict=True))
    tuned_med, bare_med, eval_med = (statistics.median(v) for v in (tuned_s, bare_s, eval_s))
    steps = epochs * -(-n // batch_size)
    ratio = tuned_med / bare_med
    result = {
        "quick": args.quick,
        "model": "lenet5",
        "inputs": n, "epochs": epochs, "batch_size": batch_size, "steps": steps, "test_inputs": n_test,
        "threads": args.threads,
        "finetune_seconds": tuned_s, "bare_seconds": bare_s, "evaluation_seconds": eval_s,
        "finetune_ms_per_step": 1000 * tuned_med / steps, "bare_ms_per_step": 1000 * bare_med / steps,
        "overhead_ratio": ratio,
        "goal": f"<= {GOAL}x the bare passes",
        "meets_goal": ratio <= GOAL,
        "same_weights": bool(same),
        "first_optimizer_seconds": first_optimizer,
        "evaluation_share_of_finetuning": eval_med / tuned_med,
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "busy_fraction": busy,
        "provenance": provenance("cpu", argv=sys.argv),
    }
    write_json(Path(args.out), result)
    print(f"fine-tuning {n} inputs x {epochs} epochs ({steps} steps): {tuned_med:.2f} s, bare passes "
          f"{bare_med:.2f} s, overhead {ratio:.2f}x (goal <= {GOAL}x); same weights: {same}; "
          f"evaluation after it {eval_med:.2f} s; first optimizer of the process {first_optimizer:.1f} s; "
          f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print(f"wrote {args.out}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
