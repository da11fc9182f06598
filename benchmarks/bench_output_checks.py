"""Cost of the model-output checks (issue 30) on a LeNet-5, against the work they guard.

- ``first batch``: :func:`deepfault.core.outputs.check_model_outputs` on 8 inputs (what
  ``prepare_model`` runs once per model: a forward of 8 inputs, one of 1, and the
  comparisons), against one forward of a 1,024-input batch (one batch of any method's loop).
- ``every batch``: :func:`deepfault.core.outputs.check_outputs_finite` on a ``(1024, 10)``
  output, against the forward of that batch.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_output_checks.py [--quick] [--threads 1]

Inputs are random MNIST-sized images (1 x 28 x 28): the cost does not depend on their content.
Each time is the median of repeated calls after a warm-up; the machine's busy share is recorded
beside it. Writes ``benchmarks/results/bench_output_checks.json`` and prints the numbers.
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
from deepfault.core.capture import forward  # noqa: E402
from deepfault.core.outputs import SAMPLE, check_model_outputs, check_outputs_finite  # noqa: E402
from deepfault.models import build_model  # noqa: E402
from deepfault.provenance import provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def median_ms(fn, repeats: int) -> float:
    return 1000 * statistics.median(call_times(fn, repeats))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats (seconds)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bench_output_checks.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    repeats = 5 if args.quick else 30
    torch.manual_seed(0)
    model = build_model("lenet5").eval()
    x = torch.rand(1024, 1, 28, 28)
    busy_before = busy_fraction()
    with torch.inference_mode():
        out = forward(model, x)
        check_ms = median_ms(lambda: check_model_outputs(model, x[:SAMPLE], num_classes=10), repeats)
        batch_ms = median_ms(lambda: forward(model, x), max(3, repeats // 3))
        finite_ms = median_ms(lambda: check_outputs_finite(model, x, out), repeats * 10)
    result = {
        "model": "lenet5 (1x28x28 -> 10)", "threads": args.threads, "repeats": repeats,
        "first_batch_check_ms": round(check_ms, 3),
        "forward_1024_ms": round(batch_ms, 3),
        "every_batch_isfinite_ms": round(finite_ms, 4),
        "every_batch_share_of_forward": round(finite_ms / batch_ms, 5),
        "first_batch_share_of_one_1024_batch": round(check_ms / batch_ms, 4),
        "busy_fraction_before": busy_before, "busy_fraction_after": busy_fraction(),
        "provenance": provenance(),
    }
    write_json(args.out, result)
    print(f"first-batch check (8 + 1 inputs): {check_ms:.2f} ms; one forward of 1,024 inputs: "
          f"{batch_ms:.1f} ms "
          f"({100 * check_ms / batch_ms:.1f}% of one batch)")
    print(f"every-batch isfinite on (1024, 10): {finite_ms * 1000:.1f} us "
          f"({100 * finite_ms / batch_ms:.3f}% of "
          f"its forward); machine busy {busy_before} / {result['busy_fraction_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
