"""DeepXplore's seeds spread over workers (issue 42): each worker a share of the groups.

The groups of seeds (:class:`~.config.XploreConfig` ``inputs_per_step``; all seeds one group by
default) are dealt out to ``workers`` workers in contiguous shares, on the executor the run's
:class:`~deepfault.core.executors.Parallel` names (local processes by default, or a Ray cluster,
each worker on its own GPU with ``gpus_per_worker``); with one group, the seeds
are first cut into ``workers`` groups. Each worker runs the same search on its groups with the
run's own random draws (drawn once, per seed, by the driver: :func:`~.search.draw_randomness`),
from empty coverage; the driver merges what they found (sorted by seed, as one process sorts
it), their coverage (by OR) and their traces.

A seed's search reads the coverage only through the neuron it pushes (the ``lambda2`` term), so
with ``lambda2 = 0`` (or seeds that never reach a draw) the merged result equals one process's
exactly, coverage included; otherwise each worker's neurons are drawn against its own share's
coverage, as DeepXplore's seeds in separate runs would be.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

__all__ = ["search_share", "shares", "spread_groups"]


def shares(groups: list[np.ndarray], workers: int) -> list[list[np.ndarray]]:
    """The groups dealt into at most ``workers`` contiguous shares (one group: cut into ``workers``).

    Examples:
        >>> [[g.tolist() for g in s] for s in shares([np.arange(5)], 2)]
        [[[0, 1, 2]], [[3, 4]]]
    """
    if len(groups) == 1:
        groups = [g for g in np.array_split(groups[0], workers) if len(g)]
    cuts = np.array_split(np.arange(len(groups)), min(workers, len(groups)))
    return [[groups[i] for i in cut] for cut in cuts if len(cut)]


def search_share(job: dict) -> dict:
    """One worker: its groups through the search (a module-level function of a plain dict).

    ``job`` holds ``make`` (the search's run class and its arguments), ``layouts`` and
    ``threshold`` (the coverage), ``groups`` (``(group, rows, seeds)`` each), ``draws``, ``seeds``
    (how many seeds the run has) and ``threads``.
    """
    torch.set_num_threads(int(job["threads"]))
    from ..coverage.criteria import NeuronCoverage

    cls, args, kwargs = job["make"]
    if job.get("gpus") and torch.cuda.is_available():  # Ray's CUDA_VISIBLE_DEVICES: its own GPU only
        device = torch.device("cuda", 0)
        args = (tuple(m.to(device) for m in args[0]), *args[1:5], device, *args[6:])
    run = cls(*args, **kwargs)
    for m in run.models:
        m.eval()
        for p in m.parameters():
            p.requires_grad_(False)
    run.coverage = [NeuronCoverage(layout, threshold=job["threshold"]) for layout in job["layouts"]]
    run.start = time.perf_counter()
    run.seed_predictions = np.zeros((job["seeds"], len(run.models)), dtype=np.int64)
    rows_done = []
    for group, rows, x0 in job["groups"]:
        run.search_group(group, rows, x0.to(run.device), job["draws"], None)
        rows_done.append(rows)
    done = np.concatenate(rows_done)
    return {"found": run.found, "covered": [nc.covered for nc in run.coverage], "trace": run.trace,
            "first_found": run.first_found, "num_found": run.num_found, "rows": done,
            "seed_predictions": run.seed_predictions[done]}


def spread_groups(run, make: tuple, groups: list[np.ndarray], gather, draws, layouts, parallel) -> None:
    """Run ``groups`` over ``parallel``'s workers and merge what they found into ``run``.

    Args:
        run: The driver's run (its coverage made, empty).
        make: ``(run class, args, kwargs)`` that build a run like it in a worker (its models and
            device sixth: a worker with a GPU of its own moves them there).
        groups: The plan's groups of seed rows.
        gather: Gives the seed inputs of some rows (a CPU tensor).
        draws: The run's random draws (all seeds).
        layouts: The models' neuron layouts (the coverage).
        parallel: The workers and where they run (:class:`~deepfault.core.executors.Parallel`).
    """
    parts = shares(groups, parallel.workers)
    offset = 0
    jobs = []
    threads = max(1, torch.get_num_threads() // len(parts))
    for share in parts:
        jobs.append({"make": make, "layouts": layouts, "threshold": run.config.threshold, "draws": draws,
                     "groups": [(offset + i, rows, gather(rows)) for i, rows in enumerate(share)],
                     "seeds": len(run.seed_predictions), "threads": threads,
                     "gpus": parallel.gpus_per_worker})
        offset += len(share)
    run.start = time.perf_counter()
    pool = parallel.start()
    try:
        results = dict(pool.map(search_share, jobs))
    finally:
        pool.close()
    _merge(run, [results[i] for i in range(len(jobs))])


def _merge(run, results: list[dict[str, Any]]) -> None:
    for r in results:
        run.found.extend(r["found"])
        run.num_found += r["num_found"]
        for nc, covered in zip(run.coverage, r["covered"], strict=True):
            nc.covered |= covered
        run.seed_predictions[r["rows"]] = r["seed_predictions"]
    firsts = [r["first_found"] for r in results if r["first_found"] is not None]
    run.first_found = min(firsts) if firsts else None
    run.trace = sorted((t for r in results for t in r["trace"]), key=lambda t: (t.group, t.iteration))
