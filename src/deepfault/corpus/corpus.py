"""The regression corpus: a folder of append-only shards behind a manifest.

A corpus keeps the inputs earlier runs found failing, each with the label it should get and
where it came from, so that every later version of a model can be replayed on them
(``deepfault gate``). Entries are deduplicated by content (:func:`~deepfault.corpus.ids.entry_ids`);
nothing deletes one but :meth:`RegressionCorpus.prune`.

Guarantees (docs/corpus.md): an add writes whole new shards, then replaces the manifest, both
atomically, so a kill at any point leaves the corpus as it was or with whole new shards; writers
take turns (an advisory lock); a replay streams one shard at a time.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .._io import _remove_stale as remove_stale_temporaries  # atomic_path's own clean-up
from ..errors import DeepFaultError
from .ids import entry_ids
from .lock import no_readers, reader_lock, writer_lock
from .manifest import (
    MANIFEST,
    READERS,
    Manifest,
    foreign_files,
    load_manifest,
    orphan_shards,
    save_manifest,
    temporaries,
)
from .provenance import Provenance
from .shard import SHARD_BYTES, ShardData, check_size, read_shard, read_shard_ids, write_shard

if TYPE_CHECKING:
    import torch

__all__ = ["CORPUS_COMMAND", "RegressionCorpus", "CorpusBatch", "CorpusCheck"]

#: ``deepfault corpus``'s help line and description.
CORPUS_COMMAND = (
    "list, check or prune a regression corpus",
    "A regression corpus is a folder of the failing inputs earlier runs found (regress, xplore, run and gate "
    "add to it with --corpus DIR), each with its expected label and provenance. 'list' shows what it holds, "
    "'check' reads every shard against the manifest, 'prune' deletes entries: the only command that does.")


@dataclass(frozen=True)
class CorpusBatch:
    """One pass of a replay: up to ``batch_size`` entries.

    Attributes:
        inputs: ``(B, *input_shape)`` float32 tensor (on the CPU).
        labels: ``(B,)`` int64 expected labels.
        ids: ``(B,)`` entry ids (content hashes, ``<U64``).
        provenance: one :class:`Provenance` per entry.
        runs: the same as ``(provenance, count)`` runs of consecutive entries (one per shard
            piece), for what is decided once per add (:meth:`where`).
    """

    inputs: torch.Tensor
    labels: np.ndarray
    ids: np.ndarray
    provenance: tuple[Provenance, ...]
    runs: tuple[tuple[Provenance, int], ...] = ()

    def __len__(self) -> int:
        return len(self.labels)

    def where(self, predicate: Callable[[Provenance], bool]) -> np.ndarray:
        """``(B,)`` bool: ``predicate`` of each entry's provenance, asked once per run."""
        runs = self.runs or tuple((p, 1) for p in self.provenance)
        return np.repeat(np.array([bool(predicate(p)) for p, _ in runs], dtype=bool),
                         [n for _, n in runs]).astype(bool)


@dataclass(frozen=True)
class CorpusCheck:
    """What :meth:`RegressionCorpus.check` found.

    Attributes:
        entries: entries the manifest lists.
        shards: shards the manifest lists.
        damaged: ``(shard, what)`` for each listed shard that is missing or does not match.
        orphans: shard files the manifest does not list (a killed add's; ignored on read).
        temporaries: leftover temporary files of killed writes.
    """

    entries: int
    shards: int
    damaged: tuple[tuple[str, str], ...]
    orphans: tuple[str, ...]
    temporaries: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """``True`` when no listed shard is damaged (orphans and temporaries are harmless)."""
        return not self.damaged

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return {"entries": self.entries, "shards": self.shards, "ok": self.ok,
                "damaged": [list(d) for d in self.damaged], "orphans": list(self.orphans),
                "temporaries": list(self.temporaries)}

    def summary(self, folder: str | os.PathLike) -> str:
        """What was found in the corpus ``folder``, one line each (damaged shards, files of killed
        adds and writes), then the verdict and, for damage, what to do.
        """
        lines = [f"  damaged: {name} ({what})" for name, what in self.damaged]
        if self.orphans:
            lines.append(f"  {len(self.orphans)} shard file(s) no manifest lists (a killed add's; ignored, "
                         "'deepfault corpus prune' removes them)")
        if self.temporaries:
            lines.append(f"  {len(self.temporaries)} temporary file(s) of killed writes ('deepfault corpus "
                         "prune' removes them)")
        lines.append("corpus check: ok" if self.ok else
                     f"corpus check: {len(self.damaged)} damaged shard(s); restore the folder from a copy, "
                     f"or drop them with 'deepfault corpus prune {folder} --damaged'")
        return "\n".join(lines)


def _as_inputs(inputs, input_shape: tuple[int, ...]) -> np.ndarray:
    if hasattr(inputs, "detach"):  # a torch tensor
        inputs = inputs.detach().cpu().numpy()
    x = np.asarray(inputs)
    if x.dtype.kind not in "fiub":
        raise DeepFaultError(f"corpus inputs must be numbers; got an array of {x.dtype}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == len(input_shape):  # one input
        x = x[None]
    if tuple(x.shape[1:]) != tuple(input_shape):
        shape = ", ".join(map(str, input_shape))
        raise DeepFaultError(f"corpus inputs must have the shape (N, {shape}) of this "
                             f"corpus; got {tuple(x.shape)}: add inputs of the corpus's data set, or use "
                             "another corpus folder")
    if not np.isfinite(x).all():
        raise DeepFaultError("corpus inputs must be finite; got NaN or infinite values: add only real inputs")
    return x


def _as_labels(labels, count: int, num_classes: int | None) -> np.ndarray:
    if hasattr(labels, "detach"):
        labels = labels.detach().cpu().numpy()
    y = np.atleast_1d(np.asarray(labels))
    if y.dtype.kind not in "iu" or y.ndim != 1 or len(y) != count:
        raise DeepFaultError(f"corpus labels must be {count} integer labels, one per input; got an array of "
                             f"{y.dtype} with shape {tuple(y.shape)}")
    y = y.astype(np.int64)
    top = f" and < {num_classes}" if num_classes is not None else ""
    bad = (y < 0) | (y >= num_classes if num_classes is not None else False)
    if bad.any():
        raise DeepFaultError(f"corpus labels must be >= 0{top}; got {int(y[bad][0])}: "
                             "give the expected labels")
    return y


def _per_shard(count: int, input_bytes: int) -> int:
    return max(1, SHARD_BYTES // max(1, input_bytes))


class RegressionCorpus:
    """A regression corpus on disk (``deepfault.corpus.Corpus`` is the same class).

    Open one with :meth:`open` or make one with :meth:`create`; the object reads the manifest
    again before every add, prune and replay, so several processes may share a folder.

    Examples:
        >>> import numpy as np, tempfile
        >>> from deepfault.corpus import Corpus, Provenance
        >>> folder = tempfile.mkdtemp() + "/corpus"
        >>> corpus = Corpus.create(folder, dataset="digits", input_shape=(2,), num_classes=3)
        >>> corpus.add(np.zeros((2, 2)), np.array([0, 1]), Provenance("regress", "run-1", ("m1.pt", "m2.pt")))
        2
        >>> len(corpus), [len(b) for b in corpus.batches(1)]
        (2, [1, 1])
    """

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self._manifest = manifest

    # --- opening and making -------------------------------------------------------------------

    @classmethod
    def check_destination(cls, path: str | os.PathLike, dataset: str | None = None,
                          option: str = "--corpus") -> None:
        """Before any work: ``path`` can take a run's finds: a corpus (of ``dataset`` where the
        caller names one: a data set's name, or an ``.npz`` file, which names its data set by its
        stem), an empty folder, or a new one; never a file or a folder of other files.

        Raises:
            DeepFaultError: Naming ``option``, when it cannot.
        """
        from ..checks import check_output_dir

        folder = check_output_dir(option, path)  # a writable folder, or a place to make one
        if folder.is_dir() and any(folder.iterdir()):
            named = Path(dataset).stem if dataset is not None and dataset.endswith(".npz") else dataset
            cls.open(folder, dataset=named)

    @classmethod
    def open(cls, path: str | os.PathLike, *, create: bool = False, dataset: str | None = None,
             input_shape: Sequence[int] | None = None, num_classes: int | None = None,
             check_shards: bool = True) -> RegressionCorpus:
        """Open the corpus at ``path``, refusing one made for another data set or input shape.

        Args:
            path: the corpus folder.
            create: make it (with ``dataset``, ``input_shape``, ``num_classes``) where it does not
                exist yet or is an empty folder.
            dataset: the data set of the caller's inputs; given, it must be the corpus's.
            input_shape: one input's shape; given, it must be the corpus's.
            num_classes: the class count; given (and known to the corpus), it must be the corpus's.
            check_shards: refuse a listed shard that is missing or of the wrong size now (off only
                to prune the damaged shards away).

        Raises:
            DeepFaultError: not a corpus (and ``create`` false), a corpus for another data set,
                input shape or class count, a folder that holds other files, a listed shard that
                is missing or of the wrong size, or a newer format.
        """
        folder = Path(path).expanduser()
        if create and not (folder / MANIFEST).exists():
            if dataset is None or input_shape is None:
                raise DeepFaultError(f"corpus {str(folder)!r} does not exist yet; making one needs the "
                                     "data set and the input shape")
            return cls.create(folder, dataset=dataset, input_shape=tuple(input_shape),
                              num_classes=num_classes, exist_ok=True)
        corpus = cls(folder, cls._read(folder, check_shards=check_shards))
        corpus._check_matches(dataset, input_shape, num_classes)
        return corpus

    @classmethod
    def create(cls, path: str | os.PathLike, *, dataset: str, input_shape: Sequence[int],
               num_classes: int | None = None, exist_ok: bool = False) -> RegressionCorpus:
        """Make an empty corpus at ``path`` (a new or empty folder).

        Args:
            path: the folder (created with its parents).
            dataset: the data set its inputs come from.
            input_shape: one input's shape.
            num_classes: the class count (``None``: unknown).
            exist_ok: where a corpus is there already, open it (it must match) instead of refusing.

        Raises:
            DeepFaultError: the folder holds other files, or a corpus (unless ``exist_ok``).
        """
        folder = Path(path).expanduser()
        shape = tuple(int(d) for d in input_shape)
        if not shape or any(d < 1 for d in shape):
            raise DeepFaultError(f"corpus input_shape must be positive sizes; got {tuple(input_shape)}")
        if not isinstance(dataset, str) or not dataset:
            raise DeepFaultError(f"corpus dataset must be a name; got {dataset!r}")
        if folder.exists() and not folder.is_dir():
            raise DeepFaultError(f"corpus {str(folder)!r} is a file, not a folder; "
                                 "give a folder for the corpus")
        folder.mkdir(parents=True, exist_ok=True)
        cls._check_folder(folder)
        with writer_lock(folder):
            if (folder / MANIFEST).exists():
                if not exist_ok:
                    raise DeepFaultError(f"{str(folder)!r} is a corpus already; "
                                         "open it (or give a new folder)")
                corpus = cls(folder, cls._read(folder))
                corpus._check_matches(dataset, shape, num_classes)
                return corpus
            manifest = Manifest(dataset=dataset, input_shape=shape, num_classes=num_classes)
            (folder / READERS).touch()  # every file a corpus ever has is there from the start
            save_manifest(folder, manifest)
        return cls(folder, manifest)

    @staticmethod
    def _check_folder(folder: Path) -> None:
        other = foreign_files(folder)
        if other:
            shown = ", ".join(other[:3]) + (f" and {len(other) - 3} more" if len(other) > 3 else "")
            raise DeepFaultError(f"corpus folder {str(folder)!r} holds files that are not a corpus's "
                                 f"({shown}); give a new or empty folder, or the corpus's own")

    @classmethod
    def _read(cls, folder: Path, *, check_shards: bool = True) -> Manifest:
        if not folder.is_dir():
            raise DeepFaultError(f"corpus {str(folder)!r} does not exist; give a corpus folder, or "
                                 "create one by adding to it (--corpus DIR on regress, xplore, run or gate)")
        cls._check_folder(folder)
        manifest = load_manifest(folder)
        for record in manifest.shards if check_shards else ():
            check_size(folder, record)
        return manifest

    def _check_matches(self, dataset: str | None, input_shape: Sequence[int] | None,
                       num_classes: int | None) -> None:
        m = self._manifest
        shape = None if input_shape is None else tuple(int(d) for d in input_shape)
        theirs = []
        if dataset is not None and dataset != m.dataset:
            theirs.append(f"data set {dataset!r}")
        if shape is not None and shape != m.input_shape:
            theirs.append(f"input shape {shape}")
        if num_classes is not None and m.num_classes is not None and num_classes != m.num_classes:
            theirs.append(f"{num_classes} classes")
        if theirs:
            raise DeepFaultError(
                f"corpus {str(self.path)!r} was made for data set {m.dataset!r}, input shape {m.input_shape}"
                f"{f', {m.num_classes} classes' if m.num_classes is not None else ''}, not for "
                f"{' and '.join(theirs)}; give a corpus folder for this data set (or a new folder)")

    # --- what it holds ------------------------------------------------------------------------

    @property
    def manifest(self) -> Manifest:
        """The manifest as last read."""
        return self._manifest

    @property
    def dataset(self) -> str:
        """The data set the corpus was made for."""
        return self._manifest.dataset

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One input's shape."""
        return self._manifest.input_shape

    @property
    def num_classes(self) -> int | None:
        """The class count, or ``None`` where unknown."""
        return self._manifest.num_classes

    def __len__(self) -> int:
        return self._manifest.entries

    def describe(self) -> str:
        """The corpus in one line: its folder, entries, shards, data set, input shape and classes."""
        classes = f", {self.num_classes} classes" if self.num_classes is not None else ""
        return (f"corpus {self.path}: {len(self)} entries in {len(self.manifest.shards)} shards; data set "
                f"{self.dataset}, input shape {self.input_shape}{classes}")

    def listing(self, *, entries: bool = False) -> tuple[tuple[str, ...], list[tuple]]:
        """``(headers, rows)`` of a table of the shards (who added each, when), or with
        ``entries`` of every entry (its id, label, method, run and time).
        """
        if entries:
            return ("id", "label", "method", "run", "added (UTC)"), [
                (str(i), int(label), p.method, p.run, p.time[:19]) for batch in self.batches(1024)
                for i, label, p in zip(batch.ids, batch.labels, batch.provenance, strict=True)]
        return ("shard", "entries", "method", "run", "models", "added (UTC)"), [
            (s.name, s.count, s.provenance.method, s.provenance.run, ",".join(s.provenance.models) or "-",
             s.provenance.time[:19]) for s in self.manifest.shards]

    def __repr__(self) -> str:
        return (f"RegressionCorpus({str(self.path)!r}, dataset={self.dataset!r}, "
                f"input_shape={self.input_shape}, "
                f"entries={len(self)}, shards={len(self._manifest.shards)})")

    def refresh(self) -> RegressionCorpus:
        """Read the manifest again (another process may have added); returns ``self``."""
        self._manifest = self._read(self.path)
        return self

    def ids(self) -> np.ndarray:
        """Every entry's id, in corpus order (reads only the shards' ids)."""
        self.refresh()
        parts = [read_shard_ids(self.path, r) for r in self._manifest.shards]
        return np.concatenate(parts) if parts else np.empty(0, dtype="<U64")

    # --- adding ------------------------------------------------------------------------------

    def add(self, inputs: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor | Sequence[int],
            provenance: Provenance) -> int:
        """Add the entries that are new; returns how many were new.

        Entries already in the corpus, or repeated in ``inputs``, are skipped (same input bytes and
        same label: :func:`~deepfault.corpus.ids.entry_ids`). The new ones are written as whole new
        shards (split at :data:`~deepfault.corpus.shard.SHARD_BYTES`), then the manifest is replaced;
        a kill in between leaves shards no manifest lists, which are ignored.

        Args:
            inputs: ``(N, *input_shape)`` array or tensor (any real dtype; stored as float32).
            labels: ``(N,)`` integer expected labels.
            provenance: where they came from (its ``time`` is stamped now when empty).

        Returns:
            The number of new entries.

        Raises:
            DeepFaultError: inputs of another shape, non-finite inputs, labels that do not fit, a
                damaged corpus.
        """
        if not isinstance(provenance, Provenance):
            raise DeepFaultError(f"corpus add needs a Provenance; got {type(provenance).__name__}")
        x = _as_inputs(inputs, self.input_shape)
        y = _as_labels(labels, len(x), self.num_classes)
        ids = entry_ids(x, y)
        with writer_lock(self.path):
            self.refresh()  # another writer may have added since this object read the manifest
            known = set(self.ids().tolist())
            _, first = np.unique(ids, return_index=True)
            keep = np.zeros(len(ids), dtype=bool)
            keep[first] = True
            keep &= np.array([i not in known for i in ids.tolist()], dtype=bool)
            new = np.flatnonzero(keep)
            if len(new) == 0:
                return 0
            stamped = provenance.stamped()
            step = _per_shard(len(new), x[0].nbytes)
            records = tuple(write_shard(self.path, x[part], y[part], ids[part], stamped)
                            for part in (new[i:i + step] for i in range(0, len(new), step)))
            manifest = self._manifest.with_shards(self._manifest.shards + records)
            save_manifest(self.path, manifest)
            self._manifest = manifest
        return len(new)

    # --- replaying ---------------------------------------------------------------------------

    def batches(self, batch_size: int) -> Iterator[CorpusBatch]:
        """Stream the corpus in passes of ``batch_size`` entries (the last may be shorter).

        One shard is read at a time, each checked against the manifest's SHA-256, so memory holds
        one shard and one batch whatever the corpus's length. The manifest read when the stream
        starts is the one streamed: entries added meanwhile come in the next replay.

        Raises:
            DeepFaultError: ``batch_size`` below 1, or a damaged shard (the entries before it have
                been yielded).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) or batch_size < 1:
            raise DeepFaultError(f"batch_size must be an integer >= 1; got {batch_size!r}")
        return self._stream(int(batch_size))

    def _stream(self, batch_size: int) -> Iterator[CorpusBatch]:
        with reader_lock(self.path):
            self.refresh()
            pending: list[_Piece] = []  # entries read but not yet yielded: fewer than batch_size
            held = 0
            for record in self._manifest.shards:
                data = read_shard(self.path, record, self.input_shape)
                start = 0
                while start < record.count:
                    stop = min(record.count, start + batch_size - held)
                    pending.append(_Piece.of(data, start, stop))
                    held += stop - start
                    start = stop
                    if held == batch_size:
                        yield _batch(pending)
                        pending, held = [], 0
                pending = [piece.copy() for piece in pending]  # the shard's tail, so that the shard can go
                del data
            if pending:
                yield _batch(pending)

    # --- checking and pruning ------------------------------------------------------------------

    def check(self) -> CorpusCheck:
        """Read every listed shard against the manifest, and list unlisted shards and temporaries."""
        with reader_lock(self.path):
            self._manifest = load_manifest(self.path)
            damaged = []
            for record in self._manifest.shards:
                try:
                    read_shard(self.path, record, self.input_shape)
                except DeepFaultError as err:
                    damaged.append((record.name, str(err).split("(", 1)[1].split(")", 1)[0]))
            return CorpusCheck(entries=len(self), shards=len(self._manifest.shards), damaged=tuple(damaged),
                               orphans=tuple(orphan_shards(self.path, self._manifest)),
                               temporaries=tuple(temporaries(self.path)))

    def prune(self, *, ids: Sequence[str] | None = None, before: str | _dt.datetime | None = None,
              method: str | None = None, damaged: bool = False) -> int:
        """Delete entries: the only way anything leaves a corpus. Returns how many were deleted.

        An entry is deleted when it matches every criterion given (``ids`` and ``before`` and
        ``method``); with ``damaged``, the shards :meth:`check` finds damaged are dropped too.
        Shards that keep some entries are rewritten as new shards, the manifest is replaced, and
        then the files no manifest lists any more (with those of killed adds) are removed where no
        replay is reading.

        Args:
            ids: entry ids (or unique prefixes of at least 8 hex digits) to delete.
            before: delete entries added before this time (ISO 8601 text or a datetime; naive is UTC).
            method: delete entries found by this method.
            damaged: drop the damaged shards (whose entries cannot be read any more).

        Raises:
            DeepFaultError: no criterion given, or an id that matches no entry (or several).
        """
        from .prune import remaining_shards, when

        if ids is None and before is None and method is None and not damaged:
            raise DeepFaultError("corpus prune needs what to delete: ids, before, method or damaged; "
                                 "nothing was deleted")
        cutoff = when(before) if before is not None else None
        with writer_lock(self.path):
            self._manifest = load_manifest(self.path)
            bad = {name for name, _ in self.check().damaged} if damaged else set()
            shards, removed = remaining_shards(self.path, self._manifest, bad, ids=ids, before=cutoff,
                                               method=method)
            if removed:
                manifest = self._manifest.with_shards(shards)
                save_manifest(self.path, manifest)
                self._manifest = manifest
            self._sweep()
        return removed

    def _sweep(self) -> None:
        """Remove unlisted shards and dead writers' temporaries, unless a replay is reading (the
        writers' lock is held: no add is under way).
        """
        with no_readers(self.path) as free:
            if not free:
                return
            for name in orphan_shards(self.path, self._manifest):
                (self.path / name).unlink(missing_ok=True)
            for name in temporaries(self.path):  # ".NAME.EXT.PID.XXXXXXXX.tmp": NAME.EXT's, if PID is gone
                remove_stale_temporaries(self.path / ".".join(name[1:].split(".")[:2]))


class _Piece(NamedTuple):
    """Consecutive entries of one shard (views into it until copied)."""

    inputs: np.ndarray
    labels: np.ndarray
    ids: np.ndarray
    provenance: Provenance

    @classmethod
    def of(cls, data: ShardData, start: int, stop: int) -> _Piece:
        return cls(data.inputs[start:stop], data.labels[start:stop], data.ids[start:stop], data.provenance)

    def copy(self) -> _Piece:
        return _Piece(self.inputs.copy(), self.labels.copy(), self.ids.copy(), self.provenance)


def _batch(pieces: list[_Piece]) -> CorpusBatch:
    import torch

    inputs = np.concatenate([p.inputs for p in pieces])
    labels = np.concatenate([p.labels for p in pieces])
    ids = np.concatenate([p.ids for p in pieces])
    runs = tuple((p.provenance, len(p.labels)) for p in pieces)
    provenance = sum(((prov,) * n for prov, n in runs), ())  # repeated in C, not entry by entry
    return CorpusBatch(inputs=torch.from_numpy(inputs), labels=labels, ids=ids, provenance=provenance,
                       runs=runs)
