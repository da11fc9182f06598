"""Speed and memory of the coverage criteria and profiles, against the naive loops; NC table and
coverage figures of the MNIST LeNets.

Every speed figure is taken beside the literal per-input, per-neuron loops of
:mod:`deepfault.coverage.reference` in the same run and reported as a ratio. The loops are far
too slow for all inputs, so they run on a subset and their time is scaled per input (the JSON
says which). Peak memory of the profile is measured in fresh subprocesses for two input counts,
as the growth of the peak RSS (reset through ``/proc/self/clear_refs`` once the inputs are
loaded) beyond the RSS at that moment.

Usage:
    .venv/bin/python benchmarks/bench_coverage.py [--data-dir ../shared/datasets] [--threads 1]
        [--part speed|figures|all] [--repeats 3]

Models: the trained ``benchmarks/models/lenet{1,4,5}-mnist.pt``. Data: the MNIST IDX files
under ``--data-dir``. Writes ``benchmarks/results/bench_coverage.json`` (speed) and
``benchmarks/results/coverage_*.{json,png}`` (figures).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from _common import busy_fraction, call_times  # benchmarks/ is on sys.path when run as a script

from deepfault._io import write_json
from deepfault.core.batches import activations
from deepfault.coverage import CoverageConfig, build_criteria, compute_profile, measure_coverage
from deepfault.coverage import reference as ref
from deepfault.coverage.figures import plot_growth, plot_layer_coverage, plot_threshold_curve
from deepfault.models.prepare import prepare_model
from deepfault.provenance import provenance

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
#: The figures the coverage page shows.
FIGURES = REPO / "docs" / "results" / "coverage"
MODELS = REPO / "benchmarks" / "models"
ALL = "nc,nac,kmnc,nbc,snac,tknc,tknp"

TARGETS = {
    "criteria_10k_s": "all seven criteria over the 10,000 MNIST test images for LeNet-5 < 1 s",
    "profile_60k_s": "profile over the 60,000 MNIST training images < 5 s",
    "profile_memory_flat": "peak memory growth within 10% from 10,000 to 60,000 inputs",
    "would_increase_1000_ms": "would_increase on 1,000 candidates < 20 ms (all seven criteria)",
}


def _stats(times: list[float]) -> dict:
    return {"min": min(times), "median": statistics.median(times), "seconds": times}


def _load(arch: str, data_dir: str):
    prep = prepare_model(MODELS / f"{arch}-mnist.pt", "mnist", data_dir=data_dir)
    return prep.module.eval(), prep.data


def _naive_all(values: list, layout, profile, sections: int = 10) -> None:
    layers = [(la.offset, la.size) for la in layout.layers]
    ref.nc_sets(values, 0.0)
    ref.nc_sets(values, 0.0)
    ref.kmnc_sets(values, profile.low, profile.high, sections)
    ref.nbc_sets(values, profile.low, profile.high, profile.std, 0.0)
    ref.snac_sets(values, profile.high, profile.std, 0.0)
    ref.tknc_sets(values, layers, 1)
    ref.tknp_sets(values, layers, 1)


# --------------------------------------------------------------------------- speed


def bench_criteria(model, data, repeats: int, naive_n: int) -> dict:
    x_train, x_test = data.x_train, data.x_test
    profile = compute_profile(model, x_train)
    out: dict = {"inputs": len(x_test), "model": "lenet5", "layers": "default (conv1, conv2, fc1, fc2)"}
    # end to end: one pass through the model, all seven criteria updated from it
    every = CoverageConfig(criteria=ALL, profile=profile, growth=False)
    e2e = call_times(lambda: measure_coverage(model, x_test, every), repeats)
    out["end_to_end_s"] = _stats(e2e)
    fwd = call_times(lambda: [None for _ in activations(model, x_test)], repeats)
    out["forward_and_capture_s"] = _stats(fwd)
    layout, values = activations(model, x_test)
    crits = build_criteria(ALL, layout, profile=profile)

    def criteria_only():
        for c in crits:
            c.reset()
        for start in range(0, len(values), 1024):
            part = values[start : start + 1024]
            for c in crits:
                c.update(part)

    times = call_times(criteria_only, repeats)
    out["criteria_only_s"] = _stats(times)
    per = {}
    for c in crits:
        def one(c=c):
            c.reset()
            for start in range(0, len(values), 1024):
                c.update(values[start : start + 1024])
        per[c.label] = statistics.median(call_times(one, repeats))
    out["criteria_only_per_criterion_s"] = per
    rows = values[:naive_n].tolist()
    t = time.perf_counter()
    _naive_all(rows, layout, profile)
    naive = (time.perf_counter() - t) / naive_n * len(values)
    out["naive"] = {"inputs_timed": naive_n, "scaled_to_all_s": naive}
    out["speedup_criteria_only"] = naive / min(times)
    out["criteria_10k_s"] = min(times)
    out["kmnc_1000_sections_s"] = min(call_times(lambda: measure_coverage(
        model, x_test, CoverageConfig(criteria="kmnc", sections=1000, profile=profile, growth=False)), 1))
    # the deepxplore selection with layer-minmax values (DeepXplore's NC setting)
    out["deepxplore_nc_4_thresholds_end_to_end_s"] = min(call_times(lambda: measure_coverage(
        model, x_test, CoverageConfig(threshold=(0, 0.25, 0.5, 0.75), layers="deepxplore",
                                      transform="layer-minmax", growth=False)), 1))
    return out


def bench_would_increase(model, data, repeats: int) -> dict:
    profile = compute_profile(model, data.x_train[:10000])
    layout, values = activations(model, data.x_test)
    crits = build_criteria(ALL, layout, profile=profile)
    for c in crits:
        c.update(values[1000:])
    candidates = values[:1000]
    per = {c.label: statistics.median(call_times(lambda c=c: c.would_increase(candidates), repeats * 3))
           for c in crits}
    total = call_times(lambda: [c.would_increase(candidates) for c in crits], repeats * 3)
    # naive: per candidate, per neuron, its covered set minus the union so far
    rows = candidates[:50].tolist()
    t = time.perf_counter()
    state = ref.kmnc_sets(values[1000:1100].tolist(), profile.low, profile.high, 10)
    union = set().union(*state)
    [bool(s - union) for s in ref.kmnc_sets(rows, profile.low, profile.high, 10)]
    naive_kmnc = (time.perf_counter() - t) / 50 * 1000
    return {"candidates": 1000, "per_criterion_ms": {k: v * 1e3 for k, v in per.items()},
            "all_seven_ms": _stats([s * 1e3 for s in total]),
            "would_increase_1000_ms": min(total) * 1e3,
            "naive_kmnc_scaled_ms": naive_kmnc * 1e3,
            "speedup_kmnc": naive_kmnc / per["kmnc(sections=10)"]}


def bench_profile(model, data, repeats: int, naive_n: int) -> dict:
    x = data.x_train
    times = call_times(lambda: compute_profile(model, x), repeats)
    layout, values = activations(model, x[:naive_n])
    t = time.perf_counter()
    ref.profile_reference(values.tolist())
    naive_stats = (time.perf_counter() - t) / naive_n * len(x)
    fwd = call_times(lambda: [None for _ in activations(model, x)], 1)
    return {"inputs": len(x), "profile_60k_s": min(times), "seconds": _stats(times),
            "forward_and_capture_s": min(fwd),
            "naive_statistics_scaled_s": naive_stats,
            "note": "the naive loop times only the statistics over activations held in memory "
                    "(an (N, M) matrix); the streaming profile's time includes the forward pass"}


def _memory_child(n: int, data_dir: str) -> dict:
    model, data = _load("lenet5", data_dir)
    x = np.ascontiguousarray(data.x_train[:n])
    del data
    compute_profile(model, x[:64])  # warm-up: allocator pools and kernels
    with open("/proc/self/status") as fh:
        status = dict(line.split(":", 1) for line in fh)
    rss0 = int(status["VmRSS"].split()[0])
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak RSS (VmHWM)
        reset = True
    except OSError:
        reset = False
    compute_profile(model, x)
    with open("/proc/self/status") as fh:
        status = dict(line.split(":", 1) for line in fh)
    peak = int(status["VmHWM"].split()[0]) if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"inputs": n, "rss_after_load_kb": rss0, "peak_kb": peak, "growth_kb": peak - rss0,
            "peak_reset": reset}


def bench_memory(data_dir: str, threads: int | None) -> dict:
    """Peak RSS growth for 10,000 and 60,000 inputs, with glibc's default allocator settings and
    with a fixed mmap threshold (``MALLOC_MMAP_THRESHOLD_``). By default glibc raises its mmap
    threshold after large blocks are freed and serves later batch-sized tensors from the heap,
    whose fragmentation grows with the number of batches; with the threshold fixed every
    batch-sized block is returned to the system, so the growth shows what the profile itself
    holds."""
    out = {}
    for mode, env in (("default_malloc", {}), ("fixed_mmap_threshold", {"MALLOC_MMAP_THRESHOLD_": "131072"})):
        runs = []
        for n in (10_000, 60_000):
            cmd = [sys.executable, __file__, "--memory-child", str(n), "--data-dir", data_dir]
            if threads:
                cmd += ["--threads", str(threads)]
            res = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **env})
            runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
        a, b = (r["growth_kb"] for r in runs)
        out[mode] = {"env": env, "runs": runs, "growth_ratio_60k_vs_10k": b / a if a else None,
                     "flat": abs(b - a) <= 0.1 * max(a, 1)}
    out["profile_memory_flat"] = out["fixed_mmap_threshold"]["flat"]
    return out


# --------------------------------------------------------------------------- figures


def figures(data_dir: str, seed: int = 0, draws: int = 5) -> dict:
    thresholds = [0.0, 0.25, 0.5, 0.75]
    table, curves = {}, {}
    rng = np.random.default_rng(seed)
    for arch in ("lenet1", "lenet4", "lenet5"):
        model, data = _load(arch, data_dir)
        config = CoverageConfig(threshold=thresholds, layers="deepxplore", transform="layer-minmax",
                                growth=False)
        full = measure_coverage(model, data.x_test, config)
        tens = []
        for _ in range(draws):
            pick = rng.choice(len(data.x_test), 10, replace=False)
            r = measure_coverage(model, data.x_test[pick], config)
            tens.append([res.ratio for res in r.results])
        tens = np.array(tens)
        table[arch] = {
            "neurons": full.layout.num_neurons,
            "test_set": {f"{t:g}": r.ratio for t, r in zip(thresholds, full.results, strict=True)},
            "random_10_mean": {f"{t:g}": float(v) for t, v in zip(thresholds, tens.mean(0), strict=True)},
            "random_10_std": {f"{t:g}": float(v) for t, v in zip(thresholds, tens.std(0), strict=True)},
        }
        curves[f"{arch}, 10,000 test inputs"] = [(t, r.ratio) for t, r in zip(thresholds, full.results,
                                                                            strict=True)]
        curves[f"{arch}, 10 random inputs (mean of {draws})"] = list(zip(thresholds, tens.mean(0).tolist(),
                                                                         strict=True))
    plot_threshold_curve(curves, FIGURES / "coverage_threshold.png",
                         title="NC versus threshold (deepxplore layers, layer-minmax)")
    # all seven criteria on LeNet-5 (raw values, default layers, profile of the training split)
    model, data = _load("lenet5", data_dir)
    profile = compute_profile(model, data.x_train)
    # nac is nc on raw values: DeepGauge's name for it
    report = measure_coverage(model, data.x_test, CoverageConfig(criteria="nac,kmnc,nbc,snac,tknc,tknp",
                                                                 profile=profile))
    plot_layer_coverage(report, FIGURES / "coverage_layers.png",
                        title="LeNet-5: coverage per layer, 10,000 MNIST test inputs (raw values)")
    plot_growth(report, FIGURES / "coverage_growth.png",
                title="LeNet-5: coverage growth over the MNIST test set")
    out = {"nc_table": table, "thresholds": thresholds, "random_draws": draws, "seed": seed,
           "lenet5_all_criteria": report.to_dict(),
           "figures": ["coverage_threshold.png", "coverage_layers.png", "coverage_growth.png"]}
    write_json(RESULTS / "coverage_lenet.json", {"provenance": provenance("cpu", argv=sys.argv), **out})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "datasets"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--part", choices=("speed", "figures", "all"), default="all")
    parser.add_argument("--naive-n", type=int, default=50)
    parser.add_argument("--memory-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_child is not None:
        print(json.dumps(_memory_child(args.memory_child, args.data_dir)))
        return 0
    if args.part in ("figures", "all"):
        fig = figures(args.data_dir)
        for arch, row in fig["nc_table"].items():
            print(arch, row["neurons"], "test set", row["test_set"], "10 random", row["random_10_mean"])
    if args.part in ("speed", "all"):
        busy = busy_fraction()
        model, data = _load("lenet5", args.data_dir)
        t0 = time.perf_counter()
        result = {
            "provenance": {**provenance("cpu", argv=sys.argv), "threads": torch.get_num_threads(),
                           "background_cpu_busy_fraction": busy, "loadavg": os.getloadavg()},
            "targets": TARGETS,
            "criteria": bench_criteria(model, data, args.repeats, args.naive_n),
            "would_increase": bench_would_increase(model, data, args.repeats),
            "profile": bench_profile(model, data, args.repeats, args.naive_n * 4),
            "memory": bench_memory(args.data_dir, args.threads),
        }
        result["summary"] = {
            "criteria_10k_s": result["criteria"]["criteria_10k_s"],
            "criteria_end_to_end_10k_s": result["criteria"]["end_to_end_s"]["min"],
            "forward_and_capture_10k_s": result["criteria"]["forward_and_capture_s"]["min"],
            "speedup_criteria_vs_naive": result["criteria"]["speedup_criteria_only"],
            "profile_60k_s": result["profile"]["profile_60k_s"],
            "profile_memory_growth_ratio":
                result["memory"]["fixed_mmap_threshold"]["growth_ratio_60k_vs_10k"],
            "profile_memory_growth_ratio_default_malloc":
                result["memory"]["default_malloc"]["growth_ratio_60k_vs_10k"],
            "profile_memory_flat": result["memory"]["profile_memory_flat"],
            "would_increase_1000_ms": result["would_increase"]["would_increase_1000_ms"],
            "background_cpu_busy_fraction_after": busy_fraction(),
            "bench_seconds": time.perf_counter() - t0,
        }
        write_json(RESULTS / "bench_coverage.json", result)
        print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
