"""The queue's memory: sizes in bytes (``512MiB``, ``2GiB``), the dtype its images are kept in,
and the capacity in images that a byte budget buys.

The queue (:mod:`.corpus`) keeps the images of its resident entries in one pool on the
model's device; its capacity is a number of images, derived here from a budget in bytes
and the bytes one image takes in the pool's dtype:

- ``queue_memory`` given: ``capacity = queue_memory // bytes per image``;
- ``queue_capacity`` given (a count): that count (both given: the smaller);
- neither: :data:`DEFAULT_QUEUE_MEMORY` (1 GiB), at most :data:`DEFAULT_QUEUE_IMAGES` images.
  The count ceiling keeps small inputs exactly as before the budget existed (65,536 MNIST
  images take 196 MiB), so campaigns on them are unchanged; large inputs are held to the
  bytes (a 3x224x224 float32 image is 588 KiB: 1,783 images in 1 GiB, where 65,536 were 37 GiB).

The budget is fixed, not a share of the free memory, because the capacity decides which
entries are evicted and so the campaign's result: a share of the free memory would make a
seeded campaign depend on what else the machine was doing.

Dtypes (``queue_dtype``): ``float32``, the campaign's own (lossless, the default), or
``float16`` (half the bytes, so twice the images; each queued image is rounded to float16,
at most 2**-12 of its value, 0.00024 on ``[0, 1]`` data, and its children are mutated from
the rounded image, so a campaign differs from the float32 one). ``uint8`` is not offered:
eight of the fifteen image rules (blur, brightness, contrast, both noises, rotation, scale and
shear) move pixels off the ``1/255`` grid of 8-bit data (measured on 8-bit MNIST-sized inputs:
69-99% of a mutant's pixels, up to half a grid step), so 8 bits would not be lossless for
any data set; only the patches, morphology, salt-and-pepper and translation stay on it.

Examples:
    >>> parse_size("512MiB"), parse_size("2GiB"), parse_size("1.5GB")
    (536870912, 2147483648, 1500000000)
    >>> queue_slots((1, 28, 28), "float32", memory=None, count=None)
    65536
    >>> queue_slots((3, 224, 224), "float32", memory=None, count=None)
    1783
"""

from __future__ import annotations

import math
import re

import torch

from ...errors import DeepFaultError

__all__ = ["DEFAULT_QUEUE_IMAGES", "DEFAULT_QUEUE_MEMORY", "QUEUE_DTYPES", "STEP_COPIES", "check_step_memory",
           "format_size", "image_bytes", "parse_size", "queue_slots", "torch_dtype"]

#: The queue's byte budget by default (``--queue-memory``).
DEFAULT_QUEUE_MEMORY = 1 << 30
#: The most images the default budget holds (the count capacity before budgets were in bytes).
DEFAULT_QUEUE_IMAGES = 65_536
#: The dtypes the queue keeps its images in (``--queue-dtype``).
QUEUE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: The largest budget accepted (beyond any machine's memory).
MAX_QUEUE_MEMORY = 1 << 50

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10**3, "m": 1 << 20, "mib": 1 << 20,
          "mb": 10**6, "g": 1 << 30, "gib": 1 << 30, "gb": 10**9, "t": 1 << 40, "tib": 1 << 40, "tb": 10**12}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_size(text: str | int, param: str = "queue_memory") -> int:
    """A size in bytes: a whole number of bytes, or a number with a unit, ``KiB``/``MiB``/
    ``GiB``/``TiB`` (powers of 1024; ``K``, ``M``, ``G``, ``T`` alone too) or ``KB``/``MB``/``GB``/``TB``
    (powers of 1000).

    Raises:
        DeepFaultError: Anything else, or a size below one byte or beyond 1 PiB (one line).
    """
    if isinstance(text, bool):
        raise DeepFaultError(f"{param} must be a size such as 512MiB, 2GiB or 1.5GB; got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        match = _PATTERN.match(str(text).lower())
        if not match or match.group(2) not in _UNITS:
            raise DeepFaultError(f"{param} must be a size such as 512MiB, 2GiB or 1.5GB (units B, KiB, MiB, "
                                 f"GiB, TiB, KB, MB, GB, TB); got {text!r}")
        number, unit = match.groups()
        if len(number) > 20:
            raise DeepFaultError(f"{param} must be at most 1 PiB; got {text!r}")
        value = math.floor(float(number) * _UNITS[unit])
    if not 1 <= value <= MAX_QUEUE_MEMORY:
        raise DeepFaultError(f"{param} must be a size from 1 byte to 1 PiB; got {text!r}")
    return int(value)


def format_size(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit that keeps it >= 1 (``1.0 GiB``, ``588.0 KiB``)."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:,.0f} {unit}" if unit == "bytes" else f"{nbytes:,.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:,.1f} TiB"  # pragma: no cover - the loop returns


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a :data:`QUEUE_DTYPES` name."""
    try:
        return QUEUE_DTYPES[name]
    except KeyError:
        raise DeepFaultError(f"queue_dtype must be one of {', '.join(QUEUE_DTYPES)}; got {name!r}") from None


def image_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes one queued image of ``shape`` takes in ``dtype``."""
    return math.prod(shape) * torch_dtype(dtype).itemsize


def queue_slots(shape: tuple[int, ...], dtype: str, *, memory: int | None, count: int | None) -> int:
    """The queue's capacity in images (module docstring).

    Args:
        shape: One input's shape.
        dtype: The pool's dtype (:data:`QUEUE_DTYPES`).
        memory: The byte budget (``None``: the default).
        count: A count capacity (``queue_capacity``; ``None``: none).

    Raises:
        DeepFaultError: A budget too small for one image.
    """
    per = image_bytes(shape, dtype)
    if memory is None and count is not None:
        return count
    budget = DEFAULT_QUEUE_MEMORY if memory is None else memory
    slots = budget // per
    if slots < 1:
        raise DeepFaultError(f"queue_memory must hold at least one input ({format_size(per)} each in "
                             f"{dtype}); got {format_size(budget)}")
    if memory is None:
        return min(slots, DEFAULT_QUEUE_IMAGES)
    return slots if count is None else min(slots, count)


#: Tensors of one step's size alive at once while its mutants are made: the mutants, their
#: parents repeated once per mutant, and a rule's output (a lower bound of the step's peak).
STEP_COPIES = 3


def check_step_memory(shape: tuple[int, ...], inputs_per_step: int, mutants: int,
                      device: torch.device | str = "cpu") -> None:
    """Refuse, before the campaign starts, a step whose mutants cannot fit the memory free on
    ``device``: ``inputs_per_step x mutants`` images of ``shape`` in float32, :data:`STEP_COPIES`
    times (:func:`deepfault.core.memory.check_fits`).

    Raises:
        DeepFaultError: Giving the step's size, the memory free, and what to lower.
    """
    from ...core.memory import check_fits

    slots = inputs_per_step * mutants
    check_fits(slots * image_bytes(tuple(shape), "float32") * STEP_COPIES,
               f"one step's {slots:,} mutants of shape {tuple(shape)} (--inputs-per-step {inputs_per_step} x "
               f"--mutants {mutants})", "give fewer --mutants or --inputs-per-step", device)
