"""Stage 2, corpus replay: every entry of the regression corpus through both models.

An entry is an input that some model once got wrong, with its expected label. Replayed
through M2 it is *failing* (M2 still gets it wrong) or *fixed*; a failing entry that M1 gets
right is a *regression* (new since the champion). The corpus streams in passes of the batch
size (:meth:`deepfault.corpus.Corpus.batches`), so memory is flat in its size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.batches import iterate_batches
from ..models.prepare import PreparedModel

__all__ = ["ReplayResult", "replay_corpus", "MAX_LISTED"]

#: Failing entries listed one by one (in the result and the JUnit file); the counts cover all.
MAX_LISTED = 1000


@dataclass(frozen=True)
class ReplayResult:
    """The corpus replayed.

    Attributes:
        entries: Entries replayed.
        failing: Entries M2 gets wrong (earlier failures it still has).
        fixed: Entries M2 gets right.
        regressions: Entries M1 gets right and M2 wrong (new since the champion).
        failing_entries: The first :data:`MAX_LISTED` failing entries (id, label, both
            predictions, whether a regression, the method that found it).
        complete: ``False`` when the replay was interrupted (the counts cover ``entries``).
    """

    entries: int
    failing: int
    fixed: int
    regressions: int
    failing_entries: tuple[dict, ...] = ()
    complete: bool = True

    def to_dict(self) -> dict:
        """The stage's record in the result document."""
        return {**self.__dict__, "failing_entries": list(self.failing_entries)}


def _method(provenance, k: int) -> str | None:
    item = provenance[k] if isinstance(provenance, (list, tuple)) else provenance
    return getattr(item, "method", None) if item is not None else None


def replay_corpus(
    corpus,
    p1: PreparedModel,
    p2: PreparedModel,
    *,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay every entry of ``corpus`` through ``p1`` and ``p2``.

    Args:
        corpus: An open :class:`deepfault.corpus.Corpus`.
        p1: The prepared champion.
        p2: The prepared challenger.
        batch_size: Entries per pass.
        on_batch: Called with the entries done after each batch.

    Returns:
        The :class:`ReplayResult`; a ``KeyboardInterrupt`` propagates.
    """
    entries = failing = regressions = 0
    listed: list[dict] = []
    for batch in corpus.batches(batch_size):
        x = np.asarray(batch.inputs, dtype=np.float32)
        y = np.asarray(batch.labels, dtype=np.int64)
        preds = []
        for p in (p1, p2):
            outs = [
                b.outputs.argmax(1).cpu().numpy()
                for b in iterate_batches(p.module, x, neurons=False, batch_size=max(1, len(x)))
            ]
            preds.append(np.concatenate(outs) if outs else np.zeros(0, np.int64))
        ok1, ok2 = preds[0] == y, preds[1] == y
        entries += len(y)
        failing += int((~ok2).sum())
        regressions += int((ok1 & ~ok2).sum())
        for k in np.flatnonzero(~ok2):
            if len(listed) >= MAX_LISTED:
                break
            listed.append(
                {
                    "id": str(batch.ids[k]),
                    "label": int(y[k]),
                    "m1": int(preds[0][k]),
                    "m2": int(preds[1][k]),
                    "regression": bool(ok1[k]),
                    "method": _method(batch.provenance, int(k)),
                }
            )
        if on_batch is not None:
            on_batch(entries)
    return ReplayResult(
        entries=entries,
        failing=failing,
        fixed=entries - failing,
        regressions=regressions,
        failing_entries=tuple(listed),
    )
