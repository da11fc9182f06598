"""What :func:`~deepfault.gate.gate` returns: :class:`GateOutcome`, the verdict first.

It prints itself (:meth:`GateOutcome.summary`), gives the result document's body
(:meth:`GateOutcome.payload`) and writes the JUnit XML and the Markdown summary a pipeline
reads (:meth:`GateOutcome.outputs`: :mod:`.junit`, :mod:`.markdown`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .._io import atomic_path
from ..core.outcome import Artifact, Outcome
from ..experiment.tables import Table, fmt
from .config import GateConfig
from .heldout import HeldOutResult
from .replay import ReplayResult
from .verdict import Verdict

__all__ = ["GateOutcome", "FuzzResult", "STAGES"]

#: The gate's stages, in the order they run.
STAGES = ("heldout", "replay", "fuzz")


@dataclass(frozen=True)
class FuzzResult:
    """Stage 3, the short fuzz.

    Attributes:
        budget: The budget it ran under.
        faults: Regression faults found (M1 right, M2 wrong, realistic by the fidelity check).
        unique: Of those, unique by seed and class (DRFuzz's #URF).
        added: Faults added to the corpus.
        complete: ``False`` when interrupted.
    """

    budget: str
    faults: int
    unique: int
    added: int = 0
    complete: bool = True

    def to_dict(self) -> dict:
        """The stage's record in the result document."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class GateOutcome(Outcome):
    """A gate of M2 (the challenger) against M1 (the champion).

    Attributes:
        judgement: The :class:`~.verdict.Verdict` and its checks.
        config: The policy and stages it ran with.
        heldout: Stage 1's numbers (``None``: not run).
        replay: Stage 2's (``None``: not run).
        fuzz: Stage 3's (``None``: not run).
        stages: Each stage's state: ``done``, ``off``, ``interrupted`` or ``not run``.
        corpus_added: Entries the gate added to the corpus (its flips, then its faults).
        names: How results name M1 and M2.
        class_names: The classes' names.
        bounds: The inputs' range (for the grid of flipped inputs).
        records: The models and the data set as the result document names them.
        device: Where it ran.
        threads: CPU threads it ran with.
    """

    judgement: Verdict
    config: GateConfig
    heldout: HeldOutResult | None = None
    replay: ReplayResult | None = None
    fuzz: FuzzResult | None = None
    stages: dict = field(default_factory=dict)
    corpus_added: int = 0
    names: tuple[str, str] = ("M1", "M2")
    class_names: tuple[str, ...] = ()
    bounds: tuple[float, float] = (0.0, 1.0)
    records: dict = field(default_factory=dict)
    device: str = "cpu"
    threads: int | None = None

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` or ``hold``."""
        return self.judgement.verdict

    @property
    def passed(self) -> bool:
        """Whether M2 may replace M1."""
        return self.judgement.passed

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why: the failing and holding checks' reasons (every check's when it passes)."""
        return self.judgement.reasons

    @property
    def exit_status(self) -> int:
        """The command line's exit status: 0 pass, 1 fail, 3 hold (130 when interrupted)."""
        return 130 if self.interrupted else self.judgement.exit_status

    @property
    def interrupted(self) -> str | None:
        """The stage an interruption stopped, or ``None``."""
        return next((s for s, state in self.stages.items() if state == "interrupted"), None)

    def finished(self) -> list[str]:
        """The stages that finished."""
        return [s for s, state in self.stages.items() if state == "done"]

    # --- the text -------------------------------------------------------------------------------

    def headline(self) -> str:
        """The answer in one line."""
        m1, m2 = self.names
        says = {"pass": "may replace", "fail": "may not replace", "hold": "cannot be judged against"}
        return f"gate: {self.verdict.upper()}: {m2} {says[self.verdict]} {m1}"

    def heldout_lines(self) -> list[str]:
        """Stage 1 in words: the disagreement, then (labelled) the accuracies and the flips."""
        h = self.heldout
        if h is None:
            return [f"held-out: {self.stages.get('heldout', 'not run')}"]
        lines = [
            f"held-out ({h.inputs:,} inputs{'' if h.complete else ', interrupted'}): disagreement "
            f"{100 * h.disagreement_rate:.2f}% ({h.disagree:,})"
        ]
        if h.labelled and h.inputs:
            lo1, hi1 = h.interval_m1 or (0, 0)
            lo2, hi2 = h.interval_m2 or (0, 0)
            level = f"{100 * (1 - self.config.alpha):g}%"
            lines += [
                f"accuracy M1 {h.accuracy_m1:.4f} [{lo1:.4f}, {hi1:.4f}], M2 {h.accuracy_m2:.4f} "
                f"[{lo2:.4f}, {hi2:.4f}] ({level} Clopper-Pearson); delta {h.accuracy_delta:+.4f}, "
                f"exact McNemar p = {h.mcnemar_p:.4g}",
                f"negative flips {h.negative_flips:,} ({100 * (h.negative_flip_rate or 0):.2f}%), "
                f"positive flips {h.positive_flips:,} ({100 * (h.positive_flip_rate or 0):.2f}%)",
            ]
        return lines

    def flip_table(self) -> Table:
        """The classes with a flip, most negative flips (by rate) first: what every front end shows."""
        classes = () if self.heldout is None else self.heldout.classes
        flipped = sorted(
            (c for c in classes if c.negative_flips or c.positive_flips),
            key=lambda c: (-c.negative_flip_rate, c.label),
        )
        rows = [
            (
                c.label,
                c.name,
                c.support,
                c.negative_flips,
                fmt(100 * c.negative_flip_rate, 2),
                c.positive_flips,
                fmt(c.recall_m1, 4),
                fmt(c.recall_m2, 4),
                fmt(c.recall_delta, 4),
            )
            for c in flipped
        ]
        return Table(
            (
                "class",
                "name",
                "inputs",
                "negative flips",
                "negative %",
                "positive flips",
                "recall M1",
                "recall M2",
                "recall delta",
            ),
            rows,
            title="Flips per class",
        )

    def stage_lines(self) -> list[str]:
        """Stages 2 and 3 in words, the corpus's growth and what an interruption left."""
        r, f = self.replay, self.fuzz
        lines = [
            f"corpus: {self.stages.get('replay', 'not run')}"
            if r is None
            else f"corpus ({r.entries:,} entries{'' if r.complete else ', interrupted'}): {r.failing:,} M2 "
            f"still gets wrong ({r.regressions:,} new since the champion), {r.fixed:,} fixed"
            + (f"; {r.own:,} found on this challenger before (judged then)" if r.own else ""),
            f"fuzz: {self.stages.get('fuzz', 'not run')}"
            if f is None
            else f"fuzz ({f.budget}): {f.faults:,} regression faults ({f.unique:,} unique)",
        ]
        if self.corpus_added:
            lines.append(f"added {self.corpus_added:,} entries to the corpus {self.config.corpus}")
        if self.interrupted:
            done = ", ".join(self.finished()) or "none"
            lines.append(f"interrupted during {self.interrupted}; finished: {done}; the corpus is whole")
        return lines

    def summary(self) -> str:
        """The verdict and its reasons, then each stage's numbers."""
        held = self.heldout_lines()
        table = self.flip_table()
        lines = [self.headline(), *(f"  - {r}" for r in self.reasons), held[0], *(f"  {x}" for x in held[1:])]
        return "\n".join(lines + ([table.text()] if table.rows else []) + self.stage_lines())

    # --- the files ------------------------------------------------------------------------------

    def payload(self) -> dict:
        """The result document's body: the verdict, its checks and each stage's record."""
        return {
            **self.records,
            "verdict": self.verdict,
            "passed": self.passed,
            "exit_status": self.exit_status,
            "reasons": list(self.reasons),
            "checks": [c.to_dict() for c in self.judgement.checks],
            "stages": dict(self.stages),
            "corpus_added": self.corpus_added,
            "heldout": None if self.heldout is None else self.heldout.to_dict(),
            "replay": None if self.replay is None else self.replay.to_dict(),
            "fuzz": None if self.fuzz is None else self.fuzz.to_dict(),
            "names": list(self.names),
        }

    def _writer(self, render):
        def write(path: Path) -> Path:
            with atomic_path(path) as tmp:
                tmp.write_text(render(self), encoding="utf-8")
            return Path(path)

        return write

    def outputs(self) -> tuple[Artifact, ...]:
        """The JUnit XML (``junit``) and the Markdown summary (``summary``)."""
        from .junit import junit_xml  # noqa: PLC0415
        from .markdown import markdown_summary  # noqa: PLC0415

        return (
            Artifact("junit", ".xml", self._writer(junit_xml)),
            Artifact("summary", ".md", self._writer(markdown_summary)),
        )
