"""When a neuron is *active*: the paper's threshold, or the neuron's own level (spec section 1).

The paper's rule (a neuron is active when its value is above ``threshold``, 0 by default) is
kept where it is the paper's: the outputs of ``Linear`` and ``Conv`` layers (the papers' and the
prototype's default layers) and any other dense ``(N, U)`` output, such as a LeakyReLU after a
``Linear``. Everywhere else (a residual or transformer block's output, a channel's mean after a
ReLU, tokens) a value above 0 says nothing: such a neuron is above 0 on every input, every score
ties and the top-k is index order. There a neuron is active when its value is above its own
*level*: its median over a fixed sample of the profiled inputs (the training split in a run).

The levels are estimated from a fixed sample of at most :data:`PROFILE_SAMPLE` inputs, evenly
spaced over the profiled split (no random draw), streamed batch by batch: memory holds the
sample's ``(n, M)`` values and never grows with the number of inputs.

``RunConfig.activity`` chooses: ``"auto"`` (the paper's rule on its layers, the level elsewhere),
``"zero"`` (the threshold on every neuron, as before) or ``"quantile"`` (the level on every
neuron).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from ..core.batches import iterate_batches
from ..core.capture import NEURON_MODULE_TYPES, SOFTMAX_LAYER, NeuronLayout, forward_hooks, resolve_layers
from ..errors import DeepFaultError

__all__ = ["ACTIVITY_RULES", "PROFILE_SAMPLE", "LEVEL_QUANTILE", "ActivityLevels", "layer_rule",
           "profile_sample", "neuron_levels", "activity_levels"]

#: ``RunConfig.activity``'s choices.
ACTIVITY_RULES = ("auto", "zero", "quantile")
#: The most inputs the levels are estimated from.
PROFILE_SAMPLE = 1000
#: The quantile of a neuron's values on the sample that is its level (the median).
LEVEL_QUANTILE = 0.5


@dataclass(frozen=True)
class ActivityLevels:
    """Each analysed neuron's activity threshold, and the rule of each layer.

    Attributes:
        layout: The analysed layers.
        thresholds: ``(M,)`` float32: a neuron is active when its value is greater than this.
        rules: ``{layer: "zero" | "quantile"}``: the paper's threshold, or the neuron's level.
        sample: How many profiled inputs the levels were estimated from.
        threshold: The paper's threshold, taken by the layers under ``"zero"``.
    """

    layout: NeuronLayout
    thresholds: np.ndarray
    rules: dict[str, str]
    sample: int
    threshold: float = 0.0

    @property
    def uses_levels(self) -> bool:
        """Whether any layer takes the neurons' own levels."""
        return any(rule == "quantile" for rule in self.rules.values())

    def to_dict(self) -> dict:
        """The rule of each layer, the level's quantile and the sample size (the thresholds
        themselves are not recorded).
        """
        return {"rules": dict(self.rules), "quantile": LEVEL_QUANTILE, "sample": self.sample}

    def check(self, layout: NeuronLayout) -> None:
        """Refuse levels profiled on other layers than a spectrum's."""
        if layout.names != self.layout.names or layout.num_neurons != self.layout.num_neurons:
            raise DeepFaultError("the activity levels were profiled on other layers "
                                 f"({', '.join(self.layout.names)}) than the spectrum's "
                                 f"({', '.join(layout.names)}); profile them with the same layers")


def layer_rule(module: nn.Module, ndim: int, activity: str) -> str:
    """The rule of one layer: ``"zero"`` (value above the threshold) or ``"quantile"`` (above the
    neuron's level), for ``activity`` and a module whose output has ``ndim`` dimensions.

    ``"auto"``: the paper's rule for ``Linear``/``Conv`` outputs and any dense ``(N, U)`` output;
    the level for block outputs, channel means after an activation, and tokens.
    """
    if activity not in ACTIVITY_RULES:
        raise DeepFaultError(f"activity must be one of {', '.join(ACTIVITY_RULES)}; got {activity!r}")
    if activity != "auto":
        return activity
    return "zero" if isinstance(module, NEURON_MODULE_TYPES) or ndim <= 2 else "quantile"


def profile_sample(x, size: int | None = None):
    """At most ``size`` (``None``: :data:`PROFILE_SAMPLE`) rows of ``x``, evenly spaced (first and
    last included; no random draw).
    """
    size = PROFILE_SAMPLE if size is None else size
    n = len(x)
    if n <= size:
        return x
    index = np.unique(np.linspace(0, n - 1, size).round().astype(np.int64))
    return x[torch.as_tensor(index, device=x.device)] if isinstance(x, torch.Tensor) else np.asarray(x)[index]


def neuron_levels(values: torch.Tensor | np.ndarray, quantile: float = LEVEL_QUANTILE) -> np.ndarray:
    """``(M,)`` float32: each column's ``quantile`` (linear interpolation) of ``(n, M)`` values."""
    v = np.asarray(values.cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float64)
    if v.ndim != 2 or not len(v):
        raise DeepFaultError(f"levels need (n, M) values with n >= 1; got shape {v.shape}")
    return np.quantile(v, quantile, axis=0).astype(np.float32)


def _first_inputs(loader: DataLoader, size: int) -> torch.Tensor:
    """The first ``size`` inputs a loader yields (its batches' first element)."""
    parts, n = [], 0
    for batch in loader:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        x = torch.as_tensor(x)
        parts.append(x[: size - n])
        n += len(parts[-1])
        if n >= size:
            break
    if not parts:
        raise DeepFaultError("no inputs to profile: the input set is empty")
    return torch.cat(parts)


def activity_levels(model: nn.Module, inputs, *, activity: str = "auto", threshold: float = 0.0,
                    layers: Sequence[str] | str | None = None, batch_size: int | str = "auto"
                    ) -> ActivityLevels | None:
    """Each analysed neuron's activity threshold under ``activity``, estimated on ``inputs``.

    Args:
        model: The classifier.
        inputs: The profiled inputs (a run's training split): an ``(N, ...)`` array or tensor, or
            a ``DataLoader`` (its first inputs). At most :data:`PROFILE_SAMPLE` of them, evenly
            spaced, go through the model.
        activity: ``"auto"``, ``"zero"`` or ``"quantile"`` (:func:`layer_rule`).
        threshold: The paper's threshold, for the layers under ``"zero"``.
        layers: The analysed layers, as :func:`~deepfault.core.capture.capture` takes them.
        batch_size: Inputs per forward pass (the levels do not depend on it).

    Returns:
        ``None`` when every layer takes the paper's threshold (the spectrum is then exactly the
        fixed-threshold one; for ``Linear``/``Conv`` layers alone no input goes through the model
        here), else the :class:`ActivityLevels`.
    """
    if activity == "zero":
        return None
    names = resolve_layers(model, layers)
    modules = dict(model.named_modules())
    if activity == "auto" and all(n == SOFTMAX_LAYER or isinstance(modules.get(n), NEURON_MODULE_TYPES)
                                  for n in names):
        return None  # the paper's layers: decided without a pass over the inputs
    modules[SOFTMAX_LAYER] = model
    ndims: dict[str, int] = {}

    def hook(name: str):
        def record(_module, _inputs, output) -> None:
            if isinstance(output, torch.Tensor):
                ndims.setdefault(name, output.dim())
        return record

    sample = (_first_inputs(inputs, PROFILE_SAMPLE) if isinstance(inputs, DataLoader)
              else profile_sample(inputs))
    if not len(sample):
        raise DeepFaultError("no inputs to profile the neurons' levels on: the input set is empty")
    rows, layout = [], None
    with forward_hooks({n: modules[n] for n in names if n in modules}, hook):
        for b in iterate_batches(model, sample, layers=layers, batch_size=batch_size):
            assert b.values is not None  # neurons are captured
            rows.append(b.values.detach().to("cpu", torch.float32))
            layout = b.layout
    assert layout is not None  # at least one input went through
    rules = {la.name: layer_rule(modules[la.name], ndims.get(la.name, 2), activity) for la in layout.layers}
    if not any(rule == "quantile" for rule in rules.values()):
        return None
    levels = neuron_levels(torch.cat(rows))
    fixed = np.repeat([rules[la.name] == "zero" for la in layout.layers], [la.size for la in layout.layers])
    thresholds = np.where(fixed, np.float32(threshold), levels).astype(np.float32)
    return ActivityLevels(layout, thresholds, rules, len(sample), float(threshold))
