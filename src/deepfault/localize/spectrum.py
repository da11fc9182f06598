"""Neuron hit spectra (spec section 2).

For each neuron ``n`` and a set of labelled inputs, the four counts are the inputs that
are passing and activate ``n`` (``as``), failing and activate ``n`` (``af``), passing
without activating it (``ns``) and failing without activating it (``nf``). With ``A``
the ``N x M`` boolean activity matrix and ``s`` the pass vector, ``as = A^T s`` and
``af = A^T (1 - s)``: one matrix product per batch, on the model's device.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..core.capture import (
    NeuronLayout,
    as_tensor,
    capture,
    check_finite,
    eval_mode,
    forward,
    model_device,
)
from ..errors import DeepFaultError

__all__ = ["Spectrum", "compute_spectrum", "compute_class_spectra"]


@dataclass(frozen=True)
class Spectrum:
    """The hit spectrum of every analysed neuron over one set of inputs.

    Attributes:
        layout: The analysed layers and the flat neuron numbering.
        a_s, a_f, n_s, n_f: ``(M,)`` int64 counts ``as``, ``af``, ``ns``, ``nf``
            (``as`` is a Python keyword, hence the underscore).
        threshold: A neuron is active when its value is greater than this.
        seconds: Wall time of the analysis (for per-class spectra computed together,
            the shared time divided evenly).
        target_class: The class whose inputs were analysed, or ``None`` for a whole set.
    """

    layout: NeuronLayout
    a_s: np.ndarray
    a_f: np.ndarray
    n_s: np.ndarray
    n_f: np.ndarray
    threshold: float = 0.0
    seconds: float = 0.0
    target_class: int | None = None

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


def _spectra(
    model: nn.Module,
    inputs,
    labels,
    groups: int,
    group_of,
    *,
    layers: Sequence[str] | None,
    threshold: float,
    batch_size: int,
) -> tuple[NeuronLayout, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """Counts for ``groups`` disjoint groups of inputs in one pass over the data.

    ``group_of(y_batch) -> (B,)`` long tensor of group indices in ``range(groups)``, or
    ``-1`` for inputs in no group. Returns the layout, ``as`` and ``af`` of shape
    ``(groups, M)``, the passed and failed totals of shape ``(groups,)``, and the seconds.
    """
    if batch_size < 1:
        raise DeepFaultError(f"batch_size must be at least 1; got {batch_size}")
    start_time = time.perf_counter()
    x = as_tensor(inputs)
    y = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
    y = y.long().cpu()
    _check_labels(y, len(x), None)
    if len(x) == 0:
        raise DeepFaultError("no inputs to analyse: the input set is empty")
    device = model_device(model)
    a_s = a_f = None
    n_pass = torch.zeros(groups, dtype=torch.int64)
    n_fail = torch.zeros(groups, dtype=torch.int64)
    with eval_mode(model), capture(model, layers) as rec, torch.inference_mode():
        for start in range(0, len(x), batch_size):
            xb = x[start : start + batch_size].to(device)
            yb = y[start : start + batch_size]
            logits = forward(model, xb)
            values = rec.collect()
            check_finite(values, rec.layout, start)
            if logits.ndim != 2:
                raise DeepFaultError(
                    f"the model's output must be (N, classes); got shape {tuple(logits.shape)}"
                )
            _check_labels(yb, len(yb), logits.shape[1])
            passed = (logits.argmax(dim=1).cpu() == yb).to(torch.float32)
            member = torch.nn.functional.one_hot((group_of(yb) + 1).clamp(min=0), groups + 1)
            member = member[:, 1:].to(torch.float32)  # (B, G); inputs in no group drop out
            active = (values > threshold).to(torch.float32)  # (B, M)
            # Exact: 0/1 products summed over at most batch_size < 2**24 inputs.
            w = torch.stack([member * passed[:, None], member * (1 - passed[:, None])])
            counts = (w.to(device).transpose(1, 2) @ active).round().to(torch.int64).cpu()
            if a_s is None:
                a_s = torch.zeros_like(counts[0])
                a_f = torch.zeros_like(counts[1])
            a_s += counts[0]
            a_f += counts[1]
            n_pass += (member * passed[:, None]).sum(0).round().long()
            n_fail += (member * (1 - passed[:, None])).sum(0).round().long()
    seconds = time.perf_counter() - start_time
    return rec.layout, a_s.numpy(), a_f.numpy(), n_pass.numpy(), n_fail.numpy(), seconds


def compute_spectrum(
    model: nn.Module,
    inputs,
    labels,
    *,
    target_class: int | None = None,
    layers: Sequence[str] | None = None,
    threshold: float = 0.0,
    batch_size: int = 1024,
) -> Spectrum:
    """The hit spectrum of every analysed neuron.

    Args:
        model: The classifier; analysed in ``eval()`` mode without autograd, on its device.
        inputs: ``(N, ...)`` array or tensor.
        labels: ``(N,)`` integer labels.
        target_class: Analyse only the inputs with this label (DeepFault's per-class
            spectrum). ``None`` analyses every input.
        layers: Module names to analyse; ``None`` means every Linear/Conv layer except
            the logits layer.
        threshold: A neuron is active when its value is greater than this.
        batch_size: Inputs per forward pass; the counts do not depend on it.

    Returns:
        A :class:`Spectrum` whose counts satisfy ``as + af + ns + nf = N`` (per class).

    Raises:
        DeepFaultError: Unknown layer, labels outside the model's classes, inputs the
            model cannot take, NaN/infinite inputs or activations, or no input of
            ``target_class``.

    Example:
        >>> spec = compute_spectrum(model, x_test, y_test, target_class=3)  # doctest: +SKIP
        >>> spec.num_failed, spec.layout.num_neurons  # doctest: +SKIP
    """
    y = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    if target_class is not None:
        target_class = int(target_class)
        mask = y == target_class
        if y.ndim != 1 or len(y) != len(inputs):
            raise DeepFaultError(
                f"labels must be a 1-D array with one label per input ({len(inputs)}); "
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

    def group_of(yb):
        return torch.zeros_like(yb)
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, inputs, labels, 1, group_of, layers=layers, threshold=threshold,
        batch_size=batch_size,
    )
    return _make(layout, a_s[0], a_f[0], int(n_pass[0]), int(n_fail[0]), threshold, seconds,
                 target_class)


def compute_class_spectra(
    model: nn.Module,
    inputs,
    labels,
    classes: Sequence[int],
    *,
    layers: Sequence[str] | None = None,
    threshold: float = 0.0,
    batch_size: int = 1024,
) -> dict[int, Spectrum]:
    """Per-class spectra for several classes in one pass over the inputs.

    Equal, class by class, to :func:`compute_spectrum` with ``target_class=c``; the
    spectrum time is the shared time divided evenly between the classes.
    """
    classes = [int(c) for c in classes]
    lookup = torch.full((max(classes) + 2,), -1, dtype=torch.long) if classes else None
    for g, c in enumerate(classes):
        lookup[c] = g
    def group_of(yb):
        return lookup[yb.clamp(max=len(lookup) - 1)]
    layout, a_s, a_f, n_pass, n_fail, seconds = _spectra(
        model, inputs, labels, len(classes), group_of, layers=layers, threshold=threshold,
        batch_size=batch_size,
    )
    return {
        c: _make(layout, a_s[g], a_f[g], int(n_pass[g]), int(n_fail[g]), threshold,
                 seconds / len(classes), c)
        for g, c in enumerate(classes)
    }


def _make(layout, a_s, a_f, n_pass, n_fail, threshold, seconds, target_class) -> Spectrum:
    return Spectrum(
        layout=layout,
        a_s=a_s,
        a_f=a_f,
        n_s=n_pass - a_s,
        n_f=n_fail - a_f,
        threshold=float(threshold),
        seconds=seconds,
        target_class=target_class,
    )
