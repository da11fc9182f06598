"""Shards: the corpus's immutable ``.npz`` files, each written whole or not at all.

A shard holds the entries of one add (or a part of a large one): ``inputs`` (float32),
``labels`` (int64), ``ids`` (the content hashes) and ``provenance`` (JSON text), with no object
arrays, so it reads back with ``allow_pickle=False``. Its name comes from its content; the
manifest records its size and SHA-256, so a damaged shard is found before it is used.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._io import atomic_path
from ..errors import DeepFaultError
from .provenance import Provenance

__all__ = ["ShardRecord", "ShardData", "SHARD_NAME", "SHARD_BYTES", "write_shard", "read_shard",
           "read_shard_ids", "check_size"]

#: A shard's file name: ``shard-`` and 20 hex digits of the SHA-256 of its ids and provenance.
SHARD_NAME = re.compile(r"shard-[0-9a-f]{20}\.npz")
#: The most input bytes one shard holds: a large add is split, so a replay reads one shard of
#: at most this size at a time (flat memory, whatever the corpus's length).
SHARD_BYTES = 32 << 20
_KEYS = ("inputs", "labels", "ids", "provenance")


@dataclass(frozen=True)
class ShardRecord:
    """The manifest's line for one shard.

    Attributes:
        name: the file name in the corpus folder (``shard-<hash>.npz``).
        count: its number of entries.
        size: the file's size in bytes.
        sha256: the file's SHA-256 (hex).
        provenance: the provenance its entries share.
    """

    name: str
    count: int
    size: int
    sha256: str
    provenance: Provenance

    def to_dict(self) -> dict:
        """A JSON-ready dict (the manifest's form)."""
        return {"name": self.name, "count": self.count, "size": self.size, "sha256": self.sha256,
                "provenance": self.provenance.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> ShardRecord:
        """The inverse of :meth:`to_dict`."""
        name = str(data["name"])
        if not SHARD_NAME.fullmatch(name):
            raise ValueError(f"not a shard name: {name!r}")
        return cls(name=name, count=int(data["count"]), size=int(data["size"]), sha256=str(data["sha256"]),
                   provenance=Provenance.from_dict(data["provenance"]))


@dataclass(frozen=True)
class ShardData:
    """One shard's arrays, read back and checked.

    Attributes:
        inputs: ``(count, *input_shape)`` float32.
        labels: ``(count,)`` int64.
        ids: ``(count,)`` content hashes (``<U64``).
        provenance: the provenance its entries share.
    """

    inputs: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    provenance: Provenance


def write_shard(folder: Path, inputs: np.ndarray, labels: np.ndarray, ids: np.ndarray,
                provenance: Provenance) -> ShardRecord:
    """Write one shard into ``folder`` atomically and return its manifest line.

    The file appears whole under its final name or not at all (a kill leaves at most a
    ``.tmp`` file, or a whole shard that no manifest lists yet).
    """
    name_hash = hashlib.sha256("\n".join(ids.tolist()).encode() + b"\0" + provenance.to_json().encode())
    name = f"shard-{name_hash.hexdigest()[:20]}.npz"
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, inputs=np.ascontiguousarray(inputs, dtype=np.float32),
             labels=np.ascontiguousarray(labels, dtype=np.int64), ids=np.asarray(ids),
             provenance=np.asarray(provenance.to_json()))
    data = buffer.getbuffer()  # no copy of the file's bytes
    with atomic_path(folder / name) as tmp:
        tmp.write_bytes(data)
    return ShardRecord(name=name, count=len(ids), size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                       provenance=provenance)


def _damaged(folder: Path, record: ShardRecord, what: str) -> DeepFaultError:
    return DeepFaultError(
        f"corpus {str(folder)!r}: shard {record.name} is damaged ({what}); restore the folder from a copy, "
        f"or drop the damaged shards with 'deepfault corpus prune {folder} --damaged' (its {record.count} "
        "entries are lost)")


def check_size(folder: Path, record: ShardRecord) -> None:
    """Refuse a listed shard that is missing or whose size is not the manifest's (cheap: no read)."""
    try:
        size = (folder / record.name).stat().st_size
    except FileNotFoundError:
        raise _damaged(folder, record, "missing") from None
    if size != record.size:
        raise _damaged(folder, record, f"{size} bytes, the manifest says {record.size}")


def read_shard(folder: Path, record: ShardRecord, input_shape: tuple[int, ...]) -> ShardData:
    """Read and check one shard: its bytes against the manifest's SHA-256, then its arrays.

    Raises:
        DeepFaultError: the shard is missing, of another size or hash, or unreadable.
    """
    check_size(folder, record)
    path = folder / record.name
    with open(path, "rb") as fh:  # streamed: the file's bytes are never all in memory
        if hashlib.file_digest(fh, "sha256").hexdigest() != record.sha256:
            raise _damaged(folder, record, "its SHA-256 is not the manifest's")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in _KEYS}
        provenance = Provenance.from_dict(json.loads(str(arrays["provenance"])))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise _damaged(folder, record, f"unreadable: {err}") from None
    inputs, labels, ids = arrays["inputs"], arrays["labels"], arrays["ids"]
    if (inputs.dtype != np.float32 or tuple(inputs.shape) != (record.count, *input_shape)
            or labels.shape != (record.count,) or ids.shape != (record.count,)):
        raise _damaged(folder, record, "its arrays are not the manifest's shape")
    return ShardData(inputs=inputs, labels=labels.astype(np.int64, copy=False), ids=ids,
                     provenance=provenance)


def read_shard_ids(folder: Path, record: ShardRecord) -> np.ndarray:
    """Only the ids of one shard (the add's deduplication reads no inputs)."""
    check_size(folder, record)
    try:
        with np.load(folder / record.name, allow_pickle=False) as npz:
            ids = npz["ids"]
    except (OSError, ValueError, KeyError) as err:
        raise _damaged(folder, record, f"unreadable: {err}") from None
    if ids.shape != (record.count,):
        raise _damaged(folder, record, "its ids are not the manifest's count")
    return ids
