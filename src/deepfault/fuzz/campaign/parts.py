"""A campaign's state as named parts, each with its own ``state_dict`` / ``load_state_dict``.

The runner (:class:`~.loop.Campaign`) owns one :class:`CampaignParts`; the step functions
(:mod:`.step`, :mod:`.generate`, :mod:`.lazy`) take the parts they touch, strategies record
what they learn through the parts' methods, and a checkpoint (:mod:`.checkpoint`) saves and
restores the parts, each under its name:

- :class:`Counters`: iterations, steps, queries, generated, passed, ... (``counters``).
- :class:`Randomness`: the numpy and torch generators (``random``).
- :class:`RuleStats`: the mutation rules, the rule chooser's statistics, faults per rule (``rules``).
- :class:`Timing`: the clock, the time per phase and the timeline (``timing``).
- :class:`Queue`: the queue (:class:`~.corpus.Corpus`) and the checks' reference rows (``queue``).
- :class:`Faults`: the fault log and the unique failures (``faults``).
- the keep rule (:class:`~.keep.KeepRule`, ``keep``).

and, without state of their own (made again when a campaign is set up): :class:`Checks`
(the own check, the shared filter, the trace checks), :class:`Models` (the two models as
executed, the captures while a campaign runs) and the roots (:class:`~.seeds.Seeds`).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...errors import DeepFaultError
from ..fidelity.checks import Fidelity, TraceFidelity
from ..mutation.mcmc import RuleChooser, make_chooser
from ..mutation.rules import get_rule
from .clock import Clock, Timeline
from .corpus import PAGE_SLOTS, STATIC_FIELDS, Corpus, ReferenceRows, page_slots
from .faults import FaultLog, RFData
from .late import Deferred, LateChecks
from .memory import DEFAULT_QUEUE_MEMORY, format_size, image_bytes, queue_slots, torch_dtype
from .seeds import SEED_BATCH

if TYPE_CHECKING:
    from ..mutation.diversity import FailureSet
    from .execution import ModelPair
    from .keep import KeepRule
    from .metrics import FaultTable
    from .seeds import Seeds

__all__ = ["CampaignParts", "Checks", "Counters", "Faults", "Models", "Queue", "Randomness", "RuleStats",
           "Timing", "split_state"]


@dataclass
class Counters:
    """What a campaign has done so far (all summed over resumes but ``resumed``)."""

    iterations: int = 0
    steps: int = 0
    #: Mutants run through the models (a fault records the count when it was found).
    queries: int = 0
    #: Mutants made, retries included.
    generated: int = 0
    #: Mutants that passed the checks and were executed.
    passed: int = 0
    #: Mutants the shared filter rejected.
    shared_rejected: int = 0
    #: Mutants the own check scored (all changed ones, unless the order is lazy).
    scored: int = 0
    #: Checkpoints of the run this one resumed from.
    resumed: int = 0

    def state_dict(self) -> dict[str, int]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in fields(self):
            setattr(self, f.name, int(state.get(f.name, 0)))


class Randomness:
    """The campaign's generators: numpy (selection, rule choice) and a CPU torch one (mutation
    parameters), both seeded from ``seed``.
    """

    def __init__(self, seed: int):
        np_seed, torch_seed = np.random.SeedSequence(seed).spawn(2)
        self.rng = np.random.default_rng(np_seed)
        self.tgen = torch.Generator().manual_seed(int(torch_seed.generate_state(1, np.uint64)[0] >> 1))

    def state_dict(self) -> dict[str, Any]:
        return {"numpy_rng": self.rng.bit_generator.state, "torch_rng": self.tgen.get_state().numpy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["numpy_rng"]
        self.tgen.set_state(torch.from_numpy(np.asarray(state["torch_rng"], dtype=np.uint8)))


class RuleStats:
    """The mutation rules of the inputs' kind (in the chooser's order) and what is known of them:
    the chooser's ``selected``/``faithful``/``gain`` and the regression faults each made.

    Args:
        names: Rule names.
        chooser: The chooser's name (``mcmc``, ``uniform``).
        bounds: The data's range, which every rule keeps its images in.
        mutants: Mutant slots per selected input.
    """

    def __init__(self, names, chooser: str, *, bounds: tuple[float, float], mutants: int):
        self.names = list(names)
        self.fns = [get_rule(r) for r in self.names]
        self.affine = np.array([r.family == "affine" for r in self.fns])
        self.chooser: RuleChooser = make_chooser(chooser, self.names)
        self.rf = np.zeros(len(self.names), dtype=np.int64)
        self.bounds, self.mutants = bounds, mutants

    def record_iteration(self, rule: int, *, faithful: bool, gain: bool) -> None:
        """One iteration of ``rule``: whether a mutant passed the own check, whether one gained."""
        self.chooser.update(rule, faithful=faithful, gain=gain)

    def record_tries(self, rules: np.ndarray, *, faithful: np.ndarray) -> None:
        """One round of tries (one chooser call each), in slot order."""
        self.chooser.record(rules, faithful=faithful)

    def record_gain(self, rule: int) -> None:
        """``rule`` gained in an iteration whose tries were recorded already."""
        self.chooser.gain[rule] += 1

    def record_faults(self, rules: np.ndarray) -> None:
        """Regression faults made by ``rules`` (one entry per fault)."""
        np.add.at(self.rf, rules, 1)

    def shares(self) -> dict[str, float]:
        total = max(1, int(self.chooser.selected.sum()))
        return {r: float(self.chooser.selected[i]) / total for i, r in enumerate(self.names)}

    def usage(self) -> dict[str, dict]:
        """Per rule: the chooser's statistics and the regression faults (results)."""
        usage = self.chooser.to_dict()
        for i, rule in enumerate(self.names):
            usage[rule]["rf"] = int(self.rf[i])
        return usage

    def state_dict(self) -> dict[str, Any]:
        return {"rf": self.rf.copy(), **{f"chooser.{k}": v for k, v in self.chooser.state_dict().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.chooser.load_state_dict(_strip(state, "chooser"))
        self.rf = np.asarray(state["rf"], dtype=np.int64)


class Timing:
    """Fuzzing time (:class:`~.clock.Clock`), the timeline, and the set-up's seconds."""

    def __init__(self) -> None:
        self.clock, self.timeline = Clock(), Timeline()
        self.setup_seconds = 0.0
        #: Both models' forward pass per input, measured on the seeds (the first step cost estimate).
        self.seconds_per_input: float | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"elapsed": self.clock.now(), "setup_seconds": self.setup_seconds,
                "timings": dict(self.clock.timings), "timeline": list(self.timeline.samples)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the time and the timeline (the set-up's seconds stay this session's)."""
        self.clock.elapsed = float(state["elapsed"])
        self.clock.timings = dict(state["timings"])
        self.timeline.samples = list(state["timeline"])


#: The queue's sizes in its state (the rest are the corpus's arrays).
_QUEUE_SIZES = ("size", "refs_size", "seed_entries", "seed_refs", "page_slots")


class Queue:
    """The queue's entries and images (:class:`~.corpus.Corpus`), the own check's reference rows
    and the shared filter's, and the rule that counts selections.

    Args:
        corpus: The queue.
        refs: The own check's reference rows (entries point at them by ``ref``).
        shared_refs: The shared filter's reference rows of the roots, or ``None``.
        seed_entries: Entries that the seeds make (recomputed on resuming, never stored).
        count_every: Every selection raises ``times_selected`` (else only a fault-making one).
    """

    def __init__(self, corpus: Corpus, refs: ReferenceRows, shared_refs: ReferenceRows | None, *,
                 seed_entries: int, count_every: bool):
        self.corpus, self.refs, self.shared_refs = corpus, refs, shared_refs
        self.seed_entries, self.seed_refs = seed_entries, refs.size
        self.count_every = count_every

    @classmethod
    def of_seeds(cls, seeds: Seeds, own: Fidelity, shared: Fidelity | None, *, shape: tuple[int, ...],
                 config, device: torch.device) -> Queue:
        """The queue of the queued seeds, with their reference rows (``config``: the campaign's)."""
        roots = len(seeds.index)
        # the roots' images are read from the test inputs when needed, never copied whole
        # (the queue holds the one copy of the seeds: docs/drfuzz.md, "Queue memory")
        refs = ReferenceRows.of_roots(own, seeds.images_at, roots)
        shared_refs = None if shared is None else ReferenceRows.of_roots(shared, seeds.images_at, roots)
        queued = seeds.queued
        corpus = _make_corpus(shape, roots, len(queued), config, device)
        fields = seeds.queue_fields()
        # into the pool a page's bytes at a time (a copy of a whole batch of large images
        # would be as large as a page of 1,024 of them)
        rows = min(SEED_BATCH, page_slots(image_bytes(shape, "float32")))
        for start in range(0, len(queued), rows):
            part = slice(start, start + rows)
            corpus.add(seeds.images_at(queued[part]), **{k: v[part] for k, v in fields.items()})
        every = config.count_rule == "every"
        return cls(corpus, refs, shared_refs, seed_entries=len(queued), count_every=every)

    @property
    def device(self) -> torch.device:
        """Where the queue's images are (the models' device)."""
        return self.corpus.device

    def count_selections(self, sel: np.ndarray, made_rf: np.ndarray) -> None:
        """Raise ``times_selected`` of the selected entries (``made_rf``: those that made a fault)."""
        if self.count_every:
            self.corpus.times_selected[sel] += 1
        else:  # as published: only the inputs that produced a regression fault this iteration
            self.corpus.times_selected[sel[made_rf]] += 1

    # --- checkpoint chunks (:mod:`.checkpoint`) -------------------------------------------

    def chunk(self, start: int, rstart: int) -> dict[str, np.ndarray]:
        """The fixed fields of entries ``start..`` and the reference rows ``rstart..``."""
        arrays = self.corpus.static_slice(start, len(self.corpus))
        arrays["refs"] = self.refs.stored_from(rstart)
        return arrays

    def sizes(self) -> tuple[int, int]:
        """``(queue entries, reference rows)`` held now."""
        return len(self.corpus), self.refs.size

    def add_chunk(self, arrays: dict[str, np.ndarray]) -> None:
        """Append what :meth:`chunk` returned (resuming)."""
        self.corpus.add_entries(**{f: arrays[f] for f in STATIC_FIELDS})
        if len(arrays["refs"]):
            self.refs.append(torch.from_numpy(arrays["refs"]))

    def state_dict(self) -> dict[str, Any]:
        """The sizes, the pages' layout, and the entries' counters, bans and pool slots (the
        images go page by page: :meth:`.corpus.Corpus.iter_dirty_pages`).
        """
        return {"size": len(self.corpus), "refs_size": self.refs.size, "seed_entries": self.seed_entries,
                "seed_refs": self.seed_refs, "page_slots": self.corpus.page, **self.corpus.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` after the chunks (:meth:`add_chunk`)."""
        if len(self.corpus) != state["size"] or self.refs.size != state["refs_size"]:
            raise DeepFaultError("the campaign's state does not match its queue entries; "
                                 "the checkpoint is corrupt")
        self.corpus.page = int(state.get("page_slots", PAGE_SLOTS))  # the pages' layout it was saved with
        self.corpus.load_state_dict({k: v for k, v in state.items() if k not in _QUEUE_SIZES})


def _make_corpus(shape: tuple[int, ...], roots: int, queued: int, cfg, device: torch.device) -> Corpus:
    """The queue, its capacity in images from the configuration's bytes (:func:`.memory.queue_slots`).

    The queued seeds are always held (they start the campaign): when they alone take more than
    the budget, the capacity is raised to them, with a warning naming ``max_seeds``.
    """
    slots = queue_slots(shape, cfg.queue_dtype, memory=cfg.queue_memory, count=cfg.queue_capacity)
    per = image_bytes(shape, cfg.queue_dtype)
    if queued > slots and cfg.queue_capacity is None:
        warnings.warn(
            f"the {queued:,} queued seeds take {format_size(queued * per)} in {cfg.queue_dtype}, more "
            f"than the queue's {format_size(cfg.queue_memory or DEFAULT_QUEUE_MEMORY)} (queue_memory, "
            "--queue-memory): the queue holds them all and evicts beyond them; fewer seeds (max_seeds, "
            "--max-seeds) or queue_dtype float16 hold less", stacklevel=4)
    # (a count capacity is raised to the seeds silently, as it always was)
    capacity = max(slots, roots)
    # the pool is made for the seeds at once (growing it while they join would hold two copies);
    # when the seeds set the capacity, for all of it (only the initial faults are not queued)
    reserve = capacity if slots < roots else queued
    return Corpus(shape, roots, device=device, capacity=capacity, dtype=torch_dtype(cfg.queue_dtype),
                  page=page_slots(per), reserve=reserve)


class Faults:
    """The faults found (:class:`~.faults.FaultLog`: kept as parts a checkpoint stores as
    chunks) and the unique failures per root (:class:`~..mutation.diversity.FailureSet`).
    """

    def __init__(self, log: FaultLog, failures: FailureSet):
        self.log, self.failures = log, failures

    def record(self, table: FaultTable, rf: RFData | None) -> None:
        self.log.record(table, rf)

    def chunk(self, start: int, rf_start: int) -> tuple[FaultTable | None, RFData | None]:
        """The faults since part ``start`` (rf data since ``rf_start``): :meth:`.faults.FaultLog.take`."""
        return self.log.take(start, rf_start)

    def add_chunk(self, table: FaultTable, rf: RFData | None) -> None:
        """Append a chunk that :meth:`chunk` returned (resuming)."""
        self.log.add(table, rf)

    def state_dict(self) -> dict[str, Any]:
        return {**self.log.counts, **{f"failures.{k}": v for k, v in self.failures.state_dict().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.log.counts = {"rf": int(state["rf"]), "gf": int(state["gf"])}
        self.failures.load_state_dict(_strip(state, "failures"))


@dataclass
class Checks:
    """The strategy's own check, the shared filter (or ``None``), the trace checks scored from M1's
    activations (:mod:`.late`) and whether the own check runs in the lazy order (:mod:`.lazy`).
    """

    own: Fidelity
    shared: Fidelity | None
    late: LateChecks | None = None
    lazy: bool = False

    @classmethod
    def of(cls, own: Fidelity, shared: Fidelity | None) -> Checks:
        """The checks, a trace check among them scored from M1's forward pass of the mutants,
        between the two models (:mod:`.late`).
        """
        own_late = own if isinstance(own, TraceFidelity) else None
        shared_late = shared if isinstance(shared, TraceFidelity) else None
        if own_late is None and shared_late is None:
            return cls(own, shared)
        late = LateChecks(own_late, shared_late)
        return cls(Deferred(late.own) if late.own is not None else own, shared, late)


@dataclass
class Models:
    """Both models as the campaign executes them, the classes, and the captures that a running
    campaign holds: M2's neuron values for a coverage keep rule (``recorder``) and M1's
    activations for the trace checks (``traces``).
    """

    pair: ModelPair
    num_classes: int
    recorder: Any = None
    traces: Any = None

    @contextlib.contextmanager
    def capturing(self, hooks: contextlib.AbstractContextManager | None,
                  late: LateChecks | None) -> Iterator[None]:
        """Hold the captures while a campaign runs: ``hooks`` on M2 (a coverage keep rule's neuron
        values) and M1's activations for the trace checks ``late``; released on the way out.
        """
        try:
            with contextlib.ExitStack() as stack:
                if hooks is not None:
                    self.recorder = stack.enter_context(hooks)
                if late is not None:
                    self.traces = stack.enter_context(late.capturing(self.pair.m1))
                yield
        finally:
            self.recorder = self.traces = None


#: The parts a checkpoint saves, by name (the prefix of their arrays).
STATEFUL = ("counters", "random", "rules", "timing", "queue", "faults", "keep")


@dataclass
class CampaignParts:
    """Every part of a set-up campaign (module docstring)."""

    counters: Counters
    random: Randomness
    rules: RuleStats
    timing: Timing
    queue: Queue
    faults: Faults
    keep: KeepRule
    checks: Checks
    models: Models
    seeds: Seeds

    def state_dict(self) -> dict[str, Any]:
        """``{"data": {part: JSON-ready}, "arrays": {"part.key": ndarray}}`` of every stateful part."""
        return split_state({name: getattr(self, name).state_dict() for name in STATEFUL})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the queue's and the faults' chunks restored already)."""
        data, arrays = state["data"], state["arrays"]
        for name in STATEFUL:
            getattr(self, name).load_state_dict({**data.get(name, {}), **_strip(arrays, name)})


def split_state(states: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Parts' states as ``{"data": {part: {key: value}}, "arrays": {"part.key": ndarray}}``."""
    data: dict[str, dict[str, Any]] = {}
    arrays: dict[str, np.ndarray] = {}
    for name, state in states.items():
        data[name] = {}
        for key, value in state.items():
            if isinstance(value, np.ndarray):
                arrays[f"{name}.{key}"] = value
            else:
                data[name][key] = value
    return {"data": data, "arrays": arrays}


def _strip(state: dict[str, Any], prefix: str) -> dict[str, Any]:
    n = len(prefix) + 1
    return {k[n:]: v for k, v in state.items() if k.startswith(prefix + ".")}
