"""What a campaign found and how it ran (:class:`CampaignResult`), and rebuilding one from the store."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .config import CampaignConfig
from .metrics import FAULT_KINDS, FaultTable, Metrics, compute_metrics
from .verdict import DiscoveryVerdict, discovery_verdict

__all__ = ["EXAMPLES", "FAULT_FILE_FIELDS", "STOP_REASONS", "CampaignResult", "examples", "result_from_dict",
           "workers_lines"]

#: Why a campaign stopped.
STOP_REASONS = ("budget", "exhausted", "interrupted")
#: Regression faults kept beside their seeds in a result, for figures.
EXAMPLES = 16
#: The arrays of the faults file (:meth:`CampaignResult.save_faults`), each kind apart: the generated
#: regression faults under the plain names, the initial faults (test inputs M2 already gets wrong)
#: under ``initial_`` names. Every array has one row per fault of its kind.
FAULT_FILE_FIELDS = {
    "inputs": "(R, *input) the generated regression faults' inputs (M1 right, M2 wrong), in the order found",
    "seed_index": "(R,) the index in the test split of the seed each was mutated from (its root)",
    "label": "(R,) the seed's label (M1's prediction, which is right)",
    "m1_pred": "(R,) M1's prediction (equal to label)",
    "m2_pred": "(R,) M2's prediction (not label)",
    "m1_prob": "(R, classes) M1's probabilities",
    "m2_prob": "(R, classes) M2's probabilities",
    "elapsed": "(R,) fuzzing seconds when it was found",
    "iteration": "(R,) iterations done when it was found",
    "initial_inputs": "(S, *input) the initial faults: test inputs M1 gets right and M2 already gets wrong "
                      "(not generated, in no # column)",
    "initial_seed_index": "(S,) their index in the test split",
    "initial_label": "(S,) their label",
    "initial_m1_pred": "(S,) M1's prediction (equal to initial_label)",
    "initial_m2_pred": "(S,) M2's prediction",
    "initial_m1_prob": "(S, classes) M1's probabilities",
    "initial_m2_prob": "(S, classes) M2's probabilities",
}


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign found and how it ran.

    Attributes:
        config: The :class:`CampaignConfig`.
        metrics: #RF, #URF, #Seed, #GF and the first fault (:class:`~.metrics.Metrics`).
        stop_reason: ``budget`` (reached), ``exhausted`` (no input could be selected any more)
            or ``interrupted``.
        iterations, steps: Selected inputs and steps processed.
        queries: Inputs run through each model (the executed mutants; in the lazy order of
            checks, ``config.check_order``, every changed mutant, checked afterwards).
        generated: Mutants made; ``passed``: those that passed the check and changed (in the
            lazy order: those run through the models, as ``queries``).
        seconds: Fuzzing wall time (summed over resumes); ``setup_seconds``: seed evaluation.
        roots: Test inputs M1 classifies correctly; ``queued_seeds``: those M2 does too.
        corpus: Queue size at the end.
        rule_usage: Per rule: selected, faithful, gain, score and regression faults found.
        timeline: ``{elapsed, iterations, queries, rf, urf, seeds, gf, corpus}`` samples.
        timings: Seconds spent per phase (select, mutate, check, execute, update, checkpoint).
        faults: Every fault (:class:`~.metrics.FaultTable`), initial ones flagged.
        rf_inputs: ``(R, C, H, W)`` the regression faults' inputs, rows aligned with the
            ``rf`` rows of ``faults`` (initial ones are the seeds themselves).
        rf_p1, rf_p2: ``(R, classes)`` the two models' probabilities on them.
        resumed: Checkpoints this run resumed from (0 for a fresh run).
        evicted: Queue entries whose images were evicted (the queue's capacity was reached).
        shared_rejected: Mutants that passed their strategy's own check and failed the shared filter.
        trace_checks: The checks scored from M1's activations (the surprise checks), as they were
            set up: ``{"own": ..., "shared": ...}`` with each one's settings and the threshold
            it used (empty without one).
        workers: A many-worker campaign's workers (:mod:`.workers`): ``count``, ``lost`` (those
            that ended early, each with its reason), ``sync_seconds`` and ``sync_share`` (of the
            workers' fuzzing time) and ``per_worker`` (each one's seed, iterations, mutants,
            #RF, #URF and stop reason); empty for a one-process campaign.
        examples: The first generated regression faults beside their seeds, for figures:
            ``seeds``, ``faults`` ``(E, C, H, W)``, ``seed_index``, ``label``, ``m2_pred``.
    """

    config: CampaignConfig
    metrics: Metrics
    stop_reason: str
    iterations: int
    steps: int
    queries: int
    generated: int
    passed: int
    seconds: float
    setup_seconds: float
    roots: int
    queued_seeds: int
    corpus: int
    rule_usage: dict[str, dict]
    timeline: tuple[dict, ...]
    timings: dict[str, float]
    faults: FaultTable = field(repr=False)
    rf_inputs: np.ndarray = field(repr=False)
    rf_p1: np.ndarray = field(repr=False)
    rf_p2: np.ndarray = field(repr=False)
    resumed: int = 0
    examples: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    evicted: int = 0
    shared_rejected: int = 0
    trace_checks: dict = field(default_factory=dict)
    workers: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Everything but the arrays, JSON-ready."""
        return {
            "config": self.config.to_dict(),
            "metrics": self.metrics.to_dict(),
            "stop_reason": self.stop_reason,
            "iterations": self.iterations,
            "steps": self.steps,
            "queries": self.queries,
            "generated": self.generated,
            "passed": self.passed,
            "seconds": self.seconds,
            "setup_seconds": self.setup_seconds,
            "mutants_per_second": self.generated / self.seconds if self.seconds > 0 else None,
            "roots": self.roots,
            "queued_seeds": self.queued_seeds,
            "corpus": self.corpus,
            "rule_usage": self.rule_usage,
            "timeline": list(self.timeline),
            "timings": self.timings,
            "resumed": self.resumed,
            "evicted": self.evicted,
            "shared_rejected": self.shared_rejected,
            **({"trace_checks": self.trace_checks} if self.trace_checks else {}),
            **({"workers": self.workers} if self.workers else {}),
            "verdict": self.verdict().to_dict(),
        }

    def verdict(self) -> DiscoveryVerdict:
        """Was the run long enough? #URF, its rate over the last fifth of the budget against the
        first, levelled off, still climbing or too few to judge (:mod:`.verdict`).
        """
        axis = self.config.budget.kind
        span = self.seconds if axis == "seconds" else self.iterations
        return discovery_verdict(self.faults, axis=axis, span=span, stop_reason=self.stop_reason)

    def fault_arrays(self) -> dict[str, np.ndarray]:
        """Every regression fault, initial and generated together, as named arrays (the faults
        file keeps the two kinds apart: :meth:`fault_file_arrays`).

        ``inputs`` ``(R, C, H, W)``, ``seed_index`` (the root's index in the test split),
        ``label``, ``m1_pred``, ``m2_pred``, ``m1_prob``/``m2_prob`` ``(R, classes)``,
        ``initial`` (a seed M2 already got wrong), ``elapsed``, ``iteration``.
        """
        rf = self.faults.kind == FAULT_KINDS.index("rf")
        f = self.faults.select(rf)
        return {
            "inputs": self.rf_inputs, "seed_index": f.root, "label": f.y1, "m1_pred": f.y1, "m2_pred": f.y2,
            "m1_prob": self.rf_p1, "m2_prob": self.rf_p2, "initial": f.initial, "elapsed": f.elapsed,
            "iteration": f.iteration,
        }

    def fault_file_arrays(self) -> dict[str, np.ndarray]:
        """The faults file's arrays (:data:`FAULT_FILE_FIELDS`): the generated regression faults
        under the plain names, the initial faults apart under ``initial_`` names.
        """
        a = self.fault_arrays()
        initial = a["initial"]
        out = {name: a[name][~initial] for name in FAULT_FILE_FIELDS if not name.startswith("initial_")}
        kept = ("inputs", "seed_index", "label", "m1_pred", "m2_pred", "m1_prob", "m2_prob")
        out.update({f"initial_{name}": a[name][initial] for name in kept})
        return out

    def save_faults(self, path) -> None:
        """Write :meth:`fault_file_arrays` to ``path`` (``.npz``, atomically; no pickled objects)."""
        from ..._io import atomic_path

        # (Any: numpy's stub types **kwds against allow_pickle)
        arrays: dict[str, Any] = self.fault_file_arrays()
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)


def result_from_dict(data: dict, faults: FaultTable, rf_inputs, rf_p1, rf_p2, *,
                     examples: dict | None = None) -> CampaignResult:
    """Rebuild a :class:`CampaignResult` from :meth:`CampaignResult.to_dict`."""
    return CampaignResult(
        config=CampaignConfig.from_dict(data["config"]), metrics=compute_metrics(faults),
        stop_reason=data["stop_reason"], iterations=data["iterations"], steps=data["steps"],
        queries=data["queries"], generated=data["generated"], passed=data["passed"], seconds=data["seconds"],
        setup_seconds=data["setup_seconds"], roots=data["roots"], queued_seeds=data["queued_seeds"],
        corpus=data["corpus"], rule_usage=data["rule_usage"], timeline=tuple(data["timeline"]),
        timings=data["timings"], faults=faults, rf_inputs=rf_inputs, rf_p1=rf_p1, rf_p2=rf_p2,
        resumed=data.get("resumed", 0), examples=examples or {}, evicted=data.get("evicted", 0),
        shared_rejected=data.get("shared_rejected", 0), trace_checks=data.get("trace_checks", {}),
        workers=data.get("workers", {}),
    )


def examples(faults: FaultTable, rf_inputs: np.ndarray, inputs, rules) -> dict[str, np.ndarray]:
    """The first :data:`EXAMPLES` generated regression faults beside their seeds (for figures).

    Args:
        faults: Every fault, the initial ones first, then the generated ones in order.
        rf_inputs: The regression faults' inputs, aligned with the ``rf`` rows of ``faults``.
        inputs: The campaign's test inputs (a CPU tensor).
        rules: The rule names, by rule index.
    """
    rf_rows = faults.select(faults.kind == FAULT_KINDS.index("rf"))
    first = np.flatnonzero(~rf_rows.initial)[:EXAMPLES]
    return {
        "seeds": inputs[torch.as_tensor(rf_rows.root[first])].numpy(), "faults": rf_inputs[first],
        "seed_index": rf_rows.root[first], "label": rf_rows.y1[first], "m2_pred": rf_rows.y2[first],
        "rule": np.array([rules[i] if i >= 0 else "" for i in rf_rows.rule[first]], dtype=str),
    }


def _placed(worker: dict) -> str:
    """``worker 1 cuda:0 (Ray GPU 3) on host-b``: where one worker of a campaign ran."""
    gpus = ",".join(worker.get("gpus") or ())
    note = "" if not gpus else f" (Ray GPU {gpus})" if worker["device"] != "cpu" else \
        f" (Ray GPU {gpus} reserved, but no CUDA there)"
    return f"worker {worker['worker']} {worker['device']}{note} on {worker['node']}"


def workers_lines(workers: dict) -> list[str]:
    """A many-worker campaign's workers (:mod:`.workers`): how many ran where, the sync's
    share of their time, and each one lost (the summary's lines, and the report page's).
    """
    if not workers:
        return []
    alive = workers["count"] - len(workers["lost"])
    every = f"{workers['sync_every']:g}"
    through = f" through the {workers['sync_point']}" if workers.get("sync_point") else ""
    lines = [f"workers: {workers['count']} ({workers['executor']}), syncing every {every} s{through}; "
             f"sync {100 * workers['sync_share']:.1f}% of their fuzzing time, checkpoints and sync "
             f"{100 * workers['checkpoint_share']:.1f}%"]
    placed = [w for w in workers.get("per_worker", ()) if w is not None and "device" in w]
    if placed:  # where each ran: its host, its device (and the GPUs Ray gave it)
        lines.append("ran on: " + ", ".join(map(_placed, placed)))
    lines += [f"worker {lost['worker']} was lost ({lost['reason']}): the campaign went on with the other "
              f"{alive}; its faults up to its last sync are in the result" for lost in workers["lost"]]
    return lines
