"""Which entries a prune deletes, and the shards that remain."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import DeepFaultError
from .manifest import Manifest
from .shard import ShardRecord, read_shard, read_shard_ids, write_shard

__all__ = ["remaining_shards", "when"]

#: The shortest id prefix a prune takes (shorter ones match too much by accident).
MIN_PREFIX = 8


def when(value: str | _dt.datetime) -> _dt.datetime:
    """``value`` as an aware UTC datetime (ISO 8601 text, a date, or a datetime; naive is UTC)."""
    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise DeepFaultError(f"before must be a date or time in ISO 8601 (e.g. 2026-01-31 or "
                                 f"2026-01-31T12:00:00); got {value!r}") from None
    if not isinstance(value, _dt.datetime):
        raise DeepFaultError(f"before must be ISO 8601 text or a datetime; got {value!r}")
    return value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value.astimezone(_dt.UTC)


def _added(record: ShardRecord) -> _dt.datetime | None:
    try:
        return when(record.provenance.time) if record.provenance.time else None
    except DeepFaultError:
        return None


def _resolve(folder: Path, manifest: Manifest, wanted: Sequence[str], skip: set[str]) -> set[str]:
    """Full ids for ``wanted`` (ids or unique prefixes); refuses one that matches none or several."""
    wanted = [str(w).strip().lower() for w in wanted]
    short = [w for w in wanted if len(w) < MIN_PREFIX]
    if short:
        raise DeepFaultError(f"ids to prune must have at least {MIN_PREFIX} hex digits; got {short[0]!r} "
                             "(deepfault corpus list --entries shows them)")
    every = np.concatenate([read_shard_ids(folder, r) for r in manifest.shards if r.name not in skip] or
                           [np.empty(0, dtype="<U64")])
    found: set[str] = set()
    for w in wanted:
        hits = every[np.char.startswith(every, w)]
        if len(set(hits.tolist())) != 1:
            what = "no entry" if len(hits) == 0 else f"{len(set(hits.tolist()))} entries"
            raise DeepFaultError(f"id {w!r} matches {what} of the corpus; give a whole id (deepfault corpus "
                                 "list --entries shows them); nothing was deleted")
        found.add(str(hits[0]))
    return found


def remaining_shards(folder: Path, manifest: Manifest, damaged: set[str], *, ids: Sequence[str] | None,
           before: _dt.datetime | None, method: str | None) -> tuple[tuple[ShardRecord, ...], int]:
    """The shards that remain after deleting the matching entries, and how many were deleted.

    A shard named in ``damaged`` is dropped whole. Otherwise an entry is deleted when it matches
    every criterion given; a shard that keeps only some entries is written again as a new shard
    (with its provenance), one that keeps none is dropped. With no entry criterion, only the
    damaged shards go.
    """
    chosen = _resolve(folder, manifest, ids, damaged) if ids is not None else None
    entry_rule = chosen is not None or before is not None or method is not None
    kept: list[ShardRecord] = []
    removed = 0
    for record in manifest.shards:
        if record.name in damaged:
            removed += record.count
            continue
        if not entry_rule or (method is not None and record.provenance.method != method):
            kept.append(record)
            continue
        if before is not None:
            added = _added(record)
            if added is None or added >= before:
                kept.append(record)
                continue
        if chosen is None:
            removed += record.count
            continue
        data = read_shard(folder, record, manifest.input_shape)
        drop = np.isin(data.ids, list(chosen))
        if not drop.any():
            kept.append(record)
            continue
        removed += int(drop.sum())
        keep = ~drop
        if keep.any():
            kept.append(write_shard(folder, data.inputs[keep], data.labels[keep], data.ids[keep],
                                    record.provenance))
    return tuple(kept), removed
