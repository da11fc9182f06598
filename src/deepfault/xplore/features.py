"""Per-feature bounds and fixed features: DeepXplore's constraints for vectors ``(N, F)`` and
sequences ``(N, C, L)`` (issue 26, "Beyond images").

Images have one valid range for every pixel and domain constraints on the gradient
(:mod:`.constraints`). A tabular row has one range per feature (an age, a ratio, a one-hot
column) and features a user may not change (a protected attribute, an identifier, a sensor
that is read, not set); a sequence has one range per channel and time steps that are
observed. So the search takes two more constraints, both options of :func:`~.search.search`
beside the registered one:

* **per-feature bounds** ``bounds=(lo, hi)``: each of ``lo`` and ``hi`` a number (every
  element the same range, as for images) or an array broadcastable to one input's shape
  (``(F,)`` for vectors, ``(C, 1)`` or ``(C, L)`` for sequences), the same form as the
  mutation rules' bounds (:mod:`deepfault.fuzz.mutation.vectors`). Every step is clipped to
  them; ``lo == hi`` pins a feature. :func:`observed_bounds` gives the per-feature minimum and
  maximum of the data.
* **fixed features** ``fixed=``: indices along the first axis of one input (a vector's
  features, a sequence's channels) or a boolean mask broadcastable to one input's shape
  (:func:`fixed_mask` builds one from features and time steps). Their gradient is zeroed
  after the domain constraint, and their value is set back to the seed's after every step,
  so they stay the seed's bit for bit.

Examples:
    >>> import numpy as np
    >>> b = InputBounds.of((np.zeros(3), np.array([1.0, 2.0, 3.0])), (3,))
    >>> b.per_feature, b.envelope
    (True, (0.0, 3.0))
    >>> fixed_mask((3,), features=[0, 2]).tolist()
    [True, False, True]
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..core.kinds import input_kind
from ..errors import DeepFaultError

__all__ = [
    "InputBounds",
    "fixed_mask",
    "observed_bounds",
    "parse_indices",
    "read_bounds",
    "read_seed_indices",
    "resolve_bounds",
    "BOUNDS_CHOICES",
]

#: ``--feature-bounds`` words (else a file): ``auto`` the data set's per-feature bounds when it
#: declares them, else the observed ones for vectors and sequences and the data set's range
#: for images; ``observed`` the per-feature minimum and maximum of the data; ``dataset`` the
#: data set's declared bounds as they are.
BOUNDS_CHOICES = ("auto", "observed", "dataset")


def _round_in(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 bounds inside the float64 ones: a clipped float32 input then lies in them exactly."""
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    lo32 = np.where(lo32.astype(np.float64) < lo, np.nextafter(lo32, np.float32(np.inf)), lo32)
    hi32 = np.where(hi32.astype(np.float64) > hi, np.nextafter(hi32, np.float32(-np.inf)), hi32)
    return lo32, np.maximum(hi32, lo32)


@dataclass(frozen=True, eq=False)
class InputBounds:
    """The valid range of every element of one input.

    Attributes:
        lo, hi: float64 arrays: shape ``()`` for one range for all elements, else one input's
            shape (broadcast).
    """

    lo: np.ndarray
    hi: np.ndarray
    #: The clamping tensors per (device, dtype), made once.
    _tensors: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, bounds, input_shape: Sequence[int]) -> InputBounds:
        """``bounds`` ``(lo, hi)``, numbers or arrays broadcastable to ``input_shape``, checked.

        Raises:
            DeepFaultError: Not a pair, arrays that do not broadcast, NaN, or ``lo > hi``
                somewhere (``lo == hi`` pins an element; two numbers need ``lo < hi``).
        """
        shape = tuple(int(s) for s in input_shape)
        try:
            pair = [np.asarray(b.detach().cpu() if isinstance(b, torch.Tensor) else b, dtype=np.float64)
                    for b in bounds]
            if len(pair) != 2:
                raise ValueError
        except (TypeError, ValueError):
            raise DeepFaultError(f"bounds must be a pair (lo, hi) of numbers or of arrays broadcastable to "
                                 f"one input's shape {shape}; got {_short(bounds)}") from None
        lo, hi = pair
        if lo.ndim == 0 and hi.ndim == 0:
            if not lo < hi:
                raise DeepFaultError(f"bounds must have lo < hi; got ({float(lo):g}, {float(hi):g})")
            return cls(lo, hi)
        try:
            lo, hi = (np.broadcast_to(b, shape).copy() for b in (lo, hi))
        except ValueError:
            raise DeepFaultError(f"per-feature bounds of shapes {pair[0].shape} and {pair[1].shape} do not "
                                 f"fit inputs of shape {shape}; give arrays of that shape (or broadcastable "
                                 "to it)") from None
        if np.isnan(lo).any() or np.isnan(hi).any():
            raise DeepFaultError("per-feature bounds hold NaN; give a number (or -inf/inf) for every feature")
        bad = np.argwhere(lo > hi)
        if len(bad):
            at = tuple(int(i) for i in bad[0])
            raise DeepFaultError(f"per-feature bounds have lo > hi at feature {_where(at)}: "
                                 f"lo {lo[at]:g}, hi {hi[at]:g}; give lo <= hi for every feature")
        return cls(lo, hi)

    @property
    def per_feature(self) -> bool:
        return self.lo.ndim > 0

    @property
    def envelope(self) -> tuple[float, float]:
        """``(min lo, max hi)``: one range holding every element's."""
        return float(self.lo.min()), float(self.hi.max())

    def clamp(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` clipped to the bounds (float32 inputs land inside the float64 bounds exactly)."""
        if not self.per_feature:
            return torch.clamp(x, float(self.lo), float(self.hi))
        key = (str(x.device), x.dtype)
        if key not in self._tensors:
            lo, hi = _round_in(self.lo, self.hi) if x.dtype == torch.float32 else (self.lo, self.hi)
            self._tensors[key] = tuple(torch.as_tensor(b).to(device=x.device, dtype=x.dtype)
                                       for b in (lo, hi))
        low, high = self._tensors[key]
        return torch.minimum(torch.maximum(x, low), high)

    def check_inside(self, x: torch.Tensor | Iterable[torch.Tensor], what: str = "seeds",
                     tol: float = 1e-6) -> None:
        """Raise when an element of ``x`` ``(N, *input)`` lies outside the bounds by more than ``tol``.

        ``x`` may come in parts (an iterable of ``(n_i, *input)`` tensors, the rows in order),
        so that no copy of every row is needed: the message is the same as for the whole.
        """
        parts = [x] if isinstance(x, torch.Tensor) else x
        if not self.per_feature:
            lo, hi = float(self.lo), float(self.hi)
            seen = [(float(p.min()), float(p.max())) for p in parts if p.numel()]
            if not seen:
                return
            low, high = min(a for a, _ in seen), max(b for _, b in seen)
            if low < lo - tol or high > hi + tol:
                raise DeepFaultError(
                    f"the {what} lie in [{low:g}, {high:g}], outside the bounds "
                    f"[{lo:g}, {hi:g}]; pass the data set's valid range as bounds=(lo, hi)")
            return
        offset = 0
        for part in parts:
            self._check_part_inside(part, what, tol, offset)
            offset += len(part)

    def _check_part_inside(self, x: torch.Tensor, what: str, tol: float, offset: int) -> None:
        v = x.detach().cpu().double().numpy()
        out = (v < self.lo - tol) | (v > self.hi + tol)
        if out.any():
            at = tuple(int(i) for i in np.argwhere(out)[0])
            row, el = offset + at[0], at[1:]
            raise DeepFaultError(
                f"{what[:-1] if what.endswith('s') else what} {row} has {v[at]:g} at feature {_where(el)}, "
                f"outside its bounds [{self.lo[el]:g}, {self.hi[el]:g}]; widen the bounds (--feature-bounds "
                "observed takes the data's own range)")

    def describe(self) -> str:
        if not self.per_feature:
            return f"{float(self.lo):g}..{float(self.hi):g} for every element"
        lo, hi = self.envelope
        pinned = int((self.lo == self.hi).sum())
        return (f"per feature, shape {self.lo.shape}, within {lo:g}..{hi:g}"
                + (f", {pinned} pinned (lo = hi)" if pinned else ""))

    def to_dict(self) -> dict:
        if not self.per_feature:
            return {"lo": float(self.lo), "hi": float(self.hi)}
        small = self.lo.size <= 4096
        return {"shape": list(self.lo.shape),
                "lo": _json_list(self.lo) if small else "in the .npz (feature_lo)",
                "hi": _json_list(self.hi) if small else "in the .npz (feature_hi)"}


def _json_list(a: np.ndarray) -> list:
    """``a`` as nested lists, infinities as strings (JSON has none)."""
    out = np.where(np.isfinite(a), a, np.nan).tolist()

    def fix(v, ref):
        if isinstance(v, list):
            return [fix(a, r) for a, r in zip(v, ref, strict=True)]
        return v if not math.isnan(v) else ("inf" if ref > 0 else "-inf")

    return fix(out, a.tolist())


def _where(index: tuple[int, ...]) -> str:
    return str(index[0]) if len(index) == 1 else str(index)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def observed_bounds(*arrays, input_shape: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: the per-feature minimum and maximum over ``arrays`` ``(N, *input)``.

    A vector's features each get their own range; a sequence's or an image's range is per
    channel, over every time step or pixel (shape ``(C, 1)`` or ``(C, 1, 1)``): a value seen at
    one step is plausible at another.

    Raises:
        DeepFaultError: No inputs, or arrays of different input shapes.
    """
    parts = [np.asarray(a) for a in arrays if a is not None and len(a)]
    if not parts:
        raise DeepFaultError("observed bounds need inputs; the data holds none")
    shape = tuple(parts[0].shape[1:]) if input_shape is None else tuple(input_shape)
    if any(tuple(p.shape[1:]) != shape for p in parts):
        raise DeepFaultError(f"observed bounds need inputs of one shape {shape}; got "
                             f"{sorted({tuple(p.shape[1:]) for p in parts})}")
    axes = (0,) if len(shape) <= 1 else (0, *range(2, len(shape) + 1))
    lo = np.min([p.min(axis=axes, keepdims=True)[0] for p in parts], axis=0).astype(np.float64)
    hi = np.max([p.max(axis=axes, keepdims=True)[0] for p in parts], axis=0).astype(np.float64)
    return lo, hi


def parse_indices(text: str, what: str = "feature") -> tuple[int, ...]:
    """``"0,3,7"``, ``"2-5"`` (inclusive) or both (``"0-2,7"``) as sorted distinct indices.

    Raises:
        DeepFaultError: An empty list, a negative number, something not an integer, or a
            range whose end is before its start.
    """
    out: set[int] = set()
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        lo_text, dash, hi_text = part.partition("-")
        ends = [lo_text.strip(), hi_text.strip()] if dash else [part]
        if any(not e.isdigit() for e in ends) or (dash and not lo_text.strip()):
            kind = "negative" if part.startswith("-") else "not an index"
            raise DeepFaultError(f"{what} indices must be integers >= 0 or ranges such as 2-5; {part!r} is "
                                 f"{kind}")
        a, b = int(ends[0]), int(ends[-1])
        if b < a:
            raise DeepFaultError(f"{what} range {part!r} ends before it starts; write it as {b}-{a}")
        if b >= 2**31:
            raise DeepFaultError(f"{what} index {b} is beyond any input; give indices below the input's size")
        out.update(range(a, b + 1))
    if not out:
        raise DeepFaultError(f"no {what} index in {text!r}; give a list such as 0,3,7 or a range such as 2-5")
    return tuple(sorted(out))


def _indices(name: str, values, size: int, axis: str) -> np.ndarray:
    idx = []
    for v in np.asarray(values, dtype=object).ravel().tolist() if not isinstance(values, int) else [values]:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise DeepFaultError(f"{name} must be integer indices; got {v!r}")
        if not 0 <= int(v) < size:
            raise DeepFaultError(f"{name} index {int(v)} is outside the {size} {axis} of the inputs "
                                 f"(valid: 0..{size - 1})")
        idx.append(int(v))
    return np.asarray(idx, dtype=np.int64)


def fixed_mask(input_shape: Sequence[int], features=None, *, steps=None) -> np.ndarray:
    """``input_shape`` bool mask of the elements that stay the seed's.

    Args:
        input_shape: One input's shape.
        features: Indices along the first axis (a vector's features, a sequence's or an
            image's channels): every element of those is fixed.
        steps: Indices along the last axis of a sequence ``(C, L)`` (time steps, every channel).

    Raises:
        DeepFaultError: An index out of range, negative or not an integer; ``steps`` on an
            input that is not a sequence.
    """
    shape = tuple(int(s) for s in input_shape)
    mask = np.zeros(shape, dtype=bool)
    if features is not None and len(shape):
        axis = {"vector": "features", "sequence": "channels"}.get(input_kind(shape), "channels")
        mask[_indices("fixed features", features, shape[0], axis)] = True
    if steps is not None:
        if input_kind(shape) != "sequence":
            raise DeepFaultError(f"fixed time steps need sequences (C, L); the inputs have shape {shape}; "
                                 "use --fix-features")
        mask[:, _indices("fixed steps", steps, shape[-1], "time steps")] = True
    return mask


def as_fixed(fixed, input_shape: Sequence[int]) -> np.ndarray | None:
    """``fixed`` (indices along the first axis, or a bool mask) as a bool mask of one input's shape."""
    if fixed is None:
        return None
    shape = tuple(int(s) for s in input_shape)
    value = fixed.detach().cpu().numpy() if isinstance(fixed, torch.Tensor) else fixed
    if isinstance(value, np.ndarray) and value.dtype == bool:
        try:
            return np.broadcast_to(value, shape).copy()
        except ValueError:
            raise DeepFaultError(f"the fixed mask has shape {value.shape}, which does not fit inputs of "
                                 f"shape {shape}; give a bool array of that shape, or feature "
                                 "indices") from None
    if isinstance(value, (str, bytes)):
        raise DeepFaultError(f"fixed must be feature indices or a bool mask; got {value!r}")
    try:
        return fixed_mask(shape, value)
    except TypeError:
        raise DeepFaultError(f"fixed must be feature indices or a bool mask; got {_short(value)}") from None


def read_bounds(path: str | Path, input_shape: Sequence[int]) -> InputBounds:
    """Per-feature bounds from a file: ``.npz`` with arrays ``lo`` and ``hi`` (or one ``bounds``
    array ``(2, ...)``), or ``.json`` ``{"lo": [...], "hi": [...]}`` (or ``{"bounds": [lo, hi]}``).

    Raises:
        DeepFaultError: The file is missing, unreadable or lacks the arrays; bad bounds.
    """
    path = Path(path)
    if not path.is_file():
        raise DeepFaultError(f"--feature-bounds: {str(path)!r} is neither a file nor one of "
                             f"{', '.join(BOUNDS_CHOICES)}")
    try:
        if path.suffix == ".json":
            body = json.loads(path.read_text(encoding="utf-8"))
            items = body.items() if isinstance(body, dict) else ()
            arrays = {k: np.asarray(v, dtype=np.float64) for k, v in items}
        else:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, TypeError, UnicodeDecodeError) as err:
        raise DeepFaultError(f"cannot read bounds from {str(path)!r}: {err}; write an .npz "
                             "(numpy.savez(lo=..., hi=...)) or a JSON object "
                             "{\"lo\": [...], \"hi\": [...]}") from None
    if "lo" in arrays and "hi" in arrays:
        pair = (arrays["lo"], arrays["hi"])
    elif "bounds" in arrays and len(arrays["bounds"]) == 2:
        pair = (arrays["bounds"][0], arrays["bounds"][1])
    else:
        held = ", ".join(sorted(arrays)) or "nothing"
        raise DeepFaultError(f"{str(path)!r} has no bounds (it holds {held}); save arrays lo and hi, one "
                             "value per feature")
    return InputBounds.of(pair, input_shape)


def resolve_bounds(spec: str, data) -> tuple[InputBounds, str]:
    """``--feature-bounds SPEC`` for a :class:`~deepfault.data.Dataset`: the bounds and where
    they come from (``auto``, ``observed``, ``dataset`` or a file; :data:`BOUNDS_CHOICES`).
    """
    shape = tuple(data.input_shape)
    declared = getattr(data, "feature_bounds", None)
    if spec == "dataset" or (spec == "auto" and (declared is not None or input_kind(shape) == "image")):
        if declared is not None:
            return InputBounds.of(declared, shape), f"the data set's per-feature bounds ({data.name})"
        lo, hi = data.bounds
        return InputBounds.of((lo, hi), shape), f"the data set's bounds {lo:g}..{hi:g}"
    if spec in ("auto", "observed"):
        lo, hi = observed_bounds(data.x_train, data.x_test, input_shape=shape)
        per = "feature" if input_kind(shape) == "vector" else "channel"
        return (InputBounds.of((lo, hi), shape),
                f"the data's minimum and maximum per {per} (train and test splits)")
    return read_bounds(spec, shape), f"{spec}"


def feature_constraints(spec: str, data, *, features=None, steps=None, constraint=None
                        ) -> tuple[tuple, np.ndarray | None, str | None]:
    """``deepfault xplore``'s ``--feature-bounds``, ``--fix-features`` and ``--fix-steps`` for
    ``data``, checked before any work: ``(bounds, fixed mask or None, a line saying what holds,
    or None for images with their data set's range)``.

    Raises:
        DeepFaultError: Bad bounds or indices, or a domain ``constraint`` that does not fit the inputs.
    """
    shape = tuple(data.input_shape)
    if constraint is not None:
        constraint.check_inputs(shape)
    box, source = resolve_bounds(spec, data)
    mask = None
    if features is not None or steps is not None:
        mask = fixed_mask(shape, features, steps=steps)
    parts = []
    if box.per_feature or spec not in ("auto", "dataset"):
        parts.append(f"feature bounds: {box.describe()}, from {source}")
    if mask is not None:
        parts.append(f"fixed: {int(mask.sum())} of {mask.size} elements keep the seed's value")
    bounds = (box.lo, box.hi) if box.per_feature else (float(box.lo), float(box.hi))
    return bounds, mask, "; ".join(parts) or None


def read_seed_indices(text: str) -> tuple[int, ...]:
    """Seed indices from ``text`` (``deepfault xplore --seed-indices``): a comma list
    (``3,17,42``) or a file of integers (whitespace, commas or newlines between them; ``#``
    starts a comment; or a ``.npy`` array).

    Raises:
        DeepFaultError: An unreadable file, no index, or an entry that is no index >= 0.
    """
    path = Path(text)
    try:
        is_file = path.is_file()
    except OSError:  # a name too long for a file (a long comma list) or one that cannot be a file
        is_file = False
    if is_file:
        if path.suffix == ".npy":
            try:
                values = np.load(path, allow_pickle=False).ravel().tolist()
            except (OSError, ValueError) as err:
                raise DeepFaultError(f"cannot read {text!r} as a .npy array: {err}") from None
            parts = [str(v) for v in values]
        else:
            try:
                body = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise DeepFaultError(f"cannot read {text!r}: {err}") from None
            lines = (line.split("#", 1)[0] for line in body.splitlines())
            parts = " ".join(lines).replace(",", " ").split()
        where = f"file {text!r}"
    elif set(text) <= set("0123456789, "):
        parts = [p.strip() for p in text.split(",") if p.strip()]
        where = f"{text!r}"
    else:
        raise DeepFaultError(
            f"expected a file of seed indices or a comma list such as 3,17,42; got {text!r} "
            "(no such file, and not a list of integers)")
    out = []
    for part in parts:
        if not part.isdigit():
            raise DeepFaultError(f"seed indices must be integers >= 0; {where} holds {part!r}")
        if int(part) >= 2**62:  # no data set is that large; numpy cannot even index with it
            shown = part[:20] + ("..." if len(part) > 20 else "")
            raise DeepFaultError(
                f"seed indices must be test-split indices; {where} holds {shown}, beyond any data set")
        out.append(int(part))
    if not out:
        raise DeepFaultError(f"no seed index in {where}")
    return tuple(out)
