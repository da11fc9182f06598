"""Keep rules: which candidate mutants join the queue (DRFuzz's diversity, DeepHunter's coverage)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ...core.batches import iterate_batches
from ...errors import DeepFaultError
from ..mutation.diversity import DiversityTable

__all__ = ["KMNC_SECTIONS", "CoverageKeep", "CoverageSettings", "DiversityKeep", "KeepInput", "KeepRule",
           "coverage_criterion", "occurrence_rank"]

#: DeepHunter's KMNC sections (``k``), the default of the ``kmnc`` criterion here.
KMNC_SECTIONS = 1000
#: Inputs per forward pass while the criterion takes in the seeds: sized from the memory
#: (:mod:`deepfault.core.memory`; at most 1,024, the fixed size it replaces).
_BATCH = "auto"


class CoverageSettings(Protocol):
    """The configuration's fields a coverage keep rule reads (:class:`~.config.CampaignConfig` has them)."""

    @property
    def criterion(self) -> str: ...

    @property
    def criterion_params(self) -> tuple[tuple[str, Any], ...]: ...

    @property
    def layers(self) -> tuple[str, ...] | str | None: ...

    @property
    def transform_name(self) -> str: ...


@dataclass(frozen=True)
class KeepInput:
    """The executed mutants of one step, in draw order (every array ``(n,)`` or ``(n, ...)``).

    Attributes:
        iteration: Index of each mutant's iteration within the step (non-decreasing).
        roots: Dense root index of each mutant.
        tendency: ``(n, C)`` ``p2 - p1``.
        y2: M2's predictions.
        candidate: Bool, the mutant is a candidate seed (both models right, not dropped).
        rf: Bool, the mutant is a regression fault.
        values: ``(n, M)`` M2's neuron values (coverage strategies only), else ``None``.
    """

    iteration: np.ndarray
    roots: np.ndarray
    tendency: np.ndarray
    y2: np.ndarray
    candidate: np.ndarray
    rf: np.ndarray
    values: torch.Tensor | None = None


class KeepRule(ABC):
    """Decides which candidate mutants join the queue, updating its own state as it goes.

    Iterations are applied in draw order, so a step of ``B`` iterations gives the same
    answer as ``B`` steps of one.
    """

    needs_values = False

    @abstractmethod
    def select(self, step: KeepInput) -> np.ndarray:
        """``(n,)`` bool: the mutants kept; updates the state."""

    def could_keep(self, step: KeepInput) -> np.ndarray:
        """``(n,)`` bool, no side effect: every mutant that :meth:`select` could keep when it is
        given any subset of these rows (in order) now or later in the step (default: every
        candidate). The lazy order of checks (:mod:`.lazy`) checks these for fidelity before
        :meth:`select` sees the ones that passed.
        """
        return np.asarray(step.candidate, dtype=bool).copy()

    @abstractmethod
    def state_dict(self) -> dict[str, np.ndarray]:
        """The state as arrays (checkpoints)."""

    @abstractmethod
    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`."""


def occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """``(n,)`` how many earlier entries have the same key: ``[4, 7, 4, 4] -> [0, 0, 1, 2]``."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.r_[0, np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1]
    run = np.arange(len(keys)) - np.repeat(starts, np.diff(np.r_[starts, len(keys)]))
    out = np.empty(len(keys), dtype=np.int64)
    out[order] = run
    return out


class DiversityKeep(KeepRule):
    """DRFuzz's keep rule on a :class:`~..mutation.diversity.DiversityTable` (spec section 7).

    Within one iteration every mutant is judged against the table as it was before the
    iteration; then the kept candidates and the regression faults raise the table.
    Iterations of different roots touch different rows, so they are applied together in
    *waves* (an iteration's wave is how many earlier iterations of the step share its
    root): the result equals applying them one by one.
    """

    def __init__(self, table: DiversityTable):
        self.table = table

    def select(self, step: KeepInput) -> np.ndarray:
        kept = np.zeros(len(step.roots), dtype=bool)
        if len(kept) == 0:
            return kept
        first = np.r_[True, step.iteration[1:] != step.iteration[:-1]]
        it_rows = np.flatnonzero(first)
        it_wave = occurrence_rank(step.roots[it_rows])
        wave = np.repeat(it_wave, np.diff(np.r_[it_rows, len(kept)]))
        for w in range(int(wave.max()) + 1):
            rows = np.flatnonzero(wave == w)
            cand = rows[step.candidate[rows]]
            if len(cand):
                kept[cand] = self.table.keep(step.roots[cand], step.tendency[cand], step.y2[cand])
            raise_rows = rows[kept[rows] | step.rf[rows]]
            self.table.update(step.roots[raise_rows], step.tendency[raise_rows])
        return kept

    def could_keep(self, step: KeepInput) -> np.ndarray:
        """The candidates that raise the table as it is now: the table only rises, so a
        candidate that does not raise it now is never kept later in the step.
        """
        out = np.zeros(len(step.roots), dtype=bool)
        cand = np.flatnonzero(step.candidate)
        if len(cand):
            out[cand] = self.table.keep(step.roots[cand], step.tendency[cand], step.y2[cand])
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.table.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.table.load_state_dict(state)


class CoverageKeep(KeepRule):
    """DeepHunter's keep rule: a candidate joins the queue when it covers an item of the
    criterion (on M2's neuron values) that nothing covered before, mutants taken one by one
    in draw order (as in DeepHunter, each kept mutant updates the coverage before the next
    is judged).

    Args:
        criterion: A :class:`~deepfault.coverage.criteria.Criterion` already updated with the
            seeds.
    """

    needs_values = True

    def __init__(self, criterion):
        self.criterion = criterion

    def select(self, step: KeepInput) -> np.ndarray:
        kept = np.zeros(len(step.roots), dtype=bool)
        cand = np.flatnonzero(step.candidate)
        if len(cand) == 0:
            return kept
        if step.values is None:
            raise DeepFaultError("the coverage keep rule needs M2's neuron values")
        values = step.values[torch.as_tensor(cand, device=step.values.device)]
        # A mutant that adds nothing now adds nothing after more updates: judge only the others,
        # one at a time (few: coverage saturates quickly).
        maybe = np.flatnonzero(self.criterion.would_increase(values).numpy())
        for j in maybe:
            row = values[j : j + 1]
            if bool(self.criterion.would_increase(row)[0]):
                self.criterion.update(row)
                kept[cand[j]] = True
        return kept

    def state_dict(self) -> dict[str, np.ndarray]:
        out = {}
        for key, value in self.criterion.state_dict().items():
            if not isinstance(value, torch.Tensor):
                raise DeepFaultError(
                    f"coverage criterion {self.criterion.name!r} keeps non-tensor state ({key!r}); "
                    "it cannot guide a checkpointed campaign; choose nc, kmnc, nbc, snac or tknc"
                )
            out[key] = value.numpy()
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.criterion.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in state.items()})


def coverage_criterion(m2: nn.Module, seeds: torch.Tensor, config: CoverageSettings, *, profile=None,
                       train_inputs=None, update: bool = True):
    """The configured coverage criterion of ``m2``, updated with ``seeds`` (DeepHunter's keep rule).

    Args:
        m2: The model whose coverage guides the campaign.
        seeds: The queued seeds' images.
        config: The campaign's configuration (``criterion``, ``criterion_params``, ``layers``,
            ``transform_name``).
        profile: M2's coverage profile (KMNC/NBC/SNAC), else computed from ``train_inputs``.
        train_inputs: Training inputs for the profile.
        update: Take the seeds in (``False``: only set the criterion up on their layout).

    Raises:
        DeepFaultError: A criterion that needs a profile, without one and without training inputs.
    """
    from ...coverage import ProfileConfig, compute_profile, criterion_params, make_criterion

    params = dict(config.criterion_params)
    if config.criterion == "kmnc":
        params.setdefault("sections", KMNC_SECTIONS)
    layers = list(config.layers) if isinstance(config.layers, tuple) else config.layers
    if "profile" in criterion_params(config.criterion) and profile is not None:
        params["profile"] = profile
    elif "profile" in criterion_params(config.criterion):
        if train_inputs is None or len(train_inputs) == 0:
            raise DeepFaultError(
                f"coverage criterion {config.criterion!r} needs M2's profile on training inputs, and the "
                "data set has no training split; choose criterion 'nc' or 'tknc'"
            )
        params["profile"] = compute_profile(m2, train_inputs, ProfileConfig(layers=layers,
                                                                          transform=config.transform_name))
    criterion = None
    batches = iterate_batches(m2, seeds, layers=layers, transform=config.transform_name, batch_size=_BATCH)
    for batch in batches:
        if criterion is None:
            if batch.layout is None:
                raise DeepFaultError("the coverage criterion needs M2's neuron values; none were captured")
            criterion = make_criterion(config.criterion, batch.layout, **params)
        if update:
            criterion.update(batch.values)
    if criterion is None:
        raise DeepFaultError("the coverage criterion needs at least one seed image")
    # the batch loop runs under inference mode: copy the state into ordinary tensors that
    # the loop (under no_grad) may update in place
    criterion.load_state_dict(criterion.state_dict())
    return criterion
