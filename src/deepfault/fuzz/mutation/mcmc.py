"""Choosing a mutation rule: DRFuzz's MCMC chain, or uniformly (spec section 4).

Per rule the chain keeps ``selected`` (calls), ``faithful`` (calls where at least one mutant
passed fidelity and changed) and ``gain`` (calls where some mutant had ``delta > 0``), and
scores it ``gain * faithful / selected**2`` (0 before its first use). To choose:

1. the first rule is uniform;
2. afterwards the rules are shuffled (a random tie-break) and sorted by score, best first;
   ``k1`` is the rank of the previous rule;
3. repeat: draw a rank ``k2`` uniformly, accept it with probability
   ``(1 - p) ** (k2 - k1)`` (always when ``k2 <= k1``), ``p = 1 / #rules``.

So, given the order, rank ``k2`` is chosen with probability proportional to
``min(1, (1 - p) ** (k2 - k1))`` (:func:`rank_probabilities`).

``delta = (1 - 1/3) * (p2_seed[y] - p2_mut[y]) + (1/3) * (p1_mut[y] - p2_mut[y])``
(:func:`gain_delta`): the mutant lowered M2's confidence in the label relative to its
parent, and M2 is less confident than M1.

Choosers are registered in :data:`CHOOSERS` (``mcmc``, ``uniform``); randomness comes from
the caller's :class:`numpy.random.Generator` only, and the chooser's own state is plain
arrays (:meth:`RuleChooser.state_dict`), so a campaign checkpoints and resumes it exactly.

Examples:
    >>> import numpy as np
    >>> chooser = MCMCChooser(["a", "b", "c"])
    >>> rng = np.random.default_rng(0)
    >>> chooser.choose(rng) in (0, 1, 2)
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from ...core.registry import Registry
from ...errors import DeepFaultError

__all__ = [
    "CHOOSERS",
    "GAIN_WEIGHT",
    "MCMCChooser",
    "RuleChooser",
    "UniformChooser",
    "gain_delta",
    "make_chooser",
    "mcmc_scores",
    "rank_probabilities",
]

#: ``k`` in DRFuzz's ``delta = (1 - k) * m2_drop + k * m1_m2_gap``.
GAIN_WEIGHT = 1.0 / 3.0

#: Every rule chooser, by name (``--chooser``).
CHOOSERS: Registry[type[RuleChooser]] = Registry("rule chooser")


def mcmc_scores(selected: np.ndarray, faithful: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """``gain * faithful / selected**2`` per rule, 0 for rules never selected."""
    selected = np.asarray(selected, dtype=np.float64)
    out = np.zeros_like(selected)
    used = selected > 0
    out[used] = np.asarray(gain, dtype=np.float64)[used] * np.asarray(faithful, dtype=np.float64)[used] / (
        selected[used] ** 2
    )
    return out


def rank_probabilities(k1: int, n: int) -> np.ndarray:
    """``(n,)`` probability of choosing each rank given the previous rule's rank ``k1``.

    The rejection loop accepts rank ``k2`` with ``a(k2) = min(1, (1 - 1/n) ** (k2 - k1))``
    and draws ranks uniformly, so rank ``k2`` ends up chosen with ``a(k2) / sum(a)``.
    """
    ranks = np.arange(n)
    accept = np.minimum(1.0, (1.0 - 1.0 / n) ** (ranks - k1).astype(np.float64))
    return accept / accept.sum()


def gain_delta(p2_parent_y: np.ndarray, p1_y: np.ndarray, p2_y: np.ndarray) -> np.ndarray:
    """DRFuzz's ``delta`` per mutant: ``(2/3) (p2_parent[y] - p2[y]) + (1/3) (p1[y] - p2[y])``."""
    return (1.0 - GAIN_WEIGHT) * (np.asarray(p2_parent_y) - p2_y) + GAIN_WEIGHT * (np.asarray(p1_y) - p2_y)


class RuleChooser(ABC):
    """Chooses rule indices into ``rules``; learns from :meth:`update`.

    Args:
        rules: The rule names the chooser picks from (their order is the index).
    """

    name = ""

    def __init__(self, rules: Sequence[str]):
        rules = list(rules)
        if not rules or len(set(rules)) != len(rules):
            raise DeepFaultError(f"rules must be a non-empty list of distinct names; got {rules!r}")
        self.rules = rules
        n = len(rules)
        self.selected = np.zeros(n, dtype=np.int64)
        self.faithful = np.zeros(n, dtype=np.int64)
        self.gain = np.zeros(n, dtype=np.int64)
        self.previous = -1

    @abstractmethod
    def choose(self, rng: np.random.Generator, allowed: np.ndarray | None = None) -> int:
        """The index of the next rule (one of ``allowed`` when given, a ``(n,)`` bool mask)."""

    def choose_many(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """``(count,)`` successive choices with the statistics held fixed (no ``allowed``
        mask): what ``count`` calls of :meth:`choose` draw, computed in one go where a
        chooser can (the draws differ from those calls, their distribution does not).
        """
        return np.array([self.choose(rng) for _ in range(count)], dtype=np.int64)

    def record(self, rules: np.ndarray, *, faithful: np.ndarray, gain: np.ndarray | None = None) -> None:
        """:meth:`update` for many calls at once (``rules``, ``faithful``, ``gain``: ``(k,)``)."""
        rules = np.asarray(rules, dtype=np.int64)
        np.add.at(self.selected, rules, 1)
        np.add.at(self.faithful, rules, np.asarray(faithful, dtype=np.int64))
        if gain is not None:
            np.add.at(self.gain, rules, np.asarray(gain, dtype=np.int64))

    def update(self, rule: int, *, faithful: bool, gain: bool) -> None:
        """Record one call of ``rule``: whether a mutant passed fidelity, whether it gained."""
        self.selected[rule] += 1
        self.faithful[rule] += int(bool(faithful))
        self.gain[rule] += int(bool(gain))

    def scores(self) -> np.ndarray:
        return mcmc_scores(self.selected, self.faithful, self.gain)

    def state_dict(self) -> dict[str, np.ndarray]:
        return {
            "selected": self.selected.copy(),
            "faithful": self.faithful.copy(),
            "gain": self.gain.copy(),
            "previous": np.array(self.previous, dtype=np.int64),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> RuleChooser:
        for key in ("selected", "faithful", "gain"):
            value = np.asarray(state[key], dtype=np.int64)
            if value.shape != (len(self.rules),):
                raise DeepFaultError(
                    f"chooser state {key!r} has shape {value.shape}; expected ({len(self.rules)},)"
                )
            setattr(self, key, value.copy())
        self.previous = int(state["previous"])
        return self

    def to_dict(self) -> dict:
        """Per-rule statistics, for results and reports."""
        scores = self.scores()
        return {
            rule: {"selected": int(self.selected[i]), "faithful": int(self.faithful[i]),
                   "gain": int(self.gain[i]), "score": float(scores[i])}
            for i, rule in enumerate(self.rules)
        }


def _uniform_allowed(rng: np.random.Generator, allowed: np.ndarray | None, n: int) -> int:
    if allowed is None:
        return int(rng.integers(n))
    choices = np.flatnonzero(allowed)
    if len(choices) == 0:
        raise DeepFaultError("no mutation rule is allowed for this input")
    return int(choices[rng.integers(len(choices))])


class MCMCChooser(RuleChooser):
    """DRFuzz's Metropolis-Hastings chain over the rules ranked by score (module docstring).

    With ``allowed``, disallowed ranks are never accepted (only DeepHunter's lineage rule
    restricts rules, and it chooses uniformly; this is for completeness).
    """

    name = "mcmc"

    def choose(self, rng: np.random.Generator, allowed: np.ndarray | None = None) -> int:
        n = len(self.rules)
        if self.previous < 0:
            rule = _uniform_allowed(rng, allowed, n)
        else:
            order = rng.permutation(n)  # the shuffle is the tie-break of the stable sort
            scores = self.scores()
            order = order[np.argsort(-scores[order], kind="stable")]
            k1 = int(np.flatnonzero(order == self.previous)[0])
            if allowed is not None and not np.asarray(allowed)[order].any():
                raise DeepFaultError("no mutation rule is allowed for this input")
            p = 1.0 / n
            while True:
                k2 = int(rng.integers(n))
                if allowed is not None and not allowed[order[k2]]:
                    continue
                if k2 <= k1 or rng.random() < (1.0 - p) ** (k2 - k1):
                    break
            rule = int(order[k2])
        self.previous = rule
        return rule


    def choose_many(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """The chain run ``count`` steps on fixed scores: each step's shuffle and ranking are
        drawn for all steps at once, and each step's rank from its exact distribution given
        the previous rule's rank (:func:`rank_probabilities`, what the rejection loop of
        :meth:`choose` ends in) by one uniform; only the walk itself is sequential.
        """
        n = len(self.rules)
        if count <= 0:
            return np.zeros(0, dtype=np.int64)
        scores = self.scores()
        perms = rng.permuted(np.broadcast_to(np.arange(n), (count, n)), axis=1)
        orders = np.take_along_axis(perms, np.argsort(-scores[perms], axis=1, kind="stable"), axis=1)
        rank_of = np.empty_like(orders)
        np.put_along_axis(rank_of, orders, np.broadcast_to(np.arange(n), (count, n)), axis=1)
        cdf = np.cumsum(np.stack([rank_probabilities(k1, n) for k1 in range(n)]), axis=1)
        cdf[:, -1] = 1.0
        u = rng.random(count)
        first = int(rng.integers(n))
        out = np.empty(count, dtype=np.int64)
        prev = self.previous
        for i in range(count):  # the walk: each step depends on the previous rule
            if prev < 0:
                prev = first
            else:
                k2 = int(np.searchsorted(cdf[rank_of[i, prev]], u[i], side="right"))
                prev = int(orders[i, min(k2, n - 1)])
            out[i] = prev
        self.previous = prev
        return out


class UniformChooser(RuleChooser):
    """Every (allowed) rule with the same probability: the ablation of the chain, and DeepHunter."""

    name = "uniform"

    def choose(self, rng: np.random.Generator, allowed: np.ndarray | None = None) -> int:
        rule = _uniform_allowed(rng, allowed, len(self.rules))
        self.previous = rule
        return rule


CHOOSERS.register("mcmc", MCMCChooser)
CHOOSERS.register("uniform", UniformChooser)


def make_chooser(name: str, rules: Sequence[str]) -> RuleChooser:
    """A fresh chooser ``name`` (:data:`CHOOSERS`) over ``rules``."""
    return CHOOSERS.get(name)(rules)
