"""One DeepXplore run as its result file records it: the result, each model's record (the
file it came from) and the surprise state each found input was scored with.

:func:`surprise_states_for` fits (or reads) one surprise state per model, :func:`with_surprise`
scores the run's finds under them, and :func:`recorded_run` gives the :class:`RecordedRun` that
``deepfault xplore`` prints and writes; a Python caller can use the same three steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..core.entry import use_threads
from ..core.outcome import Outcome
from ..coverage.surprise_cache import GENERATED_KINDS, CachedSurprise, SurpriseScorer, surprise_states
from ..errors import DeepFaultError
from ..experiment.results import model_record
from .results import XploreResult, add_surprise

__all__ = ["RecordedRun", "surprise_states_for", "with_surprise", "recorded_run"]


@dataclass(frozen=True)
class RecordedRun(Outcome):
    """A run with what its result document holds beside it, one per model: ``records`` (the
    file each model came from, :func:`~deepfault.experiment.results.model_record`) and
    ``extras`` (the surprise state each was scored with).
    """

    result: XploreResult
    records: tuple[Mapping, ...] = ()
    extras: tuple[Mapping, ...] = ()

    def summary(self) -> str:
        """The run's summary (:meth:`XploreResult.summary`)."""
        return self.result.summary()

    def payload(self) -> dict:
        """The result document's body with each model's record and state."""
        return self.result.payload(self.records, self.extras)

    def outputs(self):
        """The run's files (its inputs and image grid)."""
        return self.result.outputs()


def surprise_states_for(models: Sequence, train_inputs, files: Sequence[str | None] = (), *, threads: int,
                        progress: bool = False) -> tuple[list[CachedSurprise] | None, str | None]:
    """One surprise state per model (``files``: one per model, ``None`` to fit that one on
    ``train_inputs`` and cache it; none at all: fit every one), on ``threads`` threads:
    ``(states, None)``, or ``(None, why)`` when one cannot be fitted.

    Raises:
        DeepFaultError: ``files`` does not name one per model.
    """
    if len(files) not in (0, len(models)):
        raise DeepFaultError(f"--surprise names {len(files)} files for {len(models)} models; give one per "
                             "--model ('-' to fit one)")
    with use_threads(threads):
        return surprise_states(models, train_inputs, files, progress=progress)


def with_surprise(result: XploreResult, models: Sequence, states: Sequence[CachedSurprise], *,
                  threads: int) -> XploreResult:
    """``result`` with every found input's surprise adequacy under each model's state
    (:func:`~.results.add_surprise`), after the search: nothing it found changes.
    """
    with use_threads(threads):
        return add_surprise(result, [SurpriseScorer(p.module, s.surprise, kinds=GENERATED_KINDS)
                                     for p, s in zip(models, states, strict=True)])


def recorded_run(result: XploreResult, models: Sequence, files: Sequence, states: Sequence[CachedSurprise]
                 | None, *, notes: Sequence[str] = (), why: str | None = None) -> RecordedRun:
    """``result`` as its result file records it: each of ``models`` (prepared from ``files``)
    with its record and its surprise state (``states``; ``None`` when none was fitted, ``why``
    says why), and the lines after the summary: ``notes``, then the state each model used.
    """
    lines = [*notes, *(f"{p.name}: {s.describe()}" for p, s in zip(models, states or (), strict=False))]
    lines += [f"no surprise adequacy: {why}"] * (why is not None)
    result = replace(result, notes=replace(result.notes, lines=tuple(lines)))
    records = tuple(model_record(p, entry, layout=p.layout, meta={k: v for k, v in p.model_file.meta.items()
                                                                  if k != "recipe"} if p.model_file else {})
                    for entry, p in zip(files, models, strict=True))
    return RecordedRun(result, records, tuple({"surprise_state": s.to_dict()} for s in states or ()))
