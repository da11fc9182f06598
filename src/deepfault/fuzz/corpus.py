"""The queue of inputs to mutate: selection probability, counters, lineage and banning.

Every queued input (a seed or a kept mutant) keeps its root (the seed it descends from),
its generation, its parent (so the chain of its ancestors), how often it was selected, and
a few numbers the loop needs about it: its ``d = p1[y1] - p2[y1]``, M2's probability of its
label, its failure tendency (the class ``k != y1`` with the largest ``p2[k] - p1[k]``), the
row of its fidelity reference and whether its lineage had an affine change (DeepHunter).

Selection (spec section 3, step 1): an input is drawn with probability proportional to
``p = exp(-a * (generation + times_selected / 2))``, ``a = ln(20) / 20``, and ``p = 0``
once it was selected more than 10 times, once it is banned, and once its root is banned
(:func:`selection_weights`). ``B`` inputs per step are drawn without replacement.

Images live in one growing tensor on the model's device; the metadata in NumPy arrays. The
corpus only grows: entries are never removed (a dead entry has ``p = 0``), so an entry's id
is its position and stays valid in faults, lineages and checkpoints.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..errors import DeepFaultError

__all__ = ["Corpus", "DECAY", "MAX_SELECTIONS", "selection_weights", "STATIC_FIELDS"]

#: ``a`` in ``exp(-a * (generation + times_selected / 2))``: the weight falls to 1/20 after 20.
DECAY = math.log(20.0) / 20.0
#: An input selected more than this many times is never selected again.
MAX_SELECTIONS = 10

#: Per-entry fields that never change once an entry is added, with their dtypes.
STATIC_FIELDS = {
    "root": np.int32,  # dense root index (a row of the seed table)
    "generation": np.int32,
    "parent": np.int32,  # entry id of the parent, -1 for a seed
    "d": np.float32,  # p1[y1] - p2[y1]
    "p2_label": np.float32,  # M2's probability of the label
    "tendency": np.int16,  # argmax over k != y1 of p2[k] - p1[k]
    "ref": np.int32,  # row of the fidelity reference
    "affine": np.bool_,  # the lineage had an affine change
    "rule": np.int16,  # the rule that made it (-1 for a seed)
}


def selection_weights(
    generation: np.ndarray, times_selected: np.ndarray, banned: np.ndarray | None = None
) -> np.ndarray:
    """``exp(-a * (generation + times_selected / 2))``, 0 past :data:`MAX_SELECTIONS` or banned.

    Args:
        generation: ``(N,)`` generations (0 for a seed).
        times_selected: ``(N,)`` times each input was selected.
        banned: ``(N,)`` bool, optional.

    Returns:
        ``(N,)`` float64 weights (not normalised).
    """
    generation = np.asarray(generation, dtype=np.float64)
    times = np.asarray(times_selected, dtype=np.float64)
    weights = np.exp(-DECAY * (generation + times / 2.0))
    dead = times > MAX_SELECTIONS
    if banned is not None:
        dead = dead | np.asarray(banned, dtype=bool)
    weights[dead] = 0.0
    return weights


class Corpus:
    """The queue. See the module docstring.

    Args:
        image_shape: Per-input shape ``(C, H, W)``.
        num_roots: Number of seed rows (roots), for the per-root ban.
        device: Where the images are kept (the model's device).
        capacity: Initial number of slots (grows by doubling).
    """

    def __init__(self, image_shape: tuple[int, ...], num_roots: int, *, device: torch.device | str = "cpu",
                 capacity: int = 1024):
        self.image_shape = tuple(image_shape)
        self.device = torch.device(device)
        self.size = 0
        cap = max(1, int(capacity))
        self.images = torch.empty((cap, *self.image_shape), dtype=torch.float32, device=self.device)
        self.static = {name: np.zeros(cap, dtype=dtype) for name, dtype in STATIC_FIELDS.items()}
        self.times_selected = np.zeros(cap, dtype=np.int32)
        self.banned = np.zeros(cap, dtype=bool)
        self.root_banned = np.zeros(int(num_roots), dtype=bool)

    def __len__(self) -> int:
        return self.size

    def _grow(self, need: int) -> None:
        cap = len(self.images)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        images = torch.empty((new, *self.image_shape), dtype=torch.float32, device=self.device)
        images[: self.size] = self.images[: self.size]
        self.images = images
        for name, arr in self.static.items():
            grown = np.zeros(new, dtype=arr.dtype)
            grown[: self.size] = arr[: self.size]
            self.static[name] = grown
        for name in ("times_selected", "banned"):
            arr = getattr(self, name)
            grown = np.zeros(new, dtype=arr.dtype)
            grown[: self.size] = arr[: self.size]
            setattr(self, name, grown)

    def add(self, images: torch.Tensor, **fields: np.ndarray) -> np.ndarray:
        """Append entries; returns their ids. Every field of :data:`STATIC_FIELDS` is required."""
        n = len(images)
        missing = set(STATIC_FIELDS) - set(fields)
        if missing:
            raise DeepFaultError(f"corpus entries need {sorted(missing)}")
        self._grow(self.size + n)
        ids = np.arange(self.size, self.size + n)
        if n:
            self.images[self.size : self.size + n] = images.to(self.device, torch.float32)
            for name, value in fields.items():
                self.static[name][self.size : self.size + n] = np.asarray(value)
        self.size += n
        return ids

    def field(self, name: str) -> np.ndarray:
        """The live part of a static field (a view)."""
        return self.static[name][: self.size]

    def weights(self) -> np.ndarray:
        """``(N,)`` selection weights of every entry (:func:`selection_weights`)."""
        n = self.size
        banned = self.banned[:n] | self.root_banned[self.static["root"][:n]]
        return selection_weights(self.static["generation"][:n], self.times_selected[:n], banned)

    def select(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """Up to ``k`` distinct entry ids drawn with probability proportional to their weight.

        Returns an empty array when every weight is 0 (the campaign is exhausted).
        """
        w = self.weights()
        alive = int(np.count_nonzero(w))
        if alive == 0:
            return np.zeros(0, dtype=np.int64)
        k = min(int(k), alive)
        p = w / w.sum()
        if k == 1:
            return np.array([rng.choice(len(w), p=p)], dtype=np.int64)
        return np.asarray(rng.choice(len(w), size=k, replace=False, p=p), dtype=np.int64)

    def ancestors(self, entry: int) -> list[int]:
        """``entry`` and every ancestor up to its seed, nearest first."""
        parent = self.static["parent"]
        chain = []
        i = int(entry)
        while i >= 0:
            chain.append(i)
            i = int(parent[i])
        return chain

    def ban_chain(self, entry: int, root: int, keys: set[int]) -> int:
        """Ban ``entry`` and its ancestors whose tendency is one of ``keys`` (classes ``y2``
        of the new regression faults of root ``root``). Returns how many were banned."""
        tendency = self.static["tendency"]
        roots = self.static["root"]
        count = 0
        for i in self.ancestors(entry):
            if int(roots[i]) == root and int(tendency[i]) in keys and not self.banned[i]:
                self.banned[i] = True
                count += 1
        return count

    # --- checkpoints ------------------------------------------------------------------------

    def static_slice(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The images and static fields of entries ``[start, stop)`` as CPU arrays."""
        out = {name: arr[start:stop].copy() for name, arr in self.static.items()}
        out["images"] = self.images[start:stop].detach().cpu().numpy()
        return out

    def mutable_state(self) -> dict[str, np.ndarray]:
        return {
            "times_selected": self.times_selected[: self.size].copy(),
            "banned": self.banned[: self.size].copy(),
            "root_banned": self.root_banned.copy(),
        }

    def load_mutable_state(self, state: dict[str, np.ndarray]) -> None:
        n = self.size
        if len(state["times_selected"]) != n or len(state["root_banned"]) != len(self.root_banned):
            raise DeepFaultError("the checkpoint's queue does not match its corpus chunks; it is corrupt")
        self.times_selected[:n] = state["times_selected"]
        self.banned[:n] = state["banned"]
        self.root_banned[:] = state["root_banned"]
