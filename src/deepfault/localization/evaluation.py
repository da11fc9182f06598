"""Measuring synthesized inputs (spec section 5, the paper's Tables 3 to 7).

For synthesized inputs and the originals they came from: the model's cross-entropy loss
and accuracy against the originals' labels, the share whose prediction changed, L1, L2
and L_inf distances, and the share of suspicious neurons whose value increased (also
for the top ``k'`` neurons of the ranking, ``k' >= k``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.batches import iterate_batches, predict
from ..core.capture import NeuronLayout, as_tensor
from ..core.kinds import OUTPUT_KINDS
from ..errors import DeepFaultError
from ..models.prepare import PreparedModel, resolve_model
from ._settings import batch_of, settings, threads_of
from .synthesis import neuron_pairs

if TYPE_CHECKING:
    from ..core.inputs import InputData, LabelData
    from ..core.runtime import Runtime
    from .selection import Selection

__all__ = ["Evaluation", "TopRanked", "evaluate", "cross_entropy", "predict"]


@dataclass(frozen=True)
class Evaluation:
    """Per-input measurements of synthesized inputs; summary means via :meth:`summary`.

    Attributes:
        loss: ``(N,)`` cross-entropy of the model on each synthesized input.
        correct: ``(N,)`` whether the model still predicts the original label.
        pred_original, pred_synthesized: ``(N,)`` arg-max predictions.
        l1, l2, linf: ``(N,)`` distances between each synthesized input and its original.
        increased: ``(N,)`` share of the selected neurons whose value increased.
        increased_at: ``k' -> (N,)`` share of the top ``k'`` ranked neurons that increased.
        surprise: ``kind -> (N,)`` surprise adequacy (``"dsa"``, ``"lsa"``) of each synthesized
            input against the training data; empty unless
            :func:`~deepfault.localization.protocol.add_surprise` filled it.
        surprise_original: The same scores of the originals.
    """

    loss: np.ndarray
    correct: np.ndarray
    pred_original: np.ndarray
    pred_synthesized: np.ndarray
    l1: np.ndarray
    l2: np.ndarray
    linf: np.ndarray
    increased: np.ndarray
    increased_at: dict[int, np.ndarray] = field(default_factory=dict)
    surprise: dict[str, np.ndarray] = field(default_factory=dict)
    surprise_original: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def num_inputs(self) -> int:
        return len(self.loss)

    def summary(self) -> dict:
        """Means over the inputs (``None`` when there are none)."""

        def mean(a):
            return float(np.mean(a)) if len(a) else None

        out = {
            "inputs": self.num_inputs,
            "loss": mean(self.loss),
            "accuracy": mean(self.correct),
            "changed": mean(self.pred_original != self.pred_synthesized),
            "l1": mean(self.l1),
            "l2": mean(self.l2),
            "linf": mean(self.linf),
            "increased": mean(self.increased),
            "increased_at": {str(k): mean(v) for k, v in self.increased_at.items()},
        }
        if self.surprise:  # only when computed, so that results without it are unchanged
            out["surprise"] = {k: mean(v) for k, v in self.surprise.items()}
            out["surprise_original"] = {k: mean(v) for k, v in self.surprise_original.items()}
        return out

    def to_dict(self) -> dict:
        per_input = {
            "loss": self.loss.tolist(),
            "correct": self.correct.astype(bool).tolist(),
            "pred_original": self.pred_original.tolist(),
            "pred_synthesized": self.pred_synthesized.tolist(),
            "l1": self.l1.tolist(),
            "l2": self.l2.tolist(),
            "linf": self.linf.tolist(),
            "increased": self.increased.tolist(),
        }
        if self.surprise:
            per_input["surprise"] = {k: _json_floats(v) for k, v in self.surprise.items()}
            per_input["surprise_original"] = {k: _json_floats(v) for k, v in self.surprise_original.items()}
        summary = self.summary()
        for key in ("surprise", "surprise_original"):
            if key in summary:
                summary[key] = {k: _json_float(v) for k, v in summary[key].items()}
        return {"summary": summary, "per_input": per_input}


def _json_float(v: float | None) -> float | str | None:
    """A number for JSON: an infinite score as the string ``"inf"`` (as D*'s), NaN as ``None``."""
    if v is None or np.isnan(v):
        return None
    return v if np.isfinite(v) else ("inf" if v > 0 else "-inf")


def _json_floats(values: np.ndarray) -> list:
    return [_json_float(float(v)) for v in values]


def cross_entropy(outputs: torch.Tensor, labels: torch.Tensor, output_kind: str) -> torch.Tensor:
    """Per-input cross-entropy for logits, or for probabilities (softmax already applied)."""
    if output_kind == "logits":
        return F.cross_entropy(outputs, labels, reduction="none")
    if output_kind == "probabilities":
        return F.nll_loss(outputs.clamp_min(1e-12).log(), labels, reduction="none")
    raise DeepFaultError(f"output_kind must be one of {', '.join(OUTPUT_KINDS)}; got {output_kind!r}")


def _outputs_and_values(model, x: torch.Tensor, layers: list[str], batch_size: int | str, progress: bool
                        ) -> tuple[torch.Tensor, NeuronLayout, torch.Tensor]:
    """Outputs and the ``layers``' neuron values of ``x`` from one forward pass per input."""
    outputs, values, layout = [], [], None
    for b in iterate_batches(model, x, layers=layers, batch_size=batch_size,
                             progress=progress and "evaluate"):
        assert b.values is not None  # neurons are captured
        assert b.layout is not None
        outputs.append(b.outputs.cpu())
        values.append(b.values.cpu())
        layout = b.layout
    assert layout is not None  # callers pass at least one input
    return torch.cat(outputs), layout, torch.cat(values)


@dataclass(frozen=True)
class TopRanked:
    """What the top-``k'`` increase of :func:`evaluate` reads (the paper's Tables 6 and 7).

    Attributes:
        ranking: Every neuron as ``(layer, unit)``, most suspicious first.
        k_primes: Values ``k' >= k`` for which to report the share of the top ``k'`` ranked
            neurons that increased.
    """

    ranking: Sequence[tuple[str, int]]
    k_primes: Iterable[int] = ()


#: evaluate's old keywords that are no runtime field, each with the form that replaces it.
_OLD_EVALUATE = {"output_kind": "give a prepared model (prepare_model), which carries its output kind",
                 "ranking": "pass top=TopRanked(ranking, k_primes)",
                 "k_primes": "pass top=TopRanked(ranking, k_primes)"}


def evaluate(
    model: nn.Module | PreparedModel,
    originals: InputData,
    synthesized: InputData,
    labels: LabelData,
    neurons: Selection | Iterable,
    *,
    top: TopRanked | None = None,
    runtime: Runtime | None = None,
    **old: Any,
) -> Evaluation:
    """Measure synthesized inputs against their originals.

    Args:
        model: The network, or a prepared model (whose output kind is then used).
        originals: ``(N, ...)`` inputs synthesis started from, in any form
            :func:`~deepfault.core.inputs.inputs_and_labels` takes (read whole: the
            evaluation pairs each original with its synthesized input).
        synthesized: ``(N, ...)`` the inputs :func:`~deepfault.localization.synthesis.synthesize` made.
        labels: ``(N,)`` the originals' labels (``None``: the labels ``originals`` carries).
        neurons: The suspicious neurons (a Selection or ``(layer, unit)`` pairs).
        top: The ranking and the ``k'`` of the top-``k'`` increase (:class:`TopRanked`;
            ``None``: none reported).
        runtime: Threads, progress bar and batch size (inputs per forward pass) of the call.
        **old: The old keywords: ``batch_size=``, ``threads=``, ``progress=``, ``ranking=`` and
            ``k_primes=`` (deprecated), and ``output_kind=`` (``"probabilities"`` for a module
            that ends in a softmax; give a prepared model, which carries its output kind,
            instead; deprecated).

    Raises:
        DeepFaultError: Mismatched shapes, ``k'`` below ``k`` or above the ranking's length,
            NaN inputs.
    """
    output_kind, top = _old_evaluate_keywords(old, top)
    config, runtime = settings("evaluate", None, runtime, old)
    model, output_kind = resolve_model(model, output_kind)
    with threads_of(runtime, model):
        return _evaluate(model, originals, synthesized, labels, neurons,
                         None if top is None else top.ranking, () if top is None else top.k_primes,
                         output_kind=output_kind, batch_size=batch_of(config, runtime),
                         progress=bool(runtime.progress))


def _old_evaluate_keywords(old: dict, top: TopRanked | None) -> tuple[str | None, TopRanked | None]:
    """``(output_kind, top)`` from :func:`evaluate`'s old keywords (taken out of ``old``), each
    with a :class:`FutureWarning` naming its new form.
    """
    given = {k: old.pop(k) for k in _OLD_EVALUATE if k in old}
    for k in given:
        warnings.warn(f"evaluate(..., {k}=...) is deprecated: {_OLD_EVALUATE[k]}", FutureWarning,
                      stacklevel=3)
    if "ranking" in given or "k_primes" in given:
        if top is not None:
            raise DeepFaultError("evaluate takes top=TopRanked(ranking, k_primes) or the old ranking= and "
                                 "k_primes=, not both")
        if given.get("ranking") is None:
            if given.get("k_primes"):
                raise DeepFaultError("k_primes needs the full ranking of neurons (ranking=...)")
        else:
            top = TopRanked(given["ranking"], given.get("k_primes", ()))
    return given.get("output_kind"), top


def _evaluate(model, originals, synthesized, labels, neurons, ranking, k_primes, *, output_kind: str,
              batch_size, progress: bool) -> Evaluation:
    """:func:`evaluate` on its settings."""
    from ..core.inputs import check_data, inputs_and_labels

    x0, carried = inputs_and_labels(check_data(originals, "originals"), labels)
    x0 = as_tensor(x0, name="originals")
    x1 = as_tensor(synthesized, name="synthesized inputs")
    if carried is None:
        raise DeepFaultError("evaluate needs the originals' labels: pass labels=..., or originals that "
                             "carry them (a DataLoader or Dataset of (input, label) pairs)")
    y = carried.long().cpu()
    if x0.shape != x1.shape or len(y) != len(x0):
        raise DeepFaultError(
            f"originals {tuple(x0.shape)}, synthesized {tuple(x1.shape)} and labels "
            f"{tuple(y.shape)} must describe the same inputs"
        )
    pairs = neuron_pairs(neurons)
    k_primes = sorted({int(kp) for kp in k_primes})
    top: list[tuple[str, int]] = []  # the top max(k') ranked neurons
    if k_primes:
        if ranking is None:
            raise DeepFaultError("k_primes needs the full ranking of neurons (ranking=...)")
        for kp in k_primes:
            if not len(pairs) <= kp <= len(ranking):
                raise DeepFaultError(
                    f"k'={kp} must lie between k={len(pairs)} and the {len(ranking)} ranked neurons"
                )
        top = list(ranking[: max(k_primes)])
    return _evaluate_synthesized(model, x0, x1, y, pairs, top, k_primes, output_kind=output_kind,
                                batch_size=batch_size, progress=progress)


def _evaluate_synthesized(
    model: nn.Module,
    x0: torch.Tensor,
    x1: torch.Tensor,
    y: torch.Tensor,
    pairs: Sequence[tuple[str, int]],
    top: Sequence[tuple[str, int]] = (),
    k_primes: Sequence[int] = (),
    *,
    output_kind: str = "logits",
    batch_size: int | str = "auto",
    before: torch.Tensor | None = None,
    pred_original: np.ndarray | None = None,
    progress: bool = False,
) -> Evaluation:
    """:func:`evaluate` on checked arguments, the originals' side given when known.

    One forward pass per synthesized input gives its outputs and neuron values together;
    the originals get one as well unless ``before`` (their values of ``pairs + top``) and
    ``pred_original`` are given, as ``run`` gives them from its spectrum and synthesis
    passes (docs/deepfault.md, "Passes per input").

    ``x0``, ``x1`` are ``(N, ...)`` tensors, ``y`` the ``(N,)`` int64 CPU labels, ``top`` the
    top ``max(k_primes)`` ranked neurons, ``k_primes`` sorted, ``before`` the
    ``(N, len(pairs) + len(top))`` values of those neurons at ``x0``, ``pred_original`` the
    ``(N,)`` predictions on ``x0``.
    """
    n = len(x0)
    if n == 0:
        empty = np.zeros(0)
        return Evaluation(empty, empty.astype(bool), empty.astype(int), empty.astype(int),
                          empty, empty, empty, empty, {kp: empty for kp in k_primes})
    watched = [*pairs, *top]
    layers = list(dict.fromkeys(layer for layer, _ in watched))
    out1, layout, v1 = _outputs_and_values(model, x1, layers, batch_size, progress)
    cols = [layout.index(layer, unit) for layer, unit in watched]
    if before is None or pred_original is None:
        out0, layout0, v0 = _outputs_and_values(model, x0, layers, batch_size, progress)
        before = v0[:, [layout0.index(layer, unit) for layer, unit in watched]]
        pred_original = out0.argmax(1).numpy()
    if int(y.min()) < 0 or int(y.max()) >= out1.shape[1]:
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise DeepFaultError(
            f"label {bad} is outside the model's {out1.shape[1]} classes (0..{out1.shape[1] - 1}); "
            "give the originals' class indices"
        )
    loss = cross_entropy(out1, y, output_kind)
    diff = (x1 - x0).flatten(1)
    inc = (v1[:, cols] > before).numpy()
    inc_sn, inc_top = inc[:, : len(pairs)], inc[:, len(pairs) :]
    return Evaluation(
        loss=loss.numpy().astype(np.float64),
        correct=(out1.argmax(1) == y).numpy(),
        pred_original=np.asarray(pred_original),
        pred_synthesized=out1.argmax(1).numpy(),
        l1=diff.abs().sum(1).double().numpy(),
        l2=diff.double().norm(dim=1).numpy(),
        linf=diff.abs().amax(1).double().numpy() if diff.shape[1] else np.zeros(n),
        increased=inc_sn.mean(1),
        increased_at={kp: inc_top[:, :kp].mean(1) for kp in k_primes},
    )


def _concat_evaluations(parts: Sequence[Evaluation], k_primes: Sequence[int] = ()) -> Evaluation:
    """The evaluation of the inputs of ``parts``, in order (batch by batch evaluations joined)."""
    if not parts:
        empty = np.zeros(0)
        return Evaluation(empty, empty.astype(bool), empty.astype(int), empty.astype(int),
                          empty, empty, empty, empty, {kp: empty for kp in k_primes})
    if len(parts) == 1:
        return parts[0]

    def cat(name):
        return np.concatenate([getattr(p, name) for p in parts])
    return Evaluation(
        loss=cat("loss"), correct=cat("correct"), pred_original=cat("pred_original"),
        pred_synthesized=cat("pred_synthesized"), l1=cat("l1"), l2=cat("l2"), linf=cat("linf"),
        increased=cat("increased"),
        increased_at={kp: np.concatenate([p.increased_at[kp] for p in parts])
                      for kp in parts[0].increased_at},
    )
