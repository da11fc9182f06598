"""Campaign checkpoints in the results store, and resuming from them.

A campaign ``cell`` of experiment ``experiment`` (method ``drfuzz``) is kept as cells of a
:class:`~deepfault.experiment.store.ResultStore`, each written in one transaction:

- ``{cell}/corpus/{k}``: the queue entries added since the previous checkpoint (their
  fixed fields, about 30 bytes each) and the new fidelity reference rows; append-only.
- ``{cell}/pool/{p}/{0,1}``: page ``p`` of the queue's image pool (1,024 images, fewer when
  they take more than 1 MiB; the checkpoint records how many), in the pool's dtype, written
  when one of its images changed, alternately into one of two copies (the checkpoint says
  which is current, so a kill between the two writes leaves the previous one intact).
  The pool holds at most the queue's capacity (``queue_memory`` over the bytes of one image;
  older, unlikely ones are evicted: :mod:`.corpus`), so the store does not grow with the queue.
- ``{cell}/faults/{k}``: the faults found since the previous checkpoint (and the regression
  faults' inputs and probabilities); append-only.
- ``{cell}/checkpoint``: everything else, overwritten each time: the state of each of the
  campaign's parts (:mod:`.parts`: counters, both random generators, the rule statistics,
  the clock and timeline, the queue's counters and bans, the fault counts and unique
  failures, the diversity table or coverage state), its JSON under ``parts/{name}`` and its
  arrays named ``{name}.{key}``, and the list of chunks that belong to it. (Version 2 kept
  the same state as one flat record; it is read too: :func:`_parts_of_version_2`.)
- ``{cell}/result``: the final result, once the campaign has ended.

Chunks are written before the checkpoint that lists them, so a process killed at any
moment (``kill -9`` included) leaves a consistent last checkpoint; a chunk written after
it is ignored and rewritten. The seeds themselves are not stored: they are recomputed,
deterministically, from the models and the test inputs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ...errors import DeepFaultError
from .config import CampaignConfig
from .corpus import PAGE_SLOTS
from .metrics import FAULT_KINDS, FaultTable
from .result import CampaignResult, result_from_dict

if TYPE_CHECKING:
    from .parts import CampaignParts

__all__ = ["DRFUZZ_METHOD", "CampaignStore", "Checkpointed", "checkpoint_progress", "load_result",
           "list_campaigns"]

#: The store's method name for every fuzzing cell.
DRFUZZ_METHOD = "drfuzz"
#: 3: the state by part; 2 (still read): one flat record.
_VERSION = 3
_READ_VERSIONS = (2, 3)


class Checkpointed(Protocol):
    """What a checkpoint reads and restores of a campaign (the runner, :class:`~.loop.Campaign`, is one)."""

    @property
    def config(self) -> CampaignConfig: ...

    @property
    def between_steps(self) -> bool: ...

    @property
    def parts(self) -> CampaignParts: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def _cid(cell: str, part: str, k: int | None = None) -> str:
    return f"{cell}/{part}" if k is None else f"{cell}/{part}/{k:06d}"


class CampaignStore:
    """Reads and writes one campaign's cells (module docstring).

    Args:
        store: An open :class:`~deepfault.experiment.store.ResultStore`.
        experiment: The experiment key.
        cell: The campaign's id.
        config: The campaign's configuration (a checkpoint of another one is refused).
    """

    def __init__(self, store, experiment: str, cell: str, config: CampaignConfig):
        self.store = store
        self.experiment = experiment
        self.cell = cell
        self.config = config
        self.corpus_chunks: list[list[int]] = []
        self.fault_chunks: list[list[int]] = []
        self._corpus_done: int | None = None
        self._refs_done: int | None = None
        self._faults_done = 0  # fault chunks (parts.Faults.chunk) already stored
        self._rf_done = 0
        self._checkpoints = 0
        self.pages: dict[int, int] = {}  # pool page -> which of its two stored copies is current

    @classmethod
    @contextlib.contextmanager
    def open(cls, store, experiment: str, cell: str, config: CampaignConfig) -> Iterator[CampaignStore]:
        """A :class:`CampaignStore` on ``store`` (a store, or a path opened and closed here)."""
        from ...experiment.store import ResultStore

        if isinstance(store, (str, os.PathLike)):
            with ResultStore(store) as opened:
                cls._begin(opened, experiment, cell, config)
                yield cls(opened, experiment, cell, config)
        else:
            cls._begin(store, experiment, cell, config)
            yield cls(store, experiment, cell, config)

    @staticmethod
    def _begin(store, experiment: str, cell: str, config: CampaignConfig) -> None:
        from ...provenance import provenance

        store.begin(experiment, name=cell, config=config.to_dict(), provenance=provenance(),
                    method=DRFUZZ_METHOD)

    # --- writing ----------------------------------------------------------------------------

    def _put(self, cell_id: str, data: dict, arrays: dict | None = None) -> None:
        self.store.put(self.experiment, DRFUZZ_METHOD, cell_id, data, arrays, replace=True)

    def save(self, c: Checkpointed) -> None:
        """Write a checkpoint of ``c``: new queue entries and faults as chunks, changed pool
        pages, then the state (:meth:`~.loop.Campaign.state_dict`) that lists them.
        """
        if not c.between_steps:
            return  # interrupted in the middle of a step: the previous checkpoint stands
        queue, faults = c.parts.queue, c.parts.faults
        state = c.state_dict()
        sizes = state["data"]["parts"]["queue"]
        if self._corpus_done is None or self._refs_done is None:  # the seeds are recomputed, not stored
            self._corpus_done, self._refs_done = sizes["seed_entries"], sizes["seed_refs"]
        start, stop = self._corpus_done, sizes["size"]
        rstart, rstop = self._refs_done, sizes["refs_size"]
        if stop > start or rstop > rstart:
            bounds = [start, stop, rstart, rstop]
            self._put(_cid(self.cell, "corpus", len(self.corpus_chunks)), {"bounds": bounds},
                      queue.chunk(start, rstart))
            self.corpus_chunks.append(bounds)
            self._corpus_done, self._refs_done = stop, rstop
        table, rf = faults.chunk(self._faults_done, self._rf_done)
        if table is not None:
            arrays = {f"fault.{k}": v for k, v in table.to_arrays().items()}
            if rf is not None:
                arrays.update(zip(("rf_inputs", "rf_p1", "rf_p2"), rf, strict=True))
            self._put(_cid(self.cell, "faults", len(self.fault_chunks)), {"rf": rf is not None}, arrays)
            self.fault_chunks.append([1, int(rf is not None)])
            self._faults_done += 1
            self._rf_done += int(rf is not None)
        for index, images in queue.corpus.iter_dirty_pages():  # one page in memory at a time
            # two copies per page, alternating: the one the last checkpoint lists stays intact
            # until the next checkpoint, which lists the other, is written
            copy = 1 - self.pages.get(index, 1)
            self._put(_cid(self.cell, "pool", index) + f"/{copy}", {"page": index}, {"images": images})
            self.pages[index] = copy
        self._checkpoints += 1
        data = {"version": _VERSION, "config": c.config.to_dict(), **state["data"],
                "corpus_chunks": self.corpus_chunks, "fault_chunks": self.fault_chunks,
                "pages": {str(k): v for k, v in sorted(self.pages.items())}, "checkpoints": self._checkpoints}
        self._put(_cid(self.cell, "checkpoint"), data, state["arrays"])

    def save_result(self, result: CampaignResult) -> None:
        """Write the final result: its JSON and the initial faults (generated ones are in the chunks)."""
        initial = result.faults.select(result.faults.initial)
        n_initial = int(np.count_nonzero(initial.kind == FAULT_KINDS.index("rf")))
        arrays = {f"initial.{k}": v for k, v in initial.to_arrays().items()}
        arrays["initial.rf_inputs"] = result.rf_inputs[:n_initial]
        arrays["initial.rf_p1"] = result.rf_p1[:n_initial]
        arrays["initial.rf_p2"] = result.rf_p2[:n_initial]
        arrays.update({f"examples.{key}": value for key, value in result.examples.items()})
        self._put(_cid(self.cell, "result"), result.to_dict(), arrays)

    # --- reading ----------------------------------------------------------------------------

    def _get(self, cell_id: str, what: str):
        rec = self.store.get(self.experiment, DRFUZZ_METHOD, cell_id)
        if rec is None:
            raise DeepFaultError(
                f"the store lacks {what} ({cell_id!r}) of campaign {self.cell!r}; it is corrupt: "
                "delete the campaign's cells or use a new store"
            )
        return rec

    def restore(self, c: Checkpointed) -> bool:
        """Load the last checkpoint into ``c`` (set up, not yet run); ``False`` when there is none."""
        rec = self.store.get(self.experiment, DRFUZZ_METHOD, _cid(self.cell, "checkpoint"))
        if rec is None:
            return False
        self.store.require(rec, "config", "corpus_chunks", "fault_chunks", "checkpoints", "pages")
        data, arrays = rec.data, rec.arrays
        if data.get("version") not in _READ_VERSIONS:
            raise DeepFaultError(
                f"campaign {self.cell!r} in the store was checkpointed by another version of deepfault; "
                "give another --store or campaign id to start afresh"
            )
        if data.get("config") != c.config.to_dict():
            raise DeepFaultError(
                f"campaign {self.cell!r} in the store was run with another configuration; give another "
                "--store or campaign id to start afresh"
            )
        if data["version"] == 2:
            self.store.require(rec, "corpus_size", "refs_size", "counters", "numpy_rng", "timeline",
                               "timings", "rule_rf")
            parts, part_arrays = _parts_of_version_2(data, arrays)
        else:
            self.store.require(rec, "parts")
            parts, part_arrays = {name: dict(state) for name, state in data["parts"].items()}, arrays
        queue, faults = c.parts.queue, c.parts.faults
        for k, (start, _, rstart, _) in enumerate(data["corpus_chunks"]):
            chunk = self._get(_cid(self.cell, "corpus", k), "a queue chunk").arrays
            if (start, rstart) != queue.sizes():
                raise DeepFaultError(
                    f"queue chunk {k} of campaign {self.cell!r} does not follow the previous one"
                )
            queue.add_chunk(chunk)
        for k in range(len(data["fault_chunks"])):
            chunk = self._get(_cid(self.cell, "faults", k), "a fault chunk").arrays
            rf = tuple(chunk[n] for n in ("rf_inputs", "rf_p1", "rf_p2")) if "rf_inputs" in chunk else None
            faults.add_chunk(_fault_table(chunk), rf)
        # the run resumed from is counted by its checkpoints
        parts["counters"] = {**parts.get("counters", {}), "resumed": int(data["checkpoints"])}
        c.load_state_dict({"data": {"parts": parts}, "arrays": part_arrays})
        self.pages = {int(k): int(v) for k, v in data["pages"].items()}
        for index, copy in self.pages.items():
            page = self._get(_cid(self.cell, "pool", index) + f"/{copy}", "a queue page")
            queue.corpus.load_page(index, page.arrays["images"])
        self.corpus_chunks = [list(b) for b in data["corpus_chunks"]]
        self.fault_chunks = [list(b) for b in data["fault_chunks"]]
        self._corpus_done, self._refs_done = queue.sizes()
        # one part per fault chunk was added above, with regression-fault data where it has some
        self._faults_done = len(self.fault_chunks)
        self._rf_done = sum(int(has_rf) for _, has_rf in self.fault_chunks)
        self._checkpoints = int(data["checkpoints"])
        return True

    def load_result(self, *, inputs: bool = True) -> CampaignResult | None:
        """The finished campaign's result, or ``None`` when it has not finished."""
        return load_result(self.store, self.experiment, self.cell, inputs=inputs)


def load_result(store, experiment: str, cell: str, *, inputs: bool = True) -> CampaignResult | None:
    """A finished campaign's :class:`~.result.CampaignResult` from ``store`` (``None`` if absent).

    Args:
        store: An open :class:`~deepfault.experiment.store.ResultStore`.
        experiment: The store's experiment key.
        cell: The campaign's id in the store.
        inputs: Load the regression faults' inputs and probabilities too (else empty arrays).
    """
    rec = store.get(experiment, DRFUZZ_METHOD, _cid(cell, "result"))
    if rec is None:
        return None
    data, arrays = rec.data, rec.arrays
    ckpt = store.get(experiment, DRFUZZ_METHOD, _cid(cell, "checkpoint"))
    chunks = [] if ckpt is None else store.require(ckpt, "fault_chunks").data["fault_chunks"]
    tables = [FaultTable.from_arrays({k[8:]: v for k, v in arrays.items()
                                      if k.startswith("initial.") and not k.startswith("initial.rf_")})]
    rf_inputs, rf_p1, rf_p2 = ([arrays[f"initial.{k}"]] for k in ("rf_inputs", "rf_p1", "rf_p2"))
    for k in range(len(chunks)):
        c = store.get(experiment, DRFUZZ_METHOD, _cid(cell, "faults", k))
        if c is None:
            raise DeepFaultError(f"the store lacks fault chunk {k} of campaign {cell!r}; it is corrupt")
        tables.append(_fault_table(c.arrays))
        if inputs and "rf_inputs" in c.arrays:
            rf_inputs.append(c.arrays["rf_inputs"])
            rf_p1.append(c.arrays["rf_p1"])
            rf_p2.append(c.arrays["rf_p2"])
    faults = FaultTable.concat(tables)
    if not inputs:
        rf_inputs, rf_p1, rf_p2 = rf_inputs[:1], rf_p1[:1], rf_p2[:1]
    examples = {k[9:]: v for k, v in arrays.items() if k.startswith("examples.")}
    return result_from_dict(data, faults, *(np.concatenate(a) for a in (rf_inputs, rf_p1, rf_p2)),
                            examples=examples)


def checkpoint_progress(data: dict[str, Any]) -> tuple[int, float]:
    """``(iterations, fuzzing seconds)`` a checkpoint's JSON records (either version)."""
    if "parts" in data:
        parts = data["parts"]
        return int(parts["counters"].get("iterations", 0)), float(parts["timing"].get("elapsed", 0.0))
    counters = data.get("counters", {})
    return int(counters.get("iterations", 0)), float(counters.get("elapsed", 0.0))


def _parts_of_version_2(data: dict[str, Any], arrays: dict[str, np.ndarray]
                        ) -> tuple[dict[str, dict[str, Any]], dict[str, np.ndarray]]:
    """A version-2 checkpoint (one flat record) as the parts' states of version 3."""
    counters = data["counters"]
    parts = {
        "counters": {k: v for k, v in counters.items() if k not in ("elapsed", "setup_seconds", "rf", "gf")},
        "random": {"numpy_rng": data["numpy_rng"]},
        "timing": {"elapsed": counters["elapsed"], "setup_seconds": counters.get("setup_seconds", 0.0),
                   "timings": data["timings"], "timeline": data["timeline"]},
        "queue": {"size": data["corpus_size"], "refs_size": data["refs_size"],
                  "page_slots": data.get("page_slots", PAGE_SLOTS)},
        "faults": {"rf": counters["rf"], "gf": counters["gf"]},
    }
    renamed = {"torch_rng": "random.torch_rng", "chooser.": "rules.chooser.", "failures.": "faults.failures."}
    out = {"rules.rf": np.asarray(data["rule_rf"], dtype=np.int64)}
    for key, value in arrays.items():
        new = next((to + key[len(old):] for old, to in renamed.items() if key.startswith(old)), key)
        out[new] = value
    return parts, out


def _fault_table(arrays: dict[str, np.ndarray]) -> FaultTable:
    return FaultTable.from_arrays({n[6:]: v for n, v in arrays.items() if n.startswith("fault.")})


def list_campaigns(store, experiment: str) -> list[str]:
    """The ids of the campaigns of ``experiment`` that have finished."""
    suffix = "/result"
    return sorted(r.cell_id[: -len(suffix)] for r in store.records(experiment, DRFUZZ_METHOD, arrays=False)
                  if r.cell_id.endswith(suffix))
