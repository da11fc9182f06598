"""How close the DCGAN discriminator (DRFuzz's default check) runs to the core's limit.

Issue 29 asked whether the discriminator could be made ten times cheaper per mutant. This
measures, on one thread and in one run:

- the core's float32 matrix product (``1,024 x 1,024``), the reference rate in GFLOP/s;
- each of the discriminator's layers on passes of 64 MNIST-sized inputs (its CPU pass), in
  the channels-last layout it runs in: milliseconds and GFLOP/s for the convolutions and the
  dense layers (two floating-point operations per multiply-add), and each layer's share;
- the same 5x5 64-to-128-channel convolution as an im2col matrix product (``unfold``, then
  one product), the usual alternative;
- the whole :class:`~deepfault.fuzz.fidelity.checks.DiscriminatorFidelity` per image, and its
  rate in GFLOP/s from the layers' operation counts.

The weights are the architecture's seeded initial ones (``dcgan_discriminator``): a layer's
cost does not depend on the values. Each figure is the best of ``--repeats`` timings.

Usage:
    .venv/bin/python benchmarks/bench_discriminator.py [--repeats 20]

Writes ``benchmarks/results/bench_discriminator.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import call_times  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.fuzz.fidelity.checks import DiscriminatorFidelity
from deepfault.models.dcgan import dcgan_discriminator
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
#: The discriminator's pass on a CPU (``DiscriminatorFidelity``'s default there).
ROWS = 64


def best_seconds(fn, repeats: int) -> float:
    """The fastest of ``repeats`` calls of ``fn`` (after two warm-up calls)."""
    return min(call_times(fn, repeats, warmup=2))


def layer_flops(model: torch.nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Floating-point operations per input of each convolution and dense layer (2 per multiply-add)."""
    flops = {}
    for name, module in model.named_children():
        y = module(x)
        if isinstance(module, torch.nn.Conv2d):
            k = module.in_channels * module.kernel_size[0] * module.kernel_size[1]
            flops[name] = 2.0 * k * y[0].numel()
        elif isinstance(module, torch.nn.Linear):
            flops[name] = 2.0 * module.in_features * module.out_features
        x = y
    return flops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/bench_discriminator.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_before = os.getloadavg()

    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    gemm_gflops = 2 * 1024**3 / best_seconds(lambda: a @ b, args.repeats) / 1e9

    model = dcgan_discriminator().eval()
    check = DiscriminatorFidelity(model, bounds=(0.0, 1.0), input_range=(-1.0, 1.0))
    net = check.model  # channels-last, as the check runs it
    x = torch.rand(ROWS, 1, 28, 28).to(memory_format=torch.channels_last)
    layers = []
    with torch.inference_mode():
        flops = layer_flops(net, x[:1])
        h = x
        for name, module in net.named_children():
            inp = h
            seconds = best_seconds(lambda m=module, i=inp: m(i), args.repeats)
            h = module(inp)
            row = {"layer": name, "ms_per_pass": 1e3 * seconds}
            if name in flops:
                row["gflops"] = flops[name] * ROWS / seconds / 1e9
            layers.append(row)
        conv2 = net.conv2
        before_conv2 = net.tanh1(net.pool1(net.conv1(x))).contiguous()
        weight = conv2.weight.reshape(conv2.out_channels, -1).t().contiguous()

        def im2col():
            cols = F.unfold(before_conv2, conv2.kernel_size).transpose(1, 2)  # (N, 100, 1600)
            return cols @ weight + conv2.bias

        im2col_seconds = best_seconds(im2col, args.repeats)
        images = torch.rand(ROWS * 16, 1, 28, 28)
        check.dedupe = False
        whole = best_seconds(lambda: check._score(images), max(args.repeats // 4, 3)) / len(images)
    total_layers = sum(r["ms_per_pass"] for r in layers)
    for r in layers:
        r["share"] = r["ms_per_pass"] / total_layers
    im2col_gflops = flops["conv2"] * ROWS / im2col_seconds / 1e9
    whole_gflops = sum(flops.values()) / whole / 1e9
    out = {
        "threads": 1, "rows_per_pass": ROWS, "repeats": args.repeats,
        "gemm_1024_gflops": gemm_gflops, "layers": layers,
        "conv2_im2col_ms_per_pass": 1e3 * im2col_seconds, "conv2_im2col_gflops": im2col_gflops,
        "mflop_per_image": sum(flops.values()) / 1e6,
        "discriminator_ms_per_image": 1e3 * whole, "discriminator_images_per_second": 1 / whole,
        "discriminator_gflops": whole_gflops, "discriminator_share_of_gemm_rate": whole_gflops / gemm_gflops,
        "load_average": {"before": load_before, "after": os.getloadavg()}, "cpus": os.cpu_count(),
        "provenance": provenance("cpu"),
    }
    print(f"float32 matrix product 1,024 x 1,024: {gemm_gflops:.1f} GFLOP/s (one thread)")
    for r in layers:
        rate = f"{r['gflops']:6.1f} GFLOP/s" if "gflops" in r else ""
        print(f"  {r['layer']:8s} {r['ms_per_pass']:7.2f} ms per {ROWS} ({100 * r['share']:4.1f}%) {rate}")
    print(f"conv2 as im2col + product: {1e3 * im2col_seconds:.2f} ms per {ROWS} "
          f"({im2col_gflops:.1f} GFLOP/s)")
    print(f"the whole check: {1e3 * whole:.3f} ms per image ({1 / whole:.0f} /s), "
          f"{out['mflop_per_image']:.1f} MFLOP each: {whole_gflops:.1f} GFLOP/s, "
          f"{100 * out['discriminator_share_of_gemm_rate']:.0f}% of the matrix product's rate")
    write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
