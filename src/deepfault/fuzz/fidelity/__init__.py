"""Fidelity checks: is a mutant still a realistic input? (``spec/drfuzz.md``, section 6).

- :mod:`.checks`: the checks by name (``FIDELITIES``: ``ssim``, ``ssim-compat``,
  ``discriminator``, ``none``) and the batched SSIM <- add a check here.
- :mod:`.validity`: DeepHunter's validity rule, as a check.
- :mod:`.gan`: the DCGAN whose discriminator is the default check, trained on first use.
"""

from .checks import (
    FIDELITIES,
    SSIM_THRESHOLD,
    DiscriminatorFidelity,
    Fidelity,
    FidelityCheck,
    NoFidelity,
    SSIMCompatFidelity,
    SSIMFidelity,
    list_fidelities,
    make_fidelity,
    register_fidelity,
    ssim,
)
from .validity import ValidityCheck

__all__ = [
    "FIDELITIES",
    "SSIM_THRESHOLD",
    "DiscriminatorFidelity",
    "Fidelity",
    "FidelityCheck",
    "NoFidelity",
    "SSIMCompatFidelity",
    "SSIMFidelity",
    "ValidityCheck",
    "list_fidelities",
    "make_fidelity",
    "register_fidelity",
    "ssim",
]
