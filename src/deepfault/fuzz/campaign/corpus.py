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

Bounded memory (hours-long campaigns). Each entry's bookkeeping (about 30 bytes: the fields
below, its counters and bans) is kept for the whole campaign, so an entry's id is its position
and stays valid in faults, lineages and checkpoints. Its *image* lives in a pool of at most
``capacity`` slots on the model's device, in the pool's ``dtype`` (float32, the campaign's own,
or float16; :mod:`.memory` derives the capacity from a budget in bytes). When a step adds more
entries than there are free slots, the resident entries least likely to be selected are
*evicted*: those with weight 0 first (used up or banned: they can never be selected again, so
nothing changes), then the lowest weights, older entries first among equals. An evicted entry's
weight is 0 from then on (it is never selected again); its bookkeeping stays, so banning along
lineages and the failure tables are unchanged. Eviction is a deterministic function of the
queue's state, and checkpoints save the pool (:meth:`Corpus.state_dict` and the pages of
:meth:`Corpus.take_dirty_pages`), so a resumed campaign equals an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ...errors import DeepFaultError

__all__ = ["Corpus", "DECAY", "MAX_SELECTIONS", "PAGE_BYTES", "PAGE_SLOTS", "ReferenceRows", "page_slots",
           "selection_weights", "STATIC_FIELDS"]

#: ``a`` in ``exp(-a * (generation + times_selected / 2))``: the weight falls to 1/20 after 20.
DECAY = math.log(20.0) / 20.0
#: An input selected more than this many times is never selected again.
MAX_SELECTIONS = 10

#: Image slots per checkpoint page at most (a page is rewritten when one of its slots changed).
PAGE_SLOTS = 1024
#: Bytes per checkpoint page at most: large images get fewer slots per page
#: (:func:`page_slots`), so a checkpoint rewrites 1 MiB for a changed image, not 1,024 images;
#: a page is serialized whole (about three copies while it is compressed), so this is also
#: what a checkpoint holds beyond the pool (it was 16 MiB: 54 MB for a queue of 1,024 images
#: of 4 KiB, and memory grew with the number of test inputs up to it; issue 26).
PAGE_BYTES = 1 << 20


def page_slots(image_bytes: int) -> int:
    """Slots per checkpoint page for images of ``image_bytes``: :data:`PAGE_SLOTS`, fewer when
    that many would take more than :data:`PAGE_BYTES` (at least one).
    """
    return max(1, min(PAGE_SLOTS, PAGE_BYTES // max(1, int(image_bytes))))

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
        capacity: Most images held at once (the pool grows by doubling up to it).
        dtype: The pool's dtype (``torch.float32`` or ``torch.float16``); :meth:`images_of`
            returns float32 whatever it is.
        page: Slots per checkpoint page (:func:`page_slots`).
        reserve: Slots to make at once (the seeds about to join): the pool starts at
            ``min(capacity, max(1024, reserve))`` slots.
    """

    def __init__(self, image_shape: tuple[int, ...], num_roots: int, *, device: torch.device | str = "cpu",
                 capacity: int = 65_536, dtype: torch.dtype = torch.float32, page: int = PAGE_SLOTS,
                 reserve: int = 0):
        self.image_shape = tuple(image_shape)
        self.device = torch.device(device)
        self.capacity = max(1, int(capacity))
        self.dtype = dtype
        self.page = max(1, int(page))
        self.size = 0
        self.evicted = 0
        meta = 1024
        self.static: dict[str, np.ndarray] = {name: np.zeros(meta, dtype=dtype)
                                              for name, dtype in STATIC_FIELDS.items()}
        self.times_selected = np.zeros(meta, dtype=np.int32)
        self.banned = np.zeros(meta, dtype=bool)
        self.slot = np.full(meta, -1, dtype=np.int64)  # pool slot of each entry, -1 when evicted
        self.root_banned = np.zeros(int(num_roots), dtype=bool)
        pool = min(self.capacity, max(1024, int(reserve)))
        self.images = torch.empty((pool, *self.image_shape), dtype=self.dtype, device=self.device)
        self.slot_owner = np.full(pool, -1, dtype=np.int64)
        self._dirty = np.zeros(pool, dtype=bool)

    def __len__(self) -> int:
        return self.size

    def _grow_meta(self, need: int) -> None:
        cap = len(self.times_selected)
        if need <= cap:
            return
        new = max(need, 2 * cap)

        def grown(arr: np.ndarray, fill=0) -> np.ndarray:
            out = np.full(new, fill, dtype=arr.dtype)
            out[: self.size] = arr[: self.size]
            return out

        self.static = {name: grown(arr) for name, arr in self.static.items()}
        self.times_selected, self.banned = grown(self.times_selected), grown(self.banned)
        self.slot = grown(self.slot, -1)

    def _grow_pool(self, size: int) -> None:
        old = len(self.slot_owner)
        if size <= old:
            return
        images = torch.empty((size, *self.image_shape), dtype=self.dtype, device=self.device)
        images[:old] = self.images
        self.images = images
        self.slot_owner = np.concatenate([self.slot_owner, np.full(size - old, -1, dtype=np.int64)])
        self._dirty = np.concatenate([self._dirty, np.zeros(size - old, dtype=bool)])

    def _free_slots(self, n: int, keep_from: int) -> np.ndarray:
        """``n`` free pool slots, growing the pool or evicting entries older than ``keep_from``."""
        free = np.flatnonzero(self.slot_owner < 0)
        if len(free) < n and len(self.slot_owner) < self.capacity:
            pool = len(self.slot_owner)
            self._grow_pool(min(self.capacity, max(pool + n - len(free), 2 * pool)))
            free = np.flatnonzero(self.slot_owner < 0)
        if len(free) < n:
            resident = np.flatnonzero(self.slot[:keep_from] >= 0)
            need = n - len(free)
            if need > len(resident):
                raise DeepFaultError(
                    f"the queue's capacity ({self.capacity} images) is smaller than one step's new entries "
                    f"({n}); raise queue_memory (--queue-memory) or lower inputs_per_step"
                )
            w = self.weights()[resident]
            victims = resident[np.lexsort((resident, w))[:need]]  # lowest weight, then oldest
            self.slot_owner[self.slot[victims]] = -1
            self.slot[victims] = -1
            self.evicted += need
            free = np.flatnonzero(self.slot_owner < 0)
        return free[:n]

    def add(self, images: torch.Tensor, **fields: np.ndarray) -> np.ndarray:
        """Append entries with their images; returns their ids. Every field of
        :data:`STATIC_FIELDS` is required. May evict older entries' images (module docstring).
        """
        n = len(images)
        start = self.size
        ids = self.add_entries(n, **fields)
        if n:
            slots = self._free_slots(n, start)
            slots_t = torch.as_tensor(slots, device=self.device)
            self.images[slots_t] = images.to(self.device, self.dtype)
            self.slot[ids] = slots
            self.slot_owner[slots] = ids
            self._dirty[slots] = True
        return ids

    def add_entries(self, _n: int | None = None, /, **fields: np.ndarray) -> np.ndarray:
        """Append entries' bookkeeping only (no image: resuming restores the pool separately)."""
        missing = set(STATIC_FIELDS) - set(fields)
        if missing:
            raise DeepFaultError(f"corpus entries need {sorted(missing)}")
        n = len(np.asarray(fields["root"])) if _n is None else _n
        self._grow_meta(self.size + n)
        ids = np.arange(self.size, self.size + n)
        if n:
            for name, value in fields.items():
                self.static[name][self.size : self.size + n] = np.asarray(value)
        self.size += n
        return ids

    def images_of(self, ids: np.ndarray) -> torch.Tensor:
        """``(k, C, H, W)`` the images of resident entries ``ids``, as float32."""
        slots = self.slot[np.asarray(ids)]
        if (slots < 0).any():
            raise DeepFaultError("an evicted queue entry was asked for its image")
        return self.images[torch.as_tensor(slots, device=self.device)].to(torch.float32)

    def nbytes(self) -> int:
        """Bytes the pool of images takes now (it grows by doubling up to the capacity)."""
        return self.images.numel() * self.images.element_size()

    def field(self, name: str) -> np.ndarray:
        """The live part of a static field (a view)."""
        return self.static[name][: self.size]

    def weights(self) -> np.ndarray:
        """``(N,)`` selection weights of every entry (:func:`selection_weights`; 0 once evicted)."""
        n = self.size
        banned = self.banned[:n] | self.root_banned[self.static["root"][:n]] | (self.slot[:n] < 0)
        return selection_weights(self.static["generation"][:n], self.times_selected[:n], banned)

    def resident(self) -> int:
        """Entries whose image is held."""
        return int(np.count_nonzero(self.slot_owner >= 0))
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
        of the new regression faults of root ``root``). Returns how many were banned.
        """
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
        """The static fields of entries ``[start, stop)`` as CPU arrays."""
        return {name: arr[start:stop].copy() for name, arr in self.static.items()}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The per-entry counters, bans and pool slots (the images go by :meth:`take_dirty_pages`)."""
        return {
            "times_selected": self.times_selected[: self.size].copy(),
            "banned": self.banned[: self.size].copy(),
            "root_banned": self.root_banned.copy(),
            "slot": self.slot[: self.size].copy(),
            "pool": np.array([len(self.slot_owner), self.evicted], dtype=np.int64),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        n = self.size
        if len(state["times_selected"]) != n or len(state["root_banned"]) != len(self.root_banned):
            raise DeepFaultError("the checkpoint's queue does not match its corpus chunks; it is corrupt")
        self.times_selected[:n] = state["times_selected"]
        self.banned[:n] = state["banned"]
        self.root_banned[:] = state["root_banned"]
        pool, self.evicted = (int(v) for v in state["pool"])
        self._grow_pool(pool)
        self.slot[:n] = state["slot"]
        self.slot_owner[:] = -1
        live = np.flatnonzero(self.slot[:n] >= 0)
        self.slot_owner[self.slot[live]] = live
        self._dirty[:] = False

    def take_dirty_pages(self, page: int | None = None) -> dict[int, np.ndarray]:
        """The pool pages (``page`` slots each, default :attr:`page`) written since the last call,
        as CPU arrays in the pool's dtype.
        """
        return dict(self.iter_dirty_pages(page))

    def iter_dirty_pages(self, page: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`take_dirty_pages` one page at a time (a checkpoint of a large pool copies one
        page to the CPU at once, not every changed one). The pages are taken when it is called.
        """
        page = self.page if page is None else page
        pages = np.unique(np.flatnonzero(self._dirty) // page)
        self._dirty[:] = False
        images = self.images

        def pages_out() -> Iterator[tuple[int, np.ndarray]]:
            for p in pages:
                yield int(p), images[p * page : (p + 1) * page].detach().cpu().numpy()
        return pages_out()

    def load_page(self, index: int, images: np.ndarray, page: int | None = None) -> None:
        """Restore one page of :meth:`take_dirty_pages`."""
        start = index * (self.page if page is None else page)
        if start + len(images) > len(self.slot_owner):
            raise DeepFaultError(f"queue page {index} lies outside the checkpoint's pool; it is corrupt")
        restored = torch.from_numpy(np.asarray(images)).to(self.device, self.dtype)
        self.images[start : start + len(images)] = restored


class ReferenceRows:
    """The fidelity reference rows of the queue's lineages (entries point at them by ``ref``):
    a tensor that grows along its first axis by doubling.

    With ``roots`` (a function of dense root indices) the first ``count`` rows, one per root,
    are not stored but computed when asked (:meth:`rows`): for a check whose reference is the
    root itself (L-inf, SSIM: :attr:`~..fidelity.checks.Fidelity.reference_is_input`) they
    would be a second copy of every seed. ``first`` is then the empty tensor of their shape,
    dtype and device; the rows appended later (DeepHunter's affine references) are stored.
    """

    def __init__(self, first: torch.Tensor, *, roots: Callable[[np.ndarray], torch.Tensor] | None = None,
                 count: int = 0):
        self.base = int(count) if roots is not None else 0  # rows computed by ``roots``, not stored
        self._roots = roots
        self.data = first
        self.size = self.base + len(first)
        self.stored = len(first)  # rows of ``data`` in use

    @classmethod
    def of_roots(cls, check, images_at: Callable[[np.ndarray], torch.Tensor], count: int) -> ReferenceRows:
        """The reference rows of ``count`` roots: computed on demand when ``check``'s reference
        is the root itself, else computed here and stored (one small row per root).
        """
        if getattr(check, "reference_is_input", False):
            def roots(rows: np.ndarray) -> torch.Tensor:
                return check.reference(images_at(rows))
            return cls(roots(np.zeros(1, dtype=np.int64))[:0], roots=roots, count=count)
        return cls(check.reference(images_at(np.arange(count))))

    @property
    def device(self) -> torch.device:
        return self.data.device

    def append(self, rows: torch.Tensor) -> np.ndarray:
        n = len(rows)
        if self.stored + n > len(self.data):
            grown = torch.empty((max(self.stored + n, 2 * len(self.data)), *self.data.shape[1:]),
                                dtype=self.data.dtype, device=self.data.device)
            grown[: self.stored] = self.data[: self.stored]
            self.data = grown
        self.data[self.stored : self.stored + n] = rows.to(self.data.device, self.data.dtype)
        ids = np.arange(self.size, self.size + n)
        self.size += n
        self.stored += n
        return ids

    def rows(self, ids) -> torch.Tensor:
        """``(k, ...)`` rows ``ids`` (entry ``ref`` values), on :attr:`device`."""
        ids = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64)
        if self.base == 0:
            return self.data[torch.as_tensor(ids, device=self.device)]
        lazy = ids < self.base
        assert self._roots is not None
        if lazy.all():
            return self._roots(ids).to(self.device, self.data.dtype)
        out = torch.empty((len(ids), *self.data.shape[1:]), dtype=self.data.dtype, device=self.device)
        if lazy.any():
            out[torch.as_tensor(np.flatnonzero(lazy), device=self.device)] = self._roots(ids[lazy]).to(
                self.device, self.data.dtype)
        rest = np.flatnonzero(~lazy)
        out[torch.as_tensor(rest, device=self.device)] = self.data[torch.as_tensor(ids[rest] - self.base,
                                                                                   device=self.device)]
        return out

    def stored_from(self, start: int) -> np.ndarray:
        """Rows ``start..`` as a CPU array (a checkpoint's new rows; ``start`` past the roots
        that are computed on demand).
        """
        if start < self.base:
            raise DeepFaultError("reference rows of the roots are computed, not stored; the checkpoint "
                                 "starts past them")
        return self.data[start - self.base : self.stored].detach().cpu().numpy()

    def view(self) -> torch.Tensor:
        """Every row (the roots' computed ones included) as one tensor."""
        return self.rows(np.arange(self.size))
