"""Inputs as PyTorch users have them: tensors, numpy arrays, a ``Dataset`` or a ``DataLoader``.

Every public function that takes inputs passes them through
:func:`~deepfault.core.capture.as_tensor`, which accepts what :func:`inputs_and_labels`
accepts, so a torchvision data set (with a transform that returns tensors) or a
``DataLoader`` works wherever an array does. :func:`correct_inputs` is the everyday
selection "the inputs of class ``c`` that the model gets right".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from ..errors import DeepFaultError

__all__ = ["InputData", "LabelData", "inputs_and_labels", "is_torch_data", "unpack"]

InputData: TypeAlias = torch.Tensor | np.ndarray | tuple | TorchDataset | DataLoader
"""Inputs as a function takes them: a tensor or array ``(N, ...)``, an ``(inputs, labels)``
pair, a ``torch.utils.data.Dataset`` or a ``DataLoader`` (as ``inputs_and_labels`` reads them)."""

LabelData: TypeAlias = torch.Tensor | np.ndarray | Sequence[int]
"""Class labels ``(N,)``: a tensor, an array or a sequence of ints."""

#: Items read per step when a map-style data set is stacked.
_STACK_BATCH = 512


def is_torch_data(obj) -> bool:
    """Whether ``obj`` is a ``torch.utils.data`` data set or loader."""
    return isinstance(obj, (DataLoader, TorchDataset))


def _tensor(value, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError) as err:
        raise DeepFaultError(
            f"{what} of type {type(value).__name__} is not an array; give the data set a transform that "
            "returns tensors (for torchvision: transform=transforms.ToTensor())"
        ) from err


def _batches(loader):
    xs, ys = [], []
    try:
        batches = list(loader)
    except TypeError as err:  # default_collate refuses items that are not arrays
        raise DeepFaultError(
            f"the data set's items are not arrays ({err}); give the data set a transform that returns "
            "tensors (for torchvision: transform=transforms.ToTensor())"
        ) from None
    for batch in batches:
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            x, y = batch[0], batch[1]
        elif isinstance(batch, dict) and {"x", "y"} <= set(batch):
            x, y = batch["x"], batch["y"]
        else:
            x, y = batch, None
        xs.append(_tensor(x, "an input"))
        if y is not None:
            ys.append(_tensor(y, "a label").reshape(-1))
    if not xs:
        raise DeepFaultError("the data set or loader yielded no inputs")
    x = torch.cat(xs)
    y = torch.cat(ys).long() if len(ys) == len(xs) else None
    return x, y


def inputs_and_labels(data: InputData,
                      labels: LabelData | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(inputs, labels)`` from whatever holds them.

    Args:
        data: A tensor or array ``(N, ...)``; a ``(inputs, labels)`` pair; a
            ``torch.utils.data.Dataset`` whose items are ``(input, label)`` or an input (a
            torchvision data set with a ``ToTensor`` transform is one); or a ``DataLoader``
            yielding such batches. A loader is read once, in its order.
        labels: Labels for an array or tensor (ignored when ``data`` carries its own).

    Returns:
        The inputs as one tensor, and the labels as a ``long`` tensor or ``None``.

    Raises:
        DeepFaultError: Items that are not arrays (an image without a ``ToTensor``
            transform), or an empty data set.

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> ds = TensorDataset(torch.zeros(5, 1, 8, 8), torch.arange(5))
        >>> x, y = inputs_and_labels(DataLoader(ds, batch_size=2))
        >>> tuple(x.shape), y.tolist()
        ((5, 1, 8, 8), [0, 1, 2, 3, 4])
    """
    if isinstance(data, DataLoader):
        return _batches(data)
    if isinstance(data, TorchDataset):
        return _batches(DataLoader(data, batch_size=_STACK_BATCH, shuffle=False))
    if isinstance(data, tuple) and len(data) == 2 and labels is None:
        data, labels = data
    x = _tensor(data, "the inputs")
    y = None if labels is None else _tensor(labels, "the labels").reshape(-1).long()
    return x, y


def unpack(data: InputData, labels: LabelData | None = None) -> tuple[torch.Tensor | np.ndarray | tuple, Any]:
    """``(inputs, labels)`` unchanged, except that a ``torch.utils.data`` data set or loader is
    read into tensors and gives its own labels where ``labels`` is ``None``.
    """
    if not isinstance(data, (DataLoader, TorchDataset)):  # is_torch_data, spelled so mypy narrows
        return data, labels
    x, carried = inputs_and_labels(data)
    return x, carried if labels is None else labels
