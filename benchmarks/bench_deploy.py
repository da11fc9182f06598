"""Deployment regressions: PyTorch float M1 against the files it is deployed as, run by ONNX Runtime.

The pair comes from the deployment scenario (``deepfault scenario deploy``) on the zoo's MNIST
LeNet-5: M1 is the float PyTorch model, each M2 an ONNX file run by ONNX Runtime as a black box.
Measured in one run, one after the other, with the same seed, fidelity and budget each:

1. M2 = M1 itself, in PyTorch (the same-run reference: no fault can exist; its executed mutants
   per second are the reference for the black box's cost);
2. M2 = the float ONNX export in ONNX Runtime (no regression expected: the export agrees with M1
   to about 1e-6, see docs/drfuzz.md);
3. M2 = the dynamic int8 file (``quantize_dynamic``: ConvInteger/MatMulInteger), one input per
   runtime call (its activations are scaled per batch);
4. M2 = the static QDQ int8 file (calibrated on 512 training inputs).

Reports for each: new #URF, #URF per minute, executed mutants per second and its ratio to run 1,
and writes the faults grid of run 3 as a PNG. Record the load average beside the numbers.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_deploy.py [--seconds 60] [--quick] [--threads 1]
        [--fidelity discriminator]

Writes ``benchmarks/results/bench_deploy[-FIDELITY].json`` and
``benchmarks/results/bench_deploy-int8-faults[-FIDELITY].png``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
from _common import busy_fraction

from deepfault._io import write_json
from deepfault.fuzz import regress
from deepfault.fuzz.figures import fault_grid
from deepfault.models.deploy import make_deployment
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks/results"


def campaign(m1, m2, data, *, runtime: str, fidelity: str, seconds: float, threads: int):
    t = time.perf_counter()
    out = regress(m1, m2, dataset=data, runtime=runtime, budget=f"{seconds:g}s", batch=64, seed=0,
                  fidelity=fidelity)
    r, m = out.result, out.result.metrics
    minutes = r.seconds / 60
    row = {"m2": str(m2), "runtime": runtime, "fidelity": fidelity, "seconds": r.seconds,
           "setup_seconds": r.setup_seconds, "wall_seconds": time.perf_counter() - t,
           "iterations": r.iterations,
           "generated": r.generated, "executed": r.queries, "new_rf": m.rf, "new_urf": m.urf,
           "urf_per_minute": m.urf / minutes, "seeds_m2_gets_wrong": m.initial_rf,
           "executed_per_second": r.queries / r.seconds, "mutants_per_second": r.generated / r.seconds,
           "threads": threads}
    return row, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(Path.home() / ".cache/deepfault/models/lenet5-mnist.pt"))
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared/datasets"))
    ap.add_argument("--seconds", type=float, default=60.0, help="fuzzing seconds per campaign")
    ap.add_argument("--quick", action="store_true", help="15 s per campaign")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--fidelity", default="discriminator", help="the campaigns' fidelity check")
    ap.add_argument("--work", default=None, help="where the scenario's files go (default: a temporary one)")
    ap.add_argument("--runs", default="torch,float,int8,int8-static",
                    help="which M2s: torch (M1 itself), float, int8, int8-static")
    args = ap.parse_args()
    seconds = 15.0 if args.quick else args.seconds
    torch.set_num_threads(args.threads)
    busy = busy_fraction()
    load_before = os.getloadavg()
    t = time.perf_counter()
    work = args.work or tempfile.mkdtemp(prefix="bench_deploy-")
    dep = make_deployment(args.model, "mnist", data_dir=args.data_dir, out_dir=work,
                          formats=["onnx", "onnx-int8", "onnx-int8-static"])
    scenario_seconds = time.perf_counter() - t
    print(f"scenario: M1 accuracy {dep.m1_accuracy:.4f}; " + ", ".join(
        f"{k} {dep.accuracy[k]:.4f} ({dep.regressions[k]} regressions)" for k in dep.files), flush=True)
    from deepfault.fuzz.regress import load_pair

    m1 = dep.m1_path
    _, _, data = load_pair(m1, m1, dataset="mnist", data_dir=args.data_dir)
    chosen = args.runs.split(",")
    runs = [(name, m2, rt) for key, name, m2, rt in (
        ("torch", "torch M1 copy", m1, "auto"), ("float", "ORT float", dep.files["onnx"], "onnxruntime"),
        ("int8", "ORT int8 dynamic", dep.files["onnx-int8"], "onnxruntime"),
        ("int8-static", "ORT int8 static", dep.files["onnx-int8-static"], "onnxruntime")) if key in chosen]
    rows, outcomes = [], {}
    for name, m2, runtime in runs:
        row, out = campaign(m1, m2, data, runtime=runtime, fidelity=args.fidelity, seconds=seconds,
                            threads=args.threads)
        row["name"] = name
        rows.append(row)
        outcomes[name] = out
        print(f"{name:17s}: new #URF {row['new_urf']:5d} ({row['urf_per_minute']:7.1f}/min), new #RF "
              f"{row['new_rf']}, {row['executed_per_second']:7.0f} executed/s, {row['iterations']} "
              f"iterations, seeds M2 gets wrong {row['seeds_m2_gets_wrong']}", flush=True)
    ref = rows[0]["executed_per_second"] if rows[0]["name"] == "torch M1 copy" else None
    for row in rows:
        row["executed_ratio_to_torch"] = None if ref is None else row["executed_per_second"] / ref
    suffix = "" if args.fidelity == "discriminator" else f"-{args.fidelity.replace(':', '_')}"
    png = RESULTS / f"bench_deploy-int8-faults{suffix}.png"
    out = outcomes.get("ORT int8 dynamic")
    idx: list[int] = []
    if out is not None:
        r = out.result
        generated = ~r.faults.select(r.faults.kind == 0).initial
        idx = [i for i, g in enumerate(generated) if g][:16]
        arrays = r.fault_arrays()
    if out is not None and idx:
        rows = {key: arrays[key][idx] for key in ("inputs", "label", "m2_pred")}
        fault_grid(out.seed_inputs[idx], rows, png, bounds=out.bounds, class_names=out.class_names,
                   title=f"LeNet-5: PyTorch float vs ONNX Runtime int8 (dynamic), {args.fidelity}")
    result = {
        "model": args.model, "seconds_per_campaign": seconds, "threads": args.threads,
        "fidelity": args.fidelity,
        "scenario": {**dep.to_dict(), "scenario_seconds": scenario_seconds}, "runs": rows,
        "grid": png.name if idx else None,
        "load_average": {"before": load_before, "after": os.getloadavg()}, "busy_before": busy,
        "cpus": os.cpu_count(), "provenance": provenance("cpu"),
    }
    out_json = RESULTS / f"bench_deploy{suffix}.json"
    write_json(out_json, result)
    print(f"load average {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
          f"wrote {out_json}" + (f", {png}" if idx else ""))


if __name__ == "__main__":
    main()
