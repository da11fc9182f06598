"""DeepXplore's joint gradient ascent, batched (DeepXplore spec section 2).

For ``n >= 2`` models and a seed on which they all predict class ``c``, with target model
``j`` and one coverage neuron ``n_k`` per model::

    obj(x) = sum_{k != j} F_k(x)[c] - lambda1 * F_j(x)[c] + lambda2 * sum_k f_{n_k}(x)
    g      = d obj / d x,   g <- g / (sqrt(mean(g ** 2)) + 1e-5)     (per input)
    x      <- clip(x + s * constraint(g), lo, hi)       (no clip with ``clip=False``)

until the models disagree on ``x`` (a *difference-inducing input*) or ``iterations``
steps have been taken. ``F_k(x)[c]`` is a logit (default) or a probability; ``f_n`` is a
neuron's raw value (a conv channel's spatial mean). Each model's neuron is drawn
uniformly among its neurons not yet covered (``layer-minmax`` values above ``t``).

All seeds (or groups of ``batch_size`` seeds) advance together: each row carries its own
``c``, ``j`` and neurons, and leaves the batch when the models disagree on it. One
iteration is one forward and one backward pass per model for the whole batch.

Semantics that make the result independent of how the work is laid out:

- every random number is drawn in advance, per seed and iteration, from the run's
  generator (:func:`draw_randomness`), so a row's draws do not depend on which other rows
  are still in the batch;
- within a group, the neurons of iteration ``i`` are drawn against the coverage after
  iteration ``i - 1``: the inputs found at iteration ``i - 1`` (all rows together) update
  coverage before anyone draws again. The per-seed oracle
  (:func:`deepfault.testing.xplore_reference.search_reference`) follows the same order.
- seeds on which the models already disagree are found by step 0's forward pass of their
  group, counted apart, and update coverage before the group's first neurons are drawn.
- a forward and backward pass takes ``chunk_size`` rows at a time (a performance knob:
  each row's arithmetic does not depend on it).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from .. import checks
from ..checks import check_int
from ..core.capture import (
    NeuronLayout,
    as_tensor,
    capture,
    check_finite,
    eval_mode,
    forward,
    layer_selection,
    model_device,
    selection_source,
)
from ..core.entry import entry, split_arguments
from ..core.executors import Parallel
from ..core.gradients import RMS_EPS, normalize
from ..core.mapped import release
from ..core.memory import choose_batch_size
from ..core.runtime import Runtime
from ..core.threads import SMALL_MODEL_PARAMETERS, auto_threads  # noqa: F401 - re-exported (the search's "auto")
from ..coverage.criteria import NeuronCoverage
from ..errors import DeepFaultError
from .config import XploreConfig
from .constraints import Constraint
from .features import InputBounds, as_fixed
from .results import FoundInputs, RunNotes, TracePoint, XploreResult, measure_realism, saturation_warning

if TYPE_CHECKING:
    from ..core.inputs import InputData, LabelData
    from ..data import Dataset

__all__ = [
    "Draws",
    "RMS_EPS",
    "auto_threads",
    "check_models",
    "choose_neurons",
    "draw_randomness",
    "normalize",
    "scoring_models",
    "search",
    "select_seeds",
    "xplore",
]

log = logging.getLogger(__name__)

#: Inputs per forward/backward pass on the CPU: 256 LeNet inputs keep a pass's tensors in
#: cache, about 1.7x faster than one pass over 2,000 (benchmarks/bench_xplore.py).
CPU_CHUNK = 256


@contextlib.contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """``torch.set_num_threads(count)`` for the duration (nothing when ``None``)."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(check_int("threads", count))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _rng(seed: int, stream: int) -> np.random.Generator:
    """The run's generator for one purpose: 0 draws the seeds, 1 everything in the search."""
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(stream,)))


def select_seeds(pool_size: int, num: int, *, seed: int = 0, replace: bool = False) -> np.ndarray:
    """``(num,)`` indices of the seed inputs drawn from a pool of ``pool_size`` inputs.

    Raises:
        DeepFaultError: More seeds than inputs without replacement, or an empty pool.
    """
    pool_size = check_int("pool size", pool_size)
    num = check_int("seeds", num)
    if num > pool_size and not replace:
        raise DeepFaultError(
            f"--num-seeds {num} is more than the {pool_size} inputs to draw from; draw fewer or "
            "with replacement (--replace)"
        )
    return _rng(seed, 0).choice(pool_size, size=num, replace=replace).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Draws:
    """Every random number of a search, drawn in advance from the run's generator.

    Attributes:
        targets: ``(N,)`` target model of each seed (drawn even when the target is fixed,
            so that the other draws do not depend on it; then overwritten).
        neuron_u: ``(N, iterations, n)`` uniforms choosing each model's neuron per step
            (``per-seed`` uses step 0's for every step).
        constraint_u: ``(N, iterations, d)`` uniforms of the domain constraint.
    """

    targets: np.ndarray
    neuron_u: np.ndarray
    constraint_u: np.ndarray


def draw_randomness(num_seeds: int, num_models: int, config: XploreConfig,
                    constraint: Constraint) -> Draws:
    """The draws of a search, in a fixed order: targets, neurons, constraint patches."""
    rng = _rng(config.seed, 1)
    targets = rng.integers(0, num_models, size=num_seeds).astype(np.int64)
    if config.target is not None:
        targets[:] = config.target
    neuron_u = rng.random((num_seeds, config.iterations, num_models))
    constraint_u = rng.random((num_seeds, config.iterations, constraint.num_draws))
    return Draws(targets, neuron_u, constraint_u)


def choose_neurons(covered: torch.Tensor, u: np.ndarray) -> np.ndarray:
    """One neuron per row, uniformly among the uncovered ones (all when none is left).

    Args:
        covered: ``(M,)`` bool coverage state of one model.
        u: ``(B,)`` uniforms in ``[0, 1)``.

    Returns:
        ``(B,)`` int64 neuron indices: the ``floor(u * K)``-th uncovered neuron, ``K`` the
        number of uncovered neurons.
    """
    candidates = np.flatnonzero(~covered.cpu().numpy())
    if len(candidates) == 0:
        candidates = np.arange(len(covered))
    pick = np.minimum((u * len(candidates)).astype(np.int64), len(candidates) - 1)
    return candidates[pick]


def check_models(models: Sequence[nn.Module], sample: torch.Tensor, names: Sequence[str]) -> int:
    """Check that the models can be compared on ``sample`` ``(1, *input)``; returns the class count.

    Raises:
        DeepFaultError: Fewer than two models, models on different devices, a model that
            cannot take the inputs, or models with different numbers of classes.
    """
    return _inspect(models, sample, names, layouts=False)[0]


def _inspect(models: Sequence[nn.Module], sample: torch.Tensor, names: Sequence[str],
             layers=None, *, layouts: bool = True) -> tuple[int, list[NeuronLayout]]:
    """:func:`check_models`, and each model's neuron layout for ``layers`` (as
    :func:`~deepfault.core.capture.capture` takes them) from the same one-input forward pass
    (one pass per model, not two: issue 26); no layouts when ``layouts`` is false.
    """
    if len(models) < 2:
        raise DeepFaultError(
            f"DeepXplore compares two or more models; got {len(models)}: give at least two with --model"
        )
    if len(names) != len(models):
        raise DeepFaultError(f"names must give one name per model ({len(models)}); got {len(names)}")
    devices = {str(model_device(m)) for m in models}
    if len(devices) > 1:
        raise DeepFaultError(f"the models are on different devices ({', '.join(sorted(devices))}); "
                             "move them to one device")
    classes, found = [], []
    with contextlib.ExitStack() as stack, torch.inference_mode():
        for name, model in zip(names, models, strict=True):
            stack.enter_context(eval_mode(model))
            with capture(model, layers) if layouts else contextlib.nullcontext() as rec:
                try:
                    out = forward(model, sample.to(model_device(model)))
                except DeepFaultError as err:
                    raise DeepFaultError(f"model {name!r}: {err}") from err
                if rec is not None:
                    rec.collect()
                    assert rec.layout is not None  # collect() sets it
                    found.append(rec.layout)
            if out.ndim != 2:
                raise DeepFaultError(f"model {name!r} returns shape {tuple(out.shape)}, not (N, classes)")
            classes.append(out.shape[1])
    if len(set(classes)) > 1:
        detail = ", ".join(f"{n}: {c}" for n, c in zip(names, classes, strict=True))
        raise DeepFaultError(
            f"the models predict different numbers of classes ({detail}); DeepXplore compares "
            "models of the same task"
        )
    return classes[0], found


def scoring_models(models: Sequence, names: Sequence[str] | None, output_kinds: Sequence[str] | None,
                   bounds: Sequence[float] | None, objective: str):
    """Modules, names, output kinds and bounds for the search, from modules or prepared models.

    A :class:`~deepfault.models.prepare.PreparedModel` gives its name, bounds and the module
    that scores best: its ``logits`` whenever it has them (a softmax split off a
    probability model: F_k(x)[c] is then a true logit, and the ``deepxplore`` layers' softmax
    is taken of the logits, not of probabilities again), else its module and output kind. A
    module declared ``"probabilities"`` whose final ``nn.Softmax`` can be split off is
    treated the same way.

    Raises:
        DeepFaultError: ``output_kinds`` of the wrong length or contradicting a prepared model,
            or logits asked for (``objective="logits"``) from a model whose softmax cannot be
            split off (the message says why).
    """
    from ..models.prepare import PreparedModel, _split_logits

    models = list(models)
    given = None if output_kinds is None else list(output_kinds)
    if given is not None and len(given) != len(models):
        raise DeepFaultError(f"output_kinds must give one kind per model ({len(models)}); got {len(given)}")
    modules, kinds, labels, ranges = [], [], [], set()
    for i, m in enumerate(models):
        if isinstance(m, PreparedModel):
            if given is not None and given[i] != m.output_kind:
                raise DeepFaultError(f"output_kinds[{i}]={given[i]!r} contradicts model {m.name!r}, "
                                     "prepared as "
                                     f"returning {m.output_kind}; leave output_kinds out")
            if m.logits is None and objective == "logits":
                m.logits_module()  # raises, saying why
            modules.append(m.logits if m.logits is not None else m.module)
            kinds.append("logits" if m.logits is not None else m.output_kind)
            labels.append(m.name)
            if m.bounds is not None:
                ranges.add(tuple(m.bounds))
            continue
        kind = "logits" if given is None else given[i]
        if kind == "probabilities" and isinstance(m, nn.Module):
            head, why = _split_logits(m)
            if head is not None:
                m, kind = head, "logits"
            elif objective == "logits":
                name = names[i] if names is not None and i < len(names) else f"model{i}"
                raise DeepFaultError(f"model {name!r} outputs probabilities and its logits are not "
                                     f"available: {why}; use --objective probabilities, or pass a module "
                                     "that returns logits")
        modules.append(m)
        kinds.append(kind)
        labels.append(f"model{i}")
    if bounds is None:
        if len(ranges) > 1:
            raise DeepFaultError(f"the models take inputs in different ranges ({sorted(ranges)}); pass "
                                 "bounds=(lo, hi)")
        bounds = ranges.pop() if ranges else (0.0, 1.0)
    return modules, (labels if names is None else list(names)), kinds, bounds


@contextlib.contextmanager
def _frozen(models: Sequence[nn.Module]) -> Iterator[None]:
    """Eval mode and no parameter gradients for the duration; both restored afterwards."""
    flags = [[p.requires_grad for p in m.parameters()] for m in models]
    with contextlib.ExitStack() as stack:
        for m in models:
            stack.enter_context(eval_mode(m))
        try:
            for m in models:
                for p in m.parameters():
                    p.requires_grad_(False)
            yield
        finally:
            for m, fl in zip(models, flags, strict=True):
                for p, f in zip(m.parameters(), fl, strict=True):
                    p.requires_grad_(f)


class _Run:
    """The state of one search: models, coverage, draws and what was found."""

    #: ``(N, n)`` every model's prediction on each seed; made by :func:`search` for its seeds.
    seed_predictions: np.ndarray

    def __init__(self, models, names, output_kinds, config: XploreConfig, bounds: InputBounds, device,
                 chunk_size: int | None = None, fixed: np.ndarray | None = None):
        self.models = list(models)
        if chunk_size is None:  # search() resolves "auto"; a bare _Run keeps the fixed rule
            chunk_size = CPU_CHUNK if torch.device(device).type == "cpu" else 1 << 30
        self.chunk_size = check_int("chunk_size", chunk_size)
        self.names = list(names)
        self.config = config
        self.constraint = config.constraint()
        self.layers = config.layer_selection()
        self.bounds = bounds
        self.lo, self.hi = bounds.envelope
        self.device = device
        # Fixed elements: their direction is zeroed and their value set back to the seed's.
        self.fixed = None if fixed is None or not fixed.any() else torch.as_tensor(fixed, device=device)
        self.probabilities = []
        for name, kind in zip(names, output_kinds, strict=True):
            if kind not in ("logits", "probabilities"):
                raise DeepFaultError(f"output kind of model {name!r} must be 'logits' or 'probabilities'; "
                                     f"got {kind!r}")
            if kind == "probabilities" and config.objective == "logits":
                raise DeepFaultError(
                    f"model {name!r} outputs probabilities, so its logits are not available; "
                    "use --objective probabilities"
                )
            # Scores are softmaxed here unless the model already outputs probabilities.
            self.probabilities.append(config.objective == "probabilities" and kind == "logits")
        self.coverage: list[NeuronCoverage] = []
        self.found: list[dict] = []
        self.trace: list[TracePoint] = []
        self.num_found = 0
        self.start = time.perf_counter()
        self.first_found: float | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def update_coverage(self, cover: Sequence[torch.Tensor], rows: torch.Tensor) -> None:
        """Fold the inputs ``rows`` of a step into every model's coverage, from the
        ``layer-minmax`` values ``cover`` (one ``(B, M)`` per model) that the step's own
        forward pass captured: no forward pass of its own (issue 26).
        """
        if not bool(rows.any()):
            return
        for values, nc in zip(cover, self.coverage, strict=True):
            picked = values[rows]
            check_finite(picked, nc.layout)
            nc.update(picked)

    def note(self, group: int, iteration: int) -> None:
        self.trace.append(TracePoint(group, iteration, self.elapsed(), self.num_found,
                                     tuple(int(nc.covered.sum()) for nc in self.coverage)))

    def forward_chunks(self, x: torch.Tensor, *, graph: bool) -> list[tuple]:
        """``(xc, scores, values, cover)`` per chunk of ``x``; ``values`` ``None`` without
        ``graph`` (see :meth:`scores_and_values`).
        """
        chunks: list[tuple] = []
        for start in range(0, len(x), self.chunk_size):
            xc = x[start : start + self.chunk_size].detach().requires_grad_(graph)
            with contextlib.nullcontext() if graph else torch.no_grad():
                scores, values, cover = self.scores_and_values(xc)
            chunks.append((xc, scores, values if graph else None, cover))
        return chunks

    def scores_and_values(self, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor],
                                                         list[torch.Tensor]]:
        """Each model's ``(B, classes)`` scores, ``(B, M)`` raw neuron values (with graph when
        ``x`` requires one) and ``(B, M)`` ``layer-minmax`` values (coverage's, no graph).
        """
        scores, values, cover = [], [], []
        for model, soft in zip(self.models, self.probabilities, strict=True):
            with capture(model, self.layers, also="layer-minmax") as rec:
                out = forward(model, x)
                values.append(rec.collect())
            assert rec.also_values is not None  # collect() sets it
            cover.append(rec.also_values)
            scores.append(torch.softmax(out, dim=1) if soft else out)
        return scores, values, cover

    def search_group(self, group: int, rows: np.ndarray, x0: torch.Tensor, draws, bar) -> None:
        """Advance the seeds ``rows`` together until they disagree or run out of steps.

        Step 0's forward pass predicts the seeds themselves: seeds on which the models already
        disagree are set apart (and update coverage) before any neuron is drawn.
        """
        cfg = self.config
        n = len(self.models)
        targets = torch.as_tensor(draws.targets[rows], device=self.device)
        x = x0.clone()
        alive = np.arange(len(rows))  # positions in this group still searching
        neurons: list[torch.Tensor] = []
        for it in range(cfg.iterations + 1):
            last = it == cfg.iterations
            # The neurons of this step depend on the coverage after *all* rows were checked, so
            # the backward passes come after every row's forward. One chunk keeps its graph for
            # them; several chunks predict without graphs and each redoes its forward with a
            # graph just before its backward, so memory is one chunk's graph, not the group's
            # (one extra forward per step; keeping every chunk's graph made xplore's memory grow
            # with the seeds, issue 26). Coverage takes the layer-minmax values this same forward
            # captured.
            chunks = self.forward_chunks(x, graph=len(x) <= self.chunk_size and not last)
            preds = torch.cat([torch.stack([s.detach().argmax(dim=1) for s in sc]) for _, sc, _, _ in chunks],
                              dim=1)  # (n, B)
            cover = [torch.cat([ch[3][k] for ch in chunks]) for k in range(n)]
            keep = torch.ones(len(alive), dtype=torch.bool, device=self.device)
            if it == 0:
                self.seed_predictions[rows] = preds.T.cpu().numpy()
                common = preds[0].cpu()
                differ = (preds != preds[0]).any(dim=0)
                keep = ~differ
                self.update_coverage(cover, differ)
            else:
                differ = (preds != preds[0]).any(dim=0)
                if bool(differ.any()):
                    keep = ~differ
                    d = differ.cpu().numpy()
                    self.update_coverage(cover, differ)
                    self._record(rows[alive[d]], x.detach()[differ], x0[alive[d]], preds[:, differ],
                                 common[alive[d]], draws.targets[rows[alive[d]]], it)
            del cover
            self.note(group, it)
            if bar is not None:
                bar.update(1)
            if last or not bool(keep.any()):
                return
            keep_np = keep.cpu().numpy()
            if cfg.neurons == "per-iteration" or it == 0:
                step = it if cfg.neurons == "per-iteration" else 0
                u = draws.neuron_u[rows[alive], step]  # (B, n)
                neurons = [torch.as_tensor(choose_neurons(nc.covered, u[:, k]), device=self.device)
                           for k, nc in enumerate(self.coverage)]
            c = common[alive].to(self.device)
            tgt = targets[alive]
            grads = []
            for start, (xc, scores, values, _) in zip(range(0, len(x), self.chunk_size), chunks, strict=True):
                part = slice(start, start + len(xc))
                kept = keep[part]
                if not bool(kept.any()):
                    grads.append(torch.zeros_like(xc))
                    continue
                if values is None:  # predicted without a graph: the forward again, with one
                    xc = xc.requires_grad_(True)
                    scores, values, _ = self.scores_and_values(xc)
                per_row = torch.zeros(len(xc), device=self.device, dtype=x.dtype)
                for k in range(n):
                    weight = torch.where(tgt[part] == k, -cfg.lambda1, 1.0).to(x.dtype)
                    per_row = per_row + weight * scores[k].gather(1, c[part, None]).squeeze(1)
                    per_row = per_row + cfg.lambda2 * values[k].gather(1, neurons[k][part, None]).squeeze(1)
                grads.append(torch.autograd.grad(per_row[kept].sum(), xc)[0])
            del chunks
            g = normalize(torch.cat(grads)[keep])
            u = torch.as_tensor(draws.constraint_u[rows[alive[keep_np]], it])
            g = self.constraint.apply(g, u)
            if self.fixed is not None:
                g = g.masked_fill(self.fixed, 0.0)
            x = x.detach()[keep] + cfg.step_size * g
            if cfg.clip:
                x = self.bounds.clamp(x)
            if self.fixed is not None:  # exactly the seed's, whatever the clipping did
                x = torch.where(self.fixed, x0[alive[keep_np]], x)
            alive = alive[keep_np]
            neurons = [nk[keep] for nk in neurons]

    def _record(self, rows, x, seeds, preds, common, targets, it) -> None:
        """Keep the inputs found at step ``it`` (already folded into coverage)."""
        if self.first_found is None:
            self.first_found = self.elapsed()
        self.num_found += len(x)
        x_cpu, s_cpu = x.cpu(), seeds.cpu()
        self.found.append({
            "rows": np.asarray(rows, dtype=np.int64),
            "inputs": x_cpu.numpy(),
            "seeds": s_cpu.numpy(),
            "iteration": np.full(len(x), it, dtype=np.int64),
            "predictions": preds.T.cpu().numpy().astype(np.int64),
            "common_class": np.asarray(common.cpu(), dtype=np.int64),
            "target": np.asarray(targets, dtype=np.int64),
            "l1": (x_cpu.double() - s_cpu.double()).abs().flatten(1).sum(1).numpy(),
        })

    def found_inputs(self, seed_index: np.ndarray, shape: tuple[int, ...]) -> FoundInputs:
        """Everything found, sorted by seed row."""
        keys = ("rows", "inputs", "seeds", "iteration", "predictions", "common_class", "target", "l1")
        if not self.found:
            n = len(self.models)
            empty: dict[str, np.ndarray] = {
                "rows": np.zeros(0, np.int64), "inputs": np.zeros((0, *shape), np.float32),
                "seeds": np.zeros((0, *shape), np.float32), "iteration": np.zeros(0, np.int64),
                "predictions": np.zeros((0, n), np.int64), "common_class": np.zeros(0, np.int64),
                "target": np.zeros(0, np.int64), "l1": np.zeros(0)}
            return FoundInputs(seed_index=np.zeros(0, np.int64), **empty)
        parts = {k: np.concatenate([f[k] for f in self.found]) for k in keys}
        order = np.argsort(parts["rows"], kind="stable")
        parts = {k: v[order] for k, v in parts.items()}
        return FoundInputs(seed_index=seed_index[parts["rows"]], **parts)


@dataclass(eq=False)
class _Seeds:
    """The seeds of one search: rows ``take`` of ``pool``, gathered a group at a time (a copy of
    every seed at once would cost 4 bytes per seed element, issue 26), what the result records
    of them, and what :func:`xplore` found out about the models already.
    """

    pool: torch.Tensor
    take: np.ndarray
    index: np.ndarray | None = None
    labels: LabelData | np.ndarray | None = None
    inspected: tuple[int, list[NeuronLayout]] | None = None
    notes: RunNotes = field(default_factory=RunNotes)

    def gather(self, rows: np.ndarray) -> torch.Tensor:
        return self.pool[torch.as_tensor(self.take[rows])]


@dataclass(eq=False)
class _Plan:
    """A search checked and laid out: its models, the inputs' shape and bounds, the groups of
    seeds, the fixed elements and each seed's recorded pool index.
    """

    models: list
    names: list[str]
    kinds: list[str]
    shape: tuple[int, ...]
    box: InputBounds
    groups: list[np.ndarray]
    mask: np.ndarray | None
    index: np.ndarray
    labels: np.ndarray | None


#: Keywords of the old ``search(...)`` and ``xplore(...)`` and where each one went.
_OLD_RUNTIME = {"progress": "progress", "threads": "threads", "chunk_size": "batch_size",
                "batch_size": "batch_size"}


def _old_keywords(name: str, legacy: dict, config: XploreConfig | None, runtime: Runtime | None):
    """``(names, output_kinds, config, runtime)`` from the old keywords of ``search``/``xplore``
    (``bounds=``, ``fixed=``, ``names=``, ``output_kinds=``, ``progress=``, ``threads=``,
    ``chunk_size=``/``batch_size=``), with a :class:`FutureWarning` naming the new places.

    Raises:
        TypeError: A keyword neither form has.
    """
    unknown = sorted(set(legacy) - {"bounds", "fixed", "names", "output_kinds", *_OLD_RUNTIME})
    if unknown:
        raise TypeError(f"{name}() got unexpected keyword arguments: {', '.join(unknown)} (the one shape: "
                        f"{name}(models, data, config, runtime=...))")
    if not legacy:
        return None, None, config, runtime
    warnings.warn(f"{name}(..., {'=..., '.join(legacy)}=...) is deprecated: bounds and fixed go into "
                  "XploreConfig, progress, threads and the batch size into Runtime, and models carry their "
                  "names and output kinds (prepared models, or a dict name -> model)", FutureWarning,
                  stacklevel=3)
    config = XploreConfig() if config is None else config
    moved = {k: legacy[k] for k in ("bounds", "fixed") if k in legacy}
    config = replace(config, **moved) if moved else config
    run = {_OLD_RUNTIME[k]: legacy[k] for k in _OLD_RUNTIME if k in legacy}
    if run.get("batch_size", "auto") is None:
        run["batch_size"] = "auto"
    runtime = (Runtime() if runtime is None else runtime).with_(**run)
    return legacy.get("names"), legacy.get("output_kinds"), config, runtime


def search(models: Sequence | Mapping, seeds, config: XploreConfig | None = None, *,
           runtime: Runtime | None = None, seed_index=None, labels: LabelData | None = None,
           **old) -> XploreResult:
    """DeepXplore on given seed inputs: the batched joint gradient ascent.

    Args:
        models: Two or more classifiers of the same task, on one device: modules, or
            :class:`~deepfault.models.prepare.PreparedModel` (which bring their names, output
            kinds, logits and bounds; see :func:`scoring_models`), or a dict ``name -> model``;
            used in ``eval()`` mode and not modified (modes and ``requires_grad`` are restored).
        seeds: ``(N, *input)`` seed inputs within the bounds.
        config: The run's parameters (default :class:`XploreConfig`; ``config.seeds`` and
            ``replace`` are not used here: the seeds are given). ``config.bounds`` defaults to
            the prepared models', else ``(0, 1)``.
        runtime: How it runs (:class:`~deepfault.core.runtime.Runtime`): ``batch_size``, inputs
            per forward and backward pass (``"auto"``: sized from the memory one input's forward
            and backward pass through every model takes, at most 256 on the CPU; a performance
            knob only: each row's arithmetic is the same in any chunk), ``threads`` (``"auto"``:
            one for small models on the CPU, :func:`auto_threads`) and ``progress``.
        seed_index: ``(N,)`` index of each seed in its pool, recorded with the results
            (default ``arange(N)``).
        labels: ``(N,)`` the seeds' true labels (optional): the result then says which model
            agrees with them on each found input (``true_labels``, ``agreement()``). The
            search never uses them.
        **old: The old keywords (``bounds``, ``fixed``, ``names``, ``output_kinds``,
            ``progress``, ``chunk_size``, ``threads``), with a :class:`FutureWarning`.

    Returns:
        The run's :class:`~deepfault.xplore.results.XploreResult`, with the realism of
        what was found (:class:`~deepfault.xplore.realism.Realism`: SSIM to the seed and the
        share below :data:`~deepfault.xplore.realism.VISIBLE_CHANGE_SSIM`, distances). A
        ``UserWarning`` says when most found inputs are far from their seeds or saturate,
        naming the options that avoid it.

    Raises:
        DeepFaultError: Fewer than two models, models of different class counts or that
            cannot take the inputs, bad parameters, or seeds outside the bounds.
    """
    names, kinds, config, runtime = _old_keywords("search", old, config, runtime)
    config = XploreConfig() if config is None else config
    runtime = Runtime() if runtime is None else runtime
    pool = as_tensor(seeds, name="seeds").detach().cpu()
    named = _named(models, names)
    bounds = config.bounds if config.bounds is not None else _inferred_bounds(named[0], pool, "seeds")
    scoring = scoring_models(*named, kinds, bounds, config.objective)
    given = _Seeds(pool, np.arange(len(pool), dtype=np.int64), seed_index, labels)
    return _search(scoring, given, config, runtime)


def _named(models, names) -> tuple[list, Sequence[str] | None]:
    """``(models, names)`` of a sequence of models, or of a dict ``name -> model``."""
    if isinstance(models, Mapping):
        return list(models.values()), list(models) if names is None else names
    return list(models), names


def _search(scoring, seeds: _Seeds, config: XploreConfig, runtime: Runtime) -> XploreResult:
    """The search of :func:`search` and :func:`xplore` on models already scored
    (:func:`scoring_models`): checked, laid out, run group by group, measured.
    """
    plan = _plan(scoring, seeds, config)
    first = seeds.gather(np.arange(1))
    # xplore checked the models and took their layouts in one pass already
    layers = config.layer_selection()
    num_classes, layouts = seeds.inspected or _inspect(plan.models, first, plan.names, layers)
    device = model_device(plan.models[0])
    chunk, batch_line = _chunk_size(plan.models, first, runtime.batch_size, len(plan.index), device)
    run = _Run(plan.models, plan.names, plan.kinds, config, plan.box, device, chunk, plan.mask)
    draws = draw_randomness(len(plan.index), len(plan.models), config, run.constraint)
    threads = runtime.threads
    count = auto_threads(plan.models, device) if threads == "auto" else \
        None if threads is None else check_int("threads", threads, minimum=1)
    with _frozen(plan.models), _threads(count):
        run.coverage = [NeuronCoverage(layout, threshold=config.threshold) for layout in layouts]
        if config.workers > 1:
            _ascend_spread(run, plan, seeds, draws, layouts, runtime.parallel)
        else:
            _ascend(run, plan, seeds, draws, runtime.progress)
        seconds = run.elapsed()
        found = run.found_inputs(plan.index, plan.shape)
        still = _still_differ(plan, found, config, device)
    layers, named_by = config.layer_selection(), config.layers_named_by()
    asked = None if runtime.device is None else str(runtime.device)
    notes = replace(seeds.notes, batch=batch_line, device=seeds.notes.device or asked,
                    sources=tuple(selection_source(m, layers, named_by=named_by) for m in plan.models),
                    selections=tuple(layer_selection(m, layers) for m in plan.models))
    return _outcome(plan, run, seeds, draws, config, found, still, (num_classes, layouts, seconds, notes))


def _plan(scoring, seeds: _Seeds, config: XploreConfig) -> _Plan:
    """Check the models, the config, the seeds, bounds, fixed elements and labels; lay out the
    groups of seeds (in this order: the first problem found is the one reported).
    """
    models, names, kinds, bounds = scoring
    if len(names) != len(models):
        raise DeepFaultError(f"names must give one name per model ({len(models)}); got {len(names)}")
    kinds = ["logits"] * len(models) if kinds is None else list(kinds)
    if len(kinds) != len(models):
        raise DeepFaultError(f"output_kinds must give one kind per model ({len(models)}); got {len(kinds)}")
    if len(models) < 2:
        check_models(models, torch.zeros(1), names)
    config.validate(len(models))
    num = len(seeds.take)
    if num == 0:
        raise DeepFaultError("no seeds: the seed inputs are empty")
    shape = tuple(seeds.pool.shape[1:])
    config.constraint().check_inputs(shape)
    config.constraint().check(shape)
    box = InputBounds.of(bounds, shape)
    size = config.inputs_per_step or num
    groups = [np.arange(i, min(i + size, num)) for i in range(0, num, size)]
    box.check_inside(seeds.gather(rows) for rows in groups)  # a group at a time
    mask = as_fixed(config.fixed, shape)
    labels = None if seeds.labels is None else _seed_labels(seeds.labels, num)
    index = np.arange(num, dtype=np.int64) if seeds.index is None else np.asarray(seeds.index, np.int64)
    if index.shape != (num,):
        raise DeepFaultError(f"seed_index must have one index per seed ({num}); got shape {index.shape}")
    return _Plan(list(models), list(names), kinds, shape, box, groups, mask, index, labels)


def _chunk_size(models, first: torch.Tensor, value, count: int, device) -> tuple[int, str | None]:
    """Inputs per forward and backward pass, and the line saying what ``"auto"`` chose
    (small passes stay in the CPU's caches: at most :data:`CPU_CHUNK` there).
    """
    auto = value in (None, "auto")
    choice = choose_batch_size(models, first, "auto" if auto else value, backward=True, count=count)
    chunk = min(choice.size, CPU_CHUNK) if auto and device.type == "cpu" else choice.size
    return chunk, replace(choice, size=chunk).describe() if choice.auto else None


def _ascend(run: _Run, plan: _Plan, seeds: _Seeds, draws: Draws, progress) -> None:
    """Every group of seeds through :meth:`_Run.search_group`, with a progress bar."""
    run.start = time.perf_counter()
    run.seed_predictions = np.zeros((len(plan.index), len(plan.models)), dtype=np.int64)
    bar = None
    if progress and not callable(progress) and plan.groups:
        from ..core.progress import progress_bar

        bar = progress_bar(len(plan.groups) * (run.config.iterations + 1),
                           desc=progress if isinstance(progress, str) else "deepxplore", unit="step")
    try:
        for g, rows in enumerate(plan.groups):
            run.search_group(g, rows, seeds.gather(rows).to(run.device), draws, bar)
            release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
    finally:
        if bar is not None:
            bar.close()


def _ascend_spread(run: _Run, plan: _Plan, seeds: _Seeds, draws: Draws, layouts, parallel: Parallel) -> None:
    """The groups over ``config.workers`` workers (:mod:`.workers`), merged into ``run``: local
    processes, or the Ray cluster (and GPUs) ``parallel`` names.
    """
    from .workers import spread_groups

    run.seed_predictions = np.zeros((len(plan.index), len(plan.models)), dtype=np.int64)
    args = (plan.models, plan.names, plan.kinds, run.config, plan.box, run.device, run.chunk_size, plan.mask)
    make: tuple[type, tuple, dict] = (_Run, args, {})
    where = parallel.executor or ("ray" if parallel.address else "process")  # named, else processes
    spread_groups(run, make, plan.groups, seeds.gather, draws, layouts,
                  replace(parallel, workers=run.config.workers, executor=where))


def _still_differ(plan: _Plan, found: FoundInputs, config: XploreConfig, device) -> np.ndarray | None:
    """Without clipping: whether the models still disagree on each found input once clipped."""
    if config.clip or not len(found):
        return None
    from .results import replay

    clipped = plan.box.clamp(torch.as_tensor(found.inputs)).numpy()
    p = replay(plan.models, torch.as_tensor(clipped).to(device))
    return (p != p[:, :1]).any(axis=1)


def _outcome(plan: _Plan, run: _Run, seeds: _Seeds, draws: Draws, config: XploreConfig,
             found: FoundInputs, still, extra) -> XploreResult:
    """The :class:`XploreResult` of a finished search (and the warning on its realism)."""
    num_classes, layouts, seconds, notes = extra
    lo, hi = plan.box.envelope
    realism = measure_realism(found.inputs, found.seeds, (lo, hi), still_differ_clipped=still)
    message = saturation_warning(realism, config)
    if message:
        warnings.warn(message, UserWarning, stacklevel=4)
    preds = run.seed_predictions
    if len(found) == 0:
        log.info("no difference-inducing input found in %d seeds", len(plan.index))
    box, mask = plan.box, plan.mask
    return XploreResult(
        config=config, model_names=tuple(plan.names), num_classes=int(num_classes),
        num_neurons=tuple(lay.num_neurons for lay in layouts), bounds=(lo, hi), seed_index=plan.index,
        seed_predictions=preds, targets=draws.targets, already_differ=(preds != preds[:, :1]).any(axis=1),
        found=found, coverage=tuple(nc.compute() for nc in run.coverage), trace=tuple(run.trace),
        seconds=seconds, first_found_seconds=run.first_found, device=str(run.device),
        layer_names=tuple(lay.names for lay in layouts), realism=realism,
        true_labels=None if plan.labels is None else plan.labels[found.rows],
        feature_bounds=(box.lo, box.hi) if box.per_feature else None,
        fixed=mask if mask is not None and mask.any() else None, notes=notes,
    )


def _seed_labels(labels, n: int) -> np.ndarray:
    """``labels`` as ``(n,)`` int64, or an error naming what was given."""
    y = np.asarray(labels.detach().cpu() if isinstance(labels, torch.Tensor) else labels)
    whole = y.dtype.kind in "iu" or (y.dtype.kind == "f" and bool(np.all(y == np.round(y))))
    if y.shape != (n,) or not whole:
        raise DeepFaultError(f"labels must be one integer label per seed, shape ({n},); got {y.dtype} of "
                             f"shape {y.shape}")
    return y.astype(np.int64)


def _legacy(name: str, fields: set, args: tuple, kwargs: dict):
    """The old ``xplore(models, inputs, *, config, bounds, names, output_kinds, progress,
    batch_size, threads, labels, fixed)`` in the one shape: ``labels`` join the inputs,
    ``names``/``output_kinds`` travel with the models (to :func:`_xplore`), ``chunk_size`` is
    the runtime's batch size; the rest as :func:`~deepfault.core.entry.split_arguments` maps it.
    """
    if "inputs" in kwargs and len(args) < 2:
        kwargs["data"] = kwargs.pop("inputs")
    carried = {k: kwargs.pop(k) for k in ("names", "output_kinds", "labels") if k in kwargs}
    if "chunk_size" in kwargs:
        kwargs["batch_size"] = kwargs.pop("chunk_size")
    if kwargs.get("batch_size", "auto") is None:
        kwargs["batch_size"] = "auto"
    models, data, config_kw, runtime_kw = split_arguments(name, fields, args, kwargs)
    if carried:
        warnings.warn(f"{name}(..., {'=..., '.join(carried)}=...) is deprecated: labels go with the data "
                      "(an (inputs, labels) pair or a Dataset), names and output kinds with the models "
                      "(prepared models, or a dict name -> model)", FutureWarning, stacklevel=3)
    if "labels" in carried:
        data = (data, carried["labels"])
    if "names" in carried or "output_kinds" in carried:
        models = _Carried(models, carried.get("names"), carried.get("output_kinds"))
    return models, data, config_kw, runtime_kw


@dataclass(frozen=True)
class _Carried:
    """Models with the names and output kinds an old-form call gave beside them."""

    models: Sequence | Mapping
    names: Sequence[str] | None
    output_kinds: Sequence[str] | None

    def __len__(self) -> int:
        return len(self.models)

    def __iter__(self):
        return iter(self.models.values() if isinstance(self.models, Mapping) else self.models)


@entry(XploreConfig, legacy=_legacy)
def xplore(models: Sequence | Mapping, data: InputData | Dataset | tuple, config: XploreConfig,
           *, runtime: Runtime) -> XploreResult:
    """DeepXplore: draw ``config.seeds`` seeds from ``data`` and search near them for inputs on
    which the models disagree, raising their neuron coverage.

    Args:
        models: Two or more classifiers of the same task: modules, prepared models (which
            carry their names, output kinds, logits and bounds; see :func:`search`), or a dict
            ``name -> model``.
        data: The pool of seed inputs: a :class:`~deepfault.data.Dataset` (its test split, its
            labels, its bounds and class names), an ``(inputs, labels)`` pair, or ``(P, *input)``
            inputs in any form :func:`~deepfault.core.inputs.inputs_and_labels` takes (read
            whole: the seeds are drawn from all of them). With labels, the result says which
            model agrees with the true label on each found input (``true_labels``,
            ``agreement()``, ``agreement_summary()``).
        config: The run's parameters (default :class:`XploreConfig`); the seeds are
            ``config.seed_indices`` when given, else drawn with ``config.seed``. Its ``bounds``
            default to the data set's, else the prepared models', else ``(0, 1)``.
        runtime: How it runs (:class:`~deepfault.core.runtime.Runtime`; default ``Runtime()``):
            the device (the models are moved there), the batch of a forward and backward pass
            (a performance knob; see :func:`search`), the threads and the progress bar.

    Returns:
        The run's :class:`~deepfault.xplore.results.XploreResult`; ``found.seed_index``
        indexes the pool. ``summary()`` is what ``deepfault xplore`` prints; ``outputs()`` the
        inputs (``.npz``) and their image grid (``.png``).

    Examples:
        >>> from deepfault import Runtime, XploreConfig, xplore
        >>> result = xplore([lenet1, lenet4, lenet5], data,
        ...                 XploreConfig(seeds=200))  # doctest: +SKIP
        >>> print(result.summary())  # doctest: +SKIP
    """
    names, kinds = (models.names, models.output_kinds) if isinstance(models, _Carried) else (None, None)
    models, names = _named(models.models if isinstance(models, _Carried) else models, names)
    config.validate(len(models))
    x, labels, notes, data_bounds = _pool(data)
    if config.bounds is None and _bounds_inferred(data):
        data_bounds = _inferred_bounds(models, x, getattr(data, "name", "inputs"))
    bounds = config.bounds if config.bounds is not None else data_bounds
    scoring = scoring_models(_placed(models, runtime.device), names, kinds, bounds, config.objective)
    inspected = None
    if len(x):  # models that cannot be compared are the first thing to say (and their layouts)
        inspected = _inspect(scoring[0], x[:1], scoring[1], config.layer_selection())
        n = config.num_seeds  # the seeds, their search copies and their gradients, before any is drawn
        checks.check_memory("seeds", n, 3.0 * n * x[0].numel() * x.element_size(),
                            f"{n:,} seeds of shape {tuple(x.shape[1:])} (with search copies and gradients)")
    index = _seed_rows(config, len(x))
    seed_labels = None if labels is None else _seed_labels(labels, len(x))[index]
    seeds = _Seeds(x, index, index, seed_labels, inspected if len(index) else None, notes)
    return _search(scoring, seeds, config, runtime)


def _pool(data) -> tuple[torch.Tensor, LabelData | None, RunNotes, tuple | None]:
    """``(inputs, labels, notes, bounds)`` of the data :func:`xplore` draws its seeds from: a
    Dataset's test split, labels, name, class names and bounds (its per-feature bounds when it
    declares them), or an ``(inputs, labels)`` pair, or inputs alone.
    """
    from ..data import Dataset

    if isinstance(data, Dataset):
        x = as_tensor(data.x_test, name="inputs")
        lo, hi = data.bounds
        notes = RunNotes(data=data.name, pool=len(x), data_bounds=(float(lo), float(hi)),
                         class_names=tuple(data.class_names))
        declared = data.feature_bounds if data.feature_bounds is not None else data.bounds
        return x, data.y_test, notes, declared
    labels = None
    if isinstance(data, tuple) and len(data) == 2:
        data, labels = data
    x = as_tensor(data, name="inputs")
    return x, labels, RunNotes(pool=len(x)), None


def _bounds_inferred(data) -> bool:
    """Whether ``data`` declares no bounds: raw inputs, or a Dataset whose bounds were inferred."""
    from ..data import Dataset

    return not isinstance(data, Dataset) or bool(data.meta.get("bounds_inferred"))


def _inferred_bounds(models: Sequence, x: torch.Tensor, name: str) -> tuple[float, float] | None:
    """The bounds of inputs that declare none (:mod:`deepfault.data.bounds`, the one rule).

    Inputs inside the one range the prepared models record take that range (``None`` here:
    :func:`scoring_models` reads it from the models); outside it they are refused with the
    likely fix. Without a recorded range, the bounds are inferred from the inputs.
    """
    from ..data.bounds import check_model_range, infer_bounds
    from ..models.prepare import PreparedModel

    if not x.numel():
        return None
    seen = (float(x.min()), float(x.max()))
    recorded = {tuple(m.bounds) for m in models if isinstance(m, PreparedModel) and m.bounds is not None}
    if len(recorded) > 1:
        return None  # scoring_models names the models' different ranges
    if recorded:
        check_model_range(seen, recorded.pop(), data_name=name, what="the models")
        return None
    return infer_bounds([seen], name)


def _placed(models: list, device) -> list:
    """The models moved to ``device`` (``None``: where they are)."""
    if device is None:
        return models
    return [m.to(device) if hasattr(m, "to") else m for m in models]


def _seed_rows(config: XploreConfig, pool: int) -> np.ndarray:
    """The pool rows of the seeds: ``config.seed_indices`` (checked against the pool), else drawn."""
    if config.seed_indices is None:
        return select_seeds(pool, config.seeds, seed=config.seed, replace=config.replace)
    index = np.asarray(config.seed_indices, dtype=np.int64)
    bad = index[index >= pool]
    if len(bad):
        raise DeepFaultError(f"seed index {int(bad[0])} is outside the {pool} inputs to draw from "
                             f"(valid: 0..{pool - 1})")
    return index
