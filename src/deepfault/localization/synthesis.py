"""Suspiciousness-guided input synthesis (the paper's Algorithm 2, spec section 4).

For every input ``t`` and selected neurons ``SN``::

    g  = mean over n in SN of  d phi(t, n) / d t     (each term divided by its RMS
                                                      when normalize=True, the default)
    t' = clip(t + clip(step * g, -d, +d), lo, hi)

A whole batch is one forward pass. With raw gradients the mean gradient is the gradient
of the mean activation: one backward pass per batch. With normalised gradients the ``k``
per-neuron gradients are computed in one vectorised call (``is_grads_batched``), or with
one backward pass per neuron for convolutional models (where ``vmap`` itself loops, see
``_LOOPED_UNDER_VMAP``) and for models that ``vmap`` cannot trace.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..checks import MAX_GRADIENT_ITERATIONS, check_bounds, check_int
from ..core.capture import as_tensor, capture, eval_mode, forward, model_device
from ..core.entry import renamed
from ..core.gradients import RMS_EPS
from ..core.gradients import normalize as rms_normalize  # a normalize= argument shadows the name
from ..core.mapped import release
from ..core.memory import resolve_batch_size
from ..core.progress import progress_bar
from ..errors import DeepFaultError
from ..models.prepare import PreparedModel, resolve_model
from ._settings import batch_of, settings, threads_of

if TYPE_CHECKING:
    from ..core.capture import _Recorder
    from ..core.inputs import InputData
    from ..core.runtime import Runtime
    from .config import RunConfig
    from .selection import Selection

__all__ = ["synthesize", "neuron_pairs", "check_synthesis_args"]

log = logging.getLogger(__name__)



def neuron_pairs(neurons) -> list[tuple[str, int]]:
    """``(layer, unit)`` pairs from a Selection, Neuron objects or pairs."""
    items = getattr(neurons, "neurons", neurons)
    pairs = [(n.layer, n.unit) if hasattr(n, "layer") else (str(n[0]), int(n[1])) for n in items]
    if not pairs:
        raise DeepFaultError("no neurons given: select at least one suspicious neuron")
    return pairs


#: The largest float32: a step or distance beyond it overflows the model's arithmetic.
FLOAT32_MAX = _FLOAT32_MAX = 3.4028234663852886e38


def check_synthesis_args(step, distance, bounds, iterations, *,
                         step_name: str = "step") -> tuple[float, float, float, float, int]:
    """Validate synthesis settings; returns ``(step, distance, lo, hi, iterations)`` as numbers.
    ``step_name`` is the step's name in messages (``step_size`` where the caller calls it so).
    """
    for name, value in ((step_name, step), ("distance", distance)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and math.isfinite(value) and value >= 0):
            raise DeepFaultError(f"{name} must be a finite number >= 0; got {value!r}")
        if value > _FLOAT32_MAX:
            raise DeepFaultError(
                f"{name}={value!r} is beyond the float32 range the model computes in (at most about 3.4e38); "
                "choose a value in the data's units, e.g. 0.1 for 0-1 pixels"
            )
    lo, hi = check_bounds(bounds)
    iterations = check_int("iterations", iterations, maximum=MAX_GRADIENT_ITERATIONS)
    return float(step), float(distance), lo, hi, iterations


#: Modules whose backward ``vmap`` (``is_grads_batched``) runs as a loop over the batched
#: gradients followed by a concatenation: for models containing them a plain loop of
#: backward passes is faster (about 1.8x on cifar_3 at k=50, benchmarks/NOTES.md).
_LOOPED_UNDER_VMAP: tuple[type[nn.Module], ...] = (
    nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d,
)


def _prefers_loop(model: nn.Module) -> bool:
    return any(isinstance(m, _LOOPED_UNDER_VMAP) for m in model.modules())


def _direction(model: nn.Module, rec: _Recorder, x: torch.Tensor, pairs: Sequence[tuple[str, int]],
               normalize: bool, loop: bool, record: Sequence[tuple[str, int]] = ()
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ascent direction ``g`` for a batch ``x`` (same shape as ``x``), and the values of the
    ``record`` neurons at ``x`` from the same forward pass (``None`` when none are asked for).
    """
    x = x.detach().requires_grad_(True)
    forward(model, x)
    layers = rec.collect_layers()
    layout = rec.layout
    assert layout is not None  # collect_layers() sets it
    for layer, unit in [*pairs, *record]:
        layout.index(layer, unit)  # an unknown layer or unit: the engine's one-line error
    # Each neuron's value taken from its own layer's values, never from a concatenation of all
    # layers: a per-neuron backward pass then starts at that neuron's layer (the spec's loop),
    # instead of sending zeros back from the deepest selected layer.
    columns = [layers[layer][:, unit] for layer, unit in pairs]
    phi = torch.stack(columns, dim=1)  # (B, k)
    recorded = None
    if record:
        recorded = torch.stack([layers[layer][:, unit] for layer, unit in record], dim=1).detach().cpu()
    if not phi.requires_grad:
        raise DeepFaultError(
            "the model computes without autograd (its forward uses torch.no_grad, detach or numpy), "
            "so the neurons have no gradient to follow; remove that from forward to synthesize inputs"
        )
    k = phi.shape[1]
    if not normalize:
        (g,) = torch.autograd.grad(phi.mean(dim=1).sum(), x)
        return g, recorded
    spread = (-1, *([1] * (x.ndim - 1)))  # a (B,) vector against (B, *input)
    if not loop:
        eye = torch.eye(k, dtype=phi.dtype, device=phi.device)
        try:
            (grads,) = torch.autograd.grad(
                phi, x, grad_outputs=eye[:, None, :].expand(k, *phi.shape), is_grads_batched=True
            )
        except RuntimeError as err:  # vmap cannot trace some models; same result, k passes
            log.debug("batched gradients unavailable (%s); one backward pass per neuron", err)
        else:
            # grads: (k, B, *input); each input's gradient for each neuron divided by its RMS.
            rms = grads.flatten(2).pow(2).mean(dim=2).sqrt().add(RMS_EPS)
            return (grads / rms.view(k, *spread)).mean(dim=0), recorded
    total: torch.Tensor | None = None
    for j in range(k):
        (g,) = torch.autograd.grad(columns[j].sum(), x, retain_graph=j < k - 1)
        g = rms_normalize(g)
        total = g if total is None else total.add_(g)
    assert total is not None  # k >= 1: neuron_pairs refuses an empty selection
    return total.div_(k), recorded


@renamed(step="step_size")
def synthesize(
    model: nn.Module | PreparedModel,
    inputs: InputData,
    neurons: Selection | Iterable,
    config: RunConfig | None = None,
    *,
    bounds: Sequence[float] | None = (0.0, 1.0),
    runtime: Runtime | None = None,
    **old: Any,
) -> torch.Tensor:
    """New inputs that raise the values of the suspicious neurons.

    Args:
        model: The network (or a prepared model), used in ``eval()`` mode on its device; not
            modified.
        inputs: ``(N, ...)`` inputs to start from (the paper uses correctly classified ones),
            in any form :func:`~deepfault.core.inputs.inputs_and_labels` takes (read whole:
            the result holds one new input per input).
        neurons: A :class:`~deepfault.localization.selection.Selection`, or ``(layer, unit)`` pairs.
        config: The synthesis settings of a :class:`~.config.RunConfig`: ``step_size``
            (multiplier of the gradient), ``distance`` (largest change of any input element,
            the L_inf bound ``d``), ``normalize`` (divide each neuron's gradient by its root
            mean square before averaging: the paper's results; ``False`` uses raw gradients)
            and ``iterations`` (repeat the step on the new input, every element kept within
            ``distance`` of the original; the paper takes one). Default ``RunConfig()``.
        bounds: ``(lo, hi)``, the valid input range of the data set (default ``(0, 1)``, an
            image's; ``None``: a prepared model's). Not guessed from the inputs: a few inputs
            of one class rarely span the valid range, and inputs outside it are refused.
        runtime: Threads, progress bar and batch size (inputs per forward/backward pass; ``"auto"``
            sizes it from the memory one input's forward and backward pass takes, at most
            1,024; the result does not depend on it) of the call.
        **old: The old keywords (``step_size=``, ``distance=``, ``normalize=``,
            ``iterations=``, ``batch_size=``, ``threads=``, ``progress=``): deprecated.

    Returns:
        ``(N, ...)`` float32 CPU tensor with ``|t' - t|_inf <= distance`` and every
        element in ``[lo, hi]``.

    Raises:
        DeepFaultError: Negative ``step_size`` or ``distance``, bad ``bounds``, inputs outside
            ``bounds``, NaN inputs, unknown layers or units, or inputs the model cannot take.

    Examples:
        >>> new = synthesize(model, x_correct, selection, RunConfig(distance=0.1))  # doctest: +SKIP
    """
    config, runtime = settings("synthesize", config, runtime, old, stacklevel=4)  # under @renamed
    if bounds is None:
        bounds = getattr(model, "bounds", None) or (0.0, 1.0)
    model, _ = resolve_model(model)
    with threads_of(runtime, model), _inputs_bar(runtime, inputs) as on_batch:
        new, _ = _synthesize_recording(model, inputs, neurons, step_size=config.step_size,
                                      distance=config.distance, bounds=bounds, normalize=config.normalize,
                                      iterations=config.iterations, batch_size=batch_of(config, runtime),
                                      on_batch=on_batch)
    return new


@contextlib.contextmanager
def _inputs_bar(runtime: Runtime, inputs: InputData) -> Iterator[Callable[[int], object] | None]:
    """The progress bar's ``update`` over the inputs (closed on the way out), or ``None`` when
    the runtime shows no progress.
    """
    if not runtime.progress:
        yield None
        return
    bar = progress_bar(len(as_tensor(inputs)), desc="synthesize", unit="input", leave=False)
    try:
        yield bar.update
    finally:
        bar.close()


def _synthesize_recording(
    model: nn.Module,
    inputs: InputData,
    neurons: Selection | Iterable,
    *,
    step_size: float,
    distance: float,
    bounds: Sequence[float],
    normalize: bool = True,
    iterations: int = 1,
    batch_size: int | str = "auto",
    record: Sequence[tuple[str, int]] = (),
    on_batch: Callable[[int], object] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`synthesize` (a module, no thread rule, no bar), which also returns the values of the
    ``record`` neurons at the inputs, read from the first step's forward pass.

    The evaluation needs the originals' neuron values; the first step computes them anyway,
    so ``run`` takes them from here instead of a forward pass of its own
    (docs/deepfault.md, "Passes per input").

    ``record`` names the ``(layer, unit)`` neurons whose values at the inputs are returned;
    ``on_batch`` is called with the number of inputs of each finished batch. Returns the new
    inputs, as :func:`synthesize` returns them, and the ``(N, len(record))`` float32 CPU
    values of the ``record`` neurons at ``inputs``.
    """
    x_all = as_tensor(inputs).detach().cpu()
    step, distance, lo, hi, iterations = check_synthesis_args(step_size, distance, bounds, iterations,
                                                              step_name="step_size")
    pairs = neuron_pairs(neurons)
    record = [(str(layer), int(unit)) for layer, unit in record]
    if len(x_all) and (x_all.min() < lo - 1e-6 or x_all.max() > hi + 1e-6):
        raise DeepFaultError(
            f"inputs lie in [{float(x_all.min()):g}, {float(x_all.max()):g}], outside bounds "
            f"[{lo:g}, {hi:g}]; pass the data set's valid range as bounds=(lo, hi)"
        )
    device = model_device(model)
    batch_size = resolve_batch_size(model, x_all, batch_size, backward=True)
    layer_names = list(dict.fromkeys(layer for layer, _ in [*pairs, *record]))
    out, before = [], []
    with eval_mode(model), capture(model, layer_names) as rec, torch.enable_grad():
        loop = _prefers_loop(model)
        for start in range(0, len(x_all), batch_size):
            x0 = x_all[start : start + batch_size].to(device)
            cur = x0
            for i in range(iterations):
                g, recorded = _direction(model, rec, cur, pairs, normalize, loop, record if i == 0 else ())
                if recorded is not None:
                    before.append(recorded)
                cur = cur.detach() + (step * g).clamp(-distance, distance)
                cur = torch.minimum(torch.maximum(cur, x0 - distance), x0 + distance).clamp(lo, hi)
            out.append(cur.detach().cpu())
            release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
            if on_batch is not None:
                on_batch(len(x0))
    values = torch.cat(before) if before else torch.zeros(len(x_all), len(record))
    return (torch.cat(out) if out else x_all.clone()), values
