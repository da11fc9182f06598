"""Checks scored from M1's activations (:class:`~..fidelity.checks.TraceFidelity`: the surprise
checks), applied between the two models' forward passes.

The image checks (SSIM, the discriminator, validity) judge a mutant before either model runs.
A trace check needs M1's activation traces, which exist only once M1 has run, so a step that
has one runs M1 on every mutant that passed the image checks, with the check's layers
captured (the only forward pass of M1 the mutant gets, the one the oracle needs anyway),
applies the strategy's own check and then the shared filter, in that order as before, and
runs M2 on the mutants that passed both. The verdicts are those the same checks would give
before execution; only the order of the work changes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ...core.capture import capture
from ...errors import DeepFaultError
from ..fidelity.checks import Fidelity, FidelityCheck, TraceFidelity

__all__ = ["Deferred", "LateChecks"]


class Deferred(Fidelity):
    """Stands in for a trace check where the image checks run (before the models): passes
    every mutant, and the step applies ``check`` once M1 has run (a strategy that retries
    until its check passes therefore cannot retry on a trace check: DRFuzz does not retry).
    """

    def __init__(self, check: TraceFidelity):
        super().__init__(bounds=check.bounds, device=check.device)
        self.inner = check
        self.name = check.name

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return self.inner.reference(roots)

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(mutants), device=self.device)

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.zeros(len(ref_rows), device=self.device)

    def passes(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(mutants), dtype=torch.bool, device=mutants.device)

    def to_dict(self) -> dict:
        return self.inner.to_dict()


class LateChecks:
    """The trace checks of a campaign (its own check and its shared filter, either may be ``None``)
    and the one capture of M1 they share.

    Raises:
        DeepFaultError: Two checks that want their traces under different transforms.
    """

    def __init__(self, own: TraceFidelity | None, shared: TraceFidelity | None):
        self.own, self.shared = own, shared
        checks = [c for c in (own, shared) if c is not None]
        if not checks:
            raise DeepFaultError("LateChecks needs at least one trace check")
        transforms = sorted({c.transform for c in checks})
        if len(transforms) > 1:
            raise DeepFaultError(f"the own check and the shared filter read M1's activations under "
                                 f"different transforms ({' and '.join(transforms)}); fit both states "
                                 "with one transform")
        self.transform = transforms[0]
        self.layers = list(dict.fromkeys(name for c in checks for name in c.layers))
        self._columns: dict[int, torch.Tensor] = {}

    @contextlib.contextmanager
    def capturing(self, m1: nn.Module) -> Iterator[object]:
        """Hooks on M1's execution copy for the checks' layers while a campaign runs."""
        with capture(m1, self.layers, transform=self.transform) as recorder:
            yield recorder

    def check(self, which: TraceFidelity, ats: torch.Tensor, classes, layout) -> FidelityCheck:
        """``which``'s outcome on its columns of the captured traces ``ats`` ``(B, M)``."""
        key = id(which)
        if key not in self._columns:
            if layout is None:
                raise DeepFaultError("no activation traces of M1 were captured")
            parts = [torch.arange(layout.layer(n).offset, layout.layer(n).offset + layout.layer(n).size)
                     for n in which.layers]
            self._columns[key] = torch.cat(parts)
        cols = self._columns[key]
        whole = len(cols) == ats.shape[1] and bool((cols == torch.arange(len(cols))).all())
        return which.check_traces(ats if whole else ats[:, cols.to(ats.device)], classes)

    def to_dict(self) -> dict:
        """``{"own": ..., "shared": ...}``: each trace check's settings, those present."""
        pairs = (("own", self.own), ("shared", self.shared))
        return {role: c.to_dict() for role, c in pairs if c is not None}
