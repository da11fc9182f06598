"""The value every data set loader returns: :class:`Dataset`, a labelled train/test split."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import DeepFaultError

__all__ = ["Dataset", "pixel_dataset"]


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
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    bounds: tuple[float, float]
    class_names: tuple[str, ...]
    meta: dict = field(default_factory=dict, compare=False)

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
                return replace(
                    self,
                    x_train=np.ascontiguousarray(convert(self.x_train)),
                    x_test=np.ascontiguousarray(convert(self.x_test)),
                    meta={**self.meta, "layout_from": list(have), "layout_to": list(target)},
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
