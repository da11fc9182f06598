"""Run the three presets' experiments (reduced) and dump every stored cell, for comparing two trees.

Used to show that a refactoring changed no result: run it under the old tree and the new
one (``PYTHONPATH=OLD/src python benchmarks/preset_equivalence.py --out old.json ...``) and
compare with ``--compare old.json new.json``. Timing fields are dropped; store keys (the
configuration hashes) are reported but not compared, since they hash the model
fingerprints, which may change.

    python benchmarks/preset_equivalence.py --data-dir ../shared/datasets --work /tmp/eq \\
        --out benchmarks/results/preset_equivalence-new.json
    python benchmarks/preset_equivalence.py --compare old.json new.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

#: Fields that measure wall time, which differs between any two runs.
TIMING = ("seconds", "time", "timings", "elapsed", "created", "wall", "per_second")


def _load(modules: tuple[str, ...], *names: str) -> list:
    """``names`` from the first of ``modules`` that has them all: the public package first,
    then the module paths this tree or a restructured one keeps them in."""
    import importlib

    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if all(hasattr(module, n) for n in names):
            return [getattr(module, n) for n in names]
    raise ImportError(f"none of {', '.join(modules)} has {', '.join(names)}")


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not any(t in k.split(".")[-1] for t in TIMING)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _dump(store_path: Path) -> dict:
    ResultStore = _load(("deepfault.experiment", "deepfault.experiment.store"), "ResultStore")[0]

    out = {}
    with ResultStore(store_path, readonly=True) as store:
        for exp in store.experiments():
            cells = {}
            for rec in store.records(exp["config_hash"], exp["method"]):
                arrays = {k: [list(v.shape), float(np.asarray(v, dtype=np.float64).sum())]
                          for k, v in sorted(rec.arrays.items()) if v.dtype.kind in "fiub"}
                cells[rec.cell_id] = {"data": _strip(rec.data), "arrays": arrays}
            out[f"{exp['method']}:{exp['name']}"] = {"config_hash": exp["config_hash"], "cells": cells}
    return out


def _run(data_dir: str, work: Path) -> dict:
    import torch

    torch.set_num_threads(1)
    FuzzConfig, run_fuzz = _load(("deepfault.fuzz", "deepfault.fuzz.preset", "deepfault.fuzz.presets"),
                                 "PresetConfig", "run_preset")
    xplore = ("deepfault.xplore", "deepfault.xplore.preset", "deepfault.xplore.presets")
    try:
        XConfig, run_xplore = _load(xplore, "XplorePresetConfig", "run_preset")
    except ImportError:  # the trees before the one PresetConfig meaning
        XConfig, run_xplore = _load(xplore, "PresetConfig", "run_preset")
    try:
        GRIDS, run_experiment = _load(("deepfault.localization", "deepfault.localization.preset",
                                       "deepfault.localization.presets"), "GRIDS", "run_experiment")
    except ImportError:  # the tree before the method packages
        PRESETS, run_experiment = _load(("deepfault.experiment.grid",), "PRESETS", "run_experiment")
        GRIDS = PRESETS

    models = work / "models"
    summaries = {}
    s = run_experiment(GRIDS["digits"], work / "digits.sqlite", models_dir=models)
    summaries["digits"] = _strip(s if isinstance(s, dict) else s.__dict__)
    s = run_xplore(work / "xplore.sqlite", data_dir=data_dir, models_dir=models,
                   config=XConfig(seeds=60, repeats=1, iterations=5, figure9_inputs=10, figure9_seeds=60,
                                  thresholds=(0.0, 0.5)))
    summaries["deepxplore-mnist"] = _strip(s if isinstance(s, dict) else s.__dict__)
    s = run_fuzz(work / "fuzz.sqlite", data_dir=data_dir, models_dir=models,
                 config=FuzzConfig(scenarios=("supply",), seeds=(0,), budget="40it", epochs=1, batch=16))
    summaries["drfuzz-mnist"] = _strip(s if isinstance(s, dict) else s.__dict__)
    stores = {}
    for name in ("digits", "xplore", "fuzz"):
        stores.update(_dump(work / f"{name}.sqlite"))
    return {"summaries": summaries, "stores": stores}


def _close(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6)
    return a == b


def _without_added(old, new):
    """``new`` without the dict keys that ``old`` lacks (fields a newer tree records in addition),
    and the dotted names of those keys.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        kept, added = {}, []
        for k, v in new.items():
            if k not in old:
                added.append(k)
                continue
            kept[k], more = _without_added(old[k], v)
            added += [f"{k}.{m}" for m in more]
        return kept, added
    return new, []


def _compare(old: dict, new: dict) -> int:
    old, new = _strip(old), _strip(new)  # also drops timings an older dump kept
    bad = 0
    for name, exp in old["stores"].items():
        other = new["stores"].get(name)
        if other is None:
            print(f"{name}: missing in the new run")
            bad += 1
            continue
        same = [c for c in exp["cells"] if _close(exp["cells"][c], other["cells"].get(c))]
        added = {}
        for c in set(exp["cells"]) - set(same):
            kept, fields = _without_added(exp["cells"][c], other["cells"].get(c))
            if fields and _close(exp["cells"][c], kept):
                added[c] = fields
        missing = sorted(set(exp["cells"]) ^ set(other["cells"]))
        print(f"{name}: {len(same)} of {len(exp['cells'])} cells identical"
              + (f", {len(added)} more identical but for fields the new tree adds" if added else "")
              + f"; ids differ: {len(missing)}; store key {exp['config_hash']} -> {other['config_hash']}")
        for c, fields in sorted(added.items()):
            print(f"    {c}: adds {', '.join(fields)}")
        bad += len(exp["cells"]) - len(same) - len(added) + len(missing)
    for name, summary in old["summaries"].items():
        keep = ("cells_total", "cells_run", "cells_skipped", "model_accuracy", "results")
        a = {k: summary.get(k) for k in keep if k in summary}
        b = {k: new["summaries"][name].get(k) for k in a}
        print(f"summary {name}: {'identical' if _close(a, b) else 'DIFFERENT'} ({', '.join(a)})")
        bad += not _close(a, b)
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/datasets")
    p.add_argument("--work", type=Path, default=Path("/tmp/preset-equivalence"))
    p.add_argument("--out", type=Path)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    args = p.parse_args(argv)
    if args.compare:
        old, new = (json.loads(Path(f).read_text()) for f in args.compare)
        return _compare(old, new)
    args.work.mkdir(parents=True, exist_ok=True)
    result = _run(args.data_dir, args.work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
