"""DeepHunter's validity (spec section 10), as a fidelity check against reference rows."""

from __future__ import annotations

import torch

from .checks import Fidelity

__all__ = ["VALIDITY_L0", "VALIDITY_LINF", "ValidityCheck"]

#: DeepHunter's validity: fewer than this share of the elements changed (any amount) ...
VALIDITY_L0 = 0.02
#: ... or every element changed by less than this share of the pixel range.
VALIDITY_LINF = 0.2


class ValidityCheck(Fidelity):
    """DeepHunter's validity (spec section 10) as a fidelity check against reference rows.

    A mutant passes when it differs from its reference in fewer than 2% of its elements (by
    any amount), or by less than 20% of the pixel range in every element. The reference is
    the lineage's root, or the root under the lineage's one affine change (DeepHunter's
    ``I0' = t(I0)``); mutants made by an affine rule pass without the check, as in
    DeepHunter (the campaign does that).
    """

    name = "validity"

    def reference(self, roots: torch.Tensor) -> torch.Tensor:
        return roots.detach().to(self.device, torch.float32).clone()

    def scores(self, mutants: torch.Tensor, ref_rows: torch.Tensor) -> torch.Tensor:
        diff = (mutants.to(self.device) - ref_rows.to(self.device)).abs().flatten(1)
        l0 = (diff > 0).sum(dim=1)
        linf = diff.amax(dim=1) if diff.shape[1] else torch.zeros(len(diff), device=diff.device)
        lo, hi = self.bounds
        valid = (l0 < VALIDITY_L0 * diff.shape[1]) | (linf < VALIDITY_LINF * (hi - lo))
        return valid.float()

    def limits(self, ref_rows: torch.Tensor) -> torch.Tensor:
        return torch.ones(len(ref_rows), device=self.device)

    def to_dict(self) -> dict:
        return {"name": self.name, "bounds": list(self.bounds), "l0": VALIDITY_L0, "linf": VALIDITY_LINF}

