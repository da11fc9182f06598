"""Speed and memory of the spectrum and of synthesis, against the literal reference loops.

Every measurement is taken side by side with :mod:`deepfault.testing.reference` in the same run
and reported as a ratio. The reference loops are far too slow for the full input counts,
so they run on a small subset and their time is scaled per input (the JSON says which
subset). Peak memory of the spectrum is measured in fresh subprocesses, for two input
counts, as the growth of the peak RSS beyond the RSS once the inputs are loaded.

Usage:
    .venv/bin/python benchmarks/bench_deepfault.py [--device cpu] [--repeats 3] [--quick]

Models have random weights (seeded): speed does not depend on what a model has learned.
MNIST inputs are the real test/training images when ``--data-dir`` has them, otherwise
random arrays of the same shape (the JSON says which). CIFAR-sized inputs are random.
"""

from __future__ import annotations

import argparse
import gc
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
from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

from deepfault import Runtime, compute_spectrum, synthesize
from deepfault._io import write_json
from deepfault.localization.selection import localize
from deepfault.models.zoo import build_model
from deepfault.provenance import provenance
from deepfault.testing.reference import spectrum_reference, synthesize_reference

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"mnist_1": (1, 28, 28), "cifar_3": (3, 32, 32)}
SYNTH_KS = {"mnist_1": (1, 2, 3, 5, 10), "cifar_3": (10, 20, 30, 40, 50)}

# (full, quick) sizes
CONFIG = {
    "spectrum_n_large": (10_000, 2_000),  # "all inputs" spectrum
    "spectrum_ref_n": (200, 50),  # reference subset, scaled per input
    "synth_n": ({"mnist_1": 1024, "cifar_3": 64}, {"mnist_1": 256, "cifar_3": 16}),
    "synth_ref_n": ({"mnist_1": 20, "cifar_3": 3}, {"mnist_1": 5, "cifar_3": 1}),
    "memory_n": (
        {"mnist_1": (10_000, 60_000), "cifar_3": (2_000, 10_000)},
        {"mnist_1": (5_000, 20_000), "cifar_3": (500, 2_000)},
    ),
}

TARGETS = {
    "synth_mnist_1_k10_speedup": ">= 1000x faster per input than the reference",
    "synth_mnist_1_k10_ms": "< 1 ms per input",
    "synth_cifar_3_k50_ms": "< 20 ms per input",
    "spectrum_mnist_1_class_ms": "< 20 ms for one class (~1,000 inputs)",
    "spectrum_cifar_3_10k_s": "< 30 s for 10,000 inputs",
    "memory_flat": "peak RSS growth within 10% between the two input counts",
}


# --- helpers ---------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn, repeats: int, device: torch.device, warmup: bool = True) -> list[float]:
    """Wall seconds of ``fn()`` for each repeat (after one untimed warm-up call)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _model(name: str, device: torch.device, seed: int = 0) -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build_model(name).eval().to(device)


def _random_inputs(n: int, shape, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, *shape), dtype=np.float32)
    y = rng.integers(0, 10, n)
    return x, y


def _mnist(data_dir: Path, split: str):
    """Real MNIST ``(x, y)``, or ``None`` when it cannot be loaded."""
    try:
        from deepfault.data import load_dataset

        ds = load_dataset("mnist", data_dir=data_dir)
    except Exception as err:  # noqa: BLE001 - any failure means: fall back to random inputs
        print(f"note: MNIST not loaded ({type(err).__name__}: {err}); using random inputs")
        return None
    return (ds.x_test, ds.y_test) if split == "test" else (ds.x_train, ds.y_train)


def _inputs(model_name: str, n: int, data_dir: Path, split: str = "test", seed: int = 1):
    """``(x, y, source)`` with ``n`` inputs for ``model_name``."""
    if model_name == "mnist_1":
        real = _mnist(data_dir, split)
        if real is not None and len(real[0]) >= n:
            return np.ascontiguousarray(real[0][:n]), real[1][:n].astype(np.int64), "mnist " + split
    x, y = _random_inputs(n, SHAPES[model_name], seed)
    return x, y, "random uniform [0, 1)"


def _med(times: list[float]) -> float:
    return statistics.median(times)


# --- measurements ----------------------------------------------------------------------


def bench_spectrum(model_name, device, repeats, quick, data_dir) -> list[dict]:
    n_large = CONFIG["spectrum_n_large"][quick]
    n_ref = CONFIG["spectrum_ref_n"][quick]
    model = _model(model_name, device)
    x, y, source = _inputs(model_name, n_large, data_dir)
    rows = []
    # One class: the test inputs labelled 0 (about 1,000 of 10,000); random labels for CIFAR.
    cls = 0
    xc, yc = x[y == cls], y[y == cls]
    cases = [("one class", xc, yc, {"target_class": cls}), ("all inputs", x, y, {})]
    ref_x, ref_y = x[:n_ref], y[:n_ref]
    ref_times = _timed(lambda: spectrum_reference(model, ref_x, ref_y), repeats, device)
    ref_per_input = _med(ref_times) / n_ref
    for case, xs, ys, kw in cases:
        times = _timed(lambda xs=xs, ys=ys, kw=kw: compute_spectrum(model, xs, ys, **kw),
                       repeats, device)
        ours = _med(times)
        ref_scaled = ref_per_input * len(xs)
        rows.append({
            "section": "spectrum",
            "model": model_name,
            "case": case,
            "n_inputs": len(xs),
            "inputs": source,
            "seconds": times,
            "median_s": ours,
            "reference_median_s_scaled": ref_scaled,
            "reference": {"n_inputs_timed": n_ref, "seconds": ref_times,
                          "per_input_s": ref_per_input,
                          "note": "spectrum_reference timed on the first n_inputs_timed "
                                  "inputs and scaled linearly to n_inputs"},
            "speedup": ref_scaled / ours,
        })
    return rows


def bench_synthesis(model_name, device, repeats, quick, data_dir) -> list[dict]:
    n = CONFIG["synth_n"][quick][model_name]
    n_ref = CONFIG["synth_ref_n"][quick][model_name]
    model = _model(model_name, device)
    x, y, source = _inputs(model_name, 2_000, data_dir)
    # Neurons as the pipeline picks them: D* on the spectrum of class 0.
    spec = compute_spectrum(model, x, y, target_class=0)
    xs = x[y == 0][:n] if model_name == "mnist_1" else x[:n]
    if len(xs) < n:
        xs = x[:n]
    rows = []
    for k in SYNTH_KS[model_name]:
        sel = localize(spec, measure="dstar", k=k)
        times = _timed(lambda sel=sel: synthesize(model, xs, sel), repeats, device)
        ref_times = _timed(lambda sel=sel: synthesize_reference(model, xs[:n_ref], sel),
                           repeats, device)
        ours = _med(times) / len(xs)
        ref = _med(ref_times) / n_ref
        diff = float((synthesize(model, xs[:n_ref], sel)
                      - synthesize_reference(model, xs[:n_ref], sel)).abs().max())
        rows.append({
            "section": "synthesis",
            "model": model_name,
            "k": k,
            "layers": sel.layer_distribution(),
            "n_inputs": len(xs),
            "inputs": source,
            "seconds": times,
            "per_input_ms": ours * 1e3,
            "reference": {"n_inputs_timed": n_ref, "seconds": ref_times,
                          "per_input_ms": ref * 1e3,
                          "note": "synthesize_reference timed on the first n_inputs_timed "
                                  "inputs, per input"},
            "speedup": ref / ours,
            "max_abs_diff_vs_reference": diff,
        })
    return rows


def _peak_kib() -> int:
    """Peak RSS in KiB: ``VmHWM`` where Linux has it, else ``ru_maxrss``.

    ``ru_maxrss`` of a child started by ``subprocess`` starts at the parent's RSS (Linux
    carries the forked copy's high-water mark across ``exec``) and ``clear_refs`` does not
    reset that part, so it cannot see a peak below the parent's; ``VmHWM`` is this
    process's own high-water mark and is reset by ``clear_refs``.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _memory_child(model_name: str, n: int, device: str, data_dir: str) -> dict:
    """Runs in a fresh interpreter: peak RSS of one spectrum beyond the loaded inputs."""
    device = torch.device(device)
    if model_name == "mnist_1":
        real = _mnist(Path(data_dir), "train")
        if real is not None and len(real[0]) >= n:
            x, y, source = np.array(real[0][:n]), real[1][:n].astype(np.int64), "mnist train"
        else:
            x, y, source = *_random_inputs(n, SHAPES[model_name], 2), "random uniform [0, 1)"
        del real
    else:
        x, y = _random_inputs(n, SHAPES[model_name], 2)
        source = "random uniform [0, 1)"
    model = _model(model_name, device)
    # Warm-up on 8 inputs loads kernels and starts thread pools; it is kept small so that
    # the batch buffers of the measured spectrum are not already resident (freed heap
    # memory stays in RSS and would hide them).
    compute_spectrum(model, x[:8], y[:8], runtime=Runtime(batch_size=8))
    gc.collect()
    # Reset the peak RSS to the current RSS (Linux), so that the transient peak of loading
    # and converting the data set does not hide the spectrum's own peak.
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        reset = True
    except OSError:
        reset = False
    base_kib, base_ru = _peak_kib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    compute_spectrum(model, x, y)
    seconds = time.perf_counter() - start
    peak_kib, peak_ru = _peak_kib(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "n_inputs": n,
        "inputs": source,
        "input_mib": x.nbytes / 2**20,
        "baseline_rss_mib": base_kib / 1024,
        "peak_rss_mib": peak_kib / 1024,
        "growth_mib": (peak_kib - base_kib) / 1024,
        "ru_maxrss_mib": [base_ru / 1024, peak_ru / 1024],
        "peak_reset_before_spectrum": reset,
        "seconds": seconds,
    }


def bench_memory(model_name, device, quick, data_dir) -> dict:
    counts = CONFIG["memory_n"][quick][model_name]
    runs = []
    for n in counts:
        out = subprocess.run(
            [sys.executable, __file__, "--_memory-child", model_name, str(n),
             "--device", str(device), "--data-dir", str(data_dir),
             "--threads", str(torch.get_num_threads())],
            check=True, capture_output=True, text=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    small, large = runs
    return {
        "section": "memory",
        "model": model_name,
        "runs": runs,
        "growth_ratio_large_over_small": large["growth_mib"] / max(small["growth_mib"], 1e-9),
        "method": "fresh subprocess per count; inputs loaded into memory first, one warm-up "
                  "spectrum on 8 inputs, peak RSS reset (/proc/self/clear_refs 5), then "
                  "growth = peak RSS (VmHWM) after the spectrum - before it (ru_maxrss is "
                  "recorded too but inherits the parent's peak across exec); the input "
                  "array itself is resident before the baseline, so growth is the spectrum's "
                  "working memory beyond the inputs",
    }


# --- report ----------------------------------------------------------------------------


def _targets(results: dict) -> dict:
    def find(section, model, **kw):
        for row in results[section]:
            if row["model"] == model and all(row.get(a) == b for a, b in kw.items()):
                return row
        return None

    out = {}
    s10 = find("synthesis", "mnist_1", k=10)
    c50 = find("synthesis", "cifar_3", k=50)
    one = find("spectrum", "mnist_1", case="one class")
    big = find("spectrum", "cifar_3", case="all inputs")
    if s10:
        out["synth_mnist_1_k10_speedup"] = (s10["speedup"], s10["speedup"] >= 1000)
        out["synth_mnist_1_k10_ms"] = (s10["per_input_ms"], s10["per_input_ms"] < 1)
    if c50:
        out["synth_cifar_3_k50_ms"] = (c50["per_input_ms"], c50["per_input_ms"] < 20)
    if one:
        out["spectrum_mnist_1_class_ms"] = (one["median_s"] * 1e3, one["median_s"] < 0.020)
    if big:
        scaled = big["median_s"] * 10_000 / big["n_inputs"]
        out["spectrum_cifar_3_10k_s"] = (scaled, scaled < 30)
    if results["memory"]:
        worst = max(abs(m["growth_ratio_large_over_small"] - 1) for m in results["memory"])
        out["memory_flat"] = (worst, worst <= 0.10)
    return {name: {"target": TARGETS[name], "measured": round(v, 4), "met": bool(ok)}
            for name, (v, ok) in out.items()}


def _table(results: dict) -> str:
    lines = [f"{'measurement':46s} {'ours':>12s} {'reference':>12s} {'ratio':>9s}"]
    for r in results["spectrum"]:
        name = f"spectrum {r['model']} {r['case']} (n={r['n_inputs']})"
        lines.append(f"{name:46s} {r['median_s'] * 1e3:10.1f}ms "
                     f"{r['reference_median_s_scaled'] * 1e3:10.1f}ms {r['speedup']:8.0f}x")
    for r in results["synthesis"]:
        name = f"synthesis {r['model']} k={r['k']} (per input)"
        lines.append(f"{name:46s} {r['per_input_ms']:10.3f}ms "
                     f"{r['reference']['per_input_ms']:10.3f}ms {r['speedup']:8.0f}x")
    for m in results["memory"]:
        for run in m["runs"]:
            name = f"memory {m['model']} spectrum (n={run['n_inputs']})"
            lines.append(f"{name:46s} {run['growth_mib']:8.1f}MiB "
                         f"{'(inputs ' + format(run['input_mib'], '.0f') + 'MiB)':>14s}")
    lines.append("")
    for name, t in results["targets"].items():
        lines.append(f"{'MET ' if t['met'] else 'MISS'} {name}: {t['measured']} ({t['target']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed repeats per measurement (default 3, 1 with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default benchmarks/results/bench_<device>.json)")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 1 minute)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch intra-op threads (default 0: torch's default, one per core); "
                             "1 is much faster when other processes load the cores (NOTES.md)")
    parser.add_argument("--_memory-child", nargs=2, metavar=("MODEL", "N"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args._memory_child:
        name, n = args._memory_child
        print(json.dumps(_memory_child(name, int(n), args.device, str(args.data_dir))))
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    device = torch.device(args.device)
    repeats = args.repeats or (1 if args.quick else 3)
    quick = int(args.quick)
    out_path = args.out or REPO / "benchmarks" / "results" / (
        f"bench_{args.device}{'_quick' if args.quick else ''}.json")

    started = time.perf_counter()
    background = {"before": busy_fraction()}
    results: dict = {"spectrum": [], "synthesis": [], "memory": []}
    for name in ("mnist_1", "cifar_3"):
        results["spectrum"] += bench_spectrum(name, device, repeats, quick, args.data_dir)
    background["after_spectrum"] = busy_fraction()
    for name in ("mnist_1", "cifar_3"):
        results["synthesis"] += bench_synthesis(name, device, repeats, quick, args.data_dir)
    background["after_synthesis"] = busy_fraction()
    for name in ("mnist_1", "cifar_3"):
        results["memory"].append(bench_memory(name, device, quick, args.data_dir))
    results["targets"] = _targets(results)

    report = {
        "provenance": {
            **provenance(device, argv=sys.argv),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "background_cpu_busy_fraction": background,
            "background_note": "share of all CPUs busy while the benchmark slept, sampled "
                               "for 0.5 s between sections; >0 means other processes "
                               "competed for the cores during the timings",
        },
        "config": {
            "quick": bool(args.quick),
            "repeats": repeats,
            "statistic": "median over repeats, after one untimed warm-up call",
            "weights": "random (torch.manual_seed(0) via fork_rng)",
            "synthesis": {"step": 1.0, "distance": 0.1, "bounds": [0.0, 1.0],
                          "normalize": True, "batch_size": 256,
                          "neurons": "D* (star=3) top-k on the class-0 spectrum of 2,000 inputs"},
            "sizes": {key: value[quick] for key, value in CONFIG.items()},
        },
        **results,
        "total_seconds": time.perf_counter() - started,
    }
    write_json(out_path, report)
    print(_table(results))
    print(f"\n{time.perf_counter() - started:.0f} s; wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
