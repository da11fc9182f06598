"""The regression corpus at scale (issue 41): adds of 10,000 inputs, and a replay in passes of the
batch size whose memory does not grow with the corpus.

- ``add``: seconds per add of 10,000 new MNIST-sized inputs (1 x 28 x 28) as the corpus grows
  (each add hashes its inputs and reads every earlier shard's ids to deduplicate).
- ``replay``: seconds and the allocator's peak live bytes (``core/heap.py``) of streaming the
  whole corpus in batches of 256, for a corpus a tenth the size and for the whole one: flat
  when the larger peak is within 1.2x of the smaller (both hold one shard and one batch).

Usage:
    PYTHONPATH=src .venv/bin/python benchmarks/bench_corpus.py [--entries 100000] [--quick]

``--quick`` builds 20,000 entries. Inputs are random: the cost does not depend on their content.
Writes ``benchmarks/results/bench_corpus.json`` and prints the numbers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import busy_fraction  # noqa: E402

from deepfault._io import write_json  # noqa: E402
from deepfault.core.heap import LivePeak  # noqa: E402
from deepfault.corpus import Corpus, Provenance  # noqa: E402
from deepfault.provenance import provenance  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHAPE = (1, 28, 28)
PER_ADD = 10_000


def build(folder: Path, entries: int) -> list[float]:
    """A corpus of ``entries`` random inputs added ``PER_ADD`` at a time; seconds per add."""
    corpus = Corpus.create(folder, dataset="mnist", input_shape=SHAPE, num_classes=10)
    rng = np.random.default_rng(0)
    seconds = []
    for start in range(0, entries, PER_ADD):
        n = min(PER_ADD, entries - start)
        x = rng.random((n, *SHAPE), dtype=np.float32)
        y = rng.integers(0, 10, n)
        t0 = time.perf_counter()
        assert corpus.add(x, y, Provenance("bench", f"add-{start}")) == n
        seconds.append(time.perf_counter() - t0)
    return seconds


def replay(folder: Path, batch_size: int) -> dict:
    """Stream the corpus once; its seconds, entries and peak live bytes."""
    corpus = Corpus.open(folder)
    seen = 0
    t0 = time.perf_counter()
    with LivePeak() as live:
        for batch in corpus.batches(batch_size):
            seen += len(batch)
    return {"entries": seen, "seconds": round(time.perf_counter() - t0, 3),
            "peak_live_mib": None if live.peak is None else round(live.peak / 2**20, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--quick", action="store_true", help="20,000 entries")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bench_corpus.json"))
    args = p.parse_args(argv)
    entries = 20_000 if args.quick else args.entries
    busy_before = busy_fraction()
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        build(small, max(PER_ADD, entries // 10))
        add_seconds = build(large, entries)
        small_replay = replay(small, args.batch_size)
        large_replay = replay(large, args.batch_size)
    flat = (small_replay["peak_live_mib"] is not None
            and large_replay["peak_live_mib"] <= 1.2 * small_replay["peak_live_mib"] + 1)
    result = {"entries": entries, "input_shape": list(SHAPE), "per_add": PER_ADD,
              "batch_size": args.batch_size,
              "add_seconds": [round(s, 3) for s in add_seconds], "replay_small": small_replay,
              "replay": large_replay, "flat": flat,
              "replay_us_per_input": round(1e6 * large_replay["seconds"] / entries, 2),
              "busy_fraction_before": busy_before, "busy_fraction_after": busy_fraction(),
              "provenance": provenance()}
    write_json(args.out, result)
    print(f"add of {PER_ADD:,} inputs: {add_seconds[0]:.2f} s first, {add_seconds[-1]:.2f} s at "
          f"{entries - PER_ADD:,} entries")
    print(f"replay of {entries:,} entries in batches of {args.batch_size}: {large_replay['seconds']:.2f} s "
          f"({result['replay_us_per_input']} us/input), peak live {large_replay['peak_live_mib']} MiB "
          f"against {small_replay['peak_live_mib']} MiB for {small_replay['entries']:,}: "
          f"{'flat' if flat else 'NOT flat'}; machine busy {busy_before} / {result['busy_fraction_after']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
