"""What kind of inputs a model takes and what kind of outputs it returns: one home for both.

Every method names inputs and outputs the same way: mutation rules, DeepXplore's constraints
and the fidelity checks each fit some kinds of input; a model's outputs are logits or
probabilities wherever the outputs are read (the preparation route, DeepFault's evaluation,
the fuzzing oracle).

The convention of :func:`input_kind` is **one input's shape**, the batch axis not counted:
``(F,)`` is a vector, ``(C, L)`` a sequence, ``(C, H, W)`` an image. A caller holding a batch
``x`` passes ``x.shape[1:]``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["INPUT_KINDS", "OUTPUT_KINDS", "input_kind"]

#: The kinds of input, by the rank of one input's shape: images ``(C, H, W)``, sequences
#: ``(C, L)`` and vectors ``(F,)`` (in the order messages list them).
INPUT_KINDS = {3: "image", 2: "sequence", 1: "vector"}

#: What a model's outputs are: ``"logits"`` (unnormalised scores; softmax applied where
#: probabilities are needed) or ``"probabilities"`` (a softmax already applied).
OUTPUT_KINDS = ("logits", "probabilities")


def input_kind(input_shape: Sequence[int]) -> str:
    """``"vector"``, ``"sequence"`` or ``"image"``: the kind of inputs of shape ``input_shape``.

    Args:
        input_shape: One input's shape, without the batch axis (``x.shape[1:]`` of a batch).

    Returns:
        The kind by rank (:data:`INPUT_KINDS`); a rank above 3 counts as an image (its last
        two axes span it) and a scalar as a vector. A method that takes only the three ranks
        checks ``len(input_shape) in INPUT_KINDS`` itself, with its own message.

    Examples:
        >>> input_kind((1, 28, 28)), input_kind((3, 100)), input_kind((10,))
        ('image', 'sequence', 'vector')
    """
    rank = len(tuple(input_shape))
    return INPUT_KINDS.get(rank, "image" if rank > 3 else "vector")
