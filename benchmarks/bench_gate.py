"""The gate's held-out stage against the two models' bare forward passes (issue 41).

The held-out comparison runs M1 and M2 once each over the split, folding every batch into
counts (flips per class, the worst flips kept); the issue asks for at most about 1.2x the two
bare forward passes. Measured here on LeNet-5 over the MNIST test split (10,000 inputs; the
weights are a seeded LeNet-5 and the same with noise: the cost does not depend on them):

- ``bare``: ``model(x[i:i+B])`` for both models under ``torch.inference_mode()``;
- ``stage``: :func:`deepfault.gate.heldout.compare_heldout` on the prepared pair;
- ``gate``: the whole :func:`deepfault.gate` call (opening, checks, the stage, the verdict);
- ``replay``: :func:`deepfault.gate.replay.replay_corpus` of a corpus of the first ``--replay``
  MNIST training images through both models, against the bare passes over the same images.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_gate.py [--quick] [--threads 1]
        [--data-dir /work/shared/datasets]

Each time is the median of repeated runs after a warm-up; the machine's busy share is recorded
beside it. Writes ``benchmarks/results/bench_gate.json`` and prints the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import busy_fraction, call_times  # noqa: E402

from deepfault._io import write_json  # noqa: E402
from deepfault.core.runtime import Runtime  # noqa: E402
from deepfault.data import load_dataset  # noqa: E402
from deepfault.fuzz.pair import open_pair  # noqa: E402
from deepfault.gate import GateConfig, gate  # noqa: E402
from deepfault.gate.heldout import compare_heldout  # noqa: E402
from deepfault.models import build_model  # noqa: E402
from deepfault.provenance import provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _build(kind: str) -> torch.nn.Module:
    if kind == "resnet18":
        from models.resnet import ResNet18Cifar

        return ResNet18Cifar()
    return build_model("lenet5")


def _data(kind: str, inputs: int, data_dir):
    """LeNet-5's MNIST test split, or for the ResNet-18 fixture ``inputs`` seeded 3x32x32 images
    (the cost does not depend on what they show)."""
    if kind == "lenet5":
        return load_dataset("mnist", data_dir=data_dir)
    from deepfault.data import as_dataset

    g = torch.Generator().manual_seed(0)
    x = torch.rand((inputs, 3, 32, 32), generator=g).numpy()
    y = torch.randint(0, 10, (inputs,), generator=g).numpy()
    return as_dataset(x, y, bounds=(0.0, 1.0), num_classes=10, name="cifar-shaped")


def _models(kind: str = "lenet5"):
    torch.manual_seed(0)
    m1 = _build(kind).eval()
    m2 = _build(kind).eval()
    m2.load_state_dict(m1.state_dict())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m2.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return m1, m2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--data-dir", default=None, help="where MNIST is (default: deepfault's data root)")
    p.add_argument("--replay", type=int, default=20_000, help="corpus entries replayed (0: none)")
    p.add_argument("--model", choices=("lenet5", "resnet18"), default="lenet5",
                   help="lenet5 on MNIST, or the ResNet-18 fixture (benchmarks/models/resnet.py) on "
                   "--inputs CIFAR-shaped images")
    p.add_argument("--inputs", type=int, default=1000, help="held-out inputs of the ResNet-18 run")
    p.add_argument("--out", default=None, help="default: benchmarks/results/bench_gate[-resnet18].json")
    args = p.parse_args(argv)
    suffix = "" if args.model == "lenet5" else f"-{args.model}"
    args.out = args.out or str(REPO / "benchmarks" / "results" / f"bench_gate{suffix}.json")
    torch.set_num_threads(args.threads)
    repeats = 3 if args.quick else 7
    data = _data(args.model, args.inputs, args.data_dir)
    x = torch.as_tensor(data.x_test)
    m1, m2 = _models(args.model)
    pair = open_pair((m1, m2), data)
    bs = args.batch_size

    def bare():
        with torch.inference_mode():
            for m in (m1, m2):
                for i in range(0, len(x), bs):
                    m(x[i : i + bs])

    def stage():
        compare_heldout(pair, data.x_test, data.y_test, GateConfig(budget="0"), num_classes=10, batch_size=bs)

    config = GateConfig(budget="0", max_negative_flip_rate="off", max_class_flip_rate="off")

    def whole():
        gate((m1, m2), data, config, runtime=Runtime(batch_size=bs, threads=args.threads))

    busy = busy_fraction()
    times = {}
    for name, fn in (("bare", bare), ("stage", stage), ("gate", whole), ("bare_again", bare)):
        times[name] = statistics.median(call_times(fn, repeats))
    base = min(times["bare"], times["bare_again"])
    replay = _replay(args.replay, data, pair, m1, m2, bs, repeats) if args.replay else None
    result = {
        "model": f"{args.model} ({data.name} test split, {len(x):,} inputs)",
        "batch_size": bs,
        "threads": args.threads,
        "repeats": repeats,
        "seconds": times,
        "stage_over_bare": times["stage"] / base,
        "gate_over_bare": times["gate"] / base,
        "busy_before": busy,
        "busy_after": busy_fraction(),
        "provenance": provenance(),
    }
    write_json(args.out, result)
    print(
        f"bare forward passes (both models): {base:.3f} s; held-out stage {times['stage']:.3f} s "
        f"({result['stage_over_bare']:.2f}x); whole gate call {times['gate']:.3f} s "
        f"({result['gate_over_bare']:.2f}x)"
    )
    if replay:
        print(
            f"replay of {replay['entries']:,} corpus entries: {replay['seconds']:.3f} s against "
            f"{replay['bare_seconds']:.3f} s bare ({replay['over_bare']:.2f}x)"
        )
    return 0


def _replay(n: int, data, pair, m1, m2, bs: int, repeats: int) -> dict:
    """A corpus of the first ``n`` training images replayed, against both bare passes over them."""
    import tempfile

    from deepfault.corpus import Corpus, Provenance
    from deepfault.gate.replay import replay_corpus

    x, y = data.x_train[:n], data.y_train[:n]
    with tempfile.TemporaryDirectory() as folder:
        corpus = Corpus.create(
            Path(folder) / "c", dataset=data.name, input_shape=data.input_shape, num_classes=10
        )
        corpus.add(x, y, Provenance("bench", "bench_gate", ("m1", "m2")))
        xt = torch.as_tensor(x)

        def bare():
            with torch.inference_mode():
                for m in (m1, m2):
                    for i in range(0, len(xt), bs):
                        m(xt[i : i + bs])

        seconds = statistics.median(
            call_times(lambda: replay_corpus(corpus, pair.p1, pair.p2, batch_size=bs), repeats)
        )
        bare_seconds = min(statistics.median(call_times(bare, repeats)) for _ in range(2))
    return {
        "entries": int(n),
        "seconds": seconds,
        "bare_seconds": bare_seconds,
        "over_bare": seconds / bare_seconds,
    }


if __name__ == "__main__":
    raise SystemExit(main())
