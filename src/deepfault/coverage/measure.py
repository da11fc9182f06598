"""Measuring coverage of a set of inputs: one batch loop, every criterion updated from it.

:func:`measure_coverage` runs the inputs through the model once (the engine's
:func:`~deepfault.core.batches.iterate_batches`), feeds each batch to every requested
criterion, and records how coverage grew with the number of inputs at checkpoints ``1, 2, 5,
10, 20, 50, ..., N`` (the batches are split at the checkpoints, so the curve is exact and costs
no memory per input).

A criterion says what it reads (``reads``): a neuron criterion of
:data:`~deepfault.coverage.criteria.CRITERIA` the batch's neuron values, a surprise coverage
of :data:`~deepfault.coverage.scored.SCORE_CRITERIA` (``lsc``, ``dsc``, ``mdsc``: Kim et al.,
ICSE 2019) the batch's surprise scores (LSA, DSA, MDSA of a fitted
:class:`~deepfault.coverage.surprise.Surprise`), which come from a second capture of the
surprise state's own layers (and transform) in the same forward pass, so the data still goes
through the model once.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from torch import nn

if TYPE_CHECKING:
    from ..core.inputs import InputData
    from ..core.runtime import Runtime
    from ..core.shards import ShardContext
    from ..models.prepare import PreparedModel

from ..checks import MAX_SECTIONS, check_int
from ..core.batches import Batch, iterate_batches
from ..core.capture import NeuronLayout, capture, check_transform, layer_selection
from ..core.entry import entry
from ..errors import DeepFaultError
from ._legacy import legacy_keywords
from ._shape import inputs_of, progress_label
from .config import CoverageConfig, _thresholds, parse_criteria, state_of
from .criteria import CRITERIA, Criterion, _scale, criterion_params, make_criterion
from .profile import Profile, _module, load_profile
from .results import About, CoverageReport
from .scored import SA_SECTIONS, SCORE_CRITERIA, ScoreCriterion, SurpriseCoverage, _sa_upper
from .surprise import Surprise, load_surprise
from .text import neurons_text

__all__ = [
    "PROFILED",
    "SA_SECTIONS",
    "SCORE_CRITERIA",
    "CoverageConfig",
    "CoverageReport",
    "ScoreCriterion",
    "SurpriseCoverage",
    "build_criteria",
    "check_params",
    "checkpoints",
    "measure_coverage",
    "parse_criteria",
    "prepare_run",
    "resolve_setup",
    "resolve_surprise",
    "surprise_scorer",
]

#: Criteria that need a profile.
PROFILED = tuple(name for name, _ in CRITERIA.items() if "profile" in criterion_params(name))


def resolve_surprise_error() -> DeepFaultError:
    """The error of a surprise adequacy without a state: how to fit one."""
    return DeepFaultError(
        "surprise adequacy needs a state fitted on the training data: fit one with fit_surprise or "
        "'deepfault coverage surprise' and pass it (CoverageConfig(surprise=...), --surprise FILE)")


def resolve_surprise(surprise) -> Surprise:
    """A :class:`~deepfault.coverage.surprise.Surprise`, or one read from a path.

    Raises:
        DeepFaultError: ``None`` (with how to fit one), or neither a state nor a path.
    """
    if surprise is None:
        raise resolve_surprise_error()
    if isinstance(surprise, Surprise):
        return surprise
    if isinstance(surprise, (str, bytes)) or hasattr(surprise, "__fspath__"):
        return load_surprise(surprise)
    raise DeepFaultError(f"surprise must be a Surprise or the path of one; got {type(surprise).__name__}")


def check_params(names, *, threshold=0.0, sections=10, top_k=1, scale=0.0, profile=None,
                 sa_sections=SA_SECTIONS, sa_upper=None) -> tuple[float, ...]:
    """Validate every parameter before any work; returns the thresholds.

    Raises:
        DeepFaultError: A bad threshold, ``sections`` or ``top_k`` < 1, a bad scale, a
            profiled criterion without a profile, or a bad ``sa_sections``/``sa_upper``.
    """
    thresholds = _thresholds(threshold)
    check_int("sections", sections)
    check_int("top_k", top_k)
    _scale(scale)
    if any(n in SCORE_CRITERIA for n in names):
        check_int("sa_sections", sa_sections, maximum=MAX_SECTIONS)
        _sa_upper(sa_upper)
    need = [n for n in names if n in PROFILED]
    if need and profile is None:
        raise DeepFaultError(
            f"{', '.join(need)} {'needs' if len(need) == 1 else 'need'} a profile (each neuron's range on "
            "the training data): compute "
            "one with compute_profile or 'deepfault coverage profile' and pass it "
            "(profile=..., --profile FILE)"
        )
    if profile is not None and not isinstance(profile, Profile):
        raise DeepFaultError(f"profile must be a Profile; got {type(profile).__name__}")
    return thresholds


def build_criteria(
    criteria: str | Iterable[str],
    layout: NeuronLayout,
    *,
    threshold: float | Sequence[float] = 0.0,
    sections: int = 10,
    top_k: int = 1,
    scale: float = 0.0,
    profile: Profile | None = None,
) -> list[Criterion]:
    """Fresh criteria for ``layout``: one per name, and one per threshold for the criteria that
    take a threshold (``nc``, ``nac``), each given the parameters it takes.

    Raises:
        DeepFaultError: An unknown criterion, a bad parameter, or a missing profile.
    """
    names = parse_criteria(criteria)
    scored = [n for n in names if n in SCORE_CRITERIA]
    if scored:
        raise DeepFaultError(f"{', '.join(scored)} cover one score per input, not neurons: measure them with "
                             "measure_coverage(..., CoverageConfig(surprise=...))")
    thresholds = check_params(names, threshold=threshold, sections=sections, top_k=top_k, scale=scale,
                               profile=profile)
    common = {"sections": sections, "top_k": top_k, "scale": scale, "profile": profile}
    out = []
    for name in names:
        takes = criterion_params(name)
        params = {k: v for k, v in common.items() if k in takes}
        for t in thresholds if "threshold" in takes else [None]:
            extra = {} if t is None else {"threshold": t}
            out.append(make_criterion(name, layout, **params, **extra))
    return out


def checkpoints(n: int) -> list[int]:
    """``1, 2, 5, 10, 20, 50, ...`` below ``n``, and ``n``."""
    out, base = [], 1
    while base < n:
        out += [c for c in (base, 2 * base, 5 * base) if c < n]
        base *= 10
    return out + [n] if n else out


def resolve_setup(model: nn.Module, profile: Profile | None, layers, transform: str | None):
    """The layers and transform to measure with, checked against the profile (its model, its
    transform); a profile supplies both when they are not given.
    """
    if profile is not None:
        if not isinstance(profile, Profile):
            raise DeepFaultError(f"profile must be a Profile; got {type(profile).__name__}")
        transform = profile.transform if transform is None else transform
        profile.check_transform(check_transform(transform))
        profile.check_model(model)
        if layers is None:
            layers = list(profile.layers)
    transform = check_transform("raw" if transform is None else transform)
    return layers, transform




# --------------------------------------------------------------------------- what a run reads


@dataclass
class Run:
    """What :func:`measure_coverage` and :func:`~deepfault.coverage.rank_inputs` read before
    their pass: the module, the fitted states, the layers and transform, and what to say about
    where they came from.
    """

    module: nn.Module
    profile: Profile | None
    state: Surprise | None
    layers: str | Sequence[str] | None
    transform: str
    model_name: str | None
    device: str
    notes: list[str] = field(default_factory=list)
    source: dict = field(default_factory=dict)

    def about(self, data_name: str | None, layout: NeuronLayout | None, layers) -> About:
        """What the summary says about the run; ``layout``: of the neurons read (``None``: none
        were), with the neuron line (:func:`~deepfault.coverage.text.neurons_text`) and the
        selection the result records.
        """
        neurons = selection = None
        if layout is not None:
            neurons = neurons_text(layout, self.module, layers, profile=self.profile)
            selection = layer_selection(self.module, self.profile.selection if layers is None and
                                        self.profile is not None else layers)
        return About(self.model_name, data_name, self.device, neurons, tuple(self.notes), selection)


def prepare_run(model, config: CoverageConfig, runtime: Runtime, *, neurons: Sequence[str],
                scores: bool) -> Run:
    """Read the fitted states ``config`` names (a path, an object, or for surprise adequacy a fit
    on a prepared model's training split) and check them against the model, before any pass.

    Args:
        model: The module or prepared model of the entry.
        config: The entry's config.
        runtime: The entry's runtime (a surprise state fitted here runs with it).
        neurons: The neuron criteria the pass feeds (none: no neuron is captured).
        scores: Whether the pass needs surprise scores (a state).
    """
    module = _module(model)
    profile = state_of(config.profile, Profile, load_profile)
    check_params(neurons, profile=profile)
    layers, transform = config.layers, config.transform or "raw"
    if neurons:
        layers, transform = resolve_setup(module, profile, config.layers, config.transform)
    p = next(module.parameters(), None)
    device = str(runtime.device or (p.device if p is not None else "cpu"))
    run = Run(module, profile, None, layers, str(transform),
              None if isinstance(model, nn.Module) else getattr(model, "name", None), device)
    if scores:
        _surprise_state(run, model, config, runtime)
    return run


def _layer_names(layout: NeuronLayout) -> str:
    return ", ".join(f"{la.name} ({la.size})" for la in layout.layers)


def _surprise_state(run: Run, model, config: CoverageConfig, runtime: Runtime) -> None:
    """``run.state``: the state ``config.surprise`` names, else one fitted now on the training
    split of a prepared model's data set (with :class:`~deepfault.coverage.config.SurpriseConfig`'s
    defaults), saying so in ``run.notes`` and ``run.source``.
    """
    from .surprise import fit_surprise

    if config.surprise is not None:
        state = run.state = resolve_surprise(config.surprise)
        state.check_model(run.module)
        if not isinstance(config.surprise, Surprise):
            run.notes.append(f"surprise state {config.surprise}: layers {_layer_names(state.layout)}, "
                             f"{state.num_inputs} training inputs, {state.transform}")
            run.source = {"source": str(config.surprise)}
        return
    data = None if isinstance(model, nn.Module) else getattr(model, "data", None)
    if data is None:
        raise resolve_surprise_error()
    if len(data.x_train) == 0:
        raise DeepFaultError("the data set has no training split to fit surprise adequacy on; fit a state "
                             "with 'deepfault coverage surprise --split FILE.npz' and pass --surprise FILE")
    t0 = time.perf_counter()
    state = run.state = fit_surprise(run.module, data.x_train, runtime=runtime)
    seconds = time.perf_counter() - t0
    run.notes.append(f"no --surprise given: fitted surprise adequacy on {data.name} train "
                     f"({state.num_inputs} inputs, layers {_layer_names(state.layout)}, raw, by predictions) "
                     f"in {seconds:.2f} s; "
                     "'deepfault coverage surprise --out FILE' keeps one for --surprise FILE")
    run.source = {"source": f"fitted on {data.name} train", "fit_seconds": seconds}


# --------------------------------------------------------------------------- the entry


@entry(CoverageConfig, legacy=legacy_keywords)
def measure_coverage(model: nn.Module | PreparedModel, data: InputData, config: CoverageConfig, *,
                     runtime: Runtime) -> CoverageReport:
    """Coverage of the inputs under each criterion of ``config``, from one pass through the model.

    Args:
        model: The network, or a prepared model (``eval()`` mode during the pass, restored
            afterwards); a prepared model's training split is where a surprise state is fitted
            when ``config.surprise`` is ``None``.
        data: The inputs: ``(N, ...)`` array or tensor, an ``(inputs, labels)`` pair, a torch
            ``Dataset`` or ``DataLoader`` (streamed), or a deepfault data set (its test split).
        config: A :class:`~deepfault.coverage.config.CoverageConfig`: the criteria and their
            parameters, the profile and the surprise state.
        runtime: A :class:`~deepfault.core.runtime.Runtime` (batch size, progress, threads);
            results do not depend on it.

    Returns:
        A :class:`CoverageReport`. With only surprise coverages its layout and transform are
        the surprise state's.

    Raises:
        DeepFaultError: A missing profile or surprise state, one made for another model, other
            layers or another transform, or inputs the model cannot take.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))
        >>> report = measure_coverage(model, torch.rand(8, 2), CoverageConfig(criteria="nc,tknc",
        ...                                                                   threshold=[0, 0.5]))
        >>> [r.label for r in report.results]
        ['nc(threshold=0)', 'nc(threshold=0.5)', 'tknc(top_k=1)']
    """
    from ..core.inputs import num_inputs

    x, _, data_name = inputs_of(data)
    neuron = config.neuron_criteria
    run = prepare_run(model, config, runtime, neurons=neuron, scores=bool(config.scored_criteria))
    n = num_inputs(x)  # a DataLoader's inputs, not its batches
    if n == 0:
        raise DeepFaultError("no inputs: the input set is empty")
    marks = checkpoints(n) if config.growth else []
    t0 = time.perf_counter()
    spread = None
    if runtime.parallel.spread:
        passed, spread = _spread_measure(run, x, config, runtime, marks)
    else:
        passed = _measure_pass(run, x, config, runtime, marks)
    report = _report(run, config, passed, num_inputs=n, seconds=time.perf_counter() - t0, data_name=data_name)
    return report.spread_over(spread)


def _report(run: Run, config: CoverageConfig, passed: tuple, *, num_inputs: int, seconds: float,
            data_name: str | None) -> CoverageReport:
    """The :class:`CoverageReport` of one pass (:func:`_measure_pass`'s ``passed``); with only
    surprise coverages its layout and transform are the surprise state's.
    """
    crits, curves, layout, (active, always) = passed
    results = tuple(c.compute() for c in crits)
    scored = [c for c in crits if isinstance(c, SurpriseCoverage)]
    summary = None
    transform = run.transform
    if run.state is not None:
        summary = {"state": {**run.state.to_dict(), **run.source},
                   "criteria": {c.name: c.summary() for c in scored}}
        if layout is None:
            layout, transform = run.state.layout, run.state.transform
    assert layout is not None  # n > 0: there was a batch, and neurons or a state
    return CoverageReport(
        results=results, layout=layout, transform=str(transform), num_inputs=num_inputs,
        growth={r.label: c.curve(curve) for c, r, curve in zip(crits, results, curves, strict=True)},
        profile=None if run.profile is None else run.profile.to_dict(), seconds=seconds, surprise=summary,
        scores={c.score: c.scores() for c in scored},
        active=None if active is None else active.cpu().numpy().astype(bool),
        always_active=None if always is None else always.cpu().numpy().astype(bool),
        about=run.about(data_name, layout if config.neuron_criteria else None, config.layers),
    )


Measured = Criterion | SurpriseCoverage


def _measure_pass(run: Run, x, config: CoverageConfig, runtime: Runtime, marks: list[int], *,
                  snapshot: Callable | None = None):
    """The one pass: ``(criteria, their recorded curves, the neuron layout or None, ((M,) whether
    each neuron was ever above 0, (M,) whether it was above 0 on every input), or Nones)``;
    ``snapshot(criterion)`` (a shard's pass) records its state at each mark instead of its count.
    """
    crits: list[Measured] | None = None
    curves: list[list[tuple[int, int]]] = []
    layout = None
    active = None  # (M,) whether each neuron's value was ever > 0: the never-activated neurons
    always = None  # (M,) whether it was > 0 on every input: NC at threshold 0 saturates on them
    kinds = tuple(dict.fromkeys(SCORE_CRITERIA.get(n).score for n in config.scored_criteria))
    with surprise_scorer(run.module, run.state, kinds) as score_batch:
        for batch in iterate_batches(run.module, x, neurons=bool(config.neuron_criteria), layers=run.layers,
                                     transform=run.transform, batch_size=runtime.batch_size,
                                     progress=progress_label(runtime, "coverage")):
            feeds: dict = score_batch(batch)
            if batch.values is not None:
                feeds["neurons"] = batch.values
                on = (batch.values > 0).any(0)
                active = on if active is None else active | on
                every = (batch.values > 0).all(0)
                always = every if always is None else always & every
            if crits is None:
                layout = batch.layout
                crits = _criteria(config, run, layout)
                curves = [[] for _ in crits]
            _fold(batch, feeds, crits, marks, curves, snapshot)
    return crits or [], curves, layout, (active, always)


def _criteria(config: CoverageConfig, run: Run, layout: NeuronLayout | None) -> list[Measured]:
    """Fresh criteria in the order asked: one per neuron criterion and setting, one per surprise
    coverage.
    """
    if layout is not None and run.profile is not None:
        run.profile.check_layout(layout)
    out: list[Measured] = []
    for name in config.criteria:
        if name in SCORE_CRITERIA:
            out.append(SurpriseCoverage(name, sections=config.sa_sections, upper=config.sa_upper))
        else:
            assert layout is not None  # neurons are captured
            out += build_criteria([name], layout, threshold=config.threshold, sections=config.sections,
                                  top_k=config.top_k, scale=config.scale, profile=run.profile)
    return out


def _fold(batch: Batch, feeds: dict, crits: list[Measured], marks: list[int], curves: list[list],
          snapshot: Callable | None = None) -> None:
    """Feed one batch to ``crits`` (each what it reads), split at the growth checkpoints in it."""
    cuts = [m for m in marks if batch.start < m <= batch.stop]
    lo = batch.start
    for hi in cuts + ([batch.stop] if not cuts or cuts[-1] != batch.stop else []):
        for c, curve in zip(crits, curves, strict=True):
            c.update(feeds[c.reads][lo - batch.start : hi - batch.start])
            if hi in cuts:
                curve.append((hi, c.covered_count() if snapshot is None else snapshot(c)))
        lo = hi


@contextlib.contextmanager
def surprise_scorer(model: nn.Module, state: Surprise | None, kinds: Sequence[str],
                    spent: dict[str, float] | None = None
                    ) -> Iterator[Callable[[Batch], dict[str, np.ndarray]]]:
    """A second capture, of the surprise state's own layers and transform, for a ``with`` block
    around a batch loop (:func:`~deepfault.core.batches.iterate_batches`): it yields
    ``score(batch) -> {kind: (B,) scores}``, to be called once per batch right after its
    forward pass, with the batch's predicted classes. ``spent`` adds up each kind's seconds.
    Without a state, ``score`` returns ``{}`` and nothing is hooked.
    """
    if state is None:
        yield lambda batch: {}
        return
    with capture(model, list(state.layers), transform=state.transform) as rec:

        def score(batch: Batch) -> dict[str, np.ndarray]:
            ats = rec.collect()
            if batch.start == 0:
                assert rec.layout is not None  # collect() has set it
                state.check_layout(rec.layout)
            predicted = batch.outputs.argmax(dim=1)
            out = {}
            for kind in kinds:
                t = time.perf_counter()
                out[kind] = state.finite_score(kind, ats, predicted)
                if spent is not None:
                    spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - t
            return out

        yield score


# --------------------------------------------------------------------------- spread over workers


def _spread_pass(name: str, work, run: Run, columns: tuple, options: tuple, runtime: Runtime):
    """``work`` over the shards of ``columns`` on ``runtime.parallel``'s workers (the run's module
    travels once, as the model).
    """
    from ..core.shards import sharded_pass

    bare = replace(run, module=cast(nn.Module, None))  # the module travels once, as the pass's model
    return sharded_pass(name, work, run.module, columns, (bare, *options),
                        runtime=runtime)


def _snapshot(crit) -> Any:
    return crit.state_dict() if isinstance(crit, Criterion) else None


def _measure_shard(module: nn.Module, columns: tuple, options: tuple, context: ShardContext) -> dict:
    run, config, marks = options
    here = [m - context.start for m in marks if context.start < m <= context.stop]
    crits, curves, layout, (active, always) = _measure_pass(replace(run, module=module), columns[0], config,
                                                            context.runtime(), here, snapshot=_snapshot)
    return {"crits": crits, "curves": [[(m + context.start, s) for m, s in c] for c in curves],
            "layout": layout, "active": active, "always": always}


def _covered_at(prefix, part, snapshot) -> int:
    """Items covered by the shards before a mark and the part of its own shard up to it."""
    if not isinstance(part, Criterion):
        return 0  # a surprise coverage redraws its curve from its scores at the end
    probe = copy.deepcopy(prefix)
    probe.merge(copy.deepcopy(part).load_state_dict(snapshot))
    return probe.covered_count()


def _spread_measure(run: Run, x, config: CoverageConfig, runtime: Runtime, marks: list[int]):
    """:func:`~deepfault.coverage.measure.measure_coverage`'s pass over shards: what its serial
    pass returns, and the :class:`~deepfault.core.shards.Spread`.
    """
    results, spread = _spread_pass("coverage measure", _measure_shard, run, (x,), (config, marks), runtime)
    layout = results[0]["layout"]
    crits = _criteria(config, run, layout) if results[0]["crits"] else []
    curves: list[list[tuple[int, int]]] = [[] for _ in crits]
    active = always = None
    for r in results:
        for i, (mine, part) in enumerate(zip(crits, r["crits"], strict=True)):
            curves[i] += [(m, _covered_at(mine, part, snap)) for m, snap in r["curves"][i]]
            mine.merge(part)
        if r["active"] is not None:
            active = r["active"] if active is None else active | r["active"]
            always = r["always"] if always is None else always & r["always"]
    return (crits, curves, layout, (active, always)), spread
