"""Mutation rules for vectors ``(N, F)`` and 1-D sequences ``(N, C, L)`` (issue 26, "Beyond images").

The same contract as the image rules (:mod:`.rules`)::

    rule(x, *, generator=None, bounds, params=None) -> (x_new, params)

one parameter set per input drawn from a CPU ``generator`` and only then moved to ``x``'s
device, all inputs mutated in one batched pass (no loop over inputs or features), the result
clipped to ``bounds``, the parameters returned (CPU tensors, first axis the input) so that
passing them back replays the mutation exactly; ``x`` is never modified. The rules are
registered in the same registry (:func:`~.rules.register_rule` with ``inputs=``), so a user
adds one the same way, and a campaign takes the rules of its inputs' kind
(:func:`~.rules.list_rules` with ``inputs="vector"`` or ``"sequence"``).

Bounds:
    ``bounds = (lo, hi)`` where each of ``lo`` and ``hi`` is a number (every feature the same
    range, what a data set's ``bounds`` gives today) or an array broadcastable to one input's
    shape (``(F,)`` for vectors, ``(C, 1)`` or ``(C, L)`` for sequences): per-feature bounds.
    Amounts are in the data's units, scaled by each feature's range ``hi - lo``.

Elements:
    An *element* is one entry of an input: a feature of a vector, one channel at one time step
    of a sequence. The subset rules pick elements.

Rules (``r = hi - lo`` and ``c = (lo + hi) / 2`` per element):

* ``feature_noise`` (vectors, sequences; pixel): ``v + sigma * r * z``, ``z`` standard normal
  per element, ``sigma`` uniform over :data:`NOISE_SIGMAS`. Parameters ``sigma``, ``noise``.
* ``feature_perturb`` (vectors, sequences; pixel): a random subset of elements (a share
  uniform over :data:`SUBSET_SHARES`, at least one) moves by ``delta * r``, ``delta`` uniform
  in ``[-PERTURB_MAX, PERTURB_MAX]``. Parameters ``features`` (bool mask), ``delta``.
* ``feature_mask`` (vectors, sequences; pixel): a random subset of elements (same shares) set
  to ``lo`` (``fill`` 0) or ``c`` (``fill`` 1), one fill per input. Parameters ``features``,
  ``fill``.
* ``feature_scale`` (vectors, sequences; pixel): ``c + (v - c) * factor``, ``factor`` uniform
  in :data:`FEATURE_SCALE_RANGE`. Parameter ``factor``.
* ``time_shift`` (sequences; affine): every channel shifted by ``shift`` whole steps
  (positive: later), the vacated steps repeating the edge value; ``shift`` uniform over
  ``-S..S``, ``S = max(1, round(0.1 * L))``. Parameter ``shift``.
* ``time_crop`` (sequences; affine): the window ``[start, start + length]`` (fractions of the
  sequence) resampled linearly to ``L`` steps (crop and resize); ``length`` uniform in
  :data:`CROP_LENGTH_RANGE`, ``start`` uniform in ``[0, 1 - length]``. Parameters ``length``,
  ``start``.

Decisions: masking fills with the lower bound ("absent", the analogue of ``black_patch``) or
the middle of the range (a neutral value for centred data), one of the two per input, since a
rule sees only the bounds, not the training mean. Scaling turns about the middle of the range
(for centred data, about 0). The crop resizes (a time stretch, which a shift cannot give)
rather than pads (a pad is a shift with a fill). The time rules are ``affine``: DeepHunter
allows one per lineage and trusts it, as it does for images.

Examples:
    >>> import torch
    >>> from deepfault.fuzz.mutation.rules import apply_rule
    >>> x = torch.rand(5, 30)
    >>> g = torch.Generator().manual_seed(0)
    >>> y, params = apply_rule("feature_mask", x, generator=g, bounds=(0.0, 1.0))
    >>> y.shape, params["features"].shape, params["fill"].shape
    (torch.Size([5, 30]), torch.Size([5, 30]), torch.Size([5]))
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ...errors import DeepFaultError
from .rules import AFFINE, PIXEL, _choice, _Draws, _kernel_rule, _uniform

__all__ = [
    "CROP_LENGTH_RANGE",
    "FEATURE_SCALE_RANGE",
    "NOISE_SIGMAS",
    "PERTURB_MAX",
    "SEQUENCE_RULES",
    "SHIFT_SHARE",
    "SUBSET_SHARES",
    "VECTOR_RULES",
    "max_shift",
    "subset_size",
]

#: Gaussian noise standard deviations, as fractions of each feature's range.
NOISE_SIGMAS = (0.005, 0.01, 0.02, 0.05, 0.1)
#: Shares of the elements that ``feature_perturb`` and ``feature_mask`` change.
SUBSET_SHARES = (0.05, 0.1, 0.2)
#: ``feature_perturb`` moves an element by at most this fraction of its range.
PERTURB_MAX = 0.2
#: ``feature_scale``'s factor range.
FEATURE_SCALE_RANGE = (0.8, 1.2)
#: ``time_shift`` moves by at most this share of the sequence (at least one step).
SHIFT_SHARE = 0.1
#: ``time_crop``'s window length, as a fraction of the sequence.
CROP_LENGTH_RANGE = (0.8, 1.0)

#: The rules for vectors and for sequences, in the order a campaign's chooser indexes them.
VECTOR_RULES = ("feature_noise", "feature_perturb", "feature_mask", "feature_scale")
SEQUENCE_RULES = (*VECTOR_RULES, "time_shift", "time_crop")

_BOTH = ("vector", "sequence")


def subset_size(share: float, elements: int) -> int:
    """Elements a subset rule changes: ``max(1, round(share * elements))``."""
    return max(1, int(round(share * elements)))


def _check_input(
    rule: str, x, bounds, kinds: tuple[str, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, lo, hi)``: ``x`` detached, ``lo``/``hi`` ``(1, *x.shape[1:])`` on its device and dtype."""
    ranks = {"vector": 2, "sequence": 3}
    want = " or ".join("(N, F)" if k == "vector" else "(N, C, L)" for k in kinds)
    ok_rank = isinstance(x, torch.Tensor) and x.ndim in [ranks[k] for k in kinds]
    if not ok_rank or not x.is_floating_point():
        got = f"shape {tuple(x.shape)}, dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise DeepFaultError(f"x for mutation rule {rule!r} must be a float tensor {want}; got {got}")
    if x.shape[-1] < 2 and x.ndim == 3:
        raise DeepFaultError(f"x for mutation rule {rule!r} must have at least 2 time steps; got shape "
                             f"{tuple(x.shape)}")
    try:
        lo_hi = [torch.as_tensor(np.asarray(b, dtype=np.float64)) for b in bounds]
        if len(lo_hi) != 2:
            raise ValueError
        lo, hi = (torch.broadcast_to(b, x.shape[1:]) for b in lo_hi)
    except (TypeError, ValueError, RuntimeError):
        raise DeepFaultError(
            f"bounds must be a pair (lo, hi) of numbers or of arrays broadcastable to one input's shape "
            f"{tuple(x.shape[1:])}; got {bounds!r}") from None
    if not (bool(torch.isfinite(lo).all()) and bool(torch.isfinite(hi).all()) and bool((lo < hi).all())):
        raise DeepFaultError(f"bounds must be finite with lo < hi for every feature; got {bounds!r}")
    like = {"device": x.device, "dtype": x.dtype}
    return x.detach(), lo.to(**like)[None], hi.to(**like)[None]


def _per_input(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A per-input parameter ``(N,)`` shaped ``(N, 1, ...)`` on ``x``'s device and dtype."""
    return value.to(device=x.device, dtype=x.dtype).view(-1, *([1] * (x.ndim - 1)))


def _subset(d: _Draws, x: torch.Tensor) -> torch.Tensor:
    """``features``: a bool mask ``x.shape`` with :func:`subset_size` elements per input, on ``x``'s device.

    The share per input is uniform over :data:`SUBSET_SHARES`; the elements are the ``k``
    smallest of uniform random keys (a uniform sample without replacement), all inputs at once.
    """
    n, shape = x.shape[0], tuple(x.shape)
    elements = math.prod(shape[1:])

    def draw(g: torch.Generator) -> torch.Tensor:
        sizes = torch.tensor([subset_size(s, elements) for s in SUBSET_SHARES])
        k = sizes[torch.randint(len(sizes), (n,), generator=g)]
        keys = torch.rand(n, elements, generator=g)
        rank = keys.argsort(dim=1).argsort(dim=1)
        return (rank < k[:, None]).view(shape)

    mask = d.take("features", draw, shape=shape, dtype=torch.bool)
    return mask.to(x.device)


# ----------------------------------------------------------------------------- value rules


@_kernel_rule("feature_noise", family=PIXEL, neutral={"sigma": 0.0}, inputs=_BOTH, check=_check_input)
def feature_noise(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Add Gaussian noise ``sigma * (hi - lo) * z``, ``sigma`` uniform over :data:`NOISE_SIGMAS`.

    Parameters (``params``; drawn where not given): ``sigma`` ``(N,)`` (a fraction of the range,
    non-negative) and ``noise`` ``x.shape`` (the standard normal draws).
    """
    n, shape = x.shape[0], tuple(x.shape)
    sigma = d.take("sigma", _choice(n, NOISE_SIGMAS), low=0.0)
    z = d.take("noise", lambda g: torch.randn(shape, generator=g, dtype=x.dtype), shape=shape, dtype=x.dtype)
    out = x + _per_input(x, sigma) * (hi - lo) * z.to(x.device)
    return torch.minimum(torch.maximum(out, lo), hi)


@_kernel_rule("feature_perturb", family=PIXEL, inputs=_BOTH, check=_check_input)
def feature_perturb(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Move a random subset of elements (a share uniform over :data:`SUBSET_SHARES`) by
    ``delta * (hi - lo)``, ``delta`` uniform in ``[-PERTURB_MAX, PERTURB_MAX]`` per element.

    Parameters (``params``; drawn where not given): ``features`` (bool, ``x.shape``) and ``delta``
    (``x.shape``, fractions of the range in ``[-1, 1]``).
    """
    shape = tuple(x.shape)
    mask = _subset(d, x)
    def uniform_delta(g: torch.Generator) -> torch.Tensor:
        return PERTURB_MAX * (2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1)

    delta = d.take("delta", uniform_delta, shape=shape, low=-1.0, high=1.0)
    out = x + torch.where(mask, delta.to(device=x.device, dtype=x.dtype) * (hi - lo), torch.zeros_like(x))
    return torch.minimum(torch.maximum(out, lo), hi)


@_kernel_rule("feature_mask", family=PIXEL, inputs=_BOTH, check=_check_input)
def feature_mask(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Set a random subset of elements (a share uniform over :data:`SUBSET_SHARES`) to the lower
    bound (``fill`` 0) or the middle of the range (``fill`` 1), one fill per input.

    Parameters (``params``; drawn where not given): ``features`` (bool, ``x.shape``) and ``fill``
    (int ``(N,)``, 0 or 1).
    """
    n = x.shape[0]
    mask = _subset(d, x)
    fill = d.take("fill", lambda g: torch.randint(2, (n,), generator=g), dtype=torch.int64, low=0, high=1)
    value = torch.where(_per_input(x, fill) > 0, (lo + hi) / 2, lo)
    return torch.where(mask, value, x)


@_kernel_rule("feature_scale", family=PIXEL, neutral={"factor": 1.0}, inputs=_BOTH, check=_check_input)
def feature_scale(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Scale about the middle of the range: ``c + (v - c) * factor``, ``c = (lo + hi) / 2``,
    ``factor`` uniform in :data:`FEATURE_SCALE_RANGE`.

    Parameters (``params``; drawn where not given): ``factor`` ``(N,)`` (non-negative).
    """
    n = x.shape[0]
    factor = d.take("factor", _uniform(n, *FEATURE_SCALE_RANGE), low=0.0)
    c = (lo + hi) / 2
    out = c + (x - c) * _per_input(x, factor)
    return torch.minimum(torch.maximum(out, lo), hi)


# ----------------------------------------------------------------------------- time rules


def max_shift(length: int) -> int:
    """``time_shift``'s largest shift for ``length`` steps: ``max(1, round(0.1 * length))``."""
    return max(1, int(round(SHIFT_SHARE * length)))


@_kernel_rule("time_shift", family=AFFINE, neutral={"shift": 0}, inputs="sequence", check=_check_input)
def time_shift(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Shift every channel by ``shift`` whole steps (positive: later), ``shift`` uniform over
    ``-S..S`` with ``S = max_shift(L)``; vacated steps repeat the edge value:
    ``out[..., t] = v[..., clamp(t - shift, 0, L - 1)]``.

    Parameters (``params``; drawn where not given): ``shift`` (int ``(N,)``).
    """
    n, c, length = x.shape
    s = max_shift(length)
    shift = d.take("shift", lambda g: torch.randint(-s, s + 1, (n,), generator=g), dtype=torch.int64)
    t = torch.arange(length, device=x.device)[None, :] - shift.to(x.device)[:, None]
    index = t.clamp(0, length - 1)[:, None, :].expand(n, c, length)
    out = torch.gather(x, 2, index)
    return torch.minimum(torch.maximum(out, lo), hi)


@_kernel_rule("time_crop", family=AFFINE, neutral={"start": 0.0, "length": 1.0}, inputs="sequence",
              check=_check_input)
def time_crop(x: torch.Tensor, d: _Draws, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """Crop a window and resize it to the sequence's length (linear interpolation): step ``j``
    of the output reads position ``start * (L - 1) + length * j`` of the input,
    ``length`` uniform in :data:`CROP_LENGTH_RANGE`, ``start`` uniform in ``[0, 1 - length]``.

    Parameters (``params``; drawn where not given): ``length`` ``(N,)`` in ``(0, 1]`` and ``start``
    ``(N,)`` with ``start + length <= 1``.
    """
    n, c, steps = x.shape
    length = d.take("length", _uniform(n, *CROP_LENGTH_RANGE), low=0.0, high=1.0)
    start = d.take("start", lambda g: (1 - length) * torch.rand(n, generator=g, dtype=torch.float64),
                   low=0.0, high=1.0)
    if bool((start + length > 1 + 1e-9).any()) or bool((length <= 0).any()):
        raise DeepFaultError(
            "params for mutation rule 'time_crop' must have length > 0 and start + length <= 1")
    j = torch.arange(steps, dtype=torch.float64)
    pos = (start[:, None] * (steps - 1) + length[:, None] * j[None, :]).clamp(0, steps - 1)  # (N, L)
    left = pos.floor().long().clamp(max=steps - 2)
    w = (pos - left).to(device=x.device, dtype=x.dtype)[:, None, :]
    left = left.to(x.device)[:, None, :].expand(n, c, steps)
    a, b = torch.gather(x, 2, left), torch.gather(x, 2, left + 1)
    out = a + (b - a) * w
    return torch.minimum(torch.maximum(out, lo), hi)

