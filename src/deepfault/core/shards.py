"""Data-parallel passes: a pass over a data set split into shards by index, each shard's state
computed by a worker, the states merged by the driver.

A pass (a profile, a spectrum, a coverage measurement, a surprise fit) folds its inputs into
mergeable state (:class:`~deepfault.core.accumulator.Accumulator`). :func:`sharded_pass` splits
the ``N`` inputs into contiguous shards by index (:func:`shard_bounds`), runs
``work(model, columns, options, context)`` on every shard through an executor
(:class:`~deepfault.core.executors.Parallel`), and hands the results back in shard order for the
caller to merge. Counts, minima and maxima equal the serial pass exactly; float sums (a profile's
mean and spread, for instance) are summed in another order and agree within
:data:`FLOAT_TOLERANCE` (relative).

How a worker reads its shard (``columns`` are arrays of ``N`` rows: the inputs, the labels):

- a memory-mapped ``.npy``/``.npz`` array (``np.memmap``): by path and index; every node must read
  that path (a shared file system, or the same file at the same place on every node);
- a torch ``Dataset`` (map-style): the dataset object travels and the worker indexes its range
  (so a dataset that reads files by index reads them where the worker runs);
- any other array or tensor (in memory): on the ``process`` executor the shard's rows travel with
  its job; on ``ray`` the whole array is put once into Ray's object store (``ray.put``) and each
  worker takes its rows from there, which suits data sets that fit the object store (a few GB).

Finished shards are kept in a shard-state file (``Runtime.shard_state``; the command line's is
``OUT.shards`` beside the output), replaced atomically after every shard, so that a pass stopped
midway (a Ray cluster stopped, a node lost, Ctrl-C) is finished by rerunning the same command:
the shards already done are read back, the others run. The file is keyed by the pass, the
model's weights, the options, the shard bounds and a fingerprint of the inputs; any difference
starts the pass afresh. It is removed when the pass completes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from .._io import write_torch
from ..errors import DeepFaultError

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["FLOAT_TOLERANCE", "SHARDS_PER_WORKER", "ShardContext", "Spread", "shard_bounds", "sharded_pass"]

log = logging.getLogger(__name__)

#: Shards per worker: more than one, so that a fast worker takes more of them and a rerun after a
#: stop redoes little; few, so that each shard's start (a model sent, a capture set up) stays small.
SHARDS_PER_WORKER = 4
#: The relative tolerance within which a sharded pass's float sums (means, spreads) equal the
#: serial pass's (float64 sums in another order; counts, minima and maxima are exact).
FLOAT_TOLERANCE = 1e-9
#: The shard-state file's format marker.
STATE_FORMAT = "deepfault-shards/1"


def shard_bounds(n: int, shards: int) -> tuple[tuple[int, int], ...]:
    """``shards`` contiguous ``(start, stop)`` ranges covering ``range(n)``, sizes differing by at
    most one (fewer when ``n < shards``; none when ``n == 0``).

    Examples:
        >>> shard_bounds(10, 3)
        ((0, 3), (3, 6), (6, 10))
    """
    shards = max(1, min(int(shards), int(n)))
    edges = [i * n // shards for i in range(shards + 1)]
    return tuple((a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a)


@dataclass(frozen=True)
class Spread:
    """Who ran a sharded pass: the record its result file and summary carry.

    Attributes:
        executor: ``process`` or ``ray``.
        workers: Workers asked for.
        shards: Shards the inputs were split into.
        devices: Where each shard ran, in shard order (``cpu``, ``cuda:0``; on Ray prefixed by
            the node: ``node 1a2b3c4d cpu``).
        kept: Shards read back from an earlier, stopped run's shard-state file.
    """

    executor: str
    workers: int
    shards: int
    devices: tuple[str, ...]
    kept: int = 0

    def to_dict(self) -> dict:
        """The record a result file keeps (``"parallel"``)."""
        return {"executor": self.executor, "workers": self.workers, "shards": self.shards,
                "devices": sorted(set(self.devices)), "kept_shards": self.kept}

    def summary(self) -> str:
        """One line: ``spread over 2 process workers on cpu (8 shards)``."""
        kept = f"; {self.kept} kept from the stopped run" if self.kept else ""
        return (f"spread over {self.workers} {self.executor} worker{'s' if self.workers != 1 else ''} on "
                f"{', '.join(sorted(set(self.devices)))} ({self.shards} shards{kept})")


@dataclass(frozen=True)
class ShardContext:
    """What a shard's ``work`` knows of where it runs.

    Attributes:
        index: The shard's number.
        start: Its first input's index in the whole set.
        stop: One past its last.
        device: The device its model was moved to.
        batch_size: Inputs per forward pass.
    """

    index: int
    start: int
    stop: int
    device: str
    batch_size: int | str

    def runtime(self) -> Runtime:
        """A :class:`~deepfault.core.runtime.Runtime` for the shard's pass: its device and batch
        size, the worker's own threads (an executor's workers run one each), no progress display.
        """
        from .runtime import Runtime

        return Runtime(device=self.device, threads=None, batch_size=self.batch_size)


# --------------------------------------------------------------------------- where a shard's rows come from


@dataclass(frozen=True)
class _Rows:
    """Rows that travel with the job (in memory, the ``process`` executor)."""

    rows: Any

    def read(self, start: int, stop: int) -> Any:
        return self.rows


@dataclass(frozen=True)
class _Mapped:
    """A memory-mapped array, opened again by path in the worker."""

    filename: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    order: str

    def read(self, start: int, stop: int) -> Any:
        whole = np.memmap(self.filename, dtype=np.dtype(self.dtype), mode="r", shape=self.shape,
                          offset=self.offset, order=self.order)  # type: ignore[call-overload]
        return np.array(whole[start:stop])


@dataclass(frozen=True)
class _Indexed:
    """A map-style torch ``Dataset``: the worker reads its range by index."""

    dataset: Any

    def read(self, start: int, stop: int) -> Any:
        from torch.utils.data import Subset

        return Subset(self.dataset, range(start, stop))


@dataclass(frozen=True)
class _Stored:
    """An array in Ray's object store (put once by the driver)."""

    ref: Any

    def read(self, start: int, stop: int) -> Any:
        import ray

        return ray.get(self.ref)[start:stop]


#: What forked workers inherit from the driver, by pass: the model and the columns (never pickled).
_INHERITED: dict[int, tuple[Any, tuple]] = {}


@dataclass(frozen=True)
class _Inherited:
    """A column a forked worker reads from the driver's memory (copy-on-write)."""

    token: int
    column: int

    def read(self, start: int, stop: int) -> Any:
        return _INHERITED[self.token][1][self.column][start:stop]


@dataclass(frozen=True)
class _InheritedModel:
    """The model a forked worker finds in the driver's memory."""

    token: int

    def resolve(self) -> Any:
        return _INHERITED[self.token][0]


def _forks(executor, device: str | None) -> bool:
    """Whether the shards' workers fork from this process: local processes on the CPU (a forked
    process cannot use CUDA initialised before), where the platform forks.
    """
    import multiprocessing

    from .executors import ProcessExecutor

    return (isinstance(executor, ProcessExecutor) and "fork" in multiprocessing.get_all_start_methods()
            and (device is None or str(device).startswith("cpu")) and not torch.cuda.is_initialized())


def _memmap_of(column) -> np.memmap | None:
    base = column
    while base is not None and not isinstance(base, np.memmap):
        base = getattr(base, "base", None)
    if isinstance(base, np.memmap) and isinstance(column, np.ndarray) and column.shape == base.shape \
            and getattr(base, "filename", None):
        return base
    return None


def _is_indexed(column) -> bool:
    from torch.utils.data import Dataset

    return isinstance(column, Dataset) and hasattr(column, "__len__")


def _sources(columns: Sequence[Any], bounds, executor: str) -> list[tuple[Any, ...]]:
    """Per shard, how each column's rows reach its worker (see the module docstring)."""
    shared: list[Any] = []  # per column: one source for every shard, or None: its rows travel with each job
    for column in columns:
        mapped = _memmap_of(column)
        if column is None or mapped is None and not _is_indexed(column) and executor != "ray":
            shared.append(None)
        elif mapped is not None:
            order = "F" if mapped.flags.f_contiguous and not mapped.flags.c_contiguous else "C"
            shared.append(_Mapped(str(mapped.filename), mapped.dtype.str, tuple(mapped.shape),
                                  int(mapped.offset), order))
        elif _is_indexed(column):
            shared.append(_Indexed(column))
        else:
            import ray

            shared.append(_Stored(ray.put(column)))
    return [tuple(s if s is not None else None if c is None else _Rows(c[a:b])
                  for s, c in zip(shared, columns, strict=True)) for a, b in bounds]


# --------------------------------------------------------------------------- one shard's job


@dataclass(frozen=True)
class _Job:
    work: Callable[..., Any]
    model: Any
    sources: tuple[Any, ...]
    options: Any
    index: int
    start: int
    stop: int
    device: str | None
    batch_size: int | str
    gpus: float


def _worker_device(job: _Job) -> tuple[str, str]:
    """``(device to run on, how the record names it)``."""
    device = job.device or "cpu"
    where = ""
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
            where = f"node {ray.get_runtime_context().get_node_id()[:8]} "
            device = "cuda" if job.gpus and torch.cuda.is_available() else \
                "cpu" if not torch.cuda.is_available() else device
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index
        device = f"cuda:{torch.cuda.current_device() if index is None else index}"
    return device, f"{where}{device}"


def _on(module: nn.Module, device: str) -> nn.Module:
    """``module`` on ``device``: itself when it is there, else a copy (the caller's model never moves)."""
    first = next(module.parameters(), None)
    if first is None or str(first.device) == device:
        return module
    import copy

    return copy.deepcopy(module).to(device)


def _run_shard(job: _Job) -> tuple[int, str, Any]:
    """Run one shard's ``work`` (in a worker): its rows read, its model (or models) on its device."""
    device, named = _worker_device(job)
    model = job.model.resolve() if isinstance(job.model, _InheritedModel) else job.model
    if isinstance(model, nn.Module):
        model = _on(model, device)
    elif isinstance(model, tuple):
        model = tuple(_on(m, device) if isinstance(m, nn.Module) else m for m in model)
    columns = tuple(s.read(job.start, job.stop) if s is not None else None for s in job.sources)
    context = ShardContext(job.index, job.start, job.stop, device, job.batch_size)
    return job.index, named, job.work(model, columns, job.options, context)


# --------------------------------------------------------------------------- the shard-state file


def _column_fingerprint(column) -> str:
    if column is None:
        return "none"
    mapped = _memmap_of(column)
    if mapped is not None:
        st = os.stat(str(mapped.filename))
        return f"file:{Path(str(mapped.filename)).resolve()}:{st.st_size}:{st.st_mtime_ns}"
    if _is_indexed(column):
        return f"dataset:{type(column).__qualname__}:{len(column)}"
    array = column.detach().cpu().numpy() if isinstance(column, torch.Tensor) else np.asarray(column)
    digest = hashlib.sha256(np.ascontiguousarray(array).data).hexdigest()
    return f"array:{array.dtype.str}:{array.shape}:{digest}"


def _weights_digest(module: nn.Module) -> str:
    """SHA-256 of a module's state (names, shapes, dtypes, bytes)."""
    digest = hashlib.sha256()
    for key, value in module.state_dict().items():
        array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
        digest.update(f"{key}:{array.dtype.str}:{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def _state_key(name: str, model, options, columns, bounds) -> str:
    modules = model if isinstance(model, tuple) else (model,)
    parts = [STATE_FORMAT, name, *(_weights_digest(m) for m in modules if isinstance(m, nn.Module)),
             repr(options), repr(bounds), *(_column_fingerprint(c) for c in columns)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


#: Globals a shard-state file may name besides deepfault's own classes: NumPy's arrays and dtypes.
_NUMPY_GLOBALS = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
                  "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.ndarray",
                  "numpy.dtype")


def _allowed(name: str) -> bool:
    return name.startswith("deepfault.") or name in _NUMPY_GLOBALS or name.startswith("numpy.dtypes.")


def _resolve(name: str):
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def _read_state(path: Path) -> Any:
    """A shard-state file read without running anything it names: torch's weights-only reader,
    allowing deepfault's own classes and NumPy's arrays only (never unpickled whole: the file
    sits beside an output, where anyone who can write there could have put another).
    """
    from torch import serialization

    names = serialization.get_unsafe_globals_in_checkpoint(path)
    foreign = [n for n in names if not _allowed(n)]
    if foreign:
        raise DeepFaultError(f"it names {', '.join(foreign[:3])}, which a shard-state file never holds")
    dtypes = [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]  # a dtype's own class
    with serialization.safe_globals([*(_resolve(n) for n in names), *dtypes]):
        return torch.load(path, map_location="cpu", weights_only=True)


@dataclass
class _State:
    """Finished shards, kept in a file replaced atomically after each one (``None``: not kept)."""

    path: Path | None
    key: str
    done: dict[int, tuple[str, Any]] = field(default_factory=dict)

    def load(self) -> None:
        if self.path is None or not self.path.is_file():
            return
        try:
            saved = _read_state(self.path)
        except Exception as err:  # a damaged or foreign file: start afresh rather than fail
            log.warning("ignoring the unreadable shard-state file %s (%s)", self.path, err)
            return
        if isinstance(saved, dict) and saved.get("key") == self.key:
            self.done = dict(saved["done"])

    def add(self, index: int, device: str, result: Any) -> None:
        self.done[index] = (device, result)
        if self.path is None:
            return
        write_torch(self.path, {"format": STATE_FORMAT, "key": self.key, "done": self.done})

    def clear(self) -> None:
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


# --------------------------------------------------------------------------- the pass


def _lost(executor: str, err: BaseException, state: _State, total: int) -> DeepFaultError:
    where = f"; the {len(state.done)} of {total} shards done are kept in {state.path}" if state.path else ""
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    cause = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return DeepFaultError(f"the {executor} workers stopped mid-pass ({cause}){where}; rerun the same command "
                          "to finish the pass")


def sharded_pass(name: str, work: Callable[[Any, tuple, Any, ShardContext], Any], model: nn.Module | tuple,
                 columns: Sequence[Any], options: Any, *, runtime: Runtime) -> tuple[list[Any], Spread]:
    """Run ``work`` over the shards of ``columns`` and return its results in shard order.

    Args:
        name: The pass (part of the shard-state key: ``"coverage profile"``).
        work: A module-level function ``work(model, columns, options, context) -> result``: the
            pass over one shard's rows (``columns`` sliced alike), its result picklable (an
            accumulator's ``state_dict``).
        model: The network, or a tuple of networks (a pair compared); a copy travels to every worker.
        columns: Arrays, tensors or map-style datasets of ``N`` rows each (``None`` entries stay
            ``None``): the inputs, then what travels with them (labels).
        options: What ``work`` needs besides (a config); picklable.
        runtime: The workers (``runtime.parallel``), where each runs its model (``runtime.device``;
            ``None``: the CPU, or on Ray a GPU when ``parallel.gpus_per_worker`` reserves one),
            its batch size, and the shard-state file (``runtime.shard_state``; ``None`` keeps none).

    Returns:
        ``(results, spread)``: one result per shard, in shard order, and the :class:`Spread`.

    Raises:
        DeepFaultError: No inputs, inputs that load by no index (a ``DataLoader``), or the workers
            lost mid-pass (the finished shards kept, a rerun finishes).
    """
    from torch.utils.data import DataLoader

    if any(isinstance(c, DataLoader) for c in columns):
        raise DeepFaultError("--workers needs inputs that load by index (an array, a tensor or a Dataset); a "
                             "DataLoader only streams: pass its dataset instead")
    n = len(columns[0])
    if n == 0:
        raise DeepFaultError(f"no inputs for the {name} pass: the input set is empty")
    parallel = runtime.parallel
    bounds = shard_bounds(n, parallel.workers * SHARDS_PER_WORKER)
    state = runtime.shard_state
    # the key hashes the weights and the inputs: only worth it where a file keeps the shards
    key = _state_key(name, model, options, columns, bounds) if state is not None else ""
    kept = _State(Path(state) if state is not None else None, key)
    kept.load()
    before = len(kept.done)
    todo = [i for i in range(len(bounds)) if i not in kept.done]
    with parallel.start() as executor:
        token = id(kept)
        try:
            plan = _Plan(work, model, tuple(columns), options, bounds, runtime)
            _collect(executor, plan.jobs(executor, todo, token), kept, len(bounds), progress=runtime.progress)
        finally:
            _INHERITED.pop(token, None)
    results = [kept.done[i][1] for i in range(len(bounds))]
    devices = tuple(kept.done[i][0] for i in range(len(bounds)))
    spread = Spread(parallel.executor_name, parallel.workers, len(bounds), devices, kept=before)
    kept.clear()
    return results, spread


@dataclass(frozen=True)
class _Plan:
    """What every shard's job of one pass shares."""

    work: Callable[..., Any]
    model: Any
    columns: tuple
    options: Any
    bounds: tuple[tuple[int, int], ...]
    runtime: Runtime

    def jobs(self, executor, todo: list[int], token: int) -> list[_Job]:
        """One job per shard of ``todo``. Forked workers (local processes on the CPU) find the model
        and the columns in their copy of this process (registered under ``token``); others receive
        them with their jobs (:func:`_sources`).
        """
        from ..checks import check_device

        device = None if self.runtime.device is None else str(check_device(self.runtime.device, "--device"))
        if _forks(executor, device):
            executor.start_method = "fork"
            _INHERITED[token] = (self.model, self.columns)
            inherited = tuple(None if c is None else _Inherited(token, k) for k, c in enumerate(self.columns))
            sources, sent = [inherited] * len(todo), _InheritedModel(token)
        else:
            sources = _sources(self.columns, [self.bounds[i] for i in todo], executor.name)
            sent = self.model
        gpus = self.runtime.parallel.gpus_per_worker
        batch = self.runtime.batch_size
        return [_Job(self.work, sent, src, self.options, i, *self.bounds[i], device, batch, gpus)
                for i, src in zip(todo, sources, strict=True)]


def _collect(executor, jobs: list[_Job], kept: _State, total: int, *, progress: Any = False) -> None:
    """Run ``jobs`` on ``executor``, keeping each shard as it arrives (a bar over the shards when
    ``progress`` asks for one); a lost worker or cluster is one
    :class:`~deepfault.errors.DeepFaultError` that says how to finish.
    """
    if not jobs:
        return
    from .progress import progress_bar

    bar = progress_bar(total, desc="shards", unit="shard", initial=total - len(jobs), leave=False) \
        if progress is True or isinstance(progress, str) else None
    try:
        for _, (index, where, result) in executor.map(_run_shard, jobs):
            kept.add(index, where, result)
            if bar is not None:
                bar.update(1)
    except (DeepFaultError, KeyboardInterrupt):
        raise
    except Exception as err:
        if not _is_lost_worker(err):
            raise
        raise _lost(executor.name, err, kept, total) from err
    finally:
        if bar is not None:
            bar.close()


def _is_lost_worker(err: BaseException) -> bool:
    """Whether ``err`` is a worker or a cluster gone (not the work's own failure)."""
    from concurrent.futures.process import BrokenProcessPool

    from .executors import ClusterLost

    if isinstance(err, (BrokenProcessPool, ClusterLost)):
        return True
    try:
        import ray.exceptions as rex
    except ModuleNotFoundError:
        return False
    if isinstance(err, rex.RayTaskError):
        return isinstance(err.cause, (rex.WorkerCrashedError, rex.NodeDiedError, rex.RaySystemError))
    return isinstance(err, rex.RayError)
