"""The manifest: the one file that says what a corpus holds, replaced atomically.

``corpus.json`` names the data set, the input shape, the class count, the format version and
every shard with its count, size and SHA-256. A shard is part of the corpus exactly when the
manifest lists it: a shard written by an add that was killed before it replaced the manifest
is ignored (``deepfault corpus check`` reports it, ``deepfault corpus prune`` removes it).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .._io import write_json
from ..errors import DeepFaultError
from .shard import SHARD_NAME, ShardRecord

__all__ = ["Manifest", "MANIFEST", "FORMAT_VERSION", "LOCK", "READERS", "load_manifest", "save_manifest",
           "foreign_files", "orphan_shards", "temporaries"]

#: The manifest's file name in the corpus folder.
MANIFEST = "corpus.json"
#: The writers' lock file (add, prune) and the readers' (a replay), both empty.
LOCK, READERS = ".lock", ".readers"
#: The manifest's format version; a newer one is refused with the fix (upgrade deepfault).
FORMAT_VERSION = 1
#: An atomic writer's temporary (``_io.atomic_path``): a killed write's leftover, ours.
_TEMPORARY = re.compile(r"\.(corpus\.json|shard-[0-9a-f]{20}\.npz)\.\d+\..+\.tmp")


@dataclass(frozen=True)
class Manifest:
    """What a corpus holds.

    Attributes:
        dataset: the data set the inputs belong to (a name such as ``mnist``, or an .npz file's name).
        input_shape: one input's shape, e.g. ``(1, 28, 28)``.
        num_classes: the class count, or ``None`` where unknown (labels are then only checked >= 0).
        shards: the shards, in the order they were added.
        version: the format version.
    """

    dataset: str
    input_shape: tuple[int, ...]
    num_classes: int | None = None
    shards: tuple[ShardRecord, ...] = field(default=())
    version: int = FORMAT_VERSION

    @property
    def entries(self) -> int:
        """The number of entries (the shards' counts summed)."""
        return sum(s.count for s in self.shards)

    def with_shards(self, shards: tuple[ShardRecord, ...]) -> Manifest:
        """This manifest listing ``shards`` instead."""
        return replace(self, shards=tuple(shards))

    def to_dict(self) -> dict:
        """The JSON form written to ``corpus.json``."""
        return {"deepfault_corpus": self.version, "dataset": self.dataset,
                "input_shape": list(self.input_shape), "num_classes": self.num_classes,
                "entries": self.entries, "shards": [s.to_dict() for s in self.shards]}

    @classmethod
    def from_dict(cls, data: dict) -> Manifest:
        """The inverse of :meth:`to_dict` (raises ``ValueError``/``KeyError``/``TypeError`` on a bad one)."""
        num_classes = data.get("num_classes")
        return cls(dataset=str(data["dataset"]), input_shape=tuple(int(d) for d in data["input_shape"]),
                   num_classes=None if num_classes is None else int(num_classes),
                   shards=tuple(ShardRecord.from_dict(s) for s in data["shards"]),
                   version=int(data["deepfault_corpus"]))


def load_manifest(folder: Path) -> Manifest:
    """Read ``folder``'s manifest, refusing a missing, unreadable or newer one in one line."""
    path = folder / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DeepFaultError(f"{str(folder)!r} is not a corpus (no {MANIFEST}); give a corpus folder, or "
                             "create one by adding to it (--corpus DIR on regress, xplore, run or gate)"
                             ) from None
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise DeepFaultError(f"corpus {str(folder)!r}: {MANIFEST} is damaged ({err}); restore the folder "
                             "from a copy") from None
    if isinstance(data, dict) and isinstance(data.get("deepfault_corpus"), int) \
            and data["deepfault_corpus"] > FORMAT_VERSION:
        raise DeepFaultError(f"corpus {str(folder)!r} has format {data['deepfault_corpus']}, newer than this "
                             f"deepfault's {FORMAT_VERSION}; upgrade deepfault")
    try:
        if not isinstance(data, dict):
            raise TypeError("not an object")
        return Manifest.from_dict(data)
    except (KeyError, ValueError, TypeError) as err:
        raise DeepFaultError(f"corpus {str(folder)!r}: {MANIFEST} is damaged ({type(err).__name__}: {err}); "
                             "restore the folder from a copy") from None


def save_manifest(folder: Path, manifest: Manifest) -> None:
    """Replace ``folder``'s manifest atomically (readers see the old one or the new one)."""
    write_json(folder / MANIFEST, manifest.to_dict())


def _ours(name: str) -> bool:
    return name in (MANIFEST, LOCK, READERS) or bool(SHARD_NAME.fullmatch(name) or _TEMPORARY.fullmatch(name))


def foreign_files(folder: Path) -> list[str]:
    """The entries of ``folder`` that no corpus writes (sorted), folders included."""
    with os.scandir(folder) as it:
        return sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in it
                      if e.is_dir(follow_symlinks=False) or not _ours(e.name))


def orphan_shards(folder: Path, manifest: Manifest) -> list[str]:
    """Shard files in ``folder`` that ``manifest`` does not list (a killed add's, or a pruned one's)."""
    listed = {s.name for s in manifest.shards}
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if SHARD_NAME.fullmatch(e.name) and e.name not in listed)


def temporaries(folder: Path) -> list[str]:
    """Atomic writers' leftover temporaries in ``folder``."""
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if _TEMPORARY.fullmatch(e.name))
