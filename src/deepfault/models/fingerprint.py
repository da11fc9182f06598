"""One fingerprint of a model's weights, whatever file or object it came from.

The fingerprint is a SHA-256 over the module's ``state_dict`` in name order: for every
entry its qualified name, dtype, shape and raw bytes (CPU, contiguous). It depends on the
weights and their names only, so the same weights give the same fingerprint whether the
module was opened from a file, passed in by a caller, wrapped in an input adapter or moved
to a GPU; the module's class, hooks, mode and device do not enter it.
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

__all__ = ["fingerprint"]


def fingerprint(module: nn.Module, *, length: int = 16) -> str:
    """SHA-256 (hex, the first ``length`` digits) of ``module``'s weights and their names.

    Args:
        module: The network; only ``module.state_dict()`` is read.
        length: Hex digits kept, 1 to 64 (16 by default; 64 is the whole digest).

    Returns:
        The fingerprint, ``length`` lower-case hex digits.

    Raises:
        ValueError: ``length`` is not in 1..64.

    Examples:
        >>> from torch import nn
        >>> a = nn.Linear(2, 2)
        >>> b = nn.Linear(2, 2)
        >>> _ = b.load_state_dict(a.state_dict())
        >>> fingerprint(a) == fingerprint(b)
        True
    """
    if not isinstance(length, int) or not 1 <= length <= 64:
        raise ValueError(f"The 'length' parameter of fingerprint must be an int in 1..64. "
                         f"Got {length!r} instead.")
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy())  # the buffer itself, no bytes copy
    return digest.hexdigest()[:length]
