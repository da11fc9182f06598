"""An outcome's files written as one unit: its artifacts and its result document
(:func:`save_outcome`; :func:`save_result` makes the document a command's), all of them or, on
any error or kill, none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._io import atomic_paths
from ..core.outcome import Outcome
from ..core.runtime import Runtime
from .results import result_document, write_result

__all__ = ["Saved", "save_outcome", "save_result"]


@dataclass(frozen=True)
class Saved:
    """What :func:`save_outcome` wrote.

    Attributes:
        paths: The files written: the artifacts, then the result document.
        skipped: A line per artifact left out for a missing optional dependency (``no grid: ...``).
    """

    paths: tuple[Path, ...]
    skipped: tuple[str, ...]


def save_outcome(outcome: Outcome, out: Path | None, *, paths: Mapping[str, Path | None] | None = None,
                 document: Callable[[dict[str, str | None]], dict]) -> Saved | None:
    """Write each of ``outcome.outputs()`` to its path in ``paths`` (by the artifact's name; a name
    left out or ``None`` is not written) and, to ``out``, the result document ``document(written)``
    makes from the file names the artifacts were written to (``{"inputs": "r.npz", "grid": None}``),
    all as one unit (:func:`deepfault._io.atomic_paths`: a kill leaves all of them or none). An
    artifact whose optional dependency is missing (no matplotlib for a grid) is left out.

    Returns:
        What was written; ``None`` when nothing was to be written.
    """
    chosen = {a.name: (paths or {}).get(a.name) for a in outcome.outputs()}
    artifacts = [a for a in outcome.outputs() if chosen[a.name] is not None]
    targets = [Path(str(chosen[a.name])) for a in artifacts] + ([out] if out is not None else [])
    if not targets:
        return None
    written: dict[str, str | None] = dict.fromkeys(chosen)
    skipped: list[str] = []
    with atomic_paths(*targets) as temporaries:
        for artifact, temporary, target in zip(artifacts, temporaries, targets, strict=False):
            try:
                made = artifact.write(temporary)
            except ModuleNotFoundError as err:  # an optional extra: the rest is still written
                skipped.append(f"no {artifact.name}: {err}")
                made = None
            if made is None:
                temporary.unlink(missing_ok=True)
            else:
                written[artifact.name] = target.name
        if out is not None:
            write_result(temporaries[-1], document(written))
    shown = [t for t, a in zip(targets, [*artifacts, None], strict=False) if a is None or written[a.name]]
    return Saved(tuple(shown), tuple(skipped))


def save_result(outcome: Outcome, out: Path | None, *, command: str, config, runtime: Runtime,
                argv: Sequence[str] | None = None, paths: Mapping[str, Path | None] | None = None,
                records: Mapping | None = None) -> Saved | None:
    """:func:`save_outcome` with ``command``'s result document: ``records`` (such as the model's
    and the data set's), ``outcome.payload()`` and, for a pass spread over workers, where it ran,
    in the envelope with ``config``, its seed, ``runtime``'s device and threads, and the command
    line ``argv`` (:func:`~.results.result_document`).
    """
    spread = {} if outcome.spread is None else {"parallel": outcome.spread.to_dict()}
    threads = runtime.threads if isinstance(runtime.threads, int) else None
    return save_outcome(outcome, out, paths=paths, document=lambda written: result_document(
        command, {**(records or {}), **outcome.payload(), **spread}, config=config.to_dict(),
        seed=getattr(config, "seed", None), device=runtime.device, argv=None if argv is None else list(argv),
        threads=threads,
        outputs=written or None))
