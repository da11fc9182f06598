"""What a run on an existing store will do with the campaign it names: start it, resume it, or
print its finished result, said before any work (:class:`StoreState`).

A campaign is found in the store by its experiment key (the configuration, both models'
weights and the data: :func:`deepfault.fuzz.regress.experiment_key`) and its id (``--campaign``,
default ``STRATEGY-seedS``). With both the same, a run resumes from the last checkpoint, or,
when the campaign had finished, returns its stored result without fuzzing. Any other option
(a longer ``--budget`` included), other weights or other data make another experiment: a new
campaign from the start, beside the earlier one, which is kept. ``--fresh``
(``regress(..., fresh=True)``) deletes the campaign of this key first and starts it again.

Examples:
    >>> StoreState("s.sqlite", "drfuzz-seed0", "new").line()
    "store s.sqlite: new campaign 'drfuzz-seed0' (none of that id in the store)"
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from ...errors import DeepFaultError
from .checkpoint import DRFUZZ_METHOD, checkpoint_progress
from .config import CampaignConfig

__all__ = ["STORE_STATES", "StoreState", "store_state"]

#: ``new`` (start), ``resume`` (from the last checkpoint), ``finished`` (print the stored result).
STORE_STATES = ("new", "resume", "finished")


@dataclass(frozen=True)
class StoreState:
    """What the run does with its campaign in the store (module docstring).

    Attributes:
        store: The store's path.
        cell: The campaign's id.
        status: One of :data:`STORE_STATES` (after ``fresh``: always ``new``).
        iterations, seconds: Iterations and fuzzing seconds done by the run found (0 for none).
        others: The same campaign id under other keys in the store, each described by what
            differs (``budget 60s there, 120s here``, or ``other models or data``).
        dropped: ``fresh`` deleted a run of this key: ``resume`` or ``finished``, what it was.
    """

    store: str
    cell: str
    status: str
    iterations: int = 0
    seconds: float = 0.0
    others: tuple[str, ...] = ()
    dropped: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "others": list(self.others), "line": self.line()}

    def line(self) -> str:
        """One line for the user: what happens, and how to choose otherwise."""
        head = f"store {self.store}: "
        done = f"{self.iterations:,} iterations, {self.seconds:.1f} s of fuzzing"
        if self.status == "finished":
            return (f"{head}campaign {self.cell!r} finished before with these options, models and data "
                    f"({done}): printing its stored result without fuzzing; add --fresh to run it again from "
                    "the start")
        if self.status == "resume":
            return (f"{head}resuming campaign {self.cell!r} from its last checkpoint ({done} so far); add "
                    "--fresh to start it again from the start instead")
        if self.dropped is not None:
            what = "finished run" if self.dropped == "finished" else "checkpoint"
            line = (f"{head}--fresh: deleting the earlier {what} of campaign {self.cell!r} ({done}); "
                    "starting it anew")
        else:
            line = f"{head}new campaign {self.cell!r}"
            if not self.others:
                line += " (none of that id in the store)"
        if self.others:
            line += (f"; the store also holds {self.cell!r} run with {'; with '.join(self.others)}: kept, "
                     "not resumed (rerun with those options to resume it, or give --campaign ID to name this "
                     "one)")
        return line


def _differences(theirs: dict, ours: dict, *, top: int = 3) -> str:
    keys = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)]
    if not keys:
        return "other models or data"
    shown = [f"{k} {theirs.get(k)} there, {ours.get(k)} here" for k in keys[:top]]
    more = f" and {len(keys) - top} more options" if len(keys) > top else ""
    return ", ".join(shown) + more


def _of_the_pair(opened, experiment: str, models: dict | None) -> bool:
    """Whether the stored ``experiment`` ran on the models and data of ``models`` (``None``: any)."""
    if models is None:
        return True
    stored = opened.get(experiment, DRFUZZ_METHOD, "models")
    return stored is not None and _same_pair(stored.data, models)


def _same_pair(stored: dict, ours: dict) -> bool:
    """Whether a stored campaign's models record (``deepfault regress``'s ``models`` cell) names
    the same two models and data as ours: their weights and data where both record them, else
    the models' names.
    """
    if "pair" in stored and "pair" in ours:
        return stored["pair"] == ours["pair"]
    return (stored.get("m1"), stored.get("m2")) == (ours.get("m1"), ours.get("m2"))


def _status(opened, experiment: str, cell: str, workers: int) -> tuple[str, int, float]:
    """``(status, iterations, seconds)`` of campaign ``cell`` in the open store; a many-worker
    campaign's from its workers' cells (:mod:`.workers`): finished when every worker is,
    resumed when any left a checkpoint, its iterations summed and its seconds the longest worker's.
    """
    cells = [cell] if workers == 1 else [f"{cell}/w{i}" for i in range(workers)]
    states = []
    for one in cells:
        result = opened.get(experiment, DRFUZZ_METHOD, f"{one}/result")
        checkpoint = opened.get(experiment, DRFUZZ_METHOD, f"{one}/checkpoint")
        if result is not None:
            data = result.data
            states.append(("finished", int(data.get("iterations", 0)), float(data.get("seconds", 0.0))))
        elif checkpoint is not None:
            states.append(("resume", *checkpoint_progress(checkpoint.data)))
        else:
            states.append(("new", 0, 0.0))
    kinds = {s[0] for s in states}
    status = "finished" if kinds == {"finished"} else "new" if kinds == {"new"} else "resume"
    return status, sum(s[1] for s in states), max(s[2] for s in states)


def store_state(store, experiment: str, cell: str, config: CampaignConfig, *,
                fresh: bool = False, models: dict | None = None) -> StoreState:
    """What a run of campaign ``cell`` of ``experiment`` will do on ``store`` (a path); reads the
    store, changes nothing (``fresh``: the caller deletes the campaign's cells, see
    :meth:`~deepfault.experiment.store.ResultStore.delete_cells`).

    Args:
        store: The store's path (a missing file: a new store, so a new campaign).
        experiment: The experiment key of this run.
        cell: The campaign's id.
        config: This run's configuration (compared with the other keys' of the same id).
        fresh: The run starts the campaign again even if the store holds it.
        models: This run's models record (``{"m1": name, "m2": name, "pair": identity}``): only
            campaigns of the same models and data are named as ``others`` (a campaign of other
            models in a shared store is no concern of this run); ``None``: every one of the id.
    """
    from ...experiment.store import ResultStore

    path = Path(store)
    if not path.is_file() or path.stat().st_size == 0:
        return StoreState(str(store), cell, "new")
    try:
        opened = ResultStore(path, readonly=True)
    except DeepFaultError:  # an older format: opened for writing, it is migrated (as the run would)
        opened = ResultStore(path)
    with opened:
        status, iterations, seconds = _status(opened, experiment, cell, config.workers)
        ours = config.to_dict()
        others = tuple(_differences(e["config"], ours) for e in opened.experiments(DRFUZZ_METHOD)
                       if e["name"] == cell and e["experiment"] != experiment
                       and opened.get(e["experiment"], DRFUZZ_METHOD, f"{cell}/checkpoint") is not None
                       and _of_the_pair(opened, e["experiment"], models))
    if fresh and status != "new":
        return StoreState(str(store), cell, "new", iterations, seconds, others, dropped=status)
    return StoreState(str(store), cell, status, iterations, seconds, others)
