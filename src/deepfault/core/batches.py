"""The one loop over batches: model outputs and neuron values, batch by batch.

Every analysis in deepfault (spectra, coverage, prediction, evaluation, the fuzzers'
executions) runs its inputs through :func:`iterate_batches`, which puts the model in
``eval()`` mode without autograd, registers the hooks of one :func:`~.capture.capture`,
moves each slice to the model's device, checks outputs and neuron values, and yields a
:class:`Batch`. Consumers fold batches into an :class:`~.accumulator.Accumulator`, so a
result never depends on the batch size.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from ..core.entry import applies_threads
from ..errors import DeepFaultError
from .capture import NeuronLayout, as_tensor, capture, check_finite, eval_mode, forward, model_device
from .inputs import InputData, LabelData, check_data, inputs_and_labels, num_inputs, stream
from .mapped import release
from .memory import AUTO, AUTO_MAX, BatchSize, check_batch_size, resolve_batch_size
from .outputs import check_outputs_finite

__all__ = ["Batch", "Neurons", "NeuronKeywords", "iterate_batches", "predict", "activations",
           "correct_inputs"]


@dataclass(frozen=True)
class Batch:
    """One slice of the inputs after a forward pass.

    Attributes:
        start, stop: The slice of the inputs, ``inputs[start:stop]``.
        inputs: ``(B, ...)`` float32 inputs on the model's device.
        outputs: ``(B, classes)`` model outputs (logits or probabilities) on the device.
        values: ``(B, M)`` neuron values on the device, or ``None`` without capture.
        layout: The neuron layout of ``values`` (``None`` without capture).
        labels: ``(B,)`` int64 labels on the CPU when labels were given.
    """

    start: int
    stop: int
    inputs: torch.Tensor
    outputs: torch.Tensor
    values: torch.Tensor | None = None
    layout: NeuronLayout | None = None
    labels: torch.Tensor | None = None


@dataclass(frozen=True)
class Neurons:
    """Which neuron values :func:`iterate_batches` captures, and how (as in :func:`~.capture.capture`).

    Attributes:
        layers: The neuron layers (``None``: the model's default layers).
        transform: ``"raw"`` or ``"layer-minmax"``.
    """

    layers: Sequence[str] | str | None = None
    transform: str = "raw"


class NeuronKeywords(TypedDict, total=False):
    """:class:`Neurons`' fields as :func:`iterate_batches`' keywords."""

    layers: Sequence[str] | str | None
    transform: str


def iterate_batches(
    model: nn.Module,
    inputs,
    *,
    labels=None,
    neurons: bool | Neurons = True,
    batch_size: BatchSize = AUTO,
    check: bool = True,
    progress: bool | str = False,
    **keywords: Unpack[NeuronKeywords],
) -> Iterator[Batch]:
    """Run ``inputs`` through ``model`` in batches, capturing neuron values.

    Args:
        model: The classifier, run in ``eval()`` mode (restored afterwards) under
            ``torch.inference_mode()`` on its own device.
        inputs: ``(N, ...)`` array or tensor (checked finite), or any form
            :func:`~.inputs.inputs_and_labels` takes; a ``DataLoader`` is streamed, one of
            its batches in memory at a time (split when larger than ``batch_size``), and
            gives ``Batch.labels`` from its batches.
        labels: Optional ``(N,)`` labels, sliced alongside (``Batch.labels``); they win
            over a loader's own.
        neurons: Capture neuron values: ``True`` (the default layers, raw values), a
            :class:`Neurons` naming the layers and transform, or ``False`` (outputs only, no hooks).
        batch_size: Inputs per forward pass, or ``"auto"`` (the default): sized from the memory
            one input takes and the memory free (:func:`~.memory.choose_batch_size`), at
            most 1,024 and the number of inputs. Results do not depend on it.
        check: Check that outputs are ``(B, classes)`` and finite (a failure names the first
            layer where a NaN appears) and that neuron values are finite.
        progress: Show a progress bar over the inputs (:func:`~.progress.progress_bar`); a
            string names what is counted.
        **keywords: :class:`Neurons`' fields one by one (``layers=["fc1"]``); each replaces
            that field of ``neurons``.

    Yields:
        One :class:`Batch` per slice, in order. Hooks are removed when the generator is
        exhausted or closed.
    """
    batch_size = check_batch_size(batch_size)
    check_data(inputs)
    slices, total = _slices(model, inputs, labels, batch_size)
    spec = replace(neurons if isinstance(neurons, Neurons) else Neurons(), **keywords)
    hooks = capture(model, spec.layers, transform=spec.transform) if neurons else contextlib.nullcontext()
    bar = contextlib.nullcontext()
    if progress:
        from .progress import progress_bar

        bar = progress_bar(total if total >= 0 else None, desc=progress if isinstance(progress, str) else "",
                           unit="input", leave=False)
    with eval_mode(model), hooks as rec, torch.inference_mode(), bar as shown:
        yield from _run(model, slices, rec, shown, check=check)


def _slices(model: nn.Module, inputs, labels, batch_size: BatchSize) -> tuple[Iterator, int]:
    """The ``(inputs, labels)`` slices of one forward pass each, and the number of inputs
    (``-1`` when a loader does not say).
    """
    if isinstance(inputs, DataLoader):  # streamed: one of its batches in memory at a time
        total = num_inputs(inputs)
        if batch_size == AUTO:  # sized from the loader's first input, then its batches re-cut
            slices = _auto_slices(model, _checked_slices(stream(inputs, labels, batch_size=AUTO_MAX)), total)
            next(slices, None)  # sized now, before the hooks are registered: the probe must not fire them
            return slices, total
        return _checked_slices(stream(inputs, labels, batch_size=int(batch_size))), total
    # A memory map, or an array of another dtype than float32 (uint8 images): converted and
    # checked batch by batch, never whole (a float32 copy of uint8 images is 4x their size).
    lazy = _lazy(inputs)
    x = inputs if lazy else as_tensor(inputs)
    y = None if labels is None else _checked_labels(labels, len(x))
    size = int(resolve_batch_size(model, x[:1], AUTO, count=len(x)) if batch_size == AUTO else batch_size)
    return ((as_tensor(x[i : i + size], start=i) if lazy else x[i : i + size],
             None if y is None else y[i : i + size])
            for i in range(0, len(x), size)), len(x)


def _checked_labels(labels, count: int) -> torch.Tensor:
    """``labels`` as a CPU int64 tensor, refused unless it is 1-D with ``count`` items."""
    y = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels).long().cpu()
    if y.ndim != 1 or len(y) != count:
        raise DeepFaultError(
            f"labels must be a 1-D array with one label per input ({count}); "
            f"got shape {tuple(y.shape)}")
    return y


def _run(model: nn.Module, slices: Iterator, rec, shown, *, check: bool) -> Iterator[Batch]:
    """The forward passes of :func:`iterate_batches`, inside its eval mode, hooks and bar."""
    device = model_device(model)
    start = 0
    for x_part, yb in slices:
        xb = x_part.to(device)
        out = forward(model, xb)
        if check and out.ndim != 2:
            raise DeepFaultError(
                f"the model's output must be (N, classes); got shape {tuple(out.shape)}"
            )
        values = layout = None
        if rec is not None:
            values = rec.collect()
            layout = rec.layout
            if check and layout is not None:  # collect() has set it
                check_finite(values, layout, start)
        if check:  # after the neuron values, whose message names the neuron
            check_outputs_finite(model, xb, out, start=start)
        if shown is not None:
            shown.update(len(xb))
        yield Batch(start, start + len(xb), xb, out, values, layout, None if yb is None else yb.cpu())
        release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
        start += len(xb)


def _lazy(inputs) -> bool:
    """Whether ``inputs`` is a memory map or an array/tensor that is not float32 (sliced first,
    then converted), rather than converted whole.
    """
    if isinstance(inputs, np.memmap):
        return inputs.ndim >= 2
    if isinstance(inputs, (np.ndarray, torch.Tensor)):
        return inputs.ndim >= 2 and inputs.dtype not in (np.float32, torch.float32)
    return False


def _auto_slices(model, slices, total):
    """``slices`` re-cut to the batch :func:`~.memory.resolve_batch_size` picks from the first.

    The first ``next()`` reads the first slice, sizes the batch and yields ``None``; the
    slices follow.
    """
    first = next(slices, None)
    if first is None:
        yield None
        return
    size = resolve_batch_size(model, first[0][:1], AUTO, count=total if total >= 0 else None)
    yield None  # the caller's first next() ends here: sized before its hooks
    for x, y in itertools.chain([first], slices):
        for lo in range(0, len(x), size):
            yield x[lo : lo + size], None if y is None else y[lo : lo + size]


def _checked_slices(slices):
    """A loader's slices as float32 inputs checked finite (as :func:`~.capture.as_tensor`
    checks a whole array), their positions counted across batches.
    """
    start = 0
    for x, y in slices:
        try:
            xb = as_tensor(x)
        except DeepFaultError as err:
            raise DeepFaultError(f"{err} (in the batch starting at input {start})") from None
        yield xb, y
        start += len(xb)


@applies_threads
def predict(model: nn.Module, inputs, *, batch_size: BatchSize = AUTO, threads: int | str | None = "auto",
            progress: bool = False) -> torch.Tensor:
    """``(N, classes)`` model outputs on the CPU, in eval mode and without autograd.

    Args:
        model: The network.
        inputs: The inputs, in any form :func:`~.inputs.inputs_and_labels` takes (a
            ``DataLoader`` is streamed).
        batch_size: Inputs per forward pass, or ``"auto"`` (sized from the memory, as in
            :func:`iterate_batches`).
        threads: PyTorch CPU threads for the call, restored afterwards: ``"auto"`` (the
            command line's rule: the free cores for a small model on the CPU; the
            ``DEEPFAULT_THREADS`` environment variable sets another default), a count, or
            ``None`` (PyTorch's setting).
        progress: Show a progress bar over the inputs (as the command line does).
    """
    parts = [b.outputs.cpu() for b in iterate_batches(model, inputs, neurons=False, batch_size=batch_size,
                                                      progress=progress and "predict")]
    return torch.cat(parts) if parts else torch.zeros(0, 0)


@applies_threads
def activations(
    model: nn.Module,
    inputs,
    *,
    layers: Sequence[str] | str | None = None,
    transform: str = "raw",
    batch_size: BatchSize = AUTO,
    threads: int | str | None = "auto",
    progress: bool = False,
) -> tuple[NeuronLayout, torch.Tensor]:
    """All neuron values for a set of inputs.

    Args:
        model: The network; analysed in ``eval()`` mode, its mode restored afterwards.
        inputs: ``(N, ...)`` array or tensor, or any form :func:`~.inputs.inputs_and_labels`
            takes (a ``DataLoader`` is streamed; the result holds every input's values).
        layers: The neuron layers, as in :func:`~.capture.capture`.
        transform: ``"raw"`` or ``"layer-minmax"``, as in :func:`~.capture.capture`.
        batch_size: Inputs per forward pass, or ``"auto"`` (as in :func:`iterate_batches`);
            the result does not depend on it.
        threads: PyTorch CPU threads for the call, as in :func:`predict`.
        progress: Show a progress bar over the inputs (as the command line does).

    Returns:
        The layout and a ``(N, M)`` float32 CPU tensor of neuron values.
    """
    layout, out = None, []
    for b in iterate_batches(model, inputs, layers=layers, transform=transform, batch_size=batch_size,
                             check=False, progress=progress and "activations"):
        if b.values is None or b.layout is None:  # cannot happen: neurons are captured by default
            raise RuntimeError("iterate_batches returned no neuron values")
        check_finite(b.values, b.layout, b.start)
        layout = b.layout
        out.append(b.values.cpu())
    if layout is None:  # no inputs: one empty pass to learn nothing is not possible; say so
        raise DeepFaultError("no inputs: the input set is empty")
    return layout, torch.cat(out)


@applies_threads
def correct_inputs(
    model: nn.Module, data: InputData, labels: LabelData | None = None, *, cls: int | None = None,
    batch_size: BatchSize = AUTO, threads: int | str | None = "auto", progress: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The inputs the model classifies correctly (of class ``cls`` only, when given).

    Args:
        model: The network (a module or a prepared model).
        data: The inputs, in any form :func:`inputs_and_labels` takes.
        labels: Labels for an array or tensor ``data``, as in :func:`inputs_and_labels`;
            required unless ``data`` carries its own.
        cls: Keep only this class.
        batch_size: Inputs per forward pass, or ``"auto"`` (sized from the memory, as in
            :func:`iterate_batches`).
        threads: PyTorch CPU threads for the call, as in :func:`predict`.
        progress: Show a progress bar over the inputs (as the command line does).

    Returns:
        ``(inputs, labels, index)``: the selected inputs, their labels and their positions in
        ``data``.

    Raises:
        DeepFaultError: No labels, or ``cls`` outside the model's outputs.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Linear(2, 2)
        >>> with torch.no_grad():
        ...     _ = model.weight.copy_(torch.eye(2)); _ = model.bias.zero_()
        >>> x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
        >>> _, _, index = correct_inputs(model, x, torch.tensor([0, 0, 0]), cls=0)
        >>> index.tolist()
        [0, 2]
    """
    module = getattr(model, "module", model)
    x, y = inputs_and_labels(data, labels)
    if y is None:
        raise DeepFaultError("correct_inputs needs labels: pass labels=..., or data that carries them")
    predicted = predict(module, x, batch_size=batch_size, progress=progress).argmax(1)
    if cls is not None:
        classes = int(predict(module, x[:1]).shape[1])
        if isinstance(cls, bool) or not 0 <= int(cls) < classes:
            raise DeepFaultError(f"cls must be a class of the model (0..{classes - 1}); got {cls!r}")
    keep = predicted.cpu() == y.cpu()
    if cls is not None:
        keep &= y.cpu() == int(cls)
    index = np.flatnonzero(keep.numpy())
    return x[index], y[index], index
