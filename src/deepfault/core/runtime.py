"""How a call runs, never what it computes: :class:`Runtime`.

Every method's entry takes ``fn(model_or_models, data, config, *, runtime=None)``. The
config (one frozen dataclass per method) holds everything that determines the result and is
recorded in every result file; the runtime holds what only changes how fast, where and how
visibly it is computed: the device, the CPU threads, the batch size, the progress display
and the store a long run resumes from. Results do not depend on the runtime (the tests
compare them across batch sizes and thread counts).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..checks import MAX_INPUTS, MAX_THREADS
from ..errors import DeepFaultError
from .constraints import Checked, Interval, Text, constraints, param
from .executors import Parallel

__all__ = ["Runtime", "RUNTIME_FIELDS"]


def _parallel(name: str, value: Any) -> Parallel:
    if not isinstance(value, Parallel):
        raise DeepFaultError(f"{name} must be a deepfault.core.executors.Parallel (workers, executor, "
                             f"address, GPUs per worker); got {value!r}")
    return value


@dataclass(frozen=True)
class Runtime:
    """Device, threads, batch size, progress and store of one call.

    Attributes:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or a ``torch.device``;
            ``None``: where the model's parameters are (the CPU for a black box).
        threads: CPU threads: a count, ``"auto"`` (the free cores for small models on the
            CPU; :func:`deepfault.core.threads.auto_threads`) or ``None`` (PyTorch's own
            setting). ``auto`` follows ``DEEPFAULT_THREADS`` when that is set.
        batch_size: Inputs per forward pass, or ``"auto"`` (sized from the memory free).
        progress: ``False``, ``True`` (a bar on a terminal, lines when piped), a label for the
            bar, or a callable the method calls with its progress records.
        store: The SQLite store a long run records itself in and resumes from (``None``: the
            method's default, or none).
        parallel: How a pass over a data set spreads over workers
            (:class:`~deepfault.core.executors.Parallel`; default: serial, in this process). The
            passes that shard (:mod:`deepfault.core.shards`) equal the serial result.
        shard_state: The file a spread pass keeps its finished shards in, so that a rerun after a
            stop finishes it (:mod:`deepfault.core.shards`; the command line's: ``OUT.shards``);
            ``None``: none kept.
    """

    device: str | torch.device | None = param(None, Text(none=True), help="device to run on")
    threads: int | str | None = param(
        "auto", Interval(int, 1, MAX_THREADS, none=True, words=("auto",)), plain_help=True,
        help="PyTorch CPU threads; 'auto': for small models (<= 2M parameters) on the CPU, the cores no "
        "other process is using now (1 on a busy machine: measured 6-25x faster there, and 2 on an idle "
        "2-core one: 1.5-1.8x faster; docs/performance.md), else PyTorch's default (so in the commands that "
        "build or fine-tune their models as they go)")
    batch_size: int | str = param(
        "auto", Interval(int, 1, MAX_INPUTS, words=("auto",)), plain_help=True,
        help="inputs per forward pass; 'auto' (the default) sizes it from the memory one input takes and the "
        "memory free, at most 1024")
    progress: bool | str | Callable[..., Any] = param(False, Text(none=True), help="progress display")
    store: str | os.PathLike | None = param(None, Text(none=True), help="SQLite store of a long run")
    parallel: Parallel = param(Parallel(), Checked(_parallel, "a deepfault.core.executors.Parallel",
                                                   bad=(2, "process")),
                               help="workers a pass over a data set spreads over")
    shard_state: str | os.PathLike | None = param(None, Text(none=True),
                                                  help="file a spread pass keeps its finished shards in")

    def __post_init__(self):
        if isinstance(self.device, torch.device):
            object.__setattr__(self, "device", str(self.device))
        for name in ("store", "shard_state"):
            if isinstance(getattr(self, name), os.PathLike):
                object.__setattr__(self, name, os.fspath(getattr(self, name)))
        for name, constraint in constraints(Runtime).items():
            value = getattr(self, name)
            if name == "progress" and (isinstance(value, bool) or callable(value)):
                continue  # a flag or a callback; only a label is text
            constraint.check(name, value)

    @classmethod
    def spread(cls, parallel: Parallel, out: str | os.PathLike | None = None, **fields: Any) -> Runtime:
        """A runtime (``fields``) whose passes over a data set spread over ``parallel``'s workers;
        a spread pass whose result goes to the file ``out`` keeps its finished shards in
        ``OUT.shards`` beside it, where a rerun of the stopped call finds them
        (:mod:`deepfault.core.shards`; ``out`` ``None``: none kept).
        """
        if not parallel.spread or out is None:
            return cls(parallel=parallel, **fields)
        return cls(parallel=parallel, shard_state=f"{os.fspath(out)}.shards", **fields)

    def with_(self, **changes) -> Runtime:
        """A copy with ``changes`` (``runtime.with_(batch_size=64)``)."""
        return replace(self, **changes)

    def torch_device(self, default: str | torch.device = "cpu") -> torch.device:
        """The device as a ``torch.device`` (``default`` when none was given)."""
        return torch.device(self.device if self.device is not None else default)


#: The runtime's field names: the keywords the old entry forms took beside their config.
RUNTIME_FIELDS = ("device", "threads", "batch_size", "progress", "store")
