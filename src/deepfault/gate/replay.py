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
import torch

from ..core.capture import as_tensor, eval_mode, forward, model_device
from ..core.outputs import check_outputs_finite
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
        own: Entries found on this very challenger by an earlier run (their provenance names
            M2's fingerprint): judged when they were found, so counted in none of the above
            (a gate run twice on one pair gives one verdict).
        failing_entries: The first :data:`MAX_LISTED` failing entries (id, label, both
            predictions, whether a regression, the method that found it).
        complete: ``False`` when the replay was interrupted (the counts cover ``entries``).
    """

    entries: int
    failing: int
    fixed: int
    regressions: int
    own: int = 0
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
    entries = failing = regressions = own = 0
    listed: list[dict] = []
    devices = [model_device(p.module) for p in (p1, p2)]
    # one eval and inference context around the whole replay (a corpus batch is one forward pass)
    with eval_mode(p1.module), eval_mode(p2.module), torch.inference_mode():
        for batch in corpus.batches(batch_size):
            y = np.asarray(batch.labels, dtype=np.int64)
            preds = [
                _classes(p.module, as_tensor(batch.inputs, start=entries).to(d), entries)
                for p, d in zip((p1, p2), devices, strict=True)
            ]
            mine = batch.where(lambda p: len(p.fingerprints) > 1 and p.fingerprints[1] == p2.fingerprint)
            own += int(mine.sum())
            counts = _fold(batch, y, preds, mine, (entries, failing, regressions), listed)
            entries, failing, regressions = counts
            if on_batch is not None:
                on_batch(entries)
    return ReplayResult(
        entries=entries,
        failing=failing,
        fixed=entries - own - failing,
        regressions=regressions,
        own=own,
        failing_entries=tuple(listed),
    )


def _classes(model, x: torch.Tensor, start: int) -> np.ndarray:
    out = forward(model, x)
    check_outputs_finite(model, x, out, start=start)
    return out.argmax(1).cpu().numpy()


def _fold(
    batch, y: np.ndarray, preds: list[np.ndarray], mine: np.ndarray, counts: tuple[int, int, int],
    listed: list[dict],
) -> tuple[int, int, int]:
    """One batch's entries counted (but for the challenger's own, ``mine``), its failing ones
    listed (up to :data:`MAX_LISTED`).
    """
    entries, failing, regressions = counts
    ok1, ok2 = preds[0] == y, (preds[1] == y) | mine
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
    return entries, failing, regressions
