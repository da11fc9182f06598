"""One campaign over many workers (issue 42): ``N`` fuzzers, one store, one merged result.

Copied from the fuzzers that solved it (AFL++'s secondaries syncing through a shared
directory, libFuzzer's ``-merge``), not invented:

- **Workers.** Worker ``i`` runs the campaign's configuration in its own process (or Ray
  task) with its own random stream (:func:`worker_seed`: worker 0 keeps the campaign's seed,
  the others derive theirs from ``(seed, i)``) and its own rule-chooser prior
  (:meth:`WorkerLink.prepare`: as AFL++'s secondaries run different power schedules, worker
  ``i > 0`` starts the MCMC chain believing in the rules ``r`` with ``r % N == i``). A time
  budget is every worker's; an iteration budget is shared out (:func:`worker_budget`).
- **Sync.** Each worker checkpoints into its own cells ``{cell}/w{i}/...`` of the store every
  ``min(checkpoint_every, sync_every)`` seconds, and each checkpoint is a sync: it writes
  ``{cell}/w{i}/sync`` (its unique failures' keys and its diversity table) and reads the
  others'. DRFuzz's diversity criterion is global: the others' keys join the worker's
  :class:`~..mutation.diversity.FailureSet` (a failure another found is no new unique failure
  here, and a root's failures count toward its ban wherever they were found), and its
  diversity table rises to the elementwise maximum (:meth:`~..mutation.diversity.DiversityTable.merge`).
- **Merge.** The driver merges the workers' results (:func:`merge_results`): the initial faults
  once, every worker's faults in the order they were found; #URF counts each unique-fault key
  ``(root, y1, y2)`` once however many workers found it.
- **Faults survived.** A worker that dies (``kill -9``, a lost Ray node) is said so (a warning
  and the result's ``workers["lost"]``) and the others go on; its result is what its last
  checkpoint holds (:func:`~.loop.restored_result`), so no fault it synced is lost. A driver
  that dies leaves every worker's checkpoint: rerunning the command resumes each worker from it
  (a finished worker returns its stored result).

``workers=1`` never comes here: it is the one-process campaign, bit for bit.
"""

from __future__ import annotations

import copy
import logging
import multiprocessing
import os
import signal
import sqlite3
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...errors import DeepFaultError
from ...experiment.store import ResultStore
from ..mutation.diversity import ROOT_FAILURE_LIMIT, DiversityTable
from .budget import Budget
from .checkpoint import DRFUZZ_METHOD, load_result
from .config import CampaignConfig, CampaignProgress
from .loop import CampaignOptions, restored_result, run_campaign
from .metrics import FAULT_KINDS, FaultTable, compute_metrics
from .result import CampaignResult, examples

__all__ = ["WorkerLink", "merge_results", "run_workers", "worker_budget", "worker_cell", "worker_seed"]

log = logging.getLogger(__name__)

#: How often the driver looks at its workers (seconds).
_POLL = 0.2


def worker_seed(seed: int, index: int) -> int:
    """Worker ``index``'s seed: the campaign's own for worker 0, else one drawn from
    ``SeedSequence([seed, index])`` (independent streams, the same on every rerun).

    Examples:
        >>> worker_seed(7, 0), worker_seed(7, 1) == worker_seed(7, 1), worker_seed(7, 1) != 7
        (7, True, True)
    """
    if index == 0:
        return int(seed)
    words = np.random.SeedSequence([int(seed), int(index)]).generate_state(2, np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1]))


def worker_budget(budget: Budget, index: int, workers: int) -> Budget:
    """Worker ``index``'s budget: a time budget is every worker's own; an iteration budget is
    shared out, the first ``value % workers`` workers taking one more.

    Raises:
        DeepFaultError: Fewer iterations than workers.
    """
    if budget.kind != "iterations":
        return budget
    total = int(budget.value)
    if total < workers:
        raise DeepFaultError(f"an iteration budget of {total} cannot be shared by {workers} workers; give at "
                             f"least {workers} iterations, or fewer workers")
    return Budget("iterations", total // workers + int(index < total % workers))


def worker_cell(cell: str, index: int) -> str:
    """Worker ``index``'s campaign id in the store (its checkpoints and result live under it)."""
    return f"{cell}/w{index}"


def _worker_config(config: CampaignConfig, index: int) -> CampaignConfig:
    """The configuration worker ``index`` runs: one worker, its seed and budget, checkpoints at
    least as often as the syncs (each checkpoint is a sync).
    """
    return replace(config, workers=1, seed=worker_seed(config.seed, index),
                   budget=worker_budget(config.budget, index, config.workers),
                   checkpoint_every=min(config.checkpoint_every, config.sync_every), campaign=None,
                   fresh=False)


class WorkerLink:
    """Worker ``index`` of ``workers``' tie to its campaign (:class:`~.loop.WorkerHooks`): its rule
    prior and its sync through the store (module docstring).

    Args:
        index: The worker's index.
        workers: How many workers the campaign has.
        experiment: The store's experiment key.
        cell: The campaign's id (the worker's cells are :func:`worker_cell`'s).
    """

    def __init__(self, index: int, workers: int, experiment: str, cell: str):
        self.index, self.workers, self.experiment, self.cell = index, workers, experiment, cell
        self.syncs = 0

    def prepare(self, campaign) -> None:
        """The rule-chooser prior: worker ``i > 0`` starts its chain with one faithful, gaining
        call of each rule ``r`` with ``r % workers == i % workers`` (worker 0: the published chain).
        """
        if self.index == 0:
            return
        chooser = campaign.parts.rules.chooser
        favoured = np.arange(len(chooser.rules)) % self.workers == self.index % self.workers
        for counts in (chooser.selected, chooser.faithful, chooser.gain):
            counts[favoured] += 1

    def checkpointing(self, save: Callable, store: Any) -> Callable:
        """``save`` followed by the sync (:meth:`sync`); its time is charged to ``sync`` too."""
        def checkpoint(campaign) -> None:
            save(campaign)
            if not campaign.between_steps:
                return  # no checkpoint was written: nothing to share
            started = time.perf_counter()
            self.sync(campaign, store)
            timings = campaign.parts.timing.clock.timings
            timings["sync"] = timings.get("sync", 0.0) + time.perf_counter() - started
        return checkpoint

    def sync(self, campaign, store) -> None:
        """Write this worker's unique failures and diversity table; take in the others'."""
        parts = campaign.parts
        failures, table = parts.faults.failures, _diversity_table(parts.keep)
        arrays = {"keys": failures.state_dict()["keys"]}
        if table is not None:
            arrays["table"] = table.table
        self.syncs += 1
        counters = parts.counters
        store.put(self.experiment, DRFUZZ_METHOD, f"{worker_cell(self.cell, self.index)}/sync",
                  {"worker": self.index, "pid": os.getpid(), "syncs": self.syncs,
                   "iterations": counters.iterations, "generated": counters.generated,
                   "rf": parts.faults.log.counts["rf"], "gf": parts.faults.log.counts["gf"],
                   "urf": len(failures), "corpus": len(parts.queue.corpus),
                   "elapsed": parts.timing.clock.now()},
                  arrays, replace=True)
        for other in range(self.workers):
            if other == self.index:
                continue
            rec = store.get(self.experiment, DRFUZZ_METHOD, f"{worker_cell(self.cell, other)}/sync")
            if rec is None:
                continue
            failures.merge(rec.arrays["keys"])
            if table is not None and "table" in rec.arrays:
                table.merge(rec.arrays["table"])
        if campaign.strategy.ban:  # a root banned by the failures of every worker together
            parts.queue.corpus.root_banned |= failures.per_root >= ROOT_FAILURE_LIMIT


def _diversity_table(keep) -> DiversityTable | None:
    table = getattr(keep, "table", None)
    return table if isinstance(table, DiversityTable) else None


# --- the worker's side -------------------------------------------------------------------------

def campaign_worker(job: dict) -> dict:
    """Run worker ``job["index"]`` of a many-worker campaign (a module-level function of a plain
    dict, so a process or a Ray task can run it); returns its stop reason and counts.

    ``job`` holds ``m1``, ``m2`` (modules), ``inputs``, ``labels``, ``bounds``, ``config`` (the
    campaign's :class:`~.config.CampaignConfig`), ``options`` (its :class:`~.loop.CampaignOptions`,
    the store as a path, no progress callable), ``experiment``, ``cell``, ``index`` and
    ``threads``.
    """
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    config, index = job["config"], int(job["index"])
    where = _placement(job)
    m1, m2 = (job[name].to(where["device"]) for name in ("m1", "m2"))
    link = WorkerLink(index, config.workers, job["experiment"], job["cell"])
    options = replace(job["options"], experiment=job["experiment"], cell=worker_cell(job["cell"], index),
                      worker=link, progress=None)
    result = run_campaign(m1, m2, job["inputs"], job["labels"], bounds=job["bounds"],
                          config=_worker_config(config, index), options=options)
    return {"index": index, "stop_reason": result.stop_reason, "iterations": result.iterations, **where}


def _placement(job: dict) -> dict:
    """Where worker ``job`` runs: ``node`` (its host), ``device`` (a GPU Ray reserved for it, else
    the models' own device) and ``gpus`` (Ray's ids of the GPUs it reserved).
    """
    import socket

    device = str(_device_of(job["m1"]))
    gpus: list = []
    if job["config"].gpus_per_worker:
        import ray

        gpus = [str(g) for g in ray.get_gpu_ids()]
        # Ray's CUDA_VISIBLE_DEVICES shows the worker its own GPUs only: the first is cuda:0
        device = "cuda:0" if gpus and torch.cuda.is_available() else "cpu"
    return {"node": socket.gethostname(), "device": device, "gpus": gpus}


def _device_of(model) -> torch.device:
    first = next(iter(model.parameters()), None)
    return first.device if first is not None else torch.device("cpu")


def _process_main(job: dict, errors) -> None:
    """A worker process: the worker, its error (if any) sent back as text."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        campaign_worker(job)
    except KeyboardInterrupt:  # the campaign saved its checkpoint; a rerun resumes it
        pass
    except BaseException as err:  # noqa: BLE001 - sent to the driver, which raises it
        errors.put((int(job["index"]), f"{type(err).__name__}: {err}"))
        raise SystemExit(1) from None


# --- the driver's side -------------------------------------------------------------------------

class _Watch:
    """The driver's progress display: every second, the workers' last syncs as one
    :class:`~.config.CampaignProgress` (#URF and #Seed over the union of their unique failures).
    """

    def __init__(self, path: str, experiment: str, cell: str, config: CampaignConfig, progress):
        self.path, self.experiment, self.cell, self.config = path, experiment, cell, config
        self.progress, self.last = progress, 0.0

    def __call__(self) -> None:
        if self.progress is None or time.monotonic() - self.last < 1.0:
            return
        self.last = time.monotonic()
        try:
            with ResultStore(self.path, readonly=True) as store:
                records = [store.get(self.experiment, DRFUZZ_METHOD, f"{worker_cell(self.cell, i)}/sync")
                           for i in range(self.config.workers)]
        except (DeepFaultError, sqlite3.Error):  # the store is being made, or written just now
            return
        synced = [r for r in records if r is not None]
        if not synced:
            return
        keys = {tuple(k) for r in synced for k in r.arrays["keys"].tolist()}
        self.progress(CampaignProgress(
            elapsed=max(float(r.data.get("elapsed", 0.0)) for r in synced),
            iterations=sum(int(r.data["iterations"]) for r in synced),
            rf=sum(int(r.data["rf"]) for r in synced),
            urf=len(keys), seeds=len({k[0] for k in keys}), gf=sum(int(r.data.get("gf", 0)) for r in synced),
            corpus=sum(int(r.data.get("corpus", 0)) for r in synced), rule_shares={},
            budget=str(self.config.budget)))


@dataclass
class _Lost:
    """A worker that ended early, and why."""

    index: int
    reason: str


@dataclass
class _Ran:
    """What the executor saw: the workers lost, whether the run was interrupted, where each worker
    ran (:func:`_placement`, by index) and the sync point (the store's file, or its server's host).
    """

    lost: list[_Lost] = field(default_factory=list)
    interrupted: bool = False
    placement: dict[int, dict] = field(default_factory=dict)
    sync_point: str = "store file"


def _with_placement(workers: dict, ran: _Ran) -> dict:
    """The merged result's ``workers`` with each worker's node, device and GPUs, and the sync point."""
    per = [None if w is None else {**w, **{k: v for k, v in ran.placement.get(w["worker"], {}).items()
                                           if k in ("node", "device", "gpus")}}
           for w in workers["per_worker"]]
    return {**workers, "per_worker": per, "sync_point": ran.sync_point}


def run_workers(m1, m2, inputs, labels, *, bounds: tuple[float, float], config: CampaignConfig,
                options: CampaignOptions) -> CampaignResult:
    """Run ``config.workers`` workers on one campaign and merge their results (module docstring).

    Args:
        m1: The original model (as :func:`~.loop.run_campaign`'s).
        m2: The new model.
        inputs: The test inputs.
        labels: Their labels.
        bounds: The data's range.
        config: The campaign's configuration (``workers``, ``executor``, ``address``, ``sync_every``).
        options: As :func:`~.loop.run_campaign`'s; ``store`` (a path or an open store) is the sync
            point every worker must reach (a temporary one, deleted afterwards, when ``None``).

    Returns:
        The merged :class:`~.result.CampaignResult` (``workers``: who ran, who was lost, the sync cost).

    Raises:
        DeepFaultError: A worker's error (the first one), or an iteration budget smaller than the workers.
    """
    worker_budget(config.budget, 0, config.workers)  # refused before any process starts
    if options.store is None:
        with tempfile.TemporaryDirectory(prefix="deepfault-workers-") as tmp:
            return run_workers(m1, m2, inputs, labels, bounds=bounds, config=config,
                               options=replace(options, store=Path(tmp) / "campaign.sqlite"))
    store = options.store
    path = os.fspath(store.path if isinstance(store, ResultStore) else store)
    experiment = options.experiment or config.key()
    cell = options.cell
    sent = replace(options, store=path, progress=None, train_inputs=_train_inputs_needed(config, options))
    jobs = _jobs(m1, m2, inputs, labels, bounds, config, sent, experiment, cell)
    run = _run_on_ray if config.executor == "ray" else _run_in_processes
    started = time.perf_counter()
    todo = [job for job in jobs if not _finished(path, experiment, worker_cell(cell, job["index"]))]
    watch = _Watch(path, experiment, cell, config, options.progress)
    ran = run(todo, config, watch) if todo else _Ran()
    lost, interrupted = ran.lost, ran.interrupted
    wall = time.perf_counter() - started
    for one in lost:
        warnings.warn(f"worker {one.index} of {config.workers} was lost ({one.reason}); the campaign went on "
                      "with the others and keeps the faults of its last sync", RuntimeWarning, stacklevel=2)
    results = _collect(jobs, lost, path, experiment, cell, options)
    if interrupted:
        results = [replace(r, stop_reason="interrupted") if r is not None else None for r in results]
    merged = merge_results(results, config, inputs=jobs[0]["inputs"], lost={o.index: o.reason for o in lost},
                           wall=wall)
    return replace(merged, workers=_with_placement(merged.workers, ran))


#: Checks that never read the training split (the discriminator's file is cached by then).
_NO_TRAINING = ("ssim", "ssim-compat", "discriminator", "linf", "none", "validity")


def _train_inputs_needed(config: CampaignConfig, options: CampaignOptions):
    """The training inputs the workers need: none when no check and no coverage profile reads
    them (each worker would otherwise receive the whole training split: 188 MB for MNIST).
    """
    specs = [config.strategy_spec.check_spec(config), config.shared_fidelity]
    plain = all(s is None or s.partition(":")[0].strip().lower() in _NO_TRAINING for s in specs)
    profile = options.profile is None and config.strategy_spec.needs_profile(config)
    needed = not plain or profile or isinstance(options.fidelity, str)
    return options.train_inputs if needed else None


def _jobs(m1, m2, inputs, labels, bounds, config: CampaignConfig, options: CampaignOptions, experiment: str,
          cell: str) -> list[dict]:
    x = torch.as_tensor(np.asarray(inputs.cpu() if torch.is_tensor(inputs) else inputs))
    y = torch.as_tensor(np.asarray(labels.cpu() if torch.is_tensor(labels) else labels))
    threads = max(1, torch.get_num_threads() // config.workers)
    if config.gpus_per_worker:  # each worker moves them to its own GPU (the driver's may have none)
        m1, m2 = (copy.deepcopy(m).cpu() if _device_of(m).type != "cpu" else m for m in (m1, m2))
    return [{"m1": m1, "m2": m2, "inputs": x, "labels": y, "bounds": tuple(bounds), "config": config,
             "options": options, "experiment": experiment, "cell": cell, "index": i, "threads": threads}
            for i in range(config.workers)]


def _finished(path: str, experiment: str, cell: str) -> bool:
    """Whether the worker campaign ``cell`` has its result in the store (a rerun starts no process for it)."""
    if not Path(path).is_file() or Path(path).stat().st_size == 0:
        return False
    with ResultStore(path) as store:
        return store.get(experiment, DRFUZZ_METHOD, f"{cell}/result") is not None


def _run_in_processes(jobs: list[dict], config: CampaignConfig, watch: _Watch) -> _Ran:
    """Each worker in a ``spawn`` process on this machine, syncing through the store's file."""
    import socket

    ctx = multiprocessing.get_context("spawn")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_process_main, args=(job, errors), daemon=True) for job in jobs]
    for p in procs:
        p.start()
    lost: list[_Lost] = []
    interrupted = False
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(_POLL)
            _raise_error(errors, procs)
            watch()
    except KeyboardInterrupt:  # the workers got it too: each saves its checkpoint and ends
        interrupted = True
        for p in procs:
            p.join(timeout=30)
    _raise_error(errors, procs)
    for i, p in enumerate(procs):
        p.join()
        if p.exitcode:
            code = p.exitcode
            name = signal.Signals(-code).name if code < 0 else f"exit status {code}"
            lost.append(_Lost(jobs[i]["index"], f"killed by {name}" if code < 0 else name))
    here = {"node": socket.gethostname(), "gpus": []}
    placement = {job["index"]: {**here, "device": str(_device_of(job["m1"]))} for job in jobs}
    return _Ran(lost, interrupted, placement)


def _raise_error(errors, procs) -> None:
    """A worker's own error ends the campaign: the others are stopped and it is raised."""
    if errors.empty():
        return
    index, message = errors.get()
    for p in procs:
        if p.is_alive():
            p.terminate()
    raise DeepFaultError(f"worker {index}: {message}")


def _run_on_ray(jobs: list[dict], config: CampaignConfig, watch: _Watch) -> _Ran:
    """Each worker a Ray task of one CPU (and ``gpus_per_worker`` GPUs) on any node; they reach the
    store through a server on this node (:func:`~deepfault.experiment.served.served_store`), so no
    worker needs the store's file. A task whose worker or node died is a lost worker.
    """
    from ...core.executors import RayExecutor
    from ...experiment.served import served_store

    # joins (or starts) the cluster: an unreachable address, or GPUs no node has, is one line
    executor = RayExecutor(workers=config.workers, address=config.address,
                           gpus_per_worker=config.gpus_per_worker)
    import ray

    try:
        with served_store(jobs[0]["options"].store) as store:
            sent = [{**job, "options": replace(job["options"], store=store)} for job in jobs]
            ran = _wait_on_ray(ray, sent, config, watch)
            ran.sync_point = f"store server on {store.host}"
        return ran
    finally:
        executor.close()


def _wait_on_ray(ray, jobs: list[dict], config: CampaignConfig, watch: _Watch) -> _Ran:
    task = ray.remote(num_cpus=1, num_gpus=config.gpus_per_worker, max_retries=0)(campaign_worker)
    refs = {task.remote(job): job["index"] for job in jobs}
    ran = _Ran()
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=_POLL)
            watch()
            for ref in done:
                try:
                    ran.placement[refs[ref]] = ray.get(ref)
                except ray.exceptions.RayTaskError as err:  # the worker's own error
                    for other in pending:
                        ray.cancel(other, force=True)
                    raise DeepFaultError(f"worker {refs[ref]}: {err.cause!r}") from None
                except ray.exceptions.RayError as err:  # its process or node died
                    ran.lost.append(_Lost(refs[ref], f"{type(err).__name__}: {str(err).splitlines()[0]}"))
    except KeyboardInterrupt:  # each worker is interrupted too: it saves its checkpoint (through the server)
        ran.interrupted = True
        for ref in pending:
            ray.cancel(ref)
        ray.wait(pending, num_returns=len(pending), timeout=30)
    return ran


def _collect(jobs: list[dict], lost: list[_Lost], path: str, experiment: str, cell: str,
             options: CampaignOptions) -> list[CampaignResult | None]:
    """Each worker's result: its stored one, or (lost, or interrupted) what its checkpoint holds."""
    gone = {o.index for o in lost}
    results: list[CampaignResult | None] = []
    for job in jobs:
        i = job["index"]
        with ResultStore(path) as store:
            done = load_result(store, experiment, worker_cell(cell, i))
        if done is None:
            config = _worker_config(job["config"], i)
            link = WorkerLink(i, job["config"].workers, experiment, cell)
            opts = replace(options, store=path, experiment=experiment, cell=worker_cell(cell, i), worker=link)
            done = restored_result(job["m1"], job["m2"], job["inputs"], job["labels"], bounds=job["bounds"],
                                   config=config, options=opts,
                                   stop_reason="lost" if i in gone else "interrupted")
        results.append(done)
    return results


# --- the merge ----------------------------------------------------------------------------------

def merge_results(results: list[CampaignResult | None], config: CampaignConfig, *, inputs,
                  lost: dict[int, str] | None = None, wall: float | None = None) -> CampaignResult:
    """One result of the workers' results (``None``: a worker lost before its first checkpoint).

    The initial faults once (every worker evaluates the same seeds), then every worker's faults
    in the order they were found (by fuzzing seconds; each keeps its worker's own ``iteration``
    and ``queries``); the metrics over them, so #URF counts each ``(root, y1, y2)`` once; the
    counts summed, the time the longest worker's, the timeline re-sampled over all of them.

    Args:
        results: Each worker's result, by index.
        config: The campaign's configuration (recorded in the result).
        inputs: The campaign's test inputs (the examples' seeds).
        lost: Workers that ended early, with the reason.
        wall: The driver's wall time for the whole run.

    Raises:
        DeepFaultError: No worker left a result.
    """
    lost = lost or {}
    present = [r for r in results if r is not None]
    if not present:
        raise DeepFaultError("no worker of the campaign left a checkpoint; rerun it (with a longer budget, "
                             "or a shorter --sync-every)")
    base = present[0]
    faults, rf_inputs, rf_p1, rf_p2 = _merged_faults(present)
    rules = list(base.rule_usage)
    stops = {r.stop_reason for r in present}
    stop = ("interrupted" if "interrupted" in stops else "exhausted" if stops == {"exhausted"} else "budget")

    def total(name: str) -> int:
        return int(sum(getattr(r, name) for r in present))

    timings: dict[str, float] = {}
    for r in present:
        for key, value in r.timings.items():
            timings[key] = timings.get(key, 0.0) + float(value)
    seconds = max(r.seconds for r in present)
    return CampaignResult(
        config=config, metrics=compute_metrics(faults), stop_reason=stop, iterations=total("iterations"),
        steps=total("steps"), queries=total("queries"), generated=total("generated"), passed=total("passed"),
        seconds=seconds, setup_seconds=max(r.setup_seconds for r in present), roots=base.roots,
        queued_seeds=base.queued_seeds, corpus=total("corpus"), rule_usage=_merged_usage(present),
        timeline=_merged_timeline(present, faults), timings=timings, faults=faults, rf_inputs=rf_inputs,
        rf_p1=rf_p1, rf_p2=rf_p2, resumed=max(r.resumed for r in present),
        examples=examples(faults, rf_inputs, torch.as_tensor(np.asarray(inputs)), rules),
        evicted=total("evicted"), shared_rejected=total("shared_rejected"), trace_checks=base.trace_checks,
        workers=_workers_record(results, config, lost, timings, wall),
    )


def _workers_record(results, config: CampaignConfig, lost: dict[int, str], timings: dict[str, float],
                    wall: float | None) -> dict:
    fuzzing = sum(r.seconds for r in results if r is not None)
    sync, checkpoint = timings.get("sync", 0.0), timings.get("checkpoint", 0.0)
    per = [None if r is None else {
        "worker": i, "seed": r.config.seed, "stop_reason": r.stop_reason, "iterations": r.iterations,
        "generated": r.generated, "seconds": r.seconds, "rf": r.metrics.rf, "urf": r.metrics.urf,
        "mutants_per_second": r.generated / r.seconds if r.seconds > 0 else None}
        for i, r in enumerate(results)]
    return {"count": config.workers, "executor": config.executor, "sync_every": config.sync_every,
            "lost": [{"worker": i, "reason": why} for i, why in sorted(lost.items())],
            "sync_seconds": sync, "checkpoint_seconds": checkpoint,
            "sync_share": sync / fuzzing if fuzzing > 0 else 0.0,
            "checkpoint_share": checkpoint / fuzzing if fuzzing > 0 else 0.0,
            "wall_seconds": wall, "per_worker": per}


def _merged_faults(results: list[CampaignResult]):
    """The initial faults of the first result, then every result's generated ones by time."""
    rf_kind = FAULT_KINDS.index("rf")
    base = results[0]
    initial = base.faults.select(base.faults.initial)
    n_initial = int(np.count_nonzero(initial.kind == rf_kind))
    tables, rf_parts = [], []
    for r in results:
        generated = r.faults.select(~r.faults.initial)
        rf_rows = r.faults.kind[r.faults.kind == rf_kind]
        first = len(rf_rows) - int(np.count_nonzero(generated.kind == rf_kind))
        tables.append(generated)
        rf_parts.append((r.rf_inputs[first:], r.rf_p1[first:], r.rf_p2[first:]))
    found = FaultTable.concat(tables)
    order = np.argsort(found.elapsed, kind="stable")
    # each generated rf row's place among the concatenated rf data, carried through the sort
    is_rf = found.kind == rf_kind
    rf_index = np.cumsum(is_rf) - 1
    rf_order = rf_index[order][is_rf[order]]
    data = [np.concatenate([p[k] for p in rf_parts]) for k in range(3)]
    faults = FaultTable.concat([initial, found.select(order)])
    rf_data = [np.concatenate([b[:n_initial], d[rf_order]])
               for b, d in zip((base.rf_inputs, base.rf_p1, base.rf_p2), data, strict=True)]
    return faults, rf_data[0], rf_data[1], rf_data[2]


def _merged_usage(results: list[CampaignResult]) -> dict[str, dict]:
    from ..mutation.mcmc import mcmc_scores

    usage: dict[str, dict] = {}
    for r in results:
        for rule, stats in r.rule_usage.items():
            mine = usage.setdefault(rule, {"selected": 0, "faithful": 0, "gain": 0, "rf": 0})
            for key in ("selected", "faithful", "gain", "rf"):
                mine[key] += int(stats.get(key, 0))
    for stats in usage.values():
        stats["score"] = float(mcmc_scores(np.array([stats["selected"]]), np.array([stats["faithful"]]),
                                           np.array([stats["gain"]]))[0])
    return usage


#: The timeline's counts that add up over workers (#URF and #Seed are counted from the merged faults).
_ADDITIVE = ("iterations", "queries", "rf", "gf", "corpus")


def _merged_timeline(results: list[CampaignResult], faults: FaultTable) -> tuple[dict, ...]:
    """At every worker's sample time: the others' last samples added, #URF and #Seed of the
    merged faults found by then.
    """
    times = sorted({float(s["elapsed"]) for r in results for s in r.timeline})
    rf = faults.select((faults.kind == FAULT_KINDS.index("rf")) & ~faults.initial)
    out = []
    for t in times:
        sample: dict[str, Any] = {"elapsed": t}
        for key in _ADDITIVE:
            sample[key] = sum(_last(r.timeline, t).get(key, 0) for r in results)
        until = rf.elapsed <= t
        keys = zip(rf.root[until].tolist(), rf.y1[until].tolist(), rf.y2[until].tolist(), strict=True)
        sample["urf"] = len(set(keys))
        sample["seeds"] = len(set(rf.root[until].tolist()))
        out.append(sample)
    return tuple(out)


def _last(timeline, t: float) -> dict:
    last: dict = {}
    for sample in timeline:
        if float(sample["elapsed"]) > t:
            break
        last = sample
    return last
