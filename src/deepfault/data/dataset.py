"""The value every data set loader returns: :class:`Dataset`, a labelled train/test split."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from torch.utils.data import DataLoader

from ..core.inputs import InputData, LabelData, check_data, inputs_and_labels
from ..errors import DeepFaultError
from .bounds import data_range, infer_bounds

__all__ = ["Dataset", "as_dataset", "pixel_dataset"]


@dataclass(frozen=True)
class Dataset:
    """A labelled train/test split held as numpy arrays.

    Attributes:
        name: Registry name.
        x_train, x_test: Inputs, ``float32``, shape ``(N, *input_shape)``, in the
            layout the models take (channels first for images).
        y_train, y_test: Integer labels, shape ``(N,)``, in ``range(num_classes)``.
        bounds: ``(lo, hi)``, the valid range of every input element.
        class_names: One name per class.
        feature_bounds: ``(lo, hi)`` float64 arrays of one input's shape when the data
            declares a range per feature (an ``.npz`` with a ``bounds`` array ``(2, ...)``);
            ``bounds`` is then their envelope. ``None`` otherwise.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    bounds: tuple[float, float]
    class_names: tuple[str, ...]
    meta: dict = field(default_factory=dict, compare=False)
    feature_bounds: tuple[np.ndarray, np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_test.shape[1:])

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def for_input_shape(self, shape) -> Dataset:
        """The same data laid out as a model with per-input ``shape`` takes it.

        Handles the layouts that differ only in order or flatness: channels first
        ``(C, H, W)`` to channels last ``(H, W, C)``, flat ``(C*H*W,)`` (in the model's own
        element order when it is channels last, as after a Keras ``Flatten``), and
        ``(H, W)`` for one channel. ``None`` in ``shape`` matches any size.

        Raises:
            DeepFaultError: No such layout matches.
        """
        have = self.input_shape
        want = tuple(shape)

        def fits(target):
            return len(target) == len(want) and all(w in (None, t) for w, t in zip(want, target, strict=True))

        if fits(have):
            return self
        candidates: list[tuple[tuple[int, ...], Callable[[np.ndarray], np.ndarray]]] = []
        if len(have) == 3:
            c, h, w = have
            candidates += [((h, w, c), lambda x: x.transpose(0, 2, 3, 1))]
            if c == 1:
                candidates += [((h, w), lambda x: x[:, 0])]
        candidates += [((int(np.prod(have)),), lambda x: x.reshape(len(x), -1))]
        for target, convert in candidates:
            if fits(target):
                per_feature = None
                if self.feature_bounds is not None:
                    lo, hi = (np.ascontiguousarray(convert(b[None])[0]) for b in self.feature_bounds)
                    per_feature = (lo, hi)
                return replace(
                    self,
                    x_train=np.ascontiguousarray(convert(self.x_train)),
                    x_test=np.ascontiguousarray(convert(self.x_test)),
                    meta={**self.meta, "layout_from": list(have), "layout_to": list(target)},
                    feature_bounds=per_feature,
                )
        raise DeepFaultError(
            f"data set {self.name!r} has inputs of shape {have} but the model takes "
            f"{want}; use a data set of that shape or a model made for this one"
        )



def pixel_dataset(name: str, train: tuple, test: tuple, class_names, *, scale01: bool,
                  meta: dict | None = None) -> Dataset:
    """A data set of 0-255 pixel arrays ``(x, y)`` as float32, scaled to [0, 1] on request."""

    def images(x: np.ndarray) -> np.ndarray:
        out = x.astype(np.float32)
        if scale01:
            out /= 255.0
        return out

    return Dataset(
        name=name,
        x_train=images(train[0]),
        y_train=train[1],
        x_test=images(test[0]),
        y_test=test[1],
        bounds=(0.0, 1.0) if scale01 else (0.0, 255.0),
        class_names=tuple(class_names),
        meta={**(meta or {}), "scale01": scale01},
    )


def as_dataset(data: InputData | Dataset, labels: LabelData | None = None, *,
               bounds: Sequence[float] | None = None, num_classes: int | None = None, name: str | None = None,
               what: str = "data") -> Dataset:
    """A deepfault :class:`Dataset` from any of :data:`~deepfault.core.inputs.DATA_FORMS`.

    A deepfault ``Dataset`` comes back unchanged (with ``bounds`` replaced when given).
    Any other form is read whole into memory
    (:func:`~deepfault.core.inputs.inputs_and_labels`) and serves as both the test and the
    training split (the entry points that take it use the test split;
    what fits on a training split, such as ``regress``'s fidelity check, is then fitted on
    the same inputs: pass a deepfault ``Dataset`` to keep them apart).

    Args:
        data: The data.
        labels: Labels; they win over the data's own. Required unless the data carries them.
        bounds: ``(lo, hi)``, the valid range of every input element; default
            :func:`~deepfault.data.bounds.infer_bounds` (``(0, 1)`` for inputs inside it,
            else their own range; said in one log line, and checked against a model's
            recorded range where the model meets the data).
        num_classes: The number of classes (default: the largest label + 1, or the length of
            a torchvision data set's ``classes``).
        name: The data set's name (default ``"data-"`` and a hash of the inputs, so that
            caches keyed by the name do not mix two different data sets).
        what: How messages name the argument.

    Raises:
        DeepFaultError: A type that is none of :data:`~deepfault.core.inputs.DATA_FORMS`, no
            labels, or bad bounds.
    """
    check_data(data, what)
    if isinstance(data, Dataset):
        if bounds is not None:
            return replace(data, bounds=_bounds(bounds))
        return data
    x, y = inputs_and_labels(data, labels)
    if y is None:
        raise DeepFaultError(f"{what} carries no labels: pass labels=..., or a Dataset or DataLoader that "
                             "yields (input, label) pairs")
    x_np = np.ascontiguousarray(x.detach().cpu().numpy().astype(np.float32, copy=False))
    y_np = y.detach().cpu().numpy().astype(np.int64, copy=False)
    source = data.dataset if isinstance(data, DataLoader) else data
    classes = getattr(source, "classes", None)
    if num_classes is None:
        num_classes = len(classes) if isinstance(classes, (list, tuple)) and classes else (
            int(y_np.max()) + 1 if len(y_np) else 1)
    names = tuple(str(c) for c in classes) if isinstance(classes, (list, tuple)) and \
        len(classes) == num_classes else tuple(str(i) for i in range(num_classes))
    if name is None:
        digest = hashlib.sha256(x_np.tobytes()[: 1 << 24] + y_np.tobytes()).hexdigest()[:8]
        name = f"data-{digest}"
    if bounds is None:
        ranges = [(float(x_np.min()), float(x_np.max()))] if x_np.size else []
        meta = {"from": type(data).__name__, "bounds_inferred": True, "data_range": data_range(ranges)}
        return Dataset(name, x_np, y_np, x_np, y_np, infer_bounds(ranges, name), names, meta=meta)
    return Dataset(name, x_np, y_np, x_np, y_np, _bounds(bounds), names, meta={"from": type(data).__name__})


def _bounds(bounds) -> tuple[float, float]:
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise DeepFaultError(f"bounds must be (lo, hi) numbers; got {bounds!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise DeepFaultError(f"bounds must be finite with lo < hi; got {bounds!r}")
    return (lo, hi)
