"""Peak memory of the CLI on ResNet-50 and 5,000 inputs at 224x224, with the defaults (issue 26:
"a ResNet-50 `coverage profile` and `measure` over 5,000 inputs at 224x224, with the defaults,
stays under 4 GiB; so do `run`, `xplore` and `regress` on ResNet-50").

Writes, under ``--workdir``:

* ``resnet50.pt``: ``benchmarks/models/resnet.py:ResNet50`` (10 classes), seeded random
  weights, its last bias centred on the first 64 test inputs so that its predictions spread
  over the classes (and class 0 is predicted at least once); ``resnet50-m2.pt``: a perturbed
  copy (xplore's second model, regress's M2);
* ``data-N.npz``: ``--n`` test and ``--n`` training inputs, uniform noise in [0, 1),
  3x224x224 float32, written a chunk at a time as ``numpy.savez`` would (uncompressed), so
  ``load_npz`` memory-maps them; labels random, except the first 64 test inputs', which are
  the model's predictions (so ``run --class 0`` finds an input the model gets right).

Then runs each command of ``--commands`` in a fresh process, with default batch sizes, and
records its peak resident set (``ru_maxrss`` of ``wait4``), the peak of its anonymous
resident memory (``RssAnon`` polled every 20 ms; mapped inputs are file-backed pages and
not in it), its wall time, its exit status and the ``batch:`` lines it printed:

====================  ================================================================
profile               ``deepfault coverage profile`` (training split)
measure               ``deepfault coverage measure`` with that profile (test split)
run                   ``deepfault run --inputs 1 --class 0``
xplore                ``deepfault xplore`` of the model and its copy, 8 seeds, 2 iterations
regress               ``deepfault regress`` M1 vs M2, ``--budget 10it``, SSIM fidelity (the
                      default, a discriminator, is trained only for MNIST-like data)
====================  ================================================================

Usage (the goal's size takes a 5.6 GB file and, on a CPU, a long time)::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_memory_5000.py                      # n = 5000
    PYTHONPATH=src .venv/bin/python benchmarks/bench_memory_5000.py --quick              # n = 16, profile
    PYTHONPATH=src .venv/bin/python benchmarks/bench_memory_5000.py --n 500 --commands profile,measure

Writes ``benchmarks/results/bench_memory_5000.json`` (``--out``) after every command.

At ``--n 16`` on 2 CPU cores under a load average of 10-12 (not a timing to quote): profile
39 s, measure 63 s, run 411 s, xplore 238 s, regress 421 s; peak RSS 0.5-0.9 GiB, except
regress, 2.3 GiB (2.2 GiB anonymous; it prints no ``batch:`` line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
ARCH = str(REPO / "benchmarks/models/resnet.py") + ":ResNet50"
ARCH_ARGS = json.dumps({"num_classes": 10})
SHAPE = (3, 224, 224)
CLASSES = 10
LABELLED = 64  # test inputs labelled by the model's own predictions
COMMANDS = ("profile", "measure", "run", "xplore", "regress")
GOAL_MIB = 4096
MIB = 2**20


def _model() -> torch.nn.Module:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_resnet", REPO / "benchmarks/models/resnet.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ResNet50(num_classes=CLASSES)


def _write_member(zf: zipfile.ZipFile, name: str, shape: tuple[int, ...], chunks) -> None:
    """A float32 ``.npy`` member written chunk by chunk, stored uncompressed (as ``numpy.savez``)."""
    with zf.open(f"{name}.npy", "w", force_zip64=True) as fp:
        np.lib.format.write_array_header_1_0(fp, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                  "fortran_order": False, "shape": shape})
        for chunk in chunks:
            fp.write(np.ascontiguousarray(chunk, dtype=np.float32).tobytes())


def _noise(rng: np.random.Generator, n: int, step: int = 64):
    for start in range(0, n, step):
        yield rng.random((min(step, n - start), *SHAPE), dtype=np.float32)


def prepare(workdir: Path, n: int, seed: int = 0) -> dict:
    """The model files and the data file (reused when present)."""
    workdir.mkdir(parents=True, exist_ok=True)
    m1, m2, data = workdir / "resnet50.pt", workdir / "resnet50-m2.pt", workdir / f"data-{n}.npz"
    if m1.exists() and m2.exists() and data.exists():
        return {"m1": m1, "m2": m2, "data": data}
    torch.manual_seed(seed)
    model = _model().eval()
    rng = np.random.default_rng(seed)
    head = rng.random((min(LABELLED, n), *SHAPE), dtype=np.float32)
    with torch.no_grad():
        logits = torch.cat([model(torch.from_numpy(head[i:i + 8])) for i in range(0, len(head), 8)])
        bias = model.fc.bias if hasattr(model, "fc") else [p for p in model.parameters() if p.ndim == 1][-1]
        bias -= logits.mean(0)
        logits -= logits.mean(0)
        margin = logits.max(1).values - logits[:, 0]  # what class 0 lacks on each input
        bias[0] += margin.min() + 1e-3
        logits[:, 0] += margin.min() + 1e-3
    predicted = logits.argmax(1).numpy()
    torch.save(model.state_dict(), m1)
    g = torch.Generator().manual_seed(seed + 1)
    torch.save({k: v + 0.01 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
                for k, v in model.state_dict().items()}, m2)
    y = rng.integers(0, CLASSES, n)
    y[:len(predicted)] = predicted
    y_train = rng.integers(0, CLASSES, n)
    tmp = data.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        _write_member(zf, "x", (n, *SHAPE), [head, *_noise(rng, n - len(head))])
        _write_member(zf, "x_train", (n, *SHAPE), _noise(rng, n))
        for name, arr in (("y", y), ("y_train", y_train)):
            with zf.open(f"{name}.npy", "w") as fp:
                np.lib.format.write_array(fp, np.asarray(arr, np.int64), allow_pickle=False)
    tmp.replace(data)
    return {"m1": m1, "m2": m2, "data": data}


def command(name: str, files: dict, workdir: Path) -> list[str]:
    model = ["--model", str(files["m1"]), "--arch", ARCH, "--arch-args", ARCH_ARGS]
    common = ["--dataset", str(files["data"]), "--no-progress"]
    profile = str(workdir / "profile.npz")
    return {
        "profile": ["coverage", "profile", *model, *common, "--out", profile],
        "measure": ["coverage", "measure", *model, *common, "--profile", profile,
                    "--out", str(workdir / "measure.json")],
        "run": ["run", *model, *common, "--inputs", "1", "--class", "0", "--out", str(workdir / "run.json"),
                "--no-save-inputs"],
        "xplore": ["xplore", "--model", str(files["m1"]), "--model", str(files["m2"]),
                   "--arch", f"{ARCH},{ARCH}", "--arch-args", ARCH_ARGS, *common,
                   "--num-seeds", "8", "--iterations", "2",
                   "--out", str(workdir / "xplore.json")],
        "regress": ["regress", "--m1", str(files["m1"]), "--m2", str(files["m2"]), "--arch", ARCH,
                    "--arch-args", ARCH_ARGS, *common, "--budget", "10it", "--fidelity", "ssim",
                    "--out", str(workdir / "regress.npz")],
    }[name]


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "RssAnon", "RssFile"):
                    out[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def measure(argv: list[str], env: dict, timeout: float, cwd: Path) -> dict:
    """Run ``deepfault ARGV`` in a fresh process in ``cwd``; its peaks, time and ``batch:`` lines."""
    t0 = time.perf_counter()
    load = os.getloadavg()[0]
    proc = subprocess.Popen([sys.executable, "-m", "deepfault", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    peaks: dict[str, int] = {}
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    status, usage = None, None
    while status is None:
        for key, value in _status(proc.pid).items():
            peaks[key] = max(peaks.get(key, 0), value)
        pid, code, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = os.waitstatus_to_exitcode(code), ru
            break
        if time.perf_counter() - t0 > timeout:
            proc.kill()
        time.sleep(0.02)
    proc.returncode = status
    reader.join(timeout=10)
    seconds = time.perf_counter() - t0
    assert usage is not None
    out = {"exit": status, "seconds": round(seconds, 2),
           "peak_rss_mib": round(usage.ru_maxrss * 1024 / MIB, 1),
           "peak_rss_anon_mib": round(peaks.get("RssAnon", 0) / MIB, 1),
           "peak_rss_file_mib": round(peaks.get("RssFile", 0) / MIB, 1),
           "batch_lines": [ln.strip() for ln in lines if "batch:" in ln],
           "load_average": [round(load, 2), round(os.getloadavg()[0], 2)]}
    out["under_goal"] = out["peak_rss_mib"] < GOAL_MIB
    if status:
        out["tail"] = "".join(lines[-15:])[-3000:]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="test and training inputs (default: 5000)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"comma list of {', '.join(COMMANDS)}")
    parser.add_argument("--workdir", default="/tmp/deepfault-bench-memory", help="where the files go")
    parser.add_argument("--quick", action="store_true", help="--n 16 --commands profile")
    parser.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per command")
    parser.add_argument("--out", default=str(HERE / "results" / "bench_memory_5000.json"))
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.commands = 16, "profile"
    names = [c for c in args.commands.split(",") if c]
    unknown = set(names) - set(COMMANDS)
    if unknown:
        parser.error(f"unknown --commands {', '.join(sorted(unknown))}; choose from {', '.join(COMMANDS)}")
    workdir = Path(args.workdir).expanduser() / f"n{args.n}"
    t0 = time.perf_counter()
    files = prepare(workdir, args.n)
    setup_s = time.perf_counter() - t0
    env = {**os.environ, "DEEPFAULT_CACHE": str(workdir / "cache"), "DEEPFAULT_NO_DOWNLOAD": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    from deepfault.provenance import provenance

    doc: dict = {"n": args.n, "input_shape": list(SHAPE), "goal_mib": GOAL_MIB,
                 "setup_seconds": round(setup_s, 1),
                 "data_file_mib": round(files["data"].stat().st_size / MIB, 1),
                 "provenance": {**provenance("cpu", argv=sys.argv), "cpu_count": os.cpu_count()},
                 "commands": {}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if "measure" in names and "profile" not in names and not (workdir / "profile.npz").exists():
        names.insert(0, "profile")  # measure needs a profile
    for name in names:
        # in workdir: what a command writes beside it (regress.sqlite) goes there
        cell = measure(command(name, files, workdir), env, args.timeout, workdir)
        doc["commands"][name] = cell
        batch = "; ".join(cell["batch_lines"])[:120]
        print(f"{name:8s} exit {cell['exit']}  {cell['seconds']:8.1f} s  "
              f"peak RSS {cell['peak_rss_mib']:8.1f} MiB  anon {cell['peak_rss_anon_mib']:8.1f} MiB  {batch}",
              flush=True)
        if cell["exit"]:
            print(cell.get("tail", ""), file=sys.stderr)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
