"""Domain constraints on DeepXplore's ascent direction (DeepXplore spec section 3).

A constraint turns the normalised gradient ``g`` of a batch into the direction that is
actually taken, so that the new inputs stay realistic: a uniform change of lighting, a
change confined to one rectangle (an occluding object), or small black patches.

Constraints are registered by name in :data:`CONSTRAINTS`; each is a small class with
keyword-only parameters and one verb, :meth:`Constraint.apply`. A constraint that needs
randomness declares how many uniform numbers in ``[0, 1)`` it takes per input and
iteration (``num_draws``); the search draws them for every seed and iteration in advance
from the run's generator, so the batched search and the per-seed loop see the same
numbers whatever the batching.

Images are ``(N, ..., H, W)``: the rectangle and the patch lie in the last two dimensions
and span every channel. Each constraint names the kinds of input it fits (``inputs``:
:func:`~deepfault.core.kinds.input_kind` of one input's shape, ``"image"``, ``"sequence"`` or
``"vector"``); the search refuses the others in one line that names the constraints that fit. For vectors and
sequences, per-feature bounds and fixed features (:mod:`.features`) are the constraints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from ..checks import check_int
from ..core.kinds import input_kind
from ..core.registry import Registry
from ..errors import DeepFaultError

__all__ = [
    "CONSTRAINTS",
    "Constraint",
    "NoConstraint",
    "Light",
    "Occlusion",
    "Blackout",
    "make_constraint",
    "list_constraints",
]

_SHAPES = {"vector": "vectors (F,)", "sequence": "sequences (C, L)", "image": "images (C, H, W)"}


#: Every domain constraint, by name (``xplore --constraint NAME``).
CONSTRAINTS: Registry[type[Constraint]] = Registry("domain constraint")


class Constraint(ABC):
    """Base of the domain constraints: one verb, :meth:`apply`."""

    name: str = ""
    #: Uniform numbers in [0, 1) this constraint takes per input and iteration.
    num_draws: int = 0
    #: The kinds of input it fits (:func:`~deepfault.core.kinds.input_kind`).
    inputs: tuple[str, ...] = ("image", "sequence", "vector")

    def check_inputs(self, input_shape: Sequence[int]) -> None:
        """Raise :class:`DeepFaultError` when this constraint does not fit this kind of input,
        naming the constraints that do.
        """
        kind = input_kind(input_shape)
        if kind in self.inputs:
            return
        fit = [n for n in CONSTRAINTS.names() if kind in CONSTRAINTS.get(n).inputs]
        raise DeepFaultError(
            f"the {self.name!r} constraint changes {' and '.join(_SHAPES[k] for k in self.inputs)}; these "
            f"inputs are {_SHAPES[kind].split()[0]} of shape {tuple(input_shape)}: use --constraint "
            f"{' or '.join(fit)} (with --feature-bounds and --fix-features for such inputs)")

    def check(self, input_shape: Sequence[int]) -> None:  # noqa: B027 (optional: any shape fits)
        """Raise :class:`DeepFaultError` when inputs of this per-input shape do not fit."""

    @abstractmethod
    def apply(self, grads: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        """The constrained direction.

        Args:
            grads: ``(B, *input)`` normalised gradients.
            draws: ``(B, num_draws)`` float64 uniforms in ``[0, 1)`` for this iteration.

        Returns:
            A new ``(B, *input)`` tensor; ``grads`` is not changed.
        """

    def params(self) -> dict:
        """The parameters that define the constraint (recorded in results)."""
        return {}

    def to_dict(self) -> dict:
        return {"name": self.name, **self.params()}


def _image_size(name: str, input_shape: Sequence[int]) -> tuple[int, int]:
    if len(input_shape) < 2:
        raise DeepFaultError(
            f"the {name!r} constraint needs image inputs (..., H, W); the inputs have per-input "
            f"shape {tuple(input_shape)}; use --constraint light or none"
        )
    return int(input_shape[-2]), int(input_shape[-1])


def _rows_cols(grads: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h, w = grads.shape[-2:]
    return (torch.arange(h, device=grads.device), torch.arange(w, device=grads.device))


def _spread(mask: torch.Tensor, grads: torch.Tensor) -> torch.Tensor:
    """A ``(B, H, W)`` mask broadcast against ``(B, ..., H, W)``."""
    return mask.view(mask.shape[0], *([1] * (grads.ndim - 3)), *mask.shape[1:])


@CONSTRAINTS.register("none")
class NoConstraint(Constraint):
    """The gradient unchanged."""

    name = "none"

    def apply(self, grads: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        return grads.clone()


@CONSTRAINTS.register("light")
class Light(Constraint):
    """Every element set to the input's mean gradient: a uniform brightening or darkening."""

    name = "light"
    inputs = ("image",)

    def apply(self, grads: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        mean = grads.flatten(1).mean(dim=1)
        return mean.view(-1, *([1] * (grads.ndim - 1))).expand_as(grads).clone()


@CONSTRAINTS.register("occl")
class Occlusion(Constraint):
    """The gradient kept inside one rectangle and zero outside (an occluding object).

    Args:
        x: First column of the rectangle.
        y: First row.
        h: Height in rows.
        w: Width in columns (DeepXplore's MNIST default: the top-left 10 x 10).
    """

    name = "occl"
    inputs = ("image",)

    def __init__(self, *, x: int = 0, y: int = 0, h: int = 10, w: int = 10):
        self.x = check_int("occlusion x", x, minimum=0)
        self.y = check_int("occlusion y", y, minimum=0)
        self.h = check_int("occlusion h", h)
        self.w = check_int("occlusion w", w)

    def params(self) -> dict:
        return {"x": self.x, "y": self.y, "h": self.h, "w": self.w}

    def check(self, input_shape: Sequence[int]) -> None:
        height, width = _image_size(self.name, input_shape)
        if self.y + self.h > height or self.x + self.w > width:
            raise DeepFaultError(
                f"the occlusion rectangle x={self.x}, y={self.y}, h={self.h}, w={self.w} does not fit "
                f"in {height} x {width} images; choose --occlusion x,y,h,w inside the image"
            )

    def apply(self, grads: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        rows, cols = _rows_cols(grads)
        inside = ((rows >= self.y) & (rows < self.y + self.h))[:, None] & (
            (cols >= self.x) & (cols < self.x + self.w)
        )[None, :]
        return grads * inside.to(grads.dtype)


@CONSTRAINTS.register("blackout")
class Blackout(Constraint):
    """One random ``size x size`` patch per input and iteration that may only darken.

    If the mean gradient over the patch is negative, the direction is -1 on the patch and
    0 elsewhere; otherwise it is 0 everywhere. The patch's first row is
    ``floor(u0 * (H - size + 1))`` and its first column ``floor(u1 * (W - size + 1))``
    for the two uniforms ``u0, u1`` drawn for this input and iteration.

    Args:
        size: Side of the patch (DeepXplore's MNIST default: 6).
    """

    name = "blackout"
    num_draws = 2
    inputs = ("image",)

    def __init__(self, *, size: int = 6):
        self.size = check_int("blackout size", size)

    def params(self) -> dict:
        return {"size": self.size}

    def check(self, input_shape: Sequence[int]) -> None:
        height, width = _image_size(self.name, input_shape)
        if self.size > min(height, width):
            raise DeepFaultError(
                f"--blackout-size {self.size} is larger than the {height} x {width} images"
            )

    def corners(self, draws: torch.Tensor, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(B,)`` first rows and first columns of the patches for ``draws`` ``(B, 2)``."""
        m = self.size
        top = torch.clamp((draws[:, 0] * (height - m + 1)).floor().long(), max=height - m)
        left = torch.clamp((draws[:, 1] * (width - m + 1)).floor().long(), max=width - m)
        return top, left

    def apply(self, grads: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        height, width = grads.shape[-2:]
        top, left = (t.to(grads.device) for t in self.corners(draws, height, width))
        rows, cols = _rows_cols(grads)
        in_rows = (rows[None, :] >= top[:, None]) & (rows[None, :] < top[:, None] + self.size)
        in_cols = (cols[None, :] >= left[:, None]) & (cols[None, :] < left[:, None] + self.size)
        patch = _spread(in_rows[:, :, None] & in_cols[:, None, :], grads).to(grads.dtype)  # (B, 1.., H, W)
        # Mean over the patch across every channel: sum over the patch / its element count.
        count = patch.flatten(1).sum(dim=1) * (grads[0].numel() / (height * width))
        mean = (grads * patch).flatten(1).sum(dim=1) / count
        darken = (mean < 0).to(grads.dtype).view(-1, *([1] * (grads.ndim - 1)))
        return -(patch * darken).expand_as(grads).clone()


def list_constraints() -> list[str]:
    """The names of the registered input constraints."""
    return CONSTRAINTS.names()


def make_constraint(name: str, **params) -> Constraint:
    """A constraint by registry name with its parameters (validated).

    Raises:
        DeepFaultError: An unknown name (the message lists the known ones) or a bad parameter.
    """
    cls = CONSTRAINTS.get(name)
    try:
        return cls(**params)
    except TypeError as err:
        raise DeepFaultError(f"bad parameters for domain constraint {name!r}: {err}") from None
