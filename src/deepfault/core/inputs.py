"""Inputs as PyTorch users have them: tensors, numpy arrays, a ``Dataset`` or a ``DataLoader``.

The one normaliser of the public API's data arguments. Every public function that takes
inputs checks them with :func:`check_data` (a wrong type is a one-line
:class:`~deepfault.errors.DeepFaultError`) and reads them through
:func:`inputs_and_labels` (all at once), :func:`stream` (batch by batch: a
``DataLoader`` is not stacked) or :func:`deepfault.data.as_dataset` (built on them, for the
entry points that need a whole :class:`~deepfault.data.Dataset`: ``run_deepfault``,
``regress``, ``repair``). The forms:

- a tensor or numpy array ``(N, ...)`` (labels given separately);
- an ``(inputs, labels)`` pair;
- a ``torch.utils.data.Dataset`` whose items are ``(input, label)`` or an input (a
  torchvision data set with a ``ToTensor`` transform is one);
- a ``DataLoader`` yielding such batches (``(x, y)``, ``[x, y]``, ``{"x": .., "y": ..}``
  or ``x``), read in its order;
- a deepfault :class:`~deepfault.data.Dataset` (its test split, with its labels).

Labels come from the data where it carries them; an explicit ``labels`` argument wins.
:func:`correct_inputs` is the everyday selection "the inputs of class ``c`` that the
model gets right".
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence, Sized
from typing import Any, TypeAlias

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from ..errors import DeepFaultError
from .mapped import release

__all__ = ["DATA_FORMS", "InputData", "LabelData", "bounds_of_range", "check_data", "default_bounds",
           "inputs_and_labels", "is_torch_data", "num_inputs", "stream", "unpack"]

InputData: TypeAlias = torch.Tensor | np.ndarray | tuple | TorchDataset | DataLoader
"""Inputs as a function takes them: a tensor or array ``(N, ...)``, an ``(inputs, labels)``
pair, a ``torch.utils.data.Dataset``, a ``DataLoader`` or a deepfault ``Dataset`` (as
``inputs_and_labels`` reads them)."""

LabelData: TypeAlias = torch.Tensor | np.ndarray | Sequence[int]
"""Class labels ``(N,)``: a tensor, an array or a sequence of ints."""

#: The forms every data argument takes, for messages.
DATA_FORMS = ("a tensor, a numpy array, an (inputs, labels) pair, a torch Dataset, a DataLoader "
              "or a deepfault Dataset")

#: Items read per step when a map-style data set is stacked.
_STACK_BATCH = 512


def is_torch_data(obj) -> bool:
    """Whether ``obj`` is a ``torch.utils.data`` data set or loader."""
    return isinstance(obj, (DataLoader, TorchDataset))


def _is_deepfault_dataset(obj) -> bool:
    """A :class:`deepfault.data.Dataset` (by its fields: ``core`` does not import ``data``)."""
    return all(hasattr(obj, a) for a in ("x_test", "y_test", "x_train", "bounds", "class_names"))


def check_data(data, name: str = "inputs"):
    """``data`` unchanged when it is one of :data:`DATA_FORMS` (or anything with
    ``__array__``, such as a memory map); else a one-line :class:`DeepFaultError`.

    Raises:
        DeepFaultError: ``name`` must be one of the forms; got ``type``.
    """
    if isinstance(data, (torch.Tensor, np.ndarray, list, tuple, DataLoader, TorchDataset)) \
            or _is_deepfault_dataset(data) or hasattr(data, "__array__"):
        return data
    got = type(data).__name__
    hint = " (a file path: load it first, e.g. deepfault.load_dataset)" if isinstance(
        data, (str, bytes, os.PathLike)) else ""
    raise DeepFaultError(f"{name} must be {DATA_FORMS}; got {got}{hint}")


def num_inputs(data) -> int:
    """The number of inputs in ``data`` without reading a loader (``len(loader)`` counts
    batches; this counts the loader's data set); ``-1`` when a loader cannot tell.
    """
    if isinstance(data, DataLoader):
        ds = data.dataset
        return len(ds) if isinstance(ds, Sized) else -1
    if _is_deepfault_dataset(data):
        return len(data.x_test)
    if _is_pair(data):
        return len(data[0])
    return len(data)


def _is_pair(data) -> bool:
    """An ``(inputs, labels)`` pair: inputs with a batch dimension and 1-D labels as long."""
    if not (isinstance(data, tuple) and len(data) == 2):
        return False
    try:
        return np.ndim(data[0]) >= 2 and np.ndim(data[1]) == 1 and len(data[0]) == len(data[1])
    except (TypeError, ValueError):
        return False


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


def _loader_batches(loader) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """``(x, y or None)`` per batch of ``loader``, as tensors, in its order."""
    it = iter(loader)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except TypeError as err:  # default_collate refuses items that are not arrays
            raise DeepFaultError(
                f"the data set's items are not arrays ({err}); give the data set a transform that returns "
                "tensors (for torchvision: transform=transforms.ToTensor())"
            ) from None
        if isinstance(batch, (tuple, list)) and len(batch) >= 2:
            x, y = batch[0], batch[1]
        elif isinstance(batch, dict) and {"x", "y"} <= set(batch):
            x, y = batch["x"], batch["y"]
        else:
            x, y = batch, None
        yield _tensor(x, "an input"), None if y is None else _tensor(y, "a label").reshape(-1)


def _batches(loader):
    xs, ys = [], []
    for x, y in _loader_batches(loader):
        xs.append(x)
        if y is not None:
            ys.append(y)
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
            torchvision data set with a ``ToTensor`` transform is one); a ``DataLoader``
            yielding such batches (read once, in its order, and held in memory); or a
            deepfault :class:`~deepfault.data.Dataset` (its test split).
        labels: Labels for the inputs; they win over labels that ``data`` carries.

    Returns:
        The inputs as one tensor, and the labels as a ``long`` tensor or ``None``.

    Raises:
        DeepFaultError: A type that is none of :data:`DATA_FORMS`, items that are not
            arrays (an image without a ``ToTensor`` transform), or an empty data set.

    Examples:
        >>> import torch
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> ds = TensorDataset(torch.zeros(5, 1, 8, 8), torch.arange(5))
        >>> x, y = inputs_and_labels(DataLoader(ds, batch_size=2))
        >>> tuple(x.shape), y.tolist()
        ((5, 1, 8, 8), [0, 1, 2, 3, 4])
    """
    check_data(data)
    given = None if labels is None else _tensor(labels, "the labels").reshape(-1).long()
    if isinstance(data, DataLoader):
        x, y = _batches(data)
    elif isinstance(data, TorchDataset):
        x, y = _batches(DataLoader(data, batch_size=_STACK_BATCH, shuffle=False))
    elif _is_deepfault_dataset(data):
        ds: Any = data
        x, y = torch.as_tensor(ds.x_test), torch.as_tensor(np.asarray(ds.y_test)).long()
    elif _is_pair(data):
        x, y = _tensor(data[0], "the inputs"), _tensor(data[1], "the labels").reshape(-1).long()
    else:
        x, y = _tensor(data, "the inputs"), None
    return x, (y if given is None else given)


def unpack(data: InputData, labels: LabelData | None = None) -> tuple[Any, Any]:
    """``(inputs, labels)`` unchanged, except that a ``torch.utils.data`` data set or loader, a
    pair or a deepfault :class:`~deepfault.data.Dataset` is read into tensors and gives its
    own labels where ``labels`` is ``None``.
    """
    check_data(data)
    if not (is_torch_data(data) or _is_deepfault_dataset(data)
            or _is_pair(data)):
        return data, labels
    return inputs_and_labels(data, labels)


def stream(data, labels=None, *, batch_size: int = 1024
           ) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    """``(inputs, labels or None)`` slices of at most ``batch_size`` inputs, in order.

    A ``DataLoader`` is streamed: its batches are read one at a time (split when larger than
    ``batch_size``), so memory does not grow with the data set. Every other form is read
    whole (:func:`inputs_and_labels`) and sliced. Explicit ``labels`` win over the data's own
    and are sliced alongside.
    """
    check_data(data)
    given = None if labels is None else _tensor(labels, "the labels").reshape(-1).long()
    if isinstance(data, DataLoader):
        source: Iterator[tuple[torch.Tensor, torch.Tensor | None]] = _loader_batches(data)
    else:
        x, y = inputs_and_labels(data)
        source = iter([(x, y)])
    start = 0
    for x, y in source:
        for lo in range(0, len(x), batch_size):
            xb = x[lo : lo + batch_size]
            yb: torch.Tensor | None
            if given is not None:
                yb = given[start : start + len(xb)]
            else:
                yb = None if y is None else y[lo : lo + batch_size].long()
            start += len(xb)
            yield xb, yb
            release()  # a memory-mapped data set's pages read so far go back (core/mapped.py)
    if given is not None and start != len(given):
        raise DeepFaultError(f"labels must be a 1-D array with one label per input ({start}); "
                             f"got {len(given)}")


def default_bounds(x: torch.Tensor | np.ndarray) -> tuple[float, float]:
    """The value range assumed for inputs that do not say theirs (``bounds=None``).

    ``(0.0, 1.0)`` when every input lies in it (what ``ToTensor`` gives); otherwise the
    inputs' own minimum and maximum (normalised data, logits, features).
    """
    arr = x.detach().cpu() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if arr.numel() == 0:
        return (0.0, 1.0)
    return bounds_of_range(float(arr.min()), float(arr.max()))


def bounds_of_range(lo: float, hi: float) -> tuple[float, float]:
    """The bounds :func:`default_bounds` assumes for inputs whose minimum is ``lo`` and maximum ``hi``.

    ``(0.0, 1.0)`` when ``[lo, hi]`` lies in it; otherwise ``(lo, hi)`` (``(lo, lo + 1)``
    when every input holds one value).
    """
    if lo >= 0.0 and hi <= 1.0:
        return (0.0, 1.0)
    return (lo, hi if hi > lo else lo + 1.0)
