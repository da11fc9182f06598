"""Neuron hit spectra (spec section 2).

For each neuron ``n`` and a set of labelled inputs, the four counts are the inputs that
are passing and activate ``n`` (``as``), failing and activate ``n`` (``af``), passing
without activating it (``ns``) and failing without activating it (``nf``). With ``A``
the ``N x M`` boolean activity matrix and ``s`` the pass vector, ``as = A^T s`` and
``af = A^T (1 - s)``: one matrix product per batch, on the model's device.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from ..checks import check_int
from ..core.accumulator import Accumulator
from ..core.batches import Batch, iterate_batches
from ..core.capture import NeuronLayout, as_tensor
from ..core.inputs import check_data, unpack
from ..errors import DeepFaultError
from ._settings import batch_of, settings, threads_of
from .activity import ActivityLevels, activity_levels

if TYPE_CHECKING:
    from ..core.inputs import InputData, LabelData
    from ..core.runtime import Runtime
    from .config import RunConfig

__all__ = ["Spectrum", "SpectrumAccumulator", "spectrum_counts", "compute_spectrum", "compute_class_spectra"]


@dataclass(frozen=True)
class Spectrum:
    """The hit spectrum of every analysed neuron over one set of inputs.

    Attributes:
        layout: The analysed layers and the flat neuron numbering.
        a_s, a_f, n_s, n_f: ``(M,)`` int64 counts ``as``, ``af``, ``ns``, ``nf``
            (``as`` is a Python keyword, hence the underscore).
        threshold: A neuron is active when its value is greater than this (under the
            paper's rule; see ``activity``).
        seconds: Wall time of the analysis (for per-class spectra computed together,
            the shared time divided evenly).
        target_class: The class whose inputs were analysed, or ``None`` for a whole set.
        activity: Each neuron's own threshold where a layer takes its level
            (:class:`~.activity.ActivityLevels`); ``None``: ``threshold`` for every neuron.
    """

    layout: NeuronLayout
    a_s: np.ndarray
    a_f: np.ndarray
    n_s: np.ndarray
    n_f: np.ndarray
    threshold: float = 0.0
    seconds: float = 0.0
    target_class: int | None = None
    activity: ActivityLevels | None = field(default=None, compare=False)

    @property
    def num_passed(self) -> int:
        return int(self.a_s[0] + self.n_s[0]) if len(self.a_s) else 0

    @property
    def num_failed(self) -> int:
        return int(self.a_f[0] + self.n_f[0]) if len(self.a_f) else 0

    @property
    def num_inputs(self) -> int:
        return self.num_passed + self.num_failed

    @property
    def counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(as, af, ns, nf)``, the arguments of every measure."""
        return self.a_s, self.a_f, self.n_s, self.n_f

    def to_dict(self) -> dict:
        return {
            "target_class": self.target_class,
            "threshold": self.threshold,
            "num_inputs": self.num_inputs,
            "num_passed": self.num_passed,
            "num_failed": self.num_failed,
            "num_neurons": self.layout.num_neurons,
            "layers": self.layout.to_dict(),
            "seconds": self.seconds,
            "activity": None if self.activity is None else self.activity.to_dict(),
        }


def _check_labels(y: torch.Tensor, n: int, num_classes: int | None) -> None:
    if y.ndim != 1 or len(y) != n:
        raise DeepFaultError(
            f"labels must be a 1-D array with one label per input ({n}); got shape {tuple(y.shape)}"
        )
    if len(y) and int(y.min()) < 0:
        raise DeepFaultError(f"labels must be non-negative class indices; got {int(y.min())}")
    if num_classes is not None and len(y) and int(y.max()) >= num_classes:
        raise DeepFaultError(
            f"label {int(y.max())} is outside the model's {num_classes} classes (0..{num_classes - 1})"
        )


def spectrum_counts(
    values: torch.Tensor, passed: torch.Tensor, group: torch.Tensor, groups: int,
    threshold: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The counts of one batch: the pure half of :class:`SpectrumAccumulator`.

    Args:
        values: ``(B, M)`` neuron values.
        passed: ``(B,)`` bool, whether each input is classified correctly.
        group: ``(B,)`` int64 group index in ``range(groups)``, or ``-1`` for no group.
        groups: Number of groups (one per analysed class).
        threshold: A neuron is active when its value is greater than this: one number, or an
            ``(M,)`` tensor of each neuron's own threshold.

    Returns:
        ``as`` and ``af`` of shape ``(groups, M)`` and the passed and failed totals of
        shape ``(groups,)``, all int64 on the CPU.
    """
    device = values.device
    member = torch.nn.functional.one_hot((group.to(device) + 1).clamp(min=0), groups + 1)
    member = member[:, 1:].to(torch.float32)  # (B, G); inputs in no group drop out
    ok = passed.to(device=device, dtype=torch.float32)[:, None]
    if isinstance(threshold, torch.Tensor):
        threshold = threshold.to(device=device, dtype=values.dtype)
    active = (values > threshold).to(torch.float32)  # (B, M)
    # Exact: 0/1 products summed over at most batch_size < 2**24 inputs.
    w = torch.stack([member * ok, member * (1 - ok)])  # (2, B, G)
    counts = (w.transpose(1, 2) @ active).round().to(torch.int64).cpu()
    totals = w.sum(1).round().to(torch.int64).cpu()
    return counts[0], counts[1], totals[0], totals[1]


class SpectrumAccumulator(Accumulator):
    """Hit-spectrum counts of ``groups`` disjoint groups of inputs, batch by batch.

    ``update(values, passed, group)`` adds a batch; ``compute()`` returns
    ``(a_s, a_f, n_pass, n_fail)`` as int64 numpy arrays (``(G, M)``, ``(G, M)``, ``(G,)``,
    ``(G,)``); two accumulators over different inputs merge into the one over both.
    """

    # State (add_state): a_s and a_f are (G, M), None before the first batch.
    a_s: torch.Tensor | None
    a_f: torch.Tensor | None
    n_pass: torch.Tensor
    n_fail: torch.Tensor

    def __init__(self, groups: int, *, threshold: float | np.ndarray | torch.Tensor = 0.0):
        super().__init__()
        self.groups = check_int("groups", groups)
        self.threshold: float | torch.Tensor = (
            _check_thresholds(threshold) if isinstance(threshold, (np.ndarray, torch.Tensor))
            else check_threshold(threshold))
        self.add_state("a_s", None, "sum")
        self.add_state("a_f", None, "sum")
        self.add_state("n_pass", torch.zeros(groups, dtype=torch.int64), "sum")
        self.add_state("n_fail", torch.zeros(groups, dtype=torch.int64), "sum")

    def update(self, values: torch.Tensor, passed: torch.Tensor, group: torch.Tensor) -> None:
        a_s, a_f, n_pass, n_fail = spectrum_counts(values, passed, group, self.groups, self.threshold)
        self.a_s = a_s if self.a_s is None else self.a_s + a_s
        self.a_f = a_f if self.a_f is None else self.a_f + a_f
        self.n_pass += n_pass
        self.n_fail += n_fail

    def compute(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        if self.a_s is None or self.a_f is None:
            raise DeepFaultError("no inputs to analyse: the input set is empty")
        return self.a_s.numpy(), self.a_f.numpy(), self.n_pass.numpy(), self.n_fail.numpy()


def check_threshold(threshold) -> float:
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        raise DeepFaultError(f"threshold must be a finite number; got {threshold!r}") from None
    if not np.isfinite(value):
        raise DeepFaultError(f"threshold must be a finite number; got {threshold!r}")
    return value


def _check_thresholds(thresholds) -> torch.Tensor:
    """Per-neuron thresholds as a 1-D float32 tensor, each finite."""
    t = torch.as_tensor(np.asarray(thresholds.cpu() if isinstance(thresholds, torch.Tensor) else thresholds,
                                   dtype=np.float32))
    if t.ndim != 1 or not bool(torch.isfinite(t).all()):
        raise DeepFaultError(f"thresholds must be a 1-D array of finite numbers; got shape {tuple(t.shape)}")
    return t


def _spectra(
    model: nn.Module,
    inputs,
    labels,
    groups: int,
    group_of: Callable[[torch.Tensor], torch.Tensor],
    *,
    layers: Sequence[str] | None,
    threshold: float | ActivityLevels,
    batch_size: int | str,
    progress: bool = False,
    on_batch: Callable[[Batch], object] | None = None,
) -> tuple[NeuronLayout, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Counts for ``groups`` disjoint groups of inputs in one pass over the data.

    ``group_of(y_batch) -> (B,)`` long tensor of group indices in ``range(groups)``, or
    ``-1`` for inputs in no group. Returns the layout, ``as`` and ``af`` of shape
    ``(groups, M)``, the passed and failed totals of shape ``(groups,)``, and the seconds.
    ``on_batch(batch)`` sees every batch first (``run`` keeps the predictions from it).
    """
    start_time = time.perf_counter()
    levels = threshold if isinstance(threshold, ActivityLevels) else None
    acc = SpectrumAccumulator(groups, threshold=threshold.thresholds if isinstance(threshold, ActivityLevels)
                              else threshold)
    x: torch.Tensor | DataLoader
    if isinstance(inputs, DataLoader):  # streamed; its batches carry the labels unless given
        x, y = inputs, labels
    else:
        x = as_tensor(inputs)
        if len(x) == 0:
            raise DeepFaultError("no inputs to analyse: the input set is empty")
        y = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
        _check_labels(y.long().cpu(), len(x), None)
    layout = None
    for b in iterate_batches(model, x, labels=y, layers=layers, batch_size=batch_size,
                             progress=progress and "spectrum"):
        if b.labels is None:
            raise DeepFaultError("a spectrum needs labels: pass labels=..., or a DataLoader that yields "
                                 "(input, label) batches")
        assert b.values is not None  # neurons are captured
        if on_batch is not None:
            on_batch(b)
        _check_labels(b.labels, len(b.labels), b.outputs.shape[1])
        if levels is not None and layout is None and b.layout is not None:
            levels.check(b.layout)
        passed = b.outputs.argmax(dim=1).cpu() == b.labels
        acc.update(b.values, passed, group_of(b.labels))
        layout = b.layout
    a_s, a_f, n_pass, n_fail = acc.compute()
    assert layout is not None  # acc.compute() raises without a batch
    return layout, a_s, a_f, n_pass, n_fail, time.perf_counter() - start_time


def compute_spectrum(
    model: nn.Module,
    inputs: InputData,
    labels: LabelData | None = None,
    config: RunConfig | None = None,
    *,
    target_class: int | None = None,
    runtime: Runtime | None = None,
    levels: ActivityLevels | None = None,
    **old: Any,
) -> Spectrum:
    """The hit spectrum of every analysed neuron.

    Args:
        model: The classifier; analysed in ``eval()`` mode without autograd, on its device.
        inputs: ``(N, ...)`` array or tensor, or any form
            :func:`~deepfault.core.inputs.inputs_and_labels` takes; a ``DataLoader`` is
            streamed (one batch in memory at a time).
        labels: ``(N,)`` integer labels (``None``: the labels ``inputs`` carries; given
            labels win).
        target_class: Analyse only the inputs with this label (DeepFault's per-class
            spectrum). ``None`` analyses every input.
        config: The spectrum settings of a :class:`~.config.RunConfig`: ``layers`` (module
            names to analyse; ``None`` means the default,
            :func:`~deepfault.core.capture.default_layers`: the residual/transformer blocks'
            outputs, else every Linear/Conv layer except the logits layer), ``threshold``
            (a neuron is active when its value is greater than this) and ``activity`` (where
            a neuron's own level replaces the threshold, :mod:`~.activity`). Default
            ``RunConfig()``.
        runtime: Threads, progress bar and batch size (inputs per forward pass; the counts do
            not depend on it) of the call.
        levels: The neurons' levels profiled beforehand
            (:func:`~.activity.activity_levels` on the training split, as ``run`` does);
            ``None``: profiled on ``inputs`` themselves where ``config.activity`` needs them.
        **old: The old keywords (``layers=``, ``threshold=``, ``batch_size=``, ``threads=``,
            ``progress=``): deprecated.

    Returns:
        A :class:`Spectrum` whose counts satisfy ``as + af + ns + nf = N`` (per class).

    Raises:
        DeepFaultError: Unknown layer, labels outside the model's classes, inputs the
            model cannot take, NaN/infinite inputs or activations, or no input of
            ``target_class``.

    Examples:
        >>> spec = compute_spectrum(model, x_test, y_test, target_class=3)  # doctest: +SKIP
        >>> spec.num_failed, spec.layout.num_neurons  # doctest: +SKIP
    """
    config, runtime = settings("compute_spectrum", config, runtime, old)
    with threads_of(runtime, model):
        return _compute_spectrum(model, inputs, labels, target_class, layers=config.layers,
                                 threshold=_rule(model, inputs, config, runtime, levels),
                                 batch_size=batch_of(config, runtime), progress=bool(runtime.progress))


def _rule(model: nn.Module, inputs, config: RunConfig, runtime: Runtime, levels: ActivityLevels | None
          ) -> float | ActivityLevels:
    """What decides activity: ``levels`` when given, else those ``config.activity`` needs profiled
    on ``inputs`` (the threshold alone where every layer takes it).
    """
    if levels is not None:
        return levels
    x = inputs if isinstance(check_data(inputs), DataLoader) else unpack(inputs, None)[0]
    found = activity_levels(model, x, activity=config.activity, threshold=config.threshold,
                            layers=config.layers, batch_size=batch_of(config, runtime))
    return config.threshold if found is None else found


def _compute_spectrum(model: nn.Module, inputs, labels, target_class: int | None, *, layers, threshold,
                      batch_size, progress: bool) -> Spectrum:
    """:func:`compute_spectrum` on its settings."""
    if isinstance(check_data(inputs), DataLoader):
        return _streamed_spectrum(model, inputs, labels, target_class, layers=layers, threshold=threshold,
                                  batch_size=batch_size, progress=progress)
    inputs, labels = unpack(inputs, labels)
    if labels is None:
        raise DeepFaultError("compute_spectrum needs labels: pass labels=..., or data that carries them")
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if target_class is not None:
        target_class = int(target_class)
        mask = y == target_class
        n_inputs = len(inputs)  # unpacked: a tensor or an array
        if y.ndim != 1 or len(y) != n_inputs:
            raise DeepFaultError(
                f"labels must be a 1-D array with one label per input ({n_inputs}); "
                f"got shape {tuple(y.shape)}"
            )
        if not mask.any():
            raise DeepFaultError(f"no input has label {target_class}; nothing to analyse")
        # Only the class's inputs go through the model.
        index = np.flatnonzero(mask)
        if isinstance(inputs, torch.Tensor):
            inputs = inputs[torch.as_tensor(index, device=inputs.device)]
        else:
            inputs = np.asarray(inputs)[index]
        labels = y[index]

    def group_of(yb: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(yb)
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, inputs, labels, 1, group_of, layers=layers, threshold=threshold,
        batch_size=batch_size, progress=progress,
    )
    return _make(layout, a_s[0], a_f[0], int(n_pass[0]), int(n_fail[0]), threshold, seconds,
                 target_class)


def _streamed_spectrum(model, loader, labels, target_class, *, layers, threshold, batch_size,
                       progress=False) -> Spectrum:
    """:func:`compute_spectrum` over a ``DataLoader`` in one streaming pass: the inputs of
    other classes go through the model too (a loader cannot be indexed) and count in no group.
    """
    tc = None if target_class is None else int(target_class)

    def group_of(yb: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(yb) if tc is None else torch.where(yb == tc, 0, -1)
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, loader, labels, 1, group_of, layers=layers, threshold=threshold, batch_size=batch_size,
        progress=progress)
    if tc is not None and int(n_pass[0]) + int(n_fail[0]) == 0:
        raise DeepFaultError(f"no input has label {tc}; nothing to analyse")
    return _make(layout, a_s[0], a_f[0], int(n_pass[0]), int(n_fail[0]), threshold, seconds, tc)


def compute_class_spectra(
    model: nn.Module,
    inputs,
    labels,
    classes: Sequence[int],
    config: RunConfig | None = None,
    *,
    runtime: Runtime | None = None,
    levels: ActivityLevels | None = None,
    **old: Any,
) -> dict[int, Spectrum]:
    """Per-class spectra for several classes in one pass over the inputs.

    Equal, class by class, to :func:`compute_spectrum` with ``target_class=c``; the
    spectrum time is the shared time divided evenly between the classes.

    Args:
        model: The classifier.
        inputs: The inputs, as in :func:`compute_spectrum` (a ``DataLoader`` is streamed).
        labels: Their labels (``None``: the labels ``inputs`` carries).
        classes: The classes whose spectra to compute.
        config: ``layers`` and ``threshold``, as in :func:`compute_spectrum`.
        runtime: Threads, progress bar and batch size of the call.
        levels: The neurons' levels, as in :func:`compute_spectrum`.
        **old: The old keywords, as in :func:`compute_spectrum`: deprecated.
    """
    config, runtime = settings("compute_class_spectra", config, runtime, old)
    with threads_of(runtime, model):
        return _class_spectra(model, inputs, labels, classes, layers=config.layers,
                              threshold=_rule(model, inputs, config, runtime, levels),
                              batch_size=batch_of(config, runtime), progress=bool(runtime.progress))


def _class_spectra(model: nn.Module, inputs, labels, classes: Sequence[int], *, layers, threshold, batch_size,
                   progress: bool) -> dict[int, Spectrum]:
    """:func:`compute_class_spectra` on its settings."""
    if not isinstance(check_data(inputs), DataLoader):  # a loader is streamed by _spectra
        inputs, labels = unpack(inputs, labels)
    classes = [int(c) for c in classes]
    if any(c < 0 for c in classes):
        # lookup[-1] would be the slot of the labels above every class: they would count as c
        raise DeepFaultError(f"classes must be non-negative class indices; got {min(classes)}")
    # No classes: a one-entry lookup that is never used (SpectrumAccumulator refuses 0 groups).
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, inputs, labels, len(classes), _group_lookup(classes), layers=layers, threshold=threshold,
        batch_size=batch_size, progress=progress,
    )
    return {
        c: _make(layout, a_s[g], a_f[g], int(n_pass[g]), int(n_fail[g]), threshold,
                 seconds / len(classes), c)
        for g, c in enumerate(classes)
    }


def _spectra_and_predictions(
    model: nn.Module,
    inputs: torch.Tensor | np.ndarray,
    labels: np.ndarray,
    classes: Sequence[int],
    *,
    layers: Sequence[str] | None = None,
    threshold: float | ActivityLevels = 0.0,
    batch_size: int | str = "auto",
    on_batch: Callable[[Batch], object] | None = None,
) -> tuple[dict[int, Spectrum], np.ndarray]:
    """:func:`compute_class_spectra` (no thread rule) and every input's predicted class, from the
    same pass: ``run`` needs both and makes one forward pass per input for them
    (docs/deepfault.md, "Passes per input").

    The inputs of other ``classes`` are predicted only; ``on_batch`` sees each
    :class:`~deepfault.core.batches.Batch` before it is counted. Returns the spectra by
    class, as :func:`compute_class_spectra` returns them, and the ``(N,)`` int64 arg-max
    predictions.
    """
    classes = [int(c) for c in classes]
    # One (N,) int64 array filled batch by batch: a list of per-batch tensors, concatenated at
    # the end, pins a small heap block per batch and the resident set grows with N.
    predicted = np.empty(len(inputs), dtype=np.int64)

    def keep(b: Batch) -> None:
        if on_batch is not None:
            on_batch(b)
        predicted[b.start : b.stop] = b.outputs.argmax(dim=1).cpu().numpy()
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, inputs, labels, max(len(classes), 1), _group_lookup(classes), layers=layers,
        threshold=threshold, batch_size=batch_size, on_batch=keep)
    spectra = {c: _make(layout, a_s[g], a_f[g], int(n_pass[g]), int(n_fail[g]), threshold,
                        seconds / len(classes), c) for g, c in enumerate(classes)}
    return spectra, predicted


def _group_lookup(classes: Sequence[int]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``labels -> group index`` (``-1``: in no group) of ``classes``."""
    lookup = torch.full((max(classes, default=-1) + 2,), -1, dtype=torch.long)
    for g, c in enumerate(classes):
        lookup[c] = g

    def group_of(yb: torch.Tensor) -> torch.Tensor:
        return lookup[yb.clamp(max=len(lookup) - 1)]
    return group_of


def _spectra_shard(model: nn.Module, columns: tuple, options: tuple, context) -> tuple:
    """One shard's counts and predictions (a worker's job of :func:`spread_spectra_and_predictions`)."""
    classes, layers, threshold = options
    x, y = columns
    predicted = np.empty(len(x), dtype=np.int64)
    outputs = [0]

    def keep(b: Batch) -> None:
        outputs[0] = int(b.outputs.shape[1])
        predicted[b.start : b.stop] = b.outputs.argmax(dim=1).cpu().numpy()
    counts = _spectra(model, x, y, max(len(classes), 1), _group_lookup(classes), layers=layers,
                      threshold=threshold, batch_size=context.batch_size, on_batch=keep)
    return counts, predicted, outputs[0]


def spread_spectra_and_predictions(model: nn.Module, inputs, labels, classes: Sequence[int], *,
                                   layers: Sequence[str] | None, threshold: float | ActivityLevels,
                                   runtime: Runtime):
    """:func:`_spectra_and_predictions` over the shards of ``runtime.parallel``'s workers
    (:mod:`deepfault.core.shards`): the counts summed (exact), the predictions joined in order.

    Returns:
        ``(spectra by class, (N,) predictions, the models' number of outputs, the Spread)``.
    """
    from ..core.shards import sharded_pass

    classes = [int(c) for c in classes]
    results, spread = sharded_pass("deepfault spectrum", _spectra_shard, model, (inputs, np.asarray(labels)),
                                   (classes, layers, threshold), runtime=runtime)
    layout = results[0][0][0]
    a_s, a_f, n_pass, n_fail = (sum(r[0][i] for r in results) for i in range(1, 5))
    seconds = sum(r[0][5] for r in results)
    spectra = {c: _make(layout, a_s[g], a_f[g], int(n_pass[g]), int(n_fail[g]), threshold,
                        seconds / len(classes), c) for g, c in enumerate(classes)}
    return spectra, np.concatenate([r[1] for r in results]), min(r[2] for r in results), spread


def _make(layout, a_s, a_f, n_pass, n_fail, threshold, seconds, target_class) -> Spectrum:
    levels = threshold if isinstance(threshold, ActivityLevels) else None
    if levels is not None:
        threshold = levels.threshold
    return Spectrum(
        layout=layout,
        a_s=a_s,
        a_f=a_f,
        n_s=n_pass - a_s,
        n_f=n_fail - a_f,
        threshold=float(threshold),
        seconds=seconds,
        target_class=target_class,
        activity=levels,
    )
