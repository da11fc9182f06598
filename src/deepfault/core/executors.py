"""Executors: one ``map`` seam for independent jobs, and :class:`Parallel`, the options that pick one.

Experiment cells, DeepXplore runs, fuzzing campaigns and the shards of a data-parallel pass
(:mod:`deepfault.core.shards`) are jobs: a module-level function and a picklable argument
carrying only what the job needs. An executor runs them and yields ``(job_index, result)``
as they finish; the driver alone writes results to the store. Three are registered:

- ``serial``: in this process, in order (the reference).
- ``process``: local worker processes (``--workers N``), started with ``spawn``.
- ``ray``: a Ray cluster (``--executor ray``; ``--address ADDRESS`` joins an existing
  one, otherwise a local Ray instance is started with ``workers`` CPUs; each job reserves
  ``--gpus-per-worker`` GPUs, fractions allowed). Needs the optional extra ``ray``
  (``pip install -e '.[ray]'``).

Every command that spreads work declares the same four options from one declaration,
:class:`Parallel` (``--workers``, ``--executor``, ``--address``, ``--gpus-per-worker``).

A job's result never depends on which executor or worker ran it: every job seeds its
own randomness from its arguments.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from ..checks import MAX_GPUS_PER_WORKER
from ..errors import DeepFaultError
from .constraints import WORKERS, Interval, Options, Text, param, validate
from .registry import Registry

__all__ = ["EXECUTORS", "ClusterLost", "Executor", "Parallel", "get_executor", "list_executors"]

log = logging.getLogger(__name__)

#: Every executor, by name (``--executor``).
EXECUTORS: Registry[type[Executor]] = Registry("executor")


def _single_thread() -> None:
    import torch

    torch.set_num_threads(1)


@contextmanager
def _sigint_blocked():
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a Ctrl-C that came meanwhile arrives now


def _stop(pool) -> None:
    """Stop a process pool at once (an interrupt or a failed job): its manager thread cancels the
    jobs not started (cancelling them from here races with it: ``InvalidStateError``), and the
    workers, which never see SIGINT, are terminated.
    """
    pool.shutdown(wait=False, cancel_futures=True)
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with suppress(Exception):
            process.terminate()


class Executor(ABC):
    """Runs ``fn(job)`` for every job; see the module docstring.

    Args:
        workers: Parallel workers (ignored by ``serial``).
        address: Cluster address (``ray`` only).
        gpus_per_worker: GPUs each job reserves (``ray`` only; fractions share a GPU).
    """

    name = ""

    def __init__(self, *, workers: int = 1, address: str | None = None, gpus_per_worker: float = 0.0):
        self.workers = WORKERS.check("workers", workers)
        self.address = address
        self.gpus_per_worker = float(gpus_per_worker)

    @abstractmethod
    def map(self, fn: Callable[[Any], Any], jobs: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, fn(jobs[index]))`` for every job, in completion order."""

    def close(self) -> None:  # noqa: B027 (optional hook: most executors hold nothing)
        """Release workers or the cluster connection."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> dict:
        """The executor's name, workers and address, as a result file records them."""
        return {"executor": self.name, "workers": self.workers, "address": self.address}


@EXECUTORS.register("serial")
class SerialExecutor(Executor):
    """In this process, one job after the other."""

    name = "serial"

    def map(self, fn, jobs):
        for index, job in enumerate(jobs):
            yield index, fn(job)


@EXECUTORS.register("process")
class ProcessExecutor(Executor):
    """Local worker processes (``spawn``), one PyTorch thread each."""

    name = "process"
    #: How the workers start: ``spawn`` (a fresh interpreter: safe with CUDA and any state), or
    #: ``fork`` (a copy of this process: no import to wait for, the data shared copy-on-write;
    #: what a data-parallel pass on the CPU uses, :mod:`deepfault.core.shards`).
    start_method = "spawn"

    def map(self, fn, jobs):
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from multiprocessing import get_context

        jobs = list(jobs)
        if self.workers == 1 or len(jobs) <= 1:
            yield from SerialExecutor().map(fn, jobs)
            return
        with ProcessPoolExecutor(min(self.workers, len(jobs)), mp_context=get_context(self.start_method),
                                 initializer=_single_thread) as pool:
            # The workers start with SIGINT blocked (a mask survives fork and exec), so that a
            # Ctrl-C reaches this process alone: a worker that got it while starting would die
            # with a traceback of its own, and one running a job would go on to the next job.
            with _sigint_blocked():
                pending = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
            try:
                while pending:
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        index = pending.pop(future)
                        yield index, future.result()
            finally:
                if pending:
                    _stop(pool)


@EXECUTORS.register("ray")
class RayExecutor(Executor):
    """A Ray cluster: ``address`` joins one, otherwise a local instance is started."""

    name = "ray"

    def __init__(self, *, workers: int = 1, address: str | None = None, gpus_per_worker: float = 0.0):
        super().__init__(workers=workers, address=address, gpus_per_worker=gpus_per_worker)
        try:
            import ray
        except ModuleNotFoundError:
            raise ModuleNotFoundError(
                "the 'ray' executor needs Ray: pip install -e '.[ray]'"
            ) from None
        self._ray = ray
        self._started = False
        if address and not ray.is_initialized():
            _reachable(address)
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "configure_logging": False}
            if address:
                kwargs["address"] = address
            else:  # a new local instance, even where `ray start` left one running (Ray would join it)
                kwargs.update(address="local", num_cpus=self.workers)
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as err:
                where = f"the Ray cluster at {address!r}" if address else "a local Ray instance"
                raise DeepFaultError(f"cannot start or join {where}: {err}") from err
            self._started = True
        if self.gpus_per_worker:
            try:
                _check_gpus(ray, self.gpus_per_worker)
            except DeepFaultError:
                self.close()
                raise

    def map(self, fn, jobs):
        ray = self._ray
        remote = ray.remote(num_cpus=1, num_gpus=self.gpus_per_worker)(_ray_call)
        refs = {remote.remote(fn, job): i for i, job in enumerate(jobs)}
        pending = list(refs)
        try:
            while pending:
                # A job on a lost node is retried elsewhere by Ray; a cluster gone altogether is
                # noticed here within HEARTBEAT seconds (Ray itself waits a minute, then ends the process).
                done, pending = ray.wait(pending, num_returns=1, timeout=HEARTBEAT)
                if not done and not self._cluster_alive():
                    self._disconnect()
                    raise ClusterLost("the Ray cluster stopped (its head node does not answer)")
                for ref in done:
                    yield refs[ref], ray.get(ref)
        finally:
            if self._ray.is_initialized():
                for ref in pending:
                    with suppress(Exception):
                        ray.cancel(ref, force=True)

    def _cluster_alive(self) -> bool:
        """Whether the cluster's head (its GCS) still accepts a connection."""
        import socket

        try:
            host, _, port = self._ray.get_runtime_context().gcs_address.rpartition(":")
            socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
        except (OSError, ValueError, AttributeError):
            return False
        return True

    def _disconnect(self) -> None:
        """Leave a cluster that is gone (so that Ray does not end this process a minute later)."""
        with suppress(Exception):
            self._ray.shutdown()
        self._started = False

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
            self._started = False


#: Seconds a cluster address has to accept a connection before the run is refused.
CONNECT_TIMEOUT = 5.0
#: Seconds between two checks that a Ray cluster still answers while its jobs run.
HEARTBEAT = 2.0


class ClusterLost(RuntimeError):
    """The cluster an executor ran on is gone (its head stopped): no job can finish."""


def _reachable(address: str) -> None:
    """Refuse, within :data:`CONNECT_TIMEOUT` seconds, an address where nothing listens (Ray
    itself retries for minutes). ``auto``, ``local`` and addresses without a port pass.
    """
    import socket
    from urllib.parse import urlsplit

    if address in ("auto", "local"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise DeepFaultError(f"--address must be HOST:PORT or ray://HOST:PORT; got {address!r}") from None
    if not host or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
    except OSError as err:
        raise DeepFaultError(
            f"cannot reach the Ray cluster at {address!r} within {CONNECT_TIMEOUT:g} s "
            f"({err.strerror or err}); check --address, or leave it out to start a local Ray"
        ) from None


def _check_gpus(ray, gpus: float) -> None:
    """Refuse ``gpus`` per worker when no live node of the cluster has that many (Ray would keep
    the jobs waiting for them forever).
    """
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    most = max((float(n.get("Resources", {}).get("GPU", 0.0)) for n in nodes), default=0.0)
    if most < gpus:
        raise DeepFaultError(
            f"--gpus-per-worker {gpus:g} needs a node with {gpus:g} GPU(s), but the Ray cluster's nodes have "
            f"at most {most:g}; start its nodes with 'ray start --num-gpus N', or leave --gpus-per-worker "
            "out")


def _ray_call(fn, job):
    _single_thread()
    return fn(job)


def list_executors() -> list[str]:
    """The names of the registered executors."""
    return EXECUTORS.names()


def get_executor(name: str = "serial", *, workers: int = 1, address: str | None = None,
                 gpus_per_worker: float = 0.0) -> Executor:
    """A ready executor ``name`` (``serial``, ``process`` or ``ray``).

    Raises:
        DeepFaultError: Unknown name, ``workers < 1``, or an address or GPUs with another executor.
    """
    cls = EXECUTORS.get(name)
    check_ray_only(name, address=address, gpus_per_worker=gpus_per_worker)
    return cls(workers=workers, address=address, gpus_per_worker=gpus_per_worker)


def check_ray_only(executor: str, *, address: str | None = None, gpus_per_worker: float = 0.0) -> None:
    """Refuse a cluster ``address`` or GPUs per worker given with an ``executor`` other than Ray's
    (the one rule of :func:`get_executor`, :class:`Parallel` and a campaign's configuration).
    """
    if address and executor != "ray":
        raise DeepFaultError(f"--address only applies to the 'ray' executor; got --executor {executor}")
    if gpus_per_worker and executor != "ray":
        raise DeepFaultError(
            f"--gpus-per-worker only applies to the 'ray' executor; got --executor {executor}")


@dataclass(frozen=True)
class Parallel:
    """How a pass, a grid or a campaign spreads over workers: the one declaration of
    ``--workers``, ``--executor``, ``--address`` and ``--gpus-per-worker`` every command shares.

    How it runs, never what it computes: a data-parallel pass over any number of workers equals
    the serial one (:mod:`deepfault.core.shards`).

    Attributes:
        workers: Parallel workers (processes, or Ray CPUs of a local instance).
        executor: ``serial``, ``process`` or ``ray``; ``None``: ``ray`` with an ``address``,
            else ``process`` with more than one worker, else ``serial``.
        address: A Ray cluster to join (``ray://head:10001``, ``HOST:PORT`` or ``auto``).
        gpus_per_worker: GPUs each Ray job reserves (``0.25`` puts four on one GPU); ``0``: none.

    Examples:
        >>> Parallel(workers=2).executor_name
        'process'
        >>> Parallel(address="auto").executor_name
        'ray'
    """

    workers: int = param(1, WORKERS, help="parallel workers (processes or Ray CPUs)", option="--workers")
    executor: str | None = param(None, Options(list_executors, none=True),
                                 help="how work spreads: serial, local processes, or a Ray cluster (pip "
                                 "install -e '.[ray]') (default: ray with --address, process with "
                                 "--workers > 1, else serial)")
    address: str | None = param(None, Text(none=True), metavar="ADDRESS",
                                help="join this Ray cluster (ray://head:10001, HOST:PORT or auto) instead of "
                                "starting a local one")
    gpus_per_worker: float = param(0.0, Interval(float, 0.0, MAX_GPUS_PER_WORKER),
                                   help="GPUs each Ray worker reserves; fractions share one GPU (0.5: two "
                                   "workers on a GPU); 0: CPU only")

    def __post_init__(self):
        validate(self)
        check_ray_only(self.executor_name, address=self.address, gpus_per_worker=self.gpus_per_worker)

    @property
    def executor_name(self) -> str:
        """The executor that runs: the one named, or the default the docstring states."""
        if self.executor is not None:
            return self.executor
        return "ray" if self.address is not None else "process" if self.workers > 1 else "serial"

    @property
    def spread(self) -> bool:
        """Whether a pass over a data set is split into shards: more than one worker, or a Ray
        cluster (``serial`` with more than one worker runs the shards one after the other here,
        the same split without processes).
        """
        return self.executor_name == "ray" or self.workers > 1

    def start(self) -> Executor:
        """The executor these options name, started (a Ray cluster joined or a local one begun)."""
        return get_executor(self.executor_name, workers=self.workers, address=self.address,
                            gpus_per_worker=self.gpus_per_worker)

    def to_dict(self) -> dict:
        """The options as a result file records them (the executor resolved)."""
        return {"executor": self.executor_name, "workers": self.workers, "address": self.address,
                "gpus_per_worker": self.gpus_per_worker}

