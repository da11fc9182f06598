"""Does DeepFault's protocol find informative neurons on residual nets? (issue 44, item 1)

Two residual networks are trained briefly on MNIST (one thread, a few minutes on a busy
2-core machine): a small residual CNN as a user would write it (a stem conv with BatchNorm,
one residual block, pooling, two Linear layers) and ResNet-18 (the torchvision layout of
``benchmarks/models/resnet.py``, on MNIST padded to 3x32x32). On each, the default layers
("blocks": each residual block's output) are analysed under both activity rules:

* ``zero``: a neuron is active when its channel mean is above 0 (the paper's threshold);
* ``quantile``: above its own median on a fixed sample of the training split (what
  ``--activity auto`` does on block outputs).

For each rule the paper's protocol runs (Tarantula, Ochiai and D* neurons, then the random
baseline's neurons, one gradient step of L_inf distance ``d`` from the same correctly
classified inputs) and the share of synthesized inputs that flip the prediction is compared.
The share of neurons whose spectrum carries no information (active on every input of the
class or on none) is recorded too.

Run: ``PYTHONPATH=src python benchmarks/bench_resnet_neurons.py [--quick] [--seed S]``; writes
``benchmarks/results/bench_resnet_neurons.json`` (``...-seedS.json`` for another seed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import busy_fraction  # noqa: E402
from models.resnet import BasicBlock, ResNet  # noqa: E402

from deepfault import RunConfig, Runtime, run_deepfault  # noqa: E402
from deepfault.data import Dataset  # noqa: E402
from deepfault.data.mnist import load_mnist  # noqa: E402
from deepfault.localization.diagnosis import degenerate_lines, flatness, tied_selection  # noqa: E402

ROOT = Path("/work/shared/datasets")
#: L_inf distance of the one gradient step: at the paper's 0.1 almost no input of these models flips
#: (0 to 5 of 300 under either rule), too few to compare.
DISTANCE = 0.3
OUT = Path(__file__).resolve().parent / "results" / "bench_resnet_neurons.json"


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus the identity, then ReLU (a name ending in Block: 'blocks')."""

    def __init__(self, channels: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.body(x) + x)


class SmallResNet(nn.Module):
    """Stem conv + BatchNorm, one residual block, pooling, two Linear layers (issue 44's model)."""

    def __init__(self, channels: int = 32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels),
                                  nn.ReLU(), nn.MaxPool2d(2))
        self.block = ResidualBlock(channels)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(channels * 7 * 7, 64)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool(self.block(self.stem(x)))
        return self.fc2(self.relu(self.fc1(x.flatten(1))))


class ResNet18(ResNet):
    """ResNet-18 in torchvision's layout (7x7 stride-2 stem, max pooling), 10 classes."""

    def __init__(self):
        super().__init__(BasicBlock, (2, 2, 2, 2), num_classes=10)


def train(model: nn.Module, x: np.ndarray, y: np.ndarray, *, steps: int, batch: int, seed: int = 0) -> float:
    """Adam for ``steps`` batches drawn with ``seed``; returns the seconds."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    model.train()
    t0 = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(len(xt), (batch,), generator=gen)
        opt.zero_grad()
        nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
        opt.step()
    model.eval()
    return time.perf_counter() - t0


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.inference_mode():
        pred = torch.cat([model(torch.from_numpy(x[i : i + 500])).argmax(1) for i in range(0, len(x), 500)])
    return float((pred.numpy() == y).mean())


def flips(result) -> tuple[int, int]:
    changed = total = 0
    for c in result.classes:
        for r in c.repetitions:
            ev = r.evaluation
            changed += int((ev.pred_synthesized != ev.pred_original).sum())
            total += len(ev.pred_original)
    return changed, total


def uninformative(result) -> float:
    """Mean over classes with failures of the share of neurons active on every input or on none."""
    shares = [flatness(c.spectrum).share for c in result.classes if not c.no_failures]
    return float(np.mean(shares)) if shares else float("nan")


def protocol(model, data: Dataset, *, k: int, inputs: int, distance: float, repeat: int) -> dict:
    """Flip shares of each measure and of the random baseline under each activity rule."""
    out: dict = {}
    runtime = Runtime(threads=1, progress=False)
    for rule in ("zero", "quantile"):
        row: dict = {}
        for measure, rep in (("tarantula", 1), ("ochiai", 1), ("dstar", 1), ("random", repeat)):
            cfg = RunConfig(measure=measure, k=k, num_inputs=inputs, distance=distance, activity=rule,
                            repeat=rep, seed=0)
            t0 = time.perf_counter()
            result = run_deepfault(model, data, cfg, runtime=runtime)
            changed, total = flips(result)
            row[measure] = {"flipped": changed, "inputs": total, "share": changed / total if total else None,
                            "seconds": round(time.perf_counter() - t0, 1)}
            if measure == "tarantula":
                row["uninformative_neurons"] = uninformative(result)
            if measure != "random":  # what the run's summary names (localization.diagnosis)
                row[measure]["tied_classes"] = [c.target_class for c in result.classes if c.repetitions
                                                and tied_selection(c.repetitions[0].selection)]
                row[measure]["warnings"] = degenerate_lines(result)
            print(rule, measure, {k: v for k, v in row[measure].items() if k != "warnings"}, flush=True)
        out[rule] = row
    return out


def measured(make, data: Dataset, *, steps: int, batch: int, k: int, seed: int) -> dict:
    """A fresh ``make()`` (initial weights seeded with ``seed``) trained on ``data``, and the
    protocol's figures on it.
    """
    torch.manual_seed(seed)
    model = make()
    seconds = train(model, data.x_train, data.y_train, steps=steps, batch=batch, seed=seed)
    row: dict = {"train_seconds": round(seconds, 1), "train_steps": steps,
                 "test_accuracy": accuracy(model, data.x_test, data.y_test)}
    print(type(model).__name__, row, flush=True)
    row["protocol"] = protocol(model, data, k=k, inputs=20, distance=DISTANCE, repeat=3)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and inputs (a smoke run)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the models' initialisation and training")
    args = ap.parse_args(argv)
    out = OUT if args.seed == 0 else OUT.with_name(f"{OUT.stem}-seed{args.seed}.json")
    torch.set_num_threads(1)
    mnist = load_mnist(ROOT)
    test = slice(0, 500 if args.quick else 2000)
    data = Dataset("mnist", mnist.x_train, mnist.y_train, mnist.x_test[test], mnist.y_test[test], (0.0, 1.0),
                   mnist.class_names)
    report: dict = {"busy_fraction": busy_fraction(), "threads": 1, "distance": DISTANCE,
                    "k": {"small": 3, "resnet18": 10}, "test_inputs": len(data.y_test),
                    "seed": args.seed, "command": "PYTHONPATH=src python benchmarks/bench_resnet_neurons.py"
                    + (" --quick" if args.quick else "") + (f" --seed {args.seed}" if args.seed else "")}

    quick = args.quick
    report["small_resnet"] = measured(SmallResNet, data, steps=30 if quick else 400, batch=64, k=3,
                                      seed=args.seed)

    def rgb32(x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.repeat(np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2))), 3, axis=1))

    data18 = Dataset("mnist32", rgb32(mnist.x_train[:20000]), mnist.y_train[:20000], rgb32(data.x_test),
                     data.y_test, (0.0, 1.0), mnist.class_names)
    report["resnet18"] = measured(ResNet18, data18, steps=10 if quick else 150, batch=32, k=10,
                                  seed=args.seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
