"""Model outputs checked: finite, one per class, independent of the batch, logits not probabilities.

Every method reads a model's outputs as class scores. Four ways a model can return numbers
that look like scores and are not, each refused in one line (:class:`DeepFaultError`,
exit 2 in the CLI) instead of turning into a silently wrong result:

- **Not finite.** A NaN weight, a BatchNorm with a negative ``running_var``, an overflow:
  :func:`check_outputs_finite` runs on every batch of :func:`~.batches.iterate_batches`
  (one ``isfinite().all()`` on the ``(B, classes)`` outputs, already computed) and on the
  first batch of :func:`check_model_outputs`. On a failure the batch is run once more with
  a forward hook on every leaf module, to name the first layer whose output is not finite.
- **Not one per class.** :func:`check_model_outputs` compares the output width with the
  data set's class count.
- **Probabilities taken for logits.** A model taken to return logits whose every output row
  is non-negative and sums to 1 ends in a softmax that could not be split off.
- **Mixing the inputs of a batch.** A softmax over the batch axis (``dim=0``), or anything
  else that makes one input's output depend on the others in its batch, is found by running
  the first input alone and comparing with its output in the batch.

:func:`check_model_outputs` costs two forward passes: a few inputs, then the first one
alone; :func:`~deepfault.models.prepare.prepare_model` runs it once per model.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import DeepFaultError
from .capture import eval_mode, forward, forward_hooks, model_device

__all__ = ["nonfinite_layer", "check_outputs_finite", "check_model_outputs", "probability_rows", "SAMPLE",
           "TRANSPARENT_LEAVES", "last_leaf", "ends_in_softmax"]

#: Inputs the one-time check runs (the first of them also alone).
SAMPLE = 8

#: Batch independence: ``|alone - in batch| <= ATOL + RTOL * max |in batch|`` over the input's
#: outputs (float32 kernels may take another path for another batch size, TF32 convolutions on
#: a GPU lose about 1e-3 of the scale; a softmax over the batch axis moves outputs by a large
#: share of theirs: 1 against 1/n).
RTOL, ATOL = 1e-2, 1e-4


#: Leaves that are the identity at inference, skipped when looking for a final softmax.
TRANSPARENT_LEAVES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.Identity)


def last_leaf(model: nn.Module) -> nn.Module | None:
    """``model``'s last leaf module in registration order, identity-like leaves
    (:data:`TRANSPARENT_LEAVES`) skipped; ``None`` for a model without leaves.
    """
    leaves = [m for m in model.modules() if not list(m.children())]
    while leaves and isinstance(leaves[-1], TRANSPARENT_LEAVES):
        leaves.pop()
    return leaves[-1] if leaves else None


def ends_in_softmax(model: nn.Module) -> bool:
    """Whether ``model``'s last leaf module (:func:`last_leaf`) is an ``nn.Softmax`` or
    ``nn.LogSoftmax``: it returns (log-)probabilities, not logits.
    """
    return isinstance(last_leaf(model), (nn.Softmax, nn.LogSoftmax))


def _first_tensor(output) -> torch.Tensor | None:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        return next((o for o in output if isinstance(o, torch.Tensor)), None)
    return None


def nonfinite_layer(model: nn.Module, x: torch.Tensor) -> str | None:
    """The qualified name of the first leaf module (in execution order) whose output holds a
    NaN or infinity for inputs ``x``, ``"(its forward, after its last layer)"`` when every
    layer's output is finite but the model's is not, ``None`` when the output is finite.

    Runs ``x`` once, in ``eval()`` mode without autograd, with a forward hook on every leaf
    module (removed afterwards).
    """
    leaves = {name or "(model)": m for name, m in model.named_modules()
              if not list(m.children()) and not isinstance(m, torch.jit.ScriptModule)}  # no hooks there
    found: list[str] = []

    def make_hook(name: str):
        def hook(module, inputs, output):
            t = _first_tensor(output)
            if not found and t is not None and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                found.append(name)
        return hook

    with eval_mode(model), torch.inference_mode(), forward_hooks(leaves, make_hook):
        out = forward(model, x.to(model_device(model)))
    if found:
        return found[0]
    return None if bool(torch.isfinite(out).all()) else "(its forward, after its last layer)"


def check_outputs_finite(model: nn.Module, x: torch.Tensor, outputs: torch.Tensor, *, start: int = 0,
                         what: str = "the model") -> None:
    """Raise when ``outputs`` (``model``'s for inputs ``x``) hold a NaN or an infinity, naming
    the input and the first layer where a non-finite value appears (:func:`nonfinite_layer`).
    Costs one ``isfinite().all()`` when they are finite.
    """
    finite = torch.isfinite(outputs)
    if bool(finite.all()):
        return
    row = int((~finite).flatten(1).any(1).nonzero()[0]) if outputs.ndim > 1 else 0
    layer = nonfinite_layer(model, x[row : row + 1])
    kind = next((type(m).__name__ for n, m in model.named_modules() if n == layer), None)
    where = "only when run in a batch" if layer is None else f"first in layer {layer!r}"
    if kind is not None:
        where += f", a {kind}" + (" with a negative running_var?" if "BatchNorm" in kind else "")
    raise DeepFaultError(
        f"{what} gives NaN or infinite outputs for input {start + row} ({where}); its weights or "
        "buffers are broken (the inputs are finite): retrain or reload it"
    )


def probability_rows(out: torch.Tensor) -> bool:
    """Whether every row of ``out`` looks like a softmax's: ``>= 0``, summing to 1 (within
    ``1e-4``), two or more classes, some value strictly between 0 and 1 (a softmax never gives an
    exact 0 and 1 together unless its logits differ by over 100), and not every row the same (a
    constant model, such as one whose weights are zero and whose bias is one-hot, is no evidence).
    """
    if out.shape[1] < 2 or not bool((out >= 0).all()):
        return False
    sums = out.double().sum(1)
    if not bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4)):
        return False
    return bool(((out > 0) & (out < 1)).any()) and not bool((out == out[:1]).all())


def _outputs(model: nn.Module, x: torch.Tensor, what: str) -> torch.Tensor:
    out = forward(model, x)
    if out.ndim != 2:
        raise DeepFaultError(f"{what} must output (N, classes) scores; got shape {tuple(out.shape)} for "
                             f"{len(x)} inputs; give a classifier")
    if not out.is_floating_point():
        raise DeepFaultError(f"{what} returns {str(out.dtype).removeprefix('torch.')} outputs; class scores "
                             "must be floating point (logits): return the scores, not their argmax or a "
                             "rounding of them")
    return out


def check_model_outputs(model: nn.Module, x: torch.Tensor, *, num_classes: int | None = None,
                        classes_known: bool = True, output_kind: str = "logits",
                        what: str = "the model", data: str = "the data set") -> int:
    """Run ``model`` once on ``x`` (a few inputs, native layout), and its first input alone, and
    refuse outputs no method can read (see the module's docstring).

    Args:
        model: The classifier (its mode is restored afterwards).
        x: ``(n, ...)`` inputs, ``n >= 1`` (one input is run twice as a batch of two).
        num_classes: The data set's class count (``None``: not checked).
        classes_known: The data set states its classes (``False``: only labels seen, so a
            wider output is allowed; a narrower one never is).
        output_kind: ``"logits"`` or ``"probabilities"``; a ``"logits"`` model whose outputs
            are rows of probabilities is refused.
        what: The model's name in messages.
        data: The data set's name in messages.

    Returns:
        The number of outputs per input.

    Raises:
        DeepFaultError: Outputs that are not ``(n, classes)``, not finite, of another width
            than ``num_classes``, probabilities taken for logits, or different for an input
            alone and in a batch.
    """
    x = x.to(model_device(model))
    if len(x) == 1:
        x = torch.cat([x, x])
    with eval_mode(model), torch.inference_mode():
        out = _outputs(model, x, what)
        check_outputs_finite(model, x, out, what=what)
        alone = _outputs(model, x[:1], what)
    width = int(out.shape[1])
    if num_classes is not None and (width < num_classes or (width > num_classes and classes_known)):
        more = width > num_classes
        raise DeepFaultError(
            f"{what} has {width} outputs per input but {data} has {num_classes} classes; "
            + ("give the model trained on this data set, or a data set of its classes (an .npz with "
               "class_names)" if more else
               "give the model trained on this data set (its labels would index outputs it lacks)"))
    same_shape = alone.shape == out[:1].shape
    diff = float((alone - out[:1]).abs().max()) if same_shape else float("nan")
    if not same_shape or not diff <= ATOL + RTOL * float(out[:1].abs().max()):
        raise DeepFaultError(
            f"{what} gives an input other outputs alone than in a batch (largest difference {diff:.3g}): "
            "its outputs depend on the other inputs of the batch (a softmax over the batch axis, "
            "dim=0?), so every result would depend on --batch-size; fix the model (softmax over dim=1)")
    if output_kind == "logits" and probability_rows(out):
        raise DeepFaultError(
            f"{what} is taken to return logits but every output row is a probability distribution "
            "(>= 0, summing to 1): it ends in a softmax inside forward() that cannot be split off; "
            "save the model without its final softmax (an nn.Softmax as its last layer is split off "
            "automatically)")
    return width
