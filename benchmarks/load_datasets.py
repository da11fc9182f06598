"""Load the real MNIST and Fashion-MNIST: verify md5s, count classes, time the loads.

The first load decodes the gzipped IDX files and writes the processed cache; the second
reads the cache. The cache goes to a fresh temporary folder (unless ``--cache-dir``), so
the first load is always cold and the data folder is never written to.

Usage:
    .venv/bin/python benchmarks/load_datasets.py [--data-dir ../shared/datasets]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from deepfault._io import write_json
from deepfault.data import load_dataset
from deepfault.data.download import dataset_status

REPO = Path(__file__).resolve().parents[1]
DATASETS = ("mnist", "fashion-mnist")


def _timed_load(name: str, data_dir: Path, cache_dir: Path):
    start = time.perf_counter()
    ds = load_dataset(name, data_dir=data_dir, cache_dir=cache_dir)
    return ds, time.perf_counter() - start


def bench(name: str, data_dir: Path, cache_root: Path) -> dict:
    status = dataset_status(name, data_dir)
    files = [{"file": str(s.file), "present": s.present, "verified": s.verified} for s in status]
    if not all(s.present for s in status):
        return {"name": name, "files": files, "skipped": "files missing"}
    cache_dir = cache_root / name
    first, t_first = _timed_load(name, data_dir, cache_dir)
    second, t_second = _timed_load(name, data_dir, cache_dir)
    assert first.meta["cache_hit"] is False
    assert second.meta["cache_hit"] is True
    for field in ("x_train", "y_train", "x_test", "y_test"):
        if not np.array_equal(getattr(first, field), getattr(second, field)):
            raise SystemExit(f"{name}: cached {field} differs from the decoded one")
    return {
        "name": name,
        "files": files,
        "all_verified": all(s.verified for s in status),
        "n_train": len(first.y_train),
        "n_test": len(first.y_test),
        "input_shape": list(first.input_shape),
        "class_names": list(first.class_names),
        "train_counts": np.bincount(first.y_train, minlength=10).tolist(),
        "test_counts": np.bincount(first.y_test, minlength=10).tolist(),
        "x_range": [float(first.x_test.min()), float(first.x_test.max())],
        "first_load_s": round(t_first, 4),
        "second_load_s": round(t_second, 4),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "datasets")
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="processed cache root (default: a fresh temporary folder)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "load_datasets.json")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="deepfault-cache-") as tmp:
        cache_root = args.cache_dir or Path(tmp)
        results = [bench(name, args.data_dir, cache_root) for name in DATASETS]

    for r in results:
        print(f"== {r['name']}")
        for f in r["files"]:
            print(f"   {'ok ' if f['verified'] else 'BAD' if f['present'] else '---'} {f['file']}")
        if "skipped" in r:
            print(f"   skipped: {r['skipped']}")
            continue
        print(f"   train {r['n_train']:,}, test {r['n_test']:,}, input {r['input_shape']}")
        print(f"   train per class: {r['train_counts']}")
        print(f"   test per class:  {r['test_counts']}")
        print(
            f"   first load {r['first_load_s']:.3f} s (decode + cache), "
            f"second load {r['second_load_s']:.3f} s (cache)"
        )

    write_json(
        args.out,
        {
            "benchmark": "load_datasets",
            "data_dir": str(args.data_dir),
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "machine": platform.machine(),
            "results": results,
        },
    )
    print(f"wrote {args.out}")
    ok = all(r.get("all_verified") for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
