"""How long each step of the README's quick start takes on a fresh machine (issue 27).

Parses the first ``bash`` block under README.md's "Quick start" heading, exactly as a reader
copies it, and runs its commands one after another in an empty temporary folder, with an
empty ``HOME`` and ``DEEPFAULT_CACHE`` (so every first-use cost is paid: the zoo models
that ``xplore`` trains, the DRFuzz discriminator, the MNIST decoding cache). The README's
``export DEEPFAULT_DATA=...`` line is the one substitution: it points at ``--data`` (a
folder holding ``MNIST/raw/``; default the shared copy), since this machine is offline;
the download itself is not timed.

``--quick`` writes a small MNIST (the first 2,000 training and 500 test images of
``--data``) and shortens the commands the way tests/docs/test_readme_quickstart.py does
(:data:`QUICK`), to check that the block runs end to end in a few minutes; its times are
not the README's.

The machine may be shared: the load average before and after every step, the share of CPU
busy from other processes before the run, and each step's CPU seconds (user + system, which
other processes disturb far less than the wall time) are recorded beside the times; quote
wall times measured on an idle machine.

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_quickstart.py [--quick] [--data DIR]

Writes ``benchmarks/results/bench_quickstart.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import busy_fraction  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]

#: ``--quick``'s substitutions: (command's first words, option, value), as in the README test.
QUICK = (
    ("deepfault train", "--epochs", "1"),
    ("deepfault xplore", "--num-seeds", "20"),
    ("deepfault scenario", "--epochs", "1"),
    ("deepfault regress", "--budget", "10s"),
)


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the first ``bash`` block after the "Quick start" heading: one per
    line (a trailing backslash continues it), comments and blank lines left out.
    """
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    if block is None:
        raise SystemExit("README.md has no bash block under its Quick start heading")
    text = block.group(1).replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


def _substitute(words: list[str], option: str, value: str) -> list[str]:
    if option in words:
        i = words.index(option)
        return [*words[: i + 1], value, *words[i + 2 :]]
    return [*words, option, value]


def _loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def _child_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes: a figure the other
    processes on a shared machine disturb far less than the wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _small_mnist(source: Path, dest: Path, n_train: int = 2000, n_test: int = 500) -> None:
    """The first ``n`` images and labels of each split of ``source/MNIST/raw`` as IDX .gz files."""
    raw = dest / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for stem, n in (("train-images-idx3-ubyte", n_train), ("train-labels-idx1-ubyte", n_train),
                    ("t10k-images-idx3-ubyte", n_test), ("t10k-labels-idx1-ubyte", n_test)):
        data = gzip.decompress((source / "MNIST" / "raw" / f"{stem}.gz").read_bytes())
        ndim = data[3]
        dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
        per = 1
        for d in dims[1:]:
            per *= d
        header = bytearray(data[: 4 + 4 * ndim])
        header[4:8] = n.to_bytes(4, "big")
        body = data[4 + 4 * ndim : 4 + 4 * ndim + n * per]
        (raw / f"{stem}.gz").write_bytes(gzip.compress(bytes(header) + body))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small MNIST and shortened commands")
    ap.add_argument("--data", default="/work/shared/datasets", help="a data root holding MNIST/raw/")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed per step")
    ap.add_argument("--from", dest="first", type=int, default=1,
                    help="run only the steps from this number on (1-based, as the JSON numbers them; "
                    "'export' lines always run): on a busy machine, the DRFuzz steps (which need no "
                    "file of the earlier ones) can be timed in a second process")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bench_quickstart.json"))
    args = ap.parse_args()

    commands = quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    busy = busy_fraction()
    steps = []
    with tempfile.TemporaryDirectory(prefix="deepfault-quickstart-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "HOME": str(work / "home"), "DEEPFAULT_CACHE": str(work / "cache"),
               "PYTHONPATH": str(ROOT / "src")}
        env.pop("DEEPFAULT_DATA", None)
        data = Path(args.data)
        if args.quick:
            _small_mnist(data, work / "data")
            data = work / "data"
        (work / "run").mkdir()
        (work / "home").mkdir()
        for number, command in enumerate(commands, 1):
            words = shlex.split(command)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                env[name] = str(data) if name == "DEEPFAULT_DATA" else os.path.expanduser(value)
                steps.append({"step": number, "command": command, "substituted": f"{name}={env[name]}"})
                continue
            if number < args.first:
                continue
            if args.quick:
                for prefix, option, value in QUICK:
                    if command.startswith(prefix):
                        words = _substitute(words, option, value)
            if words[0] != "deepfault":
                raise SystemExit(f"step {number} is not a deepfault command: {command}")
            before = _loadavg()
            cpu0 = _child_cpu()
            start = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, "-m", "deepfault", *words[1:]], cwd=work / "run",
                                      env=env, capture_output=True, text=True, timeout=args.timeout)
                rc, err = proc.returncode, proc.stderr
            except subprocess.TimeoutExpired as exc:
                rc, err = None, f"timed out after {args.timeout} s: {exc.stderr or ''}"
            seconds = round(time.perf_counter() - start, 1)
            cpu = round(_child_cpu() - cpu0, 1)
            step = {"step": number, "command": command, "ran": shlex.join(words), "seconds": seconds,
                    "cpu_seconds": cpu,
                    "returncode": rc, "loadavg_before": before, "loadavg_after": _loadavg(),
                    "stderr_tail": (err or "")[-1500:]}
            steps.append(step)
            print(f"[{number}] {seconds:8.1f} s (cpu {cpu:.1f} s) rc={rc} load {before} -> "
                  f"{step['loadavg_after']}: {command}", flush=True)
            if rc != 0:
                print(step["stderr_tail"], file=sys.stderr, flush=True)
            _write(args, steps, busy, finished=False)  # after every step: a long run killed keeps its times
    total = _write(args, steps, busy, finished=True)
    print(f"total {total} s; wrote {args.out}")
    return 0 if all(s.get("returncode", 0) == 0 for s in steps) else 1


def _write(args, steps: list[dict], busy, *, finished: bool) -> float:
    from deepfault._io import write_json
    from deepfault.provenance import provenance

    total = round(sum(s.get("seconds", 0.0) for s in steps), 1)
    write_json(args.out, {"benchmark": "quickstart", "quick": args.quick, "data": args.data,
                          "from": args.first, "finished": finished,
                          "cpus": os.cpu_count(), "busy_fraction_before": busy, "total_seconds": total,
                          "all_ok": all(s.get("returncode", 0) == 0 for s in steps), "steps": steps,
                          "provenance": provenance()})
    return total


if __name__ == "__main__":
    raise SystemExit(main())
