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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from .. import checks
from ..checks import check_int
from ..core.capture import NeuronLayout, as_tensor, capture, check_finite, eval_mode, forward, model_device
from ..core.entry import renamed
from ..core.gradients import RMS_EPS, normalize
from ..core.mapped import release
from ..core.memory import resolve_batch_size
from ..core.threads import SMALL_MODEL_PARAMETERS, auto_threads  # noqa: F401 - re-exported (the search's "auto")
from ..coverage.criteria import NeuronCoverage
from ..errors import DeepFaultError
from .config import XploreConfig
from .constraints import Constraint
from .features import InputBounds, as_fixed
from .results import FoundInputs, TracePoint, XploreResult, measure_realism, saturation_warning

if TYPE_CHECKING:
    from ..core.inputs import InputData, LabelData

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


def search(
    models: Sequence,
    seeds,
    *,
    config: XploreConfig | None = None,
    bounds: Sequence[float] | None = None,
    seed_index=None,
    names: Sequence[str] | None = None,
    output_kinds: Sequence[str] | None = None,
    progress: bool = False,
    chunk_size: int | str | None = "auto",
    threads: int | str | None = "auto",
    labels: LabelData | None = None,
    fixed: Sequence[int] | np.ndarray | None = None,
    _take: np.ndarray | None = None,
    _inspected: tuple[int, list[NeuronLayout]] | None = None,
) -> XploreResult:
    """DeepXplore on given seed inputs: the batched joint gradient ascent.

    Args:
        models: Two or more classifiers of the same task, on one device: modules, or
            :class:`~deepfault.models.prepare.PreparedModel` (which bring their names, output
            kinds, logits and bounds; see :func:`scoring_models`); used in ``eval()`` mode and
            not modified (modes and ``requires_grad`` are restored).
        seeds: ``(N, *input)`` seed inputs within ``bounds``.
        config: The run's parameters (default :class:`XploreConfig`; ``config.seeds`` and
            ``replace`` are not used here: the seeds are given).
        bounds: ``(lo, hi)``, the valid input range every step is clipped to (default: the
            prepared models', else ``(0, 1)``): numbers, or per-feature arrays broadcastable to
            one input's shape (:class:`~deepfault.xplore.features.InputBounds`; ``lo == hi``
            pins a feature).
        seed_index: ``(N,)`` index of each seed in its pool, recorded with the results
            (default ``arange(N)``).
        names: One name per model (default ``model0``, ``model1``, ...).
        output_kinds: ``"logits"`` or ``"probabilities"`` per module (default: a prepared
            model's, else logits).
        progress: Show a progress bar over the iterations.
        chunk_size: Inputs per forward and backward pass, or ``"auto"`` (the default; ``None``
            too): sized from the memory one input's forward and backward pass through every
            model takes (:func:`~deepfault.core.memory.choose_batch_size`), at most 1,024. A
            performance knob only: each row's arithmetic is the same in any chunk.
        threads: CPU threads for the run, restored afterwards: ``"auto"`` (one for small
            models on the CPU, :func:`auto_threads`), a number, or ``None`` (PyTorch's).
        labels: ``(N,)`` the seeds' true labels (optional): the result then says which model
            agrees with them on each found input (``true_labels``, ``agreement()``). The
            search never uses them.
        fixed: Elements that keep the seed's value: indices along the first axis of one input
            (a vector's features, a sequence's channels) or a bool mask broadcastable to one
            input's shape (:func:`~deepfault.xplore.features.fixed_mask`). Their gradient is
            zeroed and their value stays the seed's, bit for bit.

    Returns:
        The run's :class:`~deepfault.xplore.results.XploreResult`, with the realism of
        what was found (:class:`~deepfault.xplore.results.Realism`: SSIM to the seed and the
        share below :data:`~deepfault.xplore.results.VISIBLE_CHANGE_SSIM`, distances). A
        ``UserWarning`` says when most found inputs are far from their seeds or saturate,
        naming the options that avoid it.

    Raises:
        DeepFaultError: Fewer than two models, models of different class counts or that
            cannot take the inputs, bad parameters, or seeds outside ``bounds``.
    """
    config = XploreConfig() if config is None else config
    models, names, output_kinds, bounds = scoring_models(models, names, output_kinds, bounds,
                                                         config.objective)
    if len(names) != len(models):
        raise DeepFaultError(f"names must give one name per model ({len(models)}); got {len(names)}")
    kinds = ["logits"] * len(models) if output_kinds is None else list(output_kinds)
    if len(kinds) != len(models):
        raise DeepFaultError(f"output_kinds must give one kind per model ({len(models)}); got {len(kinds)}")
    if len(models) < 2:
        check_models(models, torch.zeros(1), names)
    config.validate(len(models))
    # The seeds are pool[take], gathered group by group (xplore passes its pool and the drawn
    # rows): a copy of every seed at once would cost 4 bytes per seed element (issue 26).
    pool = as_tensor(seeds, name="seeds").detach().cpu()
    take = np.arange(len(pool), dtype=np.int64) if _take is None else np.asarray(_take, np.int64)
    num = len(take)

    def gather(rows: np.ndarray) -> torch.Tensor:
        return pool[torch.as_tensor(take[rows])]
    if num == 0:
        raise DeepFaultError("no seeds: the seed inputs are empty")
    shape = tuple(pool.shape[1:])
    config.constraint().check_inputs(shape)
    config.constraint().check(shape)
    box = InputBounds.of(bounds, shape)
    lo, hi = box.envelope
    size = config.inputs_per_step or num
    groups = [np.arange(i, min(i + size, num)) for i in range(0, num, size)]
    box.check_inside(gather(rows) for rows in groups)  # a group at a time
    mask = as_fixed(fixed, shape)
    seed_labels = None if labels is None else _seed_labels(labels, num)
    index = np.arange(num, dtype=np.int64) if seed_index is None else np.asarray(seed_index, np.int64)
    if index.shape != (num,):
        raise DeepFaultError(
            f"seed_index must have one index per seed ({num}); got shape {index.shape}"
        )
    device = model_device(models[0])
    first = gather(np.arange(1))
    # xplore checked the models and took their layouts in one pass already
    num_classes, layouts = _inspected or _inspect(models, first, names, config.layer_selection())
    chunk = resolve_batch_size(models, first, "auto" if chunk_size is None else chunk_size, backward=True,
                               count=num)
    if chunk_size in (None, "auto") and device.type == "cpu":  # small passes stay in the CPU's caches
        chunk = min(chunk, CPU_CHUNK)
    run = _Run(models, names, kinds, config, box, device, chunk, mask)
    draws = draw_randomness(num, len(models), config, run.constraint)
    count = auto_threads(models, device) if threads == "auto" else \
        None if threads is None else check_int("threads", threads, minimum=1)
    with _frozen(models), _threads(count):
        run.coverage = [NeuronCoverage(layout, threshold=config.threshold) for layout in layouts]
        run.start = time.perf_counter()
        run.seed_predictions = np.zeros((num, len(models)), dtype=np.int64)
        bar = None
        if progress and groups:
            from ..core.progress import progress_bar

            bar = progress_bar(len(groups) * (config.iterations + 1), desc="deepxplore", unit="step")
        try:
            for g, rows in enumerate(groups):
                run.search_group(g, rows, gather(rows).to(device), draws, bar)
                release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
        finally:
            if bar is not None:
                bar.close()
        seconds = run.elapsed()
        found = run.found_inputs(index, shape)
        still = None
        if not config.clip and len(found):
            from .results import replay

            clipped = box.clamp(torch.as_tensor(found.inputs)).numpy()
            p = replay(models, torch.as_tensor(clipped).to(device))
            still = (p != p[:, :1]).any(axis=1)
    realism = measure_realism(found.inputs, found.seeds, (lo, hi), still_differ_clipped=still)
    message = saturation_warning(realism, config)
    if message:
        warnings.warn(message, UserWarning, stacklevel=2)
    preds = run.seed_predictions
    differ = (preds != preds[:, :1]).any(axis=1)
    if len(found) == 0:
        log.info("no difference-inducing input found in %d seeds", num)
    return XploreResult(
        config=config, model_names=tuple(names), num_classes=int(num_classes),
        num_neurons=tuple(lay.num_neurons for lay in layouts), bounds=(lo, hi), seed_index=index,
        seed_predictions=preds, targets=draws.targets, already_differ=differ,
        found=found, coverage=tuple(nc.compute() for nc in run.coverage), trace=tuple(run.trace),
        seconds=seconds, first_found_seconds=run.first_found, device=str(device),
        layer_names=tuple(lay.names for lay in layouts), realism=realism,
        true_labels=None if seed_labels is None else seed_labels[found.rows],
        feature_bounds=(box.lo, box.hi) if box.per_feature else None,
        fixed=mask if mask is not None and mask.any() else None,
    )


def _seed_labels(labels, n: int) -> np.ndarray:
    """``labels`` as ``(n,)`` int64, or an error naming what was given."""
    y = np.asarray(labels.detach().cpu() if isinstance(labels, torch.Tensor) else labels)
    whole = y.dtype.kind in "iu" or (y.dtype.kind == "f" and bool(np.all(y == np.round(y))))
    if y.shape != (n,) or not whole:
        raise DeepFaultError(f"labels must be one integer label per seed, shape ({n},); got {y.dtype} of "
                             f"shape {y.shape}")
    return y.astype(np.int64)


@renamed(chunk_size="batch_size")
def xplore(
    models: Sequence,
    inputs: InputData,
    *,
    config: XploreConfig | None = None,
    bounds: Sequence[float] | None = None,
    names: Sequence[str] | None = None,
    output_kinds: Sequence[str] | None = None,
    progress: bool = False,
    batch_size: int | str | None = "auto",
    threads: int | str | None = "auto",
    labels: LabelData | None = None,
    fixed: Sequence[int] | np.ndarray | None = None,
) -> XploreResult:
    """DeepXplore: draw ``config.seeds`` seeds from ``inputs`` and search near them for
    inputs on which the models disagree, raising their neuron coverage.

    Args:
        models: Two or more classifiers of the same task, modules or prepared models (see
            :func:`search`).
        inputs: ``(P, *input)`` pool of seed inputs (the test split), in any form
            :func:`~deepfault.core.inputs.inputs_and_labels` takes (read whole: the seeds are
            drawn from all of them).
        config: The run's parameters (default :class:`XploreConfig`); the seeds are
            ``config.seed_indices`` when given, else drawn with ``config.seed``.
        bounds: ``(lo, hi)``, the valid input range (default: the prepared models', else
            ``(0, 1)``): numbers, or per-feature arrays broadcastable to one input's shape
            (see :func:`search`).
        names: One name per model (default ``model0``, ``model1``, ...).
        output_kinds: ``"logits"`` or ``"probabilities"`` per module (default: a prepared
            model's, else logits).
        progress: Show a progress bar over the iterations.
        batch_size: Inputs per forward and backward pass, or ``"auto"`` (the default), a
            performance knob (``--batch-size``; formerly ``chunk_size``: :func:`search`'s
            ``chunk_size``).
        threads: CPU threads for the run, as in :func:`search`.
        labels: ``(P,)`` true labels of ``inputs`` (optional, e.g. ``data.y_test``): the
            result then says which model agrees with the true label on each found input
            (``true_labels``, ``agreement()``, ``agreement_summary()``).
        fixed: Features that keep the seed's value (indices or a bool mask; see :func:`search`).

    Returns:
        The run's :class:`~deepfault.xplore.results.XploreResult`; ``found.seed_index``
        indexes ``inputs``.

    Examples:
        >>> from deepfault.xplore import XploreConfig, xplore
        >>> result = xplore([lenet1, lenet4, lenet5], data.x_test,
        ...                 config=XploreConfig(seeds=200), bounds=data.bounds)  # doctest: +SKIP
        >>> result.num_found, result.pooled_coverage  # doctest: +SKIP
    """
    config = XploreConfig() if config is None else config
    config.validate(len(models))
    models, names, output_kinds, bounds = scoring_models(models, names, output_kinds, bounds,
                                                         config.objective)
    x = as_tensor(inputs, name="inputs")
    inspected = None
    if len(x):  # models that cannot be compared are the first thing to say (and their layouts)
        inspected = _inspect(models, x[:1], [f"model{i}" for i in range(len(models))] if names is None
                             else names, config.layer_selection())
    if len(x):  # the seeds, their search copies and their gradients, before any is drawn
        n = config.num_seeds
        checks.check_memory("seeds", n, 3.0 * n * x[0].numel() * x.element_size(),
                            f"{n:,} seeds of shape {tuple(x.shape[1:])} (with search copies and gradients)")
    if config.seed_indices is not None:
        index = np.asarray(config.seed_indices, dtype=np.int64)
        bad = index[index >= len(x)]
        if len(bad):
            raise DeepFaultError(f"seed index {int(bad[0])} is outside the {len(x)} inputs to draw from "
                                 f"(valid: 0..{len(x) - 1})")
    else:
        index = select_seeds(len(x), config.seeds, seed=config.seed, replace=config.replace)
    seed_labels = None if labels is None else _seed_labels(labels, len(x))[index]
    # the pool and the drawn rows: search copies one group's seeds at a time, not every seed
    return search(models, x, config=config, bounds=bounds, seed_index=index,
                  names=names, output_kinds=output_kinds, progress=progress, chunk_size=batch_size,
                  threads=threads, labels=seed_labels, fixed=fixed, _take=index,
                  _inspected=inspected if len(index) else None)
