"""A results store served to workers on other machines: one Ray actor writes the file.

A :class:`~.store.ResultStore` is an SQLite file in WAL mode, whose index lives in one machine's
shared memory: processes on one machine may share it, but workers on several machines must not
open it over a network file system. A many-worker campaign on a Ray cluster therefore reaches
its store through :func:`served_store`:

- the driver starts one :class:`StoreServer` actor, pinned to the driver's own node, that holds
  the store open (the only process that writes it);
- each worker gets a :class:`RemoteStore`: the methods a campaign calls on a store (``begin``,
  ``put``, ``get``, ``records``, ``require``, ``delete_cells``), each sent to the actor and
  answered by it, so a worker on any node checkpoints and syncs without reaching the file;
- the file stays on the driver's disk as before, so a rerun of the command resumes every worker
  from it, a lost node loses only its worker, and nothing but the driver needs the path.

The actor takes no CPU of the cluster's (``num_cpus=0``) and runs one call at a time, in the
order they arrive: each call is the store's own transaction. An error the store raises (a full
disk, a corrupt cell) reaches the worker as that error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .store import Record, ResultStore, require_fields

__all__ = ["RemoteStore", "StoreServer", "served_store"]

#: The store's methods a remote worker may call (everything a campaign's checkpoint and sync use).
SERVED = ("begin", "put", "get", "records", "delete_cells")


class StoreServer:
    """The store's one writer: holds ``path`` open and answers :class:`RemoteStore`'s calls.

    Args:
        path: The results store's file (on the node this runs on).
    """

    def __init__(self, path: str | os.PathLike):
        self.store = ResultStore(path)

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        """The store's method ``name`` (one of :data:`SERVED`) called with ``args`` and ``kwargs``
        (``records`` as a list: a generator cannot leave the actor).
        """
        if name not in SERVED:
            raise ValueError(f"the served store has no method {name!r}; it serves {', '.join(SERVED)}")
        answer = getattr(self.store, name)(*args, **kwargs)
        return list(answer) if name == "records" else answer

    def node(self) -> str:
        """The host this server runs on (for the summary's "through the store on ...")."""
        import socket

        return socket.gethostname()

    def close(self) -> None:
        """Close the store."""
        self.store.close()


class RemoteStore:
    """A worker's handle on a store served by :class:`StoreServer`: the store's methods a campaign
    calls, each answered by the server (a Ray actor, or the server itself in one process).

    Args:
        server: A Ray actor handle of :class:`StoreServer`, or a :class:`StoreServer`.
        path: The store's path on the driver's node (for messages only; it is never opened here).
        host: The host the server runs on (``None``: this one).
    """

    readonly = False

    def __init__(self, server: Any, path: str | os.PathLike, host: str | None = None):
        self.server = server
        self.path = Path(path)
        self.host = host

    def _call(self, name: str, *args, **kwargs) -> Any:
        method = self.server.call
        if not hasattr(method, "remote"):  # the server itself (a test, or one process)
            return method(name, args, kwargs)
        import ray

        try:
            return ray.get(method.remote(name, args, kwargs))
        except ray.exceptions.RayTaskError as err:  # the store's own error, raised here as itself
            raise err.cause from None

    def begin(self, experiment: str, name: str, config: dict, provenance: dict, *,
              method: str = "deepfault") -> None:
        """:meth:`.store.ResultStore.begin`, in the served store."""
        self._call("begin", experiment, name, config, provenance, method=method)

    def put(self, experiment: str, method: str, cell_id: str, data: dict, arrays: dict | None = None, *,
            replace: bool = False) -> None:
        """:meth:`.store.ResultStore.put`, in the served store."""
        self._call("put", experiment, method, cell_id, data, arrays, replace=replace)

    def get(self, experiment: str, method: str, cell_id: str) -> Record | None:
        """:meth:`.store.ResultStore.get`, from the served store."""
        return self._call("get", experiment, method, cell_id)

    def records(self, experiment: str, method: str, *, arrays: bool = True) -> Iterator[Record]:
        """:meth:`.store.ResultStore.records`, from the served store."""
        return iter(self._call("records", experiment, method, arrays=arrays))

    def delete_cells(self, experiment: str, method: str, prefix: str) -> int:
        """:meth:`.store.ResultStore.delete_cells`, in the served store."""
        return self._call("delete_cells", experiment, method, prefix)

    def require(self, record: Record, *fields_: str) -> Record:
        """:meth:`.store.ResultStore.require` (checked here: it reads the record only)."""
        return require_fields(record, fields_, self.path)

    def close(self) -> None:
        """Nothing to close: the server's store is the driver's (:func:`served_store`)."""

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def served_store(path: str | os.PathLike) -> Iterator[RemoteStore]:
    """Serve the store ``path`` from a :class:`StoreServer` actor pinned to this (the driver's) node
    of the Ray cluster this process has joined; yields the :class:`RemoteStore` to send to workers.
    The actor is ended when the block ends (the store file stays).
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    actor = ray.remote(num_cpus=0, max_restarts=0)(StoreServer).options(scheduling_strategy=here)
    path = Path(path).resolve()  # the driver's path: the actor runs in another folder
    server: Any = actor.remote(os.fspath(path))  # a Ray actor handle (its methods' .remote)
    try:
        host = ray.get(server.node.remote())  # opened (a store it cannot open is this line's error)
        yield RemoteStore(server, path, host)
    finally:
        with contextlib.suppress(Exception):
            ray.get(server.close.remote(), timeout=30)
        with contextlib.suppress(Exception):
            ray.kill(server)
